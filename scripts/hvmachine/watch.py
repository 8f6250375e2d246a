"""What the host reads from a guest, line by line: the console (the init's markers, the
command's output) and the kernel's log records (the kmsg channel), and the kernel reports
that end a boot at once (Oops, BUG, WARNING, panic, hung task).

Pure logic on text: the threads that read QEMU's chardevs are in machine.py. Tested with
canned input in tests/machine.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import List, Optional, Sequence, Tuple

READY = "HVSTOR-GUEST-READY"
_STATUS = re.compile(r"HVSTOR-EXIT-STATUS=([0-9]+)")
_ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[A-Za-z]")
# The console shows kernel messages as "[   12.345678] text".
_CONSOLE_KERNEL = re.compile(r"^\[\s*[0-9]+\.[0-9]+\] (.*)$")

# Kernel reports that end a boot: the first line of each. Soft lockups and RCU stalls are
# not among them: under TCG a vCPU thread that the host does not schedule for a while
# causes both, so they are kept in the kernel log and the report, and the boot goes on.
FATAL: Sequence[Tuple[str, re.Pattern[str]]] = (
    ("panic", re.compile(r"^Kernel panic - not syncing")),
    ("oops", re.compile(r"^Oops[: ]|^general protection fault|^kernel BUG at ")),
    ("bug", re.compile(r"^BUG: ")),
    ("warning", re.compile(r"^WARNING: ")),
    ("hung task", re.compile(r"^INFO: task .* blocked for more than [0-9]+ seconds")),
)
_NOTED = re.compile(r"BUG: soft lockup|rcu_.*(stall|detected stalls)")
# The end of a report: after it (or after REPORT_LINES lines) the boot is ended.
_REPORT_END = re.compile(r"^---\[ end (trace|Kernel panic)")
REPORT_LINES = 60


def clean(line: str) -> str:
    """A console line without its carriage returns and terminal escapes."""
    return _ESCAPES.sub("", line.replace("\r", ""))


def fatal_kind(text: str, tolerate: Sequence[re.Pattern[str]] = ()) -> Optional[str]:
    """The kind of kernel report `text` (a kernel message's text) starts, or None."""
    for kind, pattern in FATAL:
        if pattern.search(text):
            if any(t.search(text) for t in tolerate):
                return None
            return kind
    return None


@dataclass
class KernelReport:
    """A kernel report the guest logged: its kind and its lines so far."""
    kind: str
    lines: List[str] = field(default_factory=list)
    complete: bool = False

    def add(self, text: str) -> None:
        if self.complete:
            return
        self.lines.append(text)
        if _REPORT_END.search(text) or len(self.lines) >= REPORT_LINES:
            self.complete = True


@dataclass
class KmsgRecord:
    """One record of the kernel's log as /dev/kmsg gives it."""
    level: int
    seq: int
    usec: int
    text: str

    def line(self) -> str:
        return f"[{self.usec // 1000000:5d}.{self.usec % 1000000:06d}] {self.text}"


_KMSG = re.compile(r"^([0-9]+),([0-9]+),([0-9]+),[^;]*;(.*)$")
_KMSG_ESCAPE = re.compile(r"\\x([0-9a-fA-F]{2})")


def parse_kmsg(line: str) -> Optional[KmsgRecord]:
    """A record from a line of /dev/kmsg ("prio,seq,usec,flags;text"); None for the
    continuation lines (" KEY=value") and anything else."""
    m = _KMSG.match(line)
    if not m:
        return None
    text = _KMSG_ESCAPE.sub(lambda e: chr(int(e.group(1), 16)), m.group(4))
    # A message with a newline inside comes as one record: its first line speaks for it.
    return KmsgRecord(int(m.group(1)) % 8, int(m.group(2)), int(m.group(3)), text)


class KmsgLog:
    """The guest kernel's log from the kmsg channel: records in order, each once (the
    guest's reader starts again from the oldest record when the log overran it)."""

    def __init__(self, tolerate: Sequence[re.Pattern[str]] = ()) -> None:
        self.records: List[KmsgRecord] = []
        self.report: Optional[KernelReport] = None
        self.noted: List[str] = []         # reports that were tolerated, or lockups
        self.lost = 0                      # records the guest's reader never saw
        self._last = -1
        self._tolerate = list(tolerate)

    def feed(self, line: str) -> Optional[KmsgRecord]:
        """Takes one line of the channel; returns the record when it is a new one."""
        r = parse_kmsg(line)
        if r is None or r.seq <= self._last:
            return None
        if self._last >= 0 and r.seq > self._last + 1:
            self.lost += r.seq - self._last - 1
        self._last = r.seq
        self.records.append(r)
        self._watch(r.text)
        return r

    def _watch(self, text: str) -> None:
        if self.report is not None:
            self.report.add(text)
            return
        kind = fatal_kind(text, self._tolerate)
        if kind is not None:
            self.report = KernelReport(kind)
            self.report.add(text)
        elif fatal_kind(text) is not None or _NOTED.search(text):
            self.noted.append(text)

    def text(self) -> str:
        """The log as dmesg prints it."""
        return "".join(r.line() + "\n" for r in self.records)


class Console:
    """The guest's console, line by line: where the guest is (booting, running its
    command, done), the command's output and status, and a kernel panic or oops that the
    console shows while the kmsg channel cannot (before the init, or a guest too stuck to
    run its reader)."""

    def __init__(self, tolerate: Sequence[re.Pattern[str]] = ()) -> None:
        self.lines: List[str] = []
        self.output: List[str] = []        # the command's lines
        self.ready = False
        self.status: Optional[int] = None
        self.report: Optional[KernelReport] = None
        self._tolerate = list(tolerate)

    def feed(self, raw: str) -> Optional[str]:
        """Takes one console line; returns it when it is a line of the command's output."""
        line = clean(raw)
        self.lines.append(line)
        self._watch(line)
        if not self.ready:
            if READY in line:
                self.ready = True
            return None
        if self.status is not None:
            return None
        m = _STATUS.search(line)
        if m:
            # The status may share its line with output before it (no newline yet).
            self.status = int(m.group(1))
            before = line[:m.start()]
            if before:
                self.output.append(before)
                return before
            return None
        self.output.append(line)
        return line

    def _watch(self, line: str) -> None:
        m = _CONSOLE_KERNEL.match(line)
        text = m.group(1) if m else line
        if self.report is not None:
            if m:
                self.report.add(text)
            return
        if not m and not text.startswith("Kernel panic"):
            return
        kind = fatal_kind(text, self._tolerate)
        if kind is not None:
            self.report = KernelReport(kind)
            self.report.add(text)
