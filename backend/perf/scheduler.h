// Admission for one modelled disk: the host queues, the caps (the disk's, each direction's,
// the VM's), the outstanding limit, the service latency, and the heap of the times at which
// IOs leave the VM's caps and fall due. Plain values in, decisions out: no threads, clock,
// Backend or lock of its own. The caller serializes the calls and says what time it is;
// times must not go backwards.
#pragma once

#include <cstdint>
#include <vector>

#include "batch.h"
#include "hvstor/backend/backend.h"
#include "hvstor/perf/clock.h"
#include "hvstor/perf/config.h"
#include "hvstor/perf/stats.h"
#include "hvstor/perf/vm.h"
#include "latency.h"
#include "limiter.h"

namespace hvstor::perf::detail {

// One IO as the scheduler sees it. The caller owns the storage, fills the first three fields
// before arrive() and keeps the entry until the scheduler reports it done.
struct Entry {
    backend::Op op = backend::Op::Read;
    uint64_t length = 0;
    uint32_t channel = 0;  // round-robin queue; folded into kMaxChannels

    Entry* next = nullptr;  // queue link
    Nanos arrival = 0;
    Nanos issued = 0;  // when it left the host (model time, may be before the call's now)
    Nanos due = 0;     // issued + the sampled service latency
    Nanos finished = 0;  // when the model finished it: due, or when served if that was later
    double units = 0, bytes = 0;  // its cost against IOPS and bandwidth caps
    uint32_t gen = 0;  // bumped when done, so heap events of a finished IO go stale
    uint8_t dir = 0;   // 0: read; 1: write, flush, discard, write-zeroes
    bool served = false;  // the inner backend has completed it
    bool due_passed = false;
    bool cancelled = false;  // done by cancel() without reaching the inner backend
};

// The limit that holds IOs back (hvstor_perf_throttled's limiter: the numbers are the trace's).
enum class Limit : uint8_t {
    None = 0,         // nothing, or a limit not named here
    DiskIops = 1,     // the disk's IOPS cap (its burst included)
    DiskBytes = 2,    // the disk's bandwidth cap
    DirIops = 3,      // the read or write IOPS cap
    DirBytes = 4,     // the read or write bandwidth cap
    Vm = 5,           // the shared caps: a model object's (its disks together) or the VM's
    Outstanding = 6,  // max-outstanding
};

// What one call decided, in order: IOs to issue to the inner backend, IOs to complete. And
// whether it newly held the queue back: by which limit, for how long from the call's now (0:
// until a completion frees a slot).
struct Decisions {
    Batch<Entry*> issue;
    Batch<Entry*> done;
    Limit held_by = Limit::None;
    Nanos held_for = 0;
};

class Scheduler {
public:
    // `vm` may be null; otherwise it must outlive the scheduler.
    Scheduler(const ModelConfig& cfg, VmLimits* vm, Nanos now);

    // A new IO joins the host queue. dispatch() then lets through what may go.
    void arrive(Entry* e, Nanos now);
    void dispatch(Nanos now, Decisions& out);
    // Handles the events due by `now` (VM admissions, latencies running out), then dispatches.
    void expire(Nanos now, Decisions& out);
    // The inner backend completed `e`. It is done (and the queue dispatched) if its latency
    // has run out too; false when nothing changed.
    bool served(Entry* e, Nanos now, Decisions& out);
    // From now on no cap, limit or latency: everything queued is issued now, and every IO
    // is done as soon as the inner backend completes it.
    void shutdown(Nanos now, Decisions& out);
    // The guest that sent the IOs is gone (a machine reset, the disk's unplug): every IO that
    // has not reached the inner backend (in a host queue, or past the disk's caps waiting for
    // the VM's) is done now, cancelled, and costs nothing more; every IO at the inner backend
    // is done as soon as it completes there (its latency is dropped). Caps and latencies
    // apply as before to IOs that arrive afterwards.
    void cancel(Nanos now, Decisions& out);

    // When expire() next has something to do; kNever when nothing.
    Nanos next_event() const;

    uint32_t host_queue() const { return queued_ + vm_waiting_; }
    uint32_t in_service() const { return in_service_; }
    uint64_t cost_units() const { return units_; }
    // The disk's burst buckets as they stand at `now`.
    Credits credits(Nanos now) const;
    // Saved state: the disk's own buckets (its caps, each direction's), as of `now`. A load
    // takes all or none of them.
    void save(state::Writer& w, Nanos now) const;
    bool load(state::Reader& r, Nanos now);

private:
    enum class EventKind : uint8_t { Issue, Due };
    struct Event {
        Nanos t;
        uint64_t seq;  // ties in push order
        Entry* e;
        uint32_t gen;
        EventKind kind;
    };
    struct Later {
        bool operator()(const Event& a, const Event& b) const { return a.t != b.t ? a.t > b.t : a.seq > b.seq; }
    };
    struct Queue {
        Entry* head = nullptr;
        Entry* tail = nullptr;
        bool empty() const { return head == nullptr; }
        void push(Entry* e);
        Entry* pop();
    };

    void enqueue(Entry* e);
    Nanos dir_wait(const Entry* e) const;
    Nanos shared_wait(const Entry* e) const;
    int consider(const Queue& q, Nanos& best) const;
    Entry* pick(Nanos& wait);
    Entry* pick_fifo(Nanos& wait);
    Entry* pick_per_direction(Nanos& wait);
    Entry* pick_round_robin(Nanos& wait);
    Limit holder(Nanos wait) const;
    void refill(Nanos t);
    void admit(Entry* e, Nanos at, Nanos now, Decisions& out);
    void issue(Entry* e, Nanos at, Decisions& out);
    void finish(Entry* e, Decisions& out);
    void cancel_queue(Queue& q, Nanos now, Decisions& out);
    void push_event(Nanos t, Entry* e, EventKind kind);
    Event pop_event();
    void handle(const Event& ev, Nanos now, Decisions& out);

    const Discipline discipline_;
    const uint32_t max_outstanding_;
    const uint64_t io_unit_;
    VmLimits* const vm_;
    LatencyModel lat_;
    Rng rng_;
    Limiter iops_, bytes_;
    Limiter dir_iops_[2], dir_bytes_[2];

    Queue fifo_;
    Queue dirq_[2];
    int turn_ = 0;  // per-direction: the direction whose turn it is
    std::vector<Queue> chan_;
    std::vector<uint32_t> rr_;  // channels with a non-empty queue, in service order
    uint32_t queued_ = 0;       // in the disk's queues
    uint32_t vm_waiting_ = 0;   // past the disk's caps, waiting for the VM's
    uint32_t active_ = 0;       // past the disk's caps, not done
    uint32_t in_service_ = 0;   // issued, not done
    uint64_t units_ = 0;
    std::vector<Event> heap_;
    uint64_t seq_ = 0;
    Nanos retry_at_ = kNever;  // when the queue head's tokens will suffice
    bool at_outstanding_ = false;  // dispatch last stopped at max-outstanding (reported once)
    bool shutdown_ = false;
};

} // namespace hvstor::perf::detail
