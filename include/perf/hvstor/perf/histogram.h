// Latency histogram with logarithmic buckets: 128 per power of two (under 0.4% error at the
// bucket midpoint), exact below 256 ns, saturating at about 73 minutes.
#pragma once

#include <cstdint>
#include <vector>

#include "hvstor/perf/clock.h"

namespace hvstor::perf {

struct LatencySummary {
    uint64_t count = 0;
    double mean = 0;  // ns
    Nanos min = 0, max = 0;
    Nanos p50 = 0, p90 = 0, p99 = 0, p999 = 0;
};

class Histogram {
public:
    Histogram();
    void add(Nanos v);
    void clear();
    void merge(const Histogram& other);

    uint64_t count() const { return count_; }
    // p in [0, 100]. Bucket midpoints clamped to the smallest and largest values seen, so a
    // constant value comes back exactly. 0 when empty.
    Nanos percentile(double p) const;
    LatencySummary summary() const;

private:
    std::vector<uint64_t> buckets_;
    uint64_t count_ = 0;
    double sum_ = 0;
    Nanos min_ = 0, max_ = 0;
};

} // namespace hvstor::perf
