// Answers the controller gives on behalf of LUNs: absent ones, and REPORT LUNS.
#include <algorithm>
#include <array>
#include <new>
#include <vector>

#include "target.h"

namespace hvstor::scsi {

using namespace detail;

void answer_absent_lun(Command& cmd) {
    succeed(cmd);
    switch (cmd.cdb[0]) {
    case op::kInquiry: {
        // The guest forces INQUIRY completions to success, so the answer itself must say
        // "no device here": peripheral qualifier 3, device type 0x1F. Even for VPD pages.
        const bool evpd = cmd.cdb[1] & 0x01;
        std::array<uint8_t, 36> d{};
        d[0] = 0x7F;
        size_t len;
        if (evpd) {
            d[1] = cmd.cdb[2];
            len = 4;
        } else {
            d[2] = 0x05;
            d[3] = 0x02;
            d[4] = static_cast<uint8_t>(d.size() - 5);
            len = d.size();
        }
        reply(cmd, d.data(), len, get16(&cmd.cdb[3]));
        return;
    }
    case op::kRequestSense:
        // SPC: REQUEST SENSE to a LUN that is not there succeeds and returns this sense.
        reply_sense_data(cmd, kSenseIllegalRequest, kLunNotSupported);
        return;
    default:
        fail(cmd, kSenseIllegalRequest, kLunNotSupported);
        return;
    }
}

void answer_report_luns(Command& cmd, std::span<const uint16_t> luns) {
    succeed(cmd);
    const uint8_t* cdb = cmd.cdb.data();
    if (cmd.cdb_len < 12) {
        fail_cdb(cmd);
        return;
    }
    const uint8_t select = cdb[2];
    const uint32_t alloc = get32(&cdb[6]);
    if (select > 0x02) {
        fail_cdb(cmd);
        return;
    }
    // SELECT REPORT 1 asks for well-known LUNs only, and we have none.
    const bool list = select != 0x01;
    std::vector<uint8_t> d;
    try {
        d.reserve(8 + (list ? luns.size() * 8 : 0));
    } catch (const std::bad_alloc&) {
        busy(cmd);
        return;
    }
    d.resize(8);
    if (list) {
        for (uint16_t lun : luns) {
            // Single-level addressing. Flat space covers 14 bits; storvsc LUNs are 8 bits,
            // so a larger number cannot come from a real configuration and is left out.
            if (lun > 0x3FFF) continue;
            uint8_t e[8] = {};
            if (lun < 256) {
                e[1] = static_cast<uint8_t>(lun);  // peripheral device addressing, bus 0
            } else {
                e[0] = static_cast<uint8_t>(0x40 | lun >> 8);  // flat space addressing
                e[1] = static_cast<uint8_t>(lun);
            }
            d.insert(d.end(), e, e + 8);
        }
    }
    put32(&d[0], static_cast<uint32_t>(d.size() - 8));
    reply(cmd, d.data(), d.size(), alloc);
}

} // namespace hvstor::scsi
