"""`-device DEVICE,help` describes every property of our devices, as QEMU's own devices do.

The descriptions are the glue's HvPropDoc tables (hw/qemu/*.c, `static const HvPropDoc
hv_NAME_docs[]`, one per device: hv_disk_docs for hv-disk). For each device, every property
QEMU lists must have an entry there, and QEMU must show that entry's text (not its type's
generic "on/off", or nothing). No guest boots."""

import os
import re
import subprocess
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

from conftest import HANG_GUARD, ROOT, Checks

DEVICES = ["hv-vmbus-bridge", "hv-storvsc", "hv-disk"]
_TABLE = re.compile(r"static const HvPropDoc (hv_[a-z_]+)_docs\[\] = \{(.*?)\n\};", re.S)
_ENTRY = re.compile(r'\{\s*"([a-z0-9-]+)",\s*((?:"(?:[^"\\]|\\.)*"\s*)+)\}')


def doc_tables() -> Dict[str, Dict[str, str]]:
    """device -> property -> description, from the glue's sources."""
    out: Dict[str, Dict[str, str]] = {}
    for c in sorted(Path(ROOT, "hw", "qemu").glob("*.c")):
        for var, body in _TABLE.findall(c.read_text(encoding="utf-8")):
            entries = {name: "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', lits)).replace('\\"', '"')
                       for name, lits in _ENTRY.findall(body)}
            out[var.replace("_", "-")] = entries
    return out


def device_help(device: str) -> List[Tuple[str, str]]:
    """(property, what QEMU shows after " - ") for each line of `-device DEVICE,help`."""
    r = subprocess.run([os.environ["QEMU"], "-device", f"{device},help"], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=HANG_GUARD, check=False)
    assert r.returncode == 0, f"-device {device},help failed ({r.returncode}): {r.stdout}"
    props = []
    for line in r.stdout.splitlines()[1:]:
        m = re.match(r"^\s+([a-z0-9-]+)=<.*?>(?:\s+- (.*))?$", line)
        assert m, f"an unexpected line in -device {device},help: {line!r}"
        props.append((m.group(1), (m.group(2) or "").strip()))
    return props


def test_the_tables_parse() -> None:
    tables = doc_tables()
    assert sorted(tables) == sorted(DEVICES), f"one HvPropDoc table per device: {sorted(tables)}"
    for device, docs in tables.items():
        assert len(docs) >= 3, f"{device}: {docs}"
        for name, text in docs.items():
            assert len(text.split()) >= 3, f"{device}.{name}: a description of a few words, not {text!r}"


@pytest.mark.parametrize("device", DEVICES)
def test_every_property_is_described(device: str, checks: Checks) -> None:
    docs = doc_tables().get(device, {})
    shown = device_help(device)
    checks.that(len(shown) >= 3, f"-device {device},help lists its properties ({len(shown)})")
    for name, desc in shown:
        want = docs.get(name)
        checks.that(want is not None, f"{device}.{name} has a description in the glue's table")
        if want is not None:
            checks.that(desc.startswith(want), f"{device}.{name}: QEMU shows it ({desc!r})")
    listed = {n for n, _ in shown}
    checks.that(not set(docs) - listed, f"every described property exists ({sorted(set(docs) - listed)} do not)")


# The settings objects (-object TYPE,help): their properties come from the model's own list
# of settings, with its descriptions; the schema patch must list the same (test_settings.cc).
OBJECTS = {"hv-disk-model": ("profile", "latency-read", "time-scale"),
           "hv-vm-caps": ("profile", "iops", "time-scale"),
           "hv-fault": ("error", "ops", "count")}


@pytest.mark.parametrize("qom_type", sorted(OBJECTS))
def test_every_object_setting_is_described(qom_type: str, checks: Checks) -> None:
    r = subprocess.run([os.environ["QEMU"], "-object", f"{qom_type},help"], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=HANG_GUARD, check=False)
    checks.that(r.returncode == 0 and r.stdout.startswith(f"{qom_type} options:"),
                f"-object {qom_type},help answers ({r.returncode}: {r.stdout[:200]!r})")
    shown = {}
    for line in r.stdout.splitlines()[1:]:
        m = re.match(r"^\s+([a-z0-9-]+)=<str>\s+- (.*)$", line)
        checks.that(m is not None, f"{qom_type}: a string setting with a description: {line!r}")
        if m:
            shown[m.group(1)] = m.group(2)
    for name in OBJECTS[qom_type]:
        checks.that(name in shown, f"{qom_type} offers {name}")
    for name, desc in shown.items():
        checks.that(len(desc.split()) >= 3, f"{qom_type}.{name}: a description of a few words ({desc!r})")
