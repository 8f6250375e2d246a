"""What the machine layer reads from a guest, on canned text (no QEMU): kernel reports in the
formats the guest kernels (Debian 6.1 and 6.12) print them, kmsg records, and the bytes a
guest puts on its console or in its kernel log that must not reach a host terminal as
they are."""

from __future__ import annotations

from typing import List

import pytest

from hvmachine.watch import Console, KmsgLog, LineSplitter, fatal_kind, parse_kmsg


@pytest.mark.parametrize("text,kind", [
    # x86's die() header: 6.1 prints "STR: ERR [#N]", 6.12 "Oops: STR: ERR [#N]".
    ("divide error: 0000 [#1] PREEMPT SMP NOPTI", "oops"),
    ("invalid opcode: 0000 [#1] PREEMPT SMP NOPTI", "oops"),
    ("stack segment: 0000 [#1] PREEMPT SMP NOPTI", "oops"),
    ("double fault: 0000 [#1] PREEMPT SMP NOPTI", "oops"),
    ("alignment check: 0000 [#1] SMP", "oops"),
    ("general protection fault, probably for non-canonical address 0xdead000000000122: 0000 [#1] "
     "PREEMPT SMP NOPTI", "oops"),
    ("Oops: divide error: 0000 [#1] PREEMPT SMP NOPTI", "oops"),
    ("Oops: 0002 [#1] PREEMPT SMP NOPTI", "oops"),
    ("kernel BUG at drivers/scsi/storvsc_drv.c:1180!", "oops"),
    ("BUG: kernel NULL pointer dereference, address: 0000000000000008", "bug"),
    ("BUG: KASAN: slab-use-after-free in storvsc_on_channel_callback+0x1/0x2 [hv_storvsc]", "bug"),
    ("BUG: KFENCE: out-of-bounds read in storvsc_queuecommand+0x1/0x2 [hv_storvsc]", "bug"),
    ("UBSAN: array-index-out-of-bounds in drivers/scsi/storvsc_drv.c:1234:17", "ubsan"),
    ("UBSAN: shift-out-of-bounds in drivers/scsi/storvsc_drv.c:99:5", "ubsan"),
    ("WARNING: CPU: 1 PID: 42 at drivers/scsi/storvsc_drv.c:1200 storvsc_on_io_completion+0x1/0x2",
     "warning"),
    ("INFO: task kworker/u4:1:55 blocked for more than 122 seconds.", "hung task"),
    ("Kernel panic - not syncing: Fatal exception", "panic"),
    # No reports: soft lockups and RCU stalls are noted, the others are no report at all.
    ("watchdog: BUG: soft lockup - CPU#1 stuck for 23s! [fio:99]", None),
    ("rcu: INFO: rcu_preempt self-detected stall on CPU", None),
    ("RETBleed: WARNING: CPU does not support IBPB.", None),
    ("sd 0:0:0:0: [sda] 2097152 512-byte logical blocks: (1.07 GB/1.00 GiB)", None),
])
def test_kernel_report_formats(text: str, kind: str) -> None:
    assert fatal_kind(text) == kind


def test_sanitizer_report_ends_at_its_closing_line() -> None:
    log = KmsgLog()
    for n, text in enumerate(["=" * 80, "UBSAN: array-index-out-of-bounds in drivers/scsi/storvsc_drv.c:1:1",
                              "index 5 is out of range for type 'u8 [4]'", "CPU: 0 PID: 1 Comm: sh",
                              "Call Trace:", " <TASK>", " </TASK>", "=" * 80, "next message"]):
        log.feed(f"3,{n},{n},-;{text}")
    assert log.report is not None and log.report.kind == "ubsan" and log.report.complete
    assert log.report.lines[-1] == "=" * 80 and "next message" not in log.report.lines


def test_a_kernel_started_by_kexec_is_kept_after_the_first() -> None:
    """The guest's reader names the boot each time it starts: the same boot again (a restart
    after the log overran it) sends records already kept, a new one (kexec, kdump) numbers
    its records from 0 again, and they were dropped as seen before."""
    log = KmsgLog()
    shown = []
    for line in ["hvstor-kmsg-boot aaaa", "6,0,0,-;Linux version 1", "6,1,5,-;first kernel",
                 "", "hvstor-kmsg-boot aaaa", "6,0,0,-;Linux version 1", "6,1,5,-;first kernel",
                 "7,2,8,-;hvstor-init: command starts (console level 7)", "6,3,9,-;still the first",
                 "6,4,10,-;cut off by the kex", "", "hvstor-kmsg-boot bbbb", "6,0,0,-;Linux version 1",
                 "6,1,7,-;second kernel"]:
        r = log.feed(line)
        if r is not None and log.for_console(r):
            shown.append(r.text)
    assert [r.text for r in log.records] == ["Linux version 1", "first kernel",
                                             "hvstor-init: command starts (console level 7)", "still the first",
                                             "cut off by the kex", "Linux version 1", "second kernel"]
    assert log.kernels == 2 and log.lost == 0
    # The next kernel's console prints its own boot: nothing of it is shown twice.
    assert shown == ["still the first", "cut off by the kex"]


def test_a_loaded_state_numbers_records_again_and_they_are_kept() -> None:
    """After a loadvm the guest's kernel numbers its records from the saved moment on again,
    and its reader sends what it had not yet read at the save: records read twice are kept
    once, the new course's records are kept though their numbers were seen."""
    log = KmsgLog()
    for line in ["hvstor-kmsg-boot aaaa", "6,0,0,-;Linux version 1", "6,1,5,-;saved here",
                 "6,2,9,-;after the save", "6,3,11,-;still the first course",
                 "6,1,5,-;saved here", "6,2,30,-;after the load", "6,3,31,-;the second course",
                 "6,3,31,-;the second course", "6,4,32,-;on"]:
        log.feed(line)
    assert [r.text for r in log.records] == ["Linux version 1", "saved here", "after the save",
                                             "still the first course", "after the load", "the second course", "on"]
    assert log.rewinds == 1 and log.lost == 0 and log.kernels == 1


def test_a_loaded_state_may_go_back_into_records_the_reader_lost() -> None:
    """Records the reader lost to an overrun were never seen: a loadvm to a moment among
    them brings new records of those numbers, kept; what follows and was seen is not kept
    twice."""
    log = KmsgLog()
    for line in ["6,0,0,-;a", "6,1,1,-;b", "6,4,4,-;e", "6,5,5,-;f",
                 "6,2,20,-;new c", "6,3,21,-;new d", "6,4,4,-;e", "6,4,22,-;new e"]:
        log.feed(line)
    assert [r.text for r in log.records] == ["a", "b", "e", "f", "new c", "new d", "new e"]
    assert log.lost == 2 and log.rewinds == 1


def test_kmsg_text_is_decoded_and_its_control_bytes_stay_escaped() -> None:
    """/dev/kmsg escapes control bytes, backslashes and bytes past 0x7e as \\xNN. UTF-8
    comes back whole; tabs and newlines come back; every other control byte (an escape
    sequence a guest wrote to /dev/kmsg) stays as the text \\xNN, as dmesg shows it."""
    r = parse_kmsg(r"4,5,100,-;caf\xc3\xa9 a\x09b c\x0ad \x1b]52;c;aGk=\x07 \x1b[2J \x5cx41 \xc2\x9b \x9b")
    assert r is not None
    assert r.text == "café a\tb c\nd \\x1b]52;c;aGk=\\x07 \\x1b[2J \\x41 \\x9b \ufffd"


def _controls(s: str) -> List[str]:
    return [c for c in s if (ord(c) < 32 and c != "\t") or 0x7f <= ord(c) <= 0x9f]


def test_console_drops_terminal_controls() -> None:
    """A guest's console bytes go to the host's terminal (./hvstor boot prints the output):
    no escape sequence (OSC 52 writes the clipboard, a device attributes query makes the
    terminal type an answer), no C1 control, no other control character reaches it."""
    c = Console()
    c.feed("HVSTOR-GUEST-READY")
    raw = ["\x1b]52;c;aGVsbG8=\x07one", "two\x1b[>0c\x1b[6n", "\x1bP+q544e\x1b\\three",
           "\x1b]0;title\x1b\\four\x1b[1;31mred\x1b[0m", "five\x9b2J\u009d8;;x\x07\x00\x08\x7f",
           "six\x1b(B\x1b=", "tab\tkept"]
    for line in raw:
        c.feed(line)
    assert c.output == ["one", "two", "three", "fourred", "five", "six", "tab\tkept"]
    assert not [ln for ln in c.lines if _controls(ln)]


def test_kmsg_log_keeps_no_raw_controls() -> None:
    log = KmsgLog()
    log.feed(r"4,0,1,-;WARNING: CPU: 0 PID: 1 at a.c:1 f\x1b]0;pwned\x07")
    assert log.report is not None and not _controls(log.report.lines[0])


def test_line_splitter_caps_lines_and_keeps_the_end() -> None:
    """A guest that never prints a newline gets lines of at most max_line characters;
    a line cut in the middle of a UTF-8 character is not garbled."""
    s = LineSplitter(max_line=10)
    assert s.feed(b"a" * 25) == ["a" * 10, "a" * 10]
    assert s.feed("é\nb".encode()[:1]) == []
    assert s.feed("é\nb".encode()[1:]) == ["aaaaaé"]
    assert s.feed(b"c\n") == ["bc"]
    assert s.feed(b"tail") == [] and s.end() == ["tail"]
    assert s.end() == []
