#!/usr/bin/env bash
# Redoes the report of an experiment's results folder: table, plots, summary.json,
# junit.xml and the expectations' verdict (./hvstor report RESULTS [--spec SPEC]).
# Exit status as scripts/run-experiment.sh's.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
# Debian's python3 (setup-host.sh installs it), whatever else is first on PATH.
PY=/usr/bin/python3; [ -x "$PY" ] || PY=python3
PYTHONPATH=$HVSTOR_ROOT/scripts${PYTHONPATH:+:$PYTHONPATH} exec "$PY" -m hvexp report "$@"
