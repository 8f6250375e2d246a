#include "hvstor/vmbus/guid.h"


namespace hvstor::vmbus {

namespace {
int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}
// Text position of each of the 16 bytes, in wire order.
constexpr int kTextPos[16] = {6, 4, 2, 0, 11, 9, 16, 14, 19, 21, 24, 26, 28, 30, 32, 34};
} // namespace

std::optional<Guid> Guid::parse(std::string_view t) {
    if (t.size() != 36 || t[8] != '-' || t[13] != '-' || t[18] != '-' || t[23] != '-')
        return std::nullopt;
    Guid g;
    for (int i = 0; i < 16; i++) {
        int hi = hexval(t[kTextPos[i]]), lo = hexval(t[kTextPos[i] + 1]);
        if (hi < 0 || lo < 0) return std::nullopt;
        g.bytes[i] = static_cast<uint8_t>(hi << 4 | lo);
    }
    return g;
}

std::string Guid::to_string() const {
    static constexpr char kHex[] = "0123456789abcdef";
    std::string out(36, '-');
    for (int i = 0; i < 16; i++) {
        out[kTextPos[i]] = kHex[bytes[i] >> 4];
        out[kTextPos[i] + 1] = kHex[bytes[i] & 15];
    }
    return out;
}

} // namespace hvstor::vmbus
