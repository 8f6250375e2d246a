"""What the host reads from a guest, line by line: the console (the init's markers, the
command's output) and the kernel's log records (the kmsg channel), and the kernel reports
that end a boot at once (Oops, BUG, UBSAN, WARNING, panic, hung task). What a guest prints
is text here: terminal escapes and control characters are taken out, lines have a bounded
length.

Pure logic on text: the threads that read QEMU's chardevs are in machine.py. Tested with
canned input in tests/machine.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

READY = "HVSTOR-GUEST-READY"
_STATUS = re.compile(r"HVSTOR-EXIT-STATUS=([0-9]+)")
# What a guest may put on its console that a host terminal would act on (./hvstor boot
# prints the console's lines): escape sequences whole (CSI, then OSC, DCS, SOS, PM and APC up
# to their terminator, then the short ones), in their 7-bit and C1 forms, then every other
# control character but the tab.
_ESCAPES = re.compile(r"(?:\x1b\[|\x9b)[\x30-\x3f]*[\x20-\x2f]*[\x40-\x7e]"
                      r"|(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)"
                      r"|\x1b[\x20-\x2f]*[\x30-\x7e]")
_CONTROLS = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]")
# The console shows kernel messages as "[   12.345678] text".
_CONSOLE_KERNEL = re.compile(r"^\[\s*[0-9]+\.[0-9]+\] (.*)$")
# The longest line kept as one: a guest that prints more without a newline gets lines of
# this length (kernel messages are at most 1 KiB).
MAX_LINE = 1 << 16

# Kernel reports that end a boot: the first line of each. Soft lockups and RCU stalls are
# not among them: under TCG a vCPU thread that the host does not schedule for a while
# causes both, so they are kept in the kernel log and the report, and the boot goes on.
# An oops starts with x86's die() header, "STR: ERR [#N]" on 6.1 ("divide error: 0000 [#1]",
# "general protection fault, ...: 0000 [#1]"), "Oops: STR: ERR [#N]" on 6.12, unless
# "kernel BUG at" came first; UBSAN's reports (a kernel built with it) start "UBSAN: ".
FATAL: Sequence[Tuple[str, re.Pattern[str]]] = (
    ("panic", re.compile(r"^Kernel panic - not syncing")),
    ("oops", re.compile(r"^Oops[: ]|^general protection fault|^kernel BUG at |^[a-z][^:]*: [0-9a-f]{4} \[#[0-9]+\]")),
    ("bug", re.compile(r"^BUG: ")),
    ("ubsan", re.compile(r"^UBSAN: ")),
    ("warning", re.compile(r"^WARNING: ")),
    ("hung task", re.compile(r"^INFO: task .* blocked for more than [0-9]+ seconds")),
)
_NOTED = re.compile(r"BUG: soft lockup|rcu_.*(stall|detected stalls)")
# The end of a report: after it (or after REPORT_LINES lines) the boot is ended. KASAN's
# reports (and UBSAN's before 6.5) end with a line of '=' instead.
_REPORT_END = re.compile(r"^---\[ end (trace|Kernel panic)|^={20,}$")
REPORT_LINES = 60


def clean(line: str) -> str:
    """A console line without terminal escapes and control characters (tabs stay)."""
    return _CONTROLS.sub("", _ESCAPES.sub("", line))


class LineSplitter:
    """Bytes from a guest's channel into lines: UTF-8 (anything else replaced), split at
    newlines, and cut into lines of max_line characters when a guest prints more without
    one, so that a line never grows without bound."""

    def __init__(self, max_line: int = MAX_LINE) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = ""
        self._max = max_line

    def feed(self, data: bytes) -> List[str]:
        """The lines that `data` completes."""
        text = self._decoder.decode(data)
        if "\n" not in text and len(self._pending) + len(text) <= self._max:
            self._pending += text
            return []
        *lines, self._pending = (self._pending + text).split("\n")
        out: List[str] = []
        for line in lines:
            out += self._cut(line)
        while len(self._pending) > self._max:
            out.append(self._pending[:self._max])
            self._pending = self._pending[self._max:]
        return out

    def end(self) -> List[str]:
        """What is left when the channel ends: the last line, without its newline."""
        rest = self._pending + self._decoder.decode(b"", final=True)
        self._pending = ""
        return self._cut(rest) if rest else []

    def _cut(self, line: str) -> List[str]:
        return [line[i:i + self._max] for i in range(0, len(line), self._max)] or [""]


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
_KMSG_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def kmsg_text(escaped: str) -> str:
    """A record's text from /dev/kmsg's form, where every control byte, backslash and byte
    past 0x7e is \\xNN: the bytes decoded as UTF-8, tabs and newlines as they are, every
    other control character left as the text \\xNN (as dmesg shows it), so that none
    reaches a terminal."""
    raw, pos = bytearray(), 0
    for e in _KMSG_ESCAPE.finditer(escaped):
        raw += escaped[pos:e.start()].encode("utf-8")
        raw.append(int(e.group(1), 16))
        pos = e.end()
    raw += escaped[pos:].encode("utf-8")
    return _KMSG_CONTROLS.sub(lambda c: f"\\x{ord(c.group()):02x}", raw.decode("utf-8", "replace"))


def parse_kmsg(line: str) -> Optional[KmsgRecord]:
    """A record from a line of /dev/kmsg ("prio,seq,usec,flags;text"); None for the
    continuation lines (" KEY=value") and anything else."""
    m = _KMSG.match(line)
    if not m:
        return None
    # A message with a newline inside comes as one record: its first line speaks for it.
    return KmsgRecord(int(m.group(1)) % 8, int(m.group(2)), int(m.group(3)), kmsg_text(m.group(4)))


# The init's markers around the command (level 7: the kernel never prints them). While the
# command runs the guest's console carries its output alone, and the host shows the kernel
# messages that the console would have: levels 3 up to the console's level (the kernel still
# prints 0-2 there itself).
_COMMAND_STARTS = re.compile(r"^hvstor-init: command starts \(console level ([0-9]+)\)$")
_COMMAND_ENDED = "hvstor-init: command ended"
# The guest's reader names the kernel's boot each time it starts.
_BOOT = "hvstor-kmsg-boot "


class KmsgLog:
    """The guest kernel's log from the kmsg channel: records in order, each once (the
    guest's reader starts again from the oldest record when the log overran it), and
    which of them the console would have shown while the command ran.

    A loadvm takes the guest back to the saved moment: its kernel numbers the records it
    writes from there again. A record whose number was seen with another time or text is
    such a record, and kept: the log holds each course the guest took, in the order the
    host saw them (rewinds counts the turns back)."""

    def __init__(self, tolerate: Sequence[re.Pattern[str]] = ()) -> None:
        self.records: List[KmsgRecord] = []
        self.report: Optional[KernelReport] = None
        self.noted: List[str] = []         # reports that were tolerated, or lockups
        self.lost = 0                      # records the guest's reader never saw
        self.rewinds = 0                   # times the log went back to an earlier record (loadvm)
        self._last = -1
        self._seen: Dict[int, Tuple[int, str]] = {}   # the record kept for each number: time, text
        self._tolerate = list(tolerate)
        self._console_level: Optional[int] = None   # while the command runs
        self._boot: Optional[str] = None   # the kernel's boot id, from the guest's reader
        self.kernels = 1                   # kernels the log came from (kexec, kdump start more)

    def feed(self, line: str) -> Optional[KmsgRecord]:
        """Takes one line of the channel; returns the record when it is a new one."""
        if line.startswith(_BOOT):
            boot = line[len(_BOOT):].strip()
            if self._boot is not None and boot != self._boot:
                self._last = -1         # a kernel started by kexec counts from 0 again
                self._seen.clear()
                self.kernels += 1
                self._console_level = None   # its console prints its own boot
            self._boot = boot
            return None
        r = parse_kmsg(line)
        if r is None:
            return None
        kept = self._seen.get(r.seq)
        if kept == (r.usec, r.text):
            return None                 # read again: the same record
        if r.seq <= self._last:
            # Back to a number seen (a loadvm), or one never seen (the guest went back to
            # a stretch its reader had lost): a record of a new course either way.
            self.rewinds += 1
        elif self._last >= 0 and r.seq > self._last + 1:
            self.lost += r.seq - self._last - 1
        self._last = r.seq
        self._seen[r.seq] = (r.usec, r.text)
        self.records.append(r)
        self._watch(r.text)
        return r

    def for_console(self, r: KmsgRecord) -> bool:
        """Whether the host shows record r (a new one, from feed) where the console would
        have: while the command runs, levels 3 up to the console's level."""
        if r.level == 7:
            m = _COMMAND_STARTS.match(r.text)
            if m:
                self._console_level = int(m.group(1))
                return False
            if r.text == _COMMAND_ENDED:
                self._console_level = None
                return False
        return self._console_level is not None and 3 <= r.level < self._console_level

    @property
    def command_open(self) -> bool:
        """Whether the log has the command's start marker and not yet its end: at the end
        of a boot whose command finished, the log ends before the command's does."""
        return self._console_level is not None

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
