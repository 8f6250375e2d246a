"""A guest's kernel and initramfs: scripts/guest-assets.sh prepares and caches them (a
build step: downloads, depmod, cpio); the guest command goes into an archive of its own
that is appended to the cached initramfs for one boot."""

from __future__ import annotations

import gzip
import os
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from .guest import Guest
from .paths import ROOT


class AssetError(Exception):
    """The guest's kernel or initramfs could not be prepared."""


@dataclass
class Assets:
    kernel: str
    initrd: str
    kver: str
    modules: str = ""      # the lib/modules/<version> tree the initramfs was made from


def prepare(guest: Guest) -> Assets:
    """The kernel and base initramfs for `guest` (cached by guest-assets.sh)."""
    args = ["bash", os.path.join(ROOT, "scripts", "guest-assets.sh"), guest.kernel]
    if guest.modules:
        args += ["--modules", guest.modules]
    for ko in guest.ko:
        args += ["--ko", ko]
    env = dict(os.environ)
    if guest.initramfs_modules:
        env["HVSTOR_GUEST_EXTRA_MODULES"] = " ".join(guest.initramfs_modules)
    r = subprocess.run(args, stdout=subprocess.PIPE, text=True, env=env, check=False)
    if r.returncode != 0:
        raise AssetError(f"could not prepare the guest's kernel and initramfs for '{guest.kernel}' "
                         "(scripts/guest-assets.sh, its output above)")
    values = parse_assignments(r.stdout)
    kernel, initrd = values.get("KERNEL", ""), values.get("INITRD", "")
    if not (os.path.isfile(kernel) and os.path.isfile(initrd)):
        raise AssetError("scripts/guest-assets.sh gave no kernel or initramfs")
    return Assets(kernel, initrd, values.get("KVER", ""), values.get("MODULES", ""))


def parse_assignments(text: str) -> Dict[str, str]:
    """KEY=value lines, each value quoted as bash's printf %q quotes it."""
    out = {}
    for line in text.splitlines():
        k, eq, v = line.partition("=")
        if eq and k.isidentifier():
            words = shlex.split(v) if v else [""]
            out[k] = words[0] if words else ""
    return out


def cpio_newc(entries: List[Tuple[str, bytes]]) -> bytes:
    """A newc cpio archive, as the kernel unpacks an initramfs: (name, content) entries,
    a name ending in '/' being a directory; everything owned by root."""
    out = bytearray()

    def add(ino: int, name: str, mode: int, nlink: int, body: bytes) -> None:
        fields = [ino, mode, 0, 0, nlink, 0, len(body), 0, 0, 0, 0, len(name) + 1, 0]
        out.extend(b"070701" + b"".join(b"%08X" % f for f in fields) + name.encode() + b"\0")
        out.extend(b"\0" * (-len(out) % 4) + body)
        out.extend(b"\0" * (-len(out) % 4))

    for ino, (name, data) in enumerate(entries, 1):
        if name.endswith("/"):
            add(ino, name.rstrip("/"), 0o040755, 2, b"")
        else:
            add(ino, name, 0o100644, 1, data)
    add(0, "TRAILER!!!", 0, 1, b"")
    return bytes(out)


def with_command(base_initrd: str, cmd: str, dest: str, files: Optional[Dict[str, bytes]] = None) -> str:
    """The base initramfs with /hvstor/cmd (and /hvstor/NAME for each of `files`)
    appended (a second gzip'd cpio member, which the kernel unpacks over the first);
    written to dest."""
    entries = [("hvstor/", b""), ("hvstor/cmd", (cmd + "\n").encode())]
    entries += [(f"hvstor/{name}", data) for name, data in sorted((files or {}).items())]
    extra = gzip.compress(cpio_newc(entries), mtime=0)
    with open(base_initrd, "rb") as src, open(dest, "wb") as out:
        shutil.copyfileobj(src, out)
        out.write(extra)
    return dest
