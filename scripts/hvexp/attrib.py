"""Per-IO latency attribution (trace = on): where an I/O's completion latency goes.

The guest records the block and SCSI tracepoints of every request on one clock (tracefs,
trace_clock=mono): block_bio_queue (Q, the bio enters the block layer), block_getrq (G, it
has a request: a scheduler or driver tag), block_rq_insert (I, into the scheduler),
block_rq_issue (D, handed to the driver: budget and driver tag held),
scsi_dispatch_cmd_start (S, to the low-level driver), scsi_dispatch_cmd_done (C, the driver
completed it), block_rq_complete (X). QEMU records, on the host's clock, each SRB's arrival
on our ring and its completion written to the ring (hvstor_storvsp_srb_submit/complete).

Parts, in ms, per variant and direction (fio jobs of E1 and E2 each have their own):
  tag       Q -> G   waiting for a request (tag) and its allocation
  sched     G -> D   in the scheduler, waiting for budget and a driver tag (I between)
  scsi      D -> S   the SCSI midlayer
  device    S -> C   the low-level driver and the device; for hv-storvsc split into
     host       arrival on our ring -> completion written (the modelled disk: queue, service)
     transport  the rest: storvsc to our ring, our interrupt to storvsc's completion
  complete  C -> X   completion in the guest
  wake      X -> the submitting fio thread runs again, when it was asleep (sched_switch);
            not known for I/O a kernel worker submitted (io_uring's io-wq, a kworker)
  fio       fio's mean completion latency minus the traced parts (syscalls, fio itself)
Requests are matched by direction and sector, and a bio to its request also by the
submitting task; requests the trace saw only in part (merged bios, a full buffer, still
queued when fio stopped) are left out and counted.
"""

import collections
import gzip
import os
import re
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NotRequired, TextIO, TypedDict

PARTS = ("tag", "sched", "scsi", "host", "transport", "complete", "wake")
PART_NAMES = {
    "tag": "waiting for a tag",
    "sched": "scheduler, budget, driver tag",
    "scsi": "SCSI midlayer",
    "host": "host: our ring to completion (model queue + service)",
    "transport": "storvsc to ring, interrupt to completion",
    "device": "device (scsi_debug: its delay)",
    "complete": "completion in the guest",
    "wake": "waking fio",
}
_LINE = re.compile(r"^\s*(?P<comm>.*?)-(?P<pid>\d+)\s+(?:\(\s*[-\d]+\)\s+)?\[(?P<cpu>\d+)\]\s+(?:\S+\s+)?"
                   r"(?P<ts>\d+\.\d+):\s+(?P<event>\w+):\s+(?P<body>.*)$")
_BLOCK = re.compile(r"^(?P<dev>\d+,\d+)\s+(?P<rwbs>[A-Z]+)\s+(?:\d+\s+)?(?:\([^)]*\)\s+)?(?P<sector>\d+)\s+\+\s+(?P<nr>\d+)")
_SCSI = re.compile(r"cmnd=\((?P<op>[A-Z_0-9]+)\s+lba=(?P<lba>\d+)\s+txlen=(?P<txlen>\d+)")
_SWITCH = re.compile(r"prev_pid=(?P<prev>\d+) .*prev_state=(?P<state>\S+) ==> next_comm=.* next_pid=(?P<next>\d+)")
_HOST = re.compile(r"^\d+@(?P<s>\d+)\.(?P<us>\d+):hvstor_storvsp_srb_(?P<ev>submit|complete)\s+relid (?P<relid>\d+) id (?P<id>0x[0-9a-f]+)"
                   r"(?: lun \d+ opcode (?P<op>0x[0-9a-f]+))?")
MERGES = {"block_bio_backmerge": "bio", "block_bio_frontmerge": "bio", "block_rq_merge": "rq"}
STAGES = {"block_bio_queue": "Q", "block_getrq": "G", "block_rq_insert": "I", "block_rq_issue": "D",
          "scsi_dispatch_cmd_start": "S", "scsi_dispatch_cmd_done": "C", "block_rq_complete": "X"}
ORDER = "QGIDSCX"
READ_OPS = {0x08, 0x28, 0x88, 0xA8}
WRITE_OPS = {0x0A, 0x2A, 0x8A, 0xAA}


@dataclass
class Request:
    """One request's chain through the guest: the seconds of the stages seen (QGIDSCX and
    W, the submitter running again), the task that queued its bio."""
    stages: dict[str, float] = field(default_factory=dict)
    pid: str = ""
    no_wake: bool = False       # submitted by a kernel worker, or no sched_switch seen

    def __getitem__(self, stage: str) -> float:
        return self.stages[stage]

    def __contains__(self, stage: object) -> bool:
        return stage in self.stages


Parts = dict[str, float]        # part -> ms, and "n" (requests), "host_n" (SRBs)


class RunAttribution(TypedDict):
    parts: dict[str, Parts]     # direction -> its parts
    partial: int
    lost: int
    error: NotRequired[str]


def _direction(rwbs: str) -> str | None:
    if "D" in rwbs:
        return "trim"
    if "W" in rwbs:
        return "write"
    if "R" in rwbs:
        return "read"
    return None


def _scsi_direction(op: str) -> str | None:
    if op.startswith("READ"):
        return "read"
    if op.startswith("WRITE") and "SAME" not in op:
        return "write"
    if op == "UNMAP":
        return "trim"
    return None


class _GuestTrace:
    """The state of parse_guest(): requests under way by direction and sector, those
    complete, and which tasks sleep."""

    def __init__(self) -> None:
        self.open: collections.defaultdict[tuple[str | None, int], collections.deque[Request]] = \
            collections.defaultdict(collections.deque)      # (dir, sector) -> requests
        self.done: list[tuple[str, Request]] = []
        self.partial = 0
        self.switches = False
        self.asleep: dict[str, bool] = {}                   # pid -> asleep?
        self.waiting: collections.defaultdict[str, list[Request]] = \
            collections.defaultdict(list)                   # pid -> completed, not yet awake

    def switch(self, m: re.Match[str]) -> None:
        """sched_switch: who sleeps, and the requests whose submitter runs again."""
        s = _SWITCH.search(m.group("body"))
        if not s:
            return
        self.switches = True
        ts = float(m.group("ts"))
        self.asleep[s.group("prev")] = s.group("state") not in ("R", "R+")
        nxt = s.group("next")
        self.asleep[nxt] = False
        for woken in self.waiting.pop(nxt, []):
            woken.stages["W"] = ts

    def merge(self, m: re.Match[str]) -> None:
        """A bio that joined a request, or a request absorbed by another: its own chain
        ends here (the request it joined carries on)."""
        b = _BLOCK.match(m.group("body"))
        if not b:
            return
        q = self.open[(_direction(b.group("rwbs")), int(b.group("sector")))]
        if MERGES[m.group("event")] == "bio":
            # A bio still waiting for a request, queued by this task (a kernel worker's bio
            # is not matched here).
            gone = next((r for r in q if set(r.stages) <= {"Q"} and not r.no_wake and r.pid == m.group("pid")), None)
        else:
            gone = next((r for r in q if "G" in r and "D" not in r), None)
        if gone is not None:
            q.remove(gone)
            self.partial += 1

    def stage(self, m: re.Match[str]) -> None:
        """One of the STAGES of a request."""
        stage, ts, body = STAGES[m.group("event")], float(m.group("ts")), m.group("body")
        d: str | None
        if stage in "SC":
            s = _SCSI.search(body)
            if not s:
                return
            d = _scsi_direction(s.group("op"))
            key = (d, int(s.group("lba")))          # 512-byte logical blocks: lba = sector
        else:
            b = _BLOCK.match(body)
            if not b or int(b.group("nr")) == 0:
                return
            d = _direction(b.group("rwbs"))
            key = (d, int(b.group("sector")))
        if d is None:
            return
        q = self.open[key]
        if stage == "Q":
            # Submitted by a kernel worker (io_uring's io-wq when a request had to wait, a
            # kworker): the task that reaps it is another one, its wake-up is not known.
            worker = m.group("comm").strip().startswith(("iou-", "kworker"))
            q.append(Request({"Q": ts}, m.group("pid"), worker))
            return
        idx = ORDER.index(stage)
        fits = [r for r in q if stage not in r and all(ORDER.index(k) < idx for k in r.stages if k in ORDER)]
        if stage == "G":
            # block_getrq runs in the submitting task, as block_bio_queue did: two jobs that
            # read the same sectors (numjobs clones) are told apart by it.
            fits = [r for r in fits if r.pid == m.group("pid")] or fits
        elif stage != "I":
            fits = [r for r in fits if "G" in r]    # a request, not a bio still waiting for one
        req = fits[0] if fits else None
        if req is None:
            req = Request()
            q.append(req)
        req.stages[stage] = ts
        if stage == "X":
            q.remove(req)
            self.complete(d, req, ts)

    def complete(self, d: str, req: Request, ts: float) -> None:
        """A request's block_rq_complete (ts): done when its chain is whole."""
        if not all(k in req for k in "QDSCX"):
            self.partial += 1
            return
        self.done.append((d, req))
        # The submitter sleeps waiting for it: the part until it runs is "wake".
        if req.no_wake:
            pass
        elif self.asleep.get(req.pid):
            self.waiting[req.pid].append(req)
        else:
            req.stages["W"] = ts


def parse_guest(lines: Iterable[str]) -> tuple[list[tuple[str, Request]], int]:
    """Complete requests from the guest's trace text: (direction, request), and how many
    were seen only in part."""
    t = _GuestTrace()
    for ln in lines:
        m = _LINE.match(ln)
        if not m:
            continue
        if m.group("event") == "sched_switch":
            t.switch(m)
        elif m.group("event") in MERGES:
            t.merge(m)
        elif m.group("event") in STAGES:
            t.stage(m)
    t.partial += sum(len(q) for q in t.open.values())
    if not t.switches:                      # no sched_switch events: nothing known of waking
        for _, req in t.done:
            req.stages.pop("W", None)
            req.no_wake = True
    return t.done, t.partial


def parse_host(lines: Iterable[str]) -> dict[str, list[float]]:
    """Seconds from each SRB's arrival to its completion, by direction."""
    pending: dict[tuple[str, str], tuple[float, str | None]] = {}
    out: collections.defaultdict[str, list[float]] = collections.defaultdict(list)
    for ln in lines:
        m = _HOST.match(ln)
        if not m:
            continue
        t = int(m.group("s")) + int(m.group("us")) / 1e6
        key = (m.group("relid"), m.group("id"))
        if m.group("ev") == "submit":
            op = int(m.group("op"), 16)
            d = "read" if op in READ_OPS else "write" if op in WRITE_OPS else "trim" if op == 0x42 else None
            pending[key] = (t, d)
        elif key in pending:
            t0, d = pending.pop(key)
            if d:
                out[d].append(t - t0)
    return out


def parts_of(req: Request) -> dict[str, float]:
    g = req.stages.get("G", req["Q"])
    out = {"tag": g - req["Q"], "sched": req["D"] - g, "scsi": req["S"] - req["D"],
           "device": req["C"] - req["S"], "complete": req["X"] - req["C"]}
    if not req.no_wake:
        out["wake"] = req.stages.get("W", req["X"]) - req["X"]
    return out


def attribute(guest_reqs: list[tuple[str, Request]], host: dict[str, list[float]] | None = None) -> dict[str, Parts]:
    """Mean parts in ms per direction: {dir: {part: ms, "n": count}}."""
    sums: collections.defaultdict[str, collections.defaultdict[str, float]] = \
        collections.defaultdict(lambda: collections.defaultdict(float))
    n: collections.Counter[str] = collections.Counter()
    for d, req in guest_reqs:
        for k, v in parts_of(req).items():
            sums[d][k] += v
        n[d] += 1
    out: dict[str, Parts] = {}
    for d in sums:
        p = {k: v / n[d] * 1e3 for k, v in sums[d].items()}
        if host and host.get(d):
            h = sum(host[d]) / len(host[d]) * 1e3
            p["host"] = h
            p["transport"] = p.pop("device") - h
            p["host_n"] = len(host[d])
        p["n"] = n[d]
        out[d] = p
    return out


def _open(path: str) -> TextIO:
    if path.endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8", errors="replace")
    return open(path, encoding="utf-8", errors="replace")


def run_attribution(run_dir: str) -> RunAttribution | None:
    """Attribution of one run folder, or None when it was not traced."""
    gpath = os.path.join(run_dir, "results", "trace.txt.gz")
    if not os.path.isfile(gpath):
        return None
    try:
        with _open(gpath) as f:
            reqs, partial = parse_guest(f)
        host = None
        hpath = os.path.join(run_dir, "host-trace.log")
        if os.path.isfile(hpath):
            with _open(hpath) as f:
                host = parse_host(f)
    except (OSError, EOFError, zlib.error, UnicodeError) as e:
        return {"parts": {}, "partial": 0, "lost": 0, "error": f"{gpath}: {e}"}
    overrun = 0
    try:
        with open(os.path.join(run_dir, "results", "trace-stats"), encoding="utf-8") as f:
            overrun = sum(int(x) for x in re.findall(r"(?:overrun|dropped events): (\d+)", f.read()))
    except OSError:
        pass
    return {"parts": attribute(reqs, host), "partial": partial, "lost": overrun}
