// The CPUID view of a Hyper-V partition: what makes a stock Linux guest detect
// Microsoft Hyper-V and take its VMBus path, and nothing that leads it elsewhere.
#pragma once

#include <cstdint>

namespace hvstor::hv {

struct CpuidRegs {
    uint32_t eax, ebx, ecx, edx;
};

struct CpuidConfig {
    uint32_t max_vps = 1;
};

// Leaf numbers and bits, named as in the TLFS / Linux hyperv-tlfs.h.
namespace cpuid {
constexpr uint32_t kVendorLeaf = 0x40000000;
constexpr uint32_t kInterfaceLeaf = 0x40000001;
constexpr uint32_t kVersionLeaf = 0x40000002;
constexpr uint32_t kFeaturesLeaf = 0x40000003;
constexpr uint32_t kHintsLeaf = 0x40000004;
constexpr uint32_t kLimitsLeaf = 0x40000005;
constexpr uint32_t kMaxLeaf = kLimitsLeaf;
constexpr uint32_t kHvRangeLast = 0x4000FFFF;
constexpr uint32_t kInterfaceHv1 = 0x31237648; // "Hv#1"

// 0x40000003 EAX: partition privileges, low half.
constexpr uint32_t kSynicAvailable = 1u << 2;
constexpr uint32_t kHypercallAvailable = 1u << 5;
constexpr uint32_t kVpIndexAvailable = 1u << 6;
constexpr uint32_t kAccessTscInvariant = 1u << 15;
// 0x40000003 EBX: privileges, high half.
constexpr uint32_t kPostMessages = 1u << 4;
constexpr uint32_t kSignalEvents = 1u << 5;
// 0x40000004 EAX: hints.
constexpr uint32_t kDeprecatingAeoiRecommended = 1u << 9;
} // namespace cpuid

// Adjusts the registers a CPUID instruction returns for leaf/subleaf.
// `regs` holds what the CPU model would return; the partition overrides the
// hypervisor range 0x40000000-0x4000FFFF entirely (hiding KVM and TCG signatures),
// sets the hypervisor-present bit of leaf 1 and the invariant-TSC bit of 0x80000007.
void apply_cpuid(const CpuidConfig& cfg, uint32_t leaf, uint32_t subleaf, CpuidRegs& regs);

} // namespace hvstor::hv
