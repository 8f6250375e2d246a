// One capped dimension (IOPS or bytes per second) with optional bursting.
//
// Credit bursting is two buckets in series: the base bucket fills at the base rate up to a
// small depth, and what would overflow it is banked as credits (capped). An IO draws on the
// base bucket first, then on the credits, and a peak bucket at the burst rate limits how fast
// the credits can be spent. Hence: below base, credits grow by (base - usage); saturated, they
// shrink by (burst - base) and a full bank lasts capacity / (burst - base).
// A bucket may go negative by the part of one large IO it could not cover: that IO is let
// through once the bucket holds what it can hold, and the debt delays the next ones, so large
// IOs are never stuck and the long-run rate is exact.
#pragma once

#include "hvstor/perf/clock.h"
#include "hvstor/perf/config.h"
#include "hvstor/perf/stats.h"
#include "hvstor/state.h"

namespace hvstor::perf::detail {

struct LimiterSpec {
    double rate = 0;  // units per second; 0: uncapped
    BurstMode burst = BurstMode::Off;
    double burst_rate = 0;
    double credit_capacity = 0;
    double credit_start = 0;
    double depth = 0;        // base bucket, units
    double burst_depth = 0;  // peak bucket, units
};

// `unit`: the smallest bucket depth is two of these (one IO, or one accounting unit of bytes).
LimiterSpec make_spec(double rate, BurstMode burst, double burst_rate, Nanos burst_duration,
                      double burst_start, Nanos window, double unit);

class Limiter {
public:
    Limiter() = default;
    Limiter(const LimiterSpec& spec, Nanos start);

    // Catches up to time t; an earlier t changes nothing.
    void refill(Nanos t);
    // How long from the last refill until `cost` may be taken: 0 when it may be now, at most
    // the horizon (saturate.h).
    Nanos wait(double cost) const;
    void take(double cost);
    Nanos time() const { return last_; }

    // Saved state: the buckets as they stand at `now` (refilled, leaving this one as it is);
    // a load sets them as of its own now. Loaded values are clamped to what the spec allows
    // (a bucket in debt by at most one large IO); a value that is not a number fails `r`.
    void save(state::Writer& w, Nanos now) const;
    void load(state::Reader& r, Nanos now);

    bool credit_mode() const { return spec_.burst == BurstMode::Credit && spec_.rate > 0; }
    double credits() const { return credits_; }
    double credit_capacity() const { return spec_.credit_capacity; }

private:
    bool uses_base() const { return spec_.rate > 0 && spec_.burst != BurstMode::OnDemand; }
    bool uses_peak() const { return spec_.burst != BurstMode::Off && spec_.burst_rate > 0; }

    LimiterSpec spec_;
    double tokens_ = 0;
    double credits_ = 0;
    double peak_ = 0;
    Nanos last_ = 0;
};

// The IOPS (unit 1) or bandwidth (unit: the accounting unit) limiter of a set of caps.
Limiter caps_limiter(const Caps& c, double rate, double burst_rate, double unit, Nanos start);
// The credit banks of a pair of caps limiters as they would stand at `now`, leaving them as
// they are: they move only with admissions, in model time.
Credits credits_at(const Limiter& iops, const Limiter& bytes, Nanos now);

} // namespace hvstor::perf::detail
