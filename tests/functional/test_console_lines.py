"""Kernel messages never cut a line of the guest command's output.

While the command prints lines, a second process in the guest logs kernel messages as fast
as it can, and each line of either kind must arrive whole on its own line. Before the
guest's init forwarded kernel messages from /dev/kmsg during the command, the kernel wrote
them straight to the serial console, between the chunks of a line the command was writing;
a test that looked for that line with ^...$ then missed it (1 line in 300 here, as
"CMD-LINE-172-...789[   12.265253] kmsg-line-16-...")."""

import re

from conftest import Checks, Run, count, guest

N = 1000
GUEST = f"""
( i=0; while [ $i -lt {N} ]; do echo "kmsg-line-$i-abcdefghijklmnopqrstuvwxyz" >/dev/kmsg; i=$((i + 1)); done ) &
i=0; while [ $i -lt {N} ]; do echo "CMD-LINE-$i-ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"; i=$((i + 1)); done
wait
"""
CMD_LINE = r"^CMD-LINE-[0-9]+-ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789$"
KMSG_LINE = r"^\[ *[0-9]+\.[0-9]{6}\] kmsg-line-[0-9]+-abcdefghijklmnopqrstuvwxyz$"


def test_console_lines(run: Run, checks: Checks) -> None:
    r = run(guest(kernel="debian-6.12", cmd=GUEST), on_output=None)
    checks.boot_ok(r)
    checks.count(r.output, CMD_LINE, N, f"all {N} lines of the command arrived whole")
    checks.count(r.output, KMSG_LINE, N, f"all {N} kernel messages arrived whole, in the console's format")
    # Anything that mixes the two kinds, shown when it went wrong.
    cut = [ln for ln in r.output if re.search("CMD-LINE|kmsg-line", ln)
           and not (re.search(CMD_LINE, ln) or re.search(KMSG_LINE, ln))]
    for ln in cut[:5]:
        print(f"  cut: {ln}")
    print(f"  {count(r.output, CMD_LINE)} command lines, {count(r.output, KMSG_LINE)} kernel messages")
