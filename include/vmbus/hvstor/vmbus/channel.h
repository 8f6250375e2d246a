// The runtime of one open VMBus channel: its two rings, a worker, and signalling both ways.
// A device (storvsp) supplies a PacketHandler; ring work is done in rounds (completions out,
// then a batch of incoming packets), one thread at a time. The worker is a thread of the
// channel's own, or turns in a host's event loop (ChannelOptions::loop). It does the rounds
// except while it sleeps: then the thread that brings work runs the round
// itself, if the handler allows it at that point: a guest signal on its vCPU thread (as
// virtio does under TCG), a completion on the backend's thread. That spares a thread
// wake-up per request each way. It needs only the Host (to map the ring pages) and the
// bus's GuestSignal: no partition, no server.
//
// Every round runs inside a Section of the host's RunGate: while the VM is paused no round
// starts, so the rings are neither read nor written and the guest is not signalled. Work
// that comes meanwhile (a guest signal, a completion) stays where it is, and the worker,
// woken when the VM runs again, does it. A paused worker sleeps as an idle one does, so
// stop() ends it as usual.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "hvstor/guest_log.h"
#include "hvstor/host.h"
#include "hvstor/vmbus/bus.h"
#include "hvstor/vmbus/event_loop.h"
#include "hvstor/vmbus/ring.h"

namespace hvstor::vmbus {

class ChannelRuntime;

class PacketHandler {
public:
    virtual ~PacketHandler() = default;
    // Worker thread, at each wake-up before incoming packets: finish completed work
    // (write completion packets with Channel::send).
    virtual void on_wake(ChannelRuntime& ch) = 0;
    // Whether one more incoming packet may be taken now. False applies back-pressure:
    // the packet stays in the ring until a later wake-up.
    virtual bool can_accept(ChannelRuntime& ch) = 0;
    // One incoming packet (descriptor and payload), already removed from the ring.
    virtual void on_packet(ChannelRuntime& ch, const PacketDescriptor& d, std::span<const uint8_t> packet) = 0;
    // After a batch of packets: submit what was collected.
    virtual void on_batch_end(ChannelRuntime& ch) = 0;
    // Asked by the thread that holds the channel: whether this round may run on the thread
    // that brought the work (a vCPU thread holding the VMM's big lock, or a backend's
    // completion thread). Such a round must never wait: on_wake, on_packet and
    // on_batch_end must not block then.
    virtual bool may_run_inline(ChannelRuntime& /*ch*/) { return false; }
    // In such a round, before a packet is taken (a checked copy): false leaves it in the
    // ring and ends the round; the worker takes it. For packets whose handling may wait.
    virtual bool takes_inline(const PacketDescriptor& /*d*/, std::span<const uint8_t> /*packet*/) { return true; }
    // The worker is stopping (channel closed): wait for and drop outstanding work. No
    // packets may be sent any more. On the worker's thread; with an event loop, on the
    // thread that called stop(), once the loop has let go of the channel.
    virtual void on_stop(ChannelRuntime& ch) = 0;
};

// Counted by a channel's runtime into storage its device keeps, so that they add up over
// every time the guest opened the channel.
struct ChannelStats {
    std::atomic<uint64_t> packets_in{0}, packets_out{0};
    std::atomic<uint64_t> guest_signals{0};   // SIGNAL_EVENTs from the guest
    std::atomic<uint64_t> host_signals{0};    // interrupts to the guest
    std::atomic<uint64_t> wakeups{0};
    std::atomic<uint64_t> inline_rounds{0};   // rounds run on a signalling or completing thread
    std::atomic<uint64_t> ring_full_waits{0}; // back-pressure episodes
};

struct ChannelOptions {
    // A guest signal or a completion on an idle channel runs the round on its own thread
    // when the handler allows it (PacketHandler::may_run_inline); otherwise every round is
    // the worker's.
    bool inline_rounds = true;
    // Where the worker runs: null, a thread of the channel's own; else turns in this loop
    // (it outlives the runtime), at most a few rounds per turn (kLoopRounds) before the loop's
    // other channels get theirs.
    EventLoop* loop = nullptr;
    // The largest packet the guest may send, descriptor included: the handler's largest
    // request. A longer one is an impossible descriptor, and the channel stops.
    uint32_t max_packet = kMaxIncomingPacket;
    // The budget of the runtime's guest-error lines, when it must outlive the runtime (the
    // device's, shared by all its channels over every reopen); null: the runtime's own.
    GuestErrorBudget* error_budget = nullptr;
};

// A worker's round takes at most this many packets; then it ends (the handler's batch with
// it: Controller::detach waits for a batch boundary) and the worker looks at stopping before
// the next. Without it a guest whose requests all complete at once, and which keeps both
// rings moving, could keep one round going for good.
constexpr uint32_t kWorkerRoundBudget = 256;

class ChannelRuntime final : private RunGate::Listener {
public:
    using Options = ChannelOptions;

    // Maps the ring pages of the open request and starts the worker; nullptr with `err` if
    // the pages are not RAM or no thread could be started. `stats` outlives the runtime.
    static std::unique_ptr<ChannelRuntime> open(Host& host, const OpenRequest& req, PacketHandler& handler,
                                                ChannelStats& stats, std::string& err, Options opt = {});
    ~ChannelRuntime(); // stops the worker (see stop())
    ChannelRuntime(const ChannelRuntime&) = delete;
    ChannelRuntime& operator=(const ChannelRuntime&) = delete;

    // Any thread. A guest signal: runs a round here if the channel is idle and inline
    // rounds are allowed, else wakes the worker. Never waits for the round's thread.
    void notify_guest_signal();
    // Any thread: completed work to send. Like a guest signal, runs a round here if the
    // channel is idle (a backend's completion thread then sends it, with the interrupt),
    // else wakes the worker. Never waits for the round's thread.
    void notify_completion();
    // Any thread: wakes the worker. From within a round of this channel (a command that
    // completed at once) it only asks that round's thread for one more round.
    void wake();

    // The thread running the current round only (the worker, or a signalling thread).
    bool send(PacketType type, uint16_t flags, uint64_t trans_id, std::span<const uint8_t> payload);
    uint32_t out_free_bytes() const { return out_.free_bytes(); }
    // Returns whether `bytes` are free in the outgoing ring. When not, asks the guest to
    // signal once they are (pending_send_sz), so back-pressure never stalls for good.
    bool reserve_out(uint32_t bytes);
    void set_target_vp(uint32_t vp) { target_vp_.store(vp); }

    uint32_t relid() const { return relid_; }
    const ChannelStats& stats() const { return stats_; }
    bool broken() const { return broken_.load(); }

    // With the VM paused (no round runs): Host::mark_written for both rings' pages.
    void mark_written() const {
        in_.mark_written();
        out_.mark_written();
    }

    // Stops the worker after the handler's on_stop(); idempotent. Never takes VMM locks.
    // With an event loop: not from within one of this channel's rounds.
    void stop();
    // Asks the worker to stop after its current round, without waiting; stop() joins it.
    void request_stop();

private:
    ChannelRuntime(Host& host, const OpenRequest& req, RingPages in, RingPages out, PacketHandler& handler,
                   ChannelStats& stats, Options opt);
    // The worker's thread.
    void run();
    // The worker's turn in an event loop (its eventfd became readable).
    static void loop_ready(void* self);
    void turn();
    // The worker's rounds, holding the channel with the ring masked, until the channel is
    // idle (the ring unmasked and nothing to take), stopping, or `rounds` ran (without a
    // budget, as the thread mode runs it, never Yield).
    // Paused: the VM stopped; the channel sleeps as when idle until on_resume() wakes it.
    enum class After { Idle, Stopping, Yield, Paused };
    After work(std::optional<uint32_t> rounds);
    // One round: at most `budget` incoming packets; returns true if it took that many (more
    // may be waiting). An inline round asks the handler before taking each packet
    // (takes_inline).
    bool pump(uint32_t budget, bool inline_round = false);
    // run_inline's rounds; whether the worker must take over. noexcept: see channel.cc.
    bool inline_rounds() noexcept;
    void signal_guest();
    // A round on this thread if the channel is idle; false if another thread has it.
    bool run_inline();
    // The worker, after its sleep: takes the channel back, waiting out an inline round.
    void take_back();
    // The VM runs again (RunGate::Listener): wakes the worker for what waited.
    void on_resume() override { wake(); }

    // Who may do ring work: the worker, nobody (the worker sleeps; a signalling thread
    // may take it), or a signalling thread. Whoever holds it is the only thread touching
    // the rings, the handler's round state and the members below; release/acquire on this
    // hands them over.
    enum Owner : uint32_t { kWorker, kIdle, kInline };
    std::atomic<uint32_t> owner_{kWorker};
    bool rerun_ = false; // the owner: wake() during the round asked for another

    Host& host_;
    GuestSignal signal_;
    uint32_t relid_;
    GuestErrorLog log_; // worker thread only
    std::atomic<uint32_t> target_vp_;
    IncomingRing in_;
    OutgoingRing out_;
    PacketHandler& handler_;
    int efd_ = -1;
    std::atomic<bool> stopping_{false};
    std::atomic<bool> broken_{false};
    std::thread worker_;
    void* watch_ = nullptr;              // with an event loop: the eventfd's watch
    std::atomic<bool> unwatched_{false}; // with an event loop: stop() has begun
    ChannelStats& stats_;
    std::vector<uint8_t> pkt_;
    bool waiting_room_ = false;
    const Options opt_;
};

} // namespace hvstor::vmbus
