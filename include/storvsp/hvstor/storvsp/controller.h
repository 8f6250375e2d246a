// A Hyper-V synthetic SCSI controller (the host side of hv_storvsc): its primary VMBus
// channel, subchannels created on the guest's request, the init state machine, SRB
// execution against the SCSI disks attached to it, and completions.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "hvstor/guest_log.h"
#include "hvstor/host.h"
#include "hvstor/scsi/disk.h"
#include "hvstor/state.h"
#include "hvstor/storvsp/protocol.h"
#include "hvstor/vmbus/bus.h"
#include "hvstor/vmbus/event_loop.h"

namespace hvstor::storvsp {

// How the controller answers the guest's RESET_LUN, RESET_BUS and RESET_ADAPTER (hv-storvsc's
// `reset`): Answer as Hyper-V does (success, outstanding requests untouched); Ignore holds
// each reset unanswered until the setting changes (then it is answered as the new setting
// says), its channel closes (the guest closed it: nothing is sent), or, for RESET_LUN, its
// LUN is detached (answered with success); Fail answers with kStatusUnsuccessful.
enum class ResetAnswer : uint8_t { Answer, Ignore, Fail };
// "answer", "ignore", "fail"; false with a message naming the value otherwise.
bool parse_reset_answer(std::string_view text, ResetAnswer& out, std::string& err);
const char* reset_answer_name(ResetAnswer a);

// The VMBus device class the controller is offered as (hv-storvsc's `class`), each one of
// the three class GUIDs Linux's storvsc binds, which it drives differently:
// - Scsi: a synthetic SCSI controller; storvsc scans its bus (8 channels x 2 targets x
//   255 LUNs) and asks for subchannels.
// - Ide: Generation 1's IDE accelerator, one per IDE disk; storvsc adds the one disk at
//   target (instance bytes 4..5, the GUID's second group), LUN 0, scans nothing at probe
//   and uses one queue. The controller has no subchannels and takes one disk, at LUN 0,
//   answering SRBs for that target on any path.
// - Fc: a synthetic Fibre Channel HBA; storvsc adds the FC transport, asks FCHBA_DATA for
//   the port and node WWNs during its handshake and caps transfers at 512 KiB.
enum class DeviceClass : uint8_t { Scsi, Ide, Fc };
// "scsi", "ide", "fc"; false with a message naming the value otherwise.
bool parse_device_class(std::string_view text, DeviceClass& out, std::string& err);
const char* device_class_name(DeviceClass c);
// The class GUID the channels are offered with.
const vmbus::Guid& class_guid(DeviceClass c);
// The IDE target storvsc gives the disk of a Ide controller with this instance (Linux:
// dev_instance.b[5] << 8 | b[4]).
uint16_t ide_target(const vmbus::Guid& instance);
// A world wide name as 16 hex digits ("c003ff0000ff0001"); false with a message that names
// `what` (port-wwn, node-wwn) otherwise. Zero is no name.
bool parse_wwn(std::string_view text, const char* what, uint64_t& out, std::string& err);

// An unsolicited packet for the guest (hv-storvsc's `notify`); storvsc scans the bus on either.
enum class Notice : uint8_t { EnumerateBus, RemoveDevice };
// "enumerate-bus", "remove-device"; false with a message naming the value otherwise.
bool parse_notice(std::string_view text, Notice& out, std::string& err);

struct ControllerConfig {
    // Subchannels offered at most, in addition to the primary. The guest asks for
    // min(CPUs - 1, this); 0 disables multi-channel.
    uint16_t max_subchannels = 16;
    uint32_t max_transfer_bytes = 256 * 1024;
    // Requests taken from one channel's ring and not yet completed. Beyond it the ring is
    // not read (the guest sees a full ring and requeues), never dropped.
    uint32_t max_outstanding_per_channel = 256;
    uint16_t max_protocol_version = kVersionWin10;
    // Once the controller is ready, a guest signal or a completion finding a channel's
    // worker asleep runs the round (taking the SRBs, submitting them, sending what completed
    // at once) on its own thread, while no attached disk's submits may block. Control
    // packets always go to the worker. Off: every round on the channel's worker.
    bool inline_rounds = true;
    // How guest-error lines name the controller ("hv-storvsc scsi0").
    std::string name = "storvsp";
    // Where the channels' workers run: empty, a thread per open channel; else the channel
    // at place p (queue_place: 0 the primary, k subchannel k) turns in loops[p %
    // loops.size()] (QEMU: iothread=, iothread-vq-mapping=). The loops outlive the
    // controller.
    std::vector<vmbus::EventLoop*> loops{};
    // How the guest's resets are answered at first (Controller::set_reset_answer changes it).
    ResetAnswer reset_answer = ResetAnswer::Answer;
    DeviceClass device_class = DeviceClass::Scsi;
    // Fc only (non-zero there): FCHBA_DATA's answer, the primary pair and the one active.
    uint64_t port_wwn = 0, node_wwn = 0;
};

// Each queue preallocates its request pool (outstanding x the largest transfer's page list),
// so the product of the three settings is host memory: bounded here, at configuration time.
constexpr uint64_t kMaxPreallocatedBytes = 1024ull << 20;
// Host memory a controller allocates at most: every subchannel open and as many closing.
uint64_t preallocated_bytes(const ControllerConfig& cfg);
// The most queues (channel objects with their request pools) a controller ever holds.
uint64_t max_queues(const ControllerConfig& cfg);
// The largest packet a channel takes from the guest: an SRB for max-transfer bytes at any
// alignment as a GPA-direct packet, even with every page a range of its own (Linux sends one
// range). Never less than vmbus::kMaxIncomingPacket.
uint32_t max_request_packet(const ControllerConfig& cfg);
// The place of queue `index` among the primary (0) and the max_subchannels subchannels
// (1..max): its own index, or, for a queue made while the one it stands in for still closes
// (indexes past max_subchannels), the place it takes, (index - 1) mod max + 1.
uint16_t queue_place(const ControllerConfig& cfg, uint16_t index);
// False with a message naming the setting when a value is out of range or the product
// above exceeds kMaxPreallocatedBytes. Controller::start() refuses such a configuration.
bool validate(const ControllerConfig& cfg, std::string& err);

// One channel (hardware queue) as the guest used it, counted over every time it was open.
struct ChannelStatsSnapshot {
    uint16_t index = 0;  // 0: the primary
    uint32_t relid = 0;  // 0: not offered at present
    bool open = false;
    uint64_t packets_in = 0, packets_out = 0;
    uint64_t srbs = 0;
    uint64_t completions = 0;  // SRBs answered
    uint64_t srb_errors = 0;   // answered with an SRB status other than success
    uint64_t bad_packets = 0;  // malformed or out of state
    uint64_t guest_signals = 0, interrupts = 0, wakeups = 0;
    uint64_t inline_rounds = 0;    // rounds run on the signalling vCPU thread (inline_rounds)
    uint64_t ring_full_waits = 0;  // completions waited for room (pending_send_sz)
    uint64_t busy = 0;             // the ring was left unread: every request slot in use
    uint32_t outstanding = 0, max_outstanding = 0;
    // Resets the guest sent on this channel, by operation, and how many are held now
    // (ResetAnswer::Ignore); rescan notices sent.
    uint64_t reset_lun = 0, reset_bus = 0, reset_adapter = 0;
    uint32_t resets_held = 0;
    uint64_t enumerate_bus_sent = 0, remove_device_sent = 0;
};

struct ControllerStats {
    // Sums over the channels.
    uint64_t srbs = 0, completions = 0, srb_errors = 0, bad_packets = 0;
    uint64_t reset_lun = 0, reset_bus = 0, reset_adapter = 0;
    uint32_t resets_held = 0;
    uint64_t enumerate_bus_sent = 0, remove_device_sent = 0;
    uint64_t subchannels_offered = 0;
    uint32_t open_channels = 0;
    std::vector<ChannelStatsSnapshot> channels;  // [0] the primary, then subchannels by index
};

class Queue;

class Controller : public scsi::CommandSink {
public:
    static constexpr size_t kMaxLuns = 64;

    // `host` for the guest's data buffers and rings; `bus` for offers. Both outlive it.
    Controller(Host& host, vmbus::Bus& bus, const vmbus::Guid& instance, const ControllerConfig& cfg);
    ~Controller() override;

    // Offers the primary channel. Attach disks before or after (hot add).
    bool start(std::string& err);

    // LUN table (target 0, channel/path 0; Ide: its target, any path, LUN 0 only). Attaching or detaching while the guest is
    // connected tells it to rescan (ENUMERATE_BUS), unless `notice` is false (a test then
    // tells it with notify(), or not at all).
    bool attach(uint8_t lun, scsi::Disk* disk, std::string& err, bool notice = true);
    // When it returns, no channel worker submits to the disk any more (commands already
    // submitted still complete: drain the disk's backend before freeing it). A RESET_LUN
    // held for the LUN (ResetAnswer::Ignore) is answered.
    void detach(uint8_t lun, bool notice = true);

    // Any thread: sends `n` to the guest on the primary channel, through the same path as
    // the hot-plug notice (it waits for the guest's first SRB after its handshake, and
    // merges with a notice of the same kind not yet sent). False with a message when the
    // primary channel is not open: no session to tell.
    bool notify(Notice n, std::string& err);
    // Any thread. Resets held under Ignore are answered when it changes to another value.
    void set_reset_answer(ResetAnswer a);
    ResetAnswer reset_answer() const { return reset_answer_.load(); }

    const ControllerConfig& config() const { return cfg_; }
    const vmbus::Guid& instance() const { return instance_; }
    // Any thread.
    ControllerStats stats() const;
    uint32_t open_channels() const;
    uint32_t primary_relid() const { return primary_relid_; }

    // Saved state (savevm, migration), with the VM stopped (no channel round runs): the
    // handshake, each queue's relid, and what each open queue owes the guest: answers ready
    // to send, resets held, and the requests it took that have not finished, which the
    // loaded machine executes again (reads and writes of the same data: the guest cannot
    // tell, as after a lost completion that Hyper-V retried).
    void save(state::Writer& w) const;
    // Loading, after the bus's load() and before its finish_load(), with the controller as a
    // machine reset leaves it: binds the queues to their restored offers and keeps each open
    // queue's state for its reopening. False with the reason in `r`.
    bool load(state::Reader& r);
    // With the VM paused, before a migration's last pass: marks the guest memory the
    // controller writes through mappings that stay open (rings, request buffers) dirty.
    void mark_written() const;
    // After the bus's finish_load(): a primary that was closing at the save ends its session
    // (the handshake) and withdraws its subchannels, as its close would have; a queue that
    // was saved open and that the bus did not reopen drops what it loaded.
    void finish_load();
    // A load failed and the machine was reset, then the bus's abort_load() ran: the queues
    // drop what they loaded and take their offers' relids again, those the load added go,
    // and the reset answer and the count of subchannels offered are what they were.
    void abort_load();

    // scsi::CommandSink: routes a finished command back to its channel.
    void command_done(scsi::Command* cmd) override;

private:
    friend class Queue;

    // Whether an SRB's path and target reach this controller's LUN table.
    bool addresses(uint8_t path, uint8_t target) const;
    scsi::Disk* lookup(uint8_t path, uint8_t target, uint8_t lun);
    std::vector<uint16_t> luns();
    // From a worker: offer up to n subchannels; returns how many were offered.
    uint16_t create_subchannels(uint16_t n);
    void primary_closed();

    Host& host_;
    vmbus::Bus& bus_;
    vmbus::Guid instance_;
    ControllerConfig cfg_;
    // The target the disks answer on: 0, or an Ide controller's from its instance (start()
    // refuses one that is not a target of an IDE channel).
    uint16_t target_ = 0;
    std::atomic<uint64_t> subchannels_offered_{0};

    // The guest-error lines of every channel of this controller, over every open and close:
    // a guest that reopens channels in a loop, or breaks all of them at once, gets one burst
    // and then one line a second. Declared before channels_, so it outlives their workers.
    GuestErrorBudget guest_errors_;

    mutable std::mutex mu_;  // channels_
    // Read on every request by every channel's worker: no lock on that path.
    std::array<std::atomic<scsi::Disk*>, kMaxLuns> luns_{};
    std::vector<std::unique_ptr<Queue>> channels_; // [0] primary
    // channels_[0], for the paths that take no lock (a worker may be growing channels_).
    Queue* primary_ = nullptr;
    uint32_t primary_relid_ = 0;
    std::atomic<bool> ready_{false}; // the primary finished the handshake
    // Since then the guest sent an SRB: it is set up to take a rescan notice (Linux queues the
    // notice's work on a workqueue it only creates after the handshake, before its first scan).
    std::atomic<bool> srb_seen_{false};
    // Counts the primary's opens. A queue notes it at its own open, so that a round of an
    // earlier session still running (a subchannel whose close is not done) cannot set
    // srb_seen_ for the new one.
    std::atomic<uint64_t> session_{0};
    // Attached disks whose submits may wait: while there is one, no round runs inline (a
    // vCPU thread must not wait for a disk while it holds the BQL).
    std::atomic<uint32_t> blocking_disks_{0};
    std::atomic<ResetAnswer> reset_answer_{ResetAnswer::Answer};
    // load(): what it changed besides the queues' own state, as it was, for abort_load().
    struct BeforeLoad {
        ResetAnswer reset_answer;
        uint64_t subchannels_offered;
        size_t queues; // channels_.size()
    };
    std::optional<BeforeLoad> before_load_;
};

} // namespace hvstor::storvsp
