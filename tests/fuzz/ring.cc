// The VMBus ring reader and writer against a guest that controls every byte of both rings:
// indices, descriptors (type, offset8, len8, flags), sizes, pages mapped twice, and, in flip
// mode, a second thread that keeps changing the guest-to-host ring while the host reads it.
//
// Input: a mode byte (bit 0: flip), a byte each for the data pages of the two rings (1..4),
// one byte per ring page naming its guest page, then records (fuzz_common.h) of the kinds
// below. Checked: every packet peek() returns is the one it checked (the descriptor copy in
// `desc` is the one at the start of the packet, and its lengths hold), what write() puts in
// the host-to-guest ring is the packet asked for, and every page mapped is unmapped.
#include <atomic>
#include <thread>

#include "fuzz_host.h"
#include "hvstor/vmbus/ring.h"

using namespace hvstor;
using namespace hvstor::fuzz;
using vmbus::IncomingRing;
using vmbus::OutgoingRing;
using vmbus::PacketDescriptor;

namespace {

constexpr uint64_t kRamPages = 32;
constexpr uint64_t kHolePage = 24; // pages 24..25 are MMIO
constexpr uint32_t kTrailer = 8;

enum Rec : uint8_t {
    kMemWrite = 0,   // u16 gpa, bytes: the guest writes its memory
    kGuestPut = 1,   // u16 type, u16 offset8, u16 len8 (0: fit the body), u16 flags, u64 trans, body
    kSetInHdr = 2,   // u8 field offset, u32 value: the guest-to-host ring's header
    kSetOutHdr = 3,  // the same for the host-to-guest ring
    kPeek = 4,       // u8 times, u8 consume
    kCommitIn = 5,
    kMask = 6,       // u8 masked
    kOutWrite = 7,   // u8 type, u16 flags, u64 trans, u16 length, payload pattern
    kOutCommit = 8,
    kOutPending = 9, // u32 bytes
    kGuestRead = 10, // u8 packets: the guest reads the host-to-guest ring as Linux does
};

struct Pages {
    std::vector<uint64_t> pfns;
};

uint64_t pick_pfn(uint8_t b) {
    if (b == 0xFF) return 1ull << 52; // beyond any physical address
    if (b == 0xFE) return kHolePage;  // MMIO
    if (b == 0xFD) return kRamPages;  // just past RAM
    return b % kHolePage;             // RAM
}

bool distinct(const std::vector<uint64_t>& a, const std::vector<uint64_t>& b) {
    std::set<uint64_t> s(a.begin(), a.end());
    if (s.size() != a.size()) return false;
    for (uint64_t p : b)
        if (s.count(p)) return false;
    return true;
}

// The guest's view of one ring: its header and data pages as the pfns say.
struct GuestView {
    FuzzHost& host;
    std::vector<uint64_t> pfns;
    uint32_t data_size() const { return uint32_t(pfns.size() - 1) * kPageSize; }
    uint64_t hdr(uint32_t off) const { return pfns[0] * kPageSize + off; }
    uint8_t* at(uint32_t pos) const {
        pos %= data_size();
        return host.ram(pfns[1 + pos / kPageSize] * kPageSize + pos % kPageSize);
    }
    void put(uint32_t pos, const void* src, uint32_t len) {
        for (uint32_t i = 0; i < len; i++) *at(pos + i) = static_cast<const uint8_t*>(src)[i];
    }
    void get(uint32_t pos, void* dst, uint32_t len) const {
        for (uint32_t i = 0; i < len; i++) static_cast<uint8_t*>(dst)[i] = *at(pos + i);
    }
};

// Flips bytes of the guest-to-host ring while the host reads it: mostly the descriptor at the
// guest's read index (where a second fetch would hurt), otherwise anywhere in the ring.
Flipper::Pick flip_in(const GuestView& v) {
    return [&v](uint64_t r) {
        if (r & 1) {
            const uint32_t read = v.host.load32(v.hdr(4));
            return v.at(read + uint32_t(r >> 8) % 16);
        }
        const size_t page = (r >> 8) % v.pfns.size();
        return v.host.ram(v.pfns[page] * kPageSize + (r >> 16) % kPageSize);
    };
}

// What peek() returned must be what it checked, whatever the guest did meanwhile.
void check_peeked(const PacketDescriptor& d, const std::vector<uint8_t>& out) {
    const uint32_t len = uint32_t(d.len8) * 8, off = uint32_t(d.offset8) * 8;
    FUZZ_CHECK(out.size() == len);
    FUZZ_CHECK(len >= sizeof d && len <= vmbus::kMaxIncomingPacket);
    FUZZ_CHECK(off >= sizeof d && off <= len);
    FUZZ_CHECK(std::memcmp(out.data(), &d, sizeof d) == 0);
}

struct Rig {
    FuzzHost host{kRamPages * kPageSize, kHolePage * kPageSize, (kHolePage + 2) * kPageSize};
};

void run(Reader& in) {
    const uint8_t mode = in.u8();
    const bool flip = mode & 1;
    const uint32_t in_data = 1 + in.u8() % 4, out_data = 1 + in.u8() % 4;
    Rig rig;
    FuzzHost& host = rig.host;
    std::vector<uint64_t> in_pfns, out_pfns;
    for (uint32_t i = 0; i < 1 + in_data; i++) in_pfns.push_back(pick_pfn(in.u8()));
    for (uint32_t i = 0; i < 1 + out_data; i++) out_pfns.push_back(pick_pfn(in.u8()));
    // The writer's output is checked only where no other page of either ring aliases it.
    const bool out_alone = distinct(out_pfns, in_pfns);
    {
        vmbus::RingPages ip, op;
        if (!ip.map(host, in_pfns) || !op.map(host, out_pfns)) {
            // A page outside RAM: nothing may stay mapped.
            ip = vmbus::RingPages();
            op = vmbus::RingPages();
            FUZZ_CHECK(host.maps == host.unmaps);
            return;
        }
        GuestView gin{host, in_pfns}, gout{host, out_pfns};
        // The guest may have written its headers before opening: that is what the
        // constructors read.
        Record r;
        Reader pre = in;
        if (next_record(pre, r) && r.type == kMemWrite) {
            Reader b(r.body);
            const uint16_t gpa = b.u16();
            auto bytes = b.bytes(b.left());
            const uint64_t at = gpa % (kRamPages * kPageSize);
            if (at < kHolePage * kPageSize) host.store(at, bytes.data(), std::min<size_t>(bytes.size(), kHolePage * kPageSize - at));
            in = pre;
        }
        IncomingRing inr(std::move(ip));
        OutgoingRing outr(std::move(op));
        FUZZ_CHECK(inr.data_size() == in_data * kPageSize && outr.data_size() == out_data * kPageSize);
        // Mirror of the writer's position, to check what it wrote.
        uint32_t w0 = host.load32(gout.hdr(0));
        uint32_t wpos = (w0 < outr.data_size() && w0 % 8 == 0) ? w0 : 0, published = wpos;

        std::unique_ptr<Flipper> flipper;
        if (flip) flipper = std::make_unique<Flipper>(flip_in(gin), in.u64());

        PacketDescriptor d{};
        std::vector<uint8_t> pkt;
        int steps = 0;
        while (steps++ < 256 && next_record(in, r)) {
            Reader b(r.body);
            switch (r.type % 11) {
            case kMemWrite: {
                const uint64_t at = b.u16() % (kRamPages * kPageSize);
                auto bytes = b.bytes(b.left());
                if (at < kHolePage * kPageSize)
                    host.store(at, bytes.data(), std::min<size_t>(bytes.size(), kHolePage * kPageSize - at));
                break;
            }
            case kGuestPut: {
                PacketDescriptor g{};
                g.type = b.u16();
                g.offset8 = b.u16();
                uint16_t len8 = b.u16();
                g.flags = b.u16();
                g.trans_id = b.u64();
                auto body = b.bytes(b.left());
                const uint32_t total = uint32_t((sizeof g + body.size() + 7) & ~size_t(7));
                g.len8 = len8 ? len8 : uint16_t(total / 8);
                const uint32_t w = host.load32(gin.hdr(0));
                gin.put(w, &g, sizeof g);
                gin.put(w + sizeof g, body.data(), uint32_t(body.size()));
                const uint64_t trailer = uint64_t(w) << 32;
                gin.put(w + total, &trailer, kTrailer);
                host.store32(gin.hdr(0), (w + total + kTrailer) % gin.data_size());
                break;
            }
            case kSetInHdr:
            case kSetOutHdr: {
                const uint32_t off = (b.u8() % 17) * 4; // 0..64: indices, mask, pending, feature bits
                const uint32_t v = b.u32();
                host.store32((r.type % 11 == kSetInHdr ? gin : gout).hdr(off), v);
                break;
            }
            case kPeek: {
                const int times = flip ? 64 : 1 + b.u8() % 4;
                const bool consume = b.u8() & 1;
                IncomingRing::Status st = IncomingRing::Status::Empty;
                for (int i = 0; i < times; i++) {
                    st = inr.peek(d, pkt);
                    if (st == IncomingRing::Status::Ok) check_peeked(d, pkt);
                }
                if (st == IncomingRing::Status::Ok && consume) inr.consume();
                break;
            }
            case kCommitIn:
                (void)inr.commit();
                (void)inr.empty();
                break;
            case kMask:
                inr.set_interrupt_mask(b.u8() & 1);
                (void)inr.empty();
                break;
            case kOutWrite: {
                static constexpr uint16_t kTypes[] = {6, 9, 11};
                const uint8_t t = b.u8();
                const uint16_t type = t < 3 ? kTypes[t] : t;
                const uint16_t flags = b.u16();
                const uint64_t trans = b.u64();
                const uint32_t len = b.u16() % (vmbus::kMaxIncomingPacket + 64);
                auto pat = b.bytes(b.left());
                std::vector<uint8_t> payload(len);
                for (uint32_t i = 0; i < len; i++) payload[i] = pat.empty() ? uint8_t(i) : pat[i % pat.size()];
                const uint32_t before = outr.free_bytes();
                FUZZ_CHECK(before < outr.data_size());
                const bool ok = outr.write(vmbus::PacketType(type), flags, trans, payload);
                if (ok) {
                    const uint32_t total = OutgoingRing::packet_bytes(len);
                    FUZZ_CHECK(len <= vmbus::kMaxIncomingPacket && total <= before);
                    if (out_alone) {
                        PacketDescriptor w{};
                        gout.get(wpos, &w, sizeof w);
                        FUZZ_CHECK(w.type == type && w.flags == flags && w.trans_id == trans);
                        FUZZ_CHECK(w.offset8 == 2 && uint32_t(w.len8) * 8 + kTrailer == total);
                        std::vector<uint8_t> back(len);
                        gout.get(wpos + sizeof w, back.data(), len);
                        FUZZ_CHECK(back == payload);
                        uint64_t trailer;
                        gout.get(wpos + total - kTrailer, &trailer, kTrailer);
                        FUZZ_CHECK(trailer == uint64_t(wpos) << 32);
                    }
                    wpos = (wpos + total) % outr.data_size();
                }
                break;
            }
            case kOutCommit:
                (void)outr.commit();
                // Published only when something was written since the last commit.
                if (out_alone && wpos != published) FUZZ_CHECK(host.load32(gout.hdr(0)) == wpos);
                published = wpos;
                break;
            case kOutPending:
                outr.set_pending_send_sz(b.u32());
                break;
            case kGuestRead: {
                // As the guest: packets from its read index up to the published write index.
                int n = 1 + b.u8() % 8;
                while (n--) {
                    const uint32_t rd = host.load32(gout.hdr(4)), wr = host.load32(gout.hdr(0));
                    if (rd == wr || rd >= gout.data_size() || rd % 8) break;
                    PacketDescriptor g;
                    gout.get(rd, &g, sizeof g);
                    host.store32(gout.hdr(4), (rd + uint32_t(g.len8) * 8 + kTrailer) % gout.data_size());
                }
                break;
            }
            }
        }
    }
    FUZZ_CHECK(host.maps == host.unmaps);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    Reader in(data, size);
    run(in);
    return 0;
}
