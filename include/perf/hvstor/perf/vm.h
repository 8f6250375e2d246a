// Shared caps: a VM's, shared by every disk of one VM, or a group's, shared by the disks given
// one model object. A disk's IO passes its own caps first and
// then these, in the order IOs leave their disks (first come, first served across disks).
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "hvstor/perf/clock.h"
#include "hvstor/perf/config.h"
#include "hvstor/perf/stats.h"

namespace hvstor::perf {

class VmLimits {
public:
    // nullptr with a message in `err` when the settings are unusable.
    static std::shared_ptr<VmLimits> create(const VmConfig& cfg, std::string& err);
    // From a property string (parse_vm_config).
    static std::shared_ptr<VmLimits> create(std::string_view settings, std::string& err);
    // A group's caps: the caps of `cfg` (its io-unit too), shared by every disk given the
    // object (as QEMU's throttle groups share theirs); each disk still passes its own first.
    static std::shared_ptr<VmLimits> group(const ModelConfig& cfg);
    // IOs pass `first`'s caps, then `then`'s (a group's, then the VM's); either may be null
    // (`then` alone when `first` is). credits() are `then`'s, none without it: a disk's
    // vm_credits are the VM's only. The chain keeps both alive.
    static std::shared_ptr<VmLimits> chain(std::shared_ptr<VmLimits> first, std::shared_ptr<VmLimits> then);
    virtual ~VmLimits() = default;

    const VmConfig& config() const { return cfg_; }

    // The earliest time at or after `now` at which an IO costing `units` IOs and `bytes`
    // bytes passes, after every IO reserved before it; it is counted as passing then. kNever
    // when that is more than 146 years ahead: it never passes. Every disk sharing this object
    // must use the same clock.
    virtual Nanos reserve(double units, double bytes, Nanos now) = 0;
    virtual Credits credits(Nanos now) = 0;
    // The caps start again as at the VM's start, from the next reservation on: what was
    // reserved before is forgotten. For a machine reset, once every disk has cancelled what
    // it had reserved and not issued (ModelBackend::abandon).
    virtual void restart() = 0;

protected:
    explicit VmLimits(const VmConfig& cfg) : cfg_(cfg) {}

private:
    VmConfig cfg_;
};

} // namespace hvstor::perf
