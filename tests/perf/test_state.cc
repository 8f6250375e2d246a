// A modelled disk's saved state: its burst buckets carry over to a disk with the same caps,
// counted from the loading model's own now; other caps or a damaged stream are refused.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "load.h"

namespace hvstor::perf {
namespace {

using backend::Op;
using test::Load;
using test::make_disk;

constexpr const char* kCaps = "iops=500,burst=credit,burst.iops=3500,burst.duration=60s,latency=1ms";

// A disk that spent part of its bank: 10 s at the burst rate.
std::vector<uint8_t> spent_state(VirtualClock& clock, double& credits) {
    auto disk = make_disk(kCaps, clock);
    EXPECT_TRUE(disk);
    Load load(*disk, {{Op::Read, 4096, 64}});
    load.start_all();
    clock.run_until(10 * kSec);
    load.stop_all();
    disk->drain();
    state::Writer w;
    disk->save(w);
    credits = disk->stats().credits.iops;
    return w.take();
}

TEST(PerfState, CreditsCarryOverToADiskWithTheSameCaps) {
    VirtualClock clock;
    double credits = 0;
    const std::vector<uint8_t> saved = spent_state(clock, credits);
    ASSERT_LT(credits, 3000.0 * 60 * 0.9); // it did spend: the test can tell a fresh bank
    VirtualClock later;
    later.run_until(500 * kSec); // another clock, far on: no time of it counts
    auto next = make_disk(kCaps, later);
    ASSERT_TRUE(next);
    EXPECT_DOUBLE_EQ(next->stats().credits.iops, 3000.0 * 60);
    state::Reader r(saved);
    ASSERT_TRUE(next->load(r)) << r.error();
    EXPECT_TRUE(r.done()) << r.error();
    EXPECT_NEAR(next->stats().credits.iops, credits, 1);
}

TEST(PerfState, OtherCapsOrADamagedStreamAreRefused) {
    VirtualClock clock;
    double credits = 0;
    const std::vector<uint8_t> saved = spent_state(clock, credits);
    auto other = make_disk("iops=400,burst=credit,burst.iops=3500,burst.duration=60s,latency=1ms", clock);
    ASSERT_TRUE(other);
    state::Reader r(saved);
    EXPECT_FALSE(other->load(r));
    EXPECT_NE(r.error().find("settings"), std::string::npos) << r.error();
    EXPECT_DOUBLE_EQ(other->stats().credits.iops, (3500.0 - 400) * 60);
    auto same = make_disk(kCaps, clock);
    ASSERT_TRUE(same);
    const double fresh = same->stats().credits.iops;
    for (size_t n = 0; n < saved.size(); n++) {
        state::Reader cut(std::span<const uint8_t>(saved.data(), n));
        EXPECT_FALSE(same->load(cut)) << n;
        EXPECT_DOUBLE_EQ(same->stats().credits.iops, fresh) << n;
    }
    // A bucket value that is not a number.
    std::vector<uint8_t> nan = saved;
    const double bad = std::nan("");
    // Tag, version, the settings' key, then the first limiter: tokens, credits.
    std::memcpy(nan.data() + 4 + 4 + 8 + 8, &bad, 8);
    state::Reader rn(nan);
    EXPECT_FALSE(same->load(rn));
    EXPECT_DOUBLE_EQ(same->stats().credits.iops, fresh);
}

} // namespace
} // namespace hvstor::perf
