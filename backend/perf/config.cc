// The property strings of disks and VMs (their keys: keys.cc), the time scale, and the short
// descriptions. Every message names the key and the offending value, since the user sees it at
// QEMU startup with nothing else to go on.
#include <cmath>
#include <cstdio>
#include <type_traits>
#include <utility>
#include <vector>

#include "hvstor/perf/config.h"
#include "keys.h"
#include "saturate.h"

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

std::string join(const std::vector<std::string>& v) {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
    return s;
}

std::string bad(const Pair& p, const std::string& why) {
    return "perf: " + p.key + "=" + p.value + ": " + why;
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

bool load_profile(std::string_view name, ModelConfig& c) { return model_profile(name, c); }
bool load_profile(std::string_view name, VmConfig& c) { return vm_profile(name, c); }
std::vector<std::string> profile_names(const ModelConfig&) { return model_profile_names(); }
std::vector<std::string> profile_names(const VmConfig&) { return vm_profile_names(); }
ModelConfig* disk_part(ModelConfig& c) { return &c; }
ModelConfig* disk_part(VmConfig&) { return nullptr; }

bool value_of(const detail::Key& k, const Pair& p, detail::Value& v, std::string& err) {
    std::string why;
    if (detail::parse_value(k, p.value, v, why)) return true;
    err = bad(p, why);
    return false;
}

// Disks and VMs alike: the profile first wherever it appears, then every other key in order,
// then the time scale.
template <class Config>
bool parse_settings(std::string_view text, Config& out, std::string& err) {
    constexpr bool vm = std::is_same_v<Config, VmConfig>;
    const std::string what = vm ? "VM " : "";
    std::vector<Pair> pairs;
    if (!split(text, pairs, err)) {
        err = "perf: " + err;
        return false;
    }
    Config c;
    for (const Pair& p : pairs) {
        if (p.key == "profile" && !load_profile(p.value, c)) {
            err = bad(p, "unknown " + what + "profile (known: " + join(profile_names(c)) + ")");
            return false;
        }
    }
    detail::Value scale;
    scale.num = 1;
    for (const Pair& p : pairs) {
        if (p.key == "time-scale" && !value_of(*detail::find_key(p.key, vm), p, scale, err)) return false;
    }
    detail::Target target{c.caps, disk_part(c)};
    for (const Pair& p : pairs) {
        const detail::Key* k = detail::find_key(p.key, vm);
        if (!k) {
            err = "perf: unknown " + what + "key '" + p.key + "' (known: " + detail::key_names(vm) + ")";
            return false;
        }
        if (!k->apply) continue;  // the profile and the time scale, applied apart
        detail::Value v;
        if (!value_of(*k, p, v, err)) return false;
        k->apply(target, v);
    }
    if (!check_caps(c.caps, err)) return false;
    apply_time_scale(c, scale.num);
    out = std::move(c);
    return true;
}

// Rounded, and saturated: apply_time_scale takes any factor.
Nanos scale_ns(Nanos ns, double f) { return detail::to_delay(std::round(double(ns) * f)); }

void scale_caps(Caps& c, double f) {
    c.iops /= f;
    c.bytes_per_s /= f;
    c.burst_iops /= f;
    c.burst_bytes_per_s /= f;
    c.burst_duration = scale_ns(c.burst_duration, f);
    c.window = scale_ns(c.window, f);
}

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
    return parse_settings(text, out, err);
}

bool parse_vm_config(std::string_view text, VmConfig& out, std::string& err) {
    return parse_settings(text, out, err);
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
