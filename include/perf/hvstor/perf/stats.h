// A live picture of one modelled disk. Times are on the model's clock; when the model runs
// time-scaled, rates and latencies are as the guest sees them (multiply rates by time_scale,
// divide times by it, to compare with the unscaled disk).
#pragma once

#include <cstdint>

#include "hvstor/perf/clock.h"
#include "hvstor/perf/histogram.h"

namespace hvstor::perf {

struct Credits {
    bool enabled = false;  // credit bursting configured
    double iops = 0, iops_capacity = 0;    // IOs above base left in the IOPS bucket
    double bytes = 0, bytes_capacity = 0;  // bytes above base left in the bandwidth bucket
};

// One stats interval [start, end), the last one completed (the first one starts when the
// model is created). Completions count in the interval they complete in; throttle delays in
// the interval the IO was issued in.
struct IntervalStats {
    Nanos start = 0, end = 0;  // end == 0: no interval has completed yet
    uint64_t ios = 0, reads = 0, writes = 0, bytes = 0;
    double iops = 0, read_iops = 0, write_iops = 0;
    double mbps = 0;             // 10^6 bytes per second
    LatencySummary latency;      // guest-visible: submission to completion
    uint64_t issued = 0;
    double throttle_mean = 0;    // ns an IO waited in the host before issue
    Nanos throttle_max = 0;
    // ns from when the model finished an IO (its service latency over, the inner backend
    // done) to its completion: how late the host's timer thread woke. Part of `latency`;
    // 0 on a virtual clock.
    double late_mean = 0;
    Nanos late_max = 0;
    // The model's own latency of the same IOs: arrival to when the model finished each, so
    // `latency` less its lateness. What the profile's latency figures describe.
    LatencySummary model_latency;
    double queue_avg = 0;        // host queue depth, time-weighted
    uint32_t queue_max = 0;
};

struct Stats {
    Nanos now = 0;
    double time_scale = 1;

    // Totals since creation. Of completed IOs (errors include requests refused at once):
    uint64_t ios = 0, reads = 0, writes = 0, flushes = 0, others = 0, errors = 0;
    // Requests completed with -ECANCELED without reaching the inner backend, because the
    // guest that sent them was gone (ModelBackend::abandon): not counted above.
    uint64_t cancelled = 0;
    uint64_t bytes_read = 0, bytes_written = 0;
    LatencySummary latency;
    // Of IOs past the disk's caps, as the IOPS caps count them (io_unit accounting):
    uint64_t cost_units = 0;
    // Of IOs issued to the inner backend, and the time they waited in the host (the total
    // saturates at kNever):
    uint64_t issued = 0;
    Nanos throttle_total = 0, throttle_max = 0;
    // Of completed IOs, how late the host completed them (IntervalStats::late_mean; the total
    // saturates at kNever):
    Nanos late_total = 0, late_max = 0;

    // Now.
    uint32_t queued = 0;      // waiting in the host: for the disk's caps, the outstanding
                              // limit or the VM's caps
    uint32_t in_service = 0;  // issued, not yet completed
    Credits credits;          // the disk's burst buckets
    Credits vm_credits;       // the VM's, when the disk has one

    IntervalStats last;
};

} // namespace hvstor::perf
