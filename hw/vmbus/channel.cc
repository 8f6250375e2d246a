#include "hvstor/vmbus/channel.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cstring>
#include <system_error>

#include "hvstor/thread.h"
#include "hvstor/trace.h"

namespace hvstor::vmbus {

namespace {

// The channel whose round this thread is running, if any: a wake() from inside the round
// (a command that completed at once) asks for one more round instead of a wake-up.
thread_local ChannelRuntime* tl_round = nullptr;

class RoundScope {
public:
    explicit RoundScope(ChannelRuntime* ch) : prev_(tl_round) { tl_round = ch; }
    ~RoundScope() { tl_round = prev_; }
    RoundScope(const RoundScope&) = delete;
    RoundScope& operator=(const RoundScope&) = delete;

private:
    ChannelRuntime* prev_;
};

// An inline round takes at most this many packets; the worker takes the rest. It bounds
// the time a vCPU thread spends on the ring (storvsc's queue depth per channel is far
// larger only under heavy load, when the worker is awake anyway).
constexpr uint32_t kInlineBudget = 32;
// Rounds an inline turn runs for completions that came at once (each round sends those of
// the one before).
constexpr int kInlineRounds = 3;
// Rounds a worker's turn in an event loop runs before it lets the loop's other channels and
// handlers have theirs (it comes back at the loop's next pass).
constexpr uint32_t kLoopRounds = 8;

} // namespace

std::unique_ptr<ChannelRuntime> ChannelRuntime::open(Host& host, const OpenRequest& req, PacketHandler& handler,
                                                     ChannelStats& stats, std::string& err, Options opt) {
    // The bus checked the split; check again here, where an unsigned subtraction depends on it.
    const size_t split = req.downstream_page_offset;
    if (split < 2 || split > req.ring_pfns.size() || req.ring_pfns.size() - split < 2) {
        err = "each ring needs a header page and at least one data page";
        return nullptr;
    }
    RingPages in, out;
    if (!in.map(host, req.ring_pfns.subspan(0, split)) || !out.map(host, req.ring_pfns.subspan(split))) {
        err = "ring pages are not guest RAM";
        return nullptr;
    }
    std::unique_ptr<ChannelRuntime> ch(
        new ChannelRuntime(host, req, std::move(in), std::move(out), handler, stats, opt));
    if (ch->efd_ < 0) {
        err = "eventfd failed";
        return nullptr;
    }
    host.run_gate().add(ch.get()); // before the first round can find the VM paused
    if (opt.loop) {
        // Nobody holds the channel until the first turn, which the wake-up below brings
        // (as the thread's first round does: packets the guest queued before it opened).
        ch->owner_.store(kIdle, std::memory_order_relaxed);
        ch->watch_ = opt.loop->watch(ch->efd_, &ChannelRuntime::loop_ready, ch.get());
        if (!ch->watch_) {
            err = "the event loop cannot take the channel";
            return nullptr;
        }
        ch->wake();
        return ch;
    }
    try {
        ch->worker_ = start_thread("hvstor-ch" + std::to_string(req.child_relid), [c = ch.get()] { c->run(); });
    } catch (const std::system_error& e) {
        err = std::string("cannot start the channel worker: ") + e.what();
        return nullptr;
    }
    return ch;
}

ChannelRuntime::ChannelRuntime(Host& host, const OpenRequest& req, RingPages in, RingPages out,
                               PacketHandler& handler, ChannelStats& stats, Options opt)
    : host_(host), signal_(req.signal), relid_(req.child_relid),
      log_(host, "vmbus: relid " + std::to_string(req.child_relid) + ": ", opt.error_budget), target_vp_(req.target_vp), in_(std::move(in), opt.max_packet),
      out_(std::move(out)), handler_(handler), efd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)), stats_(stats),
      opt_(opt) {
    pkt_.reserve(opt.max_packet);
}

ChannelRuntime::~ChannelRuntime() {
    host_.run_gate().remove(this);
    stop();
    if (efd_ >= 0) close(efd_);
}

void ChannelRuntime::request_stop() {
    if (!stopping_.exchange(true)) wake();
}

void ChannelRuntime::stop() {
    request_stop();
    if (opt_.loop) {
        // No watch: the channel never ran, and there is nothing to stop.
        if (!watch_ || unwatched_.exchange(true)) return;
        // No turn runs after this; one may have left the channel to an inline round, which
        // sees stopping_ and ends at once. Then the channel is this thread's for good.
        opt_.loop->unwatch(watch_);
        take_back();
        handler_.on_stop(*this);
        return;
    }
    if (worker_.joinable() && worker_.get_id() != std::this_thread::get_id()) worker_.join();
}

void ChannelRuntime::wake() {
    if (tl_round == this) {
        rerun_ = true;
        return;
    }
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = write(efd_, &one, sizeof one);
}

void ChannelRuntime::notify_guest_signal() {
    stats_.guest_signals++;
    if (!opt_.inline_rounds || !run_inline()) wake();
}

void ChannelRuntime::notify_completion() {
    if (!opt_.inline_rounds || !run_inline()) wake();
}

bool ChannelRuntime::run_inline() {
    // Not within a round of any channel: a round never nests in another.
    if (tl_round) return false;
    // While the VM is paused the work waits where it is; resuming wakes the worker for it.
    RunGate::Section running(host_.run_gate());
    if (!running) return true;
    uint32_t idle = kIdle;
    if (!owner_.compare_exchange_strong(idle, kInline, std::memory_order_acquire)) return false;
    const bool more = stopping_ || !handler_.may_run_inline(*this) || inline_rounds();
    owner_.store(kIdle, std::memory_order_release);
    owner_.notify_one();
    if (more) wake(); // the worker takes it from here
    return true;
}

// noexcept: a round that failed halfway (a batch begun, completions taken: only an
// allocation can fail) cannot be handed to the worker, and returning without ending it
// would leave the channel owned by nobody for good. The process ends instead, as it does
// when the worker thread's round throws, and as QEMU does when an allocation fails.
bool ChannelRuntime::inline_rounds() noexcept {
    stats_.inline_rounds++;
    RoundScope scope(this);
    in_.set_interrupt_mask(true);
    int rounds = 0;
    do {
        rerun_ = false;
        pump(kInlineBudget, true);
    } while (rerun_ && ++rounds < kInlineRounds);
    // As the worker does before it sleeps: unmask, then look again. A packet the handler
    // left for the worker is still in the ring.
    in_.set_interrupt_mask(false);
    const bool more = rerun_ || (!broken_ && !in_.empty() && handler_.can_accept(*this));
    rerun_ = false;
    return more;
}

void ChannelRuntime::take_back() {
    uint32_t expect = kIdle;
    while (!owner_.compare_exchange_weak(expect, kWorker, std::memory_order_acquire)) {
        // An inline round is short and never waits: wait for its end.
        if (expect == kInline) owner_.wait(kInline, std::memory_order_relaxed);
        expect = kIdle;
    }
}

bool ChannelRuntime::send(PacketType type, uint16_t flags, uint64_t trans_id, std::span<const uint8_t> payload) {
    if (!out_.write(type, flags, trans_id, payload)) {
        if (out_.corrupt() && !broken_) {
            broken_ = true;
            trace<HVSTOR_TRACE_channel_stopped>(relid_);
            log_("host-to-guest ring: impossible read index; the channel stops");
        }
        return false;
    }
    stats_.packets_out++;
    return true;
}

bool ChannelRuntime::reserve_out(uint32_t bytes) {
    if (out_.free_bytes() >= bytes) {
        if (waiting_room_) {
            out_.set_pending_send_sz(0);
            waiting_room_ = false;
        }
        return true;
    }
    stats_.ring_full_waits++;
    trace<HVSTOR_TRACE_channel_ring_full>(relid_, bytes, out_.free_bytes());
    out_.set_pending_send_sz(bytes);
    waiting_room_ = true;
    // The guest may have made room before it could see the request.
    return out_.free_bytes() >= bytes;
}

void ChannelRuntime::signal_guest() {
    stats_.host_signals++;
    if (signal_) signal_(target_vp_.load());
}

// One round: completions out first (they free room and credits), then as many incoming
// packets as the handler accepts, then one signal each way at most.
bool ChannelRuntime::pump(uint32_t budget, bool inline_round) {
    handler_.on_wake(*this);
    bool did = false;
    uint32_t taken = 0;
    // Nothing more is taken once a close asked the channel to stop.
    for (; taken < budget && !broken_ && !stopping_ && handler_.can_accept(*this); taken++) {
        PacketDescriptor d{};
        auto st = in_.peek(d, pkt_);
        if (st == IncomingRing::Status::Empty) break;
        if (st == IncomingRing::Status::Corrupt) {
            // Indices or a descriptor the guest could not have written honestly: stop
            // reading this ring rather than guess.
            broken_ = true;
            trace<HVSTOR_TRACE_channel_stopped>(relid_);
            log_("guest-to-host ring: impossible write index or packet descriptor (type %u offset8 %u len8 %u; "
                 "packets of at most %u bytes); the channel stops",
                 unsigned(d.type), unsigned(d.offset8), unsigned(d.len8), opt_.max_packet);
            break;
        }
        if (inline_round && !handler_.takes_inline(d, pkt_)) break;
        in_.consume();
        stats_.packets_in++;
        handler_.on_packet(*this, d, pkt_);
        did = true;
    }
    if (did) handler_.on_batch_end(*this);
    const bool guest_wants_room = in_.commit();
    if (out_.commit() || guest_wants_room) signal_guest();
    return taken == budget;
}

// Each round is a RunGate section, the masking of the ring included: a round never starts
// while the VM is paused. The ring is masked once per call, in its first round.
ChannelRuntime::After ChannelRuntime::work(std::optional<uint32_t> rounds) {
    bool masked = false;
    while (!stopping_) {
        if (rounds && (*rounds)-- == 0) return After::Yield;
        RunGate::Section running(host_.run_gate());
        if (!running) return After::Paused;
        if (!masked) {
            in_.set_interrupt_mask(true);
            masked = true;
        }
        stats_.wakeups++;
        rerun_ = false;
        const bool budget_spent = pump(kWorkerRoundBudget);
        if (stopping_) break;
        if (rerun_ || budget_spent) continue; // completions came during the round, or more packets
        // Unmask, then look again before sleeping: the guest only signals an empty ring
        // becoming non-empty while unmasked.
        in_.set_interrupt_mask(false);
        if (!broken_ && !in_.empty() && handler_.can_accept(*this)) {
            in_.set_interrupt_mask(true);
            continue;
        }
        return After::Idle;
    }
    return After::Stopping;
}

void ChannelRuntime::run() {
    // The worker holds the channel from the start (owner_ is kWorker) and keeps it once
    // stopping: no inline round after that.
    RoundScope scope(this);
    for (;;) {
        // No budget: never Yield. Idle or Paused: sleep until woken.
        if (work(std::nullopt) == After::Stopping) break;
        owner_.store(kIdle, std::memory_order_release);
        pollfd p{efd_, POLLIN, 0};
        poll(&p, 1, -1);
        uint64_t v;
        [[maybe_unused]] ssize_t n = read(efd_, &v, sizeof v);
        take_back();
    }
    handler_.on_stop(*this);
}

void ChannelRuntime::loop_ready(void* self) { static_cast<ChannelRuntime*>(self)->turn(); }

// A turn takes the channel from idle and leaves it idle: between turns an inline round may
// have it, and stop() takes it for good once the loop let go.
void ChannelRuntime::turn() {
    uint64_t v;
    [[maybe_unused]] ssize_t n = read(efd_, &v, sizeof v);
    if (stopping_) return;
    take_back();
    After after;
    {
        RoundScope scope(this);
        after = work(kLoopRounds);
    }
    // Yield: the ring stays masked (an inline round unmasks it when it ends) and the
    // wake-up brings the next turn. Paused: on_resume() brings it.
    owner_.store(kIdle, std::memory_order_release);
    if (after == After::Yield) wake();
}

} // namespace hvstor::vmbus
