"""The fio job of an experiment: what the harness adds to it, how long it runs, and what
fio's JSON output will report for it."""

import re
from dataclasses import dataclass, field

_SECTION = re.compile(r"^\s*\[([^\]]*)\]")
_RUNTIME = re.compile(r"^(\s*runtime\s*=\s*)(.*)$")
_RAMP = re.compile(r"^\s*ramp_time\s*=\s*(.*)$")
_FILENAME = re.compile(r"^\s*filename\s*=")
DIRECTIONS = ("read", "write", "trim")
# fio's rw= values (the part before a ':' offset modifier) and the directions they do I/O in.
RW_DIRECTIONS = {
    "read": ("read",), "randread": ("read",),
    "write": ("write",), "randwrite": ("write",),
    "trim": ("trim",), "randtrim": ("trim",),
    "rw": ("read", "write"), "readwrite": ("read", "write"), "randrw": ("read", "write"),
    "trimwrite": ("trim", "write"), "randtrimwrite": ("trim", "write"),
}
# fio's option names that have an alias (fio's options.c).
_ALIASES = {"readwrite": "rw", "wait_for_previous": "stonewall"}
_DEFAULT_PERCENTILES = (1, 5, 10, 20, 30, 40, 50, 60, 70, 80, 90, 95, 99, 99.5, 99.9, 99.95, 99.99)


class JobError(Exception):
    pass


def prepare(job: str, log_avg_msec: int, runtime: int | None = None) -> str:
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


def seconds(job: str) -> int:
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
        if m:
            v = m.group(2).strip()
        elif r:
            v = r.group(1).strip()
        else:
            continue
        times = groups if section == "global" else 1
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


def job_names(job: str) -> list[str]:
    """Names of the job sections, in order ([global] left out)."""
    return [m.group(1) for m in map(_SECTION.match, job.splitlines()) if m and m.group(1) != "global"]


# --- what fio reports --------------------------------------------------------------------
@dataclass
class Reported:
    """What fio's JSON output holds under one job name, as report.py reads it (the entries
    of one name added up): the directions with I/O, and which percentiles it has."""
    name: str
    sections: list[str] = field(default_factory=list)     # the job sections reported under it
    dirs: set[str] = field(default_factory=set)
    rw: list[str] = field(default_factory=list)           # the rw= values behind dirs
    percentiles: set[float] | None = field(default_factory=lambda: set[float]())     # None: not known, any
    total_latency: bool = False                           # fio's lat_ns mean (metric tlat)


@dataclass
class _Thread:
    """One of fio's jobs (a section, or one of its numjobs clones) as its stat.c sees it."""
    name: str
    section: str
    group: int
    opts: dict[str, str]


def _fio_lines(job: str) -> list[str]:
    """The job's lines as fio's ini parser reads them: a ';' or '#' starts a comment
    anywhere, blanks around are dropped, empty lines left out."""
    out = []
    for ln in job.splitlines():
        ln = re.split(r"[;#]", ln, maxsplit=1)[0].strip()
        if ln:
            out.append(ln)
    return out


def _flag(opts: dict[str, str], key: str, default: bool) -> bool:
    """A boolean option of fio (`key`, `key=1`, `key=0`); a value fio would refuse counts
    as set."""
    if key not in opts:
        return default
    v = opts[key]
    return v == "" or not re.fullmatch(r"[+-]?0+", v)


def _int(opts: dict[str, str], key: str, default: int) -> int | None:
    """An integer option; None when it is no plain number (fio expressions, $ncpus)."""
    v = opts.get(key, str(default))
    return int(v) if re.fullmatch(r"[0-9]+", v) else None


def _threads(job: str) -> list[_Thread] | None:
    """fio's jobs in the order it creates them (init.c): each section's options over the
    [global] sections above it, numjobs clones right after their section, and the reporting
    group each is in (a stonewall or new_group starts one). None when the job includes
    other files."""
    glob: dict[str, str] = {}
    out: list[_Thread] = []
    group, in_group = 0, 0
    section: str | None = None
    own: dict[str, str] = {}
    opts: dict[str, str] = {}

    def close() -> None:
        nonlocal group, in_group
        if section is None or section.startswith("global"):
            return
        if (_flag(opts, "stonewall", False) or _flag(opts, "new_group", False)) and in_group:
            group, in_group = group + 1, 0
        n = _int(opts, "numjobs", 1)
        out.append(_Thread(own.get("name") or section, section, group, opts))
        in_group += 1
        # Clones are named after the section (get_new_job()), whatever name= says.
        clone = dict(opts, stonewall="0", new_group="0")
        for _ in range(1, n if n is not None else 2):
            out.append(_Thread(section, section, group, clone))
            in_group += 1

    for ln in _fio_lines(job):
        if ln.startswith("["):
            close()
            section = ln[1:-1]        # fio drops the line's last character, the ']'
            own = {}
            opts = glob if section.startswith("global") else dict(glob)
            continue
        if ln.startswith("include"):
            return None
        if section is None:
            continue                  # fio refuses the job; nothing to report
        k, eq, v = ln.partition("=")
        k = _ALIASES.get(k.strip(), k.strip())
        opts[k] = v.strip() if eq else ""
        own[k] = opts[k]
    close()
    return out


def _directions(opts: dict[str, str]) -> tuple[set[str], str]:
    """The directions a job does I/O in, and its rw= value; all of them when not known."""
    rw = opts.get("rw", "read")
    kind = re.split(r"[:,]", rw, maxsplit=1)[0].strip()
    if kind not in RW_DIRECTIONS:
        return set(DIRECTIONS), rw           # ${VAR}, or a value fio refuses
    dirs = set(RW_DIRECTIONS[kind])
    if dirs == {"read", "write"}:
        read_pct: int | None = 50
        for k, v in opts.items():            # the last of rwmixread / rwmixwrite wins
            if k in ("rwmixread", "rwmixwrite") and re.fullmatch(r"[0-9]+", v):
                read_pct = int(v) if k == "rwmixread" else 100 - int(v)
        if read_pct == 100:
            dirs = {"read"}
        elif read_pct == 0:
            dirs = {"write"}
    if "write" in dirs and opts.get("verify", "0") not in ("0", "") and _flag(opts, "do_verify", True):
        dirs.add("read")                     # the verify phase reads back what was written
        if _int(opts, "trim_percentage", 0) != 0:
            dirs.add("trim")
    return dirs, rw


def _percentiles(opts: dict[str, str]) -> set[float] | None:
    """The completion latency percentiles fio reports for a job (clat_ns or lat_ns)."""
    clat = _flag(opts, "clat_percentiles", True) and not _flag(opts, "disable_clat", False)
    lat = _flag(opts, "lat_percentiles", False) and not _flag(opts, "disable_lat", False)
    if not clat and not lat:
        return set()
    items = opts.get("percentile_list")
    if items is None:
        return set(float(x) for x in _DEFAULT_PERCENTILES)
    try:
        return {float(x) for x in re.split(r"[:,]", items) if x.strip()}
    except ValueError:
        return None


def reported(job: str) -> dict[str, Reported] | None:
    """What fio's JSON output will hold for the job, by job name, as report.py reads it:
    a job's numjobs clones each have an entry of the same name, which report.py adds up;
    with group_reporting, the jobs of one reporting group share one entry named after the
    group's first job (fio's stat.c). None when it cannot be told (the job includes files)."""
    threads = _threads(job)
    if threads is None:
        return None
    entries: list[list[_Thread]] = []
    last_group = -1
    for t in threads:
        if not _flag(t.opts, "stats", True):
            continue
        if not entries or not _flag(t.opts, "group_reporting", False) or last_group != t.group:
            entries.append([])
        last_group = t.group
        entries[-1].append(t)
    out: dict[str, Reported] = {}
    for entry in entries:
        r = out.setdefault(entry[0].name, Reported(entry[0].name))
        for t in entry:
            dirs, rw = _directions(t.opts)
            r.dirs |= dirs
            if f"rw={rw}" not in r.rw:
                r.rw.append(f"rw={rw}")
            if t.section not in r.sections:
                r.sections.append(t.section)
        # One entry carries the percentile settings of its last job (stat.c).
        pct = _percentiles(entry[-1].opts)
        r.percentiles = None if pct is None or r.percentiles is None else r.percentiles | pct
        r.total_latency = r.total_latency or any(not _flag(t.opts, "disable_lat", False) for t in entry)
    return out
