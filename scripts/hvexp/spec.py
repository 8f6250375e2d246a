"""The experiment spec file (docs/experiments.md, "The spec file").

An INI-like text: [experiment], one or more [disk] / [disk NAME], one or more
[variant NAME]; `key = value` lines; `#` or `;` comments (after a value only behind a
blank); `key = <<TAG` starts a here-document that ends at a line holding only TAG.
`expect` may be given several times in a section; every other key once.
"""

import re
from dataclasses import dataclass, field
from typing import overload

EXPERIMENT_KEYS = frozenset("""
    description kernel modules kdir storvsc-source vcpus mem repetitions time-scale timeout log-avg-msec
    fio vm-perf storvsc patch ko params append tunables perf baseline expect device
    scsi-debug trace virtio-scsi host-load timeline coverage snapshot""".split())
VARIANT_KEYS = frozenset("""
    description kernel modules kdir storvsc-source vcpus mem patch ko params append tunables perf vm-perf
    published published-ratio expect device scsi-debug virtio-scsi host-load storvsc timeline coverage""".split())
REPEATABLE = frozenset(["expect"])

_SECTION = re.compile(r"^\[([a-z]+)(?:\s+([A-Za-z0-9_][A-Za-z0-9_.-]*))?\]\s*(?:[#;].*)?$")
_KEYVAL = re.compile(r"^([A-Za-z0-9_.-]+)\s*=\s*(.*)$")
_HEREDOC = re.compile(r"^<<([A-Za-z_][A-Za-z0-9_]*)$")
_COMMENT = re.compile(r"\s+#.*$")


class SpecError(Exception):
    """A mistake in a spec, with the file and line it is on."""

    def __init__(self, path: str, line: int, message: str) -> None:
        where = f"{path}:{line}" if line else str(path)
        super().__init__(f"{where}: {message}")
        self.path, self.line, self.message = path, line, message


@dataclass
class Section:
    kind: str                      # experiment, disk, variant
    name: str
    line: int
    values: dict[str, str] = field(default_factory=dict)     # key -> value
    lines: dict[str, int] = field(default_factory=dict)      # key -> line number
    expects: list[tuple[str, int]] = field(default_factory=list)    # (text, line)

    @overload
    def get(self, key: str) -> str | None: ...
    @overload
    def get(self, key: str, default: str) -> str: ...
    @overload
    def get(self, key: str, default: str | None) -> str | None: ...

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.values.get(key, default)


@dataclass
class Spec:
    path: str
    experiment: Section
    disks: list[Section]
    variants: dict[str, Section]   # name -> Section, in file order

    @overload
    def value(self, variant: str, key: str) -> str | None: ...
    @overload
    def value(self, variant: str, key: str, default: str) -> str: ...
    @overload
    def value(self, variant: str, key: str, default: str | None) -> str | None: ...

    def value(self, variant: str, key: str, default: str | None = None) -> str | None:
        """The variant's value, else the experiment's, else default."""
        sec = self.variants[variant]
        if key in sec.values:
            return sec.values[key]
        return self.experiment.values.get(key, default)

    def where(self, variant: str, key: str) -> int:
        """The line of the value value() returns (0: not in the file), for error messages."""
        sec = self.variants[variant]
        if key in sec.lines:
            return sec.lines[key]
        return self.experiment.lines.get(key, 0)

    def error(self, line: int, message: str) -> SpecError:
        return SpecError(self.path, line, message)


def parse(text: str, path: str = "<spec>") -> Spec:
    experiment: Section | None = None
    disks: list[Section] = []
    variants: dict[str, Section] = {}
    section: Section | None = None
    heredoc: tuple[str, str, int, list[str]] | None = None      # (tag, key, start line, collected lines)
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.rstrip("\r")
        if heredoc:
            assert section is not None          # a here-document starts after a key of a section
            tag, key, start, body = heredoc
            if line.rstrip() == tag:
                _store(path, section, key, "".join(body), start)
                heredoc = None
            else:
                body.append(line + "\n")
            continue
        s = line.strip()
        if not s or s[0] in "#;":
            continue
        m = _SECTION.match(s)
        if m:
            kind, name = m.group(1), m.group(2)
            if kind == "experiment":
                if name:
                    raise SpecError(path, n, "[experiment] takes no name")
                if experiment:
                    raise SpecError(path, n, "[experiment] given twice")
                experiment = section = Section("experiment", "", n)
            elif kind == "disk":
                section = Section("disk", name or str(len(disks)), n)
                disks.append(section)
            elif kind == "variant":
                if not name:
                    raise SpecError(path, n, "a variant needs a name: [variant NAME]")
                if name in variants:
                    raise SpecError(path, n, f"variant '{name}' defined twice")
                section = variants[name] = Section("variant", name, n)
            else:
                raise SpecError(path, n, f"unknown section [{kind}] (experiment, disk, variant NAME)")
            continue
        if section is None:
            raise SpecError(path, n, f"'{s}' before any [section]")
        m = _KEYVAL.match(s)
        if not m:
            raise SpecError(path, n, f"expected 'key = value', got '{s}'")
        key, value = m.group(1), _COMMENT.sub("", m.group(2))
        known = {"experiment": EXPERIMENT_KEYS, "variant": VARIANT_KEYS}.get(section.kind)
        if known is not None and key not in known:
            where = "[experiment]" if section.kind == "experiment" else "a variant"
            raise SpecError(path, n, f"unknown key '{key}' in {where} (known: {' '.join(sorted(known))})")
        if key == "expect" and section.kind == "disk":
            raise SpecError(path, n, "expect belongs in [experiment] or a [variant], not in [disk]")
        h = _HEREDOC.match(value)
        if h:
            heredoc = (h.group(1), key, n, [])
            continue
        _store(path, section, key, value, n)
    if heredoc:
        raise SpecError(path, heredoc[2], f"'{heredoc[1]} = <<{heredoc[0]}' is never closed by a line '{heredoc[0]}'")
    if experiment is None:
        experiment = Section("experiment", "", 0)
    if not variants:
        raise SpecError(path, 0, "no [variant NAME] section")
    if "fio" not in experiment.values:
        raise SpecError(path, experiment.line, "[experiment] needs the fio job: fio = <<END ... END")
    return Spec(path, experiment, disks, variants)


def _store(path: str, section: Section, key: str, value: str, n: int) -> None:
    if key in REPEATABLE:
        section.expects.append((value, n))
        return
    if key in section.values:
        raise SpecError(path, n, f"'{key}' given twice in this section (first on line {section.lines[key]})")
    section.values[key] = value
    section.lines[key] = n


def load(path: str) -> Spec:
    try:
        with open(path, encoding="utf-8-sig") as f:
            text = f.read()
    except OSError as e:
        raise SpecError(path, 0, f"cannot read the spec: {e.strerror}") from None
    return parse(text, path)
