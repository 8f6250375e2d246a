// VMBus channel messages from the guest, posted with HVCALL_POST_MESSAGE through the
// partition to the VMBus server: INITIATE_CONTACT with any version, SINT and VP,
// REQUEST_OFFERS, GPADL_HEADER/BODY (raw, or a ring laid out as Linux does), OPENCHANNEL,
// CLOSECHANNEL, GPADL_TEARDOWN, MODIFYCHANNEL, UNLOAD, RELID_RELEASED, raw messages with any
// connection id and type; plus SIGNAL_EVENT, any hypercall (control word, input and output as
// the guest passes them), writes and reads of the Hyper-V MSRs, CPUID, writes to guest memory
// (a ring or the message page) and storvsp packets into an opened channel's ring. A storvsp
// controller with a RAM disk is offered, so opens start real channel workers.
//
// The guest starts as Linux does after hyperv_init() (guest OS id set, hypercall page
// enabled); MSR records can clear either, and the partition then refuses hypercalls.
// Input: a mode byte (bit 0: the guest takes its messages after every record, as a running
// guest does; bits 1-2: the newest version the server speaks), then records (fuzz_common.h).
// Checked: after the connection is reset no GPADL is left and no channel is open; every page
// mapped is unmapped at the end (the guest may write its own message pages, so what lies in
// them proves nothing about the host).
#include <chrono>
#include <map>
#include <thread>

#include "fuzz_host.h"
#include "hvstor/backend/backend.h"
#include "hvstor/hyperv/msr.h"
#include "hvstor/hyperv/partition.h"
#include "hvstor/scsi/disk.h"
#include "hvstor/storvsp/controller.h"
#include "hvstor/vmbus/ring.h"
#include "hvstor/vmbus/server.h"

using namespace hvstor;
using namespace hvstor::fuzz;
using namespace hvstor::vmbus;

namespace {

constexpr uint64_t kRam = 1 << 20;
constexpr uint64_t kHoleStart = 0xC0000, kHoleEnd = 0xE0000;
constexpr uint32_t kVps = 2;
constexpr uint64_t kSimp = 0x2000, kSiefp = 0x3000, kPerVp = 0x2000; // vp v: + v * kPerVp
constexpr uint64_t kInput = 0x8000;                                  // vp v: + v * 0x1000
constexpr uint64_t kHypercallPage = 0x7000;
constexpr uint64_t kRingPage0 = 16, kRingPages = 48;                 // where GPADL rings go
constexpr uint8_t kVector = 0xF3;
constexpr uint64_t kPostMessage = 0x5C, kSignalEvent = 0x5D, kFast = 1ull << 16;

enum Rec : uint8_t {
    kRawPost = 0,   // u8 vp, u32 connection id, u32 message type, payload
    kContact = 1,   // u8 vp, u8 version (below 8: version::kAll, else u32 follows), u8 target vcpu, u8 sint,
                    // u8 connection (0: as Linux, 1: 1, 2: 4), u32 feature flags
    kOffers = 2,
    kGpadlHeader = 3, // u32 relid, u32 gpadl, u16 range_buflen, u16 rangecount, range words
    kGpadlBody = 4,   // u32 msgnumber, u32 gpadl, pfns
    kGpadlRing = 5,   // u8 relid, u8 gpadl, u8 pages, u8 first page, u8 byte_offset: Linux's layout
    kOpen = 6,        // u32 relid, u32 openid, u32 gpadl, u32 target_vp, u32 downstream offset, user data
    kClose = 7,       // u32 relid
    kTeardown = 8,    // u32 relid, u32 gpadl
    kModify = 9,      // u32 relid, u32 target_vp
    kUnload = 10,
    kReleased = 11,   // u32 relid
    kSignal = 12,     // u8 vp, u32 relid, u8 fast
    kMsr = 13,        // u8 vp, u8 which (below 12: the table in record(), else an MSR of the range), u64 value
    kTake = 14,       // the guest takes its messages now
    kMemWrite = 15,   // u32 gpa, bytes
    kVstor = 16,      // u8 first page, u8 split, u8 relid, vstor packet: into that ring, then signal
    kSettle = 17,     // wait until the host has read what kVstor wrote to open channels (200 ms per input at most)
    kHypercall = 18,  // u8 vp, u64 control, u64 input, u64 output: any hypercall, as the guest makes it
    kCpuid = 19,      // u32 leaf, u32 subleaf
};
constexpr uint8_t kRecords = 20;

class Rig {
public:
    explicit Rig(uint8_t mode) : auto_take_(mode & 1) {
        static constexpr uint32_t kMax[] = {version::kV5_3, version::kV5_0, version::kWin10Rs3, version::kWin8};
        ServerConfig sc;
        sc.max_version = kMax[(mode >> 1) & 3];
        sc.max_gpadl_pages = 256;
        sc.max_gpadls = 8;
        server_ = std::make_unique<Server>(part_.synic(), sc);
        part_.set_message_handler(server_.get());
        // As Linux's hyperv_init(): a guest OS id and the hypercall page first, without which
        // every hypercall is refused (kMsr records may turn them off again).
        wrmsr(0, hv::msr::kGuestOsId, 0x810000060c000000ull);
        wrmsr(0, hv::msr::kHypercall, kHypercallPage | 1);
        FUZZ_CHECK(part_.hypercall_page_enabled());
        for (uint32_t vp = 0; vp < kVps; vp++) {
            wrmsr(vp, hv::msr::kSimp, simp(vp) | 1);
            wrmsr(vp, hv::msr::kSiefp, siefp(vp) | 1);
            wrmsr(vp, hv::msr::kSint0 + kVmbusSint, kVector);
            wrmsr(vp, hv::msr::kScontrol, 1);
        }
        std::string err;
        ram_ = backend::make_ram(256 * 1024, err);
        if (!ram_) fail(err.c_str());
        storvsp::ControllerConfig cc;
        cc.max_subchannels = 1;
        cc.max_transfer_bytes = 16 * 1024;
        cc.max_outstanding_per_channel = 4;
        ctl_ = std::make_unique<storvsp::Controller>(host_, *server_, Guid{}, cc);
        if (!ctl_->start(err)) fail(err.c_str());
        disk_ = std::make_unique<scsi::Disk>(*ram_, scsi::DiskConfig{}, *ctl_);
        if (!ctl_->attach(0, disk_.get(), err)) fail(err.c_str());
    }

    ~Rig() {
        // The guest goes away: its connection, GPADLs and channels with it.
        server_->reset();
        FUZZ_CHECK(server_->gpadl_count() == 0 && !server_->connected());
        FUZZ_CHECK(ctl_->open_channels() == 0);
        for (uint32_t relid = 1; relid < 8; relid++) FUZZ_CHECK(!server_->channel_open(relid));
        ctl_.reset();
        disk_.reset();
        ram_.reset();
        part_.set_message_handler(nullptr);
        server_.reset();
        FUZZ_CHECK(host_.maps == host_.unmaps);
    }

    void record(const Record& r) {
        Reader b(r.body);
        switch (r.type % kRecords) {
        case kRawPost: {
            const uint32_t vp = b.u8() % kVps, conn = b.u32(), type = b.u32();
            auto payload = b.bytes(b.left());
            post(vp, conn, payload.data(), uint32_t(payload.size()), type);
            break;
        }
        case kContact: contact(b); break;
        case kOffers: {
            MsgHeader h{uint32_t(MsgType::RequestOffers), 0};
            post(0, kMessageConnectionId, h);
            break;
        }
        case kGpadlHeader: {
            GpadlHeader h{};
            h.hdr.msgtype = uint32_t(MsgType::GpadlHeader);
            h.child_relid = b.u32();
            h.gpadl = b.u32();
            h.range_buflen = b.u16();
            h.rangecount = b.u16();
            post_with(h, b.bytes(b.left()));
            break;
        }
        case kGpadlBody: {
            GpadlBody m{};
            m.hdr.msgtype = uint32_t(MsgType::GpadlBody);
            m.msgnumber = b.u32();
            m.gpadl = b.u32();
            post_with(m, b.bytes(b.left()));
            break;
        }
        case kGpadlRing: gpadl_ring(b); break;
        case kOpen: {
            OpenChannel o{};
            o.hdr.msgtype = uint32_t(MsgType::OpenChannel);
            o.child_relid = b.u32();
            o.openid = b.u32();
            o.ringbuffer_gpadlhandle = b.u32();
            o.target_vp = b.u32();
            o.downstream_ringbuffer_pageoffset = b.u32();
            auto ud = b.bytes(sizeof o.userdata);
            std::memcpy(o.userdata, ud.data(), ud.size());
            post(0, kMessageConnectionId, o);
            break;
        }
        case kClose: {
            CloseChannel m{};
            m.hdr.msgtype = uint32_t(MsgType::CloseChannel);
            m.child_relid = b.u32();
            post(0, kMessageConnectionId, m);
            break;
        }
        case kTeardown: {
            GpadlTeardown m{};
            m.hdr.msgtype = uint32_t(MsgType::GpadlTeardown);
            m.child_relid = b.u32();
            m.gpadl = b.u32();
            post(0, kMessageConnectionId, m);
            break;
        }
        case kModify: {
            ModifyChannel m{};
            m.hdr.msgtype = uint32_t(MsgType::ModifyChannel);
            m.child_relid = b.u32();
            m.target_vp = b.u32();
            post(0, kMessageConnectionId, m);
            break;
        }
        case kUnload: {
            MsgHeader h{uint32_t(MsgType::Unload), 0};
            post(0, kMessageConnectionId, h);
            break;
        }
        case kReleased: {
            RelidReleased m{};
            m.hdr.msgtype = uint32_t(MsgType::RelidReleased);
            m.child_relid = b.u32();
            post(0, kMessageConnectionId, m);
            break;
        }
        case kSignal: {
            const uint32_t vp = b.u8() % kVps;
            const uint64_t conn = Server::kSignalBase + b.u32();
            signal(vp, conn, b.u8() & 1);
            break;
        }
        case kMsr: {
            static constexpr uint32_t kMsrs[] = {
                hv::msr::kSimp, hv::msr::kSiefp, hv::msr::kScontrol, hv::msr::kEom, hv::msr::kSint0 + kVmbusSint,
                hv::msr::kSint0, hv::msr::kGuestOsId, hv::msr::kHypercall, hv::msr::kVpAssistPage,
                hv::msr::kTscInvariantControl, hv::msr::kVpIndex, hv::msr::kSversion};
            const uint32_t vp = b.u8() % kVps;
            const uint8_t which = b.u8();
            const uint32_t msr = which < 12 ? kMsrs[which] : hv::msr::kRangeFirst + (which - 12u) * 3;
            wrmsr(vp, msr, b.u64());
            uint64_t back;
            (void)part_.rdmsr(vp, msr, back);
            break;
        }
        case kHypercall: {
            const uint32_t vp = b.u8() % kVps;
            const uint64_t control = b.u64(), input = b.u64(), output = b.u64();
            (void)part_.hypercall(vp, control, input, output);
            break;
        }
        case kCpuid: {
            const uint32_t leaf = b.u32(), subleaf = b.u32();
            hv::CpuidRegs regs{};
            part_.cpuid(leaf, subleaf, regs);
            break;
        }
        case kTake: take_all(); break;
        case kMemWrite: {
            const uint64_t gpa = b.u32() % kRam;
            auto bytes = b.bytes(b.left());
            (void)host_.write_gpa(gpa, bytes.data(), std::min<size_t>(bytes.size(), kRam - gpa));
            break;
        }
        case kVstor: vstor(b); break;
        case kSettle: settle(); break;
        }
        if (auto_take_) take_all();
    }

private:
    static uint64_t simp(uint32_t vp) { return kSimp + vp * kPerVp; }
    static uint64_t siefp(uint32_t vp) { return kSiefp + vp * kPerVp; }

    void wrmsr(uint32_t vp, uint32_t msr, uint64_t v) { (void)part_.wrmsr(vp, msr, v); }

    // HVCALL_POST_MESSAGE from `vp` with the input page as the guest fills it.
    void post(uint32_t vp, uint32_t conn, const void* msg, uint32_t len, uint32_t type = kHvMessageTypeVmbus) {
        const uint64_t in = kInput + vp * 0x1000ull;
        len = std::min<uint32_t>(len, 0x1000 - 16);
        const uint32_t hdr[4] = {conn, 0, type, len};
        host_.store(in, hdr, sizeof hdr);
        host_.store(in + 16, msg, len);
        (void)part_.hypercall(vp, kPostMessage, in, 0);
    }
    template <typename T> void post(uint32_t vp, uint32_t conn, const T& m) { post(vp, conn, &m, sizeof m); }
    template <typename T> void post_with(const T& m, std::span<const uint8_t> tail) {
        std::vector<uint8_t> buf(sizeof m + tail.size());
        std::memcpy(buf.data(), &m, sizeof m);
        std::memcpy(buf.data() + sizeof m, tail.data(), tail.size());
        post(0, kMessageConnectionId, buf.data(), uint32_t(buf.size()));
    }

    void signal(uint32_t vp, uint64_t conn, bool fast) {
        const uint64_t in = conn & 0xFFFFFFFF;
        if (fast) {
            (void)part_.hypercall(vp, kSignalEvent | kFast, in, 0);
        } else {
            host_.store(kInput + vp * 0x1000ull, in);
            (void)part_.hypercall(vp, kSignalEvent, kInput + vp * 0x1000ull, 0);
        }
    }

    void contact(Reader& b) {
        const uint32_t vp = b.u8() % kVps;
        const uint8_t v = b.u8();
        InitiateContact c{};
        c.hdr.msgtype = uint32_t(MsgType::InitiateContact);
        c.version_requested = v < 8 ? version::kAll[v] : b.u32();
        c.target_vcpu = b.u8();
        const uint8_t sint = b.u8();
        const uint8_t conn_sel = b.u8();
        if (c.version_requested >= version::kV5_0) {
            c.v5.msg_sint = sint;
            c.v5.feature_flags = b.u32();
        } else {
            c.interrupt_page = uint64_t(b.u32()) << 12;
        }
        uint32_t conn = c.version_requested >= version::kV5_0 ? kMessageConnectionId4 : kMessageConnectionId;
        if (conn_sel % 3 == 1) conn = kMessageConnectionId;
        if (conn_sel % 3 == 2) conn = kMessageConnectionId4;
        post(vp, conn, c);
    }

    // A GPADL for a ring as Linux sends it: one range at byte_offset 0 (unless asked
    // otherwise), 26 pfns in the header and 28 in each body.
    void gpadl_ring(Reader& b) {
        const uint32_t relid = b.u8(), id = b.u8();
        const uint32_t pages = 2 + b.u8() % 31;
        const uint64_t first = kRingPage0 + b.u8() % kRingPages;
        const uint32_t byte_offset = b.u8() & 0x10 ? b.u16() : 0;
        std::vector<uint64_t> words;
        words.push_back(uint64_t(pages) * kPageSize | uint64_t(byte_offset) << 32);
        for (uint32_t i = 0; i < pages; i++) words.push_back(first + i);
        GpadlHeader h{};
        h.hdr.msgtype = uint32_t(MsgType::GpadlHeader);
        h.child_relid = relid;
        h.gpadl = id;
        h.rangecount = 1;
        h.range_buflen = uint16_t(8 * words.size());
        const size_t in_header = std::min<size_t>(words.size(), 27);
        post_with(h, {reinterpret_cast<const uint8_t*>(words.data()), in_header * 8});
        for (size_t at = in_header; at < words.size(); at += 28) {
            const size_t n = std::min<size_t>(words.size() - at, 28);
            GpadlBody m{};
            m.hdr.msgtype = uint32_t(MsgType::GpadlBody);
            m.gpadl = id;
            post_with(m, {reinterpret_cast<const uint8_t*>(words.data() + at), n * 8});
        }
    }

    // A storvsp packet into the guest-to-host ring at `first` (split pages: header + data),
    // then SIGNAL_EVENT for `relid`.
    void vstor(Reader& b) {
        const uint64_t base = (kRingPage0 + b.u8() % kRingPages) * kPageSize;
        const uint32_t split = 2 + b.u8() % 31;
        const uint32_t relid = b.u8();
        const uint32_t size = (split - 1) * kPageSize;
        if (base + uint64_t(split) * kPageSize > kHoleStart) return;
        auto body = b.bytes(64);
        vmbus::PacketDescriptor d{};
        d.type = uint16_t(PacketType::DataInband);
        d.offset8 = 2;
        d.len8 = uint16_t(2 + (body.size() + 7) / 8);
        d.flags = kPacketFlagCompletionRequested;
        d.trans_id = ++trans_;
        const uint32_t w = host_.load32(base) % size & ~7u;
        auto put = [&](uint32_t pos, const void* src, uint32_t len) {
            for (uint32_t i = 0; i < len; i++)
                *host_.ram(base + kPageSize + (pos + i) % size) = static_cast<const uint8_t*>(src)[i];
        };
        std::vector<uint8_t> pkt(uint32_t(d.len8) * 8, 0);
        std::memcpy(pkt.data(), &d, sizeof d);
        std::memcpy(pkt.data() + sizeof d, body.data(), body.size());
        put(w, pkt.data(), uint32_t(pkt.size()));
        const uint64_t trailer = uint64_t(w) << 32;
        put(w + uint32_t(pkt.size()), &trailer, 8);
        host_.store32(base, (w + uint32_t(pkt.size()) + 8) % size);
        rings_[base] = {split, relid};
        signal(0, Server::kSignalBase + relid, true);
    }

    // Until each ring kVstor wrote to for an open channel that still reads is read; meanwhile
    // the guest skips the host's answers and signals, in case the host waits for room; or
    // until no ring index moved for 2 ms (the ring need not be the channel's). At most 200 ms
    // per input in all.
    void settle() {
        const auto start = std::chrono::steady_clock::now();
        auto moved_at = start;
        std::vector<uint64_t> indices, last;
        for (;;) {
            bool all = true;
            indices.clear();
            for (auto& [base, ring] : rings_) {
                const auto [split, relid] = ring;
                if (!server_->channel_open(relid) || host_.channel_stopped(relid)) continue;
                all &= host_.load32(base) == host_.load32(base + 4);
                // The host-to-guest ring: header at `split` (its end is the guest's business).
                const uint64_t in = base + uint64_t(split) * kPageSize;
                indices.push_back(uint64_t(host_.load32(base + 4)) << 32 |
                                  (in + 8 <= kHoleStart ? host_.load32(in) : 0));
                if (in + 8 <= kHoleStart && host_.load32(in) != host_.load32(in + 4)) {
                    host_.store32(in + 4, host_.load32(in));
                    signal(0, Server::kSignalBase + relid, true);
                }
            }
            const auto now = std::chrono::steady_clock::now();
            if (indices != last) {
                last = indices;
                moved_at = now;
            }
            // A ring the host does not read (kVstor may write anywhere) never empties: stop
            // once no index has moved for 2 ms, as a host that reads answers in microseconds.
            if (all || now - start > settle_left_ || now - moved_at > std::chrono::milliseconds(2)) {
                settle_left_ -= std::min(settle_left_, std::chrono::duration_cast<std::chrono::microseconds>(now - start));
                return;
            }
            std::this_thread::sleep_for(std::chrono::microseconds(50));
        }
    }

    // The guest's message DPC on every VP and SINT: copy, clear message_type, EOM if
    // msg_pending was set.
    void take_all() {
        for (uint32_t vp = 0; vp < kVps; vp++) {
            uint64_t simp_msr = 0;
            if (part_.rdmsr(vp, hv::msr::kSimp, simp_msr) != hv::MsrResult::Handled || !(simp_msr & 1)) continue;
            const uint64_t page = simp_msr & ~uint64_t(kPageSize - 1);
            for (uint32_t sint = 0; sint < hv::kSintCount; sint++) {
                const uint64_t slot = page + sint * hv::kMessageSlotSize;
                if (!host_.valid(slot, hv::kMessageSlotSize)) continue;
                if (host_.load32(slot) == 0) continue;
                const uint8_t flags = host_.load<uint8_t>(slot + 5);
                host_.store32(slot, 0);
                if (flags & 1) wrmsr(vp, hv::msr::kEom, 0);
            }
        }
    }

    const bool auto_take_;
    FuzzHost host_{kRam, kHoleStart, kHoleEnd};
    hv::Partition part_{host_, hv::PartitionConfig{kVps, 0}};
    std::unique_ptr<Server> server_;
    std::unique_ptr<backend::Backend> ram_;
    std::unique_ptr<storvsp::Controller> ctl_;
    std::unique_ptr<scsi::Disk> disk_;
    uint64_t trans_ = 0;
    std::map<uint64_t, std::pair<uint32_t, uint32_t>> rings_; // guest-to-host rings written: base -> split, relid
    std::chrono::microseconds settle_left_{200'000};
};

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    Reader in(data, size);
    Rig rig(in.u8());
    Record r;
    for (int i = 0; i < 96 && next_record(in, r); i++) rig.record(r);
    return 0;
}
