// VMBus ring buffers, host side. A channel's GPADL holds two rings: guest-to-host in
// pages [0, downstream offset), host-to-guest after it. Each ring is a header page
// (write_index @0, read_index @4, interrupt_mask @8, pending_send_sz @12,
// feature_bits @64) followed by a data area that wraps. Indices are byte offsets into
// the data area; every value read from the guest is checked before use.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "hvstor/host.h"

namespace hvstor::vmbus {

enum class PacketType : uint16_t {
    DataInband = 6,
    DataUsingGpaDirect = 9,
    Completion = 11,
};
constexpr uint16_t kPacketFlagCompletionRequested = 1;

#pragma pack(push, 1)
struct PacketDescriptor {
    uint16_t type;
    uint16_t offset8;  // payload offset from the packet start, in 8-byte units
    uint16_t len8;     // whole packet length, in 8-byte units
    uint16_t flags;
    uint64_t trans_id;
};
#pragma pack(pop)
static_assert(sizeof(PacketDescriptor) == 16);

// Largest packet the host accepts from the guest unless the channel's handler says more
// (ChannelOptions::max_packet; a GPA-direct SRB for 1 MiB is ~2.2 KiB), and the largest the
// host writes.
constexpr uint32_t kMaxIncomingPacket = 8192;

// Guest pages of one ring, mapped for the ring's lifetime.
class RingPages {
public:
    RingPages() = default;
    RingPages(const RingPages&) = delete;
    RingPages& operator=(const RingPages&) = delete;
    RingPages(RingPages&& o) noexcept;
    RingPages& operator=(RingPages&& o) noexcept;
    ~RingPages();

    // Maps each pfn; false (nothing kept) if any page is not guest RAM.
    bool map(Host& host, std::span<const uint64_t> pfns);
    size_t count() const { return pages_.size(); }
    uint8_t* page(size_t i) const { return pages_[i]; }
    // Host::mark_written for each page (the host may write both rings' header pages).
    void mark_written() const {
        for (uint8_t* p : pages_) host_->mark_written(p, kPageSize);
    }

private:
    void release();
    Host* host_ = nullptr;
    std::vector<uint8_t*> pages_;
};

class Ring {
public:
    // pages[0] is the header; at least one data page.
    explicit Ring(RingPages pages);

    uint32_t data_size() const { return data_size_; }
    void mark_written() const { pages_.mark_written(); }

protected:
    uint32_t load(uint32_t header_off) const;
    void store(uint32_t header_off, uint32_t v);
    void copy_out(uint32_t pos, void* dst, uint32_t len) const; // from the data area, wrapping
    void copy_in(uint32_t pos, const void* src, uint32_t len);

    RingPages pages_;
    uint32_t data_size_;
};

// Guest-to-host: the host reads.
class IncomingRing : public Ring {
public:
    enum class Status { Empty, Ok, Corrupt };

    // A packet longer than max_packet bytes (descriptor included) is Corrupt.
    explicit IncomingRing(RingPages pages, uint32_t max_packet = kMaxIncomingPacket);

    // Copies the next packet (descriptor, payload; no trailer) into `out` without
    // consuming it, and its descriptor into `desc`. The descriptor is read from guest
    // memory once: `desc` is the copy that was checked, and out's first 16 bytes hold
    // the same copy, never a second read the guest could have changed in between.
    // Corrupt: the guest's indices or descriptor are impossible (`desc` holds an impossible
    // descriptor as read, for the report).
    Status peek(PacketDescriptor& desc, std::vector<uint8_t>& out);
    // Moves past the packet last peeked. Visible to the guest after commit().
    void consume();
    // Publishes the read index. Returns true when the guest asked to be told about free
    // space (pending_send_sz) and this commit crossed it.
    bool commit();

    // While masked the guest does not signal new packets. Unmask before sleeping, then
    // check empty() again: a packet may have arrived in between.
    void set_interrupt_mask(bool masked);
    bool empty() const;

private:
    uint32_t free_bytes(uint32_t write, uint32_t read) const;
    uint32_t max_packet_;
    uint32_t read_ = 0;         // ours; the header copy is only for the guest
    uint32_t committed_ = 0;
    uint32_t peeked_len_ = 0;   // bytes of the peeked packet including trailer
};

// Host-to-guest: the host writes.
class OutgoingRing : public Ring {
public:
    explicit OutgoingRing(RingPages pages);

    // Space for a packet with this payload, descriptor and trailer included.
    static uint32_t packet_bytes(uint32_t payload_len);
    // Writes a packet; false when it does not fit (nothing written) or the ring is corrupt.
    bool write(PacketType type, uint16_t flags, uint64_t trans_id, std::span<const uint8_t> payload);
    // Free bytes as of the guest's last published read index (keeps one byte spare).
    uint32_t free_bytes() const;
    // Publishes the write index; returns true when the guest should be interrupted.
    bool commit();
    bool corrupt() const { return corrupt_; }
    // Asks the guest to signal once this many bytes are free (0: don't).
    void set_pending_send_sz(uint32_t bytes);

private:
    uint32_t write_ = 0;
    uint32_t committed_ = 0;
    bool corrupt_ = false;
};

} // namespace hvstor::vmbus
