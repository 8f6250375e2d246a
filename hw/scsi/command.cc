// Answer plumbing shared by every command emulation.
#include <algorithm>

#include "cdb.h"

namespace hvstor::scsi::detail {

uint8_t cdb_size(uint8_t opcode) {
    switch (opcode >> 5) {
    case 0:
        return 6;
    case 1:
    case 2:
        return 10;
    case 4:
        return 16;
    case 5:
        return 12;
    default:
        return 0;
    }
}

void fail(Command& cmd, uint8_t key, Asc asc) {
    set_sense(cmd, key, asc.asc, asc.ascq);
    cmd.data_transferred = 0;
}

void succeed(Command& cmd) {
    cmd.status = kStatusGood;
    cmd.sense_len = 0;
    cmd.data_transferred = 0;
}

void busy(Command& cmd) {
    cmd.status = kStatusBusy;
    cmd.sense_len = 0;
    cmd.data_transferred = 0;
}

void reply(Command& cmd, const uint8_t* data, size_t len, size_t alloc) {
    size_t n = std::min(len, alloc);
    succeed(cmd);
    if (n == 0) return;
    if (cmd.dir != Dir::FromDevice) {
        fail_cdb(cmd);
        return;
    }
    n = std::min<size_t>(n, cmd.xfer_len);
    cmd.data_transferred = static_cast<uint32_t>(copy_to_iov(cmd.iov, cmd.iovcnt, data, n));
}

void put_ascii(uint8_t* dst, size_t width, const std::string& s) {
    for (size_t i = 0; i < width; i++) {
        const char c = i < s.size() ? s[i] : ' ';
        dst[i] = c >= 0x20 && c <= 0x7E ? static_cast<uint8_t>(c) : ' ';
    }
}

} // namespace hvstor::scsi::detail
