"""Kernel messages never cut a line of the guest command's output.

While the command prints lines, a second process in the guest logs kernel messages as fast
as it can. Every line of the command must arrive whole on the console, and every message
in the kernel's log and on the host's display (on_output), in the console's format.

Two earlier designs failed here. The kernel printing to the serial console writes between
the chunks of a line a program is writing there (1 line in 300: "CMD-LINE-172-...789[
12.265253] kmsg-line-16-..."). A guest process forwarding the messages to the console
writes whole lines, but a command's write that a signal cuts short (SIGCHLD from its own
background job) goes out in two writes, and a forwarded line fits between them (seen once in
CI: "CMD-LINE[    4.971922] kmsg-line-151-..."). Now the console carries the command's output
alone while it runs, and the host shows the messages from the kmsg channel.

The kernel's log buffer may overrun the reader of the kmsg channel on a slow or busy
machine: the records lost there are counted (BootResult.kernel_log_lost), so they count with
the ones that arrived; none may vanish unsaid."""

import re
from typing import List

from conftest import Checks, Run, count, guest

N = 1000
# Level 3 (err): the console shows it whatever its level ("quiet" is 4).
GUEST = f"""
( i=0; while [ $i -lt {N} ]; do echo "<3>kmsg-line-$i-abcdefghijklmnopqrstuvwxyz" >/dev/kmsg; i=$((i + 1)); done ) &
i=0; while [ $i -lt {N} ]; do echo "CMD-LINE-$i-ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"; i=$((i + 1)); done
wait
"""
CMD_LINE = r"^CMD-LINE-[0-9]+-ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789$"
KMSG_LINE = r"^\[ *[0-9]+\.[0-9]{6}\] kmsg-line-[0-9]+-abcdefghijklmnopqrstuvwxyz$"


def test_console_lines(run: Run, checks: Checks) -> None:
    shown: List[str] = []
    r = run(guest(kernel="debian-6.12", cmd=GUEST), on_output=shown.append)
    checks.boot_ok(r)
    checks.count(r.output, CMD_LINE, N, f"all {N} lines of the command arrived whole")
    checks.count(r.output, "kmsg-line", 0, "the console carried the command's output alone")
    # Anything that mixes the two kinds, anywhere on the console.
    cut = [ln for ln in r.console if re.search("CMD-LINE|kmsg-line", ln)
           and not (re.search(CMD_LINE, ln) or re.search(KMSG_LINE, ln))]
    checks.that(not cut, f"no console line mixes the two kinds ({len(cut)}; first: {cut[:3]})")
    logged = count(r.kernel_log.splitlines(), KMSG_LINE)
    checks.that(0 < logged <= N and logged + r.kernel_log_lost >= N,
                f"the {N} kernel messages are in the kernel's log or were said lost "
                f"({logged} logged, {r.kernel_log_lost} lost)")
    checks.count(shown, KMSG_LINE, logged, "the host showed each of them, in the console's format")
    checks.count(shown, CMD_LINE, N, "beside the command's lines")
