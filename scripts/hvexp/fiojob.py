"""The fio job of an experiment: what the harness adds to it, and how long it runs."""

import re

_SECTION = re.compile(r"^\s*\[([^\]]*)\]")
_RUNTIME = re.compile(r"^(\s*runtime\s*=\s*)(.*)$")
_RAMP = re.compile(r"^\s*ramp_time\s*=\s*(.*)$")
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
    """Seconds of fio per boot, about: every runtime= and ramp_time= of a job section, and
    a [global] one once per group of jobs that run one after the other (stonewall); 60 s
    when no runtime is given."""
    total, found = 0.0, False
    groups = 1 + sum(1 for ln in job.splitlines() if re.match(r"^\s*(stonewall|wait_for_previous)\s*(=.*)?$", ln))
    section = None
    for ln in job.splitlines():
        sm = _SECTION.match(ln)
        if sm:
            section = sm.group(1)
            continue
        m = _RUNTIME.match(ln)
        r = _RAMP.match(ln)
        if not m and not r:
            continue
        times = groups if section == "global" else 1
        v = (m.group(2) if m else r.group(1)).strip()
        mult = 1
        if v.endswith("m"):
            mult, v = 60, v[:-1]
        elif v.endswith("s"):
            v = v[:-1]
        try:
            total += float(v) * mult * times
        except ValueError:
            raise JobError(f"{'runtime' if m else 'ramp_time'}={v} is not a number of seconds") from None
        found = found or bool(m)
    return int(total) if found else 60


def job_names(job):
    """Names of the job sections, in order ([global] left out)."""
    return [m.group(1) for m in map(_SECTION.match, job.splitlines()) if m and m.group(1) != "global"]
