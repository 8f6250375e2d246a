// The model's state lives under one mutex per disk; every path (submit, inner completion,
// timer) takes it once, decides what to issue and what to complete, and does both after
// unlocking, so completions may re-enter submit() and inner backends may complete inline.
#include "hvstor/perf/model.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <vector>

#include "../validate.h"
#include "hvstor/perf/timeline.h"
#include "latency.h"
#include "limiter.h"

namespace hvstor::perf {
namespace {
} // namespace


namespace {

using backend::Op;
using backend::Request;

constexpr uint32_t kMaxChannels = 4096;  // channel ids are folded into this many queues

struct Io {
    Request inner;            // what the inner backend sees; opaque points back here
    Request* guest = nullptr;
    Io* next = nullptr;       // queue link, or free list link
    Nanos arrival = 0, due = 0;
    double units = 0, bytes = 0;
    uint32_t channel = 0;
    uint32_t gen = 0;         // bumped on release: heap events of a finished IO go stale
    uint8_t dir = 0;          // 0: read, 1: write, flush, discard, write-zeroes
    bool inner_done = false;
    bool due_passed = false;
};

struct Queue {
    Io* head = nullptr;
    Io* tail = nullptr;
    bool empty() const { return head == nullptr; }
    void push(Io* io) {
        io->next = nullptr;
        if (tail) tail->next = io;
        else head = io;
        tail = io;
    }
    Io* pop() {
        Io* io = head;
        head = io->next;
        if (!head) tail = nullptr;
        io->next = nullptr;
        return io;
    }
};

enum class EventKind : uint8_t { Issue, Due };

struct Event {
    Nanos t;
    uint64_t seq;
    Io* io;
    uint32_t gen;
    EventKind kind;
};

struct Later {
    bool operator()(const Event& a, const Event& b) const { return a.t != b.t ? a.t > b.t : a.seq > b.seq; }
};

// Requests gathered under the lock and acted on after it; most batches fit inline.
class Batch {
public:
    void push(Request* r) {
        if (n_ < inline_.size()) {
            inline_[n_++] = r;
            return;
        }
        if (more_.empty()) more_.assign(inline_.begin(), inline_.end());
        more_.push_back(r);
        n_++;
    }
    bool empty() const { return n_ == 0; }
    size_t size() const { return n_; }
    std::span<Request* const> span() const {
        if (n_ <= inline_.size()) return {inline_.data(), n_};
        return {more_.data(), more_.size()};
    }

private:
    std::array<Request*, 32> inline_{};
    std::vector<Request*> more_;
    size_t n_ = 0;
};

struct Work {
    Batch issue;  // inner requests
    Batch done;   // guest requests
};

// Accepted and not yet completed, for drain().
class Pending {
public:
    void add(size_t n) {
        std::lock_guard lock(mu_);
        count_ += n;
    }
    // Under the lock, so that a drainer woken here may destroy the model as soon as we unlock.
    void done(size_t n) {
        std::lock_guard lock(mu_);
        count_ -= n;
        if (count_ == 0) cv_.notify_all();
    }
    bool wait_for(Nanos ns) {
        std::unique_lock lock(mu_);
        return cv_.wait_for(lock, std::chrono::nanoseconds(ns), [this] { return count_ == 0; });
    }

private:
    std::mutex mu_;
    std::condition_variable cv_;
    size_t count_ = 0;
};

struct IntervalAcc {
    uint64_t ios = 0, reads = 0, writes = 0, bytes = 0, issued = 0;
    double throttle_sum = 0;
    Nanos throttle_max = 0;
    double queue_area = 0;  // depth x ns
    uint32_t queue_max = 0;
    Histogram latency;
};

class Model final : public ModelBackend, private backend::CompletionSink {
public:
    Model(std::unique_ptr<backend::Backend> inner, const ModelConfig& cfg, Clock* clock,
          std::shared_ptr<VmLimits> vm)
        : inner_(std::move(inner)), cfg_(cfg), own_clock_(clock ? nullptr : std::make_unique<HostClock>(cfg.timer_min_period)),
          clock_(clock ? *clock : *own_clock_), vm_(std::move(vm)), lat_(cfg), rng_(cfg.seed) {
        const Nanos now = clock_.now();
        const Caps& c = cfg_.caps;
        const double unit = double(cfg_.io_unit);
        auto plain = [&](double rate, double u) {
            return detail::Limiter(detail::make_spec(rate, BurstMode::Off, 0, 0, 0, c.window, u), now);
        };
        iops_ = detail::Limiter(detail::make_spec(c.iops, c.burst, c.burst_iops, c.burst_duration, c.burst_start, c.window, 1), now);
        bytes_ = detail::Limiter(detail::make_spec(c.bytes_per_s, c.burst, c.burst_bytes_per_s, c.burst_duration, c.burst_start, c.window, unit), now);
        dir_iops_[0] = plain(cfg_.read_iops, 1);
        dir_iops_[1] = plain(cfg_.write_iops, 1);
        dir_bytes_[0] = plain(cfg_.read_bytes_per_s, unit);
        dir_bytes_[1] = plain(cfg_.write_bytes_per_s, unit);
        last_now_ = now;
        queue_t_ = now;
        cur_start_ = now;
        next_roll_ = (now / cfg_.stats_interval + 1) * cfg_.stats_interval;
        heap_.reserve(1024);
        timer_ = clock_.make_timer([this] { on_timer(); });
    }

    bool open_timeline(std::string& err) {
        if (cfg_.timeline.empty()) return true;
        timeline_ = TimelineWriter::open(clock_, cfg_.timeline, cfg_.stats_interval, err);
        if (!timeline_) return false;
        timeline_->add(cfg_.name.empty() ? inner_->describe() : cfg_.name, *this);
        return true;
    }

    ~Model() override {
        timeline_.reset();  // it reads our statistics from its own timer
        Work w;
        {
            std::lock_guard lock(mu_);
            shutdown_ = true;
            const Nanos now = tick();
            while (!heap_.empty()) {
                const Event ev = pop_event();
                handle(ev, now, w);
            }
            dispatch(now, w);
        }
        run(w);
        while (!pending_.wait_for(10 * kMs)) {
        }
        timer_.reset();
        inner_->drain();
    }

    Model(const Model&) = delete;
    Model& operator=(const Model&) = delete;

    uint64_t size() const override { return inner_->size(); }
    uint32_t block_size() const override { return inner_->block_size(); }
    bool read_only() const override { return inner_->read_only(); }
    std::string describe() const override { return "perf(" + summarize(cfg_) + ") over " + inner_->describe(); }

    void submit(std::span<Request* const> reqs) override {
        if (reqs.empty()) return;
        pending_.add(reqs.size());
        Work w;
        {
            std::lock_guard lock(mu_);
            const Nanos now = tick();
            for (Request* r : reqs) {
                const int e = backend::detail::validate(*r, inner_->size(), inner_->block_size(), inner_->read_only());
                if (e != 0) {
                    r->result = e;
                    rejected_++;
                    w.done.push(r);
                    continue;
                }
                enqueue(make_io(r, r->queue, now), now);
            }
            dispatch(now, w);
            schedule();
        }
        run(w);
    }

    void drain() override {
        // On a clock that moves only when told, waiting alone would never end.
        while (!pending_.wait_for(clock_.step() ? 0 : 10 * kMs)) {
        }
    }

    Stats stats() override {
        Stats s;
        std::lock_guard lock(mu_);
        const Nanos now = tick();
        s.now = now;
        s.time_scale = cfg_.time_scale;
        s.ios = tot_ios_;
        s.reads = tot_reads_;
        s.writes = tot_writes_;
        s.flushes = tot_flushes_;
        s.others = tot_others_;
        s.errors = tot_errors_ + rejected_;
        s.bytes_read = tot_bytes_read_;
        s.bytes_written = tot_bytes_written_;
        s.cost_units = tot_units_;
        s.issued = tot_issued_;
        s.throttle_total = tot_throttle_;
        s.throttle_max = tot_throttle_max_;
        s.latency = tot_latency_.summary();
        s.queued = host_queue();
        s.in_service = in_service_;
        // Copies: the buckets themselves only move with admissions, in model time.
        detail::Limiter iops = iops_, bytes = bytes_;
        iops.refill(now);
        bytes.refill(now);
        s.credits.enabled = iops.credit_mode() || bytes.credit_mode();
        s.credits.iops = iops.credits();
        s.credits.iops_capacity = iops.credit_capacity();
        s.credits.bytes = bytes.credits();
        s.credits.bytes_capacity = bytes.credit_capacity();
        if (vm_) s.vm_credits = vm_->credits(now);
        s.last = last_;
        return s;
    }

    const ModelConfig& config() const override { return cfg_; }
    backend::Backend& inner() override { return *inner_; }
    Clock& clock() override { return clock_; }

private:
    // ---- time and statistics, all under mu_ ----

    Nanos tick() {
        const Nanos now = std::max(clock_.now(), last_now_);
        last_now_ = now;
        roll(now);
        return now;
    }

    uint32_t host_queue() const { return queued_ + vm_waiting_; }

    // Host queue depth changes go through here for the time-weighted average.
    void queue_delta(Nanos now, int delta) { change(queued_, now, delta); }
    void vm_delta(Nanos now, int delta) { change(vm_waiting_, now, delta); }
    void change(uint32_t& counter, Nanos now, int delta) {
        cur_.queue_area += double(host_queue()) * double(now - queue_t_);
        queue_t_ = now;
        counter = uint32_t(int64_t(counter) + delta);
        cur_.queue_max = std::max(cur_.queue_max, host_queue());
    }

    // Intervals are aligned to multiples of the interval on the clock (the first one starts
    // at creation) and closed lazily by the first event (or stats() call) after their end.
    void roll(Nanos now) {
        if (now < next_roll_) return;
        const Nanos len = cfg_.stats_interval;
        const double secs = double(next_roll_ - cur_start_) / 1e9;
        cur_.queue_area += double(host_queue()) * double(next_roll_ - queue_t_);
        queue_t_ = next_roll_;
        IntervalStats& l = last_;
        l = IntervalStats{};
        l.start = cur_start_;
        l.end = next_roll_;
        l.ios = cur_.ios;
        l.reads = cur_.reads;
        l.writes = cur_.writes;
        l.bytes = cur_.bytes;
        l.iops = double(cur_.ios) / secs;
        l.read_iops = double(cur_.reads) / secs;
        l.write_iops = double(cur_.writes) / secs;
        l.mbps = double(cur_.bytes) / secs / 1e6;
        l.latency = cur_.latency.summary();
        l.issued = cur_.issued;
        l.throttle_mean = cur_.issued ? cur_.throttle_sum / double(cur_.issued) : 0;
        l.throttle_max = cur_.throttle_max;
        l.queue_avg = cur_.queue_area / double(next_roll_ - cur_start_);
        l.queue_max = cur_.queue_max;
        reset_interval();
        cur_start_ = next_roll_;
        next_roll_ += len;
        if (now >= next_roll_) {
            // Whole intervals passed without an event: the latest of them is the last one.
            const Nanos end = next_roll_ + (now - next_roll_) / len * len;
            l = IntervalStats{};
            l.start = end - len;
            l.end = end;
            l.queue_avg = host_queue();
            l.queue_max = host_queue();
            queue_t_ = end;
            cur_start_ = end;
            next_roll_ = end + len;
        }
    }

    void reset_interval() {
        cur_.ios = cur_.reads = cur_.writes = cur_.bytes = cur_.issued = 0;
        cur_.throttle_sum = 0;
        cur_.throttle_max = 0;
        cur_.queue_area = 0;
        cur_.queue_max = host_queue();
        cur_.latency.clear();
    }

    // ---- IO records ----

    Io* make_io(Request* r, uint32_t channel, Nanos now) {
        if (!free_) grow();
        Io* io = free_;
        free_ = io->next;
        io->next = nullptr;
        io->guest = r;
        io->inner = Request{};
        io->inner.op = r->op;
        io->inner.fua = r->fua;
        io->inner.offset = r->offset;
        io->inner.length = r->length;
        io->inner.iov = r->iov;
        io->inner.iovcnt = r->iovcnt;
        io->inner.done = this;
        io->inner.opaque = io;
        io->arrival = now;
        io->due = 0;
        io->channel = channel % kMaxChannels;
        io->inner_done = false;
        io->due_passed = false;
        const bool data = r->op == Op::Read || r->op == Op::Write;
        io->dir = r->op == Op::Read ? 0 : 1;
        io->bytes = data ? double(r->length) : 0;
        io->units = data ? std::max(1.0, std::ceil(double(r->length) / double(cfg_.io_unit))) : 1;
        return io;
    }

    void grow() {
        constexpr size_t kChunk = 256;
        chunks_.push_back(std::make_unique<Io[]>(kChunk));
        Io* c = chunks_.back().get();
        for (size_t i = 0; i < kChunk; i++) {
            c[i].next = free_;
            free_ = &c[i];
        }
    }

    void release(Io* io) {
        io->gen++;
        io->next = free_;
        free_ = io;
    }

    // ---- the host queue ----

    void enqueue(Io* io, Nanos now) {
        queue_delta(now, +1);
        switch (cfg_.queue) {
        case Discipline::Fifo:
            fifo_.push(io);
            break;
        case Discipline::PerDirection:
            dirq_[io->dir].push(io);
            break;
        case Discipline::RoundRobin: {
            if (io->channel >= chan_.size()) chan_.resize(io->channel + 1);
            Queue& q = chan_[io->channel];
            if (q.empty()) rr_.push_back(io->channel);
            q.push(io);
            break;
        }
        }
    }

    Nanos dir_wait(const Io* io) const {
        return std::max(dir_iops_[io->dir].wait(io->units), dir_bytes_[io->dir].wait(io->bytes));
    }
    Nanos shared_wait(const Io* io) const { return std::max(iops_.wait(io->units), bytes_.wait(io->bytes)); }

    // The next IO allowed through now, removed from its queue; else nullptr and how long
    // until one might be. A head held back only by its own direction's cap lets other queues
    // go; a head held back by the shared caps keeps its turn, so big IOs are not starved by
    // small ones.
    Io* pick(Nanos& wait) {
        if (cfg_.queue == Discipline::Fifo) {
            const Io* h = fifo_.head;
            const Nanos w = shutdown_ ? 0 : std::max(dir_wait(h), shared_wait(h));
            if (w > 0) {
                wait = w;
                return nullptr;
            }
            return fifo_.pop();
        }
        Nanos best = kNever;
        auto consider = [&](Queue& q) -> int {  // 1: take it, 0: skip, -1: stop
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
        };
        if (cfg_.queue == Discipline::PerDirection) {
            for (int k = 0; k < 2; k++) {
                const int d = (turn_ + k) % 2;
                const int r = consider(dirq_[d]);
                if (r < 0) break;
                if (r > 0) {
                    turn_ = 1 - d;
                    return dirq_[d].pop();
                }
            }
            wait = best;
            return nullptr;
        }
        for (size_t i = 0; i < rr_.size(); i++) {
            const uint32_t ch = rr_[i];
            const int r = consider(chan_[ch]);
            if (r < 0) break;
            if (r > 0) {
                Io* io = chan_[ch].pop();
                rr_.erase(rr_.begin() + ptrdiff_t(i));
                if (!chan_[ch].empty()) rr_.push_back(ch);
                return io;
            }
        }
        wait = best;
        return nullptr;
    }

    // Admission decisions are made in model time: when the timer fires late (a busy host),
    // the IOs it should have let through meanwhile are admitted at the instants they were due,
    // so the caps hold exactly whatever the wake-up jitter.
    void dispatch(Nanos now, Work& w) {
        Nanos t = retry_at_ < now ? retry_at_ : now;
        retry_at_ = kNever;
        while (queued_ > 0) {
            // A completion calls dispatch again when a slot frees up.
            if (!shutdown_ && cfg_.max_outstanding && active_ >= cfg_.max_outstanding) return;
            refill(t);
            Nanos wait = kNever;
            Io* io = pick(wait);
            if (io) {
                t = std::max(t, io->arrival);
                admit(io, t, now, w);
                continue;
            }
            if (wait == kNever) return;
            if (t + wait > now) {
                retry_at_ = t + wait;
                return;
            }
            t += wait;
        }
    }

    void refill(Nanos t) {
        iops_.refill(t);
        bytes_.refill(t);
        for (int d = 0; d < 2; d++) {
            dir_iops_[d].refill(t);
            dir_bytes_[d].refill(t);
        }
    }

    void admit(Io* io, Nanos at, Nanos now, Work& w) {
        queue_delta(now, -1);
        iops_.take(io->units);
        bytes_.take(io->bytes);
        dir_iops_[io->dir].take(io->units);
        dir_bytes_[io->dir].take(io->bytes);
        tot_units_ += uint64_t(io->units);
        active_++;
        if (vm_ && !shutdown_) {
            const Nanos t = vm_->reserve(io->units, io->bytes, at);
            if (t > now) {
                vm_delta(now, +1);
                push_event(t, io, EventKind::Issue);
                return;
            }
            at = t;
        }
        issue(io, at, w);
    }

    void issue(Io* io, Nanos at, Work& w) {
        const Nanos waited = at - io->arrival;
        cur_.issued++;
        cur_.throttle_sum += double(waited);
        cur_.throttle_max = std::max(cur_.throttle_max, waited);
        tot_issued_++;
        tot_throttle_ += waited;
        tot_throttle_max_ = std::max(tot_throttle_max_, waited);
        in_service_++;
        const Nanos lat = shutdown_ ? 0 : lat_.sample(io->inner.op, io->inner.length, rng_);
        io->due = at + lat;
        if (lat > 0) push_event(io->due, io, EventKind::Due);
        w.issue.push(&io->inner);
    }

    void finish(Io* io, Nanos now, Work& w) {
        Request* g = io->guest;
        g->result = io->inner.result;
        const Nanos lat = now - io->arrival;
        tot_latency_.add(lat);
        cur_.latency.add(lat);
        cur_.ios++;
        tot_ios_++;
        if (g->result != 0) tot_errors_++;
        switch (g->op) {
        case Op::Read:
            cur_.reads++;
            cur_.bytes += g->length;
            tot_reads_++;
            tot_bytes_read_ += g->length;
            break;
        case Op::Write:
            cur_.writes++;
            cur_.bytes += g->length;
            tot_writes_++;
            tot_bytes_written_ += g->length;
            break;
        case Op::Flush:
            tot_flushes_++;
            break;
        case Op::Discard:
        case Op::WriteZeroes:
            tot_others_++;
            break;
        }
        w.done.push(g);
        active_--;
        in_service_--;
        release(io);
    }

    // ---- events ----

    void push_event(Nanos t, Io* io, EventKind kind) {
        heap_.push_back({t, seq_++, io, io->gen, kind});
        std::push_heap(heap_.begin(), heap_.end(), Later{});
    }

    Event pop_event() {
        std::pop_heap(heap_.begin(), heap_.end(), Later{});
        const Event ev = heap_.back();
        heap_.pop_back();
        return ev;
    }

    void handle(const Event& ev, Nanos now, Work& w) {
        Io* io = ev.io;
        if (io->gen != ev.gen) return;
        if (ev.kind == EventKind::Issue) {
            vm_delta(now, -1);
            issue(io, shutdown_ ? now : ev.t, w);
        } else if (io->inner_done) {
            finish(io, now, w);
        } else {
            io->due_passed = true;
        }
    }

    void schedule() {
        Nanos next = retry_at_;
        if (!heap_.empty()) next = std::min(next, heap_.front().t);
        if (next < armed_) {
            armed_ = next;
            timer_->arm(next);
        }
    }

    void on_timer() {
        Work w;
        {
            std::lock_guard lock(mu_);
            armed_ = kNever;
            const Nanos now = tick();
            while (!heap_.empty() && heap_.front().t <= now) {
                const Event ev = pop_event();
                handle(ev, now, w);
            }
            dispatch(now, w);
            schedule();
        }
        run(w);
    }

    // The inner backend's completion: any thread, possibly inside inner_->submit().
    void complete(Request* r) override {
        Io* io = static_cast<Io*>(r->opaque);
        Work w;
        {
            std::lock_guard lock(mu_);
            const Nanos now = tick();
            io->inner_done = true;
            if (shutdown_ || io->due_passed || io->due <= now) {
                finish(io, now, w);
                dispatch(now, w);
                schedule();
            }
        }
        run(w);
    }

    void run(Work& w) {
        if (!w.issue.empty()) inner_->submit(w.issue.span());
        if (w.done.empty()) return;
        for (Request* g : w.done.span()) g->done->complete(g);
        pending_.done(w.done.size());
    }

    std::unique_ptr<backend::Backend> inner_;
    ModelConfig cfg_;
    std::unique_ptr<HostClock> own_clock_;
    Clock& clock_;
    std::shared_ptr<VmLimits> vm_;
    detail::LatencyModel lat_;
    Pending pending_;

    std::mutex mu_;
    detail::Rng rng_;
    detail::Limiter iops_, bytes_;
    detail::Limiter dir_iops_[2], dir_bytes_[2];
    Queue fifo_;
    Queue dirq_[2];
    int turn_ = 0;
    std::vector<Queue> chan_;
    std::vector<uint32_t> rr_;  // channels with a non-empty queue, in service order
    uint32_t queued_ = 0;       // in the disk's queues
    uint32_t vm_waiting_ = 0;   // past the disk's caps, waiting for the VM's
    uint32_t active_ = 0;       // past the disk's caps, not completed
    uint32_t in_service_ = 0;
    std::vector<Event> heap_;
    uint64_t seq_ = 0;
    Nanos retry_at_ = kNever;
    Nanos armed_ = kNever;
    bool shutdown_ = false;
    Nanos last_now_ = 0;
    std::vector<std::unique_ptr<Io[]>> chunks_;
    Io* free_ = nullptr;

    Nanos queue_t_ = 0;
    Nanos cur_start_ = 0;
    Nanos next_roll_ = 0;
    IntervalAcc cur_;
    IntervalStats last_;
    Histogram tot_latency_;
    uint64_t tot_ios_ = 0, tot_reads_ = 0, tot_writes_ = 0, tot_flushes_ = 0, tot_others_ = 0;
    uint64_t tot_errors_ = 0, rejected_ = 0, tot_bytes_read_ = 0, tot_bytes_written_ = 0;
    uint64_t tot_units_ = 0, tot_issued_ = 0;
    Nanos tot_throttle_ = 0, tot_throttle_max_ = 0;

    // Last: destroyed first, while everything it calls into still exists.
    std::unique_ptr<Timer> timer_;
    std::unique_ptr<TimelineWriter> timeline_;
};

} // namespace

std::unique_ptr<ModelBackend> make_model(std::unique_ptr<backend::Backend> inner, const ModelConfig& cfg,
                                         Clock* clock, std::shared_ptr<VmLimits> vm, std::string& err) {
    if (!inner) {
        err = "perf: no inner backend";
        return nullptr;
    }
    if (cfg.io_unit < 512) {
        err = "perf: io-unit must be at least 512";
        return nullptr;
    }
    if (cfg.stats_interval < kMs) {
        err = "perf: stats.interval must be at least 1ms";
        return nullptr;
    }
    auto m = std::make_unique<Model>(std::move(inner), cfg, clock, std::move(vm));
    if (!m->open_timeline(err)) return nullptr;
    return m;
}

std::unique_ptr<ModelBackend> make_model(std::unique_ptr<backend::Backend> inner, std::string_view settings,
                                         std::shared_ptr<VmLimits> vm, std::string& err) {
    ModelConfig cfg;
    if (!parse_model_config(settings, cfg, err)) return nullptr;
    return make_model(std::move(inner), cfg, nullptr, std::move(vm), err);
}

} // namespace hvstor::perf
