"""Fixtures of the machine layer's tests: scripts/ on the path, QEMU's Python packages,
and boots of tests/machine/fake_qemu.py, a stand-in QEMU that plays a scripted guest."""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Callable, Iterator, List, Optional

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "scripts"))

from hvmachine import qemu as qemumod  # noqa: E402  pylint: disable=wrong-import-position
from hvmachine.assets import Assets  # noqa: E402  pylint: disable=wrong-import-position
from hvmachine.guest import Guest  # noqa: E402  pylint: disable=wrong-import-position
from hvmachine.machine import Machine  # noqa: E402  pylint: disable=wrong-import-position

FAKE_QEMU = os.path.join(HERE, "fake_qemu.py")
# A guest that boots and runs its command: the init's marker, then the steps given.
READY = [["beat"], ["console", "Linux version 6.12 (fake)"], ["console", "HVSTOR-GUEST-READY"]]


def qemu_python_or_skip() -> None:
    if not os.path.isdir(os.path.join(qemumod.python_dir(), "qemu", "machine")):
        pytest.skip(f"QEMU's Python packages are not in {qemumod.python_dir()} (./hvstor build fetches them)")
    qemumod.import_qemu_python()


FakeBoot = Callable[..., Machine]


@pytest.fixture
def fake_boot(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeBoot]:
    """fake_boot(steps, **guest_fields) -> a started Machine on the fake QEMU playing
    `steps`; its QMP commands are logged in tmp_path/qmp.log."""
    qemu_python_or_skip()
    kernel = tmp_path / "bzImage"
    kernel.write_bytes(b"not a kernel")
    initrd = tmp_path / "initrd"
    initrd.write_bytes(b"")
    monkeypatch.setenv("QEMU", FAKE_QEMU)
    monkeypatch.setenv("HVSTOR_FAKE_QEMU_LOG", str(tmp_path / "qmp.log"))
    started: List[Machine] = []

    def boot(steps: List[Any], on_output: Optional[Callable[[str], None]] = None,
             results_dir: Optional[str] = None, restore: Optional[str] = None, **fields: Any) -> Machine:
        script = tmp_path / f"script{len(started)}.json"
        script.write_text(json.dumps(steps))
        monkeypatch.setenv("HVSTOR_FAKE_QEMU_SCRIPT", str(script))
        fields.setdefault("cmd", "true")
        g = Guest(kernel=str(kernel), controllers=[], **fields)
        work = tmp_path / f"boot{len(started)}"
        work.mkdir()
        m = Machine(g, str(work), on_output=on_output, results_dir=results_dir, restore=restore,
                    assets=Assets(str(kernel), str(initrd), "6.12-fake"))
        m.start()
        started.append(m)
        return m

    yield boot
    for m in started:
        m.__exit__(None, None, None)


def qmp_log(tmp_path: Any) -> List[Any]:
    path = tmp_path / "qmp.log"
    return [json.loads(ln) for ln in path.read_text().splitlines()] if path.exists() else []
