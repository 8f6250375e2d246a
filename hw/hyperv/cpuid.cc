#include "hvstor/hyperv/cpuid.h"

namespace hvstor::hv {

namespace {

constexpr uint32_t fourcc(const char (&s)[5]) {
    return uint32_t(uint8_t(s[0])) | uint32_t(uint8_t(s[1])) << 8 |
           uint32_t(uint8_t(s[2])) << 16 | uint32_t(uint8_t(s[3])) << 24;
}

CpuidRegs hyperv_leaf(const CpuidConfig& cfg, uint32_t leaf) {
    using namespace cpuid;
    switch (leaf) {
    case kVendorLeaf:
        return {kMaxLeaf, fourcc("Micr"), fourcc("osof"), fourcc("t Hv")};
    case kInterfaceLeaf:
        return {kInterfaceHv1, 0, 0, 0};
    case kVersionLeaf:
        // Build number, major.minor 10.0: only printed by the guest.
        return {20348, (10u << 16) | 0, 0, 0};
    case kFeaturesLeaf:
        // No partition id, cpu management or isolation privileges: those paths crash a
        // normal guest. No reference counter MSR: on 6.1 it would become sched_clock.
        return {kSynicAvailable | kHypercallAvailable | kVpIndexAvailable | kAccessTscInvariant,
                kPostMessages | kSignalEvents, 0, 0};
    case kHintsLeaf:
        // SINTs arrive through a normal local APIC, so the guest must EOI them itself.
        // EBX all ones: never notify on long spin waits.
        return {kDeprecatingAeoiRecommended, 0xFFFFFFFFu, 0, 0};
    case kLimitsLeaf:
        return {cfg.max_vps, cfg.max_vps, 0, 0};
    default:
        return {0, 0, 0, 0};
    }
}

} // namespace

void apply_cpuid(const CpuidConfig& cfg, uint32_t leaf, uint32_t /*subleaf*/, CpuidRegs& regs) {
    if (leaf >= cpuid::kVendorLeaf && leaf <= cpuid::kHvRangeLast) {
        regs = hyperv_leaf(cfg, leaf);
        return;
    }
    if (leaf == 1) {
        regs.ecx |= 1u << 31; // hypervisor present
    } else if (leaf == 0x80000007) {
        regs.edx |= 1u << 8; // invariant TSC, matching kAccessTscInvariant
    }
}

} // namespace hvstor::hv
