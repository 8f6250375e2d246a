// The property-string parser. Every message names the key and the offending value, since the
// user sees it at QEMU startup with nothing else to go on.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <utility>

#include "hvstor/perf/config.h"

namespace hvstor::perf {
namespace {

constexpr double kMB = 1e6;

struct Pair {
    std::string key, value;
};

// Splits on ',' (",," is a literal comma) and on the first '=' of each item.
bool split(std::string_view text, std::vector<Pair>& out, std::string& err) {
    std::string item;
    auto flush = [&]() -> bool {
        if (item.empty()) return true;
        const size_t eq = item.find('=');
        if (eq == std::string::npos || eq == 0) {
            err = "'" + item + "' is not key=value";
            return false;
        }
        out.push_back({item.substr(0, eq), item.substr(eq + 1)});
        item.clear();
        return true;
    };
    for (size_t i = 0; i < text.size(); i++) {
        if (text[i] == ',') {
            if (i + 1 < text.size() && text[i + 1] == ',') {
                item += ',';
                i++;
                continue;
            }
            if (!flush()) return false;
            continue;
        }
        item += text[i];
    }
    return flush();
}

bool parse_double(std::string_view s, double& out) {
    if (s.empty()) return false;
    const char* end = s.data() + s.size();
    auto [p, ec] = std::from_chars(s.data(), end, out);
    return ec == std::errc() && p == end && std::isfinite(out);
}

bool parse_u64(std::string_view s, uint64_t& out) {
    if (s.empty()) return false;
    const char* end = s.data() + s.size();
    auto [p, ec] = std::from_chars(s.data(), end, out);
    return ec == std::errc() && p == end;
}

// "1.8ms", "500us", "30min"; a bare "0" is zero.
bool parse_duration(std::string_view s, Nanos& out) {
    static constexpr std::pair<const char*, double> kUnits[] = {
        {"ns", 1}, {"us", 1e3}, {"ms", 1e6}, {"min", 60e9}, {"s", 1e9}, {"h", 3600e9}};
    if (s == "0") {
        out = 0;
        return true;
    }
    for (const auto& [unit, scale] : kUnits) {
        const std::string_view u(unit);
        if (s.size() > u.size() && s.substr(s.size() - u.size()) == u) {
            double v;
            if (!parse_double(s.substr(0, s.size() - u.size()), v) || v < 0) return false;
            const double ns = v * scale;
            if (ns > 9e18) return false;
            out = Nanos(std::llround(ns));
            return true;
        }
    }
    return false;
}

// "256K", "1M", "4096", "64KiB": binary multiples.
bool parse_size(std::string_view s, uint64_t& out) {
    uint64_t mult = 1;
    auto strip = [&](std::string_view suffix) {
        if (s.size() > suffix.size() && s.substr(s.size() - suffix.size()) == suffix) {
            s.remove_suffix(suffix.size());
            return true;
        }
        return false;
    };
    if (strip("KiB") || strip("K") || strip("k")) mult = 1024;
    else if (strip("MiB") || strip("M")) mult = 1024 * 1024;
    else if (strip("GiB") || strip("G")) mult = 1024 * 1024 * 1024;
    uint64_t v;
    if (!parse_u64(s, v) || v == 0 || v > UINT64_MAX / mult) return false;
    out = v * mult;
    return true;
}

bool parse_distribution(std::string_view s, Distribution& d, std::string& why) {
    std::vector<std::string_view> parts;
    size_t start = 0;
    for (size_t i = 0; i <= s.size(); i++) {
        if (i == s.size() || s[i] == ':') {
            parts.push_back(s.substr(start, i - start));
            start = i + 1;
        }
    }
    const char* usage = "expected DURATION, fixed:DURATION, uniform:MIN:MAX or lognormal:P50:P99";
    Nanos a = 0, b = 0;
    if (parts.size() == 1 || (parts.size() == 2 && parts[0] == "fixed")) {
        if (!parse_duration(parts.back(), a)) {
            why = usage;
            return false;
        }
        d = {DistKind::Fixed, a, a};
        return true;
    }
    if (parts.size() != 3 || !parse_duration(parts[1], a) || !parse_duration(parts[2], b)) {
        why = usage;
        return false;
    }
    if (parts[0] == "uniform") {
        if (b < a) {
            why = "the maximum is below the minimum";
            return false;
        }
        d = {DistKind::Uniform, a, b};
        return true;
    }
    if (parts[0] == "lognormal") {
        if (a <= 0 || b < a) {
            why = "needs 0 < p50 <= p99";
            return false;
        }
        d = {DistKind::LogNormal, a, b};
        return true;
    }
    why = usage;
    return false;
}

bool parse_burst_mode(std::string_view s, BurstMode& m) {
    if (s == "off") m = BurstMode::Off;
    else if (s == "credit") m = BurstMode::Credit;
    else if (s == "on-demand") m = BurstMode::OnDemand;
    else return false;
    return true;
}

std::string join(const std::vector<std::string>& v) {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
    return s;
}

std::string bad(const Pair& p, const std::string& why) {
    return "perf: " + p.key + "=" + p.value + ": " + why;
}

// Keys shared by disks and VMs. Returns 1 when handled, 0 when the key is not one of these,
// -1 on error.
int apply_caps_key(const Pair& p, Caps& c, std::string& err) {
    const std::string& k = p.key;
    const std::string& v = p.value;
    double d;
    Nanos ns;
    auto rate = [&](double& dst, double scale) {
        if (!parse_double(v, d) || d < 0) {
            err = bad(p, "expected a number >= 0 (0: no cap)");
            return -1;
        }
        dst = d * scale;
        return 1;
    };
    if (k == "iops") return rate(c.iops, 1);
    if (k == "mbps") return rate(c.bytes_per_s, kMB);
    if (k == "bps") return rate(c.bytes_per_s, 1);
    if (k == "burst.iops") return rate(c.burst_iops, 1);
    if (k == "burst.mbps") return rate(c.burst_bytes_per_s, kMB);
    if (k == "burst.bps") return rate(c.burst_bytes_per_s, 1);
    if (k == "burst") {
        if (!parse_burst_mode(v, c.burst)) {
            err = bad(p, "expected off, credit or on-demand");
            return -1;
        }
        return 1;
    }
    if (k == "burst.duration") {
        if (!parse_duration(v, ns) || ns <= 0) {
            err = bad(p, "expected a positive duration such as 30min");
            return -1;
        }
        c.burst_duration = ns;
        return 1;
    }
    if (k == "burst.start") {
        if (v == "full") c.burst_start = 1;
        else if (v == "empty") c.burst_start = 0;
        else if (parse_double(v, d) && d >= 0 && d <= 1) c.burst_start = d;
        else {
            err = bad(p, "expected full, empty or a fraction from 0 to 1");
            return -1;
        }
        return 1;
    }
    if (k == "window") {
        if (!parse_duration(v, ns)) {
            err = bad(p, "expected a duration such as 1ms");
            return -1;
        }
        c.window = ns;
        return 1;
    }
    return 0;
}

bool check_caps(const Caps& c, std::string& err) {
    if (c.burst == BurstMode::Off) return true;
    auto check = [&](double base, double burst, const char* bk, const char* k) {
        if (burst > 0 && base > 0 && burst < base) {
            err = std::string("perf: ") + bk + " is below " + k + ": a burst rate must be at least the base rate";
            return false;
        }
        return true;
    };
    if (!check(c.iops, c.burst_iops, "burst.iops", "iops")) return false;
    if (!check(c.bytes_per_s, c.burst_bytes_per_s, "burst.mbps", "mbps")) return false;
    if (c.burst_iops == 0 && c.burst_bytes_per_s == 0) {
        err = "perf: bursting is on but no burst rate is set (burst.iops, burst.mbps)";
        return false;
    }
    return true;
}

bool take_time_scale(std::vector<Pair>& pairs, double& scale, std::string& err) {
    scale = 1;
    for (const auto& p : pairs) {
        if (p.key != "time-scale") continue;
        if (!parse_double(p.value, scale) || scale <= 0) {
            err = bad(p, "expected a number > 0");
            return false;
        }
    }
    return true;
}

void scale_caps(Caps& c, double f) {
    c.iops /= f;
    c.bytes_per_s /= f;
    c.burst_iops /= f;
    c.burst_bytes_per_s /= f;
    c.burst_duration = Nanos(std::llround(double(c.burst_duration) * f));
    c.window = Nanos(std::llround(double(c.window) * f));
}

Nanos scale_ns(Nanos ns, double f) { return Nanos(std::llround(double(ns) * f)); }

std::string num(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.6g", v);
    return buf;
}

std::string caps_text(const Caps& c) {
    std::string s = (c.iops > 0 ? num(c.iops) + " IOPS" : "IOPS uncapped") + ", " +
                    (c.bytes_per_s > 0 ? num(c.bytes_per_s / kMB) + " MB/s" : "MB/s uncapped");
    if (c.burst != BurstMode::Off) {
        s += c.burst == BurstMode::Credit ? ", credit burst " : ", on-demand burst ";
        s += num(c.burst_iops) + " IOPS/" + num(c.burst_bytes_per_s / kMB) + " MB/s";
        if (c.burst == BurstMode::Credit) s += " for " + format_duration(c.burst_duration);
    }
    return s;
}

std::string dist_text(const Distribution& d) {
    switch (d.kind) {
    case DistKind::Fixed:
        return format_duration(d.a);
    case DistKind::Uniform:
        return "uniform:" + format_duration(d.a) + ":" + format_duration(d.b);
    case DistKind::LogNormal:
        return "lognormal:" + format_duration(d.a) + ":" + format_duration(d.b);
    }
    return "?";
}

const char* kModelKeys =
    "profile, name, iops, mbps, bps, burst, burst.iops, burst.mbps, burst.bps, burst.duration, burst.start, "
    "window, io-unit, read.iops, read.mbps, write.iops, write.mbps, latency, latency.read, latency.write, "
    "latency.flush, latency.per-kib, spike.prob, spike.latency, queue, max-outstanding, seed, "
    "stats.interval, timeline, timer.min-period, time-scale";
const char* kVmKeys =
    "profile, iops, mbps, bps, burst, burst.iops, burst.mbps, burst.bps, burst.duration, burst.start, window, "
    "time-scale";

} // namespace

std::string format_duration(Nanos ns) {
    static constexpr std::pair<const char*, double> kUnits[] = {
        {"h", 3600e9}, {"min", 60e9}, {"s", 1e9}, {"ms", 1e6}, {"us", 1e3}};
    if (ns == 0) return "0";
    for (const auto& [unit, scale] : kUnits) {
        if (double(ns) >= scale) return num(double(ns) / scale) + unit;
    }
    return std::to_string(ns) + "ns";
}

bool parse_model_config(std::string_view text, ModelConfig& out, std::string& err) {
    std::vector<Pair> pairs;
    if (!split(text, pairs, err)) {
        err = "perf: " + err;
        return false;
    }
    ModelConfig c;
    for (const auto& p : pairs) {
        if (p.key == "profile" && !model_profile(p.value, c)) {
            err = bad(p, "unknown profile (known: " + join(model_profile_names()) + ")");
            return false;
        }
    }
    double scale;
    if (!take_time_scale(pairs, scale, err)) return false;

    for (const auto& p : pairs) {
        const std::string& k = p.key;
        const std::string& v = p.value;
        if (k == "profile" || k == "time-scale") continue;
        const int r = apply_caps_key(p, c.caps, err);
        if (r < 0) return false;
        if (r > 0) continue;
        double d;
        uint64_t u;
        Nanos ns;
        std::string why;
        auto rate = [&](double& dst, double mult) {
            if (!parse_double(v, d) || d < 0) {
                err = bad(p, "expected a number >= 0 (0: no cap)");
                return false;
            }
            dst = d * mult;
            return true;
        };
        if (k == "name") c.name = v;
        else if (k == "timeline") c.timeline = v;
        else if (k == "io-unit") {
            if (!parse_size(v, u) || u < 512) {
                err = bad(p, "expected a size of at least 512 such as 256K");
                return false;
            }
            c.io_unit = u;
        } else if (k == "read.iops") {
            if (!rate(c.read_iops, 1)) return false;
        } else if (k == "read.mbps") {
            if (!rate(c.read_bytes_per_s, kMB)) return false;
        } else if (k == "write.iops") {
            if (!rate(c.write_iops, 1)) return false;
        } else if (k == "write.mbps") {
            if (!rate(c.write_bytes_per_s, kMB)) return false;
        } else if (k == "latency" || k == "latency.read" || k == "latency.write" || k == "latency.flush") {
            Distribution dist;
            if (!parse_distribution(v, dist, why)) {
                err = bad(p, why);
                return false;
            }
            if (k == "latency" || k == "latency.read") c.read_latency = dist;
            if (k == "latency" || k == "latency.write") c.write_latency = dist;
            if (k == "latency" || k == "latency.flush") c.flush_latency = dist;
        } else if (k == "latency.per-kib") {
            if (!parse_duration(v, ns)) {
                err = bad(p, "expected a duration per KiB such as 2us");
                return false;
            }
            c.ns_per_kib = double(ns);
        } else if (k == "spike.prob") {
            if (!parse_double(v, d) || d < 0 || d > 1) {
                err = bad(p, "expected a probability from 0 to 1");
                return false;
            }
            c.spike_prob = d;
        } else if (k == "spike.latency") {
            if (!parse_duration(v, ns)) {
                err = bad(p, "expected a duration such as 50ms");
                return false;
            }
            c.spike_latency = ns;
        } else if (k == "queue") {
            if (v == "fifo") c.queue = Discipline::Fifo;
            else if (v == "per-direction") c.queue = Discipline::PerDirection;
            else if (v == "round-robin") c.queue = Discipline::RoundRobin;
            else {
                err = bad(p, "expected fifo, per-direction or round-robin");
                return false;
            }
        } else if (k == "max-outstanding") {
            if (!parse_u64(v, u) || u > UINT32_MAX) {
                err = bad(p, "expected a whole number (0: no limit)");
                return false;
            }
            c.max_outstanding = uint32_t(u);
        } else if (k == "seed") {
            if (!parse_u64(v, u)) {
                err = bad(p, "expected a whole number");
                return false;
            }
            c.seed = u;
        } else if (k == "timer.min-period") {
            if (!parse_duration(v, ns) || ns > kSec) {
                err = bad(p, "expected a duration up to 1s such as 50us");
                return false;
            }
            c.timer_min_period = ns;
        } else if (k == "stats.interval") {
            if (!parse_duration(v, ns) || ns < kMs) {
                err = bad(p, "expected a duration of at least 1ms");
                return false;
            }
            c.stats_interval = ns;
        } else {
            err = "perf: unknown key '" + k + "' (known: " + kModelKeys + ")";
            return false;
        }
    }
    if (!check_caps(c.caps, err)) return false;
    apply_time_scale(c, scale);
    out = std::move(c);
    return true;
}

bool parse_vm_config(std::string_view text, VmConfig& out, std::string& err) {
    std::vector<Pair> pairs;
    if (!split(text, pairs, err)) {
        err = "perf: " + err;
        return false;
    }
    VmConfig c;
    for (const auto& p : pairs) {
        if (p.key == "profile" && !vm_profile(p.value, c)) {
            err = bad(p, "unknown VM profile (known: " + join(vm_profile_names()) + ")");
            return false;
        }
    }
    double scale;
    if (!take_time_scale(pairs, scale, err)) return false;
    for (const auto& p : pairs) {
        if (p.key == "profile" || p.key == "time-scale") continue;
        const int r = apply_caps_key(p, c.caps, err);
        if (r < 0) return false;
        if (r == 0) {
            err = "perf: unknown VM key '" + p.key + "' (known: " + kVmKeys + ")";
            return false;
        }
    }
    if (!check_caps(c.caps, err)) return false;
    apply_time_scale(c, scale);
    out = std::move(c);
    return true;
}

void apply_time_scale(ModelConfig& c, double f) {
    if (f == 1) return;
    scale_caps(c.caps, f);
    c.read_iops /= f;
    c.read_bytes_per_s /= f;
    c.write_iops /= f;
    c.write_bytes_per_s /= f;
    for (Distribution* d : {&c.read_latency, &c.write_latency, &c.flush_latency}) {
        d->a = scale_ns(d->a, f);
        d->b = scale_ns(d->b, f);
    }
    c.ns_per_kib *= f;
    c.spike_latency = scale_ns(c.spike_latency, f);
    c.time_scale *= f;
}

void apply_time_scale(VmConfig& c, double f) {
    if (f == 1) return;
    scale_caps(c.caps, f);
    c.time_scale *= f;
}

std::string summarize(const ModelConfig& c) {
    static constexpr const char* kQueues[] = {"fifo", "per-direction", "round-robin"};
    std::string s = (c.profile.empty() ? std::string("custom") : c.profile) + ": " + caps_text(c.caps);
    s += ", read " + dist_text(c.read_latency) + ", write " + dist_text(c.write_latency);
    s += std::string(", queue ") + kQueues[int(c.queue)];
    if (c.max_outstanding) s += ", max " + std::to_string(c.max_outstanding) + " outstanding";
    if (c.time_scale != 1) s += ", time-scale " + num(c.time_scale);
    return s;
}

std::string summarize(const VmConfig& c) {
    std::string s = (c.profile.empty() ? std::string("custom") : c.profile) + ": " + caps_text(c.caps);
    if (c.time_scale != 1) s += ", time-scale " + num(c.time_scale);
    return s;
}

} // namespace hvstor::perf
