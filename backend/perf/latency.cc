#include "latency.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "saturate.h"

namespace hvstor::perf::detail {
namespace {

// The 99th percentile of the standard normal distribution.
constexpr double kZ99 = 2.3263478740408408;
// No sampled latency beyond an hour: a wide lognormal must not stall a disk for days.
constexpr double kMaxLatency = 3600.0 * 1e9;

uint64_t splitmix(uint64_t& x) {
    uint64_t z = (x += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

} // namespace

Rng::Rng(uint64_t seed) {
    for (auto& w : s_) w = splitmix(seed);
}

uint64_t Rng::next() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
}

double Rng::uniform() { return double(next() >> 11) * 0x1.0p-53; }

double Rng::normal() {
    const double u1 = 1.0 - uniform();  // (0, 1]: log() stays finite
    const double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

Sampler::Sampler(const Distribution& d) : d_(d) {
    if (d.kind == DistKind::LogNormal && d.a > 0) {
        mu_ = std::log(double(d.a));
        sigma_ = d.b > d.a ? (std::log(double(d.b)) - mu_) / kZ99 : 0;
    }
}

Nanos Sampler::sample(Rng& rng) const {
    switch (d_.kind) {
    case DistKind::Fixed:
        return d_.a;
    case DistKind::Uniform:
        return d_.a + Nanos(std::llround(rng.uniform() * double(d_.b - d_.a)));
    case DistKind::LogNormal:
        if (d_.a <= 0) return 0;
        if (sigma_ == 0) return d_.a;
        return Nanos(std::min(kMaxLatency, std::exp(mu_ + sigma_ * rng.normal())));
    }
    return 0;
}

LatencyModel::LatencyModel(const ModelConfig& cfg)
    : read_(cfg.read_latency), write_(cfg.write_latency), flush_(cfg.flush_latency),
      ns_per_kib_(cfg.ns_per_kib), spike_prob_(cfg.spike_prob), spike_(cfg.spike_latency) {}

Nanos LatencyModel::sample(backend::Op op, uint64_t length, Rng& rng) const {
    Nanos ns = 0;
    switch (op) {
    case backend::Op::Read:
        ns = add_delays(read_.sample(rng), to_delay(ns_per_kib_ * double(length) / 1024.0));
        break;
    case backend::Op::Write:
        ns = add_delays(write_.sample(rng), to_delay(ns_per_kib_ * double(length) / 1024.0));
        break;
    case backend::Op::Flush:
        ns = flush_.sample(rng);
        break;
    case backend::Op::Discard:
    case backend::Op::WriteZeroes:
        ns = write_.sample(rng);
        break;
    }
    // Drawn only when spikes are on, so turning them off keeps the other draws unchanged.
    if (spike_prob_ > 0 && rng.uniform() < spike_prob_) ns = add_delays(ns, spike_);
    return std::clamp<Nanos>(ns, 0, kHorizon);
}

} // namespace hvstor::perf::detail
