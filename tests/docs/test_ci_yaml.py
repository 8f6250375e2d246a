"""The CI recipes of the documentation: every ```yaml block of docs/ci.md and docs/fuzzing.md
parses (PyYAML, Debian's python3-yaml), has the shape of the CI system it is for, and every
hv-storvsc command line in it names a command and options that ./hvstor has.

A command line is found in any string of a parsed block (a step's `run`, a job's `script`
lines): a word that is `hvstor` or ends in `/hvstor` (./hvstor, hv-storvsc/hvstor,
/opt/hv-storvsc/hvstor), then the command, then its arguments up to the end of the shell
command. The command must be one `./hvstor help` lists, and each option one that
`./hvstor COMMAND --help` prints. For the commands whose options argparse reads (run, report,
test, demo, bench), the whole line is given to `./hvstor COMMAND ... --help` with the CI
system's values in place (a matrix's first value for `${{ matrix.shard }}` or `$SHARD`), so a
value argparse refuses (`--shard 1-2`) fails too. `--help` builds and installs nothing; the
checks a command makes after argparse (`report --out` without `--merge`) are not reached.
A block that is not valid YAML fails test_block_parses with its lines in the doc.

GitHub Actions blocks (a `jobs` mapping): each job has `runs-on` and `steps`, each step one of
`run` and `uses`, each action a version after its `@`, each `needs` a job of the block.
GitLab CI blocks (`stages`, or jobs with `script`): each job has a script (its own or through
`extends`), a stage that `stages` lists, and `needs` and `extends` that name jobs of the block.
"""

from __future__ import annotations

import functools
import os
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any, Iterator, NamedTuple

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
HVSTOR = ROOT / "hvstor"
DOCS = {"ci.md": 3, "fuzzing.md": 2}        # file -> how many YAML blocks it has at least
# Commands whose --help is argparse's: the line with --help appended checks its values too.
ARGPARSE = {"run", "report", "test", "demo", "bench"}
# Commands that take no option (`./hvstor setup --help` would install packages).
NO_OPTIONS = {"setup", "help"}
SHELL_OPS = {";", "&&", "||", "|", "&", ">", ">>", "<", ")", "(", "{", "}", "2>", "2>&1"}
GITLAB_RESERVED = {"stages", "variables", "default", "include", "workflow", "image", "services",
                   "cache", "before_script", "after_script"}


class Block(NamedTuple):
    file: str
    line: int
    text: str

    def where(self) -> str:
        return f"docs/{self.file}:{self.line}"


class Command(NamedTuple):
    block: Block
    line: str                   # the shell line, as the block has it (expressions replaced)
    name: str                   # run, report, ...
    args: list[str]


def yaml_blocks(name: str) -> list[Block]:
    """The ```yaml fenced blocks of docs/NAME, with the line of their first YAML line."""
    out: list[Block] = []
    lines = (ROOT / "docs" / name).read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        if lines[i].strip() == "```yaml":
            end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == "```"), None)
            assert end is not None, f"docs/{name}:{i + 1}: a ```yaml block that never ends"
            out.append(Block(name, i + 2, "\n".join(lines[i + 1:end]) + "\n"))
            i = end
        i += 1
    return out


ALL_BLOCKS = [b for name in DOCS for b in yaml_blocks(name)]


def load(block: Block) -> dict[Any, Any]:
    """The block parsed; a YAML error fails with its line in the doc."""
    try:
        doc = yaml.safe_load(block.text)
    except yaml.YAMLError as e:
        # The marks count lines from 0 in the block; the doc's lines are the block's + its first.
        marks = [getattr(e, k, None) for k in ("context_mark", "problem_mark")]
        lines = sorted({block.line + m.line for m in marks if m is not None}) or [block.line]
        what = "; ".join(str(x) for x in (getattr(e, "context", None), getattr(e, "problem", None)) if x) or str(e)
        raise AssertionError(f"docs/{block.file}:{','.join(map(str, lines))}: not valid YAML: {what}") from None
    assert isinstance(doc, dict), f"{block.where()}: the block is not a YAML mapping"
    return doc


def strings(node: Any) -> Iterator[str]:
    """Every string value in a parsed YAML document."""
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for v in node.values():
            yield from strings(v)
    elif isinstance(node, list):
        for v in node:
            yield from strings(v)


def matrix_values(doc: dict[Any, Any]) -> dict[str, str]:
    """Each matrix variable of the block and its first value: GitHub's strategy.matrix
    (matrix.NAME) and GitLab's parallel.matrix ($NAME)."""
    out: dict[str, str] = {}
    jobs = doc["jobs"] if isinstance(doc.get("jobs"), dict) else doc
    for job in jobs.values():
        if not isinstance(job, dict):
            continue
        cells = [job.get("strategy", {}).get("matrix", {})]
        parallel = job.get("parallel")
        if isinstance(parallel, dict):
            cells += list(parallel.get("matrix", []))
        for cell in cells:
            for k, v in cell.items():
                first = v[0] if isinstance(v, list) and v else v
                out.setdefault(str(k), str(first))
    return out


def substitute(text: str, values: dict[str, str]) -> str:
    """GitHub expressions and shell variables replaced by a value: a matrix variable's
    first value, else X (${SHARD%/*} and the like: the variable's value)."""
    def expr(m: re.Match[str]) -> str:
        inner = m.group(1).strip()
        return values.get(inner[len("matrix."):], "X") if inner.startswith("matrix.") else "X"

    def var(m: re.Match[str]) -> str:
        return values.get(m.group(1) or m.group(2), m.group(0))

    text = re.sub(r"\$\{\{(.*?)\}\}", expr, text)
    return re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)[^}]*\}|\$([A-Za-z_][A-Za-z0-9_]*)", var, text)


def tokens(line: str) -> list[str]:
    lex = shlex.shlex(line, posix=True, punctuation_chars=";&|<>()")
    lex.whitespace_split = True
    lex.commenters = "#"
    try:
        return list(lex)
    except ValueError:          # an unbalanced quote: a fragment of a longer construct
        return line.split()


def commands_in(block: Block) -> list[Command]:
    """The hvstor command lines of a block (none when it does not parse: test_block_parses
    says where)."""
    try:
        doc = load(block)
    except AssertionError:
        return []
    values = matrix_values(doc)
    out: list[Command] = []
    for s in strings(doc):
        for line in s.replace("\\\n", " ").splitlines():
            toks = tokens(substitute(line, values))
            for i, t in enumerate(toks):
                if (t == "hvstor" or t.endswith("/hvstor")) and i + 1 < len(toks):
                    args = []
                    for a in toks[i + 2:]:
                        if a in SHELL_OPS:
                            break
                        args.append(a)
                    out.append(Command(block, line.strip(), toks[i + 1], args))
    return out


ALL_COMMANDS = [c for b in ALL_BLOCKS for c in commands_in(b)]


def hvstor(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    return subprocess.run([str(HVSTOR), *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          env=env, timeout=120, check=False)


@functools.lru_cache(maxsize=None)
def known_commands() -> frozenset[str]:
    """The commands `./hvstor help` lists (two blanks, then the name at the start of a line)."""
    r = hvstor("help")
    assert r.returncode == 0, r.stdout
    return frozenset(re.findall(r"^  ([a-z][a-z-]*)\b", r.stdout, re.M)) | {"help"}


@functools.lru_cache(maxsize=None)
def known_options(command: str) -> frozenset[str]:
    """The options `./hvstor COMMAND --help` defines: those that start a line of its option
    list (indented by a few blanks: a wrapped line of help text is indented further and may
    mention another command's option), and those of its usage line in brackets."""
    if command in NO_OPTIONS:
        return frozenset()
    r = hvstor(command, "--help")
    assert r.returncode in (0, 2) and r.stdout.strip(), f"./hvstor {command} --help: {r.stdout}"
    listed = re.findall(r"^ {1,6}(?:-[A-Za-z], )?(--?[A-Za-z][\w-]*)", r.stdout, re.M)
    usage = re.search(r"^usage:.*?(?:\n\n|\Z)", r.stdout, re.M | re.S)
    in_usage = re.findall(r"[\[|]\s*(--?[A-Za-z][\w-]*)", usage.group(0)) if usage else []
    return frozenset(listed + in_usage)


def cmd_id(c: Command) -> str:
    return f"{c.block.where()}:{c.name}"


def block_id(b: Block) -> str:
    return b.where()


def test_each_doc_has_its_recipes() -> None:
    for name, least in DOCS.items():
        n = len([b for b in ALL_BLOCKS if b.file == name])
        assert n >= least, f"docs/{name} has {n} ```yaml block(s), fewer than its {least} recipes"
    assert ALL_COMMANDS, "no hvstor command in any YAML block"


@pytest.mark.parametrize("block", ALL_BLOCKS, ids=block_id)
def test_block_parses(block: Block) -> None:
    load(block)


def github_problems(doc: dict[Any, Any]) -> list[str]:
    out: list[str] = []
    if True not in doc and "on" not in doc:     # YAML 1.1 reads the key `on` as true
        out.append("no `on`")
    jobs = doc["jobs"]
    for name, job in jobs.items():
        for key in ("runs-on", "steps"):
            if key not in job:
                out.append(f"job {name}: no `{key}`")
        needs = job.get("needs", [])
        for need in [needs] if isinstance(needs, str) else needs:
            if need not in jobs:
                out.append(f"job {name}: needs {need}, which is no job here")
        for n, step in enumerate(job.get("steps", []), 1):
            if ("run" in step) == ("uses" in step):
                out.append(f"job {name}, step {n}: wants one of `run` and `uses`")
            if "uses" in step and not re.search(r"@\S+$", step["uses"]):
                out.append(f"job {name}, step {n}: {step['uses']} has no version after @")
    return out


def gitlab_problems(doc: dict[Any, Any]) -> list[str]:
    out: list[str] = []
    stages = doc.get("stages")
    jobs = {k: v for k, v in doc.items() if k not in GITLAB_RESERVED and isinstance(v, dict)}

    def inherited(job: dict[str, Any], key: str) -> Any:
        while key not in job and isinstance(job.get("extends"), str) and job["extends"] in jobs:
            job = jobs[job["extends"]]
        return job.get(key)

    for name, job in jobs.items():
        if isinstance(job.get("extends"), str) and job["extends"] not in jobs:
            out.append(f"job {name}: extends {job['extends']}, which is not in the block")
        if name.startswith("."):
            continue
        if inherited(job, "script") is None:
            out.append(f"job {name}: no script")
        stage = inherited(job, "stage")
        if stages is not None and stage is not None and stage not in stages:
            out.append(f"job {name}: stage {stage} is not in stages {stages}")
        for need in job.get("needs", []):
            need_name = need if isinstance(need, str) else need.get("job")
            if need_name not in jobs:
                out.append(f"job {name}: needs {need_name}, which is no job here")
    return out


@pytest.mark.parametrize("block", ALL_BLOCKS, ids=block_id)
def test_block_is_a_workflow_or_pipeline(block: Block) -> None:
    doc = load(block)
    if "jobs" in doc:
        problems = github_problems(doc)
    elif "stages" in doc or any(isinstance(v, dict) and "script" in v for v in doc.values()):
        problems = gitlab_problems(doc)
    elif set(doc) <= {True, "on"}:
        problems = []       # a fragment: the `on` part of a workflow
    else:
        problems = [f"neither a GitHub workflow nor a GitLab pipeline: keys {sorted(map(str, doc))}"]
    assert not problems, f"{block.where()}: " + "; ".join(problems)


@pytest.mark.parametrize("cmd", ALL_COMMANDS, ids=cmd_id)
def test_command_exists(cmd: Command) -> None:
    assert cmd.name in known_commands(), \
        f"{cmd.block.where()}: `{cmd.line}`: ./hvstor has no command {cmd.name} ({sorted(known_commands())})"


@pytest.mark.parametrize("cmd", ALL_COMMANDS, ids=cmd_id)
def test_command_options_exist(cmd: Command) -> None:
    opts = known_options(cmd.name) if cmd.name in known_commands() else frozenset()
    for a in cmd.args:
        if a == "--":           # what follows goes to meson test, QEMU, ...
            break
        if a.startswith("-") and a != "-":
            assert a.split("=", 1)[0] in opts, \
                f"{cmd.block.where()}: `{cmd.line}`: ./hvstor {cmd.name} has no option {a} ({sorted(opts)})"


@pytest.mark.parametrize("cmd", [c for c in ALL_COMMANDS if c.name in ARGPARSE], ids=cmd_id)
def test_command_line_parses(cmd: Command) -> None:
    args = cmd.args[:cmd.args.index("--")] if "--" in cmd.args else cmd.args
    r = hvstor(cmd.name, *args, "--help")
    assert r.returncode == 0, f"{cmd.block.where()}: `{cmd.line}`: ./hvstor refuses it:\n{r.stdout}"
