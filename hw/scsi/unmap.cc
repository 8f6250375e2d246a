// UNMAP: the parameter list is read once from the guest's buffer into our own memory and
// checked completely before any range is discarded, so a bad list changes nothing.
#include <algorithm>
#include <array>

#include "fanout.h"
#include "target.h"

namespace hvstor::scsi::detail {

namespace {

constexpr size_t kHeader = 8, kDescriptor = 16;
static_assert(kMaxUnmapDescriptors <= kMaxFanout);

struct Range {
    uint64_t lba;
    uint32_t blocks;
};

} // namespace

namespace {

using Ranges = std::array<Range, kMaxUnmapDescriptors>;

// Reads the parameter list into `ranges` (empty ones dropped), `n` of them. False with the
// command failed when the list is malformed or a range is off the disk.
bool parse_unmap_list(Command& cmd, const Target& t, uint16_t len, Ranges& ranges, size_t& n) {
    std::array<uint8_t, kHeader + kDescriptor * kMaxUnmapDescriptors> p{};
    const size_t want = std::min<size_t>(len, p.size());
    if (len < kHeader || cmd.xfer_len < len || copy_from_iov(cmd.iov, cmd.iovcnt, p.data(), want) != want) {
        fail(cmd, kSenseIllegalRequest, kParameterListLengthError);
        return false;
    }
    const size_t data_len = get16(&p[0]);  // bytes after this field
    const size_t desc_len = get16(&p[2]);
    if (data_len + 2 > len || desc_len + kHeader > len || data_len < desc_len + kHeader - 2) {
        fail(cmd, kSenseIllegalRequest, kParameterListLengthError);
        return false;
    }
    // SBC: a trailing partial descriptor is ignored.
    const size_t count = desc_len / kDescriptor;
    if (count > kMaxUnmapDescriptors) {
        fail(cmd, kSenseIllegalRequest, kInvalidFieldInParameterList);
        return false;
    }
    n = 0;
    uint64_t total = 0;
    for (size_t i = 0; i < count; i++) {
        const uint8_t* d = &p[kHeader + i * kDescriptor];
        const Range r{get64(d), get32(d + 8)};
        // MAXIMUM UNMAP LBA COUNT bounds the sum over the list (SBC), not each descriptor.
        total += r.blocks;
        if (total > max_unmap_blocks(t)) {
            fail(cmd, kSenseIllegalRequest, kInvalidFieldInParameterList);
            return false;
        }
        if (!lba_range_ok(t, r.lba, r.blocks)) {
            fail(cmd, kSenseIllegalRequest, kLbaOutOfRange);
            return false;
        }
        if (r.blocks != 0) ranges[n++] = r;
    }
    return true;
}

} // namespace

Started start_unmap(Command& cmd, const Target& t) {
    const uint8_t* c = cmd.cdb.data();
    if (c[1] & 0x01) {  // ANCHOR: anchored state is not supported (ANC_SUP clear)
        fail_cdb(cmd);
        return Started::Answered;
    }
    const uint16_t len = get16(&c[7]);
    if (t.read_only) {
        fail(cmd, kSenseDataProtect, kWriteProtected);
        return Started::Answered;
    }
    if (len == 0) {
        succeed(cmd);
        return Started::Answered;
    }
    if (cmd.dir != Dir::ToDevice) {
        fail_cdb(cmd);
        return Started::Answered;
    }
    Ranges ranges{};
    size_t n = 0;
    if (!parse_unmap_list(cmd, t, len, ranges, n)) return Started::Answered;
    cmd.data_transferred = len;
    if (n == 0) {
        cmd.status = kStatusGood;
        cmd.sense_len = 0;
        return Started::Answered;
    }
    if (n == 1) {
        backend::Request& r = cmd.be_req;
        r = backend::Request{};
        r.op = backend::Op::Discard;
        r.offset = ranges[0].lba * t.block_size;
        r.length = uint64_t{ranges[0].blocks} * t.block_size;
        r.done = &t.self;
        r.opaque = &cmd;
        return Started::Issued;
    }
    Fanout* f = Fanout::create(cmd, t.self, backend::Op::Discard, n);
    if (f == nullptr) {
        busy(cmd);
        return Started::Answered;
    }
    for (size_t i = 0; i < n; i++) {
        backend::Request& r = f->request(i);
        r.op = backend::Op::Discard;
        r.offset = ranges[i].lba * t.block_size;
        r.length = uint64_t{ranges[i].blocks} * t.block_size;
    }
    f->start(t.be);
    return Started::Handed;
}

} // namespace hvstor::scsi::detail
