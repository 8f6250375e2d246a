// A Host over a flat fake guest RAM, with a hole that stands for MMIO.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "hvstor/host.h"
#include "trace_capture.h"

namespace hvstor::test {

class FakeHost : public Host {
public:
    // RAM is [0, ram_size) except the hole [hole_start, hole_end).
    static constexpr uint64_t kRamSize = 8 << 20;
    static constexpr uint64_t kHoleStart = 6 << 20;
    static constexpr uint64_t kHoleEnd = 7 << 20;

    struct Irq {
        uint32_t vp;
        uint8_t vector;
    };

    FakeHost() : ram_(kRamSize, 0) {}

    bool valid(uint64_t gpa, size_t len) const {
        if (gpa > kRamSize || len > kRamSize - gpa) return false;
        return gpa + len <= kHoleStart || gpa >= kHoleEnd;
    }
    // Copies are serialized, as one guest CPU's accesses to a cache line are: the fake
    // guest reads the SynIC's message slots through them while device threads post.
    bool read_gpa(uint64_t gpa, void* dst, size_t len) override {
        note_thread();
        if (!valid(gpa, len)) return false;
        std::lock_guard lock(mem_mu_);
        std::memcpy(dst, ram_.data() + gpa, len);
        return true;
    }
    bool write_gpa(uint64_t gpa, const void* src, size_t len) override {
        note_thread();
        if (!valid(gpa, len)) return false;
        std::lock_guard lock(mem_mu_);
        std::memcpy(ram_.data() + gpa, src, len);
        return true;
    }
    bool atomic_or_u32(uint64_t gpa, uint32_t mask) override {
        note_thread();
        if ((gpa & 3) || !valid(gpa, 4)) return false;
        std::atomic_ref<uint32_t>(*reinterpret_cast<uint32_t*>(ram_.data() + gpa)).fetch_or(mask);
        return true;
    }
    void* map(uint64_t gpa, size_t len, bool /*writable*/) override {
        note_thread();
        if (len == 0 || len > 4096 || (gpa & 4095) + len > 4096 || !valid(gpa, len)) return nullptr;
        maps++;
        return ram_.data() + gpa;
    }
    void unmap(void* /*ptr*/, size_t /*len*/, bool /*written*/) override {
        note_thread();
        unmaps++;
    }
    // Guest addresses of the ranges marked written (Host::mark_written), in call order.
    void mark_written(void* ptr, size_t len) override {
        std::lock_guard lock(mu_);
        marked.push_back({uint64_t(static_cast<uint8_t*>(ptr) - ram_.data()), len});
    }
    struct Range {
        uint64_t gpa;
        size_t len;
    };
    std::vector<Range> marked;
    // Whether [gpa, gpa + len) was marked written, in one call or several.
    bool was_marked(uint64_t gpa, size_t len) {
        std::lock_guard lock(mu_);
        for (uint64_t a = gpa; a < gpa + len;) {
            auto r = std::find_if(marked.begin(), marked.end(), [&](const Range& m) { return a >= m.gpa && a < m.gpa + m.len; });
            if (r == marked.end()) return false;
            a = r->gpa + r->len;
        }
        return true;
    }

    // What the VMM's event loop would run while a reset waits (set before the wait).
    std::function<void()> on_poll;
    void poll_while_waiting() override {
        if (on_poll) on_poll();
    }
    // Runs on the raising thread before each interrupt is recorded (set while no other thread
    // raises).
    std::function<void()> on_raise;
    void raise_vector(uint32_t vp, uint8_t vector) override {
        note_thread();
        if (on_raise) on_raise();
        std::lock_guard lock(mu_);
        irqs.push_back({vp, vector});
    }

    void guest_error(const char* line) override {
        std::lock_guard lock(mu_);
        guest_errors.push_back(line);
    }
    // The model's clock (Host::now): the host's own until a test stops it with
    // stop_clock(); from then on it moves only by advance_clock().
    std::chrono::steady_clock::time_point now() override {
        const int64_t ns = clock_ns_.load();
        using namespace std::chrono;
        return ns < 0 ? Host::now() : steady_clock::time_point(duration_cast<steady_clock::duration>(nanoseconds(ns)));
    }
    void stop_clock() {
        clock_ns_ = std::chrono::duration_cast<std::chrono::nanoseconds>(Host::now().time_since_epoch()).count();
    }
    void advance_clock(std::chrono::nanoseconds d) { clock_ns_ += d.count(); }
    // How many guest-error lines contain `text`.
    size_t count_logged(const std::string& text) {
        std::lock_guard lock(mu_);
        size_t n = 0;
        for (auto& l : guest_errors) n += l.find(text) != std::string::npos;
        return n;
    }

    // Whether a guest-error line containing `text` was reported.
    bool logged(const std::string& text) {
        std::lock_guard lock(mu_);
        for (auto& l : guest_errors)
            if (l.find(text) != std::string::npos) return true;
        return false;
    }

    // Trace events are process-wide (hvstor/trace.h), not the host's: the fake host, standing
    // for the VMM, captures those of its lifetime. The arguments of every `ev` traced since
    // it was made, in order, whichever host's model traced it.
    std::vector<std::vector<uint64_t>> traced(HvstorTraceEvent ev) const { return trace_.traced(ev); }

    // While check_threads is set, guest memory and interrupt calls from a thread the VMM
    // does not know are counted: one that neither ran the thread hooks (hvstor/thread.h;
    // a test's hooks set known_thread) nor set known_thread itself.
    static inline thread_local bool known_thread = false;
    std::atomic<bool> check_threads{false};
    std::atomic<uint64_t> unknown_thread_calls{0};

    uint8_t* ram(uint64_t gpa) { return ram_.data() + gpa; }
    template <typename T> T load(uint64_t gpa) {
        T v;
        std::memcpy(&v, ram_.data() + gpa, sizeof v);
        return v;
    }
    template <typename T> void store(uint64_t gpa, const T& v) { std::memcpy(ram_.data() + gpa, &v, sizeof v); }

    // irqs.size() while device threads may raise.
    size_t irq_count() {
        std::lock_guard lock(mu_);
        return irqs.size();
    }

    std::vector<Irq> irqs;
    std::vector<std::string> guest_errors;
    std::atomic<uint64_t> maps{0}, unmaps{0};

private:
    void note_thread() {
        if (check_threads.load(std::memory_order_relaxed) && !known_thread) unknown_thread_calls++;
    }

    std::mutex mu_;
    std::atomic<int64_t> clock_ns_{-1}; // steady_clock nanoseconds; -1: the host's own clock
    std::mutex mem_mu_; // read_gpa and write_gpa; a leaf lock
    TraceCapture trace_;
    alignas(8) std::vector<uint8_t> ram_;
};

} // namespace hvstor::test
