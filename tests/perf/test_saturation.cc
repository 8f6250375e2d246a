// Products of settings in range (and settings made without the parser) saturate at the
// model's horizon instead of overflowing: a delay past it never ends, and only destroying the
// model completes what waits for it. Each test after the first failed before the model used
// saturate.h: UBSan stopped on a signed overflow, or a result came out wrong.
#include <gtest/gtest.h>

#include <sys/uio.h>

#include <deque>
#include <limits>

#include "load.h"
#include "saturate.h"

namespace hvstor::perf {
namespace {

using backend::Op;
using backend::Request;
using detail::kHorizon;
using test::make_disk;

// Requests submitted at once; counts and times each completion.
class Ios final : public backend::CompletionSink {
public:
    explicit Ios(Clock& clock) : clock_(clock) {}
    size_t add(Op op, uint64_t offset, uint64_t length) {
        Slot& s = slots_.emplace_back();
        s.iov = {&byte_, length};
        s.req.op = op;
        s.req.offset = offset;
        s.req.length = length;
        s.req.iov = length ? &s.iov : nullptr;
        s.req.iovcnt = length ? 1 : 0;
        s.req.done = this;
        s.req.opaque = &s;
        return slots_.size() - 1;
    }
    void submit(ModelBackend& disk) {
        std::vector<Request*> v;
        for (Slot& s : slots_) v.push_back(&s.req);
        disk.submit(v);
    }
    void complete(Request* r) override {
        Slot* s = static_cast<Slot*>(r->opaque);
        s->count++;
        s->at = clock_.now();
    }
    int count(size_t i) const { return slots_[i].count; }
    Nanos at(size_t i) const { return slots_[i].at; }
    size_t completed() const {
        size_t n = 0;
        for (const Slot& s : slots_) n += s.count > 0;
        return n;
    }
    bool all_once() const {
        for (const Slot& s : slots_)
            if (s.count != 1) return false;
        return true;
    }

private:
    struct Slot {
        Request req;
        iovec iov;
        int count = 0;
        Nanos at = -1;
    };
    Clock& clock_;
    uint8_t byte_ = 0;  // never touched: only writes and flushes carry it
    std::deque<Slot> slots_;
};

TEST(PerfSaturation, Arithmetic) {
    using namespace detail;
    EXPECT_EQ(deadline_after(5, 7), 12);
    EXPECT_EQ(deadline_after(kHorizon - 8, 7), kHorizon - 1);
    EXPECT_EQ(deadline_after(kHorizon - 7, 7), kNever);
    EXPECT_EQ(deadline_after(kNever, 1), kNever);
    EXPECT_EQ(deadline_after(0, kNever), kNever);
    EXPECT_EQ(next_boundary(0, kSec), kSec);
    EXPECT_EQ(next_boundary(2500 * kMs, kSec), 3 * kSec);
    EXPECT_EQ(next_boundary(kNever - 1, kSec), kNever);
    EXPECT_EQ(to_delay(1.9), 1);
    EXPECT_EQ(to_delay(-3), 0);
    EXPECT_EQ(to_delay(1e300), kHorizon);
    EXPECT_EQ(to_delay(std::numeric_limits<double>::quiet_NaN()), 0);
    EXPECT_EQ(add_delays(kNever, kNever), kHorizon);
    EXPECT_EQ(add_delays(-5, 3), 3);
    EXPECT_EQ(add_total(kNever - 1, 2), kNever);
    EXPECT_EQ(add_total(3, 4), 7);
}

// Before: the time scale's product went through llround out of range and came back negative.
TEST(PerfSaturation, TimeScaleSaturatesDurations) {
    ModelConfig c;
    c.read_latency = {DistKind::LogNormal, 3600 * kSec, 3600 * kSec};
    c.spike_latency = 3600 * kSec;
    c.caps.burst_duration = 100 * 3600 * kSec;
    c.caps.window = kMs;
    apply_time_scale(c, 1e10);
    EXPECT_EQ(c.read_latency.a, kHorizon);
    EXPECT_EQ(c.read_latency.b, kHorizon);
    EXPECT_EQ(c.spike_latency, kHorizon);
    EXPECT_EQ(c.caps.burst_duration, kHorizon);
    EXPECT_EQ(c.caps.window, 10'000'000 * kSec);  // 1ms x 10^10: still below the horizon
    VmConfig v;
    v.caps.burst_duration = 3600 * kSec;
    apply_time_scale(v, 1e10);
    EXPECT_EQ(v.caps.burst_duration, kHorizon);
}

// Before: latency.per-kib x the length overflowed the conversion to nanoseconds and the IO
// completed at once. In range: 1s per KiB, scaled by 1000.
TEST(PerfSaturation, SizeTermSaturates) {
    VirtualClock clock;
    auto disk = make_disk("latency.per-kib=1s,time-scale=1000", clock);
    ASSERT_TRUE(disk);
    Ios ios(clock);
    const size_t small = ios.add(Op::Write, 0, 1 << 20);
    const size_t huge = ios.add(Op::Write, 0, uint64_t(32) << 30);
    ios.submit(*disk);
    clock.run_until(kHorizon);
    EXPECT_EQ(ios.count(small), 1);
    EXPECT_EQ(ios.at(small), 1000 * kSec * 1024);
    EXPECT_EQ(ios.count(huge), 0);  // past the horizon: completes when the model goes
    disk.reset();
    EXPECT_TRUE(ios.all_once());
}

// Before: the spike added to the latency overflowed (signed) in the sampler.
TEST(PerfSaturation, LatencySumSaturates) {
    ModelConfig cfg;
    cfg.read_latency = {DistKind::Fixed, 5'000'000'000'000'000'000, 5'000'000'000'000'000'000};
    cfg.spike_prob = 1;
    cfg.spike_latency = 5'000'000'000'000'000'000;
    VirtualClock clock;
    std::string err;
    auto disk = make_model(backend::make_null(uint64_t(1) << 30, err), cfg, &clock, nullptr, err);
    ASSERT_TRUE(disk) << err;
    Ios ios(clock);
    ios.add(Op::Read, 0, 0);
    ios.submit(*disk);
    clock.run_until(kHorizon);
    EXPECT_EQ(ios.completed(), 0u);
    EXPECT_EQ(disk->stats().in_service, 1u);
    disk.reset();
    EXPECT_TRUE(ios.all_once());
}

// Before: at one IO per 10^18 ns the throttle total, then the admission times overflowed.
// The parser no longer takes such a rate (iops 0.001 at least): the settings are made
// directly, as a program could.
TEST(PerfSaturation, TinyRatesSaturateTimes) {
    VirtualClock clock;
    ModelConfig cfg;
    cfg.caps.iops = 1e-9;
    std::string err;
    auto disk = make_model(backend::make_null(uint64_t(64) << 30, err), cfg, &clock, nullptr, err);
    ASSERT_TRUE(disk) << err;
    Ios ios(clock);
    for (int i = 0; i < 12; i++) ios.add(Op::Flush, 0, 0);
    ios.submit(*disk);
    clock.run_until(kNever - 1);  // nothing is armed past the horizon
    // Two at once (the bucket's depth), then one every 10^18 ns up to the horizon.
    EXPECT_EQ(ios.completed(), 6u);
    const Stats s = disk->stats();
    EXPECT_EQ(s.issued, 6u);
    EXPECT_NEAR(double(s.throttle_max), 4e18, 1e6);
    EXPECT_EQ(s.throttle_total, kNever);  // 10^19: saturated
    EXPECT_EQ(s.queued, 6u);
    disk.reset();
    EXPECT_TRUE(ios.all_once());
}

// Before: the VM's reservation times overflowed.
TEST(PerfSaturation, TinyVmRatesSaturateTimes) {
    std::string err;
    VmConfig vc;
    vc.caps.iops = 1e-9;  // below what the parser takes, as in TinyRatesSaturateTimes
    auto vm = VmLimits::create(vc, err);
    ASSERT_TRUE(vm) << err;
    VirtualClock clock;
    auto disk = make_disk("", clock, vm);
    ASSERT_TRUE(disk);
    Ios ios(clock);
    for (int i = 0; i < 12; i++) ios.add(Op::Flush, 0, 0);
    ios.submit(*disk);
    clock.run_until(kNever - 1);  // nothing is armed past the horizon
    EXPECT_EQ(ios.completed(), 6u);
    EXPECT_EQ(disk->stats().queued, 6u);
    disk.reset();
    EXPECT_TRUE(ios.all_once());
}

} // namespace
} // namespace hvstor::perf
