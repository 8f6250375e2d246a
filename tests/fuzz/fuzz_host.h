// A Host over a small fake guest RAM with an MMIO hole, for the fuzz targets that drive the
// device through the Host seam.
#pragma once

#include <atomic>
#include <cstdio>
#include <mutex>
#include <set>
#include <vector>

#include "fuzz_common.h"
#include "hvstor/host.h"
#include "hvstor/trace.h"

namespace hvstor::fuzz {

// A Host over `ram_size` bytes of fake guest RAM with [hole_start, hole_end) standing for
// MMIO. Counts map/unmap so a target can check that every mapping is released, and collects
// guest-error lines only as far as the targets need them (the channels that stopped).
class FuzzHost : public Host {
public:
    FuzzHost(uint64_t ram_size, uint64_t hole_start, uint64_t hole_end)
        : ram_size_(ram_size), hole_start_(hole_start), hole_end_(hole_end), ram_(reused_ram(ram_size)) {
        if (live().exchange(true)) fail("two FuzzHosts at once share one guest RAM");
        set_trace_sink(&sink_);
    }
    ~FuzzHost() {
        set_trace_sink(nullptr);
        live() = false;
    }
    FuzzHost(const FuzzHost&) = delete;
    FuzzHost& operator=(const FuzzHost&) = delete;

    uint64_t ram_size() const { return ram_size_; }
    uint64_t hole_start() const { return hole_start_; }
    uint64_t hole_end() const { return hole_end_; }

    bool valid(uint64_t gpa, size_t len) const {
        if (gpa > ram_size_ || len > ram_size_ - gpa) return false;
        return gpa + len <= hole_start_ || gpa >= hole_end_;
    }
    bool read_gpa(uint64_t gpa, void* dst, size_t len) override {
        if (!valid(gpa, len)) return false;
        std::memcpy(dst, ram_.data() + gpa, len);
        return true;
    }
    bool write_gpa(uint64_t gpa, const void* src, size_t len) override {
        if (!valid(gpa, len)) return false;
        std::memcpy(ram_.data() + gpa, src, len);
        return true;
    }
    bool atomic_or_u32(uint64_t gpa, uint32_t mask) override {
        if ((gpa & 3) || !valid(gpa, 4)) return false;
        std::atomic_ref<uint32_t>(*reinterpret_cast<uint32_t*>(ram_.data() + gpa)).fetch_or(mask);
        return true;
    }
    void* map(uint64_t gpa, size_t len, bool /*writable*/) override {
        if (len == 0 || len > kPageSize || (gpa % kPageSize) + len > kPageSize || !valid(gpa, len)) return nullptr;
        maps++;
        return ram_.data() + gpa;
    }
    void unmap(void* ptr, size_t len, bool /*written*/) override {
        auto* p = static_cast<uint8_t*>(ptr);
        if (p < ram_.data() || p + len > ram_.data() + ram_.size()) fail("unmap of a pointer map() never returned");
        unmaps++;
    }
    void raise_vector(uint32_t /*vp*/, uint8_t /*vector*/) override { irqs++; }

    void guest_error(const char* /*line*/) override { guest_errors++; }
    bool channel_stopped(uint32_t relid) {
        std::lock_guard lock(mu_);
        return stopped_.count(relid) != 0;
    }
    void forget_stopped(uint32_t relid) {
        std::lock_guard lock(mu_);
        stopped_.erase(relid);
    }

    uint8_t* ram(uint64_t gpa) { return ram_.data() + gpa; }
    void store(uint64_t gpa, const void* src, size_t len) {
        if (gpa > ram_size_ || len > ram_size_ - gpa) fail("harness store outside RAM");
        std::memcpy(ram_.data() + gpa, src, len);
    }
    template <typename T> void store(uint64_t gpa, const T& v) { store(gpa, &v, sizeof v); }
    template <typename T> T load(uint64_t gpa) {
        T v;
        std::memcpy(&v, ram_.data() + gpa, sizeof v);
        return v;
    }
    uint32_t load32(uint64_t gpa) {
        return std::atomic_ref<uint32_t>(*reinterpret_cast<uint32_t*>(ram_.data() + gpa)).load();
    }
    void store32(uint64_t gpa, uint32_t v) {
        std::atomic_ref<uint32_t>(*reinterpret_cast<uint32_t*>(ram_.data() + gpa)).store(v);
    }

    std::atomic<uint64_t> maps{0}, unmaps{0}, irqs{0}, guest_errors{0};

private:
    // Guest RAM is kept from one input to the next and zeroed again: fresh pages, faulted in
    // and cleared by the kernel for every input, took a third of a target's time. The
    // buffer is exactly ram_size long, so ASan still sees an access past its end.
    static std::vector<uint8_t>& reused_ram(uint64_t size) {
        static std::vector<uint8_t> ram;
        if (ram.size() != size) std::vector<uint8_t>(size, 0).swap(ram);
        else std::memset(ram.data(), 0, ram.size());
        return ram;
    }
    static std::atomic<bool>& live() {
        static std::atomic<bool> b{false};
        return b;
    }

    // A channel whose runtime stopped reading (a corrupt ring), from its trace event: the
    // guest-error line that says so shares the controller's rate limit and may be held back.
    static void on_trace(void* opaque, HvstorTraceEvent ev, const uint64_t* args) {
        if (ev != HVSTOR_TRACE_channel_stopped) return;
        auto* self = static_cast<FuzzHost*>(opaque);
        std::lock_guard lock(self->mu_);
        self->stopped_.insert(uint32_t(args[0]));
    }

    uint64_t ram_size_, hole_start_, hole_end_;
    std::vector<uint8_t>& ram_;
    std::mutex mu_;
    std::set<uint32_t> stopped_;
    const TraceSink sink_{on_trace, this};
};

} // namespace hvstor::fuzz
