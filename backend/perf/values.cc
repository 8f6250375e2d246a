#include "values.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <utility>
#include <vector>

namespace hvstor::perf::detail {

bool parse_number(std::string_view s, double& out) {
    if (s.empty()) return false;
    const char* end = s.data() + s.size();
    auto [p, ec] = std::from_chars(s.data(), end, out);
    return ec == std::errc() && p == end && std::isfinite(out);
}

bool parse_whole(std::string_view s, uint64_t& out) {
    if (s.empty()) return false;
    const char* end = s.data() + s.size();
    auto [p, ec] = std::from_chars(s.data(), end, out);
    return ec == std::errc() && p == end;
}

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
            if (!parse_number(s.substr(0, s.size() - u.size()), v) || v < 0) return false;
            const double ns = v * scale;
            if (ns > 9e18) return false;  // beyond Nanos
            out = Nanos(std::llround(ns));
            return true;
        }
    }
    return false;
}

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
    if (!parse_whole(s, v) || v == 0 || v > UINT64_MAX / mult) return false;
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

std::string format_number(double v) {
    if (v >= 1e6) {
        const double e = std::round(std::log10(v));
        if (std::pow(10.0, e) == v) return "1e" + std::to_string(int(e));
    }
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.10g", v);
    return buf;
}

} // namespace hvstor::perf::detail
