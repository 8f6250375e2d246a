#include <algorithm>
#include <mutex>

#include "hvstor/perf/vm.h"
#include "limiter.h"
#include "saturate.h"

namespace hvstor::perf {
namespace {

// The VM never queues anything itself: each IO reserves the moment it will pass, which keeps
// disks first come, first served at the VM without one disk's timer issuing another's IO.
class VmLimitsImpl final : public VmLimits {
public:
    // `unit`: the bytes one accounting unit of the bandwidth bucket holds.
    explicit VmLimitsImpl(const VmConfig& cfg, double unit = 256 * 1024) : VmLimits(cfg), unit_(unit) {}

    Nanos reserve(double units, double bytes, Nanos now) override {
        std::lock_guard lock(mu_);
        start(now);
        Nanos t = std::max(now, iops_.time());
        iops_.refill(t);
        bytes_.refill(t);
        t = detail::deadline_after(t, std::max(iops_.wait(units), bytes_.wait(bytes)));
        iops_.refill(t);
        bytes_.refill(t);
        iops_.take(units);
        bytes_.take(bytes);
        return t;
    }

    Credits credits(Nanos now) override {
        std::lock_guard lock(mu_);
        start(now);
        // Not refilled here: that would move the VM's time past IOs still to come.
        return detail::credits_at(iops_, bytes_, now);
    }

    void restart() override {
        std::lock_guard lock(mu_);
        started_ = false;
    }

private:
    // The buckets start counting at the first disk's first use, on that disk's clock.
    void start(Nanos now) {
        if (started_) return;
        started_ = true;
        const Caps& c = config().caps;
        iops_ = detail::caps_limiter(c, c.iops, c.burst_iops, 1, now);
        bytes_ = detail::caps_limiter(c, c.bytes_per_s, c.burst_bytes_per_s, unit_, now);
    }

    const double unit_;  // a VM has no io-unit setting: Azure's 256 KiB; a group its disks'
    std::mutex mu_;
    bool started_ = false;
    detail::Limiter iops_, bytes_;
};

// A reservation passes the first caps, then the second (if any) at the time the first lets it
// go. Its credits are the second's: the VM's; none without a VM.
class ChainedLimits final : public VmLimits {
public:
    ChainedLimits(std::shared_ptr<VmLimits> first, std::shared_ptr<VmLimits> then)
        : VmLimits(then ? then->config() : first->config()), first_(std::move(first)), then_(std::move(then)) {}

    Nanos reserve(double units, double bytes, Nanos now) override {
        const Nanos t = first_->reserve(units, bytes, now);
        return t == kNever || !then_ ? t : then_->reserve(units, bytes, t);
    }

    Credits credits(Nanos now) override { return then_ ? then_->credits(now) : Credits{}; }

    void restart() override {
        first_->restart();
        if (then_) then_->restart();
    }

private:
    const std::shared_ptr<VmLimits> first_, then_;
};

} // namespace

std::shared_ptr<VmLimits> VmLimits::group(const ModelConfig& cfg) {
    VmConfig vc;
    vc.profile = cfg.profile;
    vc.caps = cfg.caps;  // already time-scaled
    vc.time_scale = cfg.time_scale;
    return std::make_shared<VmLimitsImpl>(vc, double(cfg.io_unit));
}

std::shared_ptr<VmLimits> VmLimits::chain(std::shared_ptr<VmLimits> first, std::shared_ptr<VmLimits> then) {
    if (!first) return then;
    return std::make_shared<ChainedLimits>(std::move(first), std::move(then));
}

std::shared_ptr<VmLimits> VmLimits::create(const VmConfig& cfg, std::string& err) {
    if (cfg.caps.iops < 0 || cfg.caps.bytes_per_s < 0) {
        err = "perf: VM caps must not be negative";
        return nullptr;
    }
    return std::make_shared<VmLimitsImpl>(cfg);
}

std::shared_ptr<VmLimits> VmLimits::create(std::string_view settings, std::string& err) {
    VmConfig cfg;
    if (!parse_vm_config(settings, cfg, err)) return nullptr;
    return create(cfg, err);
}

} // namespace hvstor::perf
