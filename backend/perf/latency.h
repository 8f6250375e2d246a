// Service latency sampling. The generator and the normal deviate are our own so that a seed
// gives the same sequence with any standard library.
#pragma once

#include <cstdint>

#include "hvstor/backend/backend.h"
#include "hvstor/perf/config.h"

namespace hvstor::perf::detail {

// xoshiro256**, seeded through splitmix64.
class Rng {
public:
    explicit Rng(uint64_t seed);
    uint64_t next();
    double uniform();  // [0, 1)
    double normal();   // standard normal, Box-Muller

private:
    uint64_t s_[4];
};

class Sampler {
public:
    explicit Sampler(const Distribution& d);
    Nanos sample(Rng& rng) const;

private:
    Distribution d_;
    double mu_ = 0, sigma_ = 0;  // lognormal: ln of the median, and the spread
};

class LatencyModel {
public:
    explicit LatencyModel(const ModelConfig& cfg);
    Nanos sample(backend::Op op, uint64_t length, Rng& rng) const;

private:
    Sampler read_, write_, flush_;
    double ns_per_kib_;
    double spike_prob_;
    Nanos spike_;
};

} // namespace hvstor::perf::detail
