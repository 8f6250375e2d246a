// An Azure-like disk: a Backend that wraps another one (the bytes) and decides when each
// request is issued to it (IOPS and bandwidth caps with bursting, a host queue, an optional
// outstanding limit, shared VM caps) and when it completes towards the guest (issue time plus
// a sampled service latency, or the inner completion if that is later).
//
// Every request completes exactly once. Requests the inner backend would refuse (range,
// alignment, read-only) complete at once with its error and cost nothing.
// Destroying a model with requests still queued or in service lifts every cap and latency,
// issues what is queued, and waits for the inner backend to complete it all.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "hvstor/backend/backend.h"
#include "hvstor/perf/clock.h"
#include "hvstor/perf/config.h"
#include "hvstor/perf/stats.h"
#include "hvstor/perf/vm.h"
#include "hvstor/state.h"

namespace hvstor::perf {

class ModelBackend : public backend::Backend {
public:
    virtual Stats stats() = 0;
    virtual const ModelConfig& config() const = 0;
    virtual backend::Backend& inner() = 0;
    virtual Clock& clock() = 0;
    // The guest that sent the requests is gone: a machine reset (QEMU waits for the disk's
    // requests under its big lock), the disk's unplug. From abandon(true) until
    // abandon(false), every request that has not reached the inner backend completes at once
    // with -ECANCELED, those submitted meanwhile too; those at the inner backend complete
    // when it finishes them, without their modelled latency. So a reset or an unplug waits
    // for the storage only, never for the caps. Cancelled requests cost the disk's own caps
    // nothing. Past them, waiting for the shared caps (a model object's, the VM's), a
    // request has reserved its time there: abandon(false), which ends a machine reset once
    // every disk cancelled what it held, starts the shared caps afresh (VmLimits::restart).
    // An unplug never calls it: the disks sharing caps with the removed one still see its
    // cancelled requests' reservations, as if those had run.
    virtual void abandon(bool on) = 0;
    // Saved state (savevm, migration): the disk's own burst buckets (base tokens, credits,
    // peak) as they stand now, tagged with the model's settings so that a load into a disk
    // with other caps is refused. A load sets them as of the model's own now: time while
    // the VM was saved does not count. Not saved: the shared caps' buckets (a model
    // object's, the VM's), the statistics, requests (their controller carries them).
    virtual void save(state::Writer& w) = 0;
    virtual bool load(state::Reader& r) = 0;
};

// `clock`: nullptr for the host's monotonic clock (the model then owns one timer thread);
// otherwise it must outlive the model. `vm` may be null. On a VirtualClock, drain() moves the
// clock forward until everything has completed.
// nullptr with a message in `err` when the settings are unusable or the timeline file cannot
// be opened.
std::unique_ptr<ModelBackend> make_model(std::unique_ptr<backend::Backend> inner,
                                         const ModelConfig& cfg, Clock* clock,
                                         std::shared_ptr<VmLimits> vm, std::string& err);

// The same from a property string (parse_model_config), on the host clock: what a QEMU disk
// property needs. `inner` is released on failure.
std::unique_ptr<ModelBackend> make_model(std::unique_ptr<backend::Backend> inner, std::string_view settings,
                                         std::shared_ptr<VmLimits> vm, std::string& err);

} // namespace hvstor::perf
