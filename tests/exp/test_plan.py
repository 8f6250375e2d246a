import os
from pathlib import Path
from typing import Any

import pytest

from conftest import spec_text
from hvexp import plan, spec


def make(text: str, **kw: Any) -> plan.Plan:
    return plan.Plan(spec.parse(text, "/nowhere/x.exp"), **kw)


def devices(p: plan.Plan, v: str) -> list[str]:
    """QEMU's -object/-blockdev/-device arguments of a run of variant v."""
    return p.guest(v, "/run").device_args()


def test_durations_and_fixed_latency() -> None:
    assert plan.duration_ns("24ms") == 24e6
    assert plan.duration_ns("500us") == 5e5
    assert plan.duration_ns("2000") == 2000
    assert plan.duration_ns("soon") is None
    assert plan.fixed_latency_ns("latency=24ms") == 24e6
    assert plan.fixed_latency_ns("latency=fixed:2ms,time-scale=8") == 2e6
    assert plan.fixed_latency_ns("profile=premium-p30") is None
    assert plan.fixed_latency_ns("latency=lognormal:1ms:3ms") is None
    assert plan.fixed_latency_ns("latency=2ms,iops=500") is None


def test_hv_devices_scale_and_escape() -> None:
    p = make(spec_text(exp_extra="time-scale = 8\nvm-perf = profile=Standard_D16s_v3\nstorvsc = outstanding=128"))
    devs = devices(p, "stock")
    # The VM's caps go as an object the bridge names; the bridge before the controller.
    assert devs[:2] == ["-object", '{"qom-type": "hv-vm-caps", "id": "hvstor-vm-caps", '
                        '"profile": "Standard_D16s_v3", "time-scale": "8"}']
    assert devs[3] == "hv-vmbus-bridge,vm-perf=hvstor-vm-caps"
    assert devs[5] == "hv-storvsc,id=scsi0,outstanding=128"
    assert devs[7] == "hv-disk,bus=scsi0.0,lun=0,id=disk0,backend=null,size=4G"
    assert p.eff_scale == 8 and p.variants["stock"].wait_disks == 1


def test_perf_and_fault_go_as_objects() -> None:
    g = make(spec_text()).guest("stock", "/run")
    g.disks[0].props.update({"perf": "profile=premium-p10,latency=1ms,latency.read=2ms,seed=a,,b", "fault": "error=busy"})
    devs = g.device_args()
    assert devs[:4] == ["-object", '{"qom-type": "hv-disk-model", "id": "hvstor-disk0-model", "profile": "premium-p10", '
                        '"latency": "1ms", "latency-read": "2ms", "seed": "a,b"}',
                        "-object", '{"qom-type": "hv-fault", "id": "hvstor-disk0-fault", "error": "busy"}']
    assert devs[-1] == ("hv-disk,bus=scsi0.0,lun=0,id=disk0,backend=null,size=4G,"
                        "perf=hvstor-disk0-model,fault=hvstor-disk0-fault")
    # Text whose order matters, or with a disk's own timeline, stays text.
    for perf in ("latency.read=2ms,latency=1ms", "mbps=10,bps=1000000", "iops=5,iops=6", "timeline=/t"):
        g.disks[0].props.update({"perf": perf})
        assert g.device_args()[-1].split(",perf=")[1].startswith(perf.replace(",", ",,")), perf
    # An id or "none" stays as it is.
    g.disks[0].props.update({"perf": "p10", "fault": "none"})
    assert g.device_args()[-1].endswith("perf=p10,fault=none")


def test_variant_storvsc_replaces_the_experiments() -> None:
    p = make(spec_text(exp_extra="storvsc = outstanding=128", stock_extra="storvsc = inline-rounds=off"))
    assert devices(p, "stock")[3] == "hv-storvsc,id=scsi0,inline-rounds=off"


def test_storvsc_iothread_creates_it() -> None:
    p = make(spec_text(stock_extra="storvsc = inline-rounds=off,iothread=hvio0"))
    devs = devices(p, "stock")
    assert devs[:6] == ["-object", '{"qom-type": "iothread", "id": "hvio0"}', "-device", "hv-vmbus-bridge",
                        "-device", "hv-storvsc,id=scsi0,inline-rounds=off,iothread=hvio0"]


def test_time_scale_without_perf_is_ignored() -> None:
    p = make(spec_text(exp_extra="time-scale = 8"))
    assert p.eff_scale == 1 and "ignored" in p.scale_note


def test_params_and_append() -> None:
    p = make(spec_text(stock_extra="params = storvsc_max_hw_queues=1 scsi_mod.use_blk_mq=1\nappend = nohz=off"))
    assert p.variants["stock"].append == "hv_storvsc.storvsc_max_hw_queues=1 scsi_mod.use_blk_mq=1 nohz=off"


def test_control_variant_derives_scsi_debug_from_the_experiment() -> None:
    p = make(spec_text(exp_extra="vcpus = 8\ntime-scale = 2\nperf = latency=24ms",
                       stock_extra="device = scsi_debug\nparams = storvsc_max_hw_queues=4",
                       shared_extra="device = scsi_debug\nscsi-debug = host_max_queue=192"))
    a, b = p.variants["stock"], p.variants["shared"]
    assert a.scsi_debug["submit_queues"] == "4"           # hardware queues of the variant
    assert b.scsi_debug["submit_queues"] == "8"
    assert a.scsi_debug["ndelay"] == str(48_000_000)       # 24 ms x time-scale 2
    assert b.scsi_debug["host_max_queue"] == "192"
    assert a.scsi_debug["virtual_gb"] == "4" and a.scsi_debug["fake_rw"] == "1"
    assert devices(p, "stock") == [] and a.initramfs_modules == ["scsi_debug"]
    assert p.guest("stock", "/run").initramfs_modules == ["scsi_debug"]
    assert "hvstor.modules=scsi_debug" in a.append and "scsi_debug.ndelay=48000000" in a.append
    assert "control: scsi_debug" in a.summary
    assert "DEVICE=scsi_debug" in p.guest_script("stock")


def test_control_variant_errors() -> None:
    with pytest.raises(spec.SpecError, match="needs its service latency"):
        make(spec_text(stock_extra="device = scsi_debug"))
    with pytest.raises(spec.SpecError, match="unknown scsi_debug parameter 'colour'"):
        make(spec_text(stock_extra="device = scsi_debug\nscsi-debug = ndelay=1ms colour=red"))
    with pytest.raises(spec.SpecError, match="just under 1 s"):
        make(spec_text(stock_extra="device = scsi_debug\nscsi-debug = ndelay=2s"))
    with pytest.raises(spec.SpecError, match="device must be one of"):
        make(spec_text(stock_extra="device = virtio"))


def test_variant_errors_point_at_the_line() -> None:
    with pytest.raises(spec.SpecError) as e:
        make(spec_text(stock_extra="vcpus = many"))
    assert "variant stock: vcpus must be a positive number" in str(e.value) and e.value.line > 0
    with pytest.raises(spec.SpecError, match="neither debian-6.1, debian-6.12 nor a file"):
        make(spec_text(stock_extra="kernel = /no/such/bzImage"))
    with pytest.raises(spec.SpecError, match="modules is for a kernel given as a path"):
        make(spec_text(stock_extra="modules = /tmp"))
    with pytest.raises(spec.SpecError, match="a patch or a prebuilt ko, not both"):
        make(spec_text(shared_extra="ko = x.ko"))
    with pytest.raises(spec.SpecError, match="time-scale=4, the experiment's time-scale is 8"):
        make(spec_text(exp_extra="time-scale = 8", stock_extra="perf = latency=1ms,time-scale=4"))
    with pytest.raises(plan.PlanError, match="no variant 'nope'"):
        make(spec_text(), only=["nope"])


def test_baseline_and_variant_selection() -> None:
    p = make(spec_text(exp_extra="baseline = shared"))
    assert p.order == ["shared", "stock"]
    p = make(spec_text(), only=["shared"])
    assert p.baseline == "shared" and p.order == ["shared"]


def test_patch_goes_to_the_module_builder() -> None:
    calls: list[tuple[str, str, str]] = []

    def build(v: str, kernel: str, modules: str, kdir: str, patch: str, source: str = "") -> tuple[str, dict[str, str]]:
        calls.append((v, kernel, patch))
        return "/k/hv_storvsc.ko", {"version": "hvstor-none-x", "srcversion": "ABC"}
    p = make(spec_text(exp_extra="kernel = debian-6.12"), build_module=build)
    assert calls == [("shared", "debian-6.12", "none")]
    s = p.variants["shared"]
    assert (s.ko, s.want_version, s.want_srcversion) == ("/k/hv_storvsc.ko", "hvstor-none-x", "ABC")
    assert p.variants["stock"].ko == ""


def test_guest_script_is_filled() -> None:
    p = make(spec_text(exp_extra="tunables = nr_requests=56"))
    g = p.guest_script("stock")
    assert "@@" not in g
    assert "hvstor-blk-tune $d nr_requests=56" in g
    assert "write_iops_log" in g and 'LUNS="0"' in g


def test_virtio_scsi_comparison_and_host_load() -> None:
    p = make(spec_text(exp_extra="perf = latency=2ms\ntime-scale = 2",
                       stock_extra="device = virtio-scsi\nvirtio-scsi = iothread=on\nhost-load = 1"))
    var = p.variants["stock"]
    assert devices(p, "stock") == [
        "-object", '{"qom-type": "iothread", "id": "vio0"}',
        "-blockdev", '{"driver": "null-aio", "node-name": "vd0", "size": 4294967296, "latency-ns": 4000000}',
        "-device", "virtio-scsi-pci,id=vscsi0,iothread=vio0",
        "-device", "scsi-hd,bus=vscsi0.0,drive=vd0,lun=0"]
    assert var.host_load == 1 and var.wait_disks == 1
    assert "hvstor.modules=virtio_pci,virtio_scsi" in var.append
    assert "DEVICE=virtio-scsi" in p.scripts["stock"]
    with pytest.raises(spec.SpecError, match="fixed latency only"):
        make(spec_text(stock_extra="device = virtio-scsi\nperf = profile=premium-p30"))
    with pytest.raises(spec.SpecError, match="iothread=on|off"):
        make(spec_text(stock_extra="device = virtio-scsi\nvirtio-scsi = queues=4"))
    with pytest.raises(spec.SpecError, match="busy host processes"):
        make(spec_text(stock_extra="host-load = lots"))


def test_only_slowed_variants_are_scaled_back() -> None:
    p = make(spec_text(exp_extra="time-scale = 8", stock_extra="perf = latency=2ms",
                       shared_extra="device = virtio-scsi"))
    assert p.variants["stock"].scale == 8 and p.variants["shared"].scale == 1
    assert "shared as measured" in p.scale_note


def test_timeout_and_perf_typos() -> None:
    assert make(spec_text(exp_extra="timeout = 300s")).variants["stock"].timeout == 300
    with pytest.raises(spec.SpecError, match="seconds per boot"):
        make(spec_text(exp_extra="timeout = 5min"))
    with pytest.raises(spec.SpecError, match="time-scale=8x is not a number"):
        make(spec_text(exp_extra="time-scale = 8", stock_extra="perf = latency=2ms,time-scale=8x"))


def test_default_kernel_comes_from_scripts_default_kernel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from hvmachine import paths
    assert paths.DEFAULT_KERNEL_FILE == os.path.join(plan.ROOT, "scripts", "default-kernel")
    assert plan.default_kernel() in plan.DEBIAN_KERNELS
    assert make(spec_text()).variants["stock"].kernel == plan.default_kernel()
    f = tmp_path / "default-kernel"
    for name in ("debian-6.1", "debian-6.12"):
        f.write_text(name + "\n")
        monkeypatch.setattr(paths, "DEFAULT_KERNEL_FILE", str(f))
        p = make(spec_text(shared_extra="kernel = debian-6.12"))
        assert p.variants["stock"].kernel == name and p.variants["shared"].kernel == "debian-6.12"
    f.unlink()
    with pytest.raises(plan.PlanError, match="default-kernel: cannot read the default kernel"):
        make(spec_text())
    make(spec_text(exp_extra="kernel = debian-6.1"))      # every variant names its kernel: not needed


def test_shipped_specs_plan_and_name_their_kernel() -> None:
    """The shipped experiments keep the kernel their figures were measured on whatever the
    project's default is, and pass the checks made before the first boot."""
    import glob
    from conftest import ROOT
    files = sorted(glob.glob(os.path.join(ROOT, "experiments", "*.exp")))
    assert files
    for f in files:
        s = spec.load(f)
        assert all(s.value(v, "kernel") in plan.DEBIAN_KERNELS for v in s.variants), f
        plan.Plan(s)


def test_snapshot_stops_the_guest_once_before_fio() -> None:
    """snapshot = on: the guest script says where it may be saved and waits there for the
    host's line, after its header and before fio; the command line's choice wins."""
    off = make(spec_text())
    assert off.snapshot is False and 'if [ 0 = 1 ]; then\n  echo "HVSTOR-SNAPSHOT-POINT"' in off.guest_script("stock")
    on = make(spec_text(exp_extra="snapshot = on"))
    g = on.guest_script("stock")
    assert on.snapshot is True
    point = g.index('if [ 1 = 1 ]; then\n  echo "HVSTOR-SNAPSHOT-POINT"')
    assert g.index('} > "$R/header"') < point < g.index('echo "HVSTOR-FIO-START"')
    assert g[point:].splitlines()[2].strip() == "read -r _ < /dev/ttyS0"
    assert make(spec_text(exp_extra="snapshot = on"), snapshot=False).snapshot is False
    with pytest.raises(spec.SpecError, match="snapshot is on or off, got 'yes'"):
        make(spec_text(exp_extra="snapshot = yes"))
