// Faults injected into a disk's I/O, for testing how a guest driver handles errors: chosen
// or random reads, writes and flushes fail with a SCSI status and sense the guest must act
// on, or stall (for a time, or until the fault is changed) while the rest of the disk works.
//
// As text (hv-disk's `fault` property, settable at run time over QMP):
//   ACTION[,MATCH...]
//   ACTION: error=medium | error=not-ready | error=unit-attention | error=busy
//           | stall=MILLISECONDS | stall=hold | none
//   MATCH:  ops=read|write|flush|any  (default any; "any" is all three)
//           lba=FIRST[-LAST]          (reads and writes touching those blocks)
//           every=N                   (the Nth, 2Nth, ... matching command; default 1)
//           percent=P, seed=S         (each matching command with probability P/100,
//                                      drawn from a generator seeded with S: repeatable)
//           count=N                   (at most N injections; default unlimited)
// e.g. "error=medium,ops=read,lba=2048-4095", "error=busy,every=3", "stall=hold,ops=write,count=1".
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace hvstor::scsi {

struct FaultSpec {
    enum class Action : uint8_t { None, MediumError, NotReady, UnitAttention, Busy, Stall };
    Action action = Action::None;
    bool reads = true, writes = true, flushes = true;
    uint64_t lba_first = 0, lba_last = UINT64_MAX;
    uint32_t every = 1;      // 1..1000000
    uint32_t percent = 100;  // 1..100
    uint64_t seed = 1;
    uint64_t count = 0;      // 0: no limit
    uint32_t stall_ms = 0;   // Stall: 0 holds until the fault is changed or cleared
};

// False with a message naming the setting when `text` is not a fault as described above.
// "" and "none" are no fault.
bool parse_fault(std::string_view text, FaultSpec& out, std::string& err);

} // namespace hvstor::scsi
