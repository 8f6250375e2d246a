#include "limiter.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "saturate.h"

namespace hvstor::perf::detail {
namespace {

// Floating-point accrual can leave a bucket a hair short of an amount it exactly reached.
bool enough(double have, double need) { return have + 1e-9 * std::max(1.0, need) >= need; }

Nanos time_for(double amount, double rate) { return std::max<Nanos>(1, to_delay(std::ceil(amount / rate * 1e9))); }

} // namespace

LimiterSpec make_spec(double rate, BurstMode burst, double burst_rate, Nanos burst_duration,
                      double burst_start, Nanos window, double unit) {
    LimiterSpec s;
    s.rate = rate;
    s.burst = burst;
    s.burst_rate = burst == BurstMode::Off ? 0 : std::max(burst_rate, rate);
    const double win = double(window) / 1e9;
    s.depth = std::max(rate * win, 2 * unit);
    s.burst_depth = std::max(s.burst_rate * win, 2 * unit);
    if (burst == BurstMode::Credit && s.burst_rate > rate) {
        s.credit_capacity = (s.burst_rate - rate) * double(burst_duration) / 1e9;
        s.credit_start = s.credit_capacity * std::clamp(burst_start, 0.0, 1.0);
    }
    return s;
}

Limiter::Limiter(const LimiterSpec& spec, Nanos start)
    : spec_(spec), tokens_(spec.depth), credits_(spec.credit_start), peak_(spec.burst_depth), last_(start) {}

void Limiter::refill(Nanos t) {
    if (t <= last_) return;
    const double dt = double(t - last_) / 1e9;
    last_ = t;
    if (uses_base()) {
        tokens_ += spec_.rate * dt;
        if (tokens_ > spec_.depth) {
            if (spec_.burst == BurstMode::Credit)
                credits_ = std::min(spec_.credit_capacity, credits_ + (tokens_ - spec_.depth));
            tokens_ = spec_.depth;
        }
    }
    if (uses_peak()) peak_ = std::min(spec_.burst_depth, peak_ + spec_.burst_rate * dt);
}

Nanos Limiter::wait(double cost) const {
    Nanos w = 0;
    if (uses_base()) {
        const double need = std::min(cost, spec_.depth);
        const double have = tokens_ + (spec_.burst == BurstMode::Credit ? credits_ : 0);
        // Below the depth the credits cannot grow, so the sum rises at exactly the base rate.
        if (!enough(have, need)) w = time_for(need - have, spec_.rate);
    }
    if (uses_peak()) {
        const double need = std::min(cost, spec_.burst_depth);
        if (!enough(peak_, need)) w = std::max(w, time_for(need - peak_, spec_.burst_rate));
    }
    return w;
}

void Limiter::take(double cost) {
    if (uses_base()) {
        tokens_ -= cost;
        if (tokens_ < 0 && spec_.burst == BurstMode::Credit) {
            const double m = std::min(credits_, -tokens_);
            credits_ -= m;
            tokens_ += m;
        }
    }
    if (uses_peak()) peak_ -= cost;
}

namespace {

void put_double(state::Writer& w, double v) {
    uint64_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    w.u64(bits);
}

double get_double(state::Reader& r, const char* what, double lo, double hi) {
    const uint64_t bits = r.u64(what);
    double v;
    std::memcpy(&v, &bits, sizeof v);
    if (!std::isfinite(v)) {
        r.fail(what, "is not a finite number; its bits are", bits);
        return 0;
    }
    return std::clamp(v, lo, hi);
}

// The most a bucket may owe: one IO's cost beyond what it holds (the largest transfer, in
// bytes, is far below this).
constexpr double kMaxDebt = double(1ull << 40);

} // namespace

void Limiter::save(state::Writer& w, Nanos now) const {
    Limiter l = *this;
    l.refill(now);
    put_double(w, l.tokens_);
    put_double(w, l.credits_);
    put_double(w, l.peak_);
}

void Limiter::load(state::Reader& r, Nanos now) {
    const double tokens = get_double(r, "a disk model's base bucket", -kMaxDebt, spec_.depth);
    const double credits = get_double(r, "a disk model's credits", 0, spec_.credit_capacity);
    const double peak = get_double(r, "a disk model's peak bucket", -kMaxDebt, spec_.burst_depth);
    if (!r.ok()) return;
    tokens_ = tokens;
    credits_ = credits;
    peak_ = peak;
    last_ = std::max(last_, now);
}

Limiter caps_limiter(const Caps& c, double rate, double burst_rate, double unit, Nanos start) {
    return Limiter(make_spec(rate, c.burst, burst_rate, c.burst_duration, c.burst_start, c.window, unit), start);
}

Credits credits_at(const Limiter& iops, const Limiter& bytes, Nanos now) {
    Limiter i = iops, b = bytes;
    i.refill(now);
    b.refill(now);
    Credits c;
    c.enabled = i.credit_mode() || b.credit_mode();
    c.iops = i.credits();
    c.iops_capacity = i.credit_capacity();
    c.bytes = b.credits();
    c.bytes_capacity = b.credit_capacity();
    return c;
}

} // namespace hvstor::perf::detail
