// The statistics of one modelled disk: totals since creation, and the interval in progress,
// which becomes `last` when it ends. Told what happened, and when, by the model; no clock or
// lock of its own.
#pragma once

#include <algorithm>
#include <cstdint>

#include "hvstor/backend/backend.h"
#include "hvstor/perf/clock.h"
#include "hvstor/perf/histogram.h"
#include "hvstor/perf/stats.h"
#include "saturate.h"

namespace hvstor::perf::detail {

class StatsAccumulator {
public:
    // The first interval starts at `now`; the next ones at multiples of `interval` (> 0).
    StatsAccumulator(Nanos now, Nanos interval);

    // Closes the intervals that ended by `now`: call it before anything else at `now`.
    void roll(Nanos now);
    // The host queue holds `depth` IOs from `now` on, for its time-weighted average.
    void queue_depth(Nanos now, uint32_t depth) {
        if (depth == depth_) return;
        cur_.queue_area += double(depth_) * double(now - depth_since_);
        depth_since_ = now;
        depth_ = depth;
        cur_.queue_max = std::max(cur_.queue_max, depth);
    }
    // Refused before reaching the queue: an error, and nothing else.
    void rejected() { rejected_++; }
    // Completed as cancelled (the guest gone): counted apart, and nothing else.
    void cancelled() { cancelled_++; }
    // Left the host after waiting `waited`; counts in the interval in progress.
    void issued(Nanos waited) {
        cur_.issued++;
        cur_.throttle_sum += double(waited);
        cur_.throttle_max = std::max(cur_.throttle_max, waited);
        issued_++;
        throttle_ = add_total(throttle_, waited);
        throttle_max_ = std::max(throttle_max_, waited);
    }
    // `late`: how long after the model finished it the host got to completing it.
    void completed(backend::Op op, uint64_t length, Nanos latency, Nanos late, bool error);

    // The totals and the last interval; the rest of `s` is the caller's.
    void fill(Stats& s) const;

private:
    struct Interval {
        uint64_t ios = 0, reads = 0, writes = 0, bytes = 0, issued = 0;
        double throttle_sum = 0;
        Nanos throttle_max = 0;
        double late_sum = 0;
        Nanos late_max = 0;
        double queue_area = 0;  // depth x ns
        uint32_t queue_max = 0;
        Histogram latency;
        Histogram model_latency;  // latency less late
    };
    void close_interval();
    void reset_interval();

    const Nanos len_;
    uint32_t depth_ = 0;
    Nanos depth_since_;
    Nanos cur_start_;
    Nanos next_roll_;
    Interval cur_;
    IntervalStats last_;

    Histogram latency_;
    uint64_t ios_ = 0, reads_ = 0, writes_ = 0, flushes_ = 0, others_ = 0;
    uint64_t errors_ = 0, rejected_ = 0, cancelled_ = 0, bytes_read_ = 0, bytes_written_ = 0;
    uint64_t issued_ = 0;
    Nanos throttle_ = 0, throttle_max_ = 0;
    Nanos late_ = 0, late_max_ = 0;
};

} // namespace hvstor::perf::detail
