// The host side of the data path, without QEMU: a fake storvsc writes 4 KiB READ SRBs into a
// channel's ring and signals; the round (on the signalling thread with inline:1, on the
// channel's worker with inline:0) takes them, storvsp maps the guest pages and submits to a
// null disk, the completions go back into the ring and raise the channel's interrupt; the
// fake guest reaps them. Nanoseconds per I/O for batches of 1 (QD1) and 32, on 1, 2, 4 and
// 8 channels, each driven by its own thread; gate:1 puts the null disk behind the VM's run
// gate as a machine's disks are (hw/capi/storage_gate.h), gate:0 submits to it directly.
// Run by ./hvstor bench --host.
//
// The figure includes the fake guest's own work (building packets, polling the ring). With
// inline:0 it includes one eventfd wake-up of the worker per batch, and on a machine with
// fewer cores than threads (a guest thread and a worker per channel) the channels share the
// cores. With inline:1 a batch larger than an inline round's 32 packets, or a signal that
// finds the worker still awake, also wakes the worker.
#include <benchmark/benchmark.h>

#include <atomic>
#include <memory>
#include <vector>

#include "fake_bus.h"
#include "fake_host.h"
#include "hvstor/backend/backend.h"
#include "hvstor/scsi/disk.h"
#include "hvstor/storvsp/controller.h"
#include "storage_gate.h"
#include "storvsc_rings.h"

using namespace hvstor;
using namespace hvstor::storvsp;
using hvstor::test::FakeHost;
using hvstor::test::LoopbackBus;
using hvstor::test::StorvscRings;

namespace {

constexpr uint64_t kRingBase = 0x100000;  // channel i's rings at kRingBase + i * kRingSpan
constexpr uint64_t kRingSpan = 2 * StorvscRings::kRingPages * 4096ull;
constexpr uint64_t kBufBase = 0x600000 - 0x100000; // 32 pages per channel below the hole

// A controller with a null disk, its primary open and handshaken, and `n - 1` subchannels
// open: one channel per benchmark thread.
struct Rig {
    FakeHost host;
    LoopbackBus bus;
    StorvscRings guest{host, [this](StorvscRings::Chan& c) { bus.signal(c.relid); }};
    std::unique_ptr<backend::Backend> null;
    std::unique_ptr<Controller> ctl;
    std::unique_ptr<scsi::Disk> disk;
    std::vector<StorvscRings::Chan> chans;

    Rig(int n, bool inline_rounds, bool gated) {
        std::string err;
        null = backend::make_null(1ull << 30, err);
        if (gated && null) null = std::make_unique<capi::StorageGate>(std::move(null), host.run_gate());
        ControllerConfig cfg;
        cfg.max_subchannels = 7;
        cfg.inline_rounds = inline_rounds;
        ctl = std::make_unique<Controller>(host, bus, *vmbus::Guid::parse("f8b3781b-1e82-4818-a1c3-63d806ec1500"), cfg);
        if (!null || !ctl->start(err)) std::abort();
        disk = std::make_unique<scsi::Disk>(*null, scsi::DiskConfig{}, *ctl);
        if (!ctl->attach(0, disk.get(), err)) std::abort();
        chans.push_back(open(ctl->primary_relid(), 0));
        if (!guest.handshake(chans[0])) std::abort();
        if (n > 1) {
            VstorPacket v{};
            v.operation = uint32_t(Operation::CreateSubChannels);
            v.sub_channel_count = uint16_t(n - 1);
            guest.send(chans[0], v);
            guest.wait(chans[0]);
            // The offers follow the answer from the primary's worker.
            while (bus.offered.size() < size_t(n)) std::this_thread::yield();
            for (int i = 1; i < n; i++) chans.push_back(open(bus.offered[size_t(i)], i));
        }
    }
    ~Rig() {
        ctl.reset();
        disk.reset();
    }
    StorvscRings::Chan open(uint32_t relid, int i) {
        auto c = guest.rings(relid, kRingBase + uint64_t(i) * kRingSpan);
        if (bus.open(relid, kRingBase + uint64_t(i) * kRingSpan, 2 * StorvscRings::kRingPages) != 0) std::abort();
        return c;
    }
};

std::unique_ptr<Rig> rig; // per benchmark run: built before its threads start, freed after

void build_rig(const benchmark::State& state) {
    rig = std::make_unique<Rig>(state.threads(), state.range(1) != 0, state.range(2) != 0);
}
void free_rig(const benchmark::State&) { rig.reset(); }

VmscsiRequest read4k() {
    VmscsiRequest s{};
    s.cdb_length = 10;
    s.cdb_or_sense[0] = 0x28;
    s.cdb_or_sense[8] = 8; // 8 blocks
    s.data_in = kDataRead;
    s.sense_info_length = kSenseBytes;
    return s;
}

void BM_HostPath(benchmark::State& state) {
    const int batch = int(state.range(0));
    StorvscRings::Chan* c = &rig->chans[size_t(state.thread_index())];
    const uint64_t buf = kBufBase + uint64_t(state.thread_index()) * 32 * 4096;
    const VmscsiRequest srb = read4k();
    for (auto _ : state) {
        for (int i = 0; i < batch; i++) rig->guest.send_srb(*c, srb, buf + uint64_t(i % 32) * 4096, 4096);
        for (int got = 0; got < batch;)
            if (rig->guest.poll(*c)) got++;
    }
    state.SetItemsProcessed(state.iterations() * batch);
    state.counters["ns_per_io"] =
        benchmark::Counter(double(state.iterations() * batch), benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

} // namespace

BENCHMARK(BM_HostPath)
    ->ArgNames({"batch", "inline", "gate"})
    ->ArgsProduct({{1, 32}, {1, 0}, {0, 1}})
    ->ThreadRange(1, 8)
    ->UseRealTime()
    ->MinTime(0.5)
    ->Setup(build_rig)
    ->Teardown(free_rig);

int main(int argc, char** argv) {
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
