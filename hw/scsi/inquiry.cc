// INQUIRY: standard data and the vital product data pages of a Hyper-V virtual disk.
#include <algorithm>
#include <array>

#include "target.h"

namespace hvstor::scsi::detail {

namespace {

constexpr uint8_t kPageSupported = 0x00, kPageSerial = 0x80, kPageDeviceId = 0x83,
                  kPageBlockLimits = 0xB0, kPageCharacteristics = 0xB1, kPageProvisioning = 0xB2;

constexpr size_t kStandardLength = 36;
constexpr uint8_t kVersionSpc3 = 0x05;
constexpr uint8_t kResponseFormat2 = 0x02;
constexpr uint8_t kHiSup = 0x10;
constexpr uint8_t kCmdQue = 0x02;

// Microsoft's IEEE OUI: Hyper-V and Azure disks carry NAA 6 identifiers 6002248...
constexpr uint64_t kMicrosoftOui = 0x002248;

// Pages can be longer than any we build; 255 keeps page lengths in one byte's reach.
using Page = std::array<uint8_t, 256>;

uint64_t fnv1a(const std::string& s, uint64_t h) {
    for (unsigned char c : s) {
        h ^= c;
        h *= 0x100000001b3ULL;
    }
    return h;
}

size_t standard_data(Page& p, const DiskConfig& cfg) {
    p[0] = 0x00;  // peripheral qualifier 0, direct access block device
    p[2] = kVersionSpc3;
    p[3] = kHiSup | kResponseFormat2;
    p[4] = kStandardLength - 5;
    p[7] = kCmdQue;
    put_ascii(&p[8], 8, cfg.vendor);
    put_ascii(&p[16], 16, cfg.product);
    put_ascii(&p[32], 4, cfg.revision);
    return kStandardLength;
}

size_t page_header(Page& p, uint8_t code, size_t len) {
    p[1] = code;
    put16(&p[2], static_cast<uint16_t>(len - 4));
    return len;
}

size_t supported_pages(Page& p, const DiskConfig& cfg) {
    size_t n = 4;
    p[n++] = kPageSupported;
    if (!cfg.serial.empty()) p[n++] = kPageSerial;
    for (uint8_t code : {kPageDeviceId, kPageBlockLimits, kPageCharacteristics, kPageProvisioning})
        p[n++] = code;
    return page_header(p, kPageSupported, n);
}

size_t serial_page(Page& p, const DiskConfig& cfg) {
    const size_t len = std::min<size_t>(cfg.serial.size(), p.size() - 4);
    put_ascii(&p[4], len, cfg.serial);
    return page_header(p, kPageSerial, 4 + len);
}

size_t device_id_page(Page& p, const DiskConfig& cfg) {
    size_t n = 4;
    // T10 vendor ID designator, ASCII: vendor, then product and serial as the
    // vendor-specific part, which is how Hyper-V tells its disks apart by this one too.
    const size_t serial_len = std::min<size_t>(cfg.serial.size(), 128);
    const size_t t10_len = 8 + 16 + serial_len;
    p[n++] = 0x02;  // code set ASCII
    p[n++] = 0x01;  // association: logical unit; type: T10 vendor ID
    p[n++] = 0;
    p[n++] = static_cast<uint8_t>(t10_len);
    put_ascii(&p[n], 8, cfg.vendor);
    put_ascii(&p[n + 8], 16, cfg.product);
    put_ascii(&p[n + 24], serial_len, cfg.serial);
    n += t10_len;

    // NAA 6 (IEEE registered extended): NAA | OUI | 36-bit vendor id | 64-bit extension.
    // Without an explicit id and without a serial there is nothing unique to derive it
    // from, and a designator shared by several disks is worse than none.
    uint64_t ext = cfg.naa_id, vendor_id = 0;
    if (ext == 0 && !cfg.serial.empty()) {
        ext = fnv1a(cfg.serial, 0xcbf29ce484222325ULL);
        vendor_id = fnv1a(cfg.serial, ext) & 0xFFFFFFFFFULL;
    }
    if (ext != 0) {
        p[n++] = 0x01;  // code set binary
        p[n++] = 0x03;  // association: logical unit; type: NAA
        p[n++] = 0;
        p[n++] = 16;
        put64(&p[n], uint64_t{6} << 60 | kMicrosoftOui << 36 | vendor_id);
        put64(&p[n + 8], ext);
        n += 16;
    }
    return page_header(p, kPageDeviceId, n);
}

size_t block_limits_page(Page& p, const Target& t) {
    p[4] = 0x01;  // WSNZ: WRITE SAME of zero blocks (meaning "to the end") is refused
    put32(&p[8], t.max_transfer_blocks);
    put32(&p[20], max_unmap_blocks(t));
    put32(&p[24], kMaxUnmapDescriptors);
    put32(&p[28], kUnmapGranularity);
    put64(&p[36], max_write_same_blocks(t)); // what write_same.cc and unmap.cc enforce
    return page_header(p, kPageBlockLimits, 64);
}

size_t characteristics_page(Page& p) {
    put16(&p[4], 1);  // medium rotation rate: non-rotating
    return page_header(p, kPageCharacteristics, 64);
}

size_t provisioning_page(Page& p) {
    // LBPU (UNMAP), LBPWS (WRITE SAME(16) with UNMAP), LBPWS10. LBPRZ stays clear: the
    // backend contract lets a discarded range read back as anything.
    p[5] = 0x80 | 0x40 | 0x20;
    p[6] = 0x02;  // provisioning type: thin
    return page_header(p, kPageProvisioning, 8);
}

} // namespace

void emulate_inquiry(Command& cmd, const Target& t) {
    const uint8_t* cdb = cmd.cdb.data();
    const bool evpd = cdb[1] & 0x01;
    const uint8_t code = cdb[2];
    const uint16_t alloc = get16(&cdb[3]);
    if (cdb[1] & 0x02) {  // CMDDT, obsolete
        fail_cdb(cmd);
        return;
    }
    Page p{};
    size_t len;
    if (!evpd) {
        if (code != 0) {
            fail_cdb(cmd);
            return;
        }
        len = standard_data(p, t.cfg);
    } else {
        switch (code) {
        case kPageSupported:
            len = supported_pages(p, t.cfg);
            break;
        case kPageSerial:
            if (t.cfg.serial.empty()) {
                fail_cdb(cmd);
                return;
            }
            len = serial_page(p, t.cfg);
            break;
        case kPageDeviceId:
            len = device_id_page(p, t.cfg);
            break;
        case kPageBlockLimits:
            len = block_limits_page(p, t);
            break;
        case kPageCharacteristics:
            len = characteristics_page(p);
            break;
        case kPageProvisioning:
            len = provisioning_page(p);
            break;
        default:
            fail_cdb(cmd);
            return;
        }
    }
    reply(cmd, p.data(), len, alloc);
}

} // namespace hvstor::scsi::detail
