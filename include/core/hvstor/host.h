// The one interface between the device model and the VMM that runs it.
//
// Everything below hw/qemu reaches guest memory, interrupts and time only through
// Host. QEMU implements it in the glue; tests implement it with a fake guest.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>

#include "hvstor/run_gate.h"

namespace hvstor {

// The guest page size: the unit of GPADLs, ring pages, SynIC pages and Host::map.
constexpr uint32_t kPageSize = 4096;

class Host {
public:
    virtual ~Host() = default;

    // Copy between guest RAM and the host. Returns false, touching nothing, unless the
    // whole range [gpa, gpa + len) is guest RAM (never MMIO, never outside the guest).
    virtual bool read_gpa(uint64_t gpa, void* dst, size_t len) = 0;
    virtual bool write_gpa(uint64_t gpa, const void* src, size_t len) = 0;

    // Atomically OR `mask` into the little-endian u32 at gpa (4-byte aligned guest RAM).
    // Needed where the guest clears bits of the same word concurrently (SynIC event
    // flags). Returns false if gpa is not aligned guest RAM.
    virtual bool atomic_or_u32(uint64_t gpa, uint32_t mask) = 0;

    // Direct access to guest RAM for the zero-copy data path and the rings: a host
    // pointer to [gpa, gpa + len), which must lie within one page. nullptr unless the whole
    // range is guest RAM. The mapping stays valid (pinned against memory map changes)
    // until unmap(); `written` marks the pages dirty for migration.
    virtual void* map(uint64_t gpa, size_t len, bool writable) = 0;
    virtual void unmap(void* ptr, size_t len, bool written) = 0;
    // Marks a mapping's range dirty for migration now, as unmap(written) would, for one that
    // stays mapped: the machine calls it for every writable mapping in use when the VM stops,
    // before a migration's last pass (a channel's ring pages stay mapped while it is open).
    virtual void mark_written(void* ptr, size_t len) { (void)ptr, (void)len; }

    // Fixed-delivery interrupt with `vector` to virtual processor `vp`'s local APIC.
    // Called with no lock of the device model held, from any thread; never blocks on the
    // VMM's own locks when called from a device model thread.
    virtual void raise_vector(uint32_t vp, uint8_t vector) = 0;

    // The guest broke the protocol: one line saying where, which field and its value.
    // Any thread. QEMU logs it under LOG_GUEST_ERROR (-d guest_errors). Callers rate-limit
    // (hvstor/guest_log.h).
    virtual void guest_error(const char* line) { (void)line; }

    // The monotonic clock of the model's own bookkeeping (the guest-error lines' rate
    // limit); any thread. Tests give a clock they move by hand, so no test sleeps.
    virtual std::chrono::steady_clock::time_point now() { return std::chrono::steady_clock::now(); }

    // Called about every millisecond by a thread that waits for the device model's own
    // threads (a machine reset waiting for the channels' closes): runs, without blocking,
    // whatever of the VMM's work those threads may be waiting on. QEMU runs its main
    // loop's ready bottom halves and block-layer work there: a request of a drive= disk
    // parked by a drained section resumes only when the main loop ends that section.
    virtual void poll_while_waiting() {}

    // The VM's run state (hvstor/run_gate.h): whatever reads a ring, writes guest memory or
    // raises an interrupt does so inside a RunGate::Section of it. The VMM pauses it when
    // the VM stops and resumes it when the VM runs again; it starts running.
    RunGate& run_gate() { return run_gate_; }

private:
    RunGate run_gate_;
};

} // namespace hvstor
