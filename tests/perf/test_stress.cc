// The host clock with real threads: exactly-once completion under concurrent submitters,
// destruction with work queued, the cap on the host clock, and the cost per IO.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <random>
#include <thread>

#include "load.h"

namespace hvstor::perf {
namespace {

using backend::Op;
using backend::Request;

// Completes on its own thread after a random delay of up to 300 us, like an aio backend.
class AsyncInner final : public backend::Backend {
public:
    AsyncInner() : thread_([this] { loop(); }) {}
    ~AsyncInner() override {
        {
            std::lock_guard lock(mu_);
            stop_ = true;
        }
        cv_.notify_one();
        thread_.join();
    }
    uint64_t size() const override { return uint64_t(1) << 30; }
    uint32_t block_size() const override { return 512; }
    bool read_only() const override { return false; }
    std::string describe() const override { return "async"; }
    void submit(std::span<Request* const> reqs) override {
        std::lock_guard lock(mu_);
        for (Request* r : reqs) {
            const auto when = std::chrono::steady_clock::now() + std::chrono::microseconds(rng_() % 300);
            due_.emplace(when, r);
        }
        cv_.notify_one();
    }
    void drain() override {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [this] { return due_.empty() && !busy_; });
    }

private:
    void loop() {
        std::unique_lock lock(mu_);
        while (!stop_) {
            if (due_.empty()) {
                cv_.wait(lock);
                continue;
            }
            const auto when = due_.begin()->first;
            if (std::chrono::steady_clock::now() < when) {
                cv_.wait_until(lock, when);
                continue;
            }
            Request* r = due_.begin()->second;
            due_.erase(due_.begin());
            busy_ = true;
            lock.unlock();
            r->result = 0;
            r->done->complete(r);
            lock.lock();
            busy_ = false;
            cv_.notify_all();
        }
    }
    std::mutex mu_;
    std::condition_variable cv_;
    std::multimap<std::chrono::steady_clock::time_point, Request*> due_;
    std::minstd_rand rng_{7};
    bool busy_ = false;
    bool stop_ = false;
    std::thread thread_;
};

struct Tracked {
    Request req{};
    iovec iov{};
    std::vector<uint8_t> data;  // reads: the null backend writes it, so no two share one
    std::atomic<int> count{0};
};

class Counter final : public backend::CompletionSink {
public:
    void complete(Request* r) override {
        static_cast<Tracked*>(r->opaque)->count.fetch_add(1);
        total.fetch_add(1);
    }
    std::atomic<uint64_t> total{0};
};

// A 4 KiB request of op per entry of reqs, all on buf and completing to sink: the batch.
template <typename Reqs>
std::vector<Request*> batch_of(Reqs& reqs, Op op, std::vector<uint8_t>& buf, backend::CompletionSink& sink) {
    std::vector<Request*> batch;
    for (auto& tr : reqs) {
        tr.iov = {buf.data(), 4096};
        tr.req.op = op;
        tr.req.length = 4096;
        tr.req.iov = &tr.iov;
        tr.req.iovcnt = 1;
        tr.req.done = &sink;
        tr.req.opaque = &tr;
        batch.push_back(&tr.req);
    }
    return batch;
}

// Many submitters, small caps, every queue discipline and both kinds of inner backend.
void stress(const std::string& settings, bool async_inner) {
    ModelConfig cfg;
    std::string err;
    ASSERT_TRUE(parse_model_config(settings, cfg, err)) << err;
    std::unique_ptr<backend::Backend> inner;
    if (async_inner) inner = std::make_unique<AsyncInner>();
    else inner = backend::make_null(uint64_t(1) << 30, err);
    auto disk = make_model(std::move(inner), cfg, nullptr, nullptr, err);
    ASSERT_TRUE(disk) << err;

    constexpr int kThreads = 8, kPerThread = 1500, kMaxOut = 24;
    std::vector<std::deque<Tracked>> reqs(kThreads);
    std::vector<uint8_t> wbuf(512 * 1024);  // writes only read it
    Counter sink;
    std::atomic<bool> polling{true};
    std::thread poller([&] {
        while (polling) {
            const Stats s = disk->stats();
            EXPECT_LE(s.ios, uint64_t(kThreads) * kPerThread);
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
    });
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; t++) {
        threads.emplace_back([&, t] {
            std::minstd_rand rng(uint32_t(t + 1));
            auto& mine = reqs[size_t(t)];
            for (int i = 0; i < kPerThread; i++) mine.emplace_back();
            size_t next = 0;
            while (next < mine.size()) {
                // Keep at most kMaxOut of ours outstanding.
                size_t out = 0;
                for (size_t k = 0; k < next; k++) out += mine[k].count.load() == 0;
                if (out >= kMaxOut) {
                    std::this_thread::yield();
                    continue;
                }
                const size_t n = std::min<size_t>(1 + rng() % 8, mine.size() - next);
                std::vector<Request*> batch;
                for (size_t k = 0; k < n; k++) {
                    Tracked& tr = mine[next++];
                    Request& r = tr.req;
                    const uint32_t pick = rng() % 20;
                    r.op = pick < 9 ? Op::Read : pick < 17 ? Op::Write : pick < 18 ? Op::Flush : Op::Discard;
                    r.length = 512 * (1 + rng() % (r.op == Op::Read ? 16 : 1024));
                    r.offset = 512 * uint64_t(rng() % 100000);
                    if (pick == 19 && rng() % 2) r.offset += 1;  // invalid: fails at once
                    if (r.op == Op::Read) tr.data.resize(r.length);
                    tr.iov = {r.op == Op::Read ? tr.data.data() : wbuf.data(), r.length};
                    r.iov = (r.op == Op::Read || r.op == Op::Write) ? &tr.iov : nullptr;
                    r.iovcnt = r.iov ? 1 : 0;
                    if (!r.iov) r.length = r.op == Op::Flush ? 0 : r.length;
                    r.done = &sink;
                    r.opaque = &tr;
                    r.queue = uint16_t(t);
                    batch.push_back(&r);
                }
                disk->submit(batch);
            }
        });
    }
    for (auto& th : threads) th.join();
    disk->drain();
    polling = false;
    poller.join();
    EXPECT_EQ(sink.total.load(), uint64_t(kThreads) * kPerThread);
    for (auto& mine : reqs)
        for (auto& tr : mine) ASSERT_EQ(tr.count.load(), 1);
    const Stats s = disk->stats();
    EXPECT_EQ(s.queued, 0u);
    EXPECT_EQ(s.in_service, 0u);
    EXPECT_EQ(s.ios, s.issued);
    EXPECT_GT(s.errors, 0u);
}

TEST(PerfStress, ExactlyOnceFifoInline) {
    stress("iops=20000,mbps=400,latency=uniform:0:300us,spike.prob=0.01,spike.latency=2ms", false);
}
TEST(PerfStress, ExactlyOncePerDirectionAsync) {
    stress("iops=20000,mbps=400,write.iops=5000,latency=uniform:0:200us,queue=per-direction,max-outstanding=8", true);
}
TEST(PerfStress, ExactlyOnceRoundRobinAsyncBurst) {
    stress("iops=5000,burst=credit,burst.iops=20000,burst.duration=200ms,latency=lognormal:50us:500us,"
           "queue=round-robin,max-outstanding=32",
           true);
}
TEST(PerfStress, ExactlyOnceZeroLatency) { stress("", false); }

// Destruction lifts the caps and latencies: 1000 IOs queued at 100 IOPS with a latency of
// 1 s complete at once. On a virtual clock that nothing moves, a model that waited for the
// modelled time would never finish its destructor; the clock has not moved after it.
TEST(PerfStress, DestroyWithQueuedWork) {
    for (bool async_inner : {false, true}) {
        for (bool host_clock : {false, true}) {
            ModelConfig cfg;
            std::string err;
            ASSERT_TRUE(parse_model_config("iops=100,latency=1s", cfg, err));
            std::unique_ptr<backend::Backend> inner;
            if (async_inner) inner = std::make_unique<AsyncInner>();
            else inner = backend::make_null(uint64_t(1) << 30, err);
            VirtualClock clock; // outlives the model
            auto disk = make_model(std::move(inner), cfg, host_clock ? nullptr : &clock, nullptr, err);
            ASSERT_TRUE(disk);
            std::deque<Tracked> reqs(1000);
            std::vector<uint8_t> buf(4096);
            Counter sink;
            const auto batch = batch_of(reqs, Op::Read, buf, sink);
            disk->submit(batch);
            if (!host_clock) {
                EXPECT_EQ(sink.total.load(), 0u) << "nothing is due before the clock moves";
            }
            disk.reset();
            EXPECT_EQ(sink.total.load(), 1000u);
            for (auto& tr : reqs) ASSERT_EQ(tr.count.load(), 1);
            if (!host_clock) {
                EXPECT_EQ(clock.now(), 0) << "the destructor waited for modelled time";
            }
        }
    }
}

// Resubmits each request as it completes, from whatever thread completes it.
class Loop final : public backend::CompletionSink {
public:
    explicit Loop(ModelBackend& disk) : disk_(disk) {}
    void complete(Request* r) override {
        done.fetch_add(1);
        if (running.load()) disk_.submit(std::span<Request* const>(&r, 1));
    }
    std::atomic<uint64_t> done{0};
    std::atomic<bool> running{true};

private:
    ModelBackend& disk_;
};

TEST(PerfStress, HostClockHoldsTheCap) {
    std::string err;
    // The way the QEMU glue builds one: a property string, the host clock.
    EXPECT_FALSE(make_model(backend::make_null(uint64_t(1) << 30, err), "iops=fast", nullptr, err));
    EXPECT_NE(err.find("iops=fast"), std::string::npos);
    auto disk = make_model(backend::make_null(uint64_t(1) << 30, err), "iops=2000,latency=1ms", nullptr, err);
    ASSERT_TRUE(disk) << err;
    Loop loop(*disk);
    std::vector<Tracked> reqs(16);
    std::vector<uint8_t> buf(4096);
    const auto batch = batch_of(reqs, Op::Write, buf, loop);
    disk->submit(batch);
    // The cap on the host clock: over any stretch of time, at most 2000 IOs a second were
    // issued, plus the limiter's bucket (2, its depth of 1 ms at this rate, or two IOs)
    // and the 16 already issued when the stretch began. A slow machine only completes
    // fewer. How close to the cap the host clock comes is perf-sim's to show.
    const auto t0 = std::chrono::steady_clock::now();
    const uint64_t c0 = loop.done.load();
    while (loop.done.load() < c0 + 1000) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    const uint64_t c1 = loop.done.load();
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    loop.running = false;
    disk->drain();
    EXPECT_LE(double(c1 - c0), 2000 * secs + 2 + 16);
}

// Not a pass/fail figure: printed for the record (sanitizers inflate it).
TEST(PerfStress, CostPerIo) {
    ModelConfig cfg;
    std::string err;
    auto disk = make_model(backend::make_null(uint64_t(1) << 30, err), cfg, nullptr, nullptr, err);
    ASSERT_TRUE(disk);
    Counter sink;
    std::vector<Tracked> reqs(32);
    std::vector<uint8_t> buf(4096);
    const auto batch = batch_of(reqs, Op::Write, buf, sink);
    constexpr int kRounds = 20000;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kRounds; i++) disk->submit(batch);
    const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
    std::printf("model over null, no caps, batches of 32: %.0f ns per IO\n", ns / (kRounds * 32.0));
    EXPECT_EQ(sink.total.load(), uint64_t(kRounds) * 32);
}

} // namespace
} // namespace hvstor::perf
