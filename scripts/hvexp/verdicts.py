"""Guest verdicts: expect lines about what the guest did, judged in every run (not on a
median): errors fio saw, I/O errors and SCSI timeouts the guest counted, patterns in the
guest kernel's log, a disk present or gone at the end, which functions of hv_storvsc ran
(docs/experiments.md, "Guest verdicts").

    expect = fio.errors = 0              fio's errors (every job's), in each run
    expect = fio.errors > 0
    expect = fio.verify = ok             no job's verify failed (or: failed)
    expect = guest.io_errors = 0         I/O errors the guest kernel logged
    expect = scsi.timeouts = 0           commands the SCSI midlayer timed out (iotmo_cnt)
    expect = scsi.errors = 0             commands that completed with an error (ioerr_cnt)
    expect = log ~ REGEX                 the guest kernel's log has a line matching REGEX
    expect = log !~ REGEX                ... has none
    expect = DISK.present = no           a disk (disk0, or its [disk NAME]) gone at the end
    expect = coverage.functions >= 90%   of hv_storvsc's functions, ran in the variant's runs
    expect = coverage.all >= 90%         ... in all the experiment's runs together
    expect = coverage.FUNCTION = ran     a function ran in the variant's runs (or: not-run)
    expect = coverage.lines >= 60%       of storvsc_drv.c's lines, ran (coverage = lines: gcov)
    expect = coverage.change >= 80%      of the lines the variant's patch adds or changes
    expect = coverage.all-lines >= 60%   coverage.lines in all the experiment's runs together
    expect = coverage.all-change >= 80%  coverage.change ... (the variants share one patch)
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from .spec import Spec

_OPS = {">=": lambda a, b: a >= b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b,
        "<": lambda a, b: a < b, "=": lambda a, b: a == b}
_COUNT = re.compile(r"^(fio\.errors|guest\.io_errors|scsi\.timeouts|scsi\.errors)\s*(>=|<=|>|<|=)\s*([0-9]+)$")
_FRACTION = re.compile(r"^coverage\.(functions|all|lines|change|all-lines|all-change)\s*(>=|<=|>|<|=)\s*([0-9]+(?:\.[0-9]+)?)%$")
_WORD = re.compile(r"^(fio\.verify|[A-Za-z0-9_.-]+\.present|coverage\.[A-Za-z_][A-Za-z0-9_]*)\s*=\s*(\S+)$")
_LOG = re.compile(r"^log\s*(!?~)\s*(.+)$")
# A line that starts with a verdict's own key is one, even when the rest does not read.
_KEY = re.compile(r"^(fio\.errors|fio\.verify|guest\.io_errors|scsi\.timeouts|scsi\.errors|coverage\.functions|"
                  r"coverage\.all|coverage\.lines|coverage\.change|coverage\.all-lines|coverage\.all-change)(\s|[<>=]|$)")
LINE_KEYS = ("coverage.lines", "coverage.change", "coverage.all-lines", "coverage.all-change")
ALL_KEYS = ("coverage.all", "coverage.all-lines", "coverage.all-change")   # judged once, over every run
# What the guest kernel logs for a failed I/O.
IO_ERROR = re.compile(r"I/O error, dev |critical (medium|target|nexus|space allocation|protection) error|"
                      r"Buffer I/O error|blk_update_request: .*error")
WORDS = {"fio.verify": ("ok", "failed"), "present": ("yes", "no"), "coverage": ("ran", "not-run")}
EILSEQ = 84   # fio's error for data that failed verification


class VerdictError(Exception):
    pass


@dataclass
class Verdict:
    text: str
    key: str                 # fio.errors, log, disk0.present, coverage.functions, ...
    op: str                  # >= <= > < =, ~ or !~
    value: str
    line: int = 0
    scope: str = ""
    ratio: bool = False      # never: verdicts compare no variants (report.py reads it)

    def describe_bound(self) -> str:
        return f"{self.op} {self.value}"


def is_verdict(text: str) -> bool:
    s = " ".join(text.split())
    return bool(_COUNT.match(s) or _FRACTION.match(s) or _WORD.match(s) or _LOG.match(s) or _KEY.match(s))


def parse(text: str, line: int = 0, scope: str = "") -> Verdict:
    s = " ".join(text.split())
    for rx in (_COUNT, _FRACTION):
        m = rx.match(s)
        if m:
            key = m.group(1) if rx is _COUNT else f"coverage.{m.group(1)}"
            return Verdict(text.strip(), key, m.group(2), m.group(3), line, scope)
    m = _LOG.match(text.strip())        # the pattern as written, blanks and all
    if m:
        try:
            re.compile(m.group(2))
        except re.error as e:
            raise VerdictError(f"'{m.group(2)}' is no regular expression: {e}") from None
        return Verdict(text.strip(), "log", m.group(1), m.group(2), line, scope)
    m = _WORD.match(s)
    if not m:
        raise VerdictError(f"cannot read '{text.strip()}' as a guest verdict: want fio.errors, guest.io_errors, "
                           "scsi.timeouts or scsi.errors OP COUNT; coverage.functions, .all, .lines or .change OP PERCENT%; "
                           "fio.verify = ok|failed; DISK.present = yes|no; coverage.FUNCTION = ran|not-run; "
                           "log ~ REGEX or log !~ REGEX (OP >= <= > < =)")
    key, value = m.group(1), m.group(2)
    if key in ("coverage.functions", "coverage.all") + LINE_KEYS:
        raise VerdictError(f"{key} is a share of the {'lines' if key in LINE_KEYS else 'functions'}: "
                           f"{key} >= 90%, not = {value}")
    kind = "present" if key.endswith(".present") else "coverage" if key.startswith("coverage.") else key
    if value not in WORDS[kind]:
        raise VerdictError(f"{key} is {' or '.join(WORDS[kind])}, not '{value}'")
    return Verdict(text.strip(), key, "=", value, line, scope)


def check(sp: Spec, disks: List[str], coverage: Dict[str, bool], lines: Optional[Dict[str, bool]] = None) -> None:
    """Every verdict line of the spec before the first boot: it reads, names a disk the
    spec has, asks for coverage only where it is counted. disks: the names a disk may go
    by; coverage: per variant, whether its runs count functions; lines: ... and lines
    (coverage = lines). SpecError at the line."""
    sections = [("", sp.experiment)] + list(sp.variants.items())
    for scope, sec in sections:
        for text, line in sec.expects:
            if not is_verdict(text):
                continue
            try:
                v = parse(text, line, scope)
            except VerdictError as e:
                raise sp.error(line, str(e)) from None
            if v.key.endswith(".present") and v.key[:-len(".present")] not in disks:
                raise sp.error(line, f"expect {v.text}: the spec has no disk '{v.key[:-8]}' "
                                     f"(its disks: {', '.join(disks)})")
            if v.key.startswith("coverage."):
                # A variant left out of the run (--variants) is not judged: not checked.
                scopes = [scope] if scope in coverage else [] if scope else list(coverage)
                counted = (lines or {}) if v.key in LINE_KEYS else coverage
                off = [s for s in scopes if not counted.get(s)]
                if off:
                    raise sp.error(line, f"expect {v.text}: coverage is not counted for {', '.join(off)} "
                                         f"(coverage = {'lines' if v.key in LINE_KEYS else 'functions'})")


def disk_luns(sp: Spec) -> Dict[str, int]:
    """The names a disk goes by (diskN, and its [disk NAME]) to its LUN (its index)."""
    out: Dict[str, int] = {}
    for i, d in enumerate(sp.disks):
        out[f"disk{i}"] = i
        if not d.name.isdigit():
            out[d.name] = i
    return out


# --- what a run shows ------------------------------------------------------------------
@dataclass
class RunFacts:
    """What a run's files say for the verdicts."""
    rep: int
    values: Dict[str, str] = field(default_factory=dict)   # the guest's verdicts file
    fio_errors: int = 0
    fio_verify_failed: int = 0
    kernel_log: List[str] = field(default_factory=list)
    coverage: Optional[Dict[str, int]] = None
    lines: Optional["Lines"] = None

    def io_error_lines(self) -> List[str]:
        return [ln for ln in self.kernel_log if IO_ERROR.search(ln)]

    def counter(self, name: str) -> int:
        """A SCSI counter summed over the disks (iotmo, ioerr)."""
        return sum(_int(v) for k, v in self.values.items() if re.fullmatch(rf"lun\.[0-9]+\.{name}", k))


def _int(text: str) -> int:
    try:
        return int(text, 0)
    except ValueError:
        return 0


def run_facts(run_dir: str, rep: int) -> RunFacts:
    f = RunFacts(rep)
    res = os.path.join(run_dir, "results")
    f.values = _key_values(os.path.join(res, "verdicts"))
    try:
        with open(os.path.join(res, "fio.json"), encoding="utf-8", errors="replace") as fh:
            jobs = json.loads(_json_part(fh.read())).get("jobs", [])
    except (OSError, ValueError):
        jobs = []
    for j in jobs:
        err = int(j.get("error", 0) or 0)
        f.fio_errors += int(j.get("total_err", 0) or 0) or (1 if err else 0)
        f.fio_verify_failed += 1 if err == EILSEQ else 0
    try:
        with open(os.path.join(run_dir, "dmesg.txt"), encoding="utf-8", errors="replace") as fh:
            f.kernel_log = fh.read().splitlines()
    except OSError:
        pass
    try:
        with open(os.path.join(run_dir, "coverage.json"), encoding="utf-8") as fh:
            f.coverage = {str(k): int(v) for k, v in json.load(fh).items()}
    except (OSError, ValueError):
        pass
    f.lines = Lines.load(os.path.join(run_dir, "lines.json"))
    return f


def _json_part(text: str) -> str:
    """fio's JSON without anything printed before it."""
    i = text.find("{")
    return text[i:] if i >= 0 else "{}"


def _key_values(path: str) -> Dict[str, str]:
    out: Dict[str, str] = {}
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                k, eq, v = line.rstrip("\n").partition("=")
                if eq:
                    out[k] = v
    except OSError:
        pass
    return out


# --- judging ---------------------------------------------------------------------------
@dataclass
class VerdictOutcome:
    expectation: Verdict
    variant: str
    passed: bool
    figure: Optional[float]
    detail: str
    where: str = ""

    def line(self) -> str:
        word = "PASS" if self.passed else "FAIL"
        where = f" ({self.where})" if self.where else ""
        return f"{word} {self.variant}: expect {self.expectation.text}{where}: {self.detail}"


def evaluate(v: Verdict, variant: str, runs: List[RunFacts], luns: Dict[str, int],
             where: str = "") -> VerdictOutcome:
    """One verdict for one variant over its runs (luns: disk name -> LUN)."""
    if not runs:
        return VerdictOutcome(v, variant, False, None, "no run to judge", where)
    if v.key in LINE_KEYS:
        return _lines_outcome(v, variant, runs, where)
    if v.key.startswith("coverage."):
        return _coverage_outcome(v, variant, runs, where)
    bad: List[str] = []
    seen: List[str] = []
    for r in runs:
        ok, shown = _one_run(v, r, luns)
        seen.append(shown)
        if not ok:
            bad.append(f"repetition {r.rep}: {shown}")
    if bad:
        return VerdictOutcome(v, variant, False, None, "; ".join(bad), where)
    return VerdictOutcome(v, variant, True, None, f"held in each of {len(runs)} run(s) ({'; '.join(seen)})", where)


def _one_run(v: Verdict, r: RunFacts, luns: Dict[str, int]) -> Tuple[bool, str]:
    """Whether one run meets the verdict, and what it showed."""
    if v.key == "log":
        hits = [ln for ln in r.kernel_log if re.search(v.value, ln)]
        found = f"{len(hits)} line(s)" + (f", first: {hits[0]}" if hits else "")
        return (bool(hits) if v.op == "~" else not hits), found
    if v.key.endswith(".present"):
        lun = luns[v.key[:-len(".present")]]
        got = r.values.get(f"lun.{lun}.present", "no")
        return got == v.value, f"present: {got}"
    if v.key == "fio.verify":
        got = "failed" if r.fio_verify_failed else "ok"
        return got == v.value, f"verify {got}"
    n = {"fio.errors": r.fio_errors, "guest.io_errors": len(r.io_error_lines()),
         "scsi.timeouts": r.counter("iotmo"), "scsi.errors": r.counter("ioerr")}[v.key]
    shown = f"{n}"
    if v.key == "guest.io_errors" and n:
        shown += f" (first: {r.io_error_lines()[0]})"
    return _OPS[v.op](n, int(v.value)), shown


def coverage_union(runs: List[RunFacts]) -> Tuple[List[str], List[str]]:
    """(functions that ran in any of the runs, functions that did not) over runs that
    counted; functions the kernel would not probe are in neither."""
    ran: Dict[str, bool] = {}
    for r in runs:
        for fn, hits in (r.coverage or {}).items():
            if hits >= 0:
                ran[fn] = ran.get(fn, False) or hits > 0
    return sorted(f for f, x in ran.items() if x), sorted(f for f, x in ran.items() if not x)


def _coverage_outcome(v: Verdict, variant: str, runs: List[RunFacts], where: str) -> VerdictOutcome:
    ran, missed = coverage_union(runs)
    if not ran and not missed:
        return VerdictOutcome(v, variant, False, None, "no coverage was counted", where)
    if v.key in ("coverage.functions", "coverage.all"):
        pct = 100.0 * len(ran) / (len(ran) + len(missed))
        ok = _OPS[v.op](pct, float(v.value))
        return VerdictOutcome(v, variant, ok, pct, f"{len(ran)} of {len(ran) + len(missed)} functions ran "
                              f"({pct:.0f}%); not run: {', '.join(missed) or 'none'}", where)
    fn = v.key[len("coverage."):]
    if fn not in ran and fn not in missed:
        if any((r.coverage or {}).get(fn) == -2 for r in runs):
            why = f"no count of {fn} came back, and the kernel's log names no refusal of its probe"
        elif any(fn in (r.coverage or {}) for r in runs):
            why = f"the kernel would not probe {fn} (a notrace function, such as an __exit one)"
        else:
            why = f"{fn} is not a function the module's symbol table has"
        return VerdictOutcome(v, variant, False, None, why, where)
    got = "ran" if fn in ran else "not-run"
    return VerdictOutcome(v, variant, got == v.value, None, f"{fn} {got}", where)


# --- line coverage -------------------------------------------------------------------------
@dataclass
class Lines:
    """Line coverage of one source file (gcov): runs per executable line, and the lines the
    variant's patch added or changed, with their text (lines.json of a run)."""
    file: str
    counts: Dict[int, int]
    changed: Dict[int, str]

    @staticmethod
    def load(path: str) -> Optional["Lines"]:
        try:
            with open(path, encoding="utf-8") as fh:
                d = json.load(fh)
            return Lines(str(d["file"]), {int(k): int(x) for k, x in d["counts"].items()},
                         {int(k): str(x) for k, x in d.get("changed", {}).items()})
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None

    def as_json(self) -> Dict[str, object]:
        return {"file": self.file, "counts": {str(k): x for k, x in sorted(self.counts.items())},
                "changed": {str(k): x for k, x in sorted(self.changed.items())}}

    def ran(self) -> List[int]:
        return sorted(n for n, c in self.counts.items() if c > 0)

    def change(self) -> Tuple[List[int], List[int]]:
        """(changed lines that ran, changed lines that did not): executable ones only (a
        blank, a brace or a comment has no count)."""
        lines = sorted(n for n in self.changed if n in self.counts)
        return [n for n in lines if self.counts[n] > 0], [n for n in lines if self.counts[n] == 0]


def lines_union(runs: List[RunFacts]) -> Optional[Lines]:
    """The runs' line counts added up (None when none counted lines); their change when
    every run has the same one (one patch), else none."""
    out: Optional[Lines] = None
    for r in runs:
        if r.lines is None:
            continue
        if out is None:
            out = Lines(r.lines.file, {}, dict(r.lines.changed))
        elif out.changed != r.lines.changed:
            out.changed = {}
        for n, c in r.lines.counts.items():
            out.counts[n] = out.counts.get(n, 0) + c
    return out


def describe_change(lines: Lines, limit: int = 8) -> str:
    """"your change: 14 of 17 lines executed; not run: 812 `x = y;`, ..." ("" without one)."""
    ran, missed = lines.change()
    if not lines.changed:
        return ""
    if not ran and not missed:
        return f"your change: none of its {len(lines.changed)} line(s) is executable code"
    shown = ", ".join(f"{n} `{lines.changed[n].strip()}`" for n in missed[:limit])
    more = f" and {len(missed) - limit} more" if len(missed) > limit else ""
    return (f"your change: {len(ran)} of {len(ran) + len(missed)} lines executed"
            + (f"; not run: {shown}{more}" if missed else ""))


def _lines_outcome(v: Verdict, variant: str, runs: List[RunFacts], where: str) -> VerdictOutcome:
    u = lines_union(runs)
    if u is None:
        return VerdictOutcome(v, variant, False, None, "no line coverage came back (gcov)", where)
    if v.key in ("coverage.lines", "coverage.all-lines"):
        got, n = len(u.ran()), len(u.counts)
        what = f"{got} of {n} executable lines of {u.file} ran"
    else:
        ran, missed = u.change()
        got, n = len(ran), len(ran) + len(missed)
        if not n:
            why = describe_change(u) if u.changed else (
                "the variants do not share one change of " + u.file if v.key == "coverage.all-change"
                else "the variant changes no line of " + u.file)
            return VerdictOutcome(v, variant, False, None, why, where)
        what = describe_change(u)
    pct = 100.0 * got / n
    return VerdictOutcome(v, variant, _OPS[v.op](pct, float(v.value)), pct, f"{what} ({pct:.0f}%)", where)
