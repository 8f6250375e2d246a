// From CDB to emulation, and from backend result to SCSI status.
#include <cerrno>

#include "target.h"

namespace hvstor::scsi::detail {

namespace {

Started answered() { return Started::Answered; }

} // namespace

Started start_command(Command& cmd, const Target& t) {
    succeed(cmd);
    if (cmd.cdb_len == 0 || cmd.cdb_len > cmd.cdb.size()) {
        fail_cdb(cmd);
        return answered();
    }
    const uint8_t opcode = cmd.cdb[0];
    const uint8_t size = cdb_size(opcode);
    if (size != 0 && cmd.cdb_len < size) {
        fail_cdb(cmd);
        return answered();
    }
    switch (opcode) {
    case op::kTestUnitReady:
    case op::kStartStopUnit:
        return answered();
    case op::kRequestSense:
        emulate_request_sense(cmd);
        return answered();
    case op::kInquiry:
        emulate_inquiry(cmd, t);
        return answered();
    case op::kModeSense6:
    case op::kModeSense10:
        emulate_mode_sense(cmd, t);
        return answered();
    case op::kModeSelect6:
    case op::kModeSelect10:
        emulate_mode_select(cmd, t);
        return answered();
    case op::kReadCapacity10:
        emulate_read_capacity10(cmd, t);
        return answered();
    case op::kServiceActionIn16:
        if ((cmd.cdb[1] & 0x1F) == op::kSaReadCapacity16)
            emulate_read_capacity16(cmd, t);
        else
            fail_cdb(cmd);
        return answered();
    case op::kRead6:
    case op::kRead10:
    case op::kRead12:
    case op::kRead16:
    case op::kWrite6:
    case op::kWrite10:
    case op::kWrite12:
    case op::kWrite16:
        return start_read_write(cmd, t);
    case op::kVerify10:
    case op::kVerify16:
        emulate_verify(cmd, t);
        return answered();
    case op::kSyncCache10:
    case op::kSyncCache16:
        return start_sync_cache(cmd, t);
    case op::kWriteSame10:
    case op::kWriteSame16:
        return start_write_same(cmd, t);
    case op::kUnmap:
        return start_unmap(cmd, t);
    case op::kPersistentReserveIn:
        emulate_persistent_reserve_in(cmd);
        return answered();
    default:
        // Includes PERSISTENT RESERVE OUT (no reservations are kept) and REPORT LUNS, which
        // the controller answers from its own LUN table.
        fail(cmd, kSenseIllegalRequest, kInvalidOpcode);
        return answered();
    }
}

void finish_command(Command& cmd, const backend::Request& req) {
    const bool data = req.op == backend::Op::Read || req.op == backend::Op::Write;
    if (data && req.iov != nullptr && req.iov != cmd.iov) delete[] req.iov;  // attach_buffer's copy
    switch (req.result) {
    case 0:
        cmd.status = kStatusGood;
        cmd.sense_len = 0;
        return;
    case -EROFS:
        fail(cmd, kSenseDataProtect, kWriteProtected);
        return;
    case -ENOSPC:
        // What a thin-provisioned disk reports when its pool is exhausted.
        fail(cmd, kSenseDataProtect, kSpaceAllocationFailed);
        return;
    case -EINVAL:
        fail_cdb(cmd);
        return;
    case -ECANCELED:
        // Abandoned (a reset, an unplug) before it reached storage: by the disk model, or
        // by the storage's run gate that held it while the VM was stopped.
        fail(cmd, kSenseAbortedCommand, kCommandsClearedByDeviceServer);
        return;
    default:
        if (req.op == backend::Op::Read)
            fail(cmd, kSenseMediumError, kUnrecoveredReadError);
        else
            fail(cmd, kSenseMediumError, kWriteError);
        return;
    }
}

} // namespace hvstor::scsi::detail
