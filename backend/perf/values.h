// The syntaxes of setting values: numbers, whole numbers, durations, sizes and latency
// distributions. Syntax only: the range each setting allows is the key table's (keys.h).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "hvstor/perf/clock.h"
#include "hvstor/perf/config.h"

namespace hvstor::perf::detail {

// A finite decimal number.
bool parse_number(std::string_view s, double& out);
bool parse_whole(std::string_view s, uint64_t& out);
// "1.8ms", "500us", "30min" (ns, us, ms, s, min, h); a bare "0" is zero.
bool parse_duration(std::string_view s, Nanos& out);
// "256K", "1M", "4096", "64KiB": binary multiples, more than zero.
bool parse_size(std::string_view s, uint64_t& out);
// DURATION, fixed:DURATION, uniform:MIN:MAX or lognormal:P50:P99; `why` says what is wrong.
bool parse_distribution(std::string_view s, Distribution& d, std::string& why);

// "1e9" for a large power of ten, else the shortest exact decimal: for ranges in messages.
std::string format_number(double v);

} // namespace hvstor::perf::detail
