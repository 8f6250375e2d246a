// Saturating time arithmetic. Every setting is bounded, but some products of values in range
// are not: a latency per KiB times a large IO, waits at a tiny rate over many IOs, a duration
// times an arbitrary time scale. These keep such results valid times instead of overflowing.
#pragma once

#include <algorithm>

#include "hvstor/perf/clock.h"

namespace hvstor::perf::detail {

// A delay this long (146 years) never ends. Every deadline the model arms is below it or
// kNever, which leaves room to add any interval or delay to a clock reading.
constexpr Nanos kHorizon = kNever / 2;

// t + d for d >= 0, or kNever once that reaches the horizon.
constexpr Nanos deadline_after(Nanos t, Nanos d) { return d >= kHorizon || t >= kHorizon - d ? kNever : t + d; }

// The first multiple of `interval` (> 0) after `t` (>= 0), or kNever past the horizon.
constexpr Nanos next_boundary(Nanos t, Nanos interval) { return deadline_after(t / interval * interval, interval); }

// A delay from a double count of nanoseconds, truncated: 0 to kHorizon (NaN: 0).
constexpr Nanos to_delay(double ns) {
    if (!(ns > 0)) return 0;
    return ns >= double(kHorizon) ? kHorizon : Nanos(ns);
}

// a + b for delays: each taken as 0 to kHorizon, the sum at most kHorizon.
constexpr Nanos add_delays(Nanos a, Nanos b) {
    return std::min(kHorizon, std::clamp<Nanos>(a, 0, kHorizon) + std::clamp<Nanos>(b, 0, kHorizon));
}

// a + b for a running total of amounts >= 0: kNever once it would overflow.
constexpr Nanos add_total(Nanos a, Nanos b) { return a > kNever - b ? kNever : a + b; }

} // namespace hvstor::perf::detail
