"""Crash consistency: QEMU is killed with SIGKILL while a stock 6.12 guest writes to a
file-backed disk.

Each write goes with O_DIRECT and is followed by fsync (a cache flush, SYNCHRONIZE CACHE);
the guest prints "DURABLE n" once both completed. After the kill, every block the guest
reported durable holds exactly what it wrote, in the host file. The kill comes once the
guest has reported 40 blocks, and the guest keeps writing until then and after, so it lands
among writes in flight. The boot then ends with QEMU's exit (qemu-exit), as expected."""

import re
import signal
from typing import Any, List, Tuple

from conftest import Boot, Checks, Disk, guest, sparse_file

GUEST = r"""
i=1
while [ $i -le 4000 ]; do
  yes "hvstor block $i" | head -c 4096 >/tmp/block
  dd if=/tmp/block of=/dev/sda bs=4096 seek=$i count=1 oflag=direct conv=fsync 2>/dev/null \
    || { echo "WRITE-FAILED $i"; exit 1; }
  echo "DURABLE $i"
  i=$((i + 1))
done
echo "NEVER-KILLED"
"""
KILL_AFTER = 40


def test_crash_consistency(boot: Boot, checks: Checks, tmp_path: Any) -> None:
    img = sparse_file(tmp_path / "disk.img", 64 << 20)
    m = boot(guest(kernel="debian-6.12", vcpus=2, cmd=GUEST, disks=[Disk({"id": "d0", "file": img})]))
    m.wait_console(re.compile(f"^DURABLE {KILL_AFTER}$"))
    m.kill()
    r = m.finish()
    killed = r.failure is not None and r.failure.kind == "qemu-exit" and m.vm.exitcode() == -signal.SIGKILL
    checks.that(killed, "QEMU was killed while the guest wrote")
    checks.lacks(r.output, "^NEVER-KILLED$", "the guest had not finished")
    done, missing = verify(r.output, img)
    checks.that(len(done) >= KILL_AFTER, "the guest reported at least 40 durable writes")
    checks.that(not missing, "every write reported durable is in the image")
    print(f"  {r.failure.message if r.failure else 'no failure'}")
    print(f"  DURABLE-REPORTED {len(done)} LAST {max(done, default=0)}")
    print(f"  MISSING {len(missing)} {' '.join(map(str, missing[:10]))}")


def verify(output: List[str], img: str) -> Tuple[List[int], List[int]]:
    """The blocks the guest reported durable, and those of them whose pattern is not in
    the image."""
    done = [int(mt.group(1)) for ln in output for mt in [re.match(r"^DURABLE (\d+)$", ln)] if mt]
    bad = []
    with open(img, "rb") as f:
        for n in done:
            f.seek(n * 4096)
            want = (b"hvstor block %d\n" % n) * 4096
            if f.read(4096) != want[:4096]:
                bad.append(n)
    return done, bad
