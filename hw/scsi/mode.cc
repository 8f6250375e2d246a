// MODE SENSE and MODE SELECT: the caching page (write cache on) and the control page.
#include <algorithm>
#include <array>
#include <cstring>

#include "target.h"

namespace hvstor::scsi::detail {

namespace {

constexpr uint8_t kPageCaching = 0x08, kPageControl = 0x0A, kPageAll = 0x3F;
constexpr uint8_t kCachingLength = 20, kControlLength = 12;
constexpr uint8_t kWce = 0x04, kRcd = 0x01;
constexpr uint8_t kWriteProtect = 0x80, kDpoFua = 0x10;

enum class Pc : uint8_t { Current = 0, Changeable = 1, Default = 2, Saved = 3 };

// Writes one page as `pc` asks; returns its length, 0 for a page we do not have.
size_t build_page(uint8_t code, Pc pc, uint8_t* out) {
    switch (code) {
    case kPageCaching:
        std::memset(out, 0, kCachingLength);
        out[0] = kPageCaching;
        out[1] = kCachingLength - 2;
        // Nothing is changeable: MODE SELECT accepts a different WCE or RCD (Linux sends
        // them when cache_type is written) but the cache stays as the backend makes it.
        if (pc != Pc::Changeable) out[2] = kWce;
        return kCachingLength;
    case kPageControl:
        std::memset(out, 0, kControlLength);
        out[0] = kPageControl;
        out[1] = kControlLength - 2;
        if (pc != Pc::Changeable) out[3] = 0x10;  // queue algorithm modifier: unrestricted
        return kControlLength;
    default:
        return 0;
    }
}

} // namespace

void emulate_mode_sense(Command& cmd, const Target& t) {
    const uint8_t* cdb = cmd.cdb.data();
    const bool ten = cdb[0] == op::kModeSense10;
    const bool dbd = cdb[1] & 0x08;
    const bool llbaa = ten && (cdb[1] & 0x10);
    const auto pc = static_cast<Pc>(cdb[2] >> 6);
    const uint8_t code = cdb[2] & 0x3F;
    const uint8_t subpage = cdb[3];
    const size_t alloc = ten ? get16(&cdb[7]) : cdb[4];

    if (pc == Pc::Saved) {
        fail(cmd, kSenseIllegalRequest, kSavingParametersNotSupported);
        return;
    }
    if (subpage != 0 && !(code == kPageAll && subpage == 0xFF)) {
        fail_cdb(cmd);
        return;
    }

    std::array<uint8_t, 8 + 16 + kCachingLength + kControlLength> buf{};
    const size_t header = ten ? 8 : 4;
    size_t n = header;

    uint8_t& device_specific = buf[ten ? 3 : 2];
    device_specific = static_cast<uint8_t>((t.read_only ? kWriteProtect : 0) | kDpoFua);

    size_t bd_len = 0;
    if (!dbd) {
        uint8_t* bd = &buf[n];
        if (llbaa) {
            put64(bd, t.blocks);
            put32(bd + 12, t.block_size);
            bd_len = 16;
            buf[4] = 0x01;  // LONGLBA
        } else {
            put32(bd, t.blocks > 0xFFFFFFFFULL ? 0xFFFFFFFFU : static_cast<uint32_t>(t.blocks));
            bd[5] = static_cast<uint8_t>(t.block_size >> 16);
            bd[6] = static_cast<uint8_t>(t.block_size >> 8);
            bd[7] = static_cast<uint8_t>(t.block_size);
            bd_len = 8;
        }
        n += bd_len;
    }
    if (ten)
        put16(&buf[6], static_cast<uint16_t>(bd_len));
    else
        buf[3] = static_cast<uint8_t>(bd_len);

    if (code == kPageAll) {
        n += build_page(kPageCaching, pc, &buf[n]);
        n += build_page(kPageControl, pc, &buf[n]);
    } else {
        const size_t len = build_page(code, pc, &buf[n]);
        if (len == 0) {
            fail_cdb(cmd);
            return;
        }
        n += len;
    }
    // The mode data length does not count itself.
    if (ten)
        put16(&buf[0], static_cast<uint16_t>(n - 2));
    else
        buf[0] = static_cast<uint8_t>(n - 1);
    reply(cmd, buf.data(), n, alloc);
}

namespace {

// MODE SELECT parameter checks: nullptr when acceptable, else the ASC to fail with.

// The block descriptor, if any: the capacity cannot change and the block size must be ours.
const Asc* check_block_descriptor(const uint8_t* p, size_t header, size_t len, bool ten, const Target& t) {
    const size_t bd_len = ten ? get16(&p[6]) : p[3];
    const bool long_lba = ten && (p[4] & 0x01);
    if (bd_len != 0 && bd_len != (long_lba ? 16u : 8u)) return &kInvalidFieldInParameterList;
    if (header + bd_len > len) return &kParameterListLengthError;
    if (bd_len != 0) {
        const uint8_t* bd = &p[header];
        const uint32_t bs = long_lba ? get32(bd + 12) : static_cast<uint32_t>(bd[5] << 16 | bd[6] << 8 | bd[7]);
        if (bs != t.block_size) return &kInvalidFieldInParameterList;
    }
    return nullptr;
}

// The pages from `pos` on: each must be one we report, with nothing changed but the
// caching bits we ignore.
const Asc* check_pages(const uint8_t* p, size_t pos, size_t len) {
    while (pos < len) {
        if (len - pos < 2) return &kParameterListLengthError;
        const uint8_t code = p[pos] & 0x3F;
        const bool spf = p[pos] & 0x40;
        const size_t page_len = size_t{p[pos + 1]} + 2;
        if (page_len > len - pos) return &kParameterListLengthError;
        std::array<uint8_t, kCachingLength> current{};
        const size_t cur_len = spf ? 0 : build_page(code, Pc::Current, current.data());
        if (cur_len == 0 || cur_len != page_len) return &kInvalidFieldInParameterList;
        // PS (bit 7 of byte 0) is reserved in MODE SELECT; WCE and RCD may differ and are
        // ignored; every other bit must match what we report.
        for (size_t i = 2; i < page_len; i++) {
            uint8_t mask = 0xFF;
            if (code == kPageCaching && i == 2) mask = static_cast<uint8_t>(~(kWce | kRcd));
            if ((p[pos + i] & mask) != (current[i] & mask)) return &kInvalidFieldInParameterList;
        }
        pos += page_len;
    }
    return nullptr;
}

} // namespace

void emulate_mode_select(Command& cmd, const Target& t) {
    const uint8_t* cdb = cmd.cdb.data();
    const bool ten = cdb[0] == op::kModeSelect10;
    const bool pf = cdb[1] & 0x10;
    const size_t len = ten ? get16(&cdb[7]) : cdb[4];
    if (len == 0) {
        succeed(cmd);
        return;
    }
    if (!pf || cmd.dir != Dir::ToDevice) {  // PF=0: vendor-specific pages, we have none
        fail_cdb(cmd);
        return;
    }
    // Everything we accept fits: a header, a long block descriptor and our two pages.
    std::array<uint8_t, 512> p{};
    if (len > p.size()) {
        fail(cmd, kSenseIllegalRequest, kInvalidFieldInParameterList);
        return;
    }
    const size_t header = ten ? 8 : 4;
    if (len < header || cmd.xfer_len < len || copy_from_iov(cmd.iov, cmd.iovcnt, p.data(), len) != len) {
        fail(cmd, kSenseIllegalRequest, kParameterListLengthError);
        return;
    }
    const Asc* bad = check_block_descriptor(p.data(), header, len, ten, t);
    if (!bad) bad = check_pages(p.data(), header + (ten ? get16(&p[6]) : p[3]), len);
    if (bad) {
        fail(cmd, kSenseIllegalRequest, *bad);
        return;
    }
    succeed(cmd);
    cmd.data_transferred = static_cast<uint32_t>(len);
}

} // namespace hvstor::scsi::detail
