#include "keys.h"

#include "../validate.h"
#include "values.h"

namespace hvstor::perf::detail {
namespace {

constexpr double kMB = 1e6;
constexpr double kNs = 1, kMsD = 1e6, kSecD = 1e9, kHourD = 3600e9;  // as doubles, for ranges

// The ranges. Rates: beyond any disk or VM, and far from infinity once scaled. Durations: an
// hour of latency and 100 hours of credit, which the largest time scale (1000) keeps well
// inside Nanos; the model saturates what their products with IO sizes could still reach.
constexpr double kMaxIops = 1e9, kMaxMbps = 1e9, kMaxBps = 1e15;
// The slowest caps other than 0 (none): at the largest time scale one 8 MiB IO still takes
// well under a year of model time. Slower rates would put completions past what Nanos
// holds, and the requests would never complete.
constexpr double kMinIops = 0.001, kMinMbps = 0.001, kMinBps = 1000;
constexpr double kMaxLatency = kHourD;

constexpr Key kKeys[] = {
    {.name = "profile", .kind = Kind::Profile, .vm = true,
     .meaning = "a preset (Profiles, above), applied first wherever it appears"},
    {.name = "name", .kind = Kind::Text, .unit = "text",
     .meaning = "label for statistics and the timeline; none: the inner backend's description",
     .apply = [](Target& t, const Value& v) { t.disk->name = v.text; }},
    {.name = "iops", .kind = Kind::Rate, .vm = true, .unit = "IO/s", .min = kMinIops, .max = kMaxIops, .def = "0",
     .meaning = "base IOPS cap", .apply = [](Target& t, const Value& v) { t.caps.iops = v.num; }},
    {.name = "mbps", .kind = Kind::Rate, .vm = true, .unit = "MB/s (10^6 B/s)", .scale = kMB,
     .min = kMinMbps, .max = kMaxMbps, .def = "0", .meaning = "base bandwidth cap",
     .apply = [](Target& t, const Value& v) { t.caps.bytes_per_s = v.num; }},
    {.name = "bps", .kind = Kind::Rate, .vm = true, .unit = "B/s", .min = kMinBps, .max = kMaxBps, .def = "0",
     .meaning = "base bandwidth cap in bytes",
     .apply = [](Target& t, const Value& v) { t.caps.bytes_per_s = v.num; }},
    {.name = "burst", .kind = Kind::Choice, .vm = true, .choices = "off|credit|on-demand", .def = "off",
     .meaning = "bursting: none, on credits earned below base, or unlimited",
     .apply = [](Target& t, const Value& v) { t.caps.burst = BurstMode(v.choice); }},
    {.name = "burst.iops", .kind = Kind::Rate, .vm = true, .unit = "IO/s", .min = kMinIops, .max = kMaxIops, .def = "0",
     .meaning = "IOPS cap while bursting", .apply = [](Target& t, const Value& v) { t.caps.burst_iops = v.num; }},
    {.name = "burst.mbps", .kind = Kind::Rate, .vm = true, .unit = "MB/s (10^6 B/s)", .scale = kMB,
     .min = kMinMbps, .max = kMaxMbps, .def = "0", .meaning = "bandwidth cap while bursting",
     .apply = [](Target& t, const Value& v) { t.caps.burst_bytes_per_s = v.num; }},
    {.name = "burst.bps", .kind = Kind::Rate, .vm = true, .unit = "B/s", .min = kMinBps, .max = kMaxBps, .def = "0",
     .meaning = "bandwidth cap while bursting, in bytes",
     .apply = [](Target& t, const Value& v) { t.caps.burst_bytes_per_s = v.num; }},
    {.name = "burst.duration", .kind = Kind::Duration, .vm = true, .min = kNs, .max = 100 * kHourD,
     .def = "30min", .meaning = "a full credit bank lasts this long at the burst rate",
     .apply = [](Target& t, const Value& v) { t.caps.burst_duration = v.ns; }},
    {.name = "burst.start", .kind = Kind::Level, .vm = true, .max = 1, .def = "full",
     .meaning = "how full the credit banks start",
     .apply = [](Target& t, const Value& v) { t.caps.burst_start = v.num; }},
    {.name = "window", .kind = Kind::Duration, .vm = true, .max = kHourD, .def = "1ms",
     .meaning = "bucket depth, as time at the rate (at least two accounting units)",
     .apply = [](Target& t, const Value& v) { t.caps.window = v.ns; }},
    {.name = "io-unit", .kind = Kind::Size, .min = 512, .max = 1024.0 * 1024 * 1024, .def = "256K",
     .meaning = "an IO counts ceil(length / io-unit) against IOPS caps",
     .apply = [](Target& t, const Value& v) { t.disk->io_unit = v.whole; }},
    {.name = "read.iops", .kind = Kind::Rate, .unit = "IO/s", .min = kMinIops, .max = kMaxIops, .def = "0",
     .meaning = "extra IOPS cap on reads, without bursting",
     .apply = [](Target& t, const Value& v) { t.disk->read_iops = v.num; }},
    {.name = "read.mbps", .kind = Kind::Rate, .unit = "MB/s (10^6 B/s)", .scale = kMB,
     .min = kMinMbps, .max = kMaxMbps, .def = "0", .meaning = "extra bandwidth cap on reads, without bursting",
     .apply = [](Target& t, const Value& v) { t.disk->read_bytes_per_s = v.num; }},
    {.name = "write.iops", .kind = Kind::Rate, .unit = "IO/s", .min = kMinIops, .max = kMaxIops, .def = "0",
     .meaning = "extra IOPS cap on writes, flushes, discards and write-zeroes",
     .apply = [](Target& t, const Value& v) { t.disk->write_iops = v.num; }},
    {.name = "write.mbps", .kind = Kind::Rate, .unit = "MB/s (10^6 B/s)", .scale = kMB,
     .min = kMinMbps, .max = kMaxMbps, .def = "0", .meaning = "extra bandwidth cap on writes",
     .apply = [](Target& t, const Value& v) { t.disk->write_bytes_per_s = v.num; }},
    {.name = "latency", .kind = Kind::Distribution, .max = kMaxLatency, .def = "0",
     .meaning = "sets latency.read, latency.write and latency.flush",
     .apply =
         [](Target& t, const Value& v) {
             t.disk->read_latency = t.disk->write_latency = t.disk->flush_latency = v.dist;
         }},
    {.name = "latency.read", .kind = Kind::Distribution, .max = kMaxLatency, .def = "0",
     .meaning = "service latency of reads",
     .apply = [](Target& t, const Value& v) { t.disk->read_latency = v.dist; }},
    {.name = "latency.write", .kind = Kind::Distribution, .max = kMaxLatency, .def = "0",
     .meaning = "service latency of writes, discards and write-zeroes",
     .apply = [](Target& t, const Value& v) { t.disk->write_latency = v.dist; }},
    {.name = "latency.flush", .kind = Kind::Distribution, .max = kMaxLatency, .def = "0",
     .meaning = "service latency of flushes",
     .apply = [](Target& t, const Value& v) { t.disk->flush_latency = v.dist; }},
    {.name = "latency.per-kib", .kind = Kind::Duration, .max = kSecD, .def = "0",
     .meaning = "added per KiB of data to reads and writes",
     .apply = [](Target& t, const Value& v) { t.disk->ns_per_kib = double(v.ns); }},
    {.name = "spike.prob", .kind = Kind::Probability, .max = 1, .def = "0",
     .meaning = "the chance that an IO gets a spike",
     .apply = [](Target& t, const Value& v) { t.disk->spike_prob = v.num; }},
    {.name = "spike.latency", .kind = Kind::Duration, .max = kMaxLatency, .def = "0",
     .meaning = "added to an IO's latency on a spike",
     .apply = [](Target& t, const Value& v) { t.disk->spike_latency = v.ns; }},
    {.name = "queue", .kind = Kind::Choice, .choices = "fifo|per-direction|round-robin", .def = "fifo",
     .meaning = "the order of the host queue (The host queue, above)",
     .apply = [](Target& t, const Value& v) { t.disk->queue = Discipline(v.choice); }},
    {.name = "max-outstanding", .kind = Kind::Whole, .max = 4294967295.0, .def = "0",
     .meaning = "IOs past the caps and not completed; 0: no limit",
     .apply = [](Target& t, const Value& v) { t.disk->max_outstanding = uint32_t(v.whole); }},
    {.name = "seed", .kind = Kind::Whole, .max = 0x1p64, .def = "1", .meaning = "seed of the latency draws",
     .apply = [](Target& t, const Value& v) { t.disk->seed = v.whole; }},
    {.name = "stats.interval", .kind = Kind::Duration, .min = kMsD, .max = kHourD, .def = "1s",
     .meaning = "statistics interval (not time-scaled)",
     .apply = [](Target& t, const Value& v) { t.disk->stats_interval = v.ns; }},
    {.name = "timeline", .kind = Kind::Text, .unit = "file path",
     .meaning = "JSON-lines file the model writes one object per interval to",
     .apply = [](Target& t, const Value& v) { t.disk->timeline = v.text; }},
    {.name = "timer.min-period", .kind = Kind::Duration, .max = kSecD, .def = "50us",
     .meaning = "host clock: the shortest time between timer wake-ups (not time-scaled)",
     .apply = [](Target& t, const Value& v) { t.disk->timer_min_period = v.ns; }},
    {.name = "time-scale", .kind = Kind::Scale, .vm = true, .min = 0.001, .max = 1000, .def = "1",
     .meaning = "divides every rate and multiplies every duration (Time scale, above)"},
};

// A rate may also be 0: no cap.
bool within(const Key& k, double v) { return (k.kind == Kind::Rate && v == 0) || (v >= k.min && v <= k.max); }

// The words of a Choice key, in order; the index of `word` among them or -1.
int choice_index(const Key& k, std::string_view word) {
    std::string_view rest = k.choices;
    for (int i = 0;; i++) {
        const size_t bar = rest.find('|');
        if (rest.substr(0, bar) == word) return i;
        if (bar == std::string_view::npos) return -1;
        rest.remove_prefix(bar + 1);
    }
}

// "off, credit or on-demand", or with `quote`: "`off`, `credit`, `on-demand`".
std::string choice_list(const Key& k, bool quote) {
    std::string s;
    std::string_view rest = k.choices;
    while (!rest.empty()) {
        const size_t bar = rest.find('|');
        const std::string_view word = rest.substr(0, bar);
        rest = bar == std::string_view::npos ? std::string_view() : rest.substr(bar + 1);
        if (!s.empty()) s += quote || !rest.empty() ? ", " : " or ";
        // Appended piece by piece: GCC 12 at -O3 warns (-Wrestrict, a false positive)
        // about the temporary a "`" + word + "`" expression builds.
        if (quote) s += '`';
        s.append(word.data(), word.size());
        if (quote) s += '`';
    }
    return s;
}

std::string range_text(const Key& k) {
    switch (k.kind) {
    case Kind::Duration:
    case Kind::Distribution:
        return format_duration(Nanos(k.min)) + " to " + format_duration(Nanos(k.max));
    case Kind::Size:
        return backend::detail::size_text(uint64_t(k.min)) + " to " + backend::detail::size_text(uint64_t(k.max));
    case Kind::Whole:
        return format_number(k.min) + " to " + (k.max >= 0x1p64 ? "2^64-1" : format_number(k.max));
    case Kind::Rate:  // or 0 (no cap), which expected() and the docs' default column say
    case Kind::Probability:
    case Kind::Level:
    case Kind::Scale:
        return format_number(k.min) + " to " + format_number(k.max);
    case Kind::Profile:
    case Kind::Text:
    case Kind::Choice:
        break;
    }
    return "";
}

// The value column of the settings table.
std::string value_text(const Key& k) {
    switch (k.kind) {
    case Kind::Profile:
        return "preset name";
    case Kind::Text:
    case Kind::Rate:
        return std::string(k.unit);
    case Kind::Duration:
        return "duration";
    case Kind::Size:
        return "size (`256K`, `16K`, bytes)";
    case Kind::Whole:
        return "whole number";
    case Kind::Probability:
        return "probability";
    case Kind::Level:
        return "`full`, `empty` or a fraction";
    case Kind::Choice:
        return choice_list(k, true);
    case Kind::Distribution:
        return "distribution";
    case Kind::Scale:
        return "number";
    }
    return "";
}

bool parse_in_range(const Key& k, std::string_view text, Value& v) {
    switch (k.kind) {
    case Kind::Profile:
    case Kind::Text:
        v.text = text;
        return true;
    case Kind::Rate:
        if (!parse_number(text, v.num) || !within(k, v.num)) return false;
        v.num *= k.scale;
        return true;
    case Kind::Probability:
    case Kind::Scale:
        return parse_number(text, v.num) && within(k, v.num);
    case Kind::Level:
        if (text == "full" || text == "empty") {
            v.num = text == "full" ? 1 : 0;
            return true;
        }
        return parse_number(text, v.num) && within(k, v.num);
    case Kind::Duration:
        return parse_duration(text, v.ns) && within(k, double(v.ns));
    case Kind::Size:
        return parse_size(text, v.whole) && within(k, double(v.whole));
    case Kind::Whole:
        return parse_whole(text, v.whole) && within(k, double(v.whole));
    case Kind::Choice: {
        const int i = choice_index(k, text);
        v.choice = size_t(i);
        return i >= 0;
    }
    case Kind::Distribution:
        return within(k, double(v.dist.a)) && within(k, double(v.dist.b));  // parsed by the caller
    }
    return false;
}

} // namespace

std::span<const Key> keys() { return kKeys; }

const Key* find_key(std::string_view name, bool vm) {
    for (const Key& k : kKeys)
        if (k.name == name && (k.vm || !vm)) return &k;
    return nullptr;
}

std::string key_names(bool vm) {
    std::string s;
    for (const Key& k : kKeys) {
        if (vm && !k.vm) continue;
        if (!s.empty()) s += ", ";
        s += k.name;
    }
    return s;
}

} // namespace hvstor::perf::detail

namespace hvstor::perf {

std::vector<SettingKey> setting_keys(bool vm) {
    std::vector<SettingKey> out;
    for (const detail::Key& k : detail::kKeys) {
        if (vm && !k.vm) continue;
        std::string m(k.meaning);
        // The table's meanings point at sections of docs/perf-model.md ("Profiles, above").
        for (size_t at; (at = m.find(", above)")) != std::string::npos;) m.replace(at, 8, " in docs/perf-model.md)");
        if (k.kind == detail::Kind::Profile) {
            std::string names;
            for (const std::string& n : vm ? vm_profile_names() : model_profile_names())
                names += (names.empty() ? "" : ", ") + n;
            m += ": one of " + names;
        } else {
            m += ": " + detail::expected(k);
        }
        if (!k.def.empty()) m += " (default " + std::string(k.def) + ")";
        out.push_back({k.name, std::move(m)});
    }
    return out;
}

} // namespace hvstor::perf

namespace hvstor::perf::detail {

std::string expected(const Key& k) {
    const std::string range = range_text(k);
    switch (k.kind) {
    case Kind::Rate:
        return "a number from " + range + " (0: no cap)";
    case Kind::Duration:
        return std::string(k.min > 0 ? "a positive duration" : "a duration") + " from " + range;
    case Kind::Size:
        return "a size from " + range;
    case Kind::Whole:
        return "a whole number from " + range;
    case Kind::Probability:
        return "a probability from " + range;
    case Kind::Level:
        return "full, empty or a fraction from " + range;
    case Kind::Choice:
        return choice_list(k, false);
    case Kind::Distribution:
        return "durations from " + range;
    case Kind::Scale:
        return "a number from " + range;
    case Kind::Profile:
    case Kind::Text:
        break;
    }
    return "anything";
}

bool parse_value(const Key& k, std::string_view text, Value& v, std::string& why) {
    if (k.kind == Kind::Distribution && !parse_distribution(text, v.dist, why)) return false;
    if (parse_in_range(k, text, v)) return true;
    why = "expected " + expected(k);
    return false;
}

bool check_unscaled(const ModelConfig& cfg, std::string& err) {
    auto check = [&](std::string_view name, double v, const std::string& written) {
        const Key& k = *find_key(name, false);
        if (within(k, v)) return true;
        err = "perf: " + std::string(name) + "=" + written + ": expected " + expected(k);
        return false;
    };
    return check("io-unit", double(cfg.io_unit), std::to_string(cfg.io_unit)) &&
           check("stats.interval", double(cfg.stats_interval), format_duration(cfg.stats_interval)) &&
           check("timer.min-period", double(cfg.timer_min_period), format_duration(cfg.timer_min_period));
}

std::string settings_table() {
    std::string s = "| key | value | range | default | VM | meaning |\n|---|---|---|---|---|---|\n";
    for (const Key& k : kKeys) {
        s += "| `" + std::string(k.name) + "` | " + value_text(k) + " | " + range_text(k) + " | ";
        s += k.def.empty() ? std::string("none") : "`" + std::string(k.def) + "`";
        s += std::string(" | ") + (k.vm ? "yes" : "") + " | " + std::string(k.meaning) + " |\n";
    }
    return s;
}

} // namespace hvstor::perf::detail
