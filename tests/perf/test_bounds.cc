// Settings at and beyond the ends of their ranges: every value out of range is refused with
// its key, its value and the range.
#include <gtest/gtest.h>

#include <sys/uio.h>

#include "keys.h"
#include "load.h"
#include "values.h"

namespace hvstor::perf {
namespace {

std::string parse_err(const std::string& s) {
    ModelConfig c;
    std::string err;
    EXPECT_FALSE(parse_model_config(s, c, err)) << s;
    return err;
}

TEST(PerfBounds, OutOfRangeValuesNameKeyValueAndRange) {
    struct Case {
        const char* setting;
        const char* range;
    };
    for (const Case& c : {
             Case{"iops=1e300", "0.001 to 1e9 (0: no cap)"},
             Case{"mbps=1e303", "0.001 to 1e9 (0: no cap)"},  // was accepted as an infinite rate
             Case{"bps=1e16", "1000 to 1e15 (0: no cap)"},
             Case{"burst.iops=2e9", "0.001 to 1e9 (0: no cap)"},
             Case{"read.mbps=1e10", "0.001 to 1e9 (0: no cap)"},
             Case{"burst.duration=2000000h", "1ns to 100h"},
             Case{"window=2000000h", "0 to 1h"},
             Case{"io-unit=2G", "512 to 1G"},
             Case{"latency=2h", "0 to 1h"},
             Case{"latency.read=uniform:0:2000000h", "0 to 1h"},
             Case{"latency.flush=lognormal:1ms:2h", "0 to 1h"},
             Case{"latency.per-kib=2000000h", "0 to 1s"},
             Case{"spike.latency=2000000h", "0 to 1h"},
             Case{"stats.interval=2000000h", "1ms to 1h"},
             Case{"timer.min-period=2s", "0 to 1s"},
             Case{"max-outstanding=4294967296", "0 to 4294967295"},
             Case{"time-scale=1e10", "0.001 to 1000"},
             Case{"time-scale=1e-300", "0.001 to 1000"},
         }) {
        const std::string err = parse_err(c.setting);
        EXPECT_NE(err.find(c.setting), std::string::npos) << err;
        EXPECT_NE(err.find(c.range), std::string::npos) << c.setting << ": " << err;
    }
    VmConfig v;
    std::string err;
    EXPECT_FALSE(parse_vm_config("bps=1e300", v, err));
    EXPECT_NE(err.find("bps=1e300"), std::string::npos) << err;
    EXPECT_NE(err.find("1000 to 1e15 (0: no cap)"), std::string::npos) << err;
}

// A value just past either end of each key's range, as written; "" when there is none.
std::string past(const detail::Key& k, bool top) {
    using detail::Kind;
    const double end = top ? k.max : k.min;
    switch (k.kind) {
    case Kind::Rate:  // 0 is in range too (no cap): below it, and between it and the minimum
        return top ? detail::format_number(end * 10) : detail::format_number(end / 2);
    case Kind::Probability:
    case Kind::Level:
    case Kind::Scale:
        return top ? detail::format_number(end * 2) : end > 0 ? detail::format_number(end / 2) : "-1";
    case Kind::Duration:
    case Kind::Distribution:
        return top ? format_duration(Nanos(end * 2)) : end > 0 ? format_duration(Nanos(end / 2)) : "";
    case Kind::Size:
        return std::to_string(top ? uint64_t(end) * 2 : uint64_t(end) / 2);
    case Kind::Whole:
        return top && end < 0x1p64 ? std::to_string(uint64_t(end) + 1) : "";
    case Kind::Profile:
    case Kind::Text:
    case Kind::Choice:
        break;
    }
    return "";
}

TEST(PerfBounds, EveryKeyRefusesValuesPastItsRange) {
    int checked = 0;
    for (const detail::Key& k : detail::keys()) {
        for (bool top : {false, true}) {
            const std::string v = past(k, top);
            if (v.empty()) continue;
            const std::string s = std::string(k.name) + "=" + v;
            const std::string err = parse_err(s);
            EXPECT_NE(err.find(s), std::string::npos) << err;
            EXPECT_NE(err.find(detail::expected(k)), std::string::npos) << err;
            if (k.vm) {
                VmConfig c;
                std::string verr;
                EXPECT_FALSE(parse_vm_config(s, c, verr)) << s;
                EXPECT_EQ(verr, err);
            }
            checked++;
        }
    }
    EXPECT_GE(checked, 30);
}

// The largest values in range still parse.
TEST(PerfBounds, TheBoundsThemselvesAreValid) {
    ModelConfig c;
    std::string err;
    EXPECT_TRUE(parse_model_config("iops=1e9,mbps=1e9,burst=credit,burst.iops=1e9,burst.bps=1e15,"
                                   "burst.duration=100h,window=1h,io-unit=1G,latency=uniform:0:1h,"
                                   "latency.per-kib=1s,spike.prob=1,spike.latency=1h,stats.interval=1h,"
                                   "timer.min-period=1s,max-outstanding=4294967295,seed=18446744073709551615,"
                                   "time-scale=1000",
                                   c, err))
        << err;
    EXPECT_EQ(c.read_latency.b, 1000 * 3600 * kSec);
    EXPECT_TRUE(parse_model_config("time-scale=0.001,stats.interval=1ms", c, err)) << err;
    EXPECT_TRUE(parse_model_config("iops=0.001,mbps=0.001,bps=1000,read.iops=0,write.mbps=0", c, err)) << err;
    EXPECT_TRUE(parse_model_config("iops=0", c, err)) << err;
    EXPECT_FALSE(parse_model_config("iops=-1", c, err));
}

// Found by the perf_config fuzzer: "iops=.000...0175" (1.75e-61 IO/s) was accepted, and each
// request's completion lay past what Nanos holds, so none ever completed and drain() waited
// forever. Rates below the minimum are refused; at the slowest rates and the largest time
// scale a request still completes on the virtual clock.
TEST(PerfBounds, TheSlowestRatesStillComplete) {
    EXPECT_NE(parse_err("iops=.0000000000000000000000000000000000000000000000000000000000000175")
                  .find("0.001 to 1e9 (0: no cap)"),
              std::string::npos);
    for (const char* slowest : {"iops=0.001,time-scale=1000", "mbps=0.001,time-scale=1000",
                                "bps=1000,burst=credit,burst.bps=1000,time-scale=1000"}) {
        ModelConfig cfg;
        std::string err;
        ASSERT_TRUE(parse_model_config(slowest, cfg, err)) << err;
        VirtualClock clock;
        auto m = make_model(backend::make_null(uint64_t(1) << 30, err), cfg, &clock, nullptr, err);
        ASSERT_TRUE(m) << err;
        static uint8_t buf[1 << 20];
        iovec iov{buf, sizeof buf};
        struct Count : backend::CompletionSink {
            void complete(backend::Request*) override { n++; }
            int n = 0;
        } done;
        backend::Request reqs[2];
        for (int i = 0; i < 2; i++) {
            reqs[i].op = backend::Op::Write;
            reqs[i].offset = uint64_t(i) << 20;
            reqs[i].length = sizeof buf;
            reqs[i].iov = &iov;
            reqs[i].iovcnt = 1;
            reqs[i].done = &done;
            backend::Request* p = &reqs[i];
            m->submit(std::span<backend::Request* const>(&p, 1));
        }
        m->drain();  // moves the virtual clock on: returns once both have completed
        EXPECT_EQ(done.n, 2) << slowest;
    }
}

// Before: accepted, and the interval arithmetic overflowed once the clock reached its end.
TEST(PerfBounds, HugeStatsIntervalIsRefused) {
    ModelConfig cfg;
    cfg.stats_interval = Nanos(2'000'000) * 3600 * kSec;
    VirtualClock clock;
    std::string err;
    EXPECT_FALSE(make_model(backend::make_null(uint64_t(1) << 30, err), cfg, &clock, nullptr, err));
    EXPECT_NE(err.find("stats.interval"), std::string::npos) << err;
    EXPECT_NE(err.find("1ms to 1h"), std::string::npos) << err;
}

} // namespace
} // namespace hvstor::perf
