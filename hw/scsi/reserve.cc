// PERSISTENT RESERVE IN: a disk that supports the command and holds no keys or reservations.
#include <array>

#include "target.h"

namespace hvstor::scsi::detail {

namespace {
constexpr uint8_t kReadKeys = 0x00, kReadReservation = 0x01, kReportCapabilities = 0x02,
                  kReadFullStatus = 0x03;
} // namespace

void emulate_persistent_reserve_in(Command& cmd) {
    const uint8_t* cdb = cmd.cdb.data();
    const uint16_t alloc = get16(&cdb[7]);
    std::array<uint8_t, 8> d{};  // generation 0, additional length 0
    switch (cdb[1] & 0x1F) {
    case kReadKeys:
    case kReadReservation:
    case kReadFullStatus:
        break;
    case kReportCapabilities:
        put16(&d[0], 8);  // length; no capability bits, no types supported
        break;
    default:
        fail_cdb(cmd);
        return;
    }
    reply(cmd, d.data(), d.size(), alloc);
}

} // namespace hvstor::scsi::detail
