// The model's trace events as a test sees them: a capture records every event of the
// process (hvstor/trace.h) from its construction to its destruction. While any capture
// exists the process-wide sink is the captures'; any number may exist at once, each seeing
// every event of its time, whichever host or disk it came from.
#pragma once

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <vector>

#include "hvstor/trace.h"

namespace hvstor::test {

class TraceCapture {
public:
    struct Event {
        HvstorTraceEvent ev;
        std::vector<uint64_t> args;
    };

    TraceCapture() {
        std::lock_guard lock(mu());
        live().push_back(this);
        set_trace_sink(&kSink);
    }
    // Under the lock a sink call takes: once this returns, no device thread still writes here.
    ~TraceCapture() {
        std::lock_guard lock(mu());
        auto& l = live();
        l.erase(std::find(l.begin(), l.end(), this));
        if (l.empty()) set_trace_sink(nullptr);
    }
    TraceCapture(const TraceCapture&) = delete;
    TraceCapture& operator=(const TraceCapture&) = delete;

    // Every event so far, in order.
    std::vector<Event> events() const {
        std::lock_guard lock(mu());
        return events_;
    }
    // The arguments of every `ev` so far, in order.
    std::vector<std::vector<uint64_t>> traced(HvstorTraceEvent ev) const {
        std::lock_guard lock(mu());
        std::vector<std::vector<uint64_t>> out;
        for (auto& e : events_)
            if (e.ev == ev) out.push_back(e.args);
        return out;
    }

private:
    // Never destroyed: a device thread may trace while the process exits.
    static std::mutex& mu() {
        static auto* m = new std::mutex;
        return *m;
    }
    static std::vector<TraceCapture*>& live() {
        static auto* l = new std::vector<TraceCapture*>;
        return *l;
    }
    static void record(void* /*opaque*/, HvstorTraceEvent ev, const uint64_t* args) {
        std::lock_guard lock(mu());
        for (TraceCapture* c : live())
            c->events_.push_back({ev, std::vector<uint64_t>(args, args + trace_detail::kArgs[ev])});
    }
    static constexpr TraceSink kSink{record, nullptr};

    std::vector<Event> events_;  // under mu()
};

} // namespace hvstor::test
