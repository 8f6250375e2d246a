// Sense data: autosense for failed commands, and REQUEST SENSE.
#include "target.h"

namespace hvstor::scsi {

namespace {
constexpr uint8_t kFixedCurrent = 0x70;
constexpr uint8_t kDescriptorCurrent = 0x72;
constexpr uint8_t kFixedLength = 18;
} // namespace

void set_sense(Command& cmd, uint8_t key, uint8_t asc, uint8_t ascq) {
    cmd.sense_len = detail::fixed_sense(cmd.sense, key, detail::Asc{asc, ascq});
    cmd.status = kStatusCheckCondition;
}

namespace detail {

uint8_t fixed_sense(std::array<uint8_t, 18>& out, uint8_t key, Asc asc) {
    out.fill(0);
    out[0] = kFixedCurrent;
    out[2] = key & 0x0F;
    out[7] = kFixedLength - 8;  // additional sense length
    out[12] = asc.asc;
    out[13] = asc.ascq;
    return kFixedLength;
}

void reply_sense_data(Command& cmd, uint8_t key, Asc asc) {
    const uint8_t* cdb = cmd.cdb.data();
    const bool descriptor = cdb[1] & 0x01;
    const uint8_t alloc = cdb[4];
    uint8_t data[kFixedLength] = {};
    size_t len;
    if (descriptor) {
        data[0] = kDescriptorCurrent;
        data[1] = key & 0x0F;
        data[2] = asc.asc;
        data[3] = asc.ascq;
        len = 8;  // no descriptors follow
    } else {
        data[0] = kFixedCurrent;
        data[2] = key & 0x0F;
        data[7] = kFixedLength - 8;
        data[12] = asc.asc;
        data[13] = asc.ascq;
        len = kFixedLength;
    }
    reply(cmd, data, len, alloc);
}

// Errors are reported by autosense with the failing command, so nothing is pending here:
// a unit attention (a capacity change) is answered by the Disk before a command gets here.
void emulate_request_sense(Command& cmd) { reply_sense_data(cmd, kSenseNoSense, kNoAdditionalSense); }

} // namespace detail
} // namespace hvstor::scsi
