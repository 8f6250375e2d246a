"""A spec's timeline: host events and guest commands at times relative to the start of the
fio job (docs/experiments.md, "Timeline").

    timeline = <<END
    # AT    WHAT        TARGET  VALUE
    10s     fault       disk0   error=medium,ops=read,lba=0-99
    20s     fault       disk0   none
    15s     capacity    disk0   96M
    25s     hot-remove  disk1
    30s     hot-add     spare               # a [disk spare] with plug = timeline
    35s     set         scsi0   PROPERTY VALUE
    12s     guest       echo 30 > /sys/block/$DISK0_NAME/device/timeout
    END

The guest prints HVSTOR-FIO-START just before fio starts; the host takes that as time 0 and
drives its events over QMP at their times, recording when each happened; the guest runs
its own commands itself, from the same moment, in the background. After fio the guest
waits for its commands and for the host's last event (a line on its console) before it
sends its results, so an event timed after fio's end still happens.
"""

from __future__ import annotations

import re
import shlex
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

from hvmachine.guest import Disk
from hvmachine.machine import Machine

FIO_START = "HVSTOR-FIO-START"
HOST_WAIT = "HVSTOR-TIMELINE-WAIT"
HOST_ACTIONS = ("fault", "capacity", "hot-remove", "hot-add", "set")
ACTIONS = HOST_ACTIONS + ("guest",)
_AT = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(ms|s)$")
_SIZE = re.compile(r"^[0-9]+[KMGT]?$")


class TimelineError(Exception):
    """A mistake in a timeline line; `offset` is the line's index in the timeline text."""

    def __init__(self, offset: int, message: str) -> None:
        super().__init__(message)
        self.offset = offset


@dataclass
class Event:
    at: float                   # seconds after fio's start
    action: str
    target: str = ""            # a disk (its id or [disk NAME]), a controller; "" for guest
    value: str = ""
    offset: int = 0             # line index in the timeline text, for messages
    text: str = ""              # the line as written

    def describe(self) -> str:
        return self.text


@dataclass
class Targets:
    """What a timeline may name: disk names to QEMU ids (plugged at boot or not), the
    controllers."""
    disks: Dict[str, str] = field(default_factory=dict)        # name or id -> QEMU id
    plug_later: Dict[str, Disk] = field(default_factory=dict)  # QEMU id -> the disk hot-add plugs
    controllers: List[str] = field(default_factory=lambda: ["scsi0"])
    luns: Dict[str, int] = field(default_factory=dict)         # QEMU id -> LUN


def parse(text: str, targets: Targets) -> List[Event]:
    """The events of a timeline, in time order (stable for equal times); TimelineError at
    the first mistake."""
    events = []
    for offset, raw in enumerate(text.splitlines()):
        line = _strip_comment(raw)
        if line:
            events.append(_event(offset, line, targets))
    _check_plugs(events, targets)
    return sorted(events, key=lambda e: e.at)


def first_host_event(text: str) -> Optional[int]:
    """The offset of a timeline's first line that asks for a host event, mistakes or not
    (for variants that can have none); None when it has none."""
    for offset, raw in enumerate(text.splitlines()):
        parts = _strip_comment(raw).split()
        if len(parts) >= 2 and parts[1] in HOST_ACTIONS:
            return offset
    return None


def _strip_comment(raw: str) -> str:
    return re.sub(r"(^|\s)#.*$", "", raw).strip()


def _event(offset: int, line: str, targets: Targets) -> Event:
    parts = line.split(None, 2)
    if len(parts) < 2:
        raise TimelineError(offset, f"'{line}': want AT WHAT [TARGET [VALUE]] (e.g. 10s fault disk0 error=medium)")
    m = _AT.match(parts[0])
    if not m:
        raise TimelineError(offset, f"'{parts[0]}' is no time after fio's start (as 10s, 1.5s or 500ms)")
    at = float(m.group(1)) / (1000 if m.group(2) == "ms" else 1)
    action = parts[1]
    if action not in ACTIONS:
        raise TimelineError(offset, f"'{action}' is not one of {', '.join(ACTIONS)}")
    rest = parts[2] if len(parts) > 2 else ""
    if action == "guest":
        if not rest:
            raise TimelineError(offset, "guest wants a shell command")
        return Event(at, action, "", rest, offset, line)
    words = rest.split(None, 1)         # blanks or tabs between the columns
    target = words[0] if words else ""
    value = words[1].strip() if len(words) > 1 else ""
    ev = Event(at, action, target, value, offset, line)
    _check_target(ev, targets)
    return ev


def _check_target(ev: Event, targets: Targets) -> None:
    if ev.action == "set":
        if ev.target not in targets.controllers and ev.target not in targets.disks:
            raise TimelineError(ev.offset, f"set: no disk or controller '{ev.target}' (disks: "
                                f"{', '.join(sorted(targets.disks))}; controllers: {', '.join(targets.controllers)})")
        if len(ev.value.split(None, 1)) != 2:
            raise TimelineError(ev.offset, "set wants TARGET PROPERTY VALUE")
        return
    if ev.target not in targets.disks:
        raise TimelineError(ev.offset, f"{ev.action}: no disk '{ev.target}' (the spec's disks: "
                            f"{', '.join(sorted(targets.disks)) or 'none'})")
    later = targets.disks[ev.target] in targets.plug_later
    if ev.action == "hot-add" and not later:
        raise TimelineError(ev.offset, f"hot-add {ev.target}: the disk is plugged at boot; give its [disk] "
                            "section plug = timeline")
    if ev.action == "capacity" and not _SIZE.match(ev.value):
        raise TimelineError(ev.offset, f"capacity wants a size (as 96M or 100663296), got '{ev.value}'")
    if ev.action == "fault" and not ev.value:
        raise TimelineError(ev.offset, "fault wants a fault setting (docs/fault-injection.md) or none")
    if ev.action in ("hot-remove", "hot-add") and ev.value:
        raise TimelineError(ev.offset, f"{ev.action} takes a disk and nothing more, got '{ev.value}'")


def _check_plugs(events: List[Event], targets: Targets) -> None:
    """A disk plugged later is added once, before anything else is done to it."""
    added: Dict[str, float] = {}
    for ev in sorted(events, key=lambda e: e.at):
        qid = targets.disks.get(ev.target, "")
        if ev.action == "hot-add":
            if qid in added:
                raise TimelineError(ev.offset, f"hot-add {ev.target} again")
            added[qid] = ev.at
        elif qid in targets.plug_later and qid not in added and ev.action != "guest":
            raise TimelineError(ev.offset, f"{ev.action} {ev.target} before its hot-add")


# --- the guest's part ------------------------------------------------------------------
def guest_script(events: List[Event]) -> str:
    """Shell that defines timeline_start: it starts the guest's commands, each in the
    background after its time (sleep, from the call), each from a file of its own (a
    here-document: the command's text is never interpreted on the way), its line as written
    and its output and exit status in $R/timeline-guest.log, and adds its pid to
    $TIMELINE_PIDS, which the guest script waits for after fio."""
    out = ["timeline_start() {"]
    guest = [e for e in events if e.action == "guest"]
    for i, e in enumerate(guest):
        out += [f"  cat > /tmp/hvstor-timeline-{i} <<'HVSTOR_TIMELINE_END'", e.value, "HVSTOR_TIMELINE_END",
                f"  ( sleep {e.at:g}; printf '[%s] at %ss: %s\\n' \"$(cut -d' ' -f1 /proc/uptime)\" {e.at:g} {shlex.quote(e.value)};"
                f" sh /tmp/hvstor-timeline-{i}; st=$?; echo \"[$(cut -d' ' -f1 /proc/uptime)] exit status $st\" )"
                " >> \"$R/timeline-guest.log\" 2>&1 &",
                "  TIMELINE_PIDS=\"$TIMELINE_PIDS $!\""]
    out += ["  :", "}"]
    return "\n".join(out) + "\n"


# --- the host's part -------------------------------------------------------------------
@dataclass
class Done:
    """An event as it happened: when (seconds after fio's start, by the host's clock) and
    with what result."""
    event: Event
    done_at: Optional[float] = None
    result: str = "not reached"

    def as_json(self) -> Dict[str, Any]:
        e = self.event
        return {"at": e.at, "action": e.action, "target": e.target, "value": e.value,
                "done_at": None if self.done_at is None else round(self.done_at, 3), "result": self.result}


def drive(m: Machine, events: List[Event], targets: Targets, log: Callable[[str], None]) -> List[Done]:
    """Drives the host's events of a timeline on a running guest: waits for fio's start,
    then each event at its time; answers the guest's wait for the last one. The record of
    each event, in time order (guest commands are the guest's own: not in it)."""
    host = [Done(e) for e in events if e.action in HOST_ACTIONS]
    if not host:
        return []
    m.wait_console(FIO_START)
    t0 = time.monotonic()
    for d in host:
        delay = t0 + d.event.at - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        d.done_at = time.monotonic() - t0
        d.result = _apply(m, d.event, targets)
        log(f"timeline: at {d.done_at:.1f}s (planned {d.event.at:g}s): {d.event.describe()}: {d.result}")
    m.wait_console(HOST_WAIT)
    plugged, removed = end_state(host, targets)
    m.console_input(f"go {','.join(map(str, plugged)) or '-'} {','.join(map(str, removed)) or '-'}\n")
    return host


def end_state(done: List[Done], targets: Targets) -> Tuple[List[int], List[int]]:
    """The LUNs the host's events left plugged and removed (events QEMU refused change
    nothing), for the guest to wait for."""
    state: Dict[int, bool] = {}
    for d in done:
        if d.event.action in ("hot-add", "hot-remove") and d.result == "ok":
            state[targets.luns[targets.disks[d.event.target]]] = d.event.action == "hot-add"
    return sorted(k for k, x in state.items() if x), sorted(k for k, x in state.items() if not x)


def _apply(m: Machine, ev: Event, targets: Targets) -> str:
    """One host event over QMP; "ok" or QEMU's refusal (which the report shows; the run
    goes on, as the guest's view of a refused event is what the expectations judge)."""
    from qemu.qmp import ExecuteError  # pylint: disable=import-outside-toplevel
    qid = targets.disks.get(ev.target, ev.target)
    path = f"/machine/peripheral/{qid}"
    try:
        if ev.action in ("fault", "capacity"):
            value: object = _size(ev.value) if ev.action == "capacity" else ev.value
            m.qmp("qom-set", path=path, property=ev.action, value=value)
        elif ev.action == "set":
            prop, value = ev.value.split(None, 1)
            m.qmp("qom-set", path=path, property=prop, value=_typed(value))
        elif ev.action == "hot-remove":
            m.device_del(qid)
        elif ev.action == "hot-add":
            d = targets.plug_later[qid]
            props = {k: _size(str(v)) if k in ("size", "capacity") and _SIZE.match(str(v)) else v
                     for k, v in d.props.items()}
            m.qmp("device_add", driver="hv-disk", bus="scsi0.0", lun=d.lun, **props)
    except ExecuteError as e:
        return f"refused: {e}"
    return "ok"


def _size(text: str) -> int:
    m = re.match(r"^([0-9]+)([KMGT]?)$", text)
    assert m
    return int(m.group(1)) * 1024 ** " KMGT".index(m.group(2) or " ")


def _typed(text: str) -> object:
    """A QOM property value: a number or on/off as such, else the text."""
    if re.fullmatch(r"-?[0-9]+", text):
        return int(text)
    if text in ("on", "off", "true", "false"):
        return text in ("on", "true")
    return text
