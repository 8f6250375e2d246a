// Private to the SCSI target: what each command emulation needs to know about the disk, and
// the entry points the dispatcher calls.
#pragma once

#include <sys/uio.h>

#include <atomic>
#include <cstdint>

#include "cdb.h"
#include "hvstor/backend/backend.h"
#include "hvstor/scsi/disk.h"

namespace hvstor::scsi::detail {

struct Target {
    backend::Backend& be;
    const DiskConfig& cfg;
    // Where backend requests issued for a command complete: the Disk, which turns them
    // into SCSI status and tells the CommandSink.
    backend::CompletionSink& self;
    uint64_t blocks;
    uint32_t block_size;
    bool read_only;
    uint32_t max_transfer_blocks;  // 0: no limit
    // WRITE SAME commands with a pattern buffer still in flight on this disk.
    std::atomic<uint32_t>& pattern_writes;
};

enum class Started {
    Answered,  // the Command's out fields are final
    Issued,    // cmd.be_req is ready for the caller to submit with the rest of the batch
    Handed,    // a helper submits its own requests and completes through Target::self
};

Started start_command(Command& cmd, const Target& t);
// Turns the finished backend request of a command into its SCSI status.
void finish_command(Command& cmd, const backend::Request& req);

// Emulations that answer at once.
void emulate_inquiry(Command& cmd, const Target& t);
void emulate_mode_sense(Command& cmd, const Target& t);
void emulate_mode_select(Command& cmd, const Target& t);
void emulate_read_capacity10(Command& cmd, const Target& t);
void emulate_read_capacity16(Command& cmd, const Target& t);
void emulate_request_sense(Command& cmd);
void emulate_persistent_reserve_in(Command& cmd);

// Commands that go to the backend.
Started start_read_write(Command& cmd, const Target& t);
Started start_sync_cache(Command& cmd, const Target& t);
Started start_write_same(Command& cmd, const Target& t);
Started start_unmap(Command& cmd, const Target& t);
void emulate_verify(Command& cmd, const Target& t);

// Points cmd.be_req at exactly `bytes` of the command's buffer. Allocates a trimmed copy of
// the iovec list only when the cut falls inside a segment; finish_command frees it. False
// (with sense set) when the buffer is too short, or BUSY when memory is short.
bool attach_buffer(Command& cmd, uint64_t bytes);

// MAXIMUM WRITE SAME LENGTH in blocks: the maximum transfer length, at most
// kMaxWriteSameBytes (cdb.h).
inline uint32_t max_write_same_blocks(const Target& t) {
    const auto cap = static_cast<uint32_t>(kMaxWriteSameBytes / t.block_size);
    return t.max_transfer_blocks != 0 && t.max_transfer_blocks < cap ? t.max_transfer_blocks : cap;
}
// MAXIMUM UNMAP LBA COUNT: blocks over all descriptors of one UNMAP (cdb.h).
inline uint32_t max_unmap_blocks(const Target& t) { return static_cast<uint32_t>(kMaxUnmapBytes / t.block_size); }

// True when `count` blocks from `lba` lie on the disk (an empty range may sit at the end).
inline bool lba_range_ok(const Target& t, uint64_t lba, uint64_t count) {
    return lba <= t.blocks && count <= t.blocks - lba;
}

} // namespace hvstor::scsi::detail
