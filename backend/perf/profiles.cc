// Presets from the published Azure figures (docs/perf-model.md lists them with their sources
// and the assumptions made where nothing is published, such as latency tails).
#include <algorithm>
#include <cctype>
#include <iterator>

#include "hvstor/perf/config.h"

namespace hvstor::perf {
namespace {

constexpr double kMB = 1e6;

struct DiskPreset {
    const char* name;
    double iops, mbps;
    BurstMode burst;         // the mode the disk comes with
    double burst_iops, burst_mbps;  // what burst=credit / on-demand use
    double p50_ms, p99_ms;   // read and write service latency, lognormal
};

// Premium SSD v1: credit bursting up to P20; P30 and above offer on-demand bursting, off
// unless enabled. Latency medians: the Kubernetes Azure disk driver's estimates by size; the
// 99th percentile at twice the median is our assumption.
constexpr DiskPreset kDisks[] = {
    {"premium-p1", 120, 25, BurstMode::Credit, 3500, 170, 2.0, 4.0},
    {"premium-p2", 120, 25, BurstMode::Credit, 3500, 170, 2.0, 4.0},
    {"premium-p3", 120, 25, BurstMode::Credit, 3500, 170, 2.0, 4.0},
    {"premium-p4", 120, 25, BurstMode::Credit, 3500, 170, 2.0, 4.0},
    {"premium-p6", 240, 50, BurstMode::Credit, 3500, 170, 2.0, 4.0},
    {"premium-p10", 500, 100, BurstMode::Credit, 3500, 170, 2.0, 4.0},
    {"premium-p15", 1100, 125, BurstMode::Credit, 3500, 170, 2.0, 4.0},
    {"premium-p20", 2300, 150, BurstMode::Credit, 3500, 170, 2.0, 4.0},
    {"premium-p30", 5000, 200, BurstMode::Off, 30000, 1000, 2.0, 4.0},
    {"premium-p40", 7500, 250, BurstMode::Off, 30000, 1000, 2.0, 4.0},
    {"premium-p50", 7500, 250, BurstMode::Off, 30000, 1000, 2.0, 4.0},
    {"premium-p60", 16000, 500, BurstMode::Off, 30000, 1000, 2.8, 5.6},
    {"premium-p70", 18000, 750, BurstMode::Off, 30000, 1000, 3.4, 6.8},
    {"premium-p80", 20000, 900, BurstMode::Off, 30000, 1000, 3.4, 6.8},
    // Standard SSD: published caps; latencies are assumptions (no figures published here).
    {"standard-e1", 500, 60, BurstMode::Off, 0, 0, 4.0, 10.0},
    {"standard-e2", 500, 60, BurstMode::Off, 0, 0, 4.0, 10.0},
    {"standard-e3", 500, 60, BurstMode::Off, 0, 0, 4.0, 10.0},
    {"standard-e4", 500, 60, BurstMode::Off, 0, 0, 4.0, 10.0},
    {"standard-e6", 500, 60, BurstMode::Off, 0, 0, 4.0, 10.0},
    {"standard-e10", 500, 60, BurstMode::Off, 0, 0, 4.0, 10.0},
    {"standard-e15", 500, 60, BurstMode::Off, 0, 0, 4.0, 10.0},
    {"standard-e20", 500, 60, BurstMode::Off, 0, 0, 4.0, 10.0},
    {"standard-e30", 500, 60, BurstMode::Off, 0, 0, 4.0, 10.0},
    {"standard-e40", 500, 60, BurstMode::Off, 0, 0, 4.0, 10.0},
    {"standard-e50", 500, 60, BurstMode::Off, 0, 0, 4.0, 10.0},
    {"standard-e60", 2000, 400, BurstMode::Off, 0, 0, 4.0, 10.0},
    {"standard-e70", 4000, 600, BurstMode::Off, 0, 0, 4.0, 10.0},
    {"standard-e80", 6000, 750, BurstMode::Off, 0, 0, 4.0, 10.0},
    // Premium SSD v2 and Ultra: provisioned, no bursting; "sub-millisecond" latency, the
    // exact figures are assumptions. Ultra's bandwidth is left uncapped: set mbps.
    {"premium-v2", 3000, 125, BurstMode::Off, 0, 0, 0.6, 1.5},
    {"premium-v2-max", 80000, 1200, BurstMode::Off, 0, 0, 0.6, 1.5},
    {"ultra", 400000, 0, BurstMode::Off, 0, 0, 0.3, 0.8},
};

struct VmPreset {
    const char* name;
    double iops, mbps, burst_iops, burst_mbps;
};

// Uncached disk caps. VM-level bursting is credit based, like the small disks.
constexpr VmPreset kVms[] = {
    {"standard-f32s-v2", 51200, 750, 64000, 1600},
    {"standard-d16s-v3", 25600, 384, 32000, 800},
    {"standard-d16s-v5", 25600, 600, 40000, 1200},
};

std::string normalize(std::string_view name) {
    std::string s(name);
    for (char& c : s) c = c == '_' ? '-' : char(std::tolower(static_cast<unsigned char>(c)));
    return s;
}

Distribution lognormal_ms(double p50, double p99) {
    return {DistKind::LogNormal, Nanos(p50 * 1e6), Nanos(p99 * 1e6)};
}

} // namespace

bool model_profile(std::string_view name, ModelConfig& out) {
    const std::string n = normalize(name);
    const auto it = std::find_if(std::begin(kDisks), std::end(kDisks), [&](const DiskPreset& p) { return n == p.name; });
    if (it == std::end(kDisks)) return false;
    ModelConfig c;
    c.profile = it->name;
    c.caps.iops = it->iops;
    c.caps.bytes_per_s = it->mbps * kMB;
    c.caps.burst = it->burst;
    c.caps.burst_iops = it->burst_iops;
    c.caps.burst_bytes_per_s = it->burst_mbps * kMB;
    c.read_latency = c.write_latency = lognormal_ms(it->p50_ms, it->p99_ms);
    // Nothing published for flushes: treated like writes.
    c.flush_latency = c.write_latency;
    out = c;
    return true;
}

bool vm_profile(std::string_view name, VmConfig& out) {
    const std::string n = normalize(name);
    const auto it = std::find_if(std::begin(kVms), std::end(kVms), [&](const VmPreset& p) { return n == p.name; });
    if (it == std::end(kVms)) return false;
    VmConfig c;
    c.profile = it->name;
    c.caps.iops = it->iops;
    c.caps.bytes_per_s = it->mbps * kMB;
    c.caps.burst = BurstMode::Credit;
    c.caps.burst_iops = it->burst_iops;
    c.caps.burst_bytes_per_s = it->burst_mbps * kMB;
    out = c;
    return true;
}

std::vector<std::string> model_profile_names() {
    std::vector<std::string> v;
    for (const auto& p : kDisks) v.emplace_back(p.name);
    return v;
}

std::vector<std::string> vm_profile_names() {
    std::vector<std::string> v;
    for (const auto& p : kVms) v.emplace_back(p.name);
    return v;
}

} // namespace hvstor::perf
