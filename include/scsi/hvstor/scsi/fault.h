// Faults injected into a disk's I/O, for testing how a guest driver handles errors: chosen
// or random reads, writes and flushes fail with a SCSI status and sense the guest must act
// on, stall (for a time, or until the fault is changed) while the rest of the disk works,
// or complete with the exact transport-level answer (SRB status, SCSI status, sense, bytes
// transferred, operation status) a Hyper-V host can give.
//
// As text (hv-disk's `fault` property, settable at run time over QMP):
//   ACTION[,MATCH...]
//   ACTION: error=medium | error=not-ready | error=unit-attention | error=busy
//           | stall=MILLISECONDS | stall=hold
//           | srb=STATUS[,scsi=STATUS][,sense=KEY/ASC/ASCQ][,data=BYTES][,autosense=on|off]
//           | opstatus=0xNNNNNNNN (alone: the command runs as usual; with another action:
//             the completion's operation status as well)
//           | none
//   srb=:   success error aborted busy invalid-request timeout selection-timeout bus-reset
//           data-overrun invalid-lun internal-error, or a byte 0xNN (flags as written)
//   scsi=:  good check-condition busy task-set-full, or a byte 0xNN (default:
//           check-condition with sense=, good without)
//   sense=: fixed-format sense, hex: KEY 0..f, ASC and ASCQ 00..ff (e.g. 3/11/00)
//   data=:  bytes reported transferred (default: the command's length for a success status,
//           0 otherwise); above 0 the command runs on the backend first, so that the bytes
//           reported are real
//   autosense=: with a named status, the AUTOSENSE_VALID flag (0x80); default on with
//           sense=, off without
//   MATCH:  ops=read|write|flush|any  (default any; "any" is all three)
//           lba=FIRST[-LAST]          (reads and writes touching those blocks)
//           every=N                   (the Nth, 2Nth, ... matching command; default 1)
//           percent=P, seed=S         (each matching command with probability P/100,
//                                      drawn from a generator seeded with S: repeatable)
//           count=N                   (at most N injections; default unlimited)
// e.g. "error=medium,ops=read,lba=2048-4095", "error=busy,every=3", "stall=hold,ops=write,count=1",
// "srb=aborted,scsi=check-condition,sense=6/2a/09,count=1", "srb=success,data=2048,ops=read".
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace hvstor::scsi {

struct FaultSpec {
    enum class Action : uint8_t { None, MediumError, NotReady, UnitAttention, Busy, Stall, Srb, OpStatus };
    Action action = Action::None;
    bool reads = true, writes = true, flushes = true;
    uint64_t lba_first = 0, lba_last = UINT64_MAX;
    uint32_t every = 1;      // 1..1000000
    uint32_t percent = 100;  // 1..100
    uint64_t seed = 1;
    uint64_t count = 0;      // 0: no limit
    uint32_t stall_ms = 0;   // Stall: 0 holds until the fault is changed or cleared

    // Srb: the completion's fields, resolved (flags and defaults applied).
    uint8_t srb_status = 0;
    uint8_t scsi_status = 0;
    bool has_sense = false;
    uint8_t sense_key = 0, asc = 0, ascq = 0;
    bool has_data = false;   // else the default: the command's length on success, else 0
    uint32_t data = 0;
    // opstatus=: the VStor packet's operation status on the completion (any action).
    bool has_op_status = false;
    uint32_t op_status = 0;

    bool operator==(const FaultSpec&) const = default;
};

// Where a fault's every=, percent= and count= stand: commands matched, injections made, the
// generator's state. A saved machine carries them (its fault goes on where it was).
struct FaultCounts {
    uint64_t matched = 0;
    uint64_t injected = 0;
    uint64_t rng = 1; // never 0 (xorshift)
};

// False with a message naming the setting when `text` is not a fault as described above.
// "" and "none" are no fault.
bool parse_fault(std::string_view text, FaultSpec& out, std::string& err);

// The settings the text is made of, in the order above, each with what it means: what an
// object form of the fault offers (-object hv-fault). parse_fault knows exactly these.
struct FaultKey {
    std::string_view name;
    std::string_view meaning;
};
std::span<const FaultKey> fault_keys();

} // namespace hvstor::scsi
