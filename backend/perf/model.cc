// The model as a Backend: wires the scheduler, the statistics and the IO records to the inner
// backend, the clock's timer and one mutex per disk. Every path (submit, inner completion,
// timer) takes the mutex once, lets the scheduler decide what to issue and what to complete,
// and does both after unlocking, so completions may re-enter submit() and inner backends may
// complete inline.
#include "hvstor/perf/model.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <mutex>

#include "../validate.h"
#include "hvstor/perf/timeline.h"
#include "hvstor/trace.h"
#include "io_pool.h"
#include "keys.h"
#include "scheduler.h"
#include "stats_accumulator.h"

namespace hvstor::perf {
namespace {

using backend::Request;
using detail::Decisions;
using detail::Entry;
using detail::Io;

// What a locked section leaves to do once unlocked.
struct Work {
    detail::Batch<Request*> issue;  // inner requests
    detail::Batch<Request*> done;   // guest requests
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

class Model final : public ModelBackend, private backend::CompletionSink {
public:
    Model(std::unique_ptr<backend::Backend> inner, const ModelConfig& cfg, Clock* clock,
          std::shared_ptr<VmLimits> vm)
        : inner_(std::move(inner)), cfg_(cfg),
          own_clock_(clock ? nullptr : std::make_unique<HostClock>(cfg.timer_min_period)),
          clock_(clock ? *clock : *own_clock_), vm_(std::move(vm)), last_now_(clock_.now()),
          sched_(cfg_, vm_.get(), last_now_), stats_(last_now_, cfg_.stats_interval),
          timer_(clock_.make_timer([this] { on_timer(); })) {}

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
            const Nanos now = tick();
            Decisions d;
            sched_.shutdown(now, d);
            take(d, now, w);
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
    // Admission and the timer take the model's lock briefly; the issue is the inner disk's.
    bool submit_may_block() const override { return inner_->submit_may_block(); }
    bool drained_by_vmm() const override { return inner_->drained_by_vmm(); }
    uint32_t block_size() const override { return inner_->block_size(); }
    bool read_only() const override { return inner_->read_only(); }
    std::string describe() const override { return "perf(" + summarize(cfg_) + ") over " + inner_->describe(); }
    // The model's caps and latencies do not depend on the size; requests it queued were
    // checked against the old one, and the inner backend checks them again when issued.
    bool resize(uint64_t bytes, std::string& err) override { return inner_->resize(bytes, err); }
    void set_trace_id(uint32_t id) override {
        Backend::set_trace_id(id);
        inner_->set_trace_id(id);
    }

    void submit(std::span<Request* const> reqs) override {
        if (reqs.empty()) return;
        pending_.add(reqs.size());
        Work w;
        {
            std::lock_guard lock(mu_);
            const Nanos now = tick();
            for (Request* r : reqs) {
                if (abandoning_) {
                    r->result = -ECANCELED;
                    stats_.cancelled();
                    w.done.push(r);
                    continue;
                }
                const int e = backend::check_request(*r, *inner_);
                if (e != 0) {
                    r->result = e;
                    stats_.rejected();
                    w.done.push(r);
                    continue;
                }
                sched_.arrive(make_io(r), now);
            }
            stats_.queue_depth(now, sched_.host_queue());
            Decisions d;
            sched_.dispatch(now, d);
            take(d, now, w);
            schedule();
        }
        run(w);
    }

    void abandon(bool on) override {
        Work w;
        {
            std::lock_guard lock(mu_);
            abandoning_ = on;
            if (!on) {
                if (vm_) vm_->restart();
                return;
            }
            const Nanos now = tick();
            Decisions d;
            sched_.cancel(now, d);
            take(d, now, w);
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
        stats_.fill(s);
        s.now = now;
        s.time_scale = cfg_.time_scale;
        s.cost_units = sched_.cost_units();
        s.queued = sched_.host_queue();
        s.in_service = sched_.in_service();
        s.credits = sched_.credits(now);
        if (vm_) s.vm_credits = vm_->credits(now);
        return s;
    }

    void save(state::Writer& w) override {
        std::lock_guard lock(mu_);
        w.begin(kStateTag, kStateVersion);
        w.u64(caps_key());
        sched_.save(w, tick());
    }

    bool load(state::Reader& r) override {
        if (!r.begin(kStateTag, kStateVersion, "a disk model's state")) return false;
        const uint64_t key = r.u64("a disk model's settings");
        std::lock_guard lock(mu_);
        if (r.ok() && key != caps_key()) r.fail("a disk model's settings", "differ from this disk's (perf=); key", key);
        return r.ok() && sched_.load(r, tick());
    }

    const ModelConfig& config() const override { return cfg_; }
    backend::Backend& inner() override { return *inner_; }
    Clock& clock() override { return clock_; }

private:
    static constexpr uint32_t kStateTag = 0x4c444f4d; // "MODL"
    static constexpr uint32_t kStateVersion = 1;

    // The caps the buckets belong to, folded into one number (FNV-1a over their values).
    uint64_t caps_key() const {
        uint64_t h = 1469598103934665603ull;
        auto mix = [&h](double v) {
            uint64_t bits;
            std::memcpy(&bits, &v, sizeof bits);
            for (int i = 0; i < 8; i++) h = (h ^ ((bits >> (8 * i)) & 0xFF)) * 1099511628211ull;
        };
        const Caps& c = cfg_.caps;
        for (double v : {c.iops, c.bytes_per_s, c.burst_iops, c.burst_bytes_per_s, double(c.burst), double(c.burst_duration),
                         c.burst_start, double(c.window), cfg_.read_iops, cfg_.write_iops, cfg_.read_bytes_per_s,
                         cfg_.write_bytes_per_s})
            mix(v);
        return h;
    }

    // The clock as the model sees it under mu_: never backwards, intervals closed.
    Nanos tick() {
        const Nanos now = std::max(clock_.now(), last_now_);
        last_now_ = now;
        stats_.roll(now);
        return now;
    }

    Io* make_io(Request* r) {
        Io* io = pool_.get();
        io->op = r->op;
        io->length = r->length;
        io->channel = r->queue;
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
        return io;
    }

    // Under mu_: records what the scheduler decided and turns it into requests to act on.
    void take(const Decisions& d, Nanos now, Work& w) {
        for (Entry* e : d.issue.span()) {
            Io* io = static_cast<Io*>(e);
            stats_.issued(io->issued - io->arrival);
            trace<HVSTOR_TRACE_perf_queued>(trace_id(), io->issued - io->arrival);
            w.issue.push(&io->inner);
        }
        if (d.held_by != detail::Limit::None || d.held_for > 0)
            trace<HVSTOR_TRACE_perf_throttled>(trace_id(), d.held_by, d.held_for);
        trace_credits(now);
        for (Entry* e : d.done.span()) {
            Io* io = static_cast<Io*>(e);
            Request* g = io->guest;
            if (io->cancelled) {
                g->result = -ECANCELED;
                stats_.cancelled();
            } else {
                g->result = io->inner.result;
                stats_.completed(g->op, g->length, now - io->arrival, now - io->finished, g->result != 0);
            }
            w.done.push(g);
            pool_.put(io);
        }
        stats_.queue_depth(now, sched_.host_queue());
    }

    // hvstor_perf_burst_credits: when a credit bank runs dry (below one IO's worth), and when
    // both have earned back 1% of their capacity (and one IO) after that.
    void trace_credits(Nanos now) {
        if (!tracing()) return;
        const Credits c = sched_.credits(now);
        if (!c.enabled) return;
        const double unit = double(cfg_.io_unit);
        const bool iops = c.iops_capacity > 0, bytes = c.bytes_capacity > 0;
        const bool dry = (iops && c.iops < 1) || (bytes && c.bytes < unit);
        const bool refilled = (!iops || c.iops >= std::max(1.0, c.iops_capacity / 100)) &&
                              (!bytes || c.bytes >= std::max(unit, c.bytes_capacity / 100));
        if (credits_dry_ ? !refilled : !dry) return;
        credits_dry_ = !credits_dry_;
        trace<HVSTOR_TRACE_perf_burst_credits>(trace_id(), c.iops, c.bytes);
    }

    void schedule() {
        const Nanos next = sched_.next_event();
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
            Decisions d;
            sched_.expire(now, d);
            take(d, now, w);
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
            Decisions d;
            if (sched_.served(io, now, d)) {
                take(d, now, w);
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
    Pending pending_;

    std::mutex mu_;  // guards everything from here to the timer
    Nanos last_now_;
    Nanos armed_ = kNever;  // the timer's pending deadline
    bool credits_dry_ = false;  // a credit bank ran dry (trace_credits)
    bool abandoning_ = false;   // abandon(true): requests are cancelled, not modelled
    detail::Scheduler sched_;
    detail::StatsAccumulator stats_;
    detail::IoPool pool_;

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
    if (!detail::check_unscaled(cfg, err)) return nullptr;
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
