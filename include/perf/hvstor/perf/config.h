// Settings of the Azure-like disk performance model, and the "key=value,key=value" text that
// carries them through a QEMU property. Figures and the names of presets: docs/perf-model.md.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "hvstor/perf/clock.h"

namespace hvstor::perf {

enum class BurstMode : uint8_t {
    Off,       // the base rate is the cap
    Credit,    // up to the burst rate while credits last; idle time below base earns credits
    OnDemand,  // up to the burst rate, no credit limit
};

enum class Discipline : uint8_t {
    Fifo,          // one queue: an IO waits behind everything that arrived before it
    PerDirection,  // reads and writes queue apart and take turns at the shared caps
    RoundRobin,    // one queue per channel, served in turn
};

enum class DistKind : uint8_t { Fixed, Uniform, LogNormal };

// Fixed: a. Uniform: between a and b. LogNormal: median a, 99th percentile b.
struct Distribution {
    DistKind kind = DistKind::Fixed;
    Nanos a = 0;
    Nanos b = 0;
    bool operator==(const Distribution&) const = default;
};

// One set of caps: a disk's or a VM's. A rate of 0 leaves that dimension uncapped.
struct Caps {
    double iops = 0;
    double bytes_per_s = 0;
    BurstMode burst = BurstMode::Off;
    double burst_iops = 0;
    double burst_bytes_per_s = 0;
    // Credit: a full bucket lasts this long at the burst rate (it holds (burst - base) x this).
    Nanos burst_duration = 1800 * kSec;
    double burst_start = 1.0;  // Credit: how full the buckets start, 0 to 1
    // Depth of the buckets as time at their rate (at least two accounting units): the most an
    // idle disk lets through at once before pacing starts.
    Nanos window = 1 * kMs;
    bool operator==(const Caps&) const = default;
};

struct ModelConfig {
    std::string profile;  // the preset the settings started from, "" when none
    std::string name;     // for statistics and the timeline; "" lets the owner pick
    Caps caps;
    // An IO counts ceil(length / io_unit) IOs against IOPS caps (at least 1).
    uint64_t io_unit = 256 * 1024;
    // Extra caps per direction (no bursting), on top of `caps`. Flushes, discards and
    // write-zeroes travel with writes.
    double read_iops = 0, read_bytes_per_s = 0;
    double write_iops = 0, write_bytes_per_s = 0;

    // Service latency from issue to completion: the distribution of the operation, plus
    // ns_per_kib x the data length in KiB (reads and writes), plus spike_latency with
    // probability spike_prob. Discards and write-zeroes use the write distribution. The sum
    // saturates at 146 years, a latency that never ends.
    Distribution read_latency, write_latency, flush_latency;
    double ns_per_kib = 0;
    double spike_prob = 0;
    Nanos spike_latency = 0;

    Discipline queue = Discipline::Fifo;
    uint32_t max_outstanding = 0;  // IOs in service at once, 0: no limit
    uint64_t seed = 1;

    // With the host clock the model owns: the shortest time between two wake-ups of its timer
    // thread. Caps still hold exactly (admissions are timed in model time); completions may
    // be late by up to this much. Not time-scaled.
    Nanos timer_min_period = 50 * kUs;

    Nanos stats_interval = 1 * kSec;
    std::string timeline;  // JSON-lines file the model appends one object per interval to

    // Already applied to every rate and duration above; kept to report results scaled back.
    double time_scale = 1;
    bool operator==(const ModelConfig&) const = default;
};

struct VmConfig {
    std::string profile;
    Caps caps;
    double time_scale = 1;
    bool operator==(const VmConfig&) const = default;
};

// Parse "profile=premium-p10,iops=800,latency.read=lognormal:1.8ms:6ms,...". The profile is
// applied first wherever it appears, then every other key in order (a repeated key: the last
// wins), then time-scale. A value containing a comma writes it as ",,". Each key's range and
// default: docs/perf-model.md. On error: false and a message naming the key, the value and
// what was expected; `out` is then unchanged. Never throws except std::bad_alloc.
bool parse_model_config(std::string_view text, ModelConfig& out, std::string& err);
bool parse_vm_config(std::string_view text, VmConfig& out, std::string& err);

// Presets by name: "premium-p10", "standard-e30", "premium-v2", "ultra" for disks;
// "standard-f32s-v2" (or "Standard_F32s_v2") for VMs. Case and '_' versus '-' do not matter.
bool model_profile(std::string_view name, ModelConfig& out);
bool vm_profile(std::string_view name, VmConfig& out);
std::vector<std::string> model_profile_names();
std::vector<std::string> vm_profile_names();

// Divides every rate and multiplies every duration by `factor` (> 0): outstanding IO counts
// stay the same (Little's law), the experiment runs `factor` times slower. Durations
// saturate at 146 years.
void apply_time_scale(ModelConfig& cfg, double factor);
void apply_time_scale(VmConfig& cfg, double factor);

// The settings keys (a disk's, or the VM-level subset), in the documented order, with what
// each means and what it takes: what an object form of the settings offers.
struct SettingKey {
    std::string_view name;
    std::string meaning;  // "base IOPS cap: a rate from 1 to ... (default 0)"
};
std::vector<SettingKey> setting_keys(bool vm);

// Short human-readable forms, for describe() and logs.
std::string summarize(const ModelConfig& cfg);
std::string summarize(const VmConfig& cfg);
std::string format_duration(Nanos ns);

} // namespace hvstor::perf
