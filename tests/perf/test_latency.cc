// Service latency distributions, the size term, spikes, seeds, and the inner backend's own
// completion time.
#include <gtest/gtest.h>

#include <map>

#include "load.h"

namespace hvstor::perf {
namespace {

using backend::Op;
using test::JobSpec;
using test::Load;
using test::make_disk;

// Runs `n` completions of one job with no caps and returns its latency histogram.
Histogram measure(const std::string& settings, JobSpec job, uint64_t n) {
    VirtualClock clock;
    auto disk = make_disk(settings, clock);
    EXPECT_TRUE(disk);
    if (!disk) return {};
    Load load(*disk, {job});
    load.start_all();
    while (load.completed(0) < n) clock.step();
    load.stop_all();
    disk->drain();
    return load.latency(0);
}

TEST(PerfLatency, FixedIsExact) {
    const Histogram h = measure("latency=fixed:2ms", {Op::Read, 4096, 4}, 10000);
    const LatencySummary s = h.summary();
    EXPECT_EQ(s.min, 2 * kMs);
    EXPECT_EQ(s.max, 2 * kMs);
    EXPECT_EQ(s.p50, 2 * kMs);
    EXPECT_EQ(s.p99, 2 * kMs);
    EXPECT_EQ(s.p999, 2 * kMs);
}

TEST(PerfLatency, PerOperation) {
    const std::string st = "latency.read=1ms,latency.write=3ms,latency.flush=7ms";
    EXPECT_EQ(measure(st, {Op::Read, 4096, 2}, 100).percentile(50), 1 * kMs);
    EXPECT_EQ(measure(st, {Op::Write, 4096, 2}, 100).percentile(50), 3 * kMs);
    EXPECT_EQ(measure(st, {Op::Flush, 0, 2}, 100).percentile(50), 7 * kMs);
    EXPECT_EQ(measure(st, {Op::Discard, 4096, 2}, 100).percentile(50), 3 * kMs);
}

TEST(PerfLatency, Uniform) {
    const LatencySummary s = measure("latency=uniform:1ms:3ms", {Op::Read, 4096, 8}, 100000).summary();
    EXPECT_GE(s.min, 1 * kMs);
    EXPECT_LE(s.max, 3 * kMs);
    EXPECT_NEAR(double(s.p50), 2e6, 2e6 * 0.02);
    EXPECT_NEAR(double(s.p90), 2.8e6, 2.8e6 * 0.02);
    EXPECT_NEAR(s.mean, 2e6, 2e6 * 0.01);
}

TEST(PerfLatency, LogNormalPercentiles) {
    const LatencySummary s = measure("latency.read=lognormal:1.8ms:6ms", {Op::Read, 4096, 16}, 200000).summary();
    EXPECT_NEAR(double(s.p50), 1.8e6, 1.8e6 * 0.03);
    EXPECT_NEAR(double(s.p99), 6e6, 6e6 * 0.03);
    EXPECT_GT(s.p999, s.p99);
}

TEST(PerfLatency, SizeTerm) {
    const Histogram h = measure("latency=1ms,latency.per-kib=10us", {Op::Write, 64 * 1024, 4}, 100);
    EXPECT_EQ(h.percentile(50), 1 * kMs + 640 * kUs);
    // Flushes carry no data.
    EXPECT_EQ(measure("latency=1ms,latency.per-kib=10us", {Op::Flush, 0, 4}, 100).percentile(50), kMs);
}

TEST(PerfLatency, Spikes) {
    const Histogram h = measure("latency=1ms,spike.prob=0.01,spike.latency=50ms", {Op::Read, 4096, 64}, 200000);
    // Bucket midpoints: within 0.4%.
    EXPECT_NEAR(double(h.percentile(50)), 1e6, 4e3);
    EXPECT_NEAR(double(h.percentile(98.5)), 1e6, 4e3);
    EXPECT_NEAR(double(h.percentile(99.5)), 51e6, 51e6 * 0.004);
    EXPECT_EQ(h.percentile(100), 51 * kMs);
}

TEST(PerfLatency, SeedDecides) {
    const std::string st = "latency=lognormal:1ms:5ms,seed=";
    const JobSpec j{Op::Read, 4096, 8};
    const LatencySummary a = measure(st + "3", j, 5000).summary();
    const LatencySummary b = measure(st + "3", j, 5000).summary();
    const LatencySummary c = measure(st + "4", j, 5000).summary();
    EXPECT_EQ(a.mean, b.mean);
    EXPECT_EQ(a.p99, b.p99);
    EXPECT_NE(a.mean, c.mean);
}

// Completes each request a fixed time after submission, on the virtual clock.
class SlowInner final : public backend::Backend {
public:
    SlowInner(Clock& clock, Nanos delay) : clock_(clock), delay_(delay) {
        timer_ = clock.make_timer([this] { fire(); });
    }
    uint64_t size() const override { return uint64_t(1) << 30; }
    uint32_t block_size() const override { return 512; }
    bool read_only() const override { return false; }
    std::string describe() const override { return "slow"; }
    void submit(std::span<backend::Request* const> reqs) override {
        const Nanos t = clock_.now() + delay_;
        for (auto* r : reqs) due_.emplace(t, r);
        timer_->arm(t);
    }
    void drain() override {}

private:
    void fire() {
        const Nanos now = clock_.now();
        while (!due_.empty() && due_.begin()->first <= now) {
            backend::Request* r = due_.begin()->second;
            due_.erase(due_.begin());
            r->result = 0;
            r->done->complete(r);
        }
        if (!due_.empty()) timer_->arm(due_.begin()->first);
    }
    Clock& clock_;
    Nanos delay_;
    std::multimap<Nanos, backend::Request*> due_;
    std::unique_ptr<Timer> timer_;
};

TEST(PerfLatency, ALateInnerBackendDecides) {
    for (Nanos inner : {Nanos(1 * kMs), Nanos(5 * kMs)}) {
        VirtualClock clock;
        ModelConfig cfg;
        std::string err;
        ASSERT_TRUE(parse_model_config("latency=2ms", cfg, err));
        auto disk = make_model(std::make_unique<SlowInner>(clock, inner), cfg, &clock, nullptr, err);
        ASSERT_TRUE(disk) << err;
        Load load(*disk, {{Op::Read, 4096, 4}});
        load.start_all();
        clock.run_until(kSec);
        load.stop_all();
        disk->drain();
        EXPECT_EQ(load.latency(0).percentile(50), std::max<Nanos>(inner, 2 * kMs));
        EXPECT_EQ(load.latency(0).percentile(100), std::max<Nanos>(inner, 2 * kMs));
    }
}

TEST(PerfLatency, InvalidRequestsFailAtOnceAndCostNothing) {
    VirtualClock clock;
    auto disk = make_disk("iops=1,latency=1s", clock);
    ASSERT_TRUE(disk);
    struct Sink : backend::CompletionSink {
        int n = 0;
        void complete(backend::Request*) override { n++; }
    } sink;
    uint8_t buf[512];
    iovec iov{buf, 512};
    backend::Request bad{};
    bad.op = Op::Read;
    bad.offset = 100;  // not aligned
    bad.length = 512;
    bad.iov = &iov;
    bad.iovcnt = 1;
    bad.done = &sink;
    backend::Request* r = &bad;
    disk->submit(std::span<backend::Request* const>(&r, 1));
    EXPECT_EQ(sink.n, 1);
    EXPECT_EQ(bad.result, -EINVAL);
    const Stats s = disk->stats();
    EXPECT_EQ(s.errors, 1u);
    EXPECT_EQ(s.issued, 0u);
}

} // namespace
} // namespace hvstor::perf
