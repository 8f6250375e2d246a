#!/usr/bin/env bash
# Runs an experiment spec (./hvstor run SPEC [OPTIONS]); the runner is scripts/hvexp
# (python3 -m hvexp run --help). docs/experiments.md describes specs and results.
# Exit status: 0 every run counted and every expectation met; 1 an expectation failed;
# 2 a mistake in the spec or the options; 3 a run failed (boot, guest, checks) or did not run.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
case " $* " in
  *" --dry-run "*|*" -h "*|*" --help "*) command -v python3 >/dev/null || bash "$HVSTOR_ROOT/scripts/setup-host.sh" ;;
  *) bash "$HVSTOR_ROOT/scripts/setup-host.sh" ;;   # python3, gnuplot, what QEMU's build needs
esac
# Debian's python3 (setup-host.sh installs it), whatever else is first on PATH.
PY=/usr/bin/python3; [ -x "$PY" ] || PY=python3
PYTHONPATH=$HVSTOR_ROOT/scripts${PYTHONPATH:+:$PYTHONPATH} exec "$PY" -m hvexp run "$@"
