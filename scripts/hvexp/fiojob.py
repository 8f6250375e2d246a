"""The fio job of an experiment: what the harness adds to it, and how long it runs."""

import re

_SECTION = re.compile(r"^\s*\[([^\]]*)\]")
_RUNTIME = re.compile(r"^(\s*runtime\s*=\s*)(.*)$")
_FILENAME = re.compile(r"^\s*filename\s*=")


class JobError(Exception):
    pass


def prepare(job, log_avg_msec, runtime=None):
    """The job as the guest runs it.

    At the top of [global] (created when missing): per-job IOPS and latency logs averaged
    over log_avg_msec and, when the job names no file, filename=${DISK}. The job's own
    [global] lines come after ours, so they win. runtime (seconds) replaces every runtime=.
    """
    lines = job.splitlines()
    if runtime is not None:
        lines = [_RUNTIME.sub(lambda m: m.group(1) + str(runtime), ln) for ln in lines]
    sections = [m.group(1) for m in map(_SECTION.match, lines) if m]
    if not [s for s in sections if s != "global"]:
        raise JobError("the fio job has no [job] section")
    add = ["write_iops_log", "write_lat_log", f"log_avg_msec={log_avg_msec}"]
    if not any(_FILENAME.match(ln) for ln in lines):
        add.append("filename=${DISK}")
    for i, ln in enumerate(lines):
        m = _SECTION.match(ln)
        if m and m.group(1) == "global":
            lines[i + 1:i + 1] = add
            break
    else:
        lines = ["[global]"] + add + lines
    return "\n".join(lines) + "\n"


def seconds(job):
    """Seconds of fio per boot: the sum of every runtime= (60 s when none is given)."""
    total, found = 0.0, False
    for ln in job.splitlines():
        m = _RUNTIME.match(ln)
        if not m:
            continue
        v = m.group(2).strip()
        mult = 1
        if v.endswith("m"):
            mult, v = 60, v[:-1]
        elif v.endswith("s"):
            v = v[:-1]
        try:
            total += float(v) * mult
        except ValueError:
            raise JobError(f"runtime={m.group(2).strip()} is not a number of seconds") from None
        found = True
    return int(total) if found else 60


def job_names(job):
    """Names of the job sections, in order ([global] left out)."""
    return [m.group(1) for m in map(_SECTION.match, job.splitlines()) if m and m.group(1) != "global"]
