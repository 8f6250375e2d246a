"""Command line of the experiment runner (./hvstor run, ./hvstor report)."""

import argparse
import sys

from . import expect, fiojob, merge, plan, report, runner, shards, spec


def _posint(s: str) -> int:
    if not s.isdigit() or int(s) < 1:
        raise argparse.ArgumentTypeError(f"wants a positive number, got '{s}'")
    return int(s)


def _shard(s: str) -> shards.Shard:
    try:
        return shards.parse(s)
    except shards.ShardError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _merge(args: argparse.Namespace) -> int:
    """report --merge: the shards' folders joined into one, then its report and verdict."""
    folders, owner = merge.merge(args.merge, args.out)
    out = runner.results_folder(folders[0].plan["name"], args.out)
    merge.write(folders, owner, out)
    runner.log(f"merged {len(folders)} shard(s) ({', '.join(f.shard.label() for f in folders)}) of "
               f"{folders[0].plan['name']}: {len(owner)} runs in {out}")
    rep = report.Report(out, args.spec)
    print(rep.write(runner.log), end="")
    return runner.verdict(rep, f"report of the merged shards in {out}")


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
    r.add_argument("--snapshot", choices=("on", "off"),
                   help="as snapshot = on|off: each variant boots once, up to its disks being ready, and every "
                        "repetition goes on from a snapshot of that moment")
    r.add_argument("--kernel", help="every variant boots this kernel (debian-6.1, debian-6.12, or a bzImage "
                                    "with --modules)")
    r.add_argument("--modules", help="with --kernel PATH: its lib/modules/<version> tree")
    r.add_argument("--patch", help="every variant loads hv_storvsc built with this patch (in place of the "
                                   "spec's patch or ko): a suite run on your change")
    r.add_argument("--coverage", choices=("functions", "lines", "off"),
                   help="every variant counts coverage so (as coverage = ...): lines needs a kernel built with "
                        "CONFIG_GCOV_KERNEL (./hvstor kernel-build --gcov)")
    r.add_argument("--dry-run", action="store_true", help="print each variant's guest (kernel, vCPUs, kernel command line, QEMU device arguments) and the guest script")
    r.add_argument("--shard", type=_shard, metavar="K/N",
                   help="boot only shard K of N of the runs (each variant's repetitions dealt over the shards); "
                        "./hvstor report --merge joins the shards' folders")
    p = sub.add_parser("report", help="redo the report and the verdict of a results folder, or join shards' folders")
    p.add_argument("results", nargs="?", help="a results folder of ./hvstor run")
    p.add_argument("--spec", help="take the expectations from this spec instead of the folder's spec.exp")
    p.add_argument("--merge", nargs="+", metavar="DIR",
                   help="join the results folders of the shards of one plan (./hvstor run --shard K/N) into one "
                        "(--out), with the report and verdict of the whole plan")
    p.add_argument("--out", help="with --merge: the merged folder (default .cache/results/<name>-<date>-<time>)")
    args = ap.parse_args(argv)
    if args.cmd == "report" and (args.results is None) == (args.merge is None):
        p.error("give a results folder, or --merge DIR... (not both)")
    if args.cmd == "report" and args.out and not args.merge:
        p.error("--out goes with --merge")
    try:
        if args.cmd == "run":
            return runner.run(args)
        if args.merge:
            return _merge(args)
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
