// SCSI disk target with a Hyper-V identity (vendor "Msft", product "Virtual Disk"),
// over a block backend. The storage protocol hands it CDBs and guest buffers.
#pragma once

#include <sys/uio.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>

#include "hvstor/backend/backend.h"
#include "hvstor/scsi/fault.h"

namespace hvstor::scsi {

enum class Dir : uint8_t { None, ToDevice, FromDevice };

// SAM status codes.
constexpr uint8_t kStatusGood = 0x00;
constexpr uint8_t kStatusCheckCondition = 0x02;
constexpr uint8_t kStatusBusy = 0x08;

// Sense keys used here.
constexpr uint8_t kSenseNoSense = 0x0, kSenseNotReady = 0x2, kSenseMediumError = 0x3,
                  kSenseHardwareError = 0x4, kSenseIllegalRequest = 0x5, kSenseUnitAttention = 0x6,
                  kSenseDataProtect = 0x7, kSenseAbortedCommand = 0xB;

// A transport-level answer a fault chose (fault.h: srb=, opstatus=), carried on the command
// as plain bytes for the storage protocol to apply to the completion it sends: the transport
// applies them, the SCSI layer never acts on them. Cleared when the command is submitted.
struct TransportAnswer {
    bool srb = false;          // the completion carries the fields below, not what status implies
    uint8_t srb_status = 0;    // SRB status byte, flags included
    uint8_t scsi_status = 0;   // SCSI status byte
    uint8_t sense_len = 0;     // bytes of sense (fixed format), 0 for none
    std::array<uint8_t, 18> sense{};
    uint32_t data_length = 0;  // bytes reported transferred (unless data_as_moved)
    bool data_as_moved = false; // report what the command moved (a success status without data=)
    bool op = false;           // the completion's operation status is op_status
    uint32_t op_status = 0;
};

struct Command {
    // In.
    std::array<uint8_t, 16> cdb{};
    uint8_t cdb_len = 0;
    Dir dir = Dir::None;
    const iovec* iov = nullptr;  // the guest's buffer, xfer_len bytes in total
    uint32_t iovcnt = 0;
    uint32_t xfer_len = 0;
    void* opaque = nullptr;      // the submitter's
    uint16_t queue = 0;          // the submitter's queue, handed on in backend::Request

    // Out, valid in command_done().
    uint8_t status = kStatusGood;
    std::array<uint8_t, 18> sense{}; // fixed-format sense data when CHECK CONDITION
    uint8_t sense_len = 0;
    uint32_t data_transferred = 0;   // bytes actually moved (less than xfer_len = short)
    // What the transport reports instead (a fault's srb= or opstatus=); the fields above stay
    // what the disk did. A command that ran and failed on the disk keeps its own status.
    TransportAnswer transport;

    // The disk's own, for one backend request per command (no allocation per I/O).
    backend::Request be_req;
    // The disk's own: what its fault counted of this command until it is answered
    // (Disk::fault_counts). gen: the fault's setting that counted it.
    struct FaultMark {
        uint64_t gen = 0;
        bool matched = false, injected = false;
    } fault_mark;
};

class CommandSink {
public:
    virtual ~CommandSink() = default;
    // Exactly once per submitted command, from any thread.
    virtual void command_done(Command* cmd) = 0;
};

struct DiskConfig {
    std::string vendor = "Msft";           // 8 chars, padded
    std::string product = "Virtual Disk";  // 16 chars, padded
    std::string revision = "1.0";          // 4 chars, padded
    std::string serial;                    // VPD 0x80 when set
    uint64_t naa_id = 0;                   // VPD 0x83 NAA designator (0: derived from serial)
    uint32_t max_transfer_bytes = 256 * 1024; // Block Limits VPD; larger commands are refused
    // A capacity change (resize) is reported to the guest with a unit attention. Off: the
    // disk changes size silently, and the guest learns of it only when told otherwise (a
    // fault's srb=...,sense=6/2a/09, a rescan).
    bool capacity_notice = true;
    // For trace events only (hvstor/trace_events.h): the disk id its layers share, and the
    // LUN it answers on.
    uint32_t trace_id = 0;
    uint16_t lun = 0;
};

struct DiskStats {
    std::atomic<uint64_t> reads{0}, writes{0}, flushes{0}, other{0};
    std::atomic<uint64_t> bytes_read{0}, bytes_written{0};
    std::atomic<uint64_t> errors{0};  // commands ending in CHECK CONDITION
    std::atomic<uint64_t> faults{0};  // injected (fault.h): failed, stalled or answered
    std::atomic<uint64_t> stalled{0}; // held by a stall fault right now
    std::atomic<uint64_t> unit_attentions{0}; // capacity changes reported (resize())
};

namespace detail {
class FaultInjector;
struct Target;
} // namespace detail

class Disk : private backend::CompletionSink {
public:
    Disk(backend::Backend& be, const DiskConfig& cfg, CommandSink& sink);
    // Whether submitting to this disk may wait (backend::Backend::submit_may_block).
    bool submit_may_block() const { return be_.submit_may_block(); }
    ~Disk() override;

    // Starts commands; each completes exactly once through the CommandSink. Thread-safe.
    // Reads and writes of one batch reach the backend in one submit() call.
    void submit(std::span<Command* const> cmds);
    void submit(Command* cmd) { submit(std::span<Command* const>(&cmd, 1)); }

    const DiskStats& stats() const { return stats_; }
    uint64_t blocks() const;

    // Changes the capacity to `bytes` while commands run (any thread): the backend resizes
    // (Backend::resize; false with its reason in `err`, and nothing changes), then READ
    // CAPACITY and every range check use the new size, and when the block count changed,
    // the next command the guest sends gets CHECK CONDITION, UNIT ATTENTION, CAPACITY DATA
    // HAS CHANGED (2A/09): exactly one command, whichever channel it comes from. As SPC
    // has it, INQUIRY passes a pending unit attention by and REQUEST SENSE returns it as
    // its data (GOOD); REPORT LUNS never reaches the disk. Several changes before the
    // next command make one unit attention.
    bool resize(uint64_t bytes, std::string& err);

    // Fault injection (fault.h); any thread. Setting a fault starts commands the previous
    // one held. Call stop_faults() before draining the backend for good: it releases every
    // held command to the backend and no fault applies afterwards.
    void set_fault(const FaultSpec& spec);
    // A fault that goes on from `counts` (a loaded machine's), not from its start.
    void set_fault(const FaultSpec& spec, const FaultCounts& counts);
    // The counts as a save carries them: a command not yet answered (held by a stall, in
    // the backend or a disk model) is executed again after a load and meets the fault again,
    // so what the fault counted of it is not in them.
    FaultCounts fault_counts() const;
    void stop_faults();
    // While suspended no fault applies and nothing is held (a machine reset waits for
    // every request); the fault applies again after suspend_faults(false).
    void suspend_faults(bool on);

private:
    void complete(backend::Request* req) override; // backend requests this disk issued
    void start_now(Command* cmd);                  // a command released by the injector
    void finish(Command& cmd);                     // answers it (the fault's counts settle)
    bool report_capacity_change(Command& cmd);     // true: answered with the unit attention
    detail::Target target();

    backend::Backend& be_;
    DiskConfig cfg_;
    CommandSink& sink_;
    DiskStats stats_;
    std::atomic<uint32_t> pattern_writes_{0}; // see detail::Target
    std::mutex resize_mu_;
    std::atomic<bool> capacity_changed_{false}; // a unit attention is pending
    std::unique_ptr<detail::FaultInjector> faults_;
};

// Helpers for the controller: answers for a LUN with no disk behind it (INQUIRY gets
// peripheral qualifier 3 data, 0x7F, as the guest expects; everything else CHECK CONDITION
// ILLEGAL REQUEST / LOGICAL UNIT NOT SUPPORTED), and REPORT LUNS from the controller's
// LUN list. Both complete synchronously (they fill the Command's out fields and return).
void answer_absent_lun(Command& cmd);
void answer_report_luns(Command& cmd, std::span<const uint16_t> luns);

// Fills fixed-format sense (18 bytes) and CHECK CONDITION.
void set_sense(Command& cmd, uint8_t key, uint8_t asc, uint8_t ascq);

// Copies between a flat buffer and an iovec list; returns bytes copied.
size_t copy_to_iov(const iovec* iov, uint32_t iovcnt, const void* src, size_t len);
size_t copy_from_iov(const iovec* iov, uint32_t iovcnt, void* dst, size_t len);

} // namespace hvstor::scsi
