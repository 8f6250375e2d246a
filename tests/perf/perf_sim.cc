// Runs the performance model on a virtual clock (or the host clock, for `bench`) and prints
// tab-separated figures for scripts/plot_perf.py.
//
//   perf-sim burst [SETTINGS]   credit burst draining, idle refill, burst again
//   perf-sim queue [SETTINGS]   guest queue depth stepping up against a capped disk,
//                               with a QD1 writer alongside
//   perf-sim bench              cost per IO through the model on the host clock
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "hvstor/perf/vm.h"
#include "hvstor/trace.h"
#include "load.h"

using namespace hvstor;
using namespace hvstor::perf;
using backend::Op;

namespace {

std::unique_ptr<ModelBackend> disk_or_die(const std::string& settings, Clock& clock) {
    std::string err;
    auto d = test::make_disk(settings, clock, nullptr, &err);
    if (!d) {
        std::fprintf(stderr, "perf-sim: %s\n", err.c_str());
        std::exit(2);
    }
    return d;
}

double ms(Nanos ns) { return double(ns) / 1e6; }

// Saturating 4 KiB reads for 40 minutes, idle for 10, saturating again for 10.
int burst(const std::string& extra) {
    VirtualClock clock;
    auto disk = disk_or_die("profile=premium-p10,stats.interval=10s," + extra, clock);
    test::Load load(*disk, {{Op::Read, 4096, 32}});
    std::printf("# %s\n# t_s\tiops\tmbps\tcredits_iops_pct\tcredits_mb_pct\tp50_ms\tp99_ms\tqueue_avg\n",
                disk->describe().c_str());
    const Nanos step = disk->config().stats_interval;
    load.start_all();
    for (Nanos t = step; t <= 3600 * kSec; t += step) {
        clock.run_until(t);
        if (t == 2400 * kSec) load.stop_all();
        if (t == 3000 * kSec) load.start_all();
        const Stats s = disk->stats();
        const Credits& c = s.credits;
        std::printf("%.0f\t%.1f\t%.2f\t%.3f\t%.3f\t%.3f\t%.3f\t%.2f\n", double(t) / 1e9, s.last.iops, s.last.mbps,
                    c.iops_capacity > 0 ? 100 * c.iops / c.iops_capacity : 0,
                    c.bytes_capacity > 0 ? 100 * c.bytes / c.bytes_capacity : 0, ms(s.last.latency.p50),
                    ms(s.last.latency.p99), s.last.queue_avg);
    }
    load.stop_all();
    disk->drain();
    return 0;
}

// Reads at QD 1, 2, 4 ... 128 for 10 s each; one 8 KiB writer at QD1 throughout.
int queue(const std::string& extra) {
    VirtualClock clock;
    auto disk = disk_or_die("profile=premium-p30," + extra, clock);
    test::Load load(*disk, {{Op::Read, 4096, 1}, {Op::Write, 8192, 1}});
    std::printf("# %s\n# t_s\tread_qd\tiops\tqueue_avg\tread_p50_ms\tread_p99_ms\twrite_p50_ms\twrite_iops\t"
                "throttle_ms\n",
                disk->describe().c_str());
    load.start(1);
    uint32_t qd = 1;
    load.set_qd(0, qd);
    uint64_t writes = 0;
    for (Nanos t = kSec; t <= 80 * kSec; t += kSec) {
        clock.run_until(t);
        const Stats s = disk->stats();
        const double w_iops = double(load.completed(1) - writes);
        writes = load.completed(1);
        std::printf("%.0f\t%u\t%.1f\t%.2f\t%.3f\t%.3f\t%.3f\t%.1f\t%.3f\n", double(t) / 1e9, qd, s.last.iops,
                    s.last.queue_avg, ms(load.window(0).percentile(50)), ms(load.window(0).percentile(99)),
                    ms(load.window(1).percentile(50)), w_iops, s.last.throttle_mean / 1e6);
        load.window(0).clear();
        load.window(1).clear();
        if (t % (10 * kSec) == 0 && qd < 128) load.set_qd(0, qd *= 2);
    }
    load.stop_all();
    disk->drain();
    return 0;
}

class Counter final : public backend::CompletionSink {
public:
    void complete(backend::Request*) override { n.fetch_add(1, std::memory_order_relaxed); }
    std::atomic<uint64_t> n{0};
};

double cpu_seconds() {
    rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return double(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) + double(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

// Single submitting thread, batches of 32 writes (the null backend touches no data for them).
double inline_ns_per_io(backend::Backend& be) {
    Counter sink;
    std::vector<backend::Request> reqs(32);
    std::vector<iovec> iov(32);
    std::vector<backend::Request*> batch;
    static uint8_t buf[4096];
    for (size_t i = 0; i < reqs.size(); i++) {
        iov[i] = {buf, sizeof buf};
        reqs[i].op = Op::Write;
        reqs[i].length = sizeof buf;
        reqs[i].offset = i * sizeof buf;
        reqs[i].iov = &iov[i];
        reqs[i].iovcnt = 1;
        reqs[i].done = &sink;
        batch.push_back(&reqs[i]);
    }
    constexpr int kRounds = 200000;
    const auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < kRounds; r++) be.submit(batch);
    be.drain();
    return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / (kRounds * 32.0);
}

// Requests resubmitted from their completions, which come from the model's timer thread.
struct Loop final : backend::CompletionSink {
    explicit Loop(backend::Backend& d) : disk(d) {}
    void complete(backend::Request* r) override {
        n.fetch_add(1, std::memory_order_relaxed);
        if (running.load(std::memory_order_relaxed)) disk.submit(std::span<backend::Request* const>(&r, 1));
    }
    backend::Backend& disk;
    std::atomic<uint64_t> n{0};
    std::atomic<bool> running{true};
};

void timed_loop(const char* settings, uint32_t qd) {
    ModelConfig cfg;
    std::string err;
    if (!parse_model_config(settings, cfg, err)) {
        std::fprintf(stderr, "%s\n", err.c_str());
        std::exit(2);
    }
    auto disk = make_model(backend::make_null(uint64_t(1) << 30, err), cfg, nullptr, nullptr, err);
    Loop loop(*disk);
    std::vector<backend::Request> reqs(qd);
    std::vector<iovec> iov(qd);
    static uint8_t buf[4096];
    std::vector<backend::Request*> batch;
    for (size_t i = 0; i < qd; i++) {
        iov[i] = {buf, sizeof buf};
        reqs[i].op = Op::Write;
        reqs[i].length = sizeof buf;
        reqs[i].iov = &iov[i];
        reqs[i].iovcnt = 1;
        reqs[i].done = &loop;
        batch.push_back(&reqs[i]);
    }
    disk->submit(batch);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    const uint64_t n0 = loop.n.load();
    const double c0 = cpu_seconds();
    const auto t0 = std::chrono::steady_clock::now();
    std::this_thread::sleep_for(std::chrono::seconds(2));
    const uint64_t n1 = loop.n.load();
    const double c1 = cpu_seconds();
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    loop.running = false;
    disk->drain();
    const Stats s = disk->stats();
    std::printf("  %-40s QD%-4u %9.0f IOPS, CPU %6.0f ns per IO, p50 %.3f ms, p99 %.3f ms\n", settings, qd,
                double(n1 - n0) / secs, (c1 - c0) * 1e9 / double(n1 - n0), ms(s.latency.p50), ms(s.latency.p99));
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

void discard_event(void*, HvstorTraceEvent, const uint64_t*) {}

int bench() {
    std::string err;
    auto null = backend::make_null(uint64_t(1) << 30, err);
    ModelConfig cfg;
    auto model = make_model(backend::make_null(uint64_t(1) << 30, err), cfg, nullptr, nullptr, err);
    // As a model object makes it: a group of one, its caps passed after the disk's own.
    auto grouped = make_model(backend::make_null(uint64_t(1) << 30, err), cfg, nullptr, VmLimits::group(cfg), err);
    static const TraceSink kDiscard{discard_event, nullptr};
    // Interleaved rounds, medians: the host's speed drifts between runs.
    constexpr int kRepeats = 5;
    std::vector<double> base, through, group, traced;
    for (int i = 0; i < kRepeats; i++) {
        base.push_back(inline_ns_per_io(*null));
        through.push_back(inline_ns_per_io(*model));
        group.push_back(inline_ns_per_io(*grouped));
        set_trace_sink(&kDiscard);
        traced.push_back(inline_ns_per_io(*model));
        set_trace_sink(nullptr);
    }
    const double b = median(base), m = median(through), g = median(group), t = median(traced);
    std::printf("single thread, batches of 32, completions inline (no caps, no latency), medians of %d:\n",
                kRepeats);
    std::printf("  null alone          %6.1f ns per IO\n", b);
    std::printf("  model over null     %6.1f ns per IO (+%.1f)\n", m, m - b);
    std::printf("  as a model object   %6.1f ns per IO (x%.2f the model's)\n", g, g / m);
    std::printf("  with a trace sink   %6.1f ns per IO (x%.2f the model's)\n", t, t / m);
    std::printf("closed loop through the timer thread (host clock):\n");
    timed_loop("latency=20us", 64);
    timed_loop("latency=100us", 256);
    for (const char* p : {"0", "20us", "50us", "100us"}) {
        timed_loop((std::string("iops=50000,latency=500us,timer.min-period=") + p).c_str(), 64);
    }
    timed_loop("iops=100000,mbps=1000,latency=lognormal:300us:1ms", 128);
    return 0;
}

} // namespace

int main(int argc, char** argv) {
    const std::string mode = argc > 1 ? argv[1] : "";
    const std::string extra = argc > 2 ? argv[2] : "";
    if (mode == "burst") return burst(extra);
    if (mode == "queue") return queue(extra);
    if (mode == "bench") return bench();
    std::fprintf(stderr, "usage: perf-sim burst|queue [SETTINGS] | perf-sim bench\n");
    return 2;
}
