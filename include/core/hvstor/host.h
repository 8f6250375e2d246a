// The one interface between the device model and the VMM that runs it.
//
// Everything below hw/qemu reaches guest memory, interrupts and time only through
// Host. QEMU implements it in the glue; tests implement it with a fake guest.
#pragma once

#include <cstddef>
#include <cstdint>

#include "hvstor/run_gate.h"
#include "hvstor/trace_events.h"

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

    // Fixed-delivery interrupt with `vector` to virtual processor `vp`'s local APIC.
    // Called with no lock of the device model held, from any thread; never blocks on the
    // VMM's own locks when called from a device model thread.
    virtual void raise_vector(uint32_t vp, uint8_t vector) = 0;

    // The guest broke the protocol: one line saying where, which field and its value.
    // Any thread. QEMU logs it under LOG_GUEST_ERROR (-d guest_errors). Callers rate-limit
    // (hvstor/guest_log.h).
    virtual void guest_error(const char* line) { (void)line; }

    // Trace event `ev` with its arguments (hvstor/trace_events.h), from any thread, with
    // device-model locks possibly held: must not block. QEMU passes it to its trace
    // backends as hvstor_NAME. Call it through hvstor::trace<>, which checks the count.
    virtual void trace(HvstorTraceEvent ev, const uint64_t* args) { (void)ev, (void)args; }

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

namespace trace_detail {
#define HVSTOR_TRACE_NARGS(name, nargs) nargs,
inline constexpr unsigned kArgs[] = {HVSTOR_TRACE_EVENTS(HVSTOR_TRACE_NARGS)};
#undef HVSTOR_TRACE_NARGS
} // namespace trace_detail

// trace<HVSTOR_TRACE_storvsp_srb_submit>(host, relid, id, lun, opcode, bytes)
template <HvstorTraceEvent E, typename... A> inline void trace(Host& host, A... args) {
    static_assert(sizeof...(A) == trace_detail::kArgs[E], "argument count differs from hvstor/trace_events.h");
    const uint64_t v[HVSTOR_TRACE_MAX_ARGS + 1] = {static_cast<uint64_t>(args)...};
    host.trace(E, v);
}

} // namespace hvstor
