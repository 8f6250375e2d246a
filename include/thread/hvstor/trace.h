// The model's trace events (hvstor/trace_events.h), and the host's sink for them.
//
// One process-wide sink, as for the thread hooks (hvstor/thread.h): every layer traces with
// hvstor::trace<HVSTOR_TRACE_NAME>(args...), without a Host or anything else handed down,
// and the VMM sets the sink once (QEMU: hvstor_set_trace_hook, which hands each event to
// its trace backends as hvstor_NAME). With no sink an event costs one atomic load.
//
// Header only, and seen by every layer: it includes nothing of ours but the event list.
#pragma once

#include <atomic>
#include <cstdint>

#include "hvstor/trace_events.h"

namespace hvstor {

struct TraceSink {
    // Event `ev` with its arguments, as many as hvstor/trace_events.h lists for it. Called
    // from any thread, with the model's locks possibly held: it must not block, throw or
    // call back into the model.
    void (*event)(void* opaque, HvstorTraceEvent ev, const uint64_t* args) = nullptr;
    void* opaque = nullptr;
};

namespace trace_detail {
inline std::atomic<const TraceSink*> sink{nullptr};
#define HVSTOR_TRACE_NARGS(name, nargs) nargs,
inline constexpr unsigned kArgs[] = {HVSTOR_TRACE_EVENTS(HVSTOR_TRACE_NARGS)};
#undef HVSTOR_TRACE_NARGS
} // namespace trace_detail

// Where events go from now on; nullptr: nowhere. `sink` must stay valid for as long as any
// thread may still be in the middle of an event after it is replaced: a static.
inline void set_trace_sink(const TraceSink* sink) noexcept {
    trace_detail::sink.store(sink, std::memory_order_release);
}

// Whether a sink is set: for callers whose arguments cost something to compute.
inline bool tracing() noexcept { return trace_detail::sink.load(std::memory_order_relaxed) != nullptr; }

// trace<HVSTOR_TRACE_storvsp_srb_submit>(relid, id, lun, opcode, bytes)
template <HvstorTraceEvent E, typename... A> inline void trace(A... args) noexcept {
    static_assert(sizeof...(A) == trace_detail::kArgs[E], "argument count differs from hvstor/trace_events.h");
    const TraceSink* s = trace_detail::sink.load(std::memory_order_acquire);
    if (s == nullptr || s->event == nullptr) return;
    const uint64_t v[HVSTOR_TRACE_MAX_ARGS + 1] = {static_cast<uint64_t>(args)...};
    s->event(s->opaque, E, v);
}

} // namespace hvstor
