// Hyper-V hypercall status codes and call codes used by a Linux guest (TLFS).
#pragma once

#include <cstdint>

namespace hvstor::hv {

enum class Status : uint16_t {
    Success = 0x0000,
    InvalidHypercallCode = 0x0002,
    InvalidHypercallInput = 0x0003,
    InvalidAlignment = 0x0004,
    InvalidParameter = 0x0005,
    // "The operation is not allowed in the current state": a hypercall before the guest set
    // its guest OS id and enabled the hypercall page (Hyper-V raises #UD; see Partition).
    OperationDenied = 0x0008,
    InsufficientMemory = 0x000B,
    InvalidPortId = 0x0011,
    InvalidConnectionId = 0x0012,
    InsufficientBuffers = 0x0013,
};

enum class CallCode : uint16_t {
    PostMessage = 0x005C,
    SignalEvent = 0x005D,
};

// The hypercall input value in RCX.
struct HypercallControl {
    uint64_t raw;
    uint16_t code() const { return static_cast<uint16_t>(raw & 0xFFFF); }
    bool fast() const { return (raw >> 16) & 1; }
    uint16_t var_header_size() const { return (raw >> 17) & 0x3FF; }
    uint16_t rep_count() const { return (raw >> 32) & 0xFFF; }
    uint16_t rep_start() const { return (raw >> 48) & 0xFFF; }
};

} // namespace hvstor::hv
