"""The driver-paths suite (experiments/driver-paths.exp): it passes on the stock 6.12 driver
and reaches at least 90% of hv_storvsc's functions, and it catches every mutant of
tests/mutants (a plausible bug in one path each): run on the scenario that covers that
path, the mutant fails the expectation the kill table names. The kill table is also the one
docs/test-your-patch.md shows."""

import os
import re
from typing import List, Tuple

import pytest

from conftest import ROOT, Checks, hvstor

SUITE = os.path.join(ROOT, "experiments", "driver-paths.exp")
MUTANTS = os.path.join(ROOT, "tests", "mutants")
DOC = os.path.join(ROOT, "docs", "test-your-patch.md")
# (mutant, the scenario that catches it, an expectation of that scenario that fails)
KILLS: List[Tuple[str, str, str]] = [
    ("srb-status-unmasked", "capacity", "log ~ detected capacity change from 131072 to 196608"),
    ("rescan-work-wrong-lun", "hot-remove", "data.present = yes"),
    ("mode-sense-10-not-forced", "basics", "log !~ cmd 0x5a status"),
    ("busy-requeued-for-ever", "busy", "guest.io_errors > 0"),
    ("one-subchannel-too-many", "basics", "log ~ hvstor: storvsc has 2 channels"),
    ("subchannels-never-used", "basics", "log !~ hvstor: storvsc channel [0-9]+ events 0$"),
    ("timeouts-handled-by-eh", "timeout", "coverage.storvsc_host_reset_handler = not-run"),
    ("host-reset-reports-failure", "host-reset", "log !~ offlined"),
    ("residual-dropped", "short-read", "log ~ hvstor: the short read took 2 commands, data intact"),
]


def test_the_suite_passes_on_the_stock_driver(tmp_path: "os.PathLike[str]", checks: Checks) -> None:
    rc, lines = hvstor("run", SUITE, "--out", os.path.join(str(tmp_path), "stock"))
    checks.that(rc == 0, f"every scenario's expectations held (exit {rc})")
    cov = [ln for ln in lines if "expect coverage.all" in ln]
    checks.that(cov and cov[0].lstrip().startswith("PASS"), f"the suite reached 90% of the functions ({cov})")


@pytest.mark.parametrize("mutant,scenario,expectation", KILLS, ids=[k[0] for k in KILLS])
def test_each_mutant_is_caught(mutant: str, scenario: str, expectation: str, tmp_path: "os.PathLike[str]",
                               checks: Checks) -> None:
    patch = os.path.join(MUTANTS, f"{mutant}.patch")
    rc, lines = hvstor("run", SUITE, "--patch", patch, "--variants", scenario,
                       "--out", os.path.join(str(tmp_path), mutant))
    checks.that(rc == 1, f"the {scenario} scenario fails on {mutant} (exit {rc})")
    fails = [ln.strip() for ln in lines if ln.lstrip().startswith(f"FAIL {scenario}: expect ")]
    checks.that(any(f"expect {expectation} (" in ln for ln in fails),
                f"naming 'expect {expectation}' ({fails})")


def test_the_kill_table_is_the_documented_one() -> None:
    with open(DOC, encoding="utf-8") as f:
        rows = re.findall(r"^\| `([a-z0-9-]+)` \| ([a-z-]+) \| `expect = (.+)` \|", f.read(), re.M)
    assert [(m, s, e.replace("\\|", "|")) for m, s, e in rows] == KILLS
    for m, _, _ in KILLS:
        assert os.path.isfile(os.path.join(MUTANTS, f"{m}.patch")), m
    shipped = sorted(f[:-len(".patch")] for f in os.listdir(MUTANTS) if f.endswith(".patch"))
    assert shipped == sorted(m for m, _, _ in KILLS), "every mutant of tests/mutants is in the kill table"
