// Property strings, presets, the time scale, and the key table behind them.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "hvstor/perf/config.h"
#include "keys.h"

namespace hvstor::perf {
namespace {

ModelConfig parse_ok(const std::string& s) {
    ModelConfig c;
    std::string err;
    EXPECT_TRUE(parse_model_config(s, c, err)) << s << ": " << err;
    return c;
}

std::string parse_err(const std::string& s) {
    ModelConfig c;
    std::string err;
    EXPECT_FALSE(parse_model_config(s, c, err)) << s;
    EXPECT_FALSE(err.empty());
    return err;
}

TEST(PerfConfig, EmptyIsUncappedAndInstant) {
    const ModelConfig c = parse_ok("");
    EXPECT_EQ(c.caps.iops, 0);
    EXPECT_EQ(c.caps.bytes_per_s, 0);
    EXPECT_EQ(c.caps.burst, BurstMode::Off);
    EXPECT_EQ(c.read_latency.kind, DistKind::Fixed);
    EXPECT_EQ(c.read_latency.a, 0);
    EXPECT_EQ(c.queue, Discipline::Fifo);
    EXPECT_EQ(c.io_unit, 256u * 1024);
}

TEST(PerfConfig, PremiumP10Preset) {
    const ModelConfig c = parse_ok("profile=premium-p10");
    EXPECT_EQ(c.profile, "premium-p10");
    EXPECT_EQ(c.caps.iops, 500);
    EXPECT_EQ(c.caps.bytes_per_s, 100e6);
    EXPECT_EQ(c.caps.burst, BurstMode::Credit);
    EXPECT_EQ(c.caps.burst_iops, 3500);
    EXPECT_EQ(c.caps.burst_bytes_per_s, 170e6);
    EXPECT_EQ(c.caps.burst_duration, 1800 * kSec);
    EXPECT_EQ(c.caps.burst_start, 1.0);
    EXPECT_EQ(c.read_latency.kind, DistKind::LogNormal);
    EXPECT_EQ(c.read_latency.a, 2 * kMs);
}

TEST(PerfConfig, LargePremiumDisksBurstOnlyOnDemandWhenAsked) {
    ModelConfig c = parse_ok("profile=premium-p30");
    EXPECT_EQ(c.caps.iops, 5000);
    EXPECT_EQ(c.caps.burst, BurstMode::Off);
    c = parse_ok("profile=premium-p30,burst=on-demand");
    EXPECT_EQ(c.caps.burst, BurstMode::OnDemand);
    EXPECT_EQ(c.caps.burst_iops, 30000);
    EXPECT_EQ(c.caps.burst_bytes_per_s, 1000e6);
    c = parse_ok("profile=premium-p70");
    EXPECT_EQ(c.caps.iops, 18000);
    EXPECT_EQ(c.caps.bytes_per_s, 750e6);
    EXPECT_EQ(c.read_latency.a, Nanos(3.4 * kMs));
}

TEST(PerfConfig, EveryPresetResolves) {
    for (const auto& n : model_profile_names()) {
        const ModelConfig c = parse_ok("profile=" + n);
        EXPECT_GT(c.caps.iops, 0) << n;
        EXPECT_GT(c.read_latency.a, 0) << n;
    }
    EXPECT_GE(model_profile_names().size(), 14u + 14u + 3u);
    for (const auto& n : vm_profile_names()) {
        VmConfig v;
        std::string err;
        EXPECT_TRUE(parse_vm_config("profile=" + n, v, err)) << err;
        EXPECT_EQ(v.caps.burst, BurstMode::Credit);
    }
}

TEST(PerfConfig, OtherFamilies) {
    ModelConfig c = parse_ok("profile=standard-e30");
    EXPECT_EQ(c.caps.iops, 500);
    EXPECT_EQ(c.caps.bytes_per_s, 60e6);
    c = parse_ok("profile=standard-e80");
    EXPECT_EQ(c.caps.iops, 6000);
    c = parse_ok("profile=premium-v2");
    EXPECT_EQ(c.caps.iops, 3000);
    EXPECT_EQ(c.caps.bytes_per_s, 125e6);
    EXPECT_LT(c.read_latency.a, kMs);
    c = parse_ok("profile=ultra,mbps=4000");
    EXPECT_EQ(c.caps.iops, 400000);
    EXPECT_EQ(c.caps.bytes_per_s, 4000e6);
}

TEST(PerfConfig, VmPresetsAndSpelling) {
    VmConfig v;
    std::string err;
    ASSERT_TRUE(parse_vm_config("profile=Standard_F32s_v2", v, err)) << err;
    EXPECT_EQ(v.profile, "standard-f32s-v2");
    EXPECT_EQ(v.caps.iops, 51200);
    EXPECT_EQ(v.caps.bytes_per_s, 750e6);
    EXPECT_EQ(v.caps.burst_iops, 64000);
    EXPECT_EQ(v.caps.burst_bytes_per_s, 1600e6);
    ASSERT_TRUE(parse_vm_config("profile=standard-d16s-v3,burst=off", v, err)) << err;
    EXPECT_EQ(v.caps.iops, 25600);
    EXPECT_EQ(v.caps.bytes_per_s, 384e6);
    EXPECT_EQ(v.caps.burst, BurstMode::Off);
    ASSERT_TRUE(parse_vm_config("profile=STANDARD-D16S-V5", v, err)) << err;
    EXPECT_EQ(v.caps.bytes_per_s, 600e6);
    EXPECT_EQ(v.caps.burst_bytes_per_s, 1200e6);
}

TEST(PerfConfig, OverridesFromTheBrief) {
    const ModelConfig c =
        parse_ok("profile=premium-p10,iops=800,burst=off,latency.read=lognormal:1.8ms:6ms,queue=per-direction");
    EXPECT_EQ(c.caps.iops, 800);
    EXPECT_EQ(c.caps.bytes_per_s, 100e6);
    EXPECT_EQ(c.caps.burst, BurstMode::Off);
    EXPECT_EQ(c.read_latency.kind, DistKind::LogNormal);
    EXPECT_EQ(c.read_latency.a, 1'800'000);
    EXPECT_EQ(c.read_latency.b, 6 * kMs);
    EXPECT_EQ(c.write_latency.a, 2 * kMs);  // untouched
    EXPECT_EQ(c.queue, Discipline::PerDirection);
}

TEST(PerfConfig, ProfileAppliesFirstWhereverItIs) {
    const ModelConfig c = parse_ok("iops=800,profile=premium-p10");
    EXPECT_EQ(c.caps.iops, 800);
    EXPECT_EQ(c.profile, "premium-p10");
}

TEST(PerfConfig, EveryKey) {
    const ModelConfig c = parse_ok(
        "name=d0,iops=100,mbps=50,burst=credit,burst.iops=1000,burst.bps=80000000,burst.duration=10min,"
        "burst.start=0.25,window=5ms,io-unit=16K,read.iops=60,read.mbps=20,write.iops=40,write.mbps=30,"
        "latency=uniform:1ms:3ms,latency.flush=500us,latency.per-kib=2us,spike.prob=0.001,"
        "spike.latency=100ms,queue=round-robin,max-outstanding=16,seed=7,stats.interval=250ms,"
        "timeline=/tmp/a,,b.jsonl");
    EXPECT_EQ(c.name, "d0");
    EXPECT_EQ(c.caps.iops, 100);
    EXPECT_EQ(c.caps.bytes_per_s, 50e6);
    EXPECT_EQ(c.caps.burst, BurstMode::Credit);
    EXPECT_EQ(c.caps.burst_iops, 1000);
    EXPECT_EQ(c.caps.burst_bytes_per_s, 80e6);
    EXPECT_EQ(c.caps.burst_duration, 600 * kSec);
    EXPECT_EQ(c.caps.burst_start, 0.25);
    EXPECT_EQ(c.caps.window, 5 * kMs);
    EXPECT_EQ(c.io_unit, 16u * 1024);
    EXPECT_EQ(c.read_iops, 60);
    EXPECT_EQ(c.read_bytes_per_s, 20e6);
    EXPECT_EQ(c.write_iops, 40);
    EXPECT_EQ(c.write_bytes_per_s, 30e6);
    EXPECT_EQ(c.read_latency.kind, DistKind::Uniform);
    EXPECT_EQ(c.write_latency.b, 3 * kMs);
    EXPECT_EQ(c.flush_latency.kind, DistKind::Fixed);
    EXPECT_EQ(c.flush_latency.a, 500 * kUs);
    EXPECT_EQ(c.ns_per_kib, 2000);
    EXPECT_EQ(c.spike_prob, 0.001);
    EXPECT_EQ(c.spike_latency, 100 * kMs);
    EXPECT_EQ(c.queue, Discipline::RoundRobin);
    EXPECT_EQ(c.max_outstanding, 16u);
    EXPECT_EQ(c.seed, 7u);
    EXPECT_EQ(c.stats_interval, 250 * kMs);
    EXPECT_EQ(c.timeline, "/tmp/a,b.jsonl");
}

TEST(PerfConfig, Errors) {
    EXPECT_NE(parse_err("profile=premium-p11").find("unknown profile"), std::string::npos);
    EXPECT_NE(parse_err("profile=premium-p11").find("premium-p10"), std::string::npos);  // lists names
    EXPECT_NE(parse_err("iops=fast").find("iops=fast"), std::string::npos);
    EXPECT_NE(parse_err("iops=-5").find("iops"), std::string::npos);
    EXPECT_NE(parse_err("colour=blue").find("unknown key 'colour'"), std::string::npos);
    EXPECT_NE(parse_err("iops").find("not key=value"), std::string::npos);
    EXPECT_NE(parse_err("=5").find("not key=value"), std::string::npos);
    EXPECT_NE(parse_err("latency.read=lognormal:6ms:1ms").find("p50 <= p99"), std::string::npos);
    EXPECT_NE(parse_err("latency.read=uniform:3ms:1ms").find("below the minimum"), std::string::npos);
    EXPECT_NE(parse_err("latency.read=2").find("expected DURATION"), std::string::npos);
    EXPECT_NE(parse_err("latency.read=normal:1ms:2ms").find("lognormal"), std::string::npos);
    EXPECT_NE(parse_err("burst=maybe").find("off, credit or on-demand"), std::string::npos);
    EXPECT_NE(parse_err("burst.start=2").find("fraction"), std::string::npos);
    EXPECT_NE(parse_err("iops=500,burst=credit,burst.iops=100").find("below iops"), std::string::npos);
    EXPECT_NE(parse_err("iops=500,burst=credit").find("no burst rate"), std::string::npos);
    EXPECT_NE(parse_err("time-scale=0").find("time-scale"), std::string::npos);
    EXPECT_NE(parse_err("queue=lifo").find("round-robin"), std::string::npos);
    EXPECT_NE(parse_err("io-unit=100").find("io-unit"), std::string::npos);
    EXPECT_NE(parse_err("stats.interval=10us").find("1ms"), std::string::npos);
    EXPECT_NE(parse_err("max-outstanding=1.5").find("whole number"), std::string::npos);
    EXPECT_NE(parse_err("spike.prob=1.5").find("probability"), std::string::npos);
    EXPECT_NE(parse_err("burst.duration=0").find("positive"), std::string::npos);
    VmConfig v;
    std::string err;
    EXPECT_FALSE(parse_vm_config("profile=Standard_Z99", v, err));
    EXPECT_NE(err.find("unknown VM profile"), std::string::npos);
    EXPECT_FALSE(parse_vm_config("queue=fifo", v, err));
    EXPECT_NE(err.find("unknown VM key 'queue'"), std::string::npos);
}

TEST(PerfConfig, TimeScaleDividesRatesAndStretchesTimes) {
    const ModelConfig c = parse_ok("profile=premium-p10,time-scale=10,latency.per-kib=1us,spike.latency=5ms,"
                                   "read.iops=100");
    EXPECT_DOUBLE_EQ(c.caps.iops, 50);
    EXPECT_DOUBLE_EQ(c.caps.bytes_per_s, 10e6);
    EXPECT_DOUBLE_EQ(c.caps.burst_iops, 350);
    EXPECT_DOUBLE_EQ(c.caps.burst_bytes_per_s, 17e6);
    EXPECT_EQ(c.caps.burst_duration, 18000 * kSec);
    EXPECT_EQ(c.caps.window, 10 * kMs);
    EXPECT_DOUBLE_EQ(c.read_iops, 10);
    EXPECT_EQ(c.read_latency.a, 20 * kMs);
    EXPECT_EQ(c.read_latency.b, 40 * kMs);
    EXPECT_EQ(c.flush_latency.a, 20 * kMs);
    EXPECT_EQ(c.ns_per_kib, 10000);
    EXPECT_EQ(c.spike_latency, 50 * kMs);
    EXPECT_EQ(c.stats_interval, kSec);  // observation, not the disk
    EXPECT_EQ(c.time_scale, 10);
    EXPECT_EQ(c.io_unit, 256u * 1024);  // sizes do not scale
    VmConfig v;
    std::string err;
    ASSERT_TRUE(parse_vm_config("profile=standard-d16s-v3,time-scale=4", v, err)) << err;
    EXPECT_DOUBLE_EQ(v.caps.iops, 6400);
    EXPECT_EQ(v.caps.burst_duration, 7200 * kSec);
}

TEST(PerfConfig, Summaries) {
    EXPECT_EQ(format_duration(1'800'000), "1.8ms");
    EXPECT_EQ(format_duration(1800 * kSec), "30min");
    EXPECT_EQ(format_duration(250), "250ns");
    const std::string s = summarize(parse_ok("profile=premium-p10"));
    EXPECT_NE(s.find("premium-p10"), std::string::npos);
    EXPECT_NE(s.find("500 IOPS"), std::string::npos);
    EXPECT_NE(s.find("credit burst 3500 IOPS/170 MB/s for 30min"), std::string::npos);
}

TEST(PerfConfig, UnknownKeysListTheKnownOnes) {
    const std::string err = parse_err("colour=blue");
    for (const detail::Key& k : detail::keys()) EXPECT_NE(err.find(std::string(k.name)), std::string::npos) << k.name;
    EXPECT_NE(err.find("known: profile, name, iops, mbps, bps, burst, "), std::string::npos) << err;
    VmConfig v;
    std::string verr;
    EXPECT_FALSE(parse_vm_config("latency=1ms", v, verr));
    EXPECT_EQ(verr, "perf: unknown VM key 'latency' (known: profile, iops, mbps, bps, burst, burst.iops, burst.mbps, "
                    "burst.bps, burst.duration, burst.start, window, time-scale)");
}

// Each key's documented default is what an empty string gives.
TEST(PerfConfig, EveryDefaultIsTheDefault) {
    for (const detail::Key& k : detail::keys()) {
        if (k.def.empty()) continue;
        const std::string s = std::string(k.name) + "=" + std::string(k.def);
        EXPECT_TRUE(parse_ok(s) == ModelConfig{}) << s;
        if (!k.vm) continue;
        VmConfig v;
        std::string err;
        EXPECT_TRUE(parse_vm_config(s, v, err)) << s << ": " << err;
        EXPECT_TRUE(v == VmConfig{}) << s;
    }
}

// docs/perf-model.md holds the settings table exactly as the key table renders it.
TEST(PerfConfig, TheDocumentHoldsTheSettingsTable) {
    std::ifstream in(HVSTOR_PERF_DOC);
    ASSERT_TRUE(in) << HVSTOR_PERF_DOC;
    std::stringstream doc;
    doc << in.rdbuf();
    const std::string table = detail::settings_table();
    EXPECT_NE(doc.str().find(table), std::string::npos) << HVSTOR_PERF_DOC << " should hold, verbatim:\n" << table;
}

} // namespace
} // namespace hvstor::perf
