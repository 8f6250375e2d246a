#include "hvstor/perf/histogram.h"

#include <algorithm>
#include <bit>
#include <cmath>

namespace hvstor::perf {
namespace {

constexpr int kSubBits = 7;
constexpr uint64_t kSub = uint64_t(1) << kSubBits;
constexpr int kMaxBits = 42;  // values saturate at 2^42 - 1 ns
constexpr uint64_t kMaxValue = (uint64_t(1) << kMaxBits) - 1;
constexpr size_t kBuckets = (kMaxBits - kSubBits + 1) * kSub;

size_t index_of(uint64_t v) {
    if (v < 2 * kSub) return size_t(v);
    const int msb = 63 - std::countl_zero(v);
    const int shift = msb - kSubBits;
    return size_t(msb - kSubBits + 1) * kSub + size_t((v >> shift) - kSub);
}

// The value a bucket stands for: its midpoint.
uint64_t value_of(size_t idx) {
    if (idx < 2 * kSub) return idx;
    const size_t group = idx / kSub;
    const int shift = int(group) - 1;
    const uint64_t lower = (kSub + idx % kSub) << shift;
    return lower + (uint64_t(1) << shift) / 2;
}

} // namespace

Histogram::Histogram() : buckets_(kBuckets, 0) {}

void Histogram::add(Nanos v) {
    const uint64_t u = std::min<uint64_t>(v < 0 ? 0 : uint64_t(v), kMaxValue);
    buckets_[index_of(u)]++;
    if (count_ == 0 || Nanos(u) < min_) min_ = Nanos(u);
    if (count_ == 0 || Nanos(u) > max_) max_ = Nanos(u);
    count_++;
    sum_ += double(u);
}

void Histogram::clear() {
    if (count_ == 0) return;
    std::fill(buckets_.begin(), buckets_.end(), 0);
    count_ = 0;
    sum_ = 0;
    min_ = max_ = 0;
}

void Histogram::merge(const Histogram& o) {
    if (o.count_ == 0) return;
    for (size_t i = 0; i < kBuckets; i++) buckets_[i] += o.buckets_[i];
    min_ = count_ == 0 ? o.min_ : std::min(min_, o.min_);
    max_ = count_ == 0 ? o.max_ : std::max(max_, o.max_);
    count_ += o.count_;
    sum_ += o.sum_;
}

Nanos Histogram::percentile(double p) const {
    if (count_ == 0) return 0;
    p = std::clamp(p, 0.0, 100.0);
    const uint64_t rank = std::max<uint64_t>(1, uint64_t(std::ceil(p / 100.0 * double(count_))));
    if (rank >= count_) return max_;
    if (rank == 1) return min_;
    uint64_t seen = 0;
    for (size_t i = 0; i < kBuckets; i++) {
        seen += buckets_[i];
        if (seen >= rank) return std::clamp(Nanos(value_of(i)), min_, max_);
    }
    return max_;
}

LatencySummary Histogram::summary() const {
    LatencySummary s;
    s.count = count_;
    if (count_ == 0) return s;
    s.mean = sum_ / double(count_);
    s.min = min_;
    s.max = max_;
    // One pass for the four ranks.
    const double ps[4] = {50, 90, 99, 99.9};
    Nanos* out[4] = {&s.p50, &s.p90, &s.p99, &s.p999};
    uint64_t rank[4];
    for (int k = 0; k < 4; k++)
        rank[k] = std::max<uint64_t>(1, uint64_t(std::ceil(ps[k] / 100.0 * double(count_))));
    uint64_t seen = 0;
    int k = 0;
    for (size_t i = 0; i < kBuckets && k < 4; i++) {
        seen += buckets_[i];
        while (k < 4 && seen >= rank[k]) *out[k++] = std::clamp(Nanos(value_of(i)), min_, max_);
    }
    return s;
}

} // namespace hvstor::perf
