// One queue of a storvsp controller: the controller's share of one VMBus channel (the
// primary or a subchannel), as the guest's blk-mq sees one hardware queue per channel. The
// bus-facing ChannelHandler and the worker-facing PacketHandler. Private to hw/storvsp.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "hvstor/guest_log.h"
#include "hvstor/storvsp/controller.h"
#include "hvstor/vmbus/channel.h"

namespace hvstor::storvsp {

// A statistics counter that one thread at a time increments (a queue's worker; the next
// worker starts only after the previous one was joined) while any thread may read it for a
// snapshot. With a single writer an increment needs no atomic read-modify-write: a relaxed
// load and store, so the hot path takes no locked instruction.
class WorkerCounter {
public:
    void inc() { n_.store(n_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed); }
    uint64_t read() const { return n_.load(std::memory_order_relaxed); }

private:
    std::atomic<uint64_t> n_{0};
};

// One request in flight: the SCSI command, the guest's pages, and what is needed to
// answer it. Pooled per channel: nothing is allocated per I/O.
struct IoContext {
    scsi::Command cmd;
    uint64_t trans_id = 0;
    VstorPacket req{};
    uint32_t req_len = 0;
    uint8_t srb_override = 0; // an SRB status decided before the command ran
    std::vector<iovec> pages; // as mapped, for unmap
    std::vector<iovec> iov;   // merged, for the disk
    // The guest address of each piece in `pages`: a saved machine executes the request
    // again when it had not finished (Controller::save), from a packet made of these.
    std::vector<uint64_t> gpas;
    bool writes_guest = false;
    class Queue* channel = nullptr;
};

class Queue final : public vmbus::ChannelHandler, public vmbus::PacketHandler {
public:
    Queue(Controller& ctl, uint16_t index);
    ~Queue() override;

    uint16_t index() const { return index_; }
    // A close has started and its closer has not finished: the old worker may still be
    // draining. Such a queue is neither reopened nor offered again.
    bool closing() const { return closing_.load(); }
    uint32_t relid() const { return relid_.load(); }
    void set_relid(uint32_t r) { relid_.store(r); }
    bool is_open() const;
    // The primary's: send the guest `n` (ENUMERATE_BUS, REMOVE_DEVICE) once it can take the
    // notice (Controller::srb_seen_); then notice_may_go() sends one held back. False when
    // the channel is not open (the guest scans when it connects).
    bool request_notice(Notice n);
    void notice_may_go();
    // Any thread: the next round looks at held resets again (the controller's ResetAnswer
    // changed), or answers a RESET_LUN held for `lun`, which is gone.
    void wake_for_resets();
    void lun_detached(uint8_t lun);

    // From any thread: a command finished.
    void done(IoContext* ctx);

    // From any thread: returns once the worker has finished the batch it is in, if any. A
    // disk pointer looked up in a batch is used until the batch is submitted, so after a
    // LUN was cleared and this returned for every queue, no worker holds the old disk.
    void wait_batch_boundary() const;

    // Any thread.
    ChannelStatsSnapshot stats() const;

    // An answer owed to the guest, as it goes out: a reset held under ResetAnswer::Ignore,
    // or a completion carried in saved state.
    struct Answer {
        uint64_t trans_id;
        VstorPacket packet;
        uint32_t len;
    };
    // What an open queue owes the guest, as saved (Controller::save).
    struct Saved {
        uint8_t state = 0; // InitState
        uint32_t notices = 0;
        std::vector<Answer> held_resets;
        std::vector<Answer> answers;                  // completions ready, in their order
        std::vector<std::vector<uint8_t>> requests;   // taken, not finished: executed again
    };
    // With the VM stopped. Open: what it owes (else only index and relid go in the state).
    void save(state::Writer& w) const;
    // Parses one queue's state as save() wrote it, checked against the controller's
    // settings; `open` says whether `out` was filled.
    static bool read_saved(state::Reader& r, const ControllerConfig& cfg, uint16_t& index, uint32_t& relid, bool& open,
                           Saved& out);
    // With the VM paused: Host::mark_written for the rings and for every request buffer the
    // disks may have written and that is still mapped (taken, not yet released).
    void mark_written() const;
    // The next on_open() takes up `s` instead of starting a new session.
    void restore_on_open(Saved s);
    // A load failed: nothing loaded may reach a later session (on_open clears what an
    // earlier open took up). The channel is closed.
    void drop_restore();

    // Returns once a close in progress has finished (the controller's destructor).
    void join_closer();

    // vmbus::ChannelHandler (the bus: vCPU threads)
    uint32_t on_open(const vmbus::OpenRequest& req) override;
    void on_close(uint32_t relid, vmbus::CloseDone done) override;
    void on_guest_signal(uint32_t relid) override;
    void on_target_vp(uint32_t relid, uint32_t vp) override;

    // vmbus::PacketHandler (the thread running the channel's round: its worker, or a
    // signalling vCPU thread once the channel is ready)
    void on_wake(vmbus::ChannelRuntime& ch) override;
    bool may_run_inline(vmbus::ChannelRuntime& ch) override;
    bool takes_inline(const vmbus::PacketDescriptor& d, std::span<const uint8_t> pkt) override;
    bool can_accept(vmbus::ChannelRuntime& ch) override;
    void on_packet(vmbus::ChannelRuntime& ch, const vmbus::PacketDescriptor& d, std::span<const uint8_t> pkt) override;
    void on_batch_end(vmbus::ChannelRuntime& ch) override;
    void on_stop(vmbus::ChannelRuntime& ch) override;

private:
    enum class InitState { Start, Initializing, VersionAgreed, Ready };
    using HeldReset = Answer;

    void control(vmbus::ChannelRuntime& ch, uint64_t trans_id, VstorPacket& p, uint32_t len);
    void reset(vmbus::ChannelRuntime& ch, uint64_t trans_id, VstorPacket& p, uint32_t len);
    // FCHBA_DATA: its status; on success p holds the controller's WWNs, the primary pair
    // active. `why` names a refusal for the guest-error line.
    uint32_t fc_hba_data(VstorPacket& p, const char*& why) const;
    void answer_held_resets(vmbus::ChannelRuntime& ch);
    void send_notices(vmbus::ChannelRuntime& ch);
    // Completions (and answers) this channel owes: room in the ring is kept for each.
    uint32_t owed() const { return outstanding_ + uint32_t(held_resets_.size() + saved_answers_.size()); }
    // Answers a control operation with `status` (COMPLETE_IO), traced.
    void answer_control(vmbus::ChannelRuntime& ch, uint64_t trans_id, VstorPacket& p, uint32_t len, uint32_t status);
    void execute_srb(vmbus::ChannelRuntime& ch, const vmbus::PacketDescriptor& d, std::span<const uint8_t> pkt,
                     const VstorPacket& p, uint32_t len);
    bool map_gpa_ranges(IoContext& ctx, std::span<const uint8_t> pkt, uint32_t payload_off, uint32_t bytes);
    // The SRB's data buffer as iovecs in ctx.cmd; false (logged) when the guest's ranges
    // are unusable.
    bool map_data(IoContext& ctx, const vmbus::PacketDescriptor& d, std::span<const uint8_t> pkt, uint32_t bytes);
    void unmap(IoContext& ctx);
    bool reply(vmbus::ChannelRuntime& ch, uint64_t trans_id, const VstorPacket& p, uint32_t len);
    // The completion packet of a finished command.
    VstorPacket completion(const IoContext& ctx) const;
    bool send_completion(vmbus::ChannelRuntime& ch, const IoContext& ctx);
    // The first round after a load: the answers carried in the state go out, and the
    // requests that had not finished are executed again.
    void resume_saved(vmbus::ChannelRuntime& ch);
    void complete(vmbus::ChannelRuntime& ch, IoContext* ctx);
    void release(IoContext* ctx);
    void finish(IoContext* ctx); // answered: no longer outstanding
    void count_outstanding(); // after outstanding_ grew
    // An SRB after the handshake: the first of this session lets a held rescan notice go.
    void note_first_srb();

    Controller& ctl_;
    const uint16_t index_;
    std::atomic<uint32_t> relid_{0};

    mutable std::mutex mu_;                   // runtime_ against close
    // Shared: a guest signal uses it outside mu_ (see on_guest_signal), a closer stops it.
    std::shared_ptr<vmbus::ChannelRuntime> runtime_;
    // Finishes a close off the vCPU thread: stops the worker once its outstanding commands
    // completed, then tells the bus. Joined at the next close and by the destructor (the
    // bus allows no reopen before it is done, so one is enough).
    std::thread closer_;
    std::atomic<bool> closing_{false};
    std::atomic<uint32_t> notices_{0};   // bit 1 << Notice: to send

    // Counted by the worker, read by stats() from any thread.
    vmbus::ChannelStats ring_stats_;
    WorkerCounter srbs_, completions_, srb_errors_, bad_packets_, busy_;
    WorkerCounter reset_lun_, reset_bus_, reset_adapter_, enumerate_sent_, remove_device_sent_;
    std::atomic<uint32_t> resets_held_seen_{0}; // held_resets_.size(), for stats()
    std::atomic<uint32_t> outstanding_seen_{0}, max_outstanding_{0}; // worker stores, relaxed

    // Worker thread only (its prefix is set in on_open, before the worker starts). Draws on
    // the controller's budget (Controller::guest_errors_), as the runtime's own lines do.
    GuestErrorLog log_;
    InitState state_ = InitState::Start;
    uint64_t session_ = 0; // Controller::session_ as of this queue's open
    std::vector<IoContext> pool_;
    std::vector<IoContext*> free_;
    std::vector<std::pair<scsi::Disk*, std::vector<scsi::Command*>>> batch_;
    // Odd from the first disk lookup of a batch until the batch is submitted.
    std::atomic<uint64_t> batch_seq_{0};
    bool in_batch_ = false;
    bool pool_exhausted_ = false; // since the last look at the ring found no free slot
    // Under reset=ignore; more are answered with an error (a guest that sends resets in a
    // loop must not grow host memory): Linux has one reset in flight per host.
    static constexpr size_t kMaxHeldResets = 64;
    std::vector<HeldReset> held_resets_;

    // Completed commands, from any thread to the worker.
    mutable std::mutex done_mu_;
    std::condition_variable done_cv_;
    std::vector<IoContext*> done_;
    std::vector<IoContext*> done_swap_;
    // Worker thread only. Requests taken and not yet answered: running, in done_, or in
    // unsent_.
    uint32_t outstanding_ = 0;
    // Finished commands whose completion did not fit (the guest moved its read index
    // back): sent first at the next wake-up, in order, never dropped.
    std::vector<IoContext*> unsent_;
    // Loaded state: for on_open (under mu_), then the worker's, until resume_saved() is done.
    std::unique_ptr<Saved> restore_;
    std::vector<Answer> saved_answers_;
    std::vector<std::vector<uint8_t>> saved_requests_;
};

} // namespace hvstor::storvsp
