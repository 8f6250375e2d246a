"""Kernel messages never cut a line of the guest command's output.

While the command prints lines, a second process in the guest logs kernel messages as fast
as it can, and each line of either kind must arrive whole on its own line. Before the
guest's init forwarded kernel messages from /dev/kmsg during the command, the kernel wrote
them straight to the serial console, between the chunks of a line the command was writing;
a test that looked for that line with ^...$ then missed it (1 line in 300 here, as
"CMD-LINE-172-...789[   12.265253] kmsg-line-16-...").

The kernel's log buffer may overrun the forwarder on a slow or busy machine: the messages
lost there are not the console's fault, and the init says how many it lost ("hvstor-init: N
kernel messages lost"), so those count with the ones that arrived; none may vanish unsaid."""

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
LOST = r"^hvstor-init: ([0-9]+) kernel messages lost"


def test_console_lines(run: Run, checks: Checks) -> None:
    r = run(guest(kernel="debian-6.12", cmd=GUEST), on_output=None)
    checks.boot_ok(r)
    checks.count(r.output, CMD_LINE, N, f"all {N} lines of the command arrived whole")
    arrived = count(r.output, KMSG_LINE)
    lost = sum(int(m.group(1)) for ln in r.output for m in [re.search(LOST, ln)] if m)
    checks.that(0 < arrived <= N and arrived + lost >= N,
                f"the {N} kernel messages arrived whole, in the console's format, or were said lost "
                f"({arrived} arrived, {lost} lost)")
    # Anything that mixes the two kinds.
    cut = [ln for ln in r.output if re.search("CMD-LINE|kmsg-line", ln)
           and not (re.search(CMD_LINE, ln) or re.search(KMSG_LINE, ln))]
    checks.that(not cut, f"no line mixes the two kinds ({len(cut)}; first: {cut[:3]})")
