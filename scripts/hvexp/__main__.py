"""Command line of the experiment runner (./hvstor run, ./hvstor report)."""

import argparse
import sys

from . import expect, fiojob, plan, report, runner, spec


def _posint(s: str) -> int:
    if not s.isdigit() or int(s) < 1:
        raise argparse.ArgumentTypeError(f"wants a positive number, got '{s}'")
    return int(s)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="hvstor", description="hv-storvsc experiments (docs/experiments.md)")
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run an experiment spec: each variant x repetition in its own guest")
    r.add_argument("spec", help="the spec file (experiments/*.exp)")
    r.add_argument("--reps", type=_posint, help="repetitions (overrides the spec's)")
    r.add_argument("--runtime", type=_posint, help="set every runtime= of the fio job to S seconds")
    r.add_argument("--variants", help="run only these variants, comma separated (the first is the baseline)")
    r.add_argument("--out", help="results folder (default .cache/results/<name>-<date>-<time>)")
    r.add_argument("--jobs", type=_posint, default=1, help="boot up to N runs at once (default 1)")
    r.add_argument("--trace", action="store_true",
                   help="per-IO latency attribution: trace every I/O in the guest and the host (as trace = on)")
    r.add_argument("--kernel", help="every variant boots this kernel (debian-6.1, debian-6.12, or a bzImage "
                                    "with --modules)")
    r.add_argument("--modules", help="with --kernel PATH: its lib/modules/<version> tree")
    r.add_argument("--patch", help="every variant loads hv_storvsc built with this patch (in place of the "
                                   "spec's patch or ko): a suite run on your change")
    r.add_argument("--dry-run", action="store_true", help="print each variant's guest (kernel, vCPUs, kernel command line, QEMU device arguments) and the guest script")
    p = sub.add_parser("report", help="redo the report and the verdict of a results folder")
    p.add_argument("results", help="a results folder of ./hvstor run")
    p.add_argument("--spec", help="take the expectations from this spec instead of the folder's spec.exp")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "run":
            return runner.run(args)
        rep = report.Report(args.results, args.spec)
        print(rep.write(runner.log), end="")
        return runner.verdict(rep, f"report of {args.results}")
    except (spec.SpecError, plan.PlanError, fiojob.JobError, expect.ExpectError, report.ReportError) as e:
        print(f"[hvstor] error: {e}", file=sys.stderr)
        return runner.EXIT_USAGE
    except (runner.RunnerError, OSError) as e:
        print(f"[hvstor] error: {e}", file=sys.stderr)
        return runner.EXIT_RUN
    except KeyboardInterrupt:
        print("[hvstor] interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
