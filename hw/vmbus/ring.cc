#include "hvstor/vmbus/ring.h"

#include <algorithm>
#include <atomic>
#include <cstring>

namespace hvstor::vmbus {

namespace {
constexpr uint32_t kWriteIndex = 0;
constexpr uint32_t kReadIndex = 4;
constexpr uint32_t kInterruptMask = 8;
constexpr uint32_t kPendingSendSz = 12;
constexpr uint32_t kFeatureBits = 64;
constexpr uint32_t kFeaturePendingSendSz = 1;
constexpr uint32_t kTrailer = 8;
} // namespace

RingPages::RingPages(RingPages&& o) noexcept : host_(o.host_), pages_(std::move(o.pages_)) { o.pages_.clear(); }

RingPages& RingPages::operator=(RingPages&& o) noexcept {
    if (this != &o) {
        release();
        host_ = o.host_;
        pages_ = std::move(o.pages_);
        o.pages_.clear();
    }
    return *this;
}

RingPages::~RingPages() { release(); }

void RingPages::release() {
    for (uint8_t* p : pages_) host_->unmap(p, kPageSize, true);
    pages_.clear();
}

bool RingPages::map(Host& host, std::span<const uint64_t> pfns) {
    release();
    host_ = &host;
    pages_.reserve(pfns.size());
    for (uint64_t pfn : pfns) {
        if (pfn >= (1ull << 52)) { // beyond any physical address
            release();
            return false;
        }
        auto* p = static_cast<uint8_t*>(host.map(pfn * kPageSize, kPageSize, true));
        if (!p) {
            release();
            return false;
        }
        pages_.push_back(p);
    }
    return true;
}

Ring::Ring(RingPages pages) : pages_(std::move(pages)), data_size_(uint32_t(pages_.count() - 1) * kPageSize) {}

uint32_t Ring::load(uint32_t off) const {
    return std::atomic_ref<uint32_t>(*reinterpret_cast<uint32_t*>(pages_.page(0) + off))
        .load(std::memory_order_acquire);
}

void Ring::store(uint32_t off, uint32_t v) {
    std::atomic_ref<uint32_t>(*reinterpret_cast<uint32_t*>(pages_.page(0) + off)).store(v, std::memory_order_release);
}

void Ring::copy_out(uint32_t pos, void* dst, uint32_t len) const {
    auto* d = static_cast<uint8_t*>(dst);
    while (len) {
        pos %= data_size_;
        const uint32_t in_page = pos % kPageSize;
        const uint32_t n = std::min(len, kPageSize - in_page);
        std::memcpy(d, pages_.page(1 + pos / kPageSize) + in_page, n);
        d += n;
        pos += n;
        len -= n;
    }
}

void Ring::copy_in(uint32_t pos, const void* src, uint32_t len) {
    const auto* s = static_cast<const uint8_t*>(src);
    while (len) {
        pos %= data_size_;
        const uint32_t in_page = pos % kPageSize;
        const uint32_t n = std::min(len, kPageSize - in_page);
        std::memcpy(pages_.page(1 + pos / kPageSize) + in_page, s, n);
        s += n;
        pos += n;
        len -= n;
    }
}

IncomingRing::IncomingRing(RingPages pages, uint32_t max_packet) : Ring(std::move(pages)), max_packet_(max_packet) {
    // The guest resets both indices before opening; start where it says, if sane.
    const uint32_t r = load(kReadIndex);
    read_ = committed_ = (r < data_size_ && r % 8 == 0) ? r : 0;
    store(kInterruptMask, 0);
    store(kFeatureBits, load(kFeatureBits) | kFeaturePendingSendSz);
}

uint32_t IncomingRing::free_bytes(uint32_t write, uint32_t read) const {
    return data_size_ - (write + data_size_ - read) % data_size_;
}

bool IncomingRing::empty() const { return load(kWriteIndex) == read_; }

void IncomingRing::set_interrupt_mask(bool masked) {
    store(kInterruptMask, masked ? 1 : 0);
    std::atomic_thread_fence(std::memory_order_seq_cst);
}

IncomingRing::Status IncomingRing::peek(PacketDescriptor& desc, std::vector<uint8_t>& out) {
    const uint32_t w = load(kWriteIndex);
    if (w >= data_size_ || w % 8) return Status::Corrupt;
    const uint32_t avail = (w + data_size_ - read_) % data_size_;
    if (avail == 0) return Status::Empty;
    if (avail < sizeof(PacketDescriptor) + kTrailer) return Status::Corrupt;
    PacketDescriptor d;
    copy_out(read_, &d, sizeof d);
    const uint32_t len = uint32_t(d.len8) * 8, off = uint32_t(d.offset8) * 8;
    if (len < sizeof d || off < sizeof d || off > len || len > max_packet_ || len + kTrailer > avail) {
        desc = d; // for the report
        return Status::Corrupt;
    }
    // The descriptor is not fetched again: the rest of the packet follows the checked copy.
    out.resize(len);
    std::memcpy(out.data(), &d, sizeof d);
    copy_out(read_ + uint32_t(sizeof d), out.data() + sizeof d, len - uint32_t(sizeof d));
    desc = d;
    peeked_len_ = len + kTrailer;
    return Status::Ok;
}

void IncomingRing::consume() {
    read_ = (read_ + peeked_len_) % data_size_;
    peeked_len_ = 0;
}

bool IncomingRing::commit() {
    if (read_ == committed_) return false;
    const uint32_t w = load(kWriteIndex) % data_size_;
    const uint32_t before = free_bytes(w, committed_);
    store(kReadIndex, read_);
    committed_ = read_;
    std::atomic_thread_fence(std::memory_order_seq_cst);
    const uint32_t want = load(kPendingSendSz);
    if (want == 0) return false;
    const uint32_t after = free_bytes(w, read_);
    // The writer needs strictly more free bytes than it asks for (a full ring would
    // look empty), so "enough" means free > pending_send_sz, as Linux counts it.
    return before <= want && after > want;
}

OutgoingRing::OutgoingRing(RingPages pages) : Ring(std::move(pages)) {
    const uint32_t w = load(kWriteIndex);
    write_ = committed_ = (w < data_size_ && w % 8 == 0) ? w : 0;
}

uint32_t OutgoingRing::packet_bytes(uint32_t payload_len) {
    return uint32_t(sizeof(PacketDescriptor)) + ((payload_len + 7) & ~7u) + kTrailer;
}

uint32_t OutgoingRing::free_bytes() const {
    const uint32_t r = load(kReadIndex);
    if (r >= data_size_ || r % 8) return 0;
    const uint32_t used = (write_ + data_size_ - r) % data_size_;
    return data_size_ - used - 1; // a full ring would look empty
}

bool OutgoingRing::write(PacketType type, uint16_t flags, uint64_t trans_id, std::span<const uint8_t> payload) {
    const uint32_t r = load(kReadIndex);
    if (r >= data_size_ || r % 8) {
        corrupt_ = true;
        return false;
    }
    const uint32_t total = packet_bytes(uint32_t(payload.size()));
    if (payload.size() > kMaxIncomingPacket || total > free_bytes()) return false;
    PacketDescriptor d{};
    d.type = static_cast<uint16_t>(type);
    d.offset8 = sizeof d / 8;
    d.len8 = uint16_t((total - kTrailer) / 8);
    d.flags = flags;
    d.trans_id = trans_id;
    const uint32_t start = write_;
    copy_in(start, &d, sizeof d);
    copy_in(start + sizeof d, payload.data(), uint32_t(payload.size()));
    const uint32_t pad = total - kTrailer - uint32_t(sizeof d) - uint32_t(payload.size());
    static constexpr uint8_t zeros[8] = {};
    copy_in(start + sizeof d + uint32_t(payload.size()), zeros, pad);
    const uint64_t trailer = uint64_t(start) << 32;
    copy_in(start + total - kTrailer, &trailer, kTrailer);
    write_ = (start + total) % data_size_;
    return true;
}

void OutgoingRing::set_pending_send_sz(uint32_t bytes) {
    store(kPendingSendSz, bytes);
    std::atomic_thread_fence(std::memory_order_seq_cst);
}

bool OutgoingRing::commit() {
    if (write_ == committed_) return false;
    const uint32_t was = committed_;
    std::atomic_thread_fence(std::memory_order_release);
    store(kWriteIndex, write_);
    committed_ = write_;
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (load(kInterruptMask)) return false;
    // Only an empty-to-non-empty transition needs a signal: otherwise the guest is
    // still reading and will see the new packets before it unmasks and sleeps.
    return load(kReadIndex) == was;
}

} // namespace hvstor::vmbus
