// Machine: an assembled controller and disk serve a guest end to end, and the machine tears
// down in the order its parts need while a channel is open.
#include <gtest/gtest.h>

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <set>
#include <thread>
#include <utility>

#include "hvstor/thread.h"
#include "machine_rig.h"

using namespace hvstor;
using namespace hvstor::storvsp;
using hvstor::test::FakeGuest;
using hvstor::test::FakeHost;
using hvstor::test::FakeStorvsc;
using hvstor::ThreadHooks;
using hvstor::set_thread_hooks;
using hvstor::start_thread;

namespace {

using hvstor::test::kBuf;
using hvstor::test::kRings;
using hvstor::test::rw10;

class MachineTest : public ::testing::Test, protected hvstor::test::MachineRig {
protected:
    // The controller's instance GUID in the rig's machine and in the machines loading its state.
    static vmbus::Guid instance() { return *vmbus::Guid::parse("f8b3781b-1e82-4818-a1c3-63d806ec1500"); }

    // `n` reads on the open channel, sent and held by the disk's model (its cap lets none
    // through soon); returns their transaction ids.
    std::multiset<uint64_t> reads_held(uint32_t n) {
        std::multiset<uint64_t> sent;
        for (uint32_t i = 0; i < n; i++) sent.insert(guest.send_srb(*ch, rw10(false, i * 8, 8), kBuf + i * 4096, 4096));
        perf::ModelBackend& model = *disk->model();
        while (model.stats().queued + model.stats().issued < n) std::this_thread::yield();
        return sent;
    }
};

TEST_F(MachineTest, AssembledDiskServesTheGuest) {
    ASSERT_NO_FATAL_FAILURE(serve(ram(false)));
    for (uint32_t i = 0; i < 4096; i++) *host.ram(kBuf + i) = uint8_t(i * 7 + 3);
    auto r = rw(true, 8, kBuf);
    EXPECT_EQ(r.pkt.srb.srb_status, kSrbSuccess);
    r = rw(false, 8, kBuf + 0x2000);
    EXPECT_EQ(r.pkt.srb.srb_status, kSrbSuccess);
    EXPECT_EQ(std::memcmp(host.ram(kBuf), host.ram(kBuf + 0x2000), 4096), 0);

    EXPECT_EQ(disk->stats_json(),
              R"({"disk":"lun0","model":false,"reads":1,"writes":1,"bytes_read":4096,"bytes_written":4096,"errors":0,"faults":0,"stalled":0,"unit_attentions":0})");
    // Torn down with the channel open: the disk, then the controller, then the server.
    machine.reset();
}

// readonly=on reaches the guest for a RAM disk too: writes end in DATA PROTECT.
TEST_F(MachineTest, AssembledReadOnlyDiskRefusesWrites) {
    ASSERT_NO_FATAL_FAILURE(serve(ram(true)));
    auto r = rw(false, 0, kBuf);
    EXPECT_EQ(r.pkt.srb.srb_status, kSrbSuccess);
    r = rw(true, 0, kBuf);
    EXPECT_EQ(r.pkt.srb.scsi_status, scsi::kStatusCheckCondition);
    EXPECT_EQ(r.pkt.srb.cdb_or_sense[2] & 0xF, scsi::kSenseDataProtect);

    // The refused write counts as a write and an error, and moved no bytes.
    EXPECT_EQ(disk->stats_json(),
              R"({"disk":"lun0","model":false,"reads":1,"writes":1,"bytes_read":4096,"bytes_written":0,"errors":1,"faults":0,"stalled":0,"unit_attentions":0})");
}

TEST_F(MachineTest, SettingsAreChecked) {
    FakeHost h;
    EXPECT_THROW(capi::Machine(h, capi::MachineConfig{0, 1}), capi::ConfigError);
    EXPECT_THROW(capi::Machine(h, capi::MachineConfig{4097, 1}), capi::ConfigError);
    EXPECT_THROW(capi::Machine(h, capi::MachineConfig{1, 1, 0x00050004}), capi::ConfigError);
    storvsp::ControllerConfig cc;
    cc.max_transfer_bytes = 8 * 1024 * 1024 + 4096;
    EXPECT_THROW(capi::check_controller_config(cc), capi::ConfigError);
    cc.max_transfer_bytes = 8 * 1024 * 1024;
    EXPECT_NO_THROW(capi::check_controller_config(cc));
}

TEST_F(MachineTest, ResetDisconnectsTheGuest) {
    connect();
    EXPECT_NE(machine->server().negotiated_version(), 0u);
    machine->reset();
    EXPECT_EQ(machine->server().negotiated_version(), 0u);
}

// A machine reset runs under QEMU's big lock and waits for every request the guest sent;
// behind a disk model's caps (one read per 100 s here, 32 reads queued: most of an hour) it
// would freeze QEMU's main loop and QMP that long. What no storage has started is cancelled
// instead: each read either reached storage or is cancelled, and none is left.
TEST_F(MachineTest, ResetDoesNotWaitOutTheModelsCaps) {
    capi::DiskSpec spec = ram(false);
    spec.perf = "iops=0.01,burst=off";
    ASSERT_NO_FATAL_FAILURE(serve(spec));
    constexpr uint32_t kReads = 32;
    for (uint32_t i = 0; i < kReads; i++) guest.send_srb(*ch, rw10(false, i * 8, 8), kBuf + i * 4096, 4096);
    perf::ModelBackend& model = *disk->model();
    while (model.stats().queued + model.stats().issued < kReads) std::this_thread::yield();
    ASSERT_GE(model.stats().queued, kReads - 2);
    machine->reset();
    const perf::Stats after = model.stats();
    EXPECT_EQ(after.cancelled + after.issued, kReads);
    EXPECT_GE(after.cancelled, kReads - 2);
    EXPECT_EQ(after.queued + after.in_service, 0u);
    // The caps apply again to the next connection's requests: its read waits behind them.
    connect();
    ch = guest.open(controller->controller().primary_relid(), kRings, 0x100);
    ASSERT_TRUE(ch);
    ASSERT_TRUE(guest.handshake(*ch));
    guest.send_srb(*ch, rw10(false, 0, 8), kBuf, 4096);
    while (model.stats().queued + model.stats().issued <= after.issued) std::this_thread::yield();
    EXPECT_EQ(model.stats().queued, 1u);
}

// Unplugging a modelled disk with requests queued behind its caps: the guest gets each one
// back at once (ABORTED COMMAND, COMMANDS CLEARED BY DEVICE SERVER, which Linux retries and
// then finds the LUN gone), and the removal does not wait out the caps.
TEST_F(MachineTest, UnplugDoesNotWaitOutTheModelsCaps) {
    capi::DiskSpec spec = ram(false);
    spec.perf = "iops=0.01,burst=off";  // one read per 100 s
    ASSERT_NO_FATAL_FAILURE(serve(spec));
    constexpr uint32_t kReads = 32;
    std::set<uint64_t> want;
    for (uint32_t i = 0; i < kReads; i++)
        want.insert(guest.send_srb(*ch, rw10(false, i * 8, 8), kBuf + i * 4096, 4096));
    perf::ModelBackend& model = *disk->model();
    while (model.stats().queued + model.stats().issued < kReads) std::this_thread::yield();
    std::atomic<bool> removed{false};
    controller->start_removal(disk, [&] { removed = true; });
    uint32_t aborted = 0;
    while (!want.empty()) {
        auto r = completion();
        ASSERT_TRUE(want.erase(r.trans_id)) << "completed twice or never sent";
        const uint8_t st = r.pkt.srb.srb_status & ~kSrbAutosenseValid;
        if (st == kSrbError) {
            EXPECT_EQ(r.pkt.srb.cdb_or_sense[2] & 0xF, scsi::kSenseAbortedCommand);
            EXPECT_EQ(r.pkt.srb.cdb_or_sense[12], 0x2F);
            EXPECT_EQ(r.pkt.srb.cdb_or_sense[13], 0x02);
            aborted++;
        } else {
            EXPECT_EQ(st, kSrbSuccess);
        }
    }
    EXPECT_GE(aborted, kReads - 2);
    while (!removed) std::this_thread::yield();
}

// Hot removal with the guest connected: the guest is told to rescan, the LUN answers as
// absent, and a new disk can take it.
TEST_F(MachineTest, RemovedDiskIsGoneForTheGuest) {
    ASSERT_NO_FATAL_FAILURE(serve(ram(false)));
    auto r = rw(true, 0, kBuf);
    EXPECT_EQ(r.pkt.srb.srb_status, kSrbSuccess);

    controller->remove_disk(disk);
    auto notice = guest.wait(*ch);
    EXPECT_EQ(notice.pkt.operation, uint32_t(Operation::EnumerateBus));
    r = rw(false, 0, kBuf);
    EXPECT_EQ(r.pkt.srb.srb_status, kSrbInvalidLun) << "the guest removes a LUN that answers this";
    EXPECT_EQ(controller->disk_count(), 0u);

    disk = &controller->add_disk(ram(false));
    notice = guest.wait(*ch);
    EXPECT_EQ(notice.pkt.operation, uint32_t(Operation::EnumerateBus));
    r = rw(false, 0, kBuf);
    EXPECT_EQ(r.pkt.srb.srb_status, kSrbSuccess);
}

// Removal while the guest has requests in flight on the LUN: a worker may have looked the
// disk up just before it was detached, and the disk is freed as soon as removal returns.
// Every request is still answered exactly once, as done or as an absent LUN; nothing
// touches freed memory (ASan).
TEST_F(MachineTest, RemovingADiskWithRequestsInFlight) {
    ASSERT_NO_FATAL_FAILURE(serve(ram(false)));
    constexpr uint32_t kInFlight = 32;
    for (int round = 0; round < 20; round++) {
        std::set<uint64_t> want;
        for (uint32_t i = 0; i < kInFlight; i++)
            want.insert(guest.send_srb(*ch, rw10(i % 2, i * 8, 8), kBuf + i * 4096, 4096));
        controller->remove_disk(disk);
        while (!want.empty()) {
            auto r = completion();
            ASSERT_TRUE(want.erase(r.trans_id)) << "completed twice or never sent";
            const uint8_t st = r.pkt.srb.srb_status & ~kSrbAutosenseValid;
            EXPECT_TRUE(st == kSrbSuccess || st == kSrbInvalidLun) << int(st);
        }
        disk = &controller->add_disk(ram(false));
    }
    EXPECT_EQ(controller->disk_count(), 1u);
    EXPECT_GT(rescans, 0);
    // Torn down with the channel open.
    machine.reset();
}

// A machine reset (QEMU holds the BQL) waits for every request the guest sent. One held by
// a stall=hold fault could only be released over QMP, which waits for the reset: the reset
// lifts the faults while it runs, and they apply again afterwards.
TEST_F(MachineTest, ResetIsNotHeldUpByAStallFault) {
    capi::DiskSpec spec = ram(false);
    spec.fault = "stall=hold,ops=read";
    ASSERT_NO_FATAL_FAILURE(serve(spec));
    guest.send_srb(*ch, rw10(false, 0, 8), kBuf, 4096);
    while (disk->scsi().stats().stalled.load() == 0) std::this_thread::yield();
    machine->reset(); // returned: the held read was let go
    EXPECT_EQ(disk->scsi().stats().stalled.load(), 0u);
    EXPECT_EQ(disk->scsi().stats().reads.load(), 1u);
    connect();
    ch = guest.open(controller->controller().primary_relid(), kRings, 0x100);
    ASSERT_TRUE(ch);
    ASSERT_TRUE(guest.handshake(*ch));
    guest.send_srb(*ch, rw10(false, 0, 8), kBuf, 4096);
    while (disk->scsi().stats().stalled.load() == 0) std::this_thread::yield(); // held again
    disk->set_fault("none");
    auto r = completion();
    EXPECT_EQ(r.pkt.srb.srb_status, kSrbSuccess);
}

// Hooks for the tests below: they mark the thread as known to the fake host, and count.
std::atomic<int> g_entered{0}, g_left{0};
void hook_enter() {
    FakeHost::known_thread = true;
    g_entered++;
}
void hook_leave() {
    FakeHost::known_thread = false;
    g_left++;
}
const ThreadHooks kHooks{hook_enter, hook_leave};

// Installs kHooks for one test, and takes them away again however it ends.
class HooksInstalled {
public:
    HooksInstalled() {
        g_entered = 0;
        g_left = 0;
        set_thread_hooks(&kHooks);
    }
    ~HooksInstalled() {
        set_thread_hooks(nullptr);
        FakeHost::known_thread = false; // a test may have marked its own thread
    }
    HooksInstalled(const HooksInstalled&) = delete;
    HooksInstalled& operator=(const HooksInstalled&) = delete;
};

// The thread's function as start_thread gets it: each copy that ends up owning the thread's
// work records, when destroyed on a thread other than its creator's, whether that thread
// was between the hooks then (moved-from copies record nothing).
struct Probe {
    bool* known_at_release;
    bool* known_inside;
    char* name;
    std::thread::id creator = std::this_thread::get_id();
    Probe(bool* at_release, bool* inside, char* n) : known_at_release(at_release), known_inside(inside), name(n) {}
    Probe(const Probe&) = default;
    Probe(Probe&& o) noexcept
        : known_at_release(std::exchange(o.known_at_release, nullptr)), known_inside(o.known_inside), name(o.name),
          creator(o.creator) {}
    Probe& operator=(const Probe&) = delete;
    ~Probe() {
        if (known_at_release && std::this_thread::get_id() != creator) *known_at_release = FakeHost::known_thread;
    }
    void operator()() const {
        *known_inside = FakeHost::known_thread;
        pthread_getname_np(pthread_self(), name, 16);
    }
};

TEST(Threads, RunTheHooksAroundTheirWorkUnderTheirName) {
    HooksInstalled hooks;
    bool known_inside = false;
    bool known_at_release = false;
    char name[16] = {};
    const Probe probe(&known_at_release, &known_inside, name);
    std::thread t = start_thread("hvstor-a-long-name", probe);
    t.join();
    EXPECT_TRUE(known_inside) << "enter runs before the thread's work";
    EXPECT_TRUE(known_at_release) << "the thread's copy of the function is destroyed before leave";
    EXPECT_STREQ(name, "hvstor-a-long-n") << "the first 15 characters";
    EXPECT_EQ(g_entered.load(), 1);
    EXPECT_EQ(g_left.load(), 1);

    set_thread_hooks(nullptr);
    start_thread("plain", [] {}).join();
    EXPECT_EQ(g_entered.load(), 1) << "no hooks, none run";
}

// Every thread the model starts calls the host only between the host's hooks (QEMU
// registers them with RCU there: its guest memory accesses take the RCU read lock). Here
// each kind of thread does: channel workers, the perf model's timer and a stall fault's
// timer (both complete requests, and run rounds inline), a file disk's completion
// threads, the closer of a channel.
TEST_F(MachineTest, ModelThreadsCallTheHostOnlyBetweenItsThreadHooks) {
    HooksInstalled hooks;
    FakeHost::known_thread = true; // this thread stands for the vCPU
    host.check_threads = true;

    capi::DiskSpec modelled = ram(false);
    modelled.perf = "profile=premium-p10";
    ASSERT_NO_FATAL_FAILURE(serve(modelled));
    capi::DiskSpec stalled = ram(false);
    stalled.lun = 1;
    stalled.fault = "stall=1,ops=read";
    controller->add_disk(stalled);
    for (uint8_t lun = 0; lun < 2; lun++) {
        for (int i = 0; i < 8; i++) {
            VmscsiRequest s = rw10(i % 2, i * 8, 8);
            s.lun = lun;
            guest.send_srb(*ch, s, kBuf + i * 4096, 4096);
        }
        for (int i = 0; i < 8; i++) {
            auto r = completion();
            EXPECT_EQ(r.pkt.srb.srb_status, kSrbSuccess);
        }
    }
    EXPECT_GT(controller->controller().stats().channels[0].inline_rounds, 0u) << "completions ran rounds inline";

    char path[] = "/tmp/hvstor-threads-XXXXXX";
    const int fd = mkstemp(path);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(ftruncate(fd, 1 << 20), 0);
    close(fd);
    capi::DiskSpec file;
    file.backend = "file";
    file.path = path;
    file.direct = false;
    file.lun = 2;
    controller->add_disk(file);
    unlink(path);
    for (int i = 0; i < 8; i++) {
        VmscsiRequest s = rw10(i % 2, i * 8, 8);
        s.lun = 2;
        guest.send_srb(*ch, s, kBuf, 4096);
        EXPECT_EQ(completion().pkt.srb.srb_status, kSrbSuccess);
    }
    guest.close(*ch);
    machine.reset();

    EXPECT_EQ(host.unknown_thread_calls.load(), 0u);
    EXPECT_GE(g_entered.load(), 5) << "worker, perf timer, fault timer, file threads, closer";
    EXPECT_EQ(g_entered.load(), g_left.load()) << "each thread left as it entered";
}

} // namespace

namespace {

// Saved state, as a migration uses it: a machine saved while the VM is stopped, with reads
// queued behind its disk's cap, is torn down (the source QEMU goes), and a new machine over
// the same guest memory loads the state. Once the VM runs, the guest gets every read it was
// owed exactly once, on the channel it had open, and the channel serves new requests.
// A machine to load a saved state into: the rig's controller with a disk from `spec` (no
// fault of its own) and a guest of its own.
struct Loaded {
    Loaded(FakeHost& host, const vmbus::Guid& instance, const capi::DiskSpec& spec)
        : machine(host, capi::MachineConfig{2, 0x5A58}), g(host, machine.partition()),
          guest(host, machine.partition(), g), ctl(machine.add_controller(instance, {})), disk(ctl.add_disk(spec)) {}
    // The next answer to a request on `c` (a rescan notice skipped).
    FakeStorvsc::Completion answer(FakeStorvsc::Chan& c) { return hvstor::test::MachineRig::answer(guest, c); }

    capi::Machine machine;
    FakeGuest g;
    FakeStorvsc guest;
    capi::ScsiController& ctl;
    capi::AttachedDisk& disk;
};

TEST_F(MachineTest, ALoadedMachineAnswersWhatTheSavedOneOwed) {
    capi::DiskSpec spec = ram(false);
    spec.perf = "iops=50,burst=off";
    ASSERT_NO_FATAL_FAILURE(serve(spec));
    constexpr uint32_t kReads = 8;
    const std::multiset<uint64_t> sent = reads_held(kReads);
    machine->set_running(false);
    const std::vector<uint8_t> state = machine->save();
    const FakeStorvsc::Chan chan = *ch;
    machine.reset(); // nothing of it may reach guest memory: the VM is still stopped

    Loaded next(host, instance(), spec);
    ASSERT_NO_THROW(next.machine.load(state));
    EXPECT_EQ(next.ctl.controller().open_channels(), 1u);
    next.machine.set_running(true);
    FakeStorvsc::Chan ch2 = chan;
    std::multiset<uint64_t> answered;
    while (answered.size() < sent.size()) {
        const auto r = next.answer(ch2);
        EXPECT_EQ(r.pkt.srb.srb_status, kSrbSuccess);
        answered.insert(r.trans_id);
    }
    EXPECT_EQ(answered, sent);
    next.guest.send_srb(ch2, rw10(false, 0, 8), kBuf, 4096);
    EXPECT_EQ(next.answer(ch2).pkt.srb.srb_status, kSrbSuccess);
    EXPECT_FALSE(next.guest.poll(ch2)) << "a request was answered twice";
}

// Live migration copies guest RAM while the VM runs and sees the model's writes only through
// the host's accessors and at unmap. When the VM stops, before the migration's last pass,
// every mapping still open that the model writes is marked: both rings of the open channel
// and the buffer of each read taken and not yet answered. Nothing is marked while it runs.
TEST_F(MachineTest, AStopMarksWhatIsWrittenThroughOpenMappings) {
    capi::DiskSpec spec = ram(false);
    spec.perf = "iops=0.01,burst=off";
    ASSERT_NO_FATAL_FAILURE(serve(spec));
    constexpr uint32_t kReads = 4;
    for (uint32_t i = 0; i < kReads; i++) guest.send_srb(*ch, rw10(false, i * 8, 8), kBuf + i * 4096, 4096);
    perf::ModelBackend& model = *disk->model();
    while (model.stats().queued + model.stats().issued < kReads) std::this_thread::yield();
    EXPECT_TRUE(host.marked.empty());
    machine->set_running(false);
    EXPECT_TRUE(host.was_marked(kRings, 2 * FakeStorvsc::kRingPages * 4096ull)) << "the rings";
    // The cap's bucket lets two reads through at once; the others wait behind it, taken and
    // not answered.
    ASSERT_EQ(model.stats().queued, kReads - 2);
    for (uint32_t i = 2; i < kReads; i++) EXPECT_TRUE(host.was_marked(kBuf + i * 4096, 4096)) << "read " << i;
    EXPECT_FALSE(host.was_marked(kBuf + kReads * 4096, 4096)) << "a page no request uses";
    machine->set_running(true);
}

// A load that fails at its last step (after the bus and the controller took their parts)
// leaves the machine as a reset does: the offers at the relids they had, no connection, and
// nothing loaded left for the next session. The guest then connects afresh, and its first
// read is answered with no stale answer or replayed read before it.
TEST_F(MachineTest, AFailedLoadLeavesNothingOfItForTheNextSession) {
    capi::DiskSpec spec = ram(false);
    spec.perf = "iops=50,burst=off";
    ASSERT_NO_FATAL_FAILURE(serve(spec));
    reads_held(4);
    machine->set_running(false);
    std::vector<uint8_t> state = machine->save();
    machine.reset();

    Loaded next(host, instance(), spec);
    const uint32_t relid = next.ctl.controller().primary_relid();
    state.push_back(0); // a byte too many: refused once everything else was read
    EXPECT_THROW(next.machine.load(state), std::runtime_error);
    EXPECT_FALSE(next.machine.server().connected());
    EXPECT_EQ(next.ctl.controller().primary_relid(), relid);
    EXPECT_EQ(next.ctl.controller().open_channels(), 0u);
    next.machine.set_running(true);
    // A new session on the same ring pages, as a rebooted guest would use them.
    MachineRig::connect(next.g, next.guest);
    auto fresh = next.guest.open(relid, kRings, 0x100);
    ASSERT_TRUE(fresh);
    ASSERT_TRUE(next.guest.handshake(*fresh));
    const uint64_t id = next.guest.send_srb(*fresh, rw10(false, 0, 8), kBuf, 4096);
    const auto r = next.answer(*fresh);
    EXPECT_EQ(r.trans_id, id) << "an answer of the failed load's state reached the new session";
    EXPECT_EQ(r.pkt.srb.srb_status, kSrbSuccess);
    EXPECT_FALSE(next.guest.poll(*fresh));
}

// A load refused before the bus loaded anything (here at the machine's own section tag) keeps
// the controller's offer where it was: the guest finds it and opens it as before.
TEST_F(MachineTest, ALoadRefusedEarlyKeepsTheControllersOffer) {
    capi::ScsiController& c = machine->add_controller(instance(), {});
    const uint32_t relid = c.controller().primary_relid();
    machine->set_running(false);
    const std::vector<uint8_t> garbage{1, 2, 3};
    EXPECT_THROW(machine->load(garbage), std::runtime_error);
    ASSERT_EQ(c.controller().primary_relid(), relid) << "the controller lost its offer";
    machine->set_running(true);
    connect();
    ch = guest.open(relid, kRings, 0x100);
    ASSERT_TRUE(ch);
    ASSERT_TRUE(guest.handshake(*ch));
}

// A load refused at its last step leaves the machine as it was, down to what it saves: the
// disk model's buckets (the state's were drained by reads), the controller's reset answer
// (the state's is "ignore"), its queues (the state's controller had a subchannel) and the
// disk's fault (the state's is another).
TEST_F(MachineTest, ARefusedLoadLeavesTheMachineAsItWas) {
    capi::DiskSpec spec = ram(false);
    spec.perf = "iops=0.01,burst=off";
    ASSERT_NO_FATAL_FAILURE(serve(spec));
    VstorPacket sub{};
    sub.operation = uint32_t(Operation::CreateSubChannels);
    sub.sub_channel_count = 1;
    guest.send(*ch, sub);
    guest.wait_message<vmbus::OfferChannel>(vmbus::MsgType::OfferChannel);
    controller->set_reset("ignore");
    disk->set_fault("error=medium,ops=write");
    reads_held(4);
    machine->set_running(false);
    std::vector<uint8_t> state = machine->save();
    machine.reset();

    capi::Machine next(host, capi::MachineConfig{2, 0x5A58});
    capi::ScsiController& c = next.add_controller(instance(), {});
    capi::AttachedDisk& d = c.add_disk(spec);
    d.set_fault("error=busy,every=3");
    const std::vector<uint8_t> before = next.save();
    state.push_back(0); // a byte too many: refused once everything else was read
    EXPECT_THROW(next.load(state), std::runtime_error);
    EXPECT_EQ(c.reset(), "answer");
    EXPECT_EQ(d.fault(), "error=busy,every=3");
    EXPECT_EQ(next.save(), before);
}

// The same for the guest's connection: its target VP in the state (1) does not stay.
TEST_F(MachineTest, ARefusedLoadLeavesTheConnectionsTargetAsItWas) {
    for (uint32_t vp = 0; vp < 2; vp++) g.enable_synic(vp);
    vmbus::InitiateContact contact{};
    contact.hdr.msgtype = uint32_t(vmbus::MsgType::InitiateContact);
    contact.version_requested = vmbus::version::kV5_3;
    contact.target_vcpu = 1;
    contact.v5.msg_sint = vmbus::kVmbusSint;
    g.post(0, 4, contact);
    ASSERT_TRUE(g.take(1)) << "VERSION_RESPONSE, on VP 1";
    machine->set_running(false);
    std::vector<uint8_t> state = machine->save();
    machine.reset();

    capi::Machine next(host, capi::MachineConfig{2, 0x5A58});
    const std::vector<uint8_t> before = next.save();
    state.push_back(0);
    EXPECT_THROW(next.load(state), std::runtime_error);
    EXPECT_EQ(next.server().target_vp(), 0u);
    EXPECT_EQ(next.save(), before);
}

// A state whose sections disagree: the controller's has its primary queue open, with reads
// it took, and the bus's has the channel closed (it comes from a machine no guest used). It
// loads, but the queue has no session to go on with: the machine, reset, takes a state again,
// and nothing of the state reaches the guest's next session.
TEST_F(MachineTest, AQueueSavedOpenOnAClosedChannelStartsNoSession) {
    capi::DiskSpec spec = ram(false);
    spec.perf = "iops=50,burst=off";
    ASSERT_NO_FATAL_FAILURE(serve(spec));
    reads_held(4);
    machine->set_running(false);
    const vmbus::Guid instance = controller->controller().instance();
    capi::Machine unused(host, capi::MachineConfig{2, 0x5A58});
    unused.add_controller(instance, {}).add_disk(spec);
    const std::vector<uint8_t> whole = machine->save();
    state::Writer w;
    w.fixed({whole.data(), 8}); // the machine's tag and version
    unused.partition().save(w);
    unused.server().save(w);
    w.u32(1);
    w.fixed(instance.bytes);
    controller->save(w);
    const std::vector<uint8_t> state = w.take();
    machine.reset();

    capi::Machine next(host, capi::MachineConfig{2, 0x5A58});
    capi::ScsiController& c = next.add_controller(instance, {});
    c.add_disk(spec);
    ASSERT_NO_THROW(next.load(state));
    EXPECT_EQ(c.controller().open_channels(), 0u);
    next.reset();
    const std::vector<uint8_t> again = next.save();
    next.reset();
    EXPECT_NO_THROW(next.load(again)) << "the handshake of the session that did not go on stayed";
    next.set_running(true);
    FakeGuest g2(host, next.partition());
    FakeStorvsc guest2(host, next.partition(), g2);
    MachineRig::connect(g2, guest2);
    auto fresh = guest2.open(c.controller().primary_relid(), kRings, 0x100);
    ASSERT_TRUE(fresh);
    ASSERT_TRUE(guest2.handshake(*fresh));
    const uint64_t id = guest2.send_srb(*fresh, rw10(false, 0, 8), kBuf, 4096);
    const auto r = MachineRig::answer(guest2, *fresh);
    EXPECT_EQ(r.trans_id, id) << "a read of the state was replayed into the new session";
    EXPECT_FALSE(guest2.poll(*fresh));
}

// A fault set while the guest runs is the loaded machine's, and goes on where it was: the
// second read since it was set fails (every=2), though it is the first read the loaded
// machine sees.
TEST_F(MachineTest, ALoadedMachineHasTheSavedFaultWhereItWas) {
    ASSERT_NO_FATAL_FAILURE(serve(ram(false)));
    disk->set_fault("error=medium,ops=read,every=2");
    EXPECT_EQ(rw(false, 8, kBuf).pkt.srb.scsi_status, 0) << "the first read passes";
    machine->set_running(false);
    const std::vector<uint8_t> state = machine->save();
    FakeStorvsc::Chan ch2 = *ch;
    machine.reset();

    Loaded next(host, instance(), ram(false));
    EXPECT_EQ(next.disk.fault(), "none");
    ASSERT_NO_THROW(next.machine.load(state));
    EXPECT_EQ(next.disk.fault(), "error=medium,ops=read,every=2");
    next.machine.set_running(true);
    next.guest.send_srb(ch2, rw10(false, 0, 8), kBuf, 4096);
    EXPECT_EQ(next.answer(ch2).pkt.srb.scsi_status, 2) << "the second read: CHECK CONDITION, MEDIUM ERROR";
    next.guest.send_srb(ch2, rw10(false, 0, 8), kBuf, 4096);
    EXPECT_EQ(next.answer(ch2).pkt.srb.scsi_status, 0) << "the third read passes";
}

// A read a stall holds at the save is executed again after the load and held again: its
// injection is not counted twice (count=1 would let it through otherwise). Clearing the
// fault answers it, once.
TEST_F(MachineTest, AReadAStallHeldIsHeldAgainAfterTheLoad) {
    ASSERT_NO_FATAL_FAILURE(serve(ram(false)));
    disk->set_fault("stall=hold,ops=read,count=1");
    const uint64_t id = guest.send_srb(*ch, rw10(false, 0, 8), kBuf, 4096);
    while (disk->scsi().stats().stalled.load() == 0) std::this_thread::yield();
    machine->set_running(false);
    const std::vector<uint8_t> state = machine->save();
    FakeStorvsc::Chan ch2 = *ch;
    machine.reset();

    Loaded next(host, instance(), ram(false));
    ASSERT_NO_THROW(next.machine.load(state));
    next.machine.set_running(true);
    // Either the read is held again or it is answered: wait for one of the two.
    bool answered = false;
    while (next.disk.scsi().stats().stalled.load() == 0 && !answered) {
        const auto r = next.guest.poll(ch2);
        answered = r && r->pkt.operation != uint32_t(Operation::EnumerateBus);
        std::this_thread::yield();
    }
    ASSERT_FALSE(answered) << "the held read went through after the load";
    ASSERT_EQ(next.disk.scsi().stats().stalled.load(), 1u);
    next.disk.set_fault("none");
    const auto r = next.answer(ch2);
    EXPECT_EQ(r.trans_id, id);
    EXPECT_EQ(r.pkt.srb.srb_status, kSrbSuccess);
    EXPECT_FALSE(next.guest.poll(ch2)) << "the read was answered twice";
}

// Each disk of the state once: one listed twice stands for a disk the state lacks.
TEST_F(MachineTest, ALoadRefusesADiskListedTwice) {
    capi::ScsiController& c = machine->add_controller(instance(), {});
    c.add_disk(ram(false));
    capi::DiskSpec second = ram(false);
    second.lun = 1;
    c.add_disk(second);
    machine->set_running(false);
    std::vector<uint8_t> state = machine->save();
    // The state ends with the disks: LUN 0 and LUN 1, neither modelled, each with its fault
    // ("none": its length, its text, three counts). Both LUN 1 now.
    constexpr size_t kDisk = 1 + 1 + 4 + 4 + 3 * 8;
    ASSERT_EQ(state[state.size() - 2 * kDisk], 0);
    ASSERT_EQ(state[state.size() - kDisk], 1);
    state[state.size() - 2 * kDisk] = 1;
    try {
        machine->load(state);
        ADD_FAILURE() << "a state with a disk listed twice was loaded";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("twice"), std::string::npos) << e.what();
    }
    machine->set_running(true);
}

// A state this machine cannot take is refused with its reason, and nothing is reopened.
TEST_F(MachineTest, ALoadRefusesAStateItCannotTake) {
    ASSERT_NO_FATAL_FAILURE(serve(ram(false)));
    machine->set_running(false);
    std::vector<uint8_t> state = machine->save();
    machine->set_running(true);
    capi::Machine other(host, capi::MachineConfig{2, 0x5A58});
    // No controller here: the saved one's channels have no device.
    try {
        other.load(state);
        ADD_FAILURE() << "a state with a controller this machine lacks was loaded";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("controller count"), std::string::npos) << e.what();
    }
    capi::Machine cut(host, capi::MachineConfig{2, 0x5A58});
    cut.add_controller(instance(), {});
    state.resize(state.size() - 1);
    EXPECT_THROW(cut.load(state), std::runtime_error);
    EXPECT_FALSE(cut.server().connected());
}

} // namespace
