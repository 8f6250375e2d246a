// Hyper-V synthetic MSR numbers (TLFS) that a Linux guest touches.
#pragma once

#include <cstdint>

namespace hvstor::hv::msr {

constexpr uint32_t kGuestOsId = 0x40000000;
constexpr uint32_t kHypercall = 0x40000001;
constexpr uint32_t kVpIndex = 0x40000002;
constexpr uint32_t kReferenceTsc = 0x40000021;
constexpr uint32_t kVpAssistPage = 0x40000073;
constexpr uint32_t kScontrol = 0x40000080;
constexpr uint32_t kSversion = 0x40000081;
constexpr uint32_t kSiefp = 0x40000082;
constexpr uint32_t kSimp = 0x40000083;
constexpr uint32_t kEom = 0x40000084;
constexpr uint32_t kSint0 = 0x40000090;
constexpr uint32_t kSint15 = 0x4000009F;
constexpr uint32_t kTscInvariantControl = 0x40000118;

// The synthetic MSR range; accesses inside it that we do not implement raise #GP,
// as on Hyper-V.
constexpr uint32_t kRangeFirst = 0x40000000;
constexpr uint32_t kRangeLast = 0x400001FF;

constexpr bool in_range(uint32_t m) { return m >= kRangeFirst && m <= kRangeLast; }

} // namespace hvstor::hv::msr
