# Kernel messages never cut a line of the guest command's output: while the command prints
# lines, a second process in the guest logs kernel messages as fast as it can, and each line
# of either kind must arrive whole on its own line. Before the guest's init forwarded kernel
# messages from /dev/kmsg during the command, the kernel wrote them straight to the serial
# console, between the chunks of a line the command was writing; a test that looked for that
# line with ^...$ then missed it (1 line in 300 here, as "CMD-LINE-172-...789[   12.265253]
# kmsg-line-16-...").
. "$(dirname "$0")/../boot-lib.sh"

N=1000
read -r -d '' GUEST_CMD <<SH
( i=0; while [ \$i -lt $N ]; do echo "kmsg-line-\$i-abcdefghijklmnopqrstuvwxyz" >/dev/kmsg; i=\$((i + 1)); done ) &
i=0; while [ \$i -lt $N ]; do echo "CMD-LINE-\$i-ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"; i=\$((i + 1)); done
wait
SH

boot_guest --kernel debian-6.12 --cmd "$GUEST_CMD"

CMD_LINE='^CMD-LINE-[0-9]+-ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789$'
KMSG_LINE='^\[ *[0-9]+\.[0-9]{6}\] kmsg-line-[0-9]+-abcdefghijklmnopqrstuvwxyz$'
check "guest command finished" [ "$BOOT_RC" = 0 ]
check "all $N lines of the command arrived whole" count_is "$CMD_LINE" "$N"
check "all $N kernel messages arrived whole, in the console's format" count_is "$KMSG_LINE" "$N"
# Anything that mixes the two kinds, shown when it went wrong.
grep -E 'CMD-LINE|kmsg-line' "$OUT" | grep -v -E "$CMD_LINE|$KMSG_LINE" | head -n 5 | sed 's/^/  cut: /'
finish
