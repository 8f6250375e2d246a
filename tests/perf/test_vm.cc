// VM caps shared by the disks of one VM, applied after each disk's own.
#include <gtest/gtest.h>

#include "load.h"

namespace hvstor::perf {
namespace {

using backend::Op;
using test::Load;
using test::make_disk;

std::shared_ptr<VmLimits> make_vm(const std::string& settings) {
    std::string err;
    auto vm = VmLimits::create(settings, err);
    EXPECT_TRUE(vm) << err;
    return vm;
}

TEST(PerfVm, SettingsErrors) {
    std::string err;
    EXPECT_FALSE(VmLimits::create("profile=standard-f32s-v2,iops=lots", err));
    EXPECT_NE(err.find("iops=lots"), std::string::npos) << err;
}

struct TwoDisks {
    VirtualClock clock;
    std::shared_ptr<VmLimits> vm;
    std::unique_ptr<ModelBackend> a, b;
    std::unique_ptr<Load> la, lb;
    TwoDisks(const std::string& vm_settings, const std::string& da, const std::string& db, uint32_t qd = 64,
             uint64_t bs = 4096)
        : TwoDisks(make_vm(vm_settings), da, db, qd, bs) {}
    // The disks pass `shared` after their own caps: the VM's, or a group's chained to it.
    TwoDisks(std::shared_ptr<VmLimits> shared, const std::string& da, const std::string& db, uint32_t qd = 64,
             uint64_t bs = 4096) {
        vm = std::move(shared);
        a = make_disk(da, clock, vm);
        b = make_disk(db, clock, vm);
        la = std::make_unique<Load>(*a, std::vector<test::JobSpec>{{Op::Read, bs, qd}});
        lb = std::make_unique<Load>(*b, std::vector<test::JobSpec>{{Op::Read, bs, qd}});
    }
    // Both disks loaded from now on; the IOPS of each between from and to.
    std::pair<double, double> both_rates(Nanos from, Nanos to) {
        la->start_all();
        lb->start_all();
        return rates(from, to);
    }
    // IOPS of each disk between from and to.
    std::pair<double, double> rates(Nanos from, Nanos to) {
        clock.run_until(from);
        const uint64_t a0 = la->completed(0), b0 = lb->completed(0);
        clock.run_until(to);
        const double secs = double(to - from) / 1e9;
        return {double(la->completed(0) - a0) / secs, double(lb->completed(0) - b0) / secs};
    }
    ~TwoDisks() {
        la->stop_all();
        lb->stop_all();
        a->drain();
        b->drain();
    }
};

TEST(PerfVm, CapSharedAcrossTwoDisks) {
    TwoDisks t("iops=6000", "iops=5000,latency=1ms", "iops=5000,latency=1ms");
    const auto [ra, rb] = t.both_rates(kSec, 11 * kSec);
    EXPECT_NEAR(ra + rb, 6000, 60);
    EXPECT_NEAR(ra, 3000, 150);
    EXPECT_NEAR(rb, 3000, 150);
    // Waiting for the VM counts as waiting in the host.
    EXPECT_GT(t.a->stats().queued, 0u);
}

TEST(PerfVm, ADiskAloneIsHeldByItsOwnCap) {
    TwoDisks t("iops=6000", "iops=5000,latency=1ms", "iops=5000,latency=1ms");
    t.la->start_all();
    const auto [ra, rb] = t.rates(kSec, 11 * kSec);
    EXPECT_NEAR(ra, 5000, 50);
    EXPECT_EQ(rb, 0);
}

TEST(PerfVm, DiskCapsApplyFirst) {
    TwoDisks t("iops=6000", "iops=1000,latency=1ms", "iops=10000,latency=1ms");
    const auto [ra, rb] = t.both_rates(kSec, 11 * kSec);
    EXPECT_NEAR(ra, 1000, 10);
    EXPECT_NEAR(rb, 5000, 60);
}

TEST(PerfVm, BandwidthCapShared) {
    TwoDisks t("mbps=100", "mbps=80,latency=1ms", "mbps=80,latency=1ms", 16, 64 * 1024);
    const auto [ra, rb] = t.both_rates(kSec, 11 * kSec);
    EXPECT_NEAR((ra + rb) * 64 * 1024, 100e6, 1e6);
}

TEST(PerfVm, VmBurstCredits) {
    // D16s_v3: 25600 base, 32000 burst; a short bank to see it end.
    TwoDisks t("profile=standard-d16s-v3,burst.duration=10s,mbps=0",
               "iops=20000,latency=500us,stats.interval=100ms", "iops=20000,latency=500us,stats.interval=100ms",
               128);
    const Stats s0 = t.a->stats();
    EXPECT_TRUE(s0.vm_credits.enabled);
    EXPECT_DOUBLE_EQ(s0.vm_credits.iops_capacity, (32000.0 - 25600) * 10);
    auto [ra, rb] = t.both_rates(kSec, 5 * kSec);
    EXPECT_NEAR(ra + rb, 32000, 320);
    std::tie(ra, rb) = t.rates(15 * kSec, 25 * kSec);
    EXPECT_NEAR(ra + rb, 25600, 256);
    EXPECT_LT(t.b->stats().vm_credits.iops, 100);
}

// Two disks given one model object: its caps hold for both together, as a throttle group's.
std::shared_ptr<VmLimits> group_of(const std::string& settings) {
    ModelConfig cfg;
    std::string err;
    EXPECT_TRUE(parse_model_config(settings, cfg, err)) << err;
    return VmLimits::group(cfg);
}

TEST(PerfGroup, CapSharedByTheDisksOfOneModel) {
    const std::string model = "iops=5000,latency=1ms";
    TwoDisks t(group_of(model), model, model);
    const auto [ra, rb] = t.both_rates(kSec, 11 * kSec);
    EXPECT_NEAR(ra + rb, 5000, 50);
    EXPECT_NEAR(ra, 2500, 150);
    EXPECT_NEAR(rb, 2500, 150);
}

TEST(PerfGroup, ADiskAloneHasTheWholeGroup) {
    const std::string model = "iops=5000,latency=1ms";
    TwoDisks t(group_of(model), model, model);
    t.la->start_all();
    const auto [ra, rb] = t.rates(kSec, 11 * kSec);
    EXPECT_NEAR(ra, 5000, 50);
    EXPECT_EQ(rb, 0);
}

TEST(PerfGroup, ChainedToTheVmsCaps) {
    // Each disk alone could do 2000 and the VM 3000: the group's 2000 holds the pair.
    const std::string model = "iops=2000,latency=1ms";
    TwoDisks t(VmLimits::chain(group_of(model), make_vm("iops=3000")), model, model);
    const auto [ra, rb] = t.both_rates(kSec, 11 * kSec);
    EXPECT_NEAR(ra + rb, 2000, 20);
    // And the VM's caps still hold behind the group's.
    TwoDisks u(VmLimits::chain(group_of("iops=5000"), make_vm("iops=3000")), model, model);
    const auto [ua, ub] = u.both_rates(kSec, 11 * kSec);
    EXPECT_NEAR(ua + ub, 3000, 30);
    EXPECT_EQ(VmLimits::chain(nullptr, t.vm), t.vm);
    // A group alone reports no VM credits (burst credits of the group are not the VM's).
    const auto alone = VmLimits::chain(group_of("iops=100,burst=credit,burst.iops=200"), nullptr);
    EXPECT_FALSE(alone->credits(0).enabled);
    EXPECT_TRUE(group_of("iops=100,burst=credit,burst.iops=200")->credits(0).enabled);
}

} // namespace
} // namespace hvstor::perf
