// Caps under saturation, IO size accounting and bursting, on the virtual clock.
#include <gtest/gtest.h>

#include <cmath>

#include "load.h"

namespace hvstor::perf {
namespace {

using backend::Op;
using test::JobSpec;
using test::Load;
using test::make_disk;

// Completions of job 0 per second of virtual time between from and to.
double rate(VirtualClock& clock, Load& load, Nanos from, Nanos to, size_t job = 0) {
    clock.run_until(from);
    const uint64_t a = load.completed(job);
    clock.run_until(to);
    return double(load.completed(job) - a) / (double(to - from) / 1e9);
}

TEST(PerfCaps, IopsCapUnderSaturation) {
    VirtualClock clock;
    auto disk = make_disk("iops=1000,latency=1ms", clock);
    ASSERT_TRUE(disk);
    Load load(*disk, {{Op::Read, 4096, 32}});
    load.start_all();
    EXPECT_NEAR(rate(clock, load, 1 * kSec, 21 * kSec), 1000, 10);
    load.stop_all();
    disk->drain();
}

TEST(PerfCaps, BandwidthCapUnderSaturation) {
    VirtualClock clock;
    auto disk = make_disk("mbps=100,latency=2ms", clock);
    ASSERT_TRUE(disk);
    Load load(*disk, {{Op::Write, 64 * 1024, 16}});
    load.start_all();
    const double ios = rate(clock, load, 1 * kSec, 11 * kSec);
    EXPECT_NEAR(ios * 64 * 1024, 100e6, 1e6);
    const Stats s = disk->stats();
    EXPECT_NEAR(s.last.mbps, 100, 1);
    load.stop_all();
    disk->drain();
}

TEST(PerfCaps, TheLowerOfIopsAndBandwidthWins) {
    VirtualClock clock;
    auto disk = make_disk("iops=5000,mbps=40,latency=1ms", clock);
    ASSERT_TRUE(disk);
    Load load(*disk, {{Op::Read, 32 * 1024, 32}});  // bandwidth allows 1220 IOPS
    load.start_all();
    EXPECT_NEAR(rate(clock, load, kSec, 11 * kSec), 40e6 / (32 * 1024), 12.2);
    load.stop_all();
    disk->drain();
}

// An IO up to the unit counts once; larger ones count ceil(size / unit).
TEST(PerfCaps, IoSizeAccountingUnit) {
    struct Case {
        uint64_t bs;
        double expect;  // IOs per second at iops=100
    };
    for (const Case& c : {Case{4096, 100}, Case{256 * 1024, 100}, Case{300 * 1024, 50}, Case{1024 * 1024, 25},
                          Case{1024 * 1024 + 512, 20}}) {
        VirtualClock clock;
        auto disk = make_disk("iops=100,latency=1ms", clock);
        ASSERT_TRUE(disk);
        Load load(*disk, {{Op::Write, c.bs, 8}});
        load.start_all();
        EXPECT_NEAR(rate(clock, load, 2 * kSec, 42 * kSec), c.expect, c.expect / 100) << c.bs;
        const Stats s = disk->stats();
        EXPECT_EQ(s.cost_units, uint64_t(std::llround(100.0 / c.expect)) * s.issued) << c.bs;
        load.stop_all();
        disk->drain();
    }
}

TEST(PerfCaps, SmallerAccountingUnit) {
    VirtualClock clock;
    auto disk = make_disk("iops=400,io-unit=16K", clock);
    ASSERT_TRUE(disk);
    Load load(*disk, {{Op::Read, 64 * 1024, 8}});
    load.start_all();
    EXPECT_NEAR(rate(clock, load, kSec, 11 * kSec), 100, 1);
    load.stop_all();
    disk->drain();
}

TEST(PerfCaps, FlushesCountOnceAndMoveNoBytes) {
    VirtualClock clock;
    auto disk = make_disk("iops=200,mbps=1", clock);
    ASSERT_TRUE(disk);
    Load load(*disk, {{Op::Flush, 0, 8}});
    load.start_all();
    EXPECT_NEAR(rate(clock, load, kSec, 11 * kSec), 200, 2);
    load.stop_all();
    disk->drain();
}

// Credit bursting: the time at burst rate until the bank is empty is burst.duration.
TEST(PerfCaps, CreditBurstLastsItsDurationThenFallsToBase) {
    VirtualClock clock;
    auto disk = make_disk("iops=500,burst=credit,burst.iops=3500,burst.duration=60s,latency=1ms,stats.interval=100ms",
                          clock);
    ASSERT_TRUE(disk);
    const Stats s0 = disk->stats();
    EXPECT_TRUE(s0.credits.enabled);
    EXPECT_DOUBLE_EQ(s0.credits.iops_capacity, 3000.0 * 60);
    EXPECT_DOUBLE_EQ(s0.credits.iops, 3000.0 * 60);
    Load load(*disk, {{Op::Read, 4096, 64}});
    load.start_all();
    Nanos end_of_burst = 0;
    for (Nanos t = 100 * kMs; t <= 90 * kSec; t += 100 * kMs) {
        clock.run_until(t);
        const Stats s = disk->stats();
        if (t > kSec && t < 59 * kSec) {
            ASSERT_NEAR(s.last.iops, 3500, 35) << t;
        }
        if (!end_of_burst && s.last.iops < 2000) end_of_burst = s.last.start;
    }
    EXPECT_NEAR(double(end_of_burst) / 1e9, 60.0, 0.6);
    EXPECT_NEAR(rate(clock, load, 90 * kSec, 110 * kSec), 500, 5);
    EXPECT_LT(disk->stats().credits.iops, 10);
    load.stop_all();
    disk->drain();
}

TEST(PerfCaps, BandwidthBurstHasItsOwnBucket) {
    VirtualClock clock;
    auto disk = make_disk("iops=100000,mbps=100,burst=credit,burst.mbps=170,burst.duration=20s,stats.interval=100ms",
                          clock);
    ASSERT_TRUE(disk);
    Load load(*disk, {{Op::Write, 128 * 1024, 32}});
    load.start_all();
    clock.run_until(10 * kSec);
    EXPECT_NEAR(disk->stats().last.mbps, 170, 1.7);
    const Stats mid = disk->stats();
    EXPECT_NEAR(mid.credits.bytes, 70e6 * 10, 70e6 * 10 / 100);
    EXPECT_NEAR(mid.credits.iops, mid.credits.iops_capacity, 1);  // IOPS far below base: its bank stays full
    Nanos end_of_burst = 0;
    for (Nanos t = 10 * kSec; t <= 30 * kSec && !end_of_burst; t += 100 * kMs) {
        clock.run_until(t);
        if (disk->stats().last.mbps < 135) end_of_burst = disk->stats().last.start;
    }
    EXPECT_NEAR(double(end_of_burst) / 1e9, 20.0, 0.2);
    clock.run_until(35 * kSec);
    EXPECT_NEAR(disk->stats().last.mbps, 100, 1);
    load.stop_all();
    disk->drain();
}

// Idle: credits come back at the base rate. Below base: at base minus usage.
TEST(PerfCaps, CreditsRefillAtTheRightRate) {
    VirtualClock clock;
    auto disk = make_disk("iops=500,burst=credit,burst.iops=3500,burst.duration=10s,burst.start=empty,latency=5ms",
                          clock);
    ASSERT_TRUE(disk);
    EXPECT_LT(disk->stats().credits.iops, 1);
    clock.run_until(20 * kSec);
    EXPECT_NEAR(disk->stats().credits.iops, 500.0 * 20, 500.0 * 20 / 100);
    // QD1 at 5 ms: 200 IOPS, so the bank grows by 300 a second.
    Load load(*disk, {{Op::Read, 4096, 1}});
    load.start_all();
    const double c0 = disk->stats().credits.iops;
    clock.run_until(40 * kSec);
    EXPECT_NEAR(disk->stats().credits.iops - c0, 300.0 * 20, 300.0 * 20 / 100);
    // Full after (30000 - 16000) / 300 more seconds, then stays there.
    clock.run_until(120 * kSec);
    EXPECT_DOUBLE_EQ(disk->stats().credits.iops, 30000);
    load.stop_all();
    disk->drain();
}

TEST(PerfCaps, EmptyBankStartsAtBase) {
    VirtualClock clock;
    auto disk = make_disk("iops=500,burst=credit,burst.iops=3500,burst.start=empty,latency=1ms", clock);
    ASSERT_TRUE(disk);
    Load load(*disk, {{Op::Read, 4096, 32}});
    load.start_all();
    EXPECT_NEAR(rate(clock, load, kSec, 11 * kSec), 500, 5);
    load.stop_all();
    disk->drain();
}

TEST(PerfCaps, OnDemandBurstHasNoLimit) {
    VirtualClock clock;
    auto disk = make_disk("profile=premium-p30,burst=on-demand,burst.iops=8000,latency=1ms", clock);
    ASSERT_TRUE(disk);
    EXPECT_FALSE(disk->stats().credits.enabled);
    Load load(*disk, {{Op::Read, 4096, 64}});
    load.start_all();
    EXPECT_NEAR(rate(clock, load, kSec, 11 * kSec), 8000, 80);
    EXPECT_NEAR(rate(clock, load, 100 * kSec, 110 * kSec), 8000, 80);
    load.stop_all();
    disk->drain();
}

TEST(PerfCaps, BurstOffHoldsBase) {
    VirtualClock clock;
    auto disk = make_disk("profile=premium-p10,burst=off,latency=1ms", clock);
    ASSERT_TRUE(disk);
    Load load(*disk, {{Op::Read, 4096, 64}});
    load.start_all();
    EXPECT_NEAR(rate(clock, load, kSec, 11 * kSec), 500, 5);
    load.stop_all();
    disk->drain();
}

TEST(PerfCaps, PresetBankHoldsThirtyMinutesAtBurst) {
    VirtualClock clock;
    auto disk = make_disk("profile=premium-p1", clock);
    ASSERT_TRUE(disk);
    const Stats s = disk->stats();
    EXPECT_DOUBLE_EQ(s.credits.iops_capacity, (3500.0 - 120) * 1800);
    EXPECT_DOUBLE_EQ(s.credits.bytes_capacity, (170e6 - 25e6) * 1800);
}

TEST(PerfCaps, PerDirectionCaps) {
    VirtualClock clock;
    auto disk = make_disk("read.iops=300,write.mbps=8,queue=per-direction,latency=1ms", clock);
    ASSERT_TRUE(disk);
    Load load(*disk, {{Op::Read, 4096, 16}, {Op::Write, 64 * 1024, 16}});
    load.start_all();
    clock.run_until(kSec);
    const uint64_t r0 = load.completed(0), w0 = load.completed(1);
    clock.run_until(11 * kSec);
    EXPECT_NEAR(double(load.completed(0) - r0) / 10, 300, 3);
    EXPECT_NEAR(double(load.completed(1) - w0) / 10 * 64 * 1024, 8e6, 8e4);
    load.stop_all();
    disk->drain();
}

// Rates divided and latencies multiplied by the same factor: outstanding counts stay.
TEST(PerfCaps, TimeScaleKeepsOutstandingCounts) {
    double in_service[2], queued[2], iops[2], lat[2];
    const char* settings[2] = {"iops=2000,latency=4ms", "iops=2000,latency=4ms,time-scale=10"};
    for (int k = 0; k < 2; k++) {
        VirtualClock clock;
        auto disk = make_disk(settings[k], clock);
        ASSERT_TRUE(disk);
        Load load(*disk, {{Op::Read, 4096, 32}});
        load.start_all();
        const Nanos len = k ? 200 * kSec : 20 * kSec;
        clock.run_until(len / 2);
        double sum_in = 0, sum_q = 0;
        const int n = 400;
        const uint64_t c0 = load.completed(0);
        load.window(0).clear();
        for (int i = 0; i < n; i++) {
            clock.advance(len / 2 / n);
            const Stats s = disk->stats();
            sum_in += s.in_service;
            sum_q += s.queued;
        }
        in_service[k] = sum_in / n;
        queued[k] = sum_q / n;
        iops[k] = double(load.completed(0) - c0) / (double(len / 2) / 1e9);
        lat[k] = double(load.window(0).percentile(50));
        load.stop_all();
        disk->drain();
    }
    EXPECT_NEAR(iops[1], iops[0] / 10, iops[0] / 1000);
    EXPECT_NEAR(lat[1], lat[0] * 10, lat[0] * 10 / 100);
    EXPECT_NEAR(in_service[0], 8, 0.5);  // 2000 IOPS x 4 ms
    EXPECT_NEAR(in_service[1], in_service[0], 0.5);
    EXPECT_NEAR(queued[1], queued[0], 0.5);
}

} // namespace
} // namespace hvstor::perf
