// READ and WRITE (6/10/12/16), VERIFY and SYNCHRONIZE CACHE.
#include "target.h"

namespace hvstor::scsi::detail {

namespace {

constexpr uint8_t kFua = 0x08;
constexpr uint8_t kProtectMask = 0xE0;  // RDPROTECT / WRPROTECT / VRPROTECT

struct Extent {
    uint64_t lba = 0;
    uint64_t blocks = 0;
};

void prepare(Command& cmd, const Target& t, backend::Op op) {
    backend::Request& r = cmd.be_req;
    r = backend::Request{};
    r.op = op;
    r.done = &t.self;
    r.opaque = &cmd;
}

} // namespace

Started start_read_write(Command& cmd, const Target& t) {
    const uint8_t* c = cmd.cdb.data();
    Extent e;
    bool fua = false;
    const bool write = is_write_op(c[0]);
    if ((!write && !is_read_op(c[0])) || !block_extent(c, e.lba, e.blocks)) {
        fail(cmd, kSenseIllegalRequest, kInvalidOpcode);
        return Started::Answered;
    }
    if (c[0] != op::kRead6 && c[0] != op::kWrite6) {
        if (c[1] & kProtectMask) {  // no protection information on this disk
            fail_cdb(cmd);
            return Started::Answered;
        }
        fua = c[1] & kFua;
    }
    if (!lba_range_ok(t, e.lba, e.blocks)) {
        fail(cmd, kSenseIllegalRequest, kLbaOutOfRange);
        return Started::Answered;
    }
    if (t.max_transfer_blocks != 0 && e.blocks > t.max_transfer_blocks) {
        fail_cdb(cmd);
        return Started::Answered;
    }
    if (write && t.read_only) {
        fail(cmd, kSenseDataProtect, kWriteProtected);
        return Started::Answered;
    }
    if (e.blocks == 0) {
        succeed(cmd);
        return Started::Answered;
    }
    if (cmd.dir != (write ? Dir::ToDevice : Dir::FromDevice)) {
        fail_cdb(cmd);
        return Started::Answered;
    }
    const uint64_t bytes = e.blocks * t.block_size;
    prepare(cmd, t, write ? backend::Op::Write : backend::Op::Read);
    if (!attach_buffer(cmd, bytes)) return Started::Answered;
    backend::Request& r = cmd.be_req;
    r.fua = write && fua;  // FUA on a read only asks to bypass caches, which have nothing stale
    r.offset = e.lba * t.block_size;
    r.length = bytes;
    // What a success reports; finish_command clears it on failure.
    cmd.data_transferred = static_cast<uint32_t>(bytes);
    return Started::Issued;
}

void emulate_verify(Command& cmd, const Target& t) {
    const uint8_t* c = cmd.cdb.data();
    if (c[1] & kProtectMask) {
        fail_cdb(cmd);
        return;
    }
    uint64_t lba = 0, blocks = 0;
    block_extent(c, lba, blocks);
    if (!lba_range_ok(t, lba, blocks)) {
        fail(cmd, kSenseIllegalRequest, kLbaOutOfRange);
        return;
    }
    // The backend reports errors as they happen; there is no medium to scan, and a byte
    // comparison (BYTCHK) is not performed.
    succeed(cmd);
}

Started start_sync_cache(Command& cmd, const Target& t) {
    const uint8_t* c = cmd.cdb.data();
    const bool sixteen = c[0] == op::kSyncCache16;
    const uint64_t lba = sixteen ? get64(&c[2]) : get32(&c[2]);
    const uint64_t blocks = sixteen ? get32(&c[10]) : get16(&c[7]);
    if (!lba_range_ok(t, lba, blocks)) {
        fail(cmd, kSenseIllegalRequest, kLbaOutOfRange);
        return Started::Answered;
    }
    // The whole device is flushed whatever the range: the backend has no ranged flush, and
    // more than asked is always correct. IMMED is ignored: completing after the flush is
    // allowed.
    prepare(cmd, t, backend::Op::Flush);
    return Started::Issued;
}

} // namespace hvstor::scsi::detail
