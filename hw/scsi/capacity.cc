// READ CAPACITY (10) and (16).
#include <array>

#include "target.h"

namespace hvstor::scsi::detail {

namespace {
constexpr uint8_t kLbpme = 0x80;  // logical block provisioning management enabled (UNMAP)

uint64_t last_lba(const Target& t) { return t.blocks == 0 ? 0 : t.blocks - 1; }
} // namespace

void emulate_read_capacity10(Command& cmd, const Target& t) {
    const uint8_t* cdb = cmd.cdb.data();
    const bool pmi = cdb[8] & 0x01;
    if (!pmi && get32(&cdb[2]) != 0) {
        fail_cdb(cmd);
        return;
    }
    std::array<uint8_t, 8> d{};
    const uint64_t last = last_lba(t);
    // All ones tells the guest to ask READ CAPACITY(16).
    put32(&d[0], last > 0xFFFFFFFEULL ? 0xFFFFFFFFU : static_cast<uint32_t>(last));
    put32(&d[4], t.block_size);
    reply(cmd, d.data(), d.size(), d.size());
}

void emulate_read_capacity16(Command& cmd, const Target& t) {
    const uint8_t* cdb = cmd.cdb.data();
    std::array<uint8_t, 32> d{};
    put64(&d[0], last_lba(t));
    put32(&d[8], t.block_size);
    d[13] = kPhysicalBlockExponent;
    d[14] = kLbpme;
    reply(cmd, d.data(), d.size(), get32(&cdb[10]));
}

} // namespace hvstor::scsi::detail
