// The disk model's settings text ("profile=premium-p10,iops=800,latency.read=...", the
// hv-disk perf= and hv-vmbus-bridge vm-perf= properties) as a user or a script could write it,
// and the preset lookup. A disk setting that parses is then run: a model on the virtual clock
// over a null disk serves a few requests, so the values the parser let through meet the
// scheduler, the limiters and the latency sampler.
//
// Input: a mode byte (0: disk settings, 1: VM settings, 2: preset names), then the text.
// Checked: on failure the output is unchanged and there is a message; on success every rate,
// probability and duration is finite and in range; nothing throws but std::bad_alloc; every
// request the model takes completes once.
#include <cmath>
#include <new>
#include <string_view>

#include "fuzz_common.h"
#include "hvstor/backend/backend.h"
#include "hvstor/perf/model.h"

using namespace hvstor;
using namespace hvstor::fuzz;
using namespace hvstor::perf;

namespace {

bool rate_ok(double v) { return std::isfinite(v) && v >= 0; }

void check_caps(const Caps& c) {
    FUZZ_CHECK(rate_ok(c.iops) && rate_ok(c.bytes_per_s) && rate_ok(c.burst_iops) && rate_ok(c.burst_bytes_per_s));
    FUZZ_CHECK(c.burst_start >= 0 && c.burst_start <= 1);
    FUZZ_CHECK(c.burst_duration >= 0 && c.window >= 0);
}

void check_dist(const Distribution& d) { FUZZ_CHECK(d.a >= 0 && d.b >= 0); }

void check(const ModelConfig& c) {
    check_caps(c.caps);
    FUZZ_CHECK(c.io_unit >= 512);
    FUZZ_CHECK(rate_ok(c.read_iops) && rate_ok(c.read_bytes_per_s) && rate_ok(c.write_iops) &&
               rate_ok(c.write_bytes_per_s));
    check_dist(c.read_latency);
    check_dist(c.write_latency);
    check_dist(c.flush_latency);
    FUZZ_CHECK(rate_ok(c.ns_per_kib));
    FUZZ_CHECK(std::isfinite(c.spike_prob) && c.spike_prob >= 0 && c.spike_prob <= 1);
    FUZZ_CHECK(c.spike_latency >= 0 && c.timer_min_period >= 0 && c.stats_interval >= 0);
    FUZZ_CHECK(std::isfinite(c.time_scale) && c.time_scale > 0);
}

class Done : public backend::CompletionSink {
public:
    void complete(backend::Request* r) override {
        FUZZ_CHECK(r->opaque == nullptr); // once
        r->opaque = r;
        n++;
    }
    int n = 0;
};

// A few requests through the model on the virtual clock; drain() moves the clock on until
// they have completed.
void run_model(ModelConfig cfg) {
    cfg.timeline.clear(); // no files from here
    std::string err;
    auto inner = backend::make_null(1ull << 30, err);
    if (!inner) fail(err.c_str());
    VirtualClock clock;
    auto m = make_model(std::move(inner), cfg, &clock, nullptr, err);
    if (!m) return; // refused with a message: fine
    static uint8_t buf[8192];
    iovec iov{buf, sizeof buf};
    backend::Request reqs[6];
    static constexpr backend::Op kOps[] = {backend::Op::Read, backend::Op::Write, backend::Op::Flush,
                                          backend::Op::Discard, backend::Op::WriteZeroes, backend::Op::Read};
    Done done;
    for (int i = 0; i < 6; i++) {
        backend::Request& r = reqs[i];
        r.op = kOps[i];
        r.offset = uint64_t(i) * 8192;
        r.length = r.op == backend::Op::Flush ? 0 : 8192;
        if (r.op == backend::Op::Read || r.op == backend::Op::Write) {
            r.iov = &iov;
            r.iovcnt = 1;
        }
        r.done = &done;
        r.queue = uint16_t(i % 2);
        backend::Request* p = &r;
        m->submit(std::span<backend::Request* const>(&p, 1));
    }
    m->drain();
    FUZZ_CHECK(done.n == 6);
    (void)m->stats();
}

void run(std::string_view text, uint8_t mode) {
    std::string err;
    switch (mode % 3) {
    case 0: {
        ModelConfig c, before;
        if (!parse_model_config(text, c, err)) {
            FUZZ_CHECK(c == before && !err.empty());
            return;
        }
        check(c);
        (void)summarize(c);
        run_model(c);
        break;
    }
    case 1: {
        VmConfig c, before;
        if (!parse_vm_config(text, c, err)) {
            FUZZ_CHECK(c == before && !err.empty());
            return;
        }
        check_caps(c.caps);
        FUZZ_CHECK(std::isfinite(c.time_scale) && c.time_scale > 0);
        (void)summarize(c);
        break;
    }
    case 2: {
        ModelConfig m;
        VmConfig v;
        if (model_profile(text, m)) check(m);
        if (vm_profile(text, v)) check_caps(v.caps);
        break;
    }
    }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size == 0) return 0;
    try {
        run(std::string_view(reinterpret_cast<const char*>(data + 1), size - 1), data[0]);
    } catch (const std::bad_alloc&) {
    } catch (...) {
        fail("the settings parser threw");
    }
    return 0;
}
