// The data path of a fake hv_storvsc: speaks the storage protocol over a channel's rings in
// fake guest RAM and waits for completions the way the Linux driver would. How a channel is
// opened and how the host is signalled is the caller's: through the VMBus server and the
// partition (fake_storvsc.h), or a loopback bus with neither (fake_bus.h).
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <optional>
#include <thread>
#include <vector>

#include "fake_host.h"
#include "hvstor/storvsp/protocol.h"
#include "hvstor/vmbus/ring.h"

namespace hvstor::test {

using namespace std::chrono_literals;

// One ring seen from the guest.
struct GuestRing {
    FakeHost* host = nullptr;
    uint64_t base = 0;   // header page GPA
    uint32_t pages = 0;  // including the header
    uint32_t data_size() const { return (pages - 1) * 4096; }
    uint32_t& field(uint32_t off) { return *reinterpret_cast<uint32_t*>(host->ram(base + off)); }
    uint32_t load(uint32_t off) { return std::atomic_ref<uint32_t>(field(off)).load(std::memory_order_acquire); }
    void store(uint32_t off, uint32_t v) { std::atomic_ref<uint32_t>(field(off)).store(v, std::memory_order_release); }
    uint8_t* data(uint32_t pos) { return host->ram(base + 4096 + pos); } // data pages are contiguous here
    void copy_in(uint32_t pos, const void* src, uint32_t len) {
        const auto* s = static_cast<const uint8_t*>(src);
        for (uint32_t i = 0; i < len; i++) *data((pos + i) % data_size()) = s[i];
    }
    void copy_out(uint32_t pos, void* dst, uint32_t len) {
        auto* d = static_cast<uint8_t*>(dst);
        for (uint32_t i = 0; i < len; i++) d[i] = *data((pos + i) % data_size());
    }
};

class StorvscRings {
public:
    static constexpr uint32_t kRingPages = 33; // header + 128 KiB, as storvsc asks for

    struct Chan {
        uint32_t relid = 0;
        GuestRing out;  // guest -> host
        GuestRing in;   // host -> guest
        uint64_t next_id = 1;
    };
    // Tells the host that `c` has packets (SIGNAL_EVENT).
    using Signal = std::function<void(Chan& c)>;

    StorvscRings(FakeHost& host, Signal signal) : host_(host), signal_(std::move(signal)) {}

    // The two rings of a channel at `base` (2 * kRingPages pages), zeroed, as vmbus_open
    // lays them out: guest-to-host first.
    Chan rings(uint32_t relid, uint64_t base) {
        Chan c;
        c.relid = relid;
        c.out = {&host_, base, kRingPages};
        c.in = {&host_, base + kRingPages * 4096ull, kRingPages};
        std::memset(host_.ram(base), 0, 2 * kRingPages * 4096ull);
        c.out.store(64, 1); // feature bits: pending_send_sz supported
        c.in.store(64, 1);
        return c;
    }

    // Writes a packet into the guest->host ring and signals as Linux does: only when the
    // ring was empty and the host is not masking. Returns false when the ring is full.
    bool write_packet(Chan& c, uint16_t type, uint64_t trans_id, const std::vector<uint8_t>& body,
                      uint32_t payload_off) {
        const uint32_t total = uint32_t((body.size() + 7) & ~size_t(7));
        const uint32_t size = c.out.data_size();
        const uint32_t w = c.out.load(0), r = c.out.load(4);
        const uint32_t used = (w + size - r) % size;
        if (size - used <= total + 8) return false;
        std::vector<uint8_t> pkt(total, 0);
        std::memcpy(pkt.data(), body.data(), body.size());
        vmbus::PacketDescriptor d{};
        d.type = type;
        d.offset8 = uint16_t(payload_off / 8);
        d.len8 = uint16_t(total / 8);
        d.flags = vmbus::kPacketFlagCompletionRequested;
        d.trans_id = trans_id;
        std::memcpy(pkt.data(), &d, sizeof d);
        c.out.copy_in(w, pkt.data(), total);
        const uint64_t trailer = uint64_t(w) << 32;
        c.out.copy_in(w + total, &trailer, 8);
        std::atomic_thread_fence(std::memory_order_seq_cst);
        c.out.store(0, (w + total + 8) % size);
        std::atomic_thread_fence(std::memory_order_seq_cst);
        // As hv_signal_on_write: mask first, then a fresh read index.
        if (c.out.load(8) == 0 && c.out.load(4) == w) signal(c);
        return true;
    }

    void signal(Chan& c) {
        signals++;
        signal_(c);
    }

    // A GPA-direct packet's body as Linux lays it out: one range of `len` bytes starting `off`
    // into its first page, pfn(i) for its page i, then the vstor packet at `hdr`.
    static std::vector<uint8_t> gpa_direct(const storvsp::VstorPacket& v, uint32_t len, uint32_t off,
                                           const std::function<uint64_t(uint32_t)>& pfn, uint32_t& hdr) {
        const uint32_t npfn = (off + len + 4095) / 4096;
        hdr = 16 + 8 + 8 + npfn * 8;
        std::vector<uint8_t> body(hdr + sizeof v);
        const uint32_t ranges = 1;
        std::memcpy(body.data() + 20, &ranges, 4);
        std::memcpy(body.data() + 24, &len, 4);
        std::memcpy(body.data() + 28, &off, 4);
        for (uint32_t i = 0; i < npfn; i++) {
            const uint64_t p = pfn(i);
            std::memcpy(body.data() + 32 + i * 8, &p, 8);
        }
        std::memcpy(body.data() + hdr, &v, sizeof v);
        return body;
    }

    // Sends a vstor packet inband; returns the trans id.
    uint64_t send(Chan& c, const storvsp::VstorPacket& v, size_t len = sizeof(storvsp::VstorPacket)) {
        std::vector<uint8_t> body(16 + len);
        std::memcpy(body.data() + 16, &v, len);
        const uint64_t id = c.next_id++;
        EXPECT_TRUE(write_packet(c, uint16_t(vmbus::PacketType::DataInband), id, body, 16));
        return id;
    }

    // An SRB with a data buffer at `buf` (any alignment), as a GPA-direct packet.
    uint64_t send_srb(Chan& c, storvsp::VmscsiRequest srb, uint64_t buf, uint32_t len, bool* ok = nullptr) {
        storvsp::VstorPacket v{};
        v.operation = uint32_t(storvsp::Operation::ExecuteSrb);
        srb.length = sizeof srb;
        srb.data_transfer_length = len;
        v.srb = srb;
        const uint64_t id = c.next_id++;
        bool sent;
        if (srb.data_in == storvsp::kDataNone || len == 0) {
            std::vector<uint8_t> body(16 + sizeof v);
            std::memcpy(body.data() + 16, &v, sizeof v);
            sent = write_packet(c, uint16_t(vmbus::PacketType::DataInband), id, body, 16);
        } else {
            uint32_t hdr;
            auto body = gpa_direct(v, len, uint32_t(buf & 4095), [&](uint32_t i) { return (buf >> 12) + i; }, hdr);
            sent = write_packet(c, uint16_t(vmbus::PacketType::DataUsingGpaDirect), id, body, hdr);
        }
        if (ok) *ok = sent;
        else EXPECT_TRUE(sent);
        return id;
    }

    struct Completion {
        storvsp::VstorPacket pkt; // first: its fields stay aligned
        uint64_t trans_id;
        uint16_t type;
        uint32_t len;
    };

    // Reads one packet from the host->guest ring, if any; signals the host when it asked
    // for room and now has it, as Linux's reader does.
    std::optional<Completion> poll(Chan& c) {
        const uint32_t size = c.in.data_size();
        const uint32_t w = c.in.load(0), r = c.in.load(4);
        if (w == r) return std::nullopt;
        vmbus::PacketDescriptor d;
        c.in.copy_out(r, &d, sizeof d);
        Completion out{{}, d.trans_id, d.type, uint32_t(d.len8) * 8 - uint32_t(d.offset8) * 8};
        EXPECT_LE(uint32_t(d.len8) * 8, 80u) << "storvsc takes packets of at most 80 bytes";
        c.in.copy_out(r + d.offset8 * 8, &out.pkt, std::min<uint32_t>(out.len, sizeof out.pkt));
        const uint32_t nr = (r + d.len8 * 8 + 8) % size;
        std::atomic_thread_fence(std::memory_order_seq_cst);
        c.in.store(4, nr);
        std::atomic_thread_fence(std::memory_order_seq_cst);
        const uint32_t pending = c.in.load(12);
        // As hv_pkt_iter_close: free space from the writer's current index, after our
        // read index is published; the writer may have added packets since we looked.
        const uint32_t wnow = c.in.load(0);
        const uint32_t free_after = size - (wnow + size - nr) % size;
        const uint32_t free_before = free_after - (d.len8 * 8 + 8);
        // hv_signal_on_read: only on the move from "not enough" to "enough" room, where
        // enough means strictly more than pending_send_sz.
        if (pending && free_before <= pending && free_after > pending) signal(c);
        return out;
    }

    // Waits for the next packet from the host, with no bound of its own: a host that never
    // answers hangs the test, and the test runner's timeout ends it.
    Completion wait(Chan& c) {
        for (;;) {
            if (auto x = poll(c)) return *x;
            std::this_thread::sleep_for(100us);
        }
    }

    // The Linux init sequence; returns the QUERY_PROPERTIES answer.
    std::optional<storvsp::ChannelProperties> handshake(Chan& c, uint16_t version = storvsp::kVersionWin10) {
        storvsp::VstorPacket v{};
        v.operation = uint32_t(storvsp::Operation::BeginInitialization);
        send(c, v);
        auto r = wait(c);
        if (r.pkt.status) return std::nullopt;
        v = {};
        v.operation = uint32_t(storvsp::Operation::QueryProtocolVersion);
        v.version.major_minor = version;
        send(c, v);
        r = wait(c);
        if (r.pkt.status) return std::nullopt;
        v = {};
        v.operation = uint32_t(storvsp::Operation::QueryProperties);
        send(c, v);
        r = wait(c);
        if (r.pkt.status) return std::nullopt;
        auto props = r.pkt.properties;
        v = {};
        v.operation = uint32_t(storvsp::Operation::EndInitialization);
        send(c, v);
        r = wait(c);
        if (r.pkt.status) return std::nullopt;
        return props;
    }

    int signals = 0;

protected:
    FakeHost& host_;

private:
    Signal signal_;
};

} // namespace hvstor::test
