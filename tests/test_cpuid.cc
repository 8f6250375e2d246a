#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "hvstor/hyperv/cpuid.h"

using namespace hvstor::hv;

namespace {
CpuidRegs run(uint32_t leaf, CpuidRegs in = {0x11111111, 0x22222222, 0x33333333, 0x44444444}) {
    CpuidConfig cfg;
    cfg.max_vps = 8;
    apply_cpuid(cfg, leaf, 0, in);
    return in;
}
std::string sig(const CpuidRegs& r) {
    char s[13] = {};
    std::memcpy(s, &r.ebx, 4);
    std::memcpy(s + 4, &r.ecx, 4);
    std::memcpy(s + 8, &r.edx, 4);
    return s;
}
} // namespace

TEST(Cpuid, VendorLeafSaysMicrosoftHv) {
    CpuidRegs r = run(0x40000000);
    EXPECT_EQ(sig(r), "Microsoft Hv");
    // Linux requires the max leaf to be within 0x40000005..0x4000FFFF.
    EXPECT_GE(r.eax, 0x40000005u);
    EXPECT_LE(r.eax, 0x4000FFFFu);
}

TEST(Cpuid, InterfaceIsHv1) { EXPECT_EQ(run(0x40000001).eax, 0x31237648u); }

TEST(Cpuid, MandatoryFeaturesPresentForbiddenAbsent) {
    CpuidRegs r = run(0x40000003);
    EXPECT_TRUE(r.eax & (1u << 5)) << "HYPERCALL_AVAILABLE";
    EXPECT_TRUE(r.eax & (1u << 6)) << "VP_INDEX_AVAILABLE";
    EXPECT_TRUE(r.eax & (1u << 2)) << "SYNIC_AVAILABLE";
    EXPECT_TRUE(r.eax & (1u << 15)) << "ACCESS_TSC_INVARIANT";
    EXPECT_FALSE(r.eax & (1u << 1)) << "no reference counter: sched_clock would exit on 6.1";
    EXPECT_FALSE(r.eax & (1u << 3)) << "no synthetic timers";
    EXPECT_FALSE(r.eax & (1u << 11)) << "no frequency MSRs";
    EXPECT_TRUE(r.ebx & (1u << 4)) << "post messages";
    EXPECT_TRUE(r.ebx & (1u << 5)) << "signal events";
    EXPECT_FALSE(r.ebx & (1u << 1)) << "partition id";
    EXPECT_FALSE(r.ebx & (1u << 12)) << "cpu management";
    EXPECT_FALSE(r.ebx & (1u << 22)) << "isolation";
    EXPECT_FALSE(r.edx & (1u << 8)) << "frequency MSRs";
}

TEST(Cpuid, HintsRecommendNoAutoEoiAndNothingElse) {
    CpuidRegs r = run(0x40000004);
    EXPECT_TRUE(r.eax & (1u << 9));
    for (int bit : {2, 3, 10, 12, 14}) EXPECT_FALSE(r.eax & (1u << bit)) << "hint bit " << bit;
}

TEST(Cpuid, LimitsReportVps) { EXPECT_EQ(run(0x40000005).eax, 8u); }

TEST(Cpuid, OtherHypervisorSignaturesAreHidden) {
    // KVM's detect scans 0x40000000..0x4000FF00 in steps of 0x100 for "KVMKVMKVM".
    for (uint32_t leaf = 0x40000100; leaf < 0x40010000; leaf += 0x100) {
        CpuidRegs r = run(leaf);
        EXPECT_EQ(r.eax | r.ebx | r.ecx | r.edx, 0u) << std::hex << leaf;
    }
    EXPECT_EQ(run(0x40000006).ebx, 0u);
}

TEST(Cpuid, HypervisorPresentAndInvariantTsc) {
    CpuidRegs r = run(1, {0, 0, 0, 0});
    EXPECT_TRUE(r.ecx & (1u << 31));
    EXPECT_EQ(r.eax, 0u) << "other leaf-1 bits untouched";
    CpuidRegs t = run(0x80000007, {0, 0, 0, 0});
    EXPECT_TRUE(t.edx & (1u << 8));
}

TEST(Cpuid, UnrelatedLeavesUntouched) {
    CpuidRegs in{1, 2, 3, 4};
    CpuidRegs r = run(0x7, in);
    EXPECT_EQ(r.eax, 1u);
    EXPECT_EQ(r.ebx, 2u);
    EXPECT_EQ(r.ecx, 3u);
    EXPECT_EQ(r.edx, 4u);
}
