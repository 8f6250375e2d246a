// The runtime of one open VMBus channel: its two rings, a worker thread, and signalling
// both ways. A device (storvsp) supplies a PacketHandler; guest signals and device
// completions only wake the worker, which does all ring work in batches. It needs only
// the Host (to map the ring pages) and the bus's GuestSignal: no partition, no server.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "hvstor/guest_log.h"
#include "hvstor/host.h"
#include "hvstor/vmbus/bus.h"
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
    // The worker is stopping (channel closed): wait for and drop outstanding work. No
    // packets may be sent any more.
    virtual void on_stop(ChannelRuntime& ch) = 0;
};

// Counted by a channel's runtime into storage its device keeps, so that they add up over
// every time the guest opened the channel.
struct ChannelStats {
    std::atomic<uint64_t> packets_in{0}, packets_out{0};
    std::atomic<uint64_t> guest_signals{0};   // SIGNAL_EVENTs from the guest
    std::atomic<uint64_t> host_signals{0};    // interrupts to the guest
    std::atomic<uint64_t> wakeups{0};
    std::atomic<uint64_t> ring_full_waits{0}; // back-pressure episodes
};

class ChannelRuntime {
public:
    // Maps the ring pages of the open request and starts the worker; nullptr with `err` if
    // the pages are not RAM or no thread could be started. `stats` outlives the runtime.
    static std::unique_ptr<ChannelRuntime> open(Host& host, const OpenRequest& req, PacketHandler& handler,
                                                ChannelStats& stats, std::string& err);
    ~ChannelRuntime(); // stops the worker (see stop())
    ChannelRuntime(const ChannelRuntime&) = delete;
    ChannelRuntime& operator=(const ChannelRuntime&) = delete;

    // Any thread: wake the worker (a guest signal, or completed work to send).
    void notify_guest_signal();
    void wake();

    // Worker thread only.
    bool send(PacketType type, uint16_t flags, uint64_t trans_id, std::span<const uint8_t> payload);
    uint32_t out_free_bytes() const { return out_.free_bytes(); }
    // Returns whether `bytes` are free in the outgoing ring. When not, asks the guest to
    // signal once they are (pending_send_sz), so back-pressure never stalls for good.
    bool reserve_out(uint32_t bytes);
    void set_target_vp(uint32_t vp) { target_vp_.store(vp); }

    uint32_t relid() const { return relid_; }
    const ChannelStats& stats() const { return stats_; }
    bool broken() const { return broken_.load(); }

    // Stops the worker after the handler's on_stop(); idempotent. Never takes VMM locks.
    void stop();
    // Asks the worker to stop after its current round, without waiting; stop() joins it.
    void request_stop();

private:
    ChannelRuntime(Host& host, const OpenRequest& req, RingPages in, RingPages out, PacketHandler& handler,
                   ChannelStats& stats);
    void run();
    bool pump();  // one round; returns true if it did anything
    void signal_guest();

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
    ChannelStats& stats_;
    std::vector<uint8_t> pkt_;
    bool waiting_room_ = false;
};

} // namespace hvstor::vmbus
