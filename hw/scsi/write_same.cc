// WRITE SAME (10) and (16).
//
// UNMAP bit with a zero block: Discard (LBPRZ is clear, so the guest expects nothing of
// the range afterwards). A zero block without UNMAP, or NDOB: WriteZeroes. Any other block
// is written out for real, in parallel requests that all point at one buffer of the
// pattern; the UNMAP bit is then ignored, since unmapping would lose the pattern.
#include <algorithm>
#include <array>
#include <new>

#include "fanout.h"
#include "target.h"

namespace hvstor::scsi::detail {

namespace {

constexpr uint8_t kProtectMask = 0xE0, kAnchor = 0x10, kUnmapBit = 0x08, kLbdataPbdata = 0x06,
                  kNdob = 0x01;
// A pattern command holds one buffer of at most kPatternBytes, repeated in every iovec of
// its requests. At most kMaxPatternWrites such commands run per disk; more are answered
// BUSY (the guest retries), so a guest bounds neither host memory (a few MiB per disk) nor
// the backend writes in flight (kMaxPatternWrites x kMaxWriteSameBytes).
constexpr uint64_t kPatternBytes = 1 << 20;
constexpr uint32_t kMaxPatternWrites = 4;
// Each request covers up to kPatternSegments repeats of the buffer; enough of them that the
// longest command needs at most kMaxFanout requests (today one).
constexpr uint64_t kPatternSegments = 256;
static_assert(kMaxWriteSameBytes / (kPatternBytes * kPatternSegments) < kMaxFanout);
static_assert(kPatternSegments <= 1024, "IOV_MAX");

Started write_pattern(Command& cmd, const Target& t, uint64_t lba, uint64_t blocks,
                      const uint8_t* block) {
    if (t.pattern_writes.fetch_add(1, std::memory_order_acquire) >= kMaxPatternWrites) {
        t.pattern_writes.fetch_sub(1, std::memory_order_release);
        busy(cmd);
        return Started::Answered;
    }
    const uint64_t buf_blocks = std::min(blocks, kPatternBytes / t.block_size);
    const uint64_t req_blocks = buf_blocks * kPatternSegments;
    const size_t count = static_cast<size_t>((blocks + req_blocks - 1) / req_blocks);
    Fanout* f = Fanout::create(cmd, t.self, backend::Op::Write, count);
    if (f == nullptr) {
        t.pattern_writes.fetch_sub(1, std::memory_order_release);
        busy(cmd);
        return Started::Answered;
    }
    f->in_flight = &t.pattern_writes;
    try {
        f->data.resize(static_cast<size_t>(buf_blocks * t.block_size));
        f->iovs.resize(count * kPatternSegments);
    } catch (const std::bad_alloc&) {
        delete f;
        busy(cmd);
        return Started::Answered;
    }
    for (uint64_t i = 0; i < buf_blocks; i++)
        std::copy(block, block + t.block_size, f->data.begin() + static_cast<ptrdiff_t>(i * t.block_size));
    uint64_t next = lba, left = blocks;
    for (size_t i = 0; i < count; i++) {
        const uint64_t n = std::min(left, req_blocks);
        iovec* segs = &f->iovs[i * kPatternSegments];
        uint32_t nsegs = 0;
        for (uint64_t done = 0; done < n; done += buf_blocks) {
            segs[nsegs].iov_base = f->data.data();
            segs[nsegs].iov_len = static_cast<size_t>(std::min(buf_blocks, n - done) * t.block_size);
            nsegs++;
        }
        backend::Request& r = f->request(i);
        r.op = backend::Op::Write;
        r.offset = next * t.block_size;
        r.length = n * t.block_size;
        r.iov = segs;
        r.iovcnt = nsegs;
        next += n;
        left -= n;
    }
    f->start(t.be);
    return Started::Handed;
}

} // namespace

Started start_write_same(Command& cmd, const Target& t) {
    const uint8_t* c = cmd.cdb.data();
    const bool sixteen = c[0] == op::kWriteSame16;
    const bool unmap = c[1] & kUnmapBit;
    const bool ndob = sixteen && (c[1] & kNdob);
    uint64_t lba = 0, blocks = 0;
    block_extent(c, lba, blocks);
    if ((c[1] & (kProtectMask | kAnchor | kLbdataPbdata)) || (!sixteen && (c[1] & kNdob))) {
        fail_cdb(cmd);
        return Started::Answered;
    }
    // Zero blocks would mean "to the end of the medium"; the Block Limits page says WSNZ.
    // Above MAXIMUM WRITE SAME LENGTH: INVALID FIELD IN CDB (SBC), before any backend work.
    if (blocks == 0 || blocks > max_write_same_blocks(t)) {
        fail_cdb(cmd);
        return Started::Answered;
    }
    if (!lba_range_ok(t, lba, blocks)) {
        fail(cmd, kSenseIllegalRequest, kLbaOutOfRange);
        return Started::Answered;
    }
    if (t.read_only) {
        fail(cmd, kSenseDataProtect, kWriteProtected);
        return Started::Answered;
    }
    std::array<uint8_t, kMaxBlockSize> block{};
    bool zero = true;
    if (!ndob) {
        if (cmd.dir != Dir::ToDevice || cmd.xfer_len < t.block_size || t.block_size > block.size() ||
            copy_from_iov(cmd.iov, cmd.iovcnt, block.data(), t.block_size) != t.block_size) {
            fail_cdb(cmd);
            return Started::Answered;
        }
        zero = std::all_of(block.begin(), block.begin() + t.block_size, [](uint8_t b) { return b == 0; });
    }
    cmd.data_transferred = ndob ? 0 : t.block_size;
    if (!zero) return write_pattern(cmd, t, lba, blocks, block.data());

    backend::Request& r = cmd.be_req;
    r = backend::Request{};
    r.op = unmap ? backend::Op::Discard : backend::Op::WriteZeroes;
    r.offset = lba * t.block_size;
    r.length = blocks * t.block_size;
    r.done = &t.self;
    r.opaque = &cmd;
    return Started::Issued;
}

} // namespace hvstor::scsi::detail
