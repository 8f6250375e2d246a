// The saved-state loader (capi::Machine::load, behind hvstor_vmbus_load): a migration stream
// or a savevm file is untrusted input, read by the partition and its SynIC, the VMBus server,
// each controller and its queues, each disk's fault and each modelled disk's buckets
// (hvstor/state.h).
//
// The machine is the one tests/capi/machine_rig.h builds: two VPs, one SCSI controller (here
// with one subchannel at most, its channels turning in an event loop this thread runs, so no
// worker threads), a RAM disk on LUN 0 and a RAM disk behind a disk model's cap on LUN 1, so
// that the state has a model's section. The VM is stopped, as for every save and load.
//
// Input: the state itself, as Machine::save writes it. The seeds are real saved states of this
// machine (tests/fuzz/gen_corpus.py has this target write them: --write-seeds=DIR).
// Checked, besides ASan/UBSan and leaks:
// - a load either returns or throws std::runtime_error with a reason; nothing else escapes;
// - a refused load leaves nothing behind: the machine saves the same bytes as before it;
// - an accepted state saves, and that is accepted again after a reset and saved alike: the
//   loader takes what the saver writes (the model's buckets may only have refilled between
//   the two saves, by the host's clock);
// - while the VM is stopped no guest memory is written, but for what reopening a channel
//   writes in its ring's header.
// An accepted state then runs for a few turns of the loop (what it carried goes to guest
// memory, which no guest reads, and to the disks) before the machine's reset, and the reset
// and teardown release every guest page mapped. The machine is built once and kept while
// loads are refused (the checks above say it is as it was); after an accepted load it is
// built afresh, so each input meets the same machine.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "fake_loop.h"
#include "guest_rings.h"
#include "hvstor/hyperv/msr.h"
#include "hvstor/storvsp/protocol.h"
#include "hvstor/vmbus/messages.h"
#include "machine.h"

using namespace hvstor;
using namespace hvstor::fuzz;
using namespace hvstor::storvsp;
using namespace std::chrono_literals;

namespace {

constexpr uint64_t kRam = 1 << 20;
constexpr uint64_t kHoleStart = 0xC0000, kHoleEnd = 0xE0000;
constexpr uint32_t kVps = 2;
constexpr uint16_t kHypercallPort = 0x5A58;
const char* const kInstance = "f8b3781b-1e82-4818-a1c3-63d806ec1500";
// One read per 100 s: the first two go through (the bucket's depth), the rest wait.
const char* const kPerf = "iops=0.01,burst=off";
// What the model's section ends with: six buckets (Scheduler::save), three doubles each.
constexpr size_t kBucketBytes = 6 * 3 * 8;

// The seed writer's guest (Linux's layout, as tests/fake_guest.h): the hypercall page, the
// SynIC pages of each VP, the input page of each VP, a channel's rings per slot, and the
// buffers of its reads.
constexpr uint64_t kHypercallPage = 0x1000;
constexpr uint64_t kSimp = 0x2000, kSiefp = 0x3000, kPerVp = 0x2000; // vp v: + v * kPerVp
constexpr uint64_t kInput = 0x8000;                                  // vp v: + v * 0x1000
constexpr uint64_t kRings = 0x10000, kRingSlot = 0x10000;           // channel k's: + k * kRingSlot
constexpr uint32_t kRingPages = 4;                                   // each way: header + 12 KiB
constexpr uint64_t kBuf = 0x40000;
constexpr uint8_t kVector = 0xF3;

storvsp::ControllerConfig controller_config() {
    storvsp::ControllerConfig cc;
    cc.max_subchannels = 1;
    cc.max_transfer_bytes = 64 * 1024;
    cc.max_outstanding_per_channel = 8;
    return cc;
}

capi::DiskSpec disk(uint8_t lun, const char* perf) {
    capi::DiskSpec spec;
    spec.backend = "ram";
    spec.size = 256 * 1024;
    spec.lun = lun;
    spec.perf = perf;
    return spec;
}

// The machine: the target's, and the one the seeds are saved from.
struct Rig {
    explicit Rig(FuzzHost& host) : machine(host, capi::MachineConfig{kVps, kHypercallPort}) {
        auto owned = std::make_unique<test::FakeLoop>(test::FakeLoop::Caller);
        loop = owned.get();
        std::vector<std::unique_ptr<vmbus::EventLoop>> loops;
        loops.push_back(std::move(owned));
        ctl = &machine.add_controller(*vmbus::Guid::parse(kInstance), controller_config(), std::move(loops));
        ctl->add_disk(disk(0, ""));
        modelled = &ctl->add_disk(disk(1, kPerf));
    }

    capi::Machine machine;
    test::FakeLoop* loop = nullptr; // the controller's: it lives as long as the machine
    capi::ScsiController* ctl = nullptr;
    capi::AttachedDisk* modelled = nullptr;
};

// Machine::load as the C ABI's caller sees it: done, or refused with a reason. Anything but a
// std::runtime_error is a finding.
bool load(capi::Machine& m, std::span<const uint8_t> state, std::string& err) {
    try {
        m.load(state);
        return true;
    } catch (const std::runtime_error& e) {
        err = e.what();
        return false;
    } catch (const std::exception& e) {
        fail((std::string("the load threw something other than std::runtime_error: ") + e.what()).c_str());
    } catch (...) {
        fail("the load threw something other than std::runtime_error");
    }
}

double bucket(const std::vector<uint8_t>& s, size_t at) {
    double v;
    std::memcpy(&v, s.data() + at, sizeof v);
    return v;
}

// Fails with where two saves part.
[[noreturn]] void differ(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want, const char* what) {
    const auto at = std::mismatch(got.begin(), got.end(), want.begin(), want.end());
    std::fprintf(stderr, "%s: the saves differ from byte %zu on (%zu and %zu bytes)\n", what,
                 size_t(at.first - got.begin()), got.size(), want.size());
    fail(what);
}

void check_same(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want, const char* what) {
    if (got != want) differ(got, want, what);
}

// Two saves of one state: the same bytes, but for the modelled disk's buckets (the last
// section: its disk is the last one saved), which refill with the host's clock from one save
// to the next and may only have grown.
void check_same_state(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want, const char* what) {
    if (got.size() != want.size() || got.size() < kBucketBytes) differ(got, want, what);
    const size_t at = got.size() - kBucketBytes;
    if (!std::equal(got.begin(), got.begin() + std::ptrdiff_t(at), want.begin())) differ(got, want, what);
    for (size_t i = at; i < got.size(); i += 8)
        if (!(bucket(got, i) >= bucket(want, i))) differ(got, want, what);
}

class Target {
public:
    Target() {
        build();
        fresh_ = rig_->machine.save();
    }

    void run(std::span<const uint8_t> input) {
        capi::Machine& m = rig_->machine;
        const std::vector<uint8_t> before = m.save();
        check_same(before, fresh_, "an earlier input left something behind");
        const uint64_t maps = host_.maps;
        std::string err;
        if (!load(m, input, err)) {
            FUZZ_CHECK(!err.empty());
            check_same(m.save(), before, "a refused load left something behind");
            check_unwritten();
            // A channel the load reopened before it was refused: its closer lets go of the
            // rings as it ends, which the machine's teardown waits for.
            if (host_.maps != maps) build();
            FUZZ_CHECK(host_.maps == host_.unmaps);
            return;
        }
        const std::vector<uint8_t> first = m.save();
        m.reset();
        if (!load(m, first, err)) fail(("a state this machine saved is refused: " + err).c_str());
        check_same_state(m.save(), first, "a state saved, loaded and saved again is another");
        check_unwritten();
        run_a_while();
        // The offers moved to the state's relids, and the channels it reopened: a new machine
        // for the next input, which meets guest memory zeroed again.
        m.reset();
        build();
        FUZZ_CHECK(host_.maps == host_.unmaps);
        std::memset(host_.ram(0), 0, kRam);
        check_same(rig_->machine.save(), fresh_, "a machine built afresh saves another state");
    }

private:
    void build() {
        rig_.reset();
        rig_ = std::make_unique<Rig>(host_);
        rig_->machine.set_running(false);
    }

    // The VM has been stopped so far: nothing was written but what reopening a channel writes
    // in its incoming ring's header (the interrupt mask and the feature bits, IncomingRing),
    // on any page a state may have named as one.
    void check_unwritten() {
        static constexpr size_t kMask = 8, kFeatures = 64;
        for (uint64_t page = 0; page < kRam; page += kPageSize) {
            const uint8_t* p = host_.ram(page);
            FUZZ_CHECK(std::memcmp(p, zeros_.data(), kMask) == 0);
            FUZZ_CHECK(std::memcmp(p + kMask + 4, zeros_.data(), kFeatures - kMask - 4) == 0);
            FUZZ_CHECK(std::memcmp(p + kFeatures + 4, zeros_.data(), kPageSize - kFeatures - 4) == 0);
        }
        std::memset(host_.ram(0), 0, kRam);
    }

    // The VM runs for a few turns of the channels' loop: what the state carried goes to the
    // guest (answers, held resets, notices, queued messages and event flags) or to the disks
    // (the requests executed again), into guest memory that the guest never reads. Then it
    // stops again; the reset that follows cancels what the disk model still holds.
    void run_a_while() {
        rig_->machine.set_running(true);
        for (int i = 0; i < 8 && rig_->loop->run_ready(0); i++) {
        }
        rig_->machine.set_running(false);
    }

    FuzzHost host_{kRam, kHoleStart, kHoleEnd};
    const std::vector<uint8_t> zeros_ = std::vector<uint8_t>(kPageSize, 0);
    std::unique_ptr<Rig> rig_;
    std::vector<uint8_t> fresh_;
};

// ---------------------------------------------------------------------------------------------
// The seeds: a guest drives a machine as Linux does, and the machine is saved with the VM
// stopped at a few points of its life.

class SeedGuest {
public:
    SeedGuest(FuzzHost& host, Rig& rig) : host_(host), rig_(rig), part_(rig.machine.partition()) {}

    // hyperv_init() and the SynIC of each VP, then INITIATE_CONTACT (5.3) and REQUEST_OFFERS.
    void connect() {
        wrmsr(0, hv::msr::kGuestOsId, 0x810000060c000000ull);
        wrmsr(0, hv::msr::kHypercall, kHypercallPage | 1);
        for (uint32_t vp = 0; vp < kVps; vp++) {
            wrmsr(vp, hv::msr::kSimp, (kSimp + vp * kPerVp) | 1);
            wrmsr(vp, hv::msr::kSiefp, (kSiefp + vp * kPerVp) | 1);
            wrmsr(vp, hv::msr::kSint0 + vmbus::kVmbusSint, kVector);
            wrmsr(vp, hv::msr::kScontrol, 1);
        }
        vmbus::InitiateContact c{};
        c.hdr.msgtype = uint32_t(vmbus::MsgType::InitiateContact);
        c.version_requested = vmbus::version::kV5_3;
        c.v5.msg_sint = vmbus::kVmbusSint;
        post(vmbus::kMessageConnectionId4, c);
        FUZZ_CHECK(message(vmbus::MsgType::VersionResponse)[8] == 1);
        post(vmbus::kMessageConnectionId, vmbus::MsgHeader{uint32_t(vmbus::MsgType::RequestOffers), 0});
        message(vmbus::MsgType::AllOffersDelivered);
        inbox_.clear(); // the offers: the guest knows the primary's relid from the machine
    }

    // A ring GPADL (both rings, kRingPages each) at slot `k`, then OPENCHANNEL on it.
    void open(uint32_t k, uint32_t relid) {
        GuestChannel& c = chans_[k];
        const uint64_t base = kRings + k * kRingSlot;
        c.lay_out(host_, relid, base, kRingPages);
        std::vector<uint64_t> words{uint64_t(2 * kRingPages) * kPageSize};
        for (uint32_t i = 0; i < 2 * kRingPages; i++) words.push_back(base / kPageSize + i);
        vmbus::GpadlHeader h{};
        h.hdr.msgtype = uint32_t(vmbus::MsgType::GpadlHeader);
        h.child_relid = relid;
        h.gpadl = k + 1;
        h.range_buflen = uint16_t(8 * words.size());
        h.rangecount = 1;
        std::vector<uint8_t> m(sizeof h + 8 * words.size());
        std::memcpy(m.data(), &h, sizeof h);
        std::memcpy(m.data() + sizeof h, words.data(), 8 * words.size());
        post(vmbus::kMessageConnectionId, m.data(), uint32_t(m.size()));
        FUZZ_CHECK(field(message(vmbus::MsgType::GpadlCreated), offsetof(vmbus::GpadlCreated, creation_status)) == 0);
        vmbus::OpenChannel o{};
        o.hdr.msgtype = uint32_t(vmbus::MsgType::OpenChannel);
        o.child_relid = relid;
        o.openid = relid;
        o.ringbuffer_gpadlhandle = h.gpadl;
        o.downstream_ringbuffer_pageoffset = kRingPages;
        post(vmbus::kMessageConnectionId, o);
        FUZZ_CHECK(field(message(vmbus::MsgType::OpenChannelResult), offsetof(vmbus::OpenResult, status)) == 0);
        open_[k] = true;
    }

    // storvsc's init sequence on the primary, each step answered before the next.
    void handshake() {
        for (Operation op : {Operation::BeginInitialization, Operation::QueryProtocolVersion,
                             Operation::QueryProperties, Operation::EndInitialization}) {
            VstorPacket p{};
            p.operation = uint32_t(op);
            p.version.major_minor = op == Operation::QueryProtocolVersion ? kVersionWin10 : 0;
            control(0, p);
        }
    }

    // A control packet on channel `k`, and its answer.
    void control(uint32_t k, const VstorPacket& p) {
        FUZZ_CHECK(send(k, vmbus::PacketType::DataInband, {}, p));
        const size_t want = answers_ + 1;
        pump([&] { return answers_ >= want; });
    }

    // Sends a control packet that is not answered now (a held reset).
    void control_unanswered(uint32_t k, const VstorPacket& p) {
        FUZZ_CHECK(send(k, vmbus::PacketType::DataInband, {}, p));
    }

    // CREATE_SUB_CHANNELS for one, then the guest opens the subchannel offered (slot 1).
    void subchannel() {
        VstorPacket p{};
        p.operation = uint32_t(Operation::CreateSubChannels);
        p.sub_channel_count = 1;
        control(0, p);
        std::vector<uint8_t> offer;
        pump([&] {
            offer = find(vmbus::MsgType::OfferChannel);
            return !offer.empty();
        });
        open(1, field(offer, offsetof(vmbus::OfferChannel, child_relid)));
    }

    // READ(10)s of 4 KiB to `lun` on channel `k`, GPA-direct into the read buffers.
    void reads(uint32_t k, uint8_t lun, uint32_t n) {
        for (uint32_t i = 0; i < n; i++) FUZZ_CHECK(read(k, lun, i));
    }

    // Runs the channels' loop and takes the guest's messages and answers until `done`.
    template <typename Done> void pump(Done done) {
        const auto until = std::chrono::steady_clock::now() + 10s;
        for (;;) {
            rig_.loop->run_ready(0);
            take_messages();
            for (uint32_t k = 0; k < 2; k++)
                while (open_[k] && chans_[k].read([&] { signal(chans_[k].relid); })) answers_++;
            if (done()) return;
            if (std::chrono::steady_clock::now() > until) fail("the seed machine stopped answering");
            std::this_thread::sleep_for(50us);
        }
    }

private:
    void wrmsr(uint32_t vp, uint32_t msr, uint64_t v) {
        FUZZ_CHECK(part_.wrmsr(vp, msr, v) == hv::MsrResult::Handled);
    }

    // HVCALL_POST_MESSAGE from VP 0, then the messages it brought.
    void post(uint32_t conn, const void* msg, uint32_t len) {
        const uint32_t hdr[4] = {conn, 0, vmbus::kHvMessageTypeVmbus, len};
        host_.store(kInput, hdr, sizeof hdr);
        host_.store(kInput + 16, msg, len);
        FUZZ_CHECK(part_.hypercall(0, 0x5C, kInput, 0) == 0);
        take_messages();
    }
    template <typename T> void post(uint32_t conn, const T& m) { post(conn, &m, sizeof m); }

    void signal(uint32_t relid) {
        (void)part_.hypercall(0, 0x5D | 1ull << 16, vmbus::Server::kSignalBase + relid, 0);
    }

    // VP 0's VMBus message slot, as the guest's message DPC: copy, clear, EOM when pending.
    void take_messages() {
        const uint64_t slot = kSimp + vmbus::kVmbusSint * hv::kMessageSlotSize;
        while (host_.load32(slot) != 0) {
            const uint8_t size = host_.load<uint8_t>(slot + 4), flags = host_.load<uint8_t>(slot + 5);
            inbox_.emplace_back(host_.ram(slot + 16), host_.ram(slot + 16) + size);
            host_.store32(slot, 0);
            if (flags & 1) wrmsr(0, hv::msr::kEom, 0);
        }
    }

    // The first message of `type` taken, off the inbox; empty when none came.
    std::vector<uint8_t> find(vmbus::MsgType type) {
        for (auto it = inbox_.begin(); it != inbox_.end(); ++it) {
            if (it->size() >= 4 && field(*it, 0) == uint32_t(type)) {
                std::vector<uint8_t> m = std::move(*it);
                inbox_.erase(it);
                return m;
            }
        }
        return {};
    }
    std::vector<uint8_t> message(vmbus::MsgType type) {
        std::vector<uint8_t> m = find(type);
        if (m.empty()) fail("the seed machine did not answer a VMBus message");
        return m;
    }
    static uint32_t field(const std::vector<uint8_t>& m, size_t at) {
        uint32_t v = 0;
        if (m.size() >= at + 4) std::memcpy(&v, m.data() + at, 4);
        return v;
    }

    // One READ(10) of 4 KiB (the i-th buffer of channel k); false when the ring is full.
    bool read(uint32_t k, uint8_t lun, uint32_t i) {
        VstorPacket p{};
        p.operation = uint32_t(Operation::ExecuteSrb);
        VmscsiRequest& s = p.srb;
        s.length = sizeof s;
        s.lun = lun;
        s.cdb_length = 10;
        s.data_in = kDataRead;
        s.sense_info_length = kSenseBytes;
        s.data_transfer_length = 4096;
        const uint32_t lba = i * 8;
        const uint8_t cdb[10] = {0x28, 0, uint8_t(lba >> 24), uint8_t(lba >> 16), uint8_t(lba >> 8), uint8_t(lba),
                                 0, 0, 8, 0};
        std::memcpy(s.cdb_or_sense, cdb, sizeof cdb);
        // Reserved word, one range: 4096 bytes at offset 0 of one page.
        const uint64_t pfn = (kBuf + (k * 16 + i) * kPageSize) / kPageSize;
        std::vector<uint8_t> ranges(24);
        const uint32_t count = 1, bytes = 4096;
        std::memcpy(ranges.data() + 4, &count, 4);
        std::memcpy(ranges.data() + 8, &bytes, 4);
        std::memcpy(ranges.data() + 16, &pfn, 8);
        return send(k, vmbus::PacketType::DataUsingGpaDirect, ranges, p);
    }

    // A packet on channel k: the descriptor, `head` (a GPA-direct packet's ranges), the vstor
    // packet; signals as Linux does. False when the ring has no room.
    bool send(uint32_t k, vmbus::PacketType type, const std::vector<uint8_t>& head, const VstorPacket& p) {
        vmbus::PacketDescriptor d{};
        d.type = uint16_t(type);
        d.offset8 = uint16_t((sizeof d + head.size()) / 8);
        d.flags = vmbus::kPacketFlagCompletionRequested;
        d.trans_id = ++trans_;
        std::vector<uint8_t> body(head);
        body.resize(head.size() + sizeof p);
        std::memcpy(body.data() + head.size(), &p, sizeof p);
        return chans_[k].write(d, body, [&] { signal(chans_[k].relid); });
    }

    FuzzHost& host_;
    Rig& rig_;
    hv::Partition& part_;
    GuestChannel chans_[2];
    bool open_[2] = {false, false};
    size_t answers_ = 0;
    uint64_t trans_ = 0;
    std::vector<std::vector<uint8_t>> inbox_;
};

using Seeds = std::vector<std::pair<std::string, std::vector<uint8_t>>>;

// One machine's life up to a save: `drive` runs the guest, then the VM stops and the machine
// is saved. Each on a machine of its own (one FuzzHost at a time).
template <typename Drive> void seed(Seeds& out, const char* name, Drive drive) {
    FuzzHost host(kRam, kHoleStart, kHoleEnd);
    Rig rig(host);
    {
        SeedGuest guest(host, rig);
        drive(guest, rig);
    }
    rig.machine.set_running(false);
    out.emplace_back(name, rig.machine.save());
    rig.machine.reset();
}

Seeds make_seeds() {
    Seeds s;
    seed(s, "fresh", [](SeedGuest&, Rig&) {});
    seed(s, "connected", [](SeedGuest& g, Rig&) { g.connect(); });
    // The handshake done, a rescan notice held until the guest's first SRB.
    seed(s, "open", [](SeedGuest& g, Rig& rig) {
        g.connect();
        g.open(0, rig.ctl->controller().primary_relid());
        g.handshake();
        rig.ctl->notify("enumerate-bus");
    });
    // Eight reads behind the model's cap: two went through, six are carried to the next machine.
    seed(s, "queued", [](SeedGuest& g, Rig& rig) {
        g.connect();
        g.open(0, rig.ctl->controller().primary_relid());
        g.handshake();
        g.reads(0, 1, 8);
        perf::ModelBackend& model = *rig.modelled->model();
        g.pump([&] { return model.stats().queued + model.stats().issued >= 8; });
    });
    // A RESET_BUS held by reset=ignore.
    seed(s, "held-reset", [](SeedGuest& g, Rig& rig) {
        g.connect();
        g.open(0, rig.ctl->controller().primary_relid());
        g.handshake();
        rig.ctl->set_reset("ignore");
        VstorPacket p{};
        p.operation = uint32_t(Operation::ResetBus);
        g.control_unanswered(0, p);
        g.pump([&] { return rig.ctl->controller().stats().resets_held == 1; });
    });
    // A subchannel open beside the primary, a read waiting behind the cap on each.
    seed(s, "subchannel", [](SeedGuest& g, Rig& rig) {
        g.connect();
        g.open(0, rig.ctl->controller().primary_relid());
        g.handshake();
        g.subchannel();
        g.reads(0, 1, 3);
        g.reads(1, 1, 1);
        perf::ModelBackend& model = *rig.modelled->model();
        g.pump([&] { return model.stats().queued + model.stats().issued >= 4; });
    });
    // A stall fault on the modelled disk under way: of three reads the second is held by it,
    // the others by the model's cap; its counts carried.
    seed(s, "fault", [](SeedGuest& g, Rig& rig) {
        g.connect();
        g.open(0, rig.ctl->controller().primary_relid());
        g.handshake();
        rig.modelled->set_fault("stall=hold,ops=read,every=2,count=3");
        g.reads(0, 1, 3);
        perf::ModelBackend& model = *rig.modelled->model();
        g.pump([&] {
            return rig.modelled->scsi().stats().stalled.load() == 1 && model.stats().queued + model.stats().issued >= 2;
        });
    });
    return s;
}

void write_seeds(const std::string& dir) {
    for (const auto& [name, bytes] : make_seeds()) {
        std::ofstream f(dir + "/" + name, std::ios::binary | std::ios::trunc);
        f.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
        if (!f) fail(("cannot write " + dir + "/" + name).c_str());
    }
}

} // namespace

// `--write-seeds=DIR` (libFuzzer ignores flags that begin with "--"): writes the seeds into
// DIR and exits, for tests/fuzz/gen_corpus.py.
extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
    static const std::string kFlag = "--write-seeds=";
    for (int i = 1; i < *argc; i++) {
        const std::string a = (*argv)[i];
        if (a.rfind(kFlag, 0) != 0) continue;
        write_seeds(a.substr(kFlag.size()));
        std::exit(0);
    }
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static Target target;
    target.run({data, size});
    return 0;
}
