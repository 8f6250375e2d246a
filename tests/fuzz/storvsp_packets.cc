// storvsp packets on open channels: the init handshake, CREATE_SUB_CHANNELS, resets,
// EXECUTE_SRB with hostile CDB, sense and data lengths, LUNs, and GPA-direct ranges in RAM,
// in the MMIO hole, past the end of RAM or made up; raw packets with any descriptor. The
// controller sits on a loopback bus (no partition or server) with a RAM disk and a null disk.
// Between packets the host's own events: how resets are answered (held ones released at the
// next wait for answers), rescan notices, a fault on the RAM disk (srb= answers among them).
//
// Input: a mode byte (bit 0: flip, bit 1: the null disk on LUN 1, bits 2-3: the newest protocol
// version offered, bit 4: the channels turn in an event loop this thread runs after each
// record and while it waits for answers, instead of worker threads), then records
// (fuzz_common.h). Checked, unless in flip mode or after a raw
// packet that lies about its length: every packet gets exactly one completion (a 64-byte
// vstor packet or shorter; one that never comes is a libFuzzer timeout) and with
// SIGNAL_EVENT only where Linux sends one;
// an SRB never reports more data than it asked for. Always: closing a channel waits for its
// requests, and every guest page mapped is unmapped at the end.
// Flip mode: a thread keeps changing the guest-to-host rings and the data buffers.
#include <algorithm>
#include <map>

#include "fake_bus.h"
#include "fake_loop.h"
#include "guest_rings.h"
#include "hvstor/backend/backend.h"
#include "hvstor/scsi/disk.h"
#include "hvstor/storvsp/controller.h"

using namespace hvstor;
using namespace hvstor::fuzz;
using namespace hvstor::storvsp;
using namespace std::chrono_literals;

namespace {

constexpr uint64_t kRam = 1 << 20;
constexpr uint64_t kHoleStart = 0xC0000, kHoleEnd = 0xE0000;
constexpr uint32_t kRingPages = 5;             // each ring: header + 16 KiB
constexpr uint64_t kRingBase = 0x10000;        // channel k's rings at kRingBase + k * kRingSlot
constexpr uint64_t kRingSlot = 0x10000;
constexpr uint32_t kMaxChannels = 3;           // primary + 2 subchannels
constexpr uint64_t kData = 0x40000, kDataSize = kHoleStart - kData; // SRB buffers
constexpr uint32_t kMaxPfns = 300;

enum Rec : uint8_t {
    kControl = 0,   // u8 length (0: 64), u8 packet type (0: 6, 1: 9, else raw), vstor packet bytes
    kSrb = 1,       // see srb()
    kRaw = 2,       // u16 type, u16 offset8, u16 len8 (0: the body's), u16 flags, body
    kSettle = 3,    // wait until every channel has answered
    kOpenSub = 4,   // u8 which offered subchannel; later packets go to it
    kUse = 5,       // u8 channel: later packets go to it (if open)
    kClose = 6,     // u8 channel: the guest closes it (the primary takes its subchannels along)
    kReopen = 7,    // reopen the primary with fresh rings
    kLun = 8,       // u8 lun (0 or 1), u8 attach: hot remove or add a disk
    kGuestMem = 9,  // u32 offset, bytes: the guest writes its data buffers
    kHandshake = 10, // the Linux init sequence on the current channel
    kHost = 11,      // u8 event: 0 reset=answer, 1 reset=ignore, 2 reset=fail, 3 notify=enumerate-bus,
                     // 4 notify=remove-device, 5 the RAM disk's fault (the rest: its text)
};

const uint16_t kVersions[] = {kVersionWin10, kVersionWin8_1, kVersionWin8, kVersionWin10};

// Flips bytes that the host reads: a guest-to-host ring's data pages (packets being read) or
// the data buffers.
Flipper::Pick flip_shared(FuzzHost& host) {
    return [&host](uint64_t r) {
        uint64_t gpa;
        if (r & 1) {
            const uint64_t ch = (r >> 1) % kMaxChannels;
            gpa = kRingBase + ch * kRingSlot + kPageSize + (r >> 8) % ((kRingPages - 1) * kPageSize);
        } else {
            gpa = kData + (r >> 8) % kDataSize;
        }
        return host.ram(gpa);
    };
}

struct Expect {
    bool srb = false;
    uint32_t len = 0;
};

struct Chan {
    GuestChannel g;
    bool open = false;
    bool loose = false; // framing may be off (a raw packet's len8, flips): no exact accounting
    uint64_t next_id = 1;
    std::map<uint64_t, Expect> pending;
};

class Rig {
public:
    explicit Rig(uint8_t mode) : flip_(mode & 1) {
        std::string err;
        ram_ = backend::make_ram(1 << 20, err);
        if (!ram_) fail(err.c_str());
        if (mode & 2) {
            null_ = backend::make_null(1ull << 30, err);
            if (!null_) fail(err.c_str());
        }
        ControllerConfig cfg;
        cfg.max_subchannels = kMaxChannels - 1;
        cfg.max_transfer_bytes = 64 * 1024;
        cfg.max_outstanding_per_channel = 8;
        cfg.max_protocol_version = kVersions[(mode >> 2) & 3];
        if (mode & 16) {
            loop_ = std::make_unique<test::FakeLoop>(test::FakeLoop::Caller);
            cfg.loops = {loop_.get()};
        }
        ctl_ = std::make_unique<Controller>(host_, bus_, vmbus::Guid{}, cfg);
        if (!ctl_->start(err)) fail(err.c_str());
        scsi::DiskConfig dc;
        dc.max_transfer_bytes = 64 * 1024;
        dc.serial = "fuzz";
        disks_[0] = std::make_unique<scsi::Disk>(*ram_, dc, *ctl_);
        if (null_) disks_[1] = std::make_unique<scsi::Disk>(*null_, dc, *ctl_);
        for (uint8_t l = 0; l < 2; l++)
            if (disks_[l] && !ctl_->attach(l, disks_[l].get(), err)) fail(err.c_str());
        open(0, ctl_->primary_relid());
    }

    ~Rig() {
        flipper_.reset();
        settle();
        if (chans_[0].open) bus_.close(chans_[0].g.relid); // takes the subchannels along
        ctl_.reset();
        if (loop_) {
            FUZZ_CHECK(loop_->watching() == 0);      // every channel let go of the loop
            FUZZ_CHECK(loop_->bad_unwatches() == 0); // each watch ended once
        }
        disks_[0].reset();
        disks_[1].reset();
        ram_.reset();
        null_.reset();
        FUZZ_CHECK(host_.maps == host_.unmaps);
    }

    void start_flipping(uint64_t seed) {
        if (flip_) flipper_ = std::make_unique<Flipper>(flip_shared(host_), seed);
    }

    // After each record: the loop's turns, if the channels have one.
    void turns() {
        if (loop_) loop_->run_ready();
    }

    void record(const Record& r) {
        Reader b(r.body);
        switch (r.type % 12) {
        case kControl: control(b); break;
        case kSrb: srb(b); break;
        case kRaw: raw(b); break;
        case kSettle: settle(); break;
        case kOpenSub: open_sub(b.u8()); break;
        case kUse: {
            const uint8_t c = b.u8() % kMaxChannels;
            if (chans_[c].open) cur_ = c;
            break;
        }
        case kClose: close(b.u8() % kMaxChannels); break;
        case kReopen:
            if (!chans_[0].open) open(0, ctl_->primary_relid());
            break;
        case kLun: {
            const uint8_t lun = b.u8() & 1;
            if (!disks_[lun]) break;
            if (b.u8() & 1) {
                std::string err;
                (void)ctl_->attach(lun, disks_[lun].get(), err); // refused when already there
            } else {
                ctl_->detach(lun);
            }
            break;
        }
        case kGuestMem: {
            const uint64_t at = kData + b.u32() % kDataSize;
            auto bytes = b.bytes(b.left());
            host_.store(at, bytes.data(), std::min<size_t>(bytes.size(), kData + kDataSize - at));
            break;
        }
        case kHandshake: handshake(); break;
        case kHost: host_event(b); break;
        }
    }

private:
    void signal(Chan& c) { bus_.signal(c.g.relid); }

    void host_event(Reader& b) {
        const uint8_t what = b.u8() % 6;
        std::string err;
        if (what < 3) {
            ctl_->set_reset_answer(ResetAnswer(what));
        } else if (what < 5) {
            (void)ctl_->notify(what == 3 ? Notice::EnumerateBus : Notice::RemoveDevice, err); // no session: refused
        } else {
            auto text = b.bytes(b.left());
            scsi::FaultSpec f;
            // A stall would hold answers the rig waits for (scsi_cdb fuzzes those).
            if (!scsi::parse_fault(std::string_view(reinterpret_cast<const char*>(text.data()), text.size()), f, err) ||
                f.action == scsi::FaultSpec::Action::Stall)
                return;
            disks_[0]->set_fault(f);
            // An srb= answer reports what it says, the data length included.
            answers_as_told_ |= f.action == scsi::FaultSpec::Action::Srb;
        }
    }

    void open(uint32_t slot, uint32_t relid) {
        Chan& c = chans_[slot];
        c = Chan{};
        c.g.lay_out(host_, relid, kRingBase + slot * kRingSlot, kRingPages);
        host_.forget_stopped(relid);
        c.loose = flip_;
        c.open = bus_.open(relid, kRingBase + slot * kRingSlot, 2 * kRingPages) == vmbus::kStatusSuccess;
        if (c.open) cur_ = slot;
    }

    void open_sub(uint8_t which) {
        // The offered subchannels nobody opened yet, in relid order.
        uint32_t slot = 1;
        while (slot < kMaxChannels && chans_[slot].open) slot++;
        if (slot == kMaxChannels) return;
        std::vector<uint32_t> free;
        for (uint32_t relid = 1; relid < 64; relid++) {
            auto o = bus_.offer_of(relid);
            if (!o || o->subchannel_index == 0) continue;
            bool used = false;
            for (auto& c : chans_) used |= c.open && c.g.relid == relid;
            if (!used) free.push_back(relid);
        }
        if (free.empty()) return;
        open(slot, free[which % free.size()]);
    }

    void close(uint32_t slot) {
        if (!chans_[slot].open) return;
        settle(); // what the guest is owed arrives before it closes (storvsc waits for it)
        bus_.close(chans_[slot].g.relid);
        chans_[slot].open = false;
        // Closing the primary rescinds the subchannels, which closes them.
        if (slot == 0)
            for (auto& c : chans_) c.open = false;
        if (!chans_[cur_].open) cur_ = 0;
    }

    // Sends a packet on the current channel; waits for room once if the ring is full.
    void send(vmbus::PacketDescriptor d, std::span<const uint8_t> body, Expect e, bool frames_ok = true) {
        Chan& c = chans_[cur_];
        if (!c.open || sent_ >= 96) return;
        d.trans_id = c.next_id++;
        auto sig = [&] { signal(c); };
        if (!c.g.write(d, body, sig)) {
            settle();
            if (!c.open || !c.g.write(d, body, sig)) return;
        }
        sent_++;
        if (!frames_ok) c.loose = true;
        if (!c.loose) c.pending[d.trans_id] = e;
    }

    static vmbus::PacketDescriptor desc(uint16_t type, uint16_t offset8) {
        vmbus::PacketDescriptor d{};
        d.type = type;
        d.offset8 = offset8;
        d.flags = vmbus::kPacketFlagCompletionRequested;
        return d;
    }

    void control(Reader& b) {
        const uint8_t len_sel = b.u8();
        const uint8_t type_sel = b.u8();
        VstorPacket p = b.fill<VstorPacket>();
        const size_t len = len_sel ? len_sel : sizeof p;
        std::vector<uint8_t> body;
        uint16_t type = uint16_t(vmbus::PacketType::DataInband), off8 = 2;
        if (type_sel == 1) {
            // GPA direct with no ranges: reserved word and range count 0 before the payload.
            type = uint16_t(vmbus::PacketType::DataUsingGpaDirect);
            body.resize(8);
            off8 = 3;
        } else if (type_sel > 1) {
            type = type_sel;
        }
        const size_t at = body.size();
        body.resize(at + len);
        std::memcpy(body.data() + at, &p, std::min(len, sizeof p));
        send(desc(type, off8), body, {});
    }

    // u8 lun, u8 path/target (bits 0-1, 2-3), u8 cdb_length, u8 sense_info_length, u8 data_in,
    // u32 data_transfer_length, u8 buffer kind, u32 buffer offset, u8 flags (bit 0: the short
    // pre-win8 packet, bit 1: inband even with data), 16 CDB bytes, then for kind 3 the ranges.
    void srb(Reader& b) {
        VstorPacket p{};
        p.operation = uint32_t(Operation::ExecuteSrb);
        VmscsiRequest& s = p.srb;
        s.lun = b.u8();
        const uint8_t addr = b.u8();
        s.path_id = addr & 3;
        s.target_id = (addr >> 2) & 3;
        s.cdb_length = b.u8();
        s.sense_info_length = b.u8();
        s.data_in = b.u8();
        s.data_transfer_length = b.u32();
        const uint8_t kind = b.u8();
        const uint32_t boff = b.u32();
        const uint8_t flags = b.u8();
        auto cdb = b.bytes(16);
        std::memcpy(s.cdb_or_sense, cdb.data(), cdb.size());
        s.length = sizeof s;
        const uint32_t len = s.data_transfer_length;
        const size_t plen = (flags & 1) ? kVstorPacketMin : sizeof p;

        std::vector<uint8_t> ranges; // after the descriptor: reserved, count, ranges
        auto put32 = [&](uint32_t v) { ranges.insert(ranges.end(), reinterpret_cast<uint8_t*>(&v), reinterpret_cast<uint8_t*>(&v) + 4); };
        auto put64 = [&](uint64_t v) { ranges.insert(ranges.end(), reinterpret_cast<uint8_t*>(&v), reinterpret_cast<uint8_t*>(&v) + 8); };
        const bool gpa = !(flags & 2) && s.data_in != kDataNone && len != 0;
        if (gpa) {
            put32(0);
            if (kind % 5 == 3) {
                // Made-up ranges: a declared count, then each range's byte_count, byte_offset
                // and pfns, each pfn a RAM page of the data area or a bad one.
                put32(b.u8());
                const uint8_t n = b.u8() % 8;
                for (uint8_t i = 0; i < n; i++) {
                    put32(b.u32());
                    put32(b.u16());
                    const uint8_t np = b.u8() % 32;
                    for (uint8_t j = 0; j < np; j++) put64(pick_pfn(b.u8()));
                }
            } else {
                uint64_t at;
                switch (kind % 5) {
                case 0: at = kData + boff % kDataSize; break;                     // may run into the hole
                case 1: at = kHoleStart + boff % (kHoleEnd - kHoleStart); break;  // MMIO
                case 2: at = kRam - boff % 0x4000; break;                         // runs off the end of RAM
                default: at = ~uint64_t(0xFFFF) + boff % 0x8000; break;          // far beyond RAM
                }
                const uint32_t off = uint32_t(at % kPageSize);
                const uint32_t npfn = std::min<uint32_t>(uint32_t((uint64_t(off) + len + kPageSize - 1) / kPageSize), kMaxPfns);
                put32(1);
                put32(len);
                put32(off);
                for (uint32_t i = 0; i < npfn; i++) put64(at / kPageSize + i);
            }
        }
        const size_t hdr = sizeof(vmbus::PacketDescriptor) + ranges.size();
        const uint16_t off8 = uint16_t((hdr + 7) / 8);
        ranges.resize(off8 * 8 - sizeof(vmbus::PacketDescriptor));
        std::vector<uint8_t> body = ranges;
        const size_t at = body.size();
        body.resize(at + plen);
        std::memcpy(body.data() + at, &p, plen);
        send(desc(uint16_t(gpa ? vmbus::PacketType::DataUsingGpaDirect : vmbus::PacketType::DataInband), off8), body,
             {true, len});
    }

    static uint64_t pick_pfn(uint8_t b) {
        switch (b) {
        case 0xFF: return ~0ull;
        case 0xFE: return 1ull << 52;
        case 0xFD: return kHoleStart / kPageSize;
        case 0xFC: return kRam / kPageSize;
        case 0xFB: return kRingBase / kPageSize; // the guest's own ring: its business
        default: return kData / kPageSize + b % (kDataSize / kPageSize);
        }
    }

    void raw(Reader& b) {
        vmbus::PacketDescriptor d{};
        d.type = b.u16();
        d.offset8 = b.u16();
        const uint16_t len8 = b.u16();
        d.flags = b.u16();
        auto body = b.bytes(b.left());
        const uint16_t fit = uint16_t((sizeof d + body.size() + 7) / 8);
        d.len8 = len8;
        // A length other than the packet's own moves the host off the packet boundaries.
        send(d, body, {}, len8 == 0 || len8 == fit);
    }

    void handshake() {
        VstorPacket p{};
        auto inband = [&](const VstorPacket& v) {
            std::vector<uint8_t> body(sizeof v);
            std::memcpy(body.data(), &v, sizeof v);
            send(desc(uint16_t(vmbus::PacketType::DataInband), 2), body, {});
        };
        p.operation = uint32_t(Operation::BeginInitialization);
        inband(p);
        p = {};
        p.operation = uint32_t(Operation::QueryProtocolVersion);
        p.version.major_minor = kVersionWin10;
        inband(p);
        p = {};
        p.operation = uint32_t(Operation::QueryProperties);
        inband(p);
        p = {};
        p.operation = uint32_t(Operation::EndInitialization);
        inband(p);
        settle();
    }

    void take(Chan& c, const GuestChannel::Packet& pk) {
        const auto& d = pk.d;
        if (d.type == uint16_t(vmbus::PacketType::DataInband) && d.trans_id == 0) return; // ENUMERATE_BUS
        FUZZ_CHECK(d.type == uint16_t(vmbus::PacketType::Completion));
        FUZZ_CHECK(uint32_t(d.len8) * 8 <= 80); // storvsc takes at most 80 bytes
        if (c.loose) return;
        auto it = c.pending.find(d.trans_id);
        FUZZ_CHECK(it != c.pending.end()); // one answer per request, to a request sent
        VstorPacket p{};
        std::memcpy(&p, pk.payload.data(), std::min(pk.payload.size(), sizeof p));
        FUZZ_CHECK(p.operation == uint32_t(Operation::CompleteIo));
        if (it->second.srb && p.status == kStatusSuccess && pk.payload.size() >= 20 && !answers_as_told_) {
            FUZZ_CHECK(p.srb.data_transfer_length <= it->second.len);
            FUZZ_CHECK(p.srb.sense_info_length <= kSenseBytes);
        }
        c.pending.erase(it);
    }

    bool quiet(Chan& c) {
        if (!c.open || host_.channel_stopped(c.g.relid)) return true;
        return c.loose ? c.g.out_empty() : c.pending.empty();
    }

    // Reads completions until every open channel has answered what it owes (or stopped).
    // An answer owed exactly is waited for without a bound of its own: one that never comes
    // is libFuzzer's -timeout, the only clock. Where nothing is counted (flipped rings, or
    // framing off after a raw packet) a request may never be answered: it stops once no
    // answer came for 2 ms.
    void settle() {
        // Held resets are owed too: from here they are answered (the unit tests hold them
        // across closes and machine resets).
        if (ctl_->reset_answer() == ResetAnswer::Ignore) ctl_->set_reset_answer(ResetAnswer::Answer);
        auto moved_at = std::chrono::steady_clock::now();
        for (;;) {
            bool progress = loop_ && loop_->run_ready(), all = true, owed = false;
            for (auto& c : chans_) {
                if (!c.open) continue;
                while (auto pk = c.g.read([&] { signal(c); })) {
                    take(c, *pk);
                    progress = true;
                }
                const bool q = quiet(c);
                all &= q;
                owed |= !q && !c.loose;
            }
            if (all) return;
            const auto now = std::chrono::steady_clock::now();
            if (progress) moved_at = now;
            if (!owed && now - moved_at > 2ms) return;
            if (!progress) std::this_thread::sleep_for(20us);
        }
    }

    const bool flip_;
    FuzzHost host_{kRam, kHoleStart, kHoleEnd};
    test::LoopbackBus bus_;
    std::unique_ptr<backend::Backend> ram_, null_;
    std::unique_ptr<test::FakeLoop> loop_; // outlives the controller
    std::unique_ptr<Controller> ctl_;
    std::unique_ptr<scsi::Disk> disks_[2];
    Chan chans_[kMaxChannels];
    uint32_t cur_ = 0;
    int sent_ = 0;
    bool answers_as_told_ = false; // a fault's srb= answers may report any length
    std::unique_ptr<Flipper> flipper_;
};

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    Reader in(data, size);
    const uint8_t mode = in.u8();
    Rig rig(mode);
    rig.start_flipping(in.u64());
    Record r;
    for (int i = 0; i < 128 && next_record(in, r); i++) {
        rig.record(r);
        rig.turns();
    }
    return 0;
}
