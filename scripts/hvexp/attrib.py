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
import zlib
import os
import re

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


def _direction(rwbs):
    if "D" in rwbs:
        return "trim"
    if "W" in rwbs:
        return "write"
    if "R" in rwbs:
        return "read"
    return None


def _scsi_direction(op):
    if op.startswith("READ"):
        return "read"
    if op.startswith("WRITE") and "SAME" not in op:
        return "write"
    if op == "UNMAP":
        return "trim"
    return None


def parse_guest(lines):
    """Complete requests from the guest's trace text: (direction, {stage: seconds}), and
    how many were seen only in part."""
    open_ = collections.defaultdict(collections.deque)     # (dir, sector) -> requests
    done, partial = [], 0
    switches = False
    asleep, waiting = {}, collections.defaultdict(list)    # pid -> asleep?; pid -> completed, not yet awake
    for ln in lines:
        m = _LINE.match(ln)
        if not m:
            continue
        if m.group("event") == "sched_switch":
            s = _SWITCH.search(m.group("body"))
            if s:
                switches = True
                ts = float(m.group("ts"))
                asleep[s.group("prev")] = s.group("state") not in ("R", "R+")
                nxt = s.group("next")
                asleep[nxt] = False
                for req in waiting.pop(nxt, []):
                    req["W"] = ts
            continue
        if m.group("event") in MERGES:
            # A bio that joined a request, or a request absorbed by another: its own chain
            # ends here (the request it joined carries on).
            b = _BLOCK.match(m.group("body"))
            if b:
                q = open_[(_direction(b.group("rwbs")), int(b.group("sector")))]
                if MERGES[m.group("event")] == "bio":
                    gone = next((r for r in q if set(r) <= {"Q", "pid"} and r.get("pid") == m.group("pid")), None)
                else:
                    gone = next((r for r in q if "G" in r and "D" not in r), None)
                if gone is not None:
                    q.remove(gone)
                    partial += 1
            continue
        if m.group("event") not in STAGES:
            continue
        stage, ts, body = STAGES[m.group("event")], float(m.group("ts")), m.group("body")
        if stage in "SC":
            s = _SCSI.search(body)
            if not s:
                continue
            d = _scsi_direction(s.group("op"))
            key = (d, int(s.group("lba")))          # 512-byte logical blocks: lba = sector
        else:
            b = _BLOCK.match(body)
            if not b or int(b.group("nr")) == 0:
                continue
            d = _direction(b.group("rwbs"))
            key = (d, int(b.group("sector")))
        if d is None:
            continue
        q = open_[key]
        if stage == "Q":
            # Submitted by a kernel worker (io_uring's io-wq when a request had to wait, a
            # kworker): the task that reaps it is another one, its wake-up is not known.
            worker = m.group("comm").strip().startswith(("iou-", "kworker"))
            q.append({"Q": ts, "pid": m.group("pid"), **({"no_wake": True} if worker else {})})
            continue
        idx = ORDER.index(stage)
        fits = [r for r in q if stage not in r and all(ORDER.index(k) < idx for k in r if k in ORDER)]
        if stage == "G":
            # block_getrq runs in the submitting task, as block_bio_queue did: two jobs that
            # read the same sectors (numjobs clones) are told apart by it.
            fits = [r for r in fits if r.get("pid") == m.group("pid")] or fits
        elif stage != "I":
            fits = [r for r in fits if "G" in r]    # a request, not a bio still waiting for one
        req = fits[0] if fits else None
        if req is None:
            req = {}
            q.append(req)
        req[stage] = ts
        if stage == "X":
            q.remove(req)
            if all(k in req for k in "QDSCX"):
                done.append((d, req))
                # The submitter sleeps waiting for it: the part until it runs is "wake".
                if req.get("no_wake"):
                    pass
                elif asleep.get(req["pid"]):
                    waiting[req["pid"]].append(req)
                else:
                    req["W"] = ts
            else:
                partial += 1
    partial += sum(len(q) for q in open_.values())
    if not switches:                        # no sched_switch events: nothing known of waking
        for _, req in done:
            req.pop("W", None)
            req["no_wake"] = True
    return done, partial


def parse_host(lines):
    """Seconds from each SRB's arrival to its completion, by direction."""
    pending, out = {}, collections.defaultdict(list)
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


def parts_of(req):
    g = req.get("G", req["Q"])
    out = {"tag": g - req["Q"], "sched": req["D"] - g, "scsi": req["S"] - req["D"],
           "device": req["C"] - req["S"], "complete": req["X"] - req["C"]}
    if not req.get("no_wake"):
        out["wake"] = req.get("W", req["X"]) - req["X"]
    return out


def attribute(guest_reqs, host=None):
    """Mean parts in ms per direction: {dir: {part: ms, "n": count}}."""
    sums = collections.defaultdict(lambda: collections.defaultdict(float))
    n = collections.Counter()
    for d, req in guest_reqs:
        for k, v in parts_of(req).items():
            sums[d][k] += v
        n[d] += 1
    out = {}
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


def _open(path):
    if path.endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8", errors="replace")
    return open(path, encoding="utf-8", errors="replace")


def run_attribution(run_dir):
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
