"""A spec's timeline (scripts/hvexp/timeline.py): what it reads as, each mistake refused at
the file and line a user sees through Plan, the guest's part of the script, and the host's
part driven on a stand-in Machine with a stand-in clock (no real time passes)."""

import os
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from conftest import spec_text
from hvexp import plan, spec, timeline

PATH = "/nowhere/my.exp"
SPARE = "[disk spare]\nbackend = null\nsize = 1G\nplug = timeline\n\n"


def tl_spec(*lines: str, stock_extra: str = "", shared_extra: str = "", in_variant: bool = False) -> str:
    """The test spec with a second disk `spare` (plug = timeline) and a timeline of these
    lines, in [experiment] (or in [variant stock])."""
    tl = "timeline = <<END\n" + "\n".join(lines) + "\nEND"
    text = spec_text(exp_extra="" if in_variant else tl,
                     stock_extra=(tl + "\n" if in_variant else "") + stock_extra, shared_extra=shared_extra)
    return text.replace("[variant stock]", SPARE + "[variant stock]")


def make(text: str) -> plan.Plan:
    return plan.Plan(spec.parse(text, PATH))


def refused(text: str, bad_line: str) -> spec.SpecError:
    """The SpecError a plan of text raises, checked to be at the line bad_line."""
    with pytest.raises(spec.SpecError) as e:
        make(text)
    assert e.value.path == PATH
    assert e.value.line == text.splitlines().index(bad_line) + 1, str(e.value)
    assert str(e.value).startswith(f"{PATH}:{e.value.line}: ")
    return e.value


def events(p: plan.Plan, v: str = "stock") -> list[tuple[float, str, str, str]]:
    return [(e.at, e.action, e.target, e.value) for e in p.variants[v].timeline]


# --- what a timeline reads as ----------------------------------------------------------
def test_events_in_time_order_with_units_comments_and_tabs() -> None:
    p = make(tl_spec("# AT  WHAT  TARGET  VALUE",
                     "10s   fault   disk0  error=medium,ops=read,lba=0-99   # a comment",
                     "",
                     "1.5s\tcapacity\tdisk0\t96M",
                     "500ms guest   echo 30 > /sys/block/$DISK0_NAME/device/timeout",
                     "12s   hot-add spare",
                     "12s   capacity spare 2G",
                     "20s   set  scsi0  outstanding\t128",
                     "30s   hot-remove disk1"))
    assert events(p) == [(0.5, "guest", "", "echo 30 > /sys/block/$DISK0_NAME/device/timeout"),
                         (1.5, "capacity", "disk0", "96M"),
                         (10.0, "fault", "disk0", "error=medium,ops=read,lba=0-99"),
                         (12.0, "hot-add", "spare", ""),        # equal times keep the written order
                         (12.0, "capacity", "spare", "2G"),
                         (20.0, "set", "scsi0", "outstanding\t128"),
                         (30.0, "hot-remove", "disk1", "")]
    assert p.variants["shared"].timeline == p.variants["stock"].timeline     # [experiment]'s: every variant's
    assert p.variants["stock"].timeline[2].text == "10s   fault   disk0  error=medium,ops=read,lba=0-99"


def test_a_variants_timeline_is_its_own() -> None:
    p = make(tl_spec("5s hot-remove disk0", in_variant=True))
    assert events(p) == [(5.0, "hot-remove", "disk0", "")]
    assert p.variants["shared"].timeline == []


@pytest.mark.parametrize("bad, message", [
    ("5x fault disk0 none", "'5x' is no time after fio's start (as 10s, 1.5s or 500ms)"),
    ("5 fault disk0 none", "'5' is no time after fio's start"),
    ("5s", "'5s': want AT WHAT [TARGET [VALUE]]"),
    ("5s explode disk0", "'explode' is not one of fault, capacity, hot-remove, hot-add, set, guest"),
    ("5s fault nope none", "fault: no disk 'nope' (the spec's disks: disk0, disk1, spare)"),
    ("5s hot-add disk0", "hot-add disk0: the disk is plugged at boot; give its [disk] section plug = timeline"),
    ("5s capacity disk0", "capacity wants a size (as 96M or 100663296), got ''"),
    ("5s capacity disk0 lots", "capacity wants a size (as 96M or 100663296), got 'lots'"),
    ("5s fault disk0", "fault wants a fault setting (docs/fault-injection.md) or none"),
    ("5s hot-remove disk0 now", "hot-remove takes a disk and nothing more, got 'now'"),
    ("5s set scsi0 outstanding", "set wants TARGET PROPERTY VALUE"),
    ("5s set scsi1 outstanding 4", "set: no disk or controller 'scsi1'"),
    ("5s guest", "guest wants a shell command"),
    ("5s capacity spare 2G", "capacity spare before its hot-add"),
])
def test_each_mistake_is_refused_at_its_line(bad: str, message: str) -> None:
    text = tl_spec("# a comment line", "1s guest true", bad, "9s fault disk0 none")
    e = refused(text, bad)
    assert e.message.startswith(f"variant stock: timeline: {message}")


def test_an_event_on_a_disk_before_its_hot_add_is_refused_whatever_the_order_written() -> None:
    e = refused(tl_spec("8s hot-add spare", "4s fault spare error=medium"), "4s fault spare error=medium")
    assert e.message == "variant stock: timeline: fault spare before its hot-add"
    make(tl_spec("4s hot-add spare", "4s fault spare error=medium"))      # same time, written after: fine


def test_hot_add_twice_is_refused_at_the_second() -> None:
    e = refused(tl_spec("9s hot-add spare", "3s hot-add disk1"), "9s hot-add spare")   # spare is disk1
    assert e.message == "variant stock: timeline: hot-add spare again"


def test_a_mistake_in_a_variants_timeline_names_the_variant() -> None:
    e = refused(tl_spec("5s hot-add spare", "6s set disk0 fault", in_variant=True), "6s set disk0 fault")
    assert e.message == "variant stock: timeline: set wants TARGET PROPERTY VALUE"


def test_a_one_line_timeline_is_on_the_keys_line() -> None:
    text = spec_text(stock_extra="timeline = 5x hot-remove disk0")
    e = refused(text, "timeline = 5x hot-remove disk0")
    assert "'5x' is no time" in e.message
    assert events(make(spec_text(stock_extra="timeline = 5s hot-remove disk0"))) == [(5.0, "hot-remove", "disk0", "")]


@pytest.mark.parametrize("device", ["device = scsi_debug\nscsi-debug = ndelay=1ms", "device = virtio-scsi"])
def test_host_events_need_an_hv_storvsc_variant(device: str) -> None:
    text = tl_spec("# guest commands are fine anywhere", "1s guest true", "3s hot-add spare", "4s fault nope x",
                   stock_extra=device)
    e = refused(text, "3s hot-add spare")
    kind = device.split("\n")[0].split(" = ")[1]
    assert e.message == f"variant stock: timeline: host events act on hv-storvsc's disks: the variant runs on {kind}"
    p = make(tl_spec("1s guest true", stock_extra=device))
    assert events(p) == [(1.0, "guest", "", "true")]


# --- the plan: disks a timeline plugs, the guest script's fields --------------------------
def test_disks_the_timeline_plugs_are_not_booted_nor_waited_for() -> None:
    p = make(tl_spec("5s hot-add spare", "7s hot-remove disk0"))
    var = p.variants["stock"]
    g = p.guest("stock", "/run")
    assert [d.props["id"] for d in g.disks] == ["disk0"] and g.wait_disks == var.wait_disks == 1
    assert list(var.hw.plug_later) == [1] and var.hw.plug_later[1].props == {"id": "disk1", "backend": "null",
                                                                              "size": "1G"}
    t = p.targets("stock")
    assert t.disks == {"disk0": "disk0", "disk1": "disk1", "spare": "disk1"}
    assert list(t.plug_later) == ["disk1"] and t.luns == {"disk0": 0, "disk1": 1}
    script = p.scripts["stock"]
    assert 'LUNS="0"\n' in script and 'ALL_LUNS="0 1"\n' in script
    assert "if [ 1 = 1 ]; then\n  echo \"HVSTOR-TIMELINE-WAIT\"" in script       # host events: wait for the host
    assert "timeline_start() {\n  :\n}" in script                                # no guest commands
    assert var.may_go == {0}                        # the timeline removes disk0; spare is added


def test_a_guest_only_timeline_needs_no_host() -> None:
    p = make(tl_spec("2s guest echo hi"))
    script = p.scripts["stock"]
    assert "if [ 0 = 1 ]; then" in script and "sleep 2;" in script
    assert 'LUNS="0"\n' in script and 'ALL_LUNS="0 1"\n' in script
    assert p.variants["stock"].may_go == {1}        # spare is never plugged: not lost when absent
    ctl = make(tl_spec("2s guest echo hi", stock_extra="device = scsi_debug\nscsi-debug = ndelay=1ms"))
    assert 'LUNS="0"\n' in ctl.scripts["stock"] and 'ALL_LUNS="0"\n' in ctl.scripts["stock"]


def test_plug_mistakes() -> None:
    text = tl_spec("5s hot-add spare").replace("plug = timeline", "plug = later")
    e = refused(text, "plug = later")
    assert e.message == "[disk] plug is boot or timeline, got 'later'"
    text = tl_spec("5s hot-add spare").replace("backend = null\nsize = 1G\nplug", "file = scratch\nsize = 1G\nplug")
    e = refused(text, "plug = timeline")
    assert e.message == "a disk the timeline plugs cannot be file = scratch"
    p = make(tl_spec().replace("plug = timeline", "plug = boot"))
    assert [d.props["id"] for d in p.guest("stock", "/run").disks] == ["disk0", "disk1"]
    assert 'LUNS="0 1"\n' in p.scripts["stock"]


# --- the guest's part -----------------------------------------------------------------
def test_guest_script_a_here_document_per_command() -> None:
    cmd = 'echo "$DISK0_NAME" `uname` \\ it\'s 100% %s'
    evs = timeline.parse(f"3s guest {cmd}\n1.5s guest exit 3\n2s fault disk0 none\n",
                         timeline.Targets({"disk0": "disk0"}))
    lines = timeline.guest_script(evs).splitlines()
    assert lines[0] == "timeline_start() {" and lines[-2:] == ["  :", "}"]
    # In time order; the command between quoted here-document markers, exactly as written.
    assert lines[1:4] == ["  cat > /tmp/hvstor-timeline-0 <<'HVSTOR_TIMELINE_END'", "exit 3", "HVSTOR_TIMELINE_END"]
    assert lines[6:9] == ["  cat > /tmp/hvstor-timeline-1 <<'HVSTOR_TIMELINE_END'", cmd, "HVSTOR_TIMELINE_END"]
    assert lines[4].startswith("  ( sleep 1.5; ") and lines[9].startswith("  ( sleep 3; ")
    # Shown single-quoted (never expanded), run from its file, in the background.
    assert "'echo \"$DISK0_NAME\" `uname` \\ it'\"'\"'s 100% %s'" in lines[9]
    assert lines[9].endswith(' >> "$R/timeline-guest.log" 2>&1 &')
    assert lines[10] == '  TIMELINE_PIDS="$TIMELINE_PIDS $!"'
    assert timeline.guest_script([]) == "timeline_start() {\n  :\n}\n"


def test_guest_script_runs_each_command_as_written(tmp_path: Path) -> None:
    """The fragment run by a POSIX shell: each command runs from its file and the log shows
    it as written, with its output and exit status (times of 0: no waiting)."""
    cmd = 'echo "[$DISK0_NAME]" `echo b` \\$HOME \'%s\'; exit 3'
    evs = timeline.parse(f"0s guest {cmd}\n0ms guest echo second\n", timeline.Targets())
    script = timeline.guest_script(evs).replace("/tmp/", f"{tmp_path}/")
    script += 'TIMELINE_PIDS=\ntimeline_start\nfor p in $TIMELINE_PIDS; do wait "$p"; done\n'
    r = subprocess.run(["sh", "-c", script], env=dict(os.environ, R=str(tmp_path), DISK0_NAME="sdq"),
                       capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr
    log = (tmp_path / "timeline-guest.log").read_text().splitlines()
    # Both start at once: their lines may interleave.
    assert sum(ln.endswith(f"] at 0s: {cmd}") for ln in log) == 1
    assert sum(ln.endswith("] at 0s: echo second") for ln in log) == 1
    assert "[sdq] b $HOME %s" in log and "second" in log
    assert sorted(ln.split("] ", 1)[1] for ln in log if "exit status" in ln) == ["exit status 0", "exit status 3"]
    assert len(log) == 6


# --- the host's part ------------------------------------------------------------------
class Clock:
    """time.monotonic and time.sleep without time passing: sleep moves the clock on."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.slept.append(round(s, 6))
        self.now += s


class Refused(Exception):
    """qemu.qmp's ExecuteError in these tests."""


class FakeMachine:
    """What drive() uses of a Machine: console waits, QMP, device_del, console input. Each
    QMP command takes `cost` seconds of the clock; commands in `refuse` raise."""

    def __init__(self, clock: Clock, refuse: tuple[str, ...] = (), cost: float = 0.0) -> None:
        self.clock, self.refuse, self.cost = clock, refuse, cost
        self.calls: list[tuple[Any, ...]] = []

    def wait_console(self, marker: str) -> str:
        self.calls.append(("wait_console", marker))
        return marker

    def qmp(self, cmd: str, **args: Any) -> Any:
        self.calls.append(("qmp", round(self.clock.now - 1000.0, 6), cmd, args))
        self.clock.now += self.cost
        if cmd in self.refuse or args.get("property") in self.refuse:
            raise Refused(f"{cmd}: refused by the test")
        return {}

    def device_del(self, dev_id: str) -> None:
        self.qmp("device_del", id=dev_id)

    def console_input(self, text: str) -> None:
        self.calls.append(("console_input", text))


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(timeline, "time", c)
    qmp = types.ModuleType("qemu.qmp")
    qmp.ExecuteError = Refused  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "qemu", types.ModuleType("qemu"))
    monkeypatch.setitem(sys.modules, "qemu.qmp", qmp)
    return c


TIMELINE = ["2s fault disk0 error=medium,ops=read", "1s guest echo hi", "6s hot-add spare", "7s capacity spare 2G",
            "8s set scsi0 outstanding 128", "8s set disk0 direct off", "9s hot-remove disk0", "5s fault disk0 none"]


def drive(p: plan.Plan, m: FakeMachine) -> tuple[list[timeline.Done], list[str]]:
    logged: list[str] = []
    done = timeline.drive(m, p.variants["stock"].timeline, p.targets("stock"), logged.append)  # type: ignore[arg-type]
    return done, logged


def test_drive_at_each_events_time(clock: Clock) -> None:
    p = make(tl_spec(*TIMELINE))
    m = FakeMachine(clock)
    done, logged = drive(p, m)
    assert m.calls[0] == ("wait_console", timeline.FIO_START)
    assert m.calls[1:-2] == [
        ("qmp", 2.0, "qom-set", {"path": "/machine/peripheral/disk0", "property": "fault",
                                 "value": "error=medium,ops=read"}),
        ("qmp", 5.0, "qom-set", {"path": "/machine/peripheral/disk0", "property": "fault", "value": "none"}),
        ("qmp", 6.0, "device_add", {"driver": "hv-disk", "bus": "scsi0.0", "lun": 1, "id": "disk1",
                                    "backend": "null", "size": 1 << 30}),
        ("qmp", 7.0, "qom-set", {"path": "/machine/peripheral/disk1", "property": "capacity", "value": 2 << 30}),
        ("qmp", 8.0, "qom-set", {"path": "/machine/peripheral/scsi0", "property": "outstanding", "value": 128}),
        ("qmp", 8.0, "qom-set", {"path": "/machine/peripheral/disk0", "property": "direct", "value": False}),
        ("qmp", 9.0, "device_del", {"id": "disk0"})]
    assert m.calls[-2:] == [("wait_console", timeline.HOST_WAIT), ("console_input", "go 1 0\n")]
    assert [(d.event.action, d.done_at, d.result) for d in done] == [
        ("fault", 2.0, "ok"), ("fault", 5.0, "ok"), ("hot-add", 6.0, "ok"), ("capacity", 7.0, "ok"),
        ("set", 8.0, "ok"), ("set", 8.0, "ok"), ("hot-remove", 9.0, "ok")]      # no guest command
    assert clock.slept == [2.0, 3.0, 1.0, 1.0, 1.0, 1.0]       # no sleep for an event already due
    assert logged[0] == "timeline: at 2.0s (planned 2s): 2s fault disk0 error=medium,ops=read: ok"
    assert done[2].as_json() == {"at": 6.0, "action": "hot-add", "target": "spare", "value": "", "done_at": 6.0,
                                 "result": "ok"}


def test_drive_late_and_refused_events(clock: Clock) -> None:
    """An event due while QEMU was busy runs at once, and its record says when; one QEMU
    refuses is recorded and changes nothing the guest waits for."""
    p = make(tl_spec("1s fault disk0 error=medium", "1.5s hot-add spare", "2s hot-remove disk0"))
    m = FakeMachine(clock, refuse=("device_add",), cost=0.75)
    done, logged = drive(p, m)
    assert [(d.event.action, d.done_at) for d in done] == [("fault", 1.0), ("hot-add", 1.75), ("hot-remove", 2.5)]
    assert [d.result for d in done] == ["ok", "refused: device_add: refused by the test", "ok"]
    assert clock.slept == [1.0]
    assert m.calls[-1] == ("console_input", "go - 0\n")
    assert "timeline: at 1.8s (planned 1.5s): 1.5s hot-add spare: refused: device_add: refused by the test" in logged
    assert done[1].as_json()["done_at"] == 1.75


def test_drive_without_host_events_does_nothing(clock: Clock) -> None:
    p = make(tl_spec("1s guest echo hi"))
    m = FakeMachine(clock)
    assert drive(p, m) == ([], []) and m.calls == [] and clock.slept == []


def test_end_state_counts_what_happened() -> None:
    t = timeline.Targets({"disk0": "disk0", "disk1": "disk1", "spare": "disk1", "disk2": "disk2"}, {},
                         ["scsi0"], {"disk0": 0, "disk1": 1, "disk2": 2})

    def done(action: str, target: str, result: str = "ok") -> timeline.Done:
        return timeline.Done(timeline.Event(0, action, target), 0.0, result)
    assert timeline.end_state([], t) == ([], [])
    assert timeline.end_state([done("hot-add", "spare"), done("hot-remove", "disk0"), done("fault", "disk2")], t) \
        == ([1], [0])
    # Refused events change nothing; the last event on a disk decides.
    assert timeline.end_state([done("hot-add", "spare"), done("hot-remove", "disk1"),
                               done("hot-remove", "disk0", "refused: busy"),
                               done("hot-remove", "disk2"), done("hot-add", "disk2", "not reached")], t) == ([], [1, 2])


def test_property_values_are_typed() -> None:
    assert timeline._typed("128") == 128 and timeline._typed("-1") == -1
    assert timeline._typed("on") is True and timeline._typed("false") is False
    assert timeline._typed("0x10") == "0x10" and timeline._typed("latency=2ms") == "latency=2ms"
    assert timeline._size("96M") == 96 << 20 and timeline._size("100663296") == 100663296
