// A machine reset (QEMU's main thread, under its big lock) with the guest's reads queued
// behind a disk model's caps, against the same reset with nothing outstanding: how long
// QEMU's main loop, QMP included, is held. The reads (128 of 4 KiB at 20 IOPS: 6.4 s of
// caps) are cancelled by the reset rather than waited for (perf::ModelBackend::abandon), so
// the two should be close; the ratio of their medians is the figure. Run by
// ./hvstor bench --host (--benchmark_filter=Reset).
#include <benchmark/benchmark.h>

#include <thread>

#include "capi/machine_rig.h"

namespace {

using hvstor::test::kBuf;
using hvstor::test::MachineRig;
using hvstor::test::rw10;

void BM_MachineReset(benchmark::State& state) {
    const auto queued = uint32_t(state.range(0));
    for (auto _ : state) {
        state.PauseTiming();
        auto rig = std::make_unique<MachineRig>();
        hvstor::capi::DiskSpec spec = MachineRig::ram(false);
        spec.perf = "iops=20,burst=off";
        rig->serve(spec);
        if (!rig->ch) {
            state.SkipWithError("the guest could not open its channel");
            break;
        }
        for (uint32_t i = 0; i < queued; i++) rig->guest.send_srb(*rig->ch, rw10(false, i * 8, 8), kBuf, 4096);
        hvstor::perf::ModelBackend& model = *rig->disk->model();
        while (model.stats().queued + model.stats().issued < queued) std::this_thread::yield();
        state.ResumeTiming();
        rig->machine->reset();
        state.PauseTiming();
        if (model.stats().cancelled + model.stats().issued < queued) state.SkipWithError("a read was lost");
        rig.reset();
        state.ResumeTiming();
    }
    state.counters["queued_reads"] = queued;
}

} // namespace

BENCHMARK(BM_MachineReset)->ArgName("queued")->Arg(0)->Arg(128)->Iterations(3)->Unit(benchmark::kMillisecond)->UseRealTime();
