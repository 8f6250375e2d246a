// The guest's side of a channel's two rings in FuzzHost RAM, for the targets that drive a
// device the way hv_storvsc does: packets in, completions out, and SIGNAL_EVENT only where
// Linux sends one (so a host that relies on a signal the guest never sends hangs, and the
// target reports it).
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <thread>

#include "fuzz_host.h"
#include "hvstor/vmbus/ring.h"

namespace hvstor::fuzz {

struct GuestRing {
    FuzzHost* host = nullptr;
    uint64_t base = 0;  // header page; the data pages follow it
    uint32_t pages = 0; // including the header
    uint32_t data_size() const { return (pages - 1) * kPageSize; }
    uint32_t load(uint32_t off) const { return host->load32(base + off); }
    void store(uint32_t off, uint32_t v) { host->store32(base + off, v); }
    uint8_t* data(uint32_t pos) { return host->ram(base + kPageSize + pos % data_size()); }
    void copy_in(uint32_t pos, const void* src, uint32_t len) {
        for (uint32_t i = 0; i < len; i++) *data(pos + i) = static_cast<const uint8_t*>(src)[i];
    }
    void copy_out(uint32_t pos, void* dst, uint32_t len) {
        for (uint32_t i = 0; i < len; i++) static_cast<uint8_t*>(dst)[i] = *data(pos + i);
    }
};

struct GuestChannel {
    uint32_t relid = 0;
    GuestRing out; // guest to host
    GuestRing in;  // host to guest

    // Zeroes both rings (2 x pages at base) and sets the feature bits, as vmbus_open does.
    void lay_out(FuzzHost& host, uint32_t id, uint64_t base_gpa, uint32_t ring_pages) {
        relid = id;
        out = {&host, base_gpa, ring_pages};
        in = {&host, base_gpa + uint64_t(ring_pages) * kPageSize, ring_pages};
        std::memset(host.ram(base_gpa), 0, 2ull * ring_pages * kPageSize);
        out.store(64, 1);
        in.store(64, 1);
    }

    // Writes a packet (descriptor + body, padded to 8, trailer) and signals as Linux does:
    // only when the ring was empty and the host is not masking. len8 0 in `d` means the
    // packet's own length. False when the ring has no room.
    bool write(vmbus::PacketDescriptor d, std::span<const uint8_t> body, const std::function<void()>& signal) {
        const uint32_t total = uint32_t((sizeof d + body.size() + 7) & ~size_t(7));
        const uint32_t size = out.data_size();
        const uint32_t w = out.load(0), r = out.load(4);
        const uint32_t used = (w + size - r) % size;
        if (size - used <= total + 8) return false;
        if (d.len8 == 0) d.len8 = uint16_t(total / 8);
        out.copy_in(w, &d, sizeof d);
        out.copy_in(w + sizeof d, body.data(), uint32_t(body.size()));
        static constexpr uint8_t zeros[8] = {};
        out.copy_in(w + uint32_t(sizeof d + body.size()), zeros, total - uint32_t(sizeof d + body.size()));
        const uint64_t trailer = uint64_t(w) << 32;
        out.copy_in(w + total, &trailer, 8);
        std::atomic_thread_fence(std::memory_order_seq_cst);
        out.store(0, (w + total + 8) % size);
        std::atomic_thread_fence(std::memory_order_seq_cst);
        if (out.load(8) == 0 && out.load(4) == w) signal();
        return true;
    }
    bool out_empty() const { return out.load(0) == out.load(4); }

    struct Packet {
        vmbus::PacketDescriptor d;
        std::vector<uint8_t> payload; // from offset8 on
    };
    // Takes one packet from the host-to-guest ring; signals the host when it asked for room
    // and now has it (hv_signal_on_read).
    std::optional<Packet> read(const std::function<void()>& signal) {
        const uint32_t size = in.data_size();
        const uint32_t w = in.load(0), r = in.load(4);
        if (w == r) return std::nullopt;
        FUZZ_CHECK(w < size && w % 8 == 0); // the host writes sane indices
        Packet p;
        in.copy_out(r, &p.d, sizeof p.d);
        const uint32_t len = uint32_t(p.d.len8) * 8, off = uint32_t(p.d.offset8) * 8;
        FUZZ_CHECK(off >= sizeof p.d && off <= len && len + 8 <= (w + size - r) % size);
        p.payload.resize(len - off);
        in.copy_out(r + off, p.payload.data(), len - off);
        const uint32_t nr = (r + len + 8) % size;
        std::atomic_thread_fence(std::memory_order_seq_cst);
        in.store(4, nr);
        std::atomic_thread_fence(std::memory_order_seq_cst);
        const uint32_t pending = in.load(12);
        const uint32_t wnow = in.load(0);
        const uint32_t free_after = size - (wnow + size - nr) % size;
        const uint32_t free_before = free_after - (len + 8);
        if (pending && free_before <= pending && free_after > pending) signal();
        return p;
    }
};

} // namespace hvstor::fuzz
