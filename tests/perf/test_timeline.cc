// The JSON-lines timeline and the histogram behind the percentiles.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>
#include <vector>
#include <fstream>
#include <limits>

#include "hvstor/perf/timeline.h"
#include "load.h"

namespace hvstor::perf {
namespace {

using backend::Op;
using test::Load;
using test::make_disk;

std::vector<std::string> read_lines(const std::string& path) {
    std::ifstream in(path);
    std::vector<std::string> v;
    for (std::string line; std::getline(in, line);) v.push_back(line);
    return v;
}

double field(const std::string& line, const std::string& key) {
    const size_t p = line.find("\"" + key + "\":");
    if (p == std::string::npos) return -1;
    return std::strtod(line.c_str() + p + key.size() + 3, nullptr);
}

TEST(PerfTimeline, OneLinePerIntervalPerDisk) {
    const std::string path = testing::TempDir() + "perf-timeline.jsonl";
    VirtualClock clock;
    auto a = make_disk("iops=500,latency=2ms", clock);
    auto b = make_disk("iops=500,burst=credit,burst.iops=1000,burst.duration=10s,latency=2ms", clock);
    ASSERT_TRUE(a && b);
    std::string err;
    auto tl = TimelineWriter::open(clock, path, kSec, err);
    ASSERT_TRUE(tl) << err;
    tl->add("disk \"a\"", *a);
    tl->add("b", *b);
    Load la(*a, {{Op::Read, 4096, 32}}), lb(*b, {{Op::Write, 8192, 32}});
    la.start_all();
    lb.start_all();
    clock.run_until(5 * kSec + 1);
    const auto lines = read_lines(path);
    ASSERT_EQ(lines.size(), 10u);
    for (size_t i = 0; i < lines.size(); i++) {
        const std::string& l = lines[i];
        EXPECT_EQ(l.front(), '{');
        EXPECT_EQ(l.back(), '}');
        EXPECT_EQ(field(l, "t"), double(i / 2 + 1)) << l;
        EXPECT_EQ(field(l, "interval"), 1.0);
        EXPECT_NE(l.find("\"lat_ms\":{\"mean\":"), std::string::npos) << l;
        EXPECT_NE(l.find("\"throttle_ms\":{\"mean\":"), std::string::npos) << l;
        EXPECT_NE(l.find("\"late_ms\":{\"mean\":0.000,\"max\":0.000}"), std::string::npos)
            << "a virtual clock is never late: " << l;
        EXPECT_NE(l.find("\"queue\":{\"now\":"), std::string::npos) << l;
        if (i % 2 == 0) {
            EXPECT_NE(l.find("\"disk\":\"disk \\\"a\\\"\""), std::string::npos) << l;
            EXPECT_NE(l.find("\"credits\":null"), std::string::npos) << l;
            if (i > 0) {
                EXPECT_NEAR(field(l, "iops"), 500, 5) << l;
                EXPECT_NEAR(field(l, "p50"), 64, 1.5) << l;  // 32 / 500 per second
            }
        } else {
            EXPECT_NE(l.find("\"credits\":{\"iops\":"), std::string::npos) << l;
            if (i > 1) {
                EXPECT_NEAR(field(l, "iops"), 1000, 10) << l;
            }
            EXPECT_NEAR(field(l, "write_iops"), field(l, "iops"), 0.01) << l;
            EXPECT_NEAR(field(l, "mbps"), field(l, "iops") * 8192 / 1e6, 0.01) << l;
        }
        EXPECT_NE(l.find("\"vm_credits\":null"), std::string::npos) << l;
    }
    // Credits fall by 500 a second on disk b.
    EXPECT_NEAR(field(lines[9], "iops_pct"), 100.0 * (5000 - 2500) / 5000, 1);
    tl->remove(*a);
    clock.run_until(6 * kSec + 1);
    EXPECT_EQ(read_lines(path).size(), 11u);
    la.stop_all();
    lb.stop_all();
    tl.reset();
    a->drain();
    b->drain();
    std::remove(path.c_str());
}

TEST(PerfTimeline, FromTheSettingsString) {
    const std::string path = testing::TempDir() + "perf-timeline2.jsonl";
    VirtualClock clock;
    {
        auto d = make_disk("name=sda,iops=100,latency=1ms,stats.interval=500ms,timeline=" + path, clock);
        ASSERT_TRUE(d);
        Load l(*d, {{Op::Read, 4096, 4}});
        l.start_all();
        clock.run_until(2 * kSec + 1);
        l.stop_all();
        d->drain();
    }
    const auto lines = read_lines(path);
    ASSERT_GE(lines.size(), 4u);
    EXPECT_NE(lines[0].find("\"disk\":\"sda\""), std::string::npos);
    EXPECT_EQ(field(lines[3], "t"), 2.0);
    EXPECT_NEAR(field(lines[3], "iops"), 100, 2);
    std::string err;
    EXPECT_FALSE(make_disk("timeline=/nonexistent/dir/x.jsonl", clock, nullptr, &err));
    EXPECT_NE(err.find("cannot open timeline"), std::string::npos) << err;
    std::remove(path.c_str());
}

// A line with every field set, byte for byte; the name needs escaping.
// A clock whose timers fire `late` after their deadline, as a host timer thread that wakes
// late. Single-threaded: step() fires the earliest armed timer.
class LateClock final : public Clock {
public:
    explicit LateClock(Nanos late) : late_(late) {}
    Nanos now() const override { return now_; }
    std::unique_ptr<Timer> make_timer(std::function<void()> fire) override {
        return std::make_unique<LateTimer>(*this, std::move(fire));
    }
    bool step() override {
        LateTimer* next = nullptr;
        for (LateTimer* t : timers_)
            if (t->deadline != kNever && (!next || t->deadline < next->deadline)) next = t;
        if (!next) return false;
        now_ = std::max(now_, next->deadline + late_);
        next->deadline = kNever;
        next->fire();
        return true;
    }

private:
    struct LateTimer final : Timer {
        LateTimer(LateClock& c, std::function<void()> f) : clock(c), fire(std::move(f)) { clock.timers_.push_back(this); }
        ~LateTimer() override { std::erase(clock.timers_, this); }
        void arm(Nanos d) override { deadline = std::min(deadline, d); }
        LateClock& clock;
        std::function<void()> fire;
        Nanos deadline = kNever;
    };
    const Nanos late_;
    Nanos now_ = 0;
    std::vector<LateTimer*> timers_;
};

// How late the host completed IOs is counted apart, and is the whole difference between the
// latency the model drew (a fixed 2 ms here) and the one the guest saw.
TEST(PerfTimeline, LateCompletionsAreCountedApart) {
    LateClock clock(300 * kUs);
    auto d = make_disk("latency=2ms", clock);
    ASSERT_TRUE(d);
    Load load(*d, {{Op::Read, 4096, 1}});
    load.start_all();
    while (load.completed(0) < 1000) ASSERT_TRUE(clock.step()); // 2.3 s: full stats intervals
    load.stop_all();
    d->drain();
    const Stats s = d->stats();
    ASSERT_GE(s.ios, 1000u);
    EXPECT_EQ(s.late_max, 300 * kUs);
    EXPECT_EQ(s.late_total, Nanos(s.ios) * 300 * kUs);
    EXPECT_NEAR(s.latency.mean, double(2 * kMs + 300 * kUs), double(20 * kUs)) << "what the guest saw";
    EXPECT_NEAR(s.last.late_mean, double(300 * kUs), 1.0) << "the last full interval";
    // The interval's latency, as the model drew it and as the guest saw it.
    EXPECT_EQ(s.last.model_latency.p50, 2 * kMs);
    EXPECT_EQ(s.last.model_latency.p99, 2 * kMs);
    EXPECT_EQ(s.last.model_latency.count, s.last.ios);
    EXPECT_NEAR(double(s.last.latency.p50), double(2 * kMs + 300 * kUs), double(20 * kUs));
}

TEST(PerfTimeline, LineFormat) {
    Stats s;
    s.time_scale = 2.5;
    s.ios = 10495;
    s.bytes_read = 100000000;
    s.bytes_written = 14196480;
    s.errors = 3;
    s.cancelled = 2;
    s.queued = 28;
    s.in_service = 8;
    s.credits = {true, 5390999.4, 5400000, 126000e6, 126000e6};
    IntervalStats& l = s.last;
    l.start = 2 * kSec;
    l.end = 3 * kSec;
    l.iops = 3501;
    l.read_iops = 3113;
    l.write_iops = 388;
    l.mbps = 38.1793;
    l.latency.mean = 10287123;
    l.latency.p50 = 10191000;
    l.latency.p90 = 11239000;
    l.latency.p99 = 12288000;
    l.latency.p999 = 13402000;
    l.latency.max = 14052000;
    l.throttle_mean = 8190400;
    l.throttle_max = 9218000;
    l.late_mean = 61200;
    l.late_max = 480000;
    l.model_latency.mean = 10225923;
    l.model_latency.p50 = 10130000;
    l.model_latency.p99 = 12001000;
    l.queue_avg = 28.657;
    l.queue_max = 33;
    EXPECT_EQ(TimelineWriter::format("sd\"a\\\x01\xc3\xa9", s, kSec),
              "{\"t\":2.000,\"disk\":\"sd\\\"a\\\\\\u0001\xc3\xa9\",\"interval\":1.000,\"iops\":3501.0,"
              "\"read_iops\":3113.0,\"write_iops\":388.0,\"mbps\":38.179,\"lat_ms\":{\"mean\":10.287,"
              "\"p50\":10.191,\"p90\":11.239,\"p99\":12.288,\"p999\":13.402,\"max\":14.052},"
              "\"throttle_ms\":{\"mean\":8.190,\"max\":9.218},\"late_ms\":{\"mean\":0.061,\"max\":0.480},"
              "\"model_lat_ms\":{\"mean\":10.226,\"p50\":10.130,\"p99\":12.001},"
              "\"queue\":{\"now\":28,\"avg\":28.66,\"max\":33},"
              "\"in_service\":8,\"credits\":{\"iops\":5390999,\"iops_pct\":99.83,\"mb\":126000.0,"
              "\"mb_pct\":100.00},\"vm_credits\":null,\"total\":{\"ios\":10495,\"bytes\":114196480,"
              "\"errors\":3,\"cancelled\":2},\"scale\":2.500}");
}

// Counts print exactly and a figure that is not a number prints null: the line stays JSON.
TEST(PerfTimeline, LineStaysJson) {
    Stats s;
    s.ios = (uint64_t(1) << 53) + 1;
    s.last.queue_avg = std::numeric_limits<double>::quiet_NaN();
    s.credits = {true, std::numeric_limits<double>::infinity(), 0, 0, 0};
    const std::string line = TimelineWriter::format("d", s);
    EXPECT_NE(line.find("\"ios\":9007199254740993,"), std::string::npos) << line;
    EXPECT_NE(line.find("\"avg\":null,"), std::string::npos) << line;
    EXPECT_NE(line.find("\"credits\":{\"iops\":null,\"iops_pct\":0.00,"), std::string::npos) << line;
}

TEST(PerfHistogram, Percentiles) {
    Histogram h;
    EXPECT_EQ(h.percentile(50), 0);
    for (Nanos v = 1; v <= 100000; v++) h.add(v * 1000);
    EXPECT_NEAR(double(h.percentile(50)), 50e6, 50e6 * 0.004);
    EXPECT_NEAR(double(h.percentile(99)), 99e6, 99e6 * 0.004);
    EXPECT_NEAR(double(h.percentile(99.9)), 99.9e6, 99.9e6 * 0.004);
    EXPECT_EQ(h.percentile(100), 100000 * 1000);
    EXPECT_EQ(h.percentile(0), 1000);
    const LatencySummary s = h.summary();
    EXPECT_EQ(s.count, 100000u);
    EXPECT_NEAR(s.mean, 50000.5e3, 1);
    EXPECT_EQ(s.p50, h.percentile(50));
    EXPECT_EQ(s.p999, h.percentile(99.9));
    Histogram small;
    for (Nanos v = 0; v < 256; v++) small.add(v);
    EXPECT_EQ(small.percentile(50), 127);  // exact below 256 ns
    h.merge(small);
    EXPECT_EQ(h.count(), 100256u);
    h.clear();
    EXPECT_EQ(h.count(), 0u);
    h.add(-5);  // clamps
    h.add(Nanos(1) << 50);
    EXPECT_EQ(h.percentile(0), 0);
    EXPECT_EQ(h.percentile(100), (Nanos(1) << 42) - 1);
}

} // namespace
} // namespace hvstor::perf
