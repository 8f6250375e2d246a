#include "scheduler.h"

#include <algorithm>
#include <cmath>

#include "hvstor/trace.h"
#include "saturate.h"

namespace hvstor::perf::detail {
namespace {

constexpr uint32_t kMaxChannels = 4096;  // channel ids are folded into this many queues

Limiter plain(double rate, Nanos window, double unit, Nanos now) {
    return Limiter(make_spec(rate, BurstMode::Off, 0, 0, 0, window, unit), now);
}

} // namespace

void Scheduler::Queue::push(Entry* e) {
    e->next = nullptr;
    if (tail) tail->next = e;
    else head = e;
    tail = e;
}

Entry* Scheduler::Queue::pop() {
    Entry* e = head;
    head = e->next;
    if (!head) tail = nullptr;
    e->next = nullptr;
    return e;
}

Scheduler::Scheduler(const ModelConfig& cfg, VmLimits* vm, Nanos now)
    : discipline_(cfg.queue), max_outstanding_(cfg.max_outstanding), io_unit_(cfg.io_unit), vm_(vm), lat_(cfg),
      rng_(cfg.seed) {
    const Caps& c = cfg.caps;
    const double unit = double(cfg.io_unit);
    iops_ = caps_limiter(c, c.iops, c.burst_iops, 1, now);
    bytes_ = caps_limiter(c, c.bytes_per_s, c.burst_bytes_per_s, unit, now);
    dir_iops_[0] = plain(cfg.read_iops, c.window, 1, now);
    dir_iops_[1] = plain(cfg.write_iops, c.window, 1, now);
    dir_bytes_[0] = plain(cfg.read_bytes_per_s, c.window, unit, now);
    dir_bytes_[1] = plain(cfg.write_bytes_per_s, c.window, unit, now);
    heap_.reserve(1024);
}

void Scheduler::arrive(Entry* e, Nanos now) {
    const bool data = e->op == backend::Op::Read || e->op == backend::Op::Write;
    e->next = nullptr;
    e->arrival = now;
    e->issued = 0;
    e->due = 0;
    e->channel %= kMaxChannels;
    e->dir = e->op == backend::Op::Read ? 0 : 1;
    e->bytes = data ? double(e->length) : 0;
    e->units = data ? std::max(1.0, std::ceil(double(e->length) / double(io_unit_))) : 1;
    e->served = false;
    e->due_passed = false;
    e->cancelled = false;
    queued_++;
    enqueue(e);
}

void Scheduler::enqueue(Entry* e) {
    switch (discipline_) {
    case Discipline::Fifo:
        fifo_.push(e);
        break;
    case Discipline::PerDirection:
        dirq_[e->dir].push(e);
        break;
    case Discipline::RoundRobin: {
        if (e->channel >= chan_.size()) chan_.resize(e->channel + 1);
        Queue& q = chan_[e->channel];
        if (q.empty()) rr_.push_back(e->channel);
        q.push(e);
        break;
    }
    }
}

Nanos Scheduler::dir_wait(const Entry* e) const {
    return std::max(dir_iops_[e->dir].wait(e->units), dir_bytes_[e->dir].wait(e->bytes));
}

Nanos Scheduler::shared_wait(const Entry* e) const { return std::max(iops_.wait(e->units), bytes_.wait(e->bytes)); }

// For the disciplines with several queues. 1: take the head now; 0: skip this queue; -1: stop,
// the head keeps its turn. A head held back only by its own direction's cap lets other queues
// go; one held back by the shared caps keeps its turn, so big IOs are not starved by small
// ones. `best` becomes the shortest wait seen.
int Scheduler::consider(const Queue& q, Nanos& best) const {
    if (q.empty()) return 0;
    if (shutdown_) return 1;
    const Nanos wd = dir_wait(q.head);
    if (wd > 0) {
        best = std::min(best, wd);
        return 0;
    }
    const Nanos ws = shared_wait(q.head);
    if (ws > 0) {
        best = std::min(best, ws);
        return -1;
    }
    return 1;
}

// The next IO allowed through now, removed from its queue; else nullptr and how long until
// one might be.
Entry* Scheduler::pick(Nanos& wait) {
    switch (discipline_) {
    case Discipline::Fifo:
        return pick_fifo(wait);
    case Discipline::PerDirection:
        return pick_per_direction(wait);
    case Discipline::RoundRobin:
        return pick_round_robin(wait);
    }
    return nullptr;
}

Entry* Scheduler::pick_fifo(Nanos& wait) {
    const Entry* h = fifo_.head;
    const Nanos w = shutdown_ ? 0 : std::max(dir_wait(h), shared_wait(h));
    if (w > 0) {
        wait = w;
        return nullptr;
    }
    return fifo_.pop();
}

Entry* Scheduler::pick_per_direction(Nanos& wait) {
    Nanos best = kNever;
    for (int k = 0; k < 2; k++) {
        const int d = (turn_ + k) % 2;
        const int r = consider(dirq_[d], best);
        if (r < 0) break;
        if (r > 0) {
            turn_ = 1 - d;
            return dirq_[d].pop();
        }
    }
    wait = best;
    return nullptr;
}

Entry* Scheduler::pick_round_robin(Nanos& wait) {
    Nanos best = kNever;
    for (size_t i = 0; i < rr_.size(); i++) {
        const uint32_t ch = rr_[i];
        const int r = consider(chan_[ch], best);
        if (r < 0) break;
        if (r > 0) {
            Entry* e = chan_[ch].pop();
            rr_.erase(rr_.begin() + ptrdiff_t(i));
            if (!chan_[ch].empty()) rr_.push_back(ch);
            return e;
        }
    }
    wait = best;
    return nullptr;
}

// Admission decisions are made in model time: when the caller comes late (a timer that fired
// late on a busy host), the IOs that should have gone meanwhile are admitted at the instants
// they were due, so the caps hold exactly whatever the wake-up jitter.
void Scheduler::dispatch(Nanos now, Decisions& out) {
    const Nanos parked = retry_at_;
    Nanos t = retry_at_ < now ? retry_at_ : now;
    retry_at_ = kNever;
    while (queued_ > 0) {
        // A completion dispatches again when a slot frees up.
        if (!shutdown_ && max_outstanding_ && active_ >= max_outstanding_) {
            if (!at_outstanding_) {
                out.held_by = Limit::Outstanding;
                out.held_for = 0;
            }
            at_outstanding_ = true;
            return;
        }
        at_outstanding_ = false;
        refill(t);
        Nanos wait = kNever;
        Entry* e = pick(wait);
        if (e) {
            t = std::max(t, e->arrival);
            admit(e, t, now, out);
            continue;
        }
        if (wait == kNever) return;
        const Nanos next = deadline_after(t, wait);
        if (next > now) {
            retry_at_ = next;  // kNever past the horizon: wait for the next arrival or completion
            // Once per deadline: a queue that stays held reports again only when it moves.
            if (next != parked && next != kNever && tracing()) {
                out.held_by = holder(wait);
                out.held_for = next - now;
            }
            return;
        }
        t = next;
    }
}

// Which cap makes a queue head wait `wait` (what pick() reported): the first head with a
// limiter whose own wait is exactly that.
Limit Scheduler::holder(Nanos wait) const {
    const auto of = [&](const Entry* h) {
        if (dir_iops_[h->dir].wait(h->units) == wait) return Limit::DirIops;
        if (dir_bytes_[h->dir].wait(h->bytes) == wait) return Limit::DirBytes;
        if (iops_.wait(h->units) == wait) return Limit::DiskIops;
        if (bytes_.wait(h->bytes) == wait) return Limit::DiskBytes;
        return Limit::None;
    };
    Limit l = Limit::None;
    const auto look = [&](const Queue& q) {
        if (l == Limit::None && !q.empty()) l = of(q.head);
    };
    look(fifo_);
    for (const Queue& q : dirq_) look(q);
    for (uint32_t ch : rr_) look(chan_[ch]);
    return l;
}

void Scheduler::refill(Nanos t) {
    iops_.refill(t);
    bytes_.refill(t);
    for (int d = 0; d < 2; d++) {
        dir_iops_[d].refill(t);
        dir_bytes_[d].refill(t);
    }
}

void Scheduler::admit(Entry* e, Nanos at, Nanos now, Decisions& out) {
    queued_--;
    iops_.take(e->units);
    bytes_.take(e->bytes);
    dir_iops_[e->dir].take(e->units);
    dir_bytes_[e->dir].take(e->bytes);
    units_ += uint64_t(e->units);
    active_++;
    if (vm_ && !shutdown_) {
        const Nanos t = vm_->reserve(e->units, e->bytes, at);
        if (t > now) {
            out.held_by = Limit::Vm;
            out.held_for = t - now;
            vm_waiting_++;
            push_event(t, e, EventKind::Issue);
            return;
        }
        at = t;
    }
    issue(e, at, out);
}

void Scheduler::issue(Entry* e, Nanos at, Decisions& out) {
    e->issued = at;
    in_service_++;
    const Nanos lat = shutdown_ ? 0 : lat_.sample(e->op, e->length, rng_);
    e->due = deadline_after(at, lat);
    if (lat > 0) push_event(e->due, e, EventKind::Due);
    out.issue.push(e);
}

void Scheduler::finish(Entry* e, Decisions& out) {
    active_--;
    in_service_--;
    e->gen++;
    out.done.push(e);
}

void Scheduler::push_event(Nanos t, Entry* e, EventKind kind) {
    heap_.push_back({t, seq_++, e, e->gen, kind});
    std::push_heap(heap_.begin(), heap_.end(), Later{});
}

Scheduler::Event Scheduler::pop_event() {
    std::pop_heap(heap_.begin(), heap_.end(), Later{});
    const Event ev = heap_.back();
    heap_.pop_back();
    return ev;
}

void Scheduler::handle(const Event& ev, Nanos now, Decisions& out) {
    Entry* e = ev.e;
    if (e->gen != ev.gen) return;
    if (ev.kind == EventKind::Issue) {
        vm_waiting_--;
        issue(e, shutdown_ ? now : ev.t, out);
    } else if (e->served) {
        e->finished = shutdown_ ? now : ev.t;
        finish(e, out);
    } else {
        e->due_passed = true;
    }
}

void Scheduler::expire(Nanos now, Decisions& out) {
    while (!heap_.empty() && heap_.front().t <= now) handle(pop_event(), now, out);
    dispatch(now, out);
}

bool Scheduler::served(Entry* e, Nanos now, Decisions& out) {
    e->served = true;
    if (!shutdown_ && !e->due_passed && e->due > now) return false;
    e->finished = now;
    finish(e, out);
    dispatch(now, out);
    return true;
}

void Scheduler::shutdown(Nanos now, Decisions& out) {
    shutdown_ = true;
    while (!heap_.empty()) handle(pop_event(), now, out);
    dispatch(now, out);
}

void Scheduler::cancel_queue(Queue& q, Nanos now, Decisions& out) {
    while (!q.empty()) {
        Entry* e = q.pop();
        queued_--;
        e->cancelled = true;
        e->finished = now;
        e->gen++;
        out.done.push(e);
    }
}

void Scheduler::cancel(Nanos now, Decisions& out) {
    cancel_queue(fifo_, now, out);
    for (Queue& q : dirq_) cancel_queue(q, now, out);
    for (Queue& q : chan_) cancel_queue(q, now, out);
    rr_.clear();
    retry_at_ = kNever;
    at_outstanding_ = false;
    while (!heap_.empty()) {
        const Event ev = pop_event();
        Entry* e = ev.e;
        if (e->gen != ev.gen) continue;
        if (ev.kind == EventKind::Issue) {
            // Past the disk's caps, never issued: its VM reservation stays spent.
            vm_waiting_--;
            active_--;
            e->cancelled = true;
            e->finished = now;
            e->gen++;
            out.done.push(e);
        } else if (e->served) {
            e->finished = now;
            finish(e, out);
        } else {
            e->due_passed = true;
        }
    }
}

Nanos Scheduler::next_event() const {
    Nanos next = retry_at_;
    if (!heap_.empty()) next = std::min(next, heap_.front().t);
    return next;
}

Credits Scheduler::credits(Nanos now) const { return credits_at(iops_, bytes_, now); }

void Scheduler::save(state::Writer& w, Nanos now) const {
    for (const Limiter* l : {&iops_, &bytes_, &dir_iops_[0], &dir_iops_[1], &dir_bytes_[0], &dir_bytes_[1]})
        l->save(w, now);
}

bool Scheduler::load(state::Reader& r, Nanos now) {
    Limiter loaded[6] = {iops_, bytes_, dir_iops_[0], dir_iops_[1], dir_bytes_[0], dir_bytes_[1]};
    for (Limiter& l : loaded) l.load(r, now);
    if (!r.ok()) return false;
    iops_ = loaded[0];
    bytes_ = loaded[1];
    dir_iops_[0] = loaded[2];
    dir_iops_[1] = loaded[3];
    dir_bytes_[0] = loaded[4];
    dir_bytes_[1] = loaded[5];
    retry_at_ = kNever; // the next dispatch works out the head's wait afresh
    return true;
}

} // namespace hvstor::perf::detail
