// The host queue: order (head-of-line blocking or not), the outstanding limit, and what the
// statistics say about it.
#include <gtest/gtest.h>

#include <cerrno>

#include "load.h"

namespace hvstor::perf {
namespace {

using backend::Op;
using backend::Request;
using test::JobSpec;
using test::Load;
using test::make_disk;

// Requests submitted all at once; records when each completes.
class Burst final : public backend::CompletionSink {
public:
    explicit Burst(Clock& clock) : clock_(clock), buf_(4096) {}
    size_t add(Op op) {
        auto& s = slots_.emplace_back();
        s.iov = {buf_.data(), 4096};
        s.req.op = op;
        s.req.offset = 4096 * slots_.size();
        s.req.length = 4096;
        s.req.iov = &s.iov;
        s.req.iovcnt = 1;
        s.req.done = this;
        s.req.opaque = &s;
        return slots_.size() - 1;
    }
    // The requests [from, to) as one submission from `channel`.
    void submit(ModelBackend& disk, uint16_t channel, size_t from, size_t to) {
        std::vector<Request*> v;
        for (size_t i = from; i < to; i++) {
            slots_[i].submitted = clock_.now();
            slots_[i].req.queue = channel;
            v.push_back(&slots_[i].req);
        }
        disk.submit(v);
    }
    Nanos latency(size_t i) const { return slots_[i].completed - slots_[i].submitted; }
    int count(size_t i) const { return slots_[i].count; }
    int result(size_t i) const { return slots_[i].result; }
    void complete(Request* r) override {
        auto* s = static_cast<Slot*>(r->opaque);
        s->completed = clock_.now();
        s->result = r->result;
        s->count++;
    }
    bool all_once() const {
        for (const auto& s : slots_)
            if (s.count != 1) return false;
        return true;
    }

private:
    struct Slot {
        Request req;
        iovec iov;
        Nanos submitted = 0, completed = 0;
        int count = 0;
        int result = 1;
    };
    Clock& clock_;
    std::vector<uint8_t> buf_;
    std::deque<Slot> slots_;
};

// N reads, then one write, all at t=0.
Nanos write_behind_reads(const std::string& settings, int n) {
    VirtualClock clock;
    auto disk = make_disk(settings, clock);
    EXPECT_TRUE(disk);
    Burst b(clock);
    for (int i = 0; i < n; i++) b.add(Op::Read);
    const size_t w = b.add(Op::Write);
    b.submit(*disk, 0, 0, size_t(n));
    b.submit(*disk, 0, size_t(n), size_t(n) + 1);
    disk->drain();
    EXPECT_TRUE(b.all_once());
    return b.latency(w);
}

TEST(PerfQueue, FifoBlocksAWriteBehindQueuedReads) {
    // 200 reads at 1000 IOPS: the write leaves the host after about 200 ms.
    const Nanos lat = write_behind_reads("iops=1000,latency=1ms", 200);
    EXPECT_NEAR(double(lat), 200e6, 200e6 * 0.02);
    const Nanos lat2 = write_behind_reads("iops=500,latency=1ms", 400);
    EXPECT_NEAR(double(lat2), 800e6, 800e6 * 0.02);
}

TEST(PerfQueue, PerDirectionQueuesDoNot) {
    const Nanos lat = write_behind_reads("iops=1000,latency=1ms,queue=per-direction", 200);
    EXPECT_LE(lat, 3 * kMs);
}

TEST(PerfQueue, RoundRobinServesChannelsInTurn) {
    for (const char* q : {"fifo", "round-robin"}) {
        VirtualClock clock;
        auto disk = make_disk(std::string("iops=1000,latency=1ms,queue=") + q, clock);
        ASSERT_TRUE(disk);
        Burst b(clock);
        for (int i = 0; i < 200; i++) b.add(Op::Read);
        const size_t lone = b.add(Op::Read);
        b.submit(*disk, 0, 0, 200);
        b.submit(*disk, 1, 200, 201);
        disk->drain();
        EXPECT_TRUE(b.all_once());
        if (std::string(q) == "fifo") {
            EXPECT_NEAR(double(b.latency(lone)), 200e6, 4e6);
        } else {
            EXPECT_LE(b.latency(lone), 3 * kMs);
        }
    }
}

// Each request carries its channel: a lone request from channel 7 is not queued behind
// channel 0's backlog.
TEST(PerfQueue, EachRequestIsQueuedByItsOwnChannel) {
    VirtualClock clock;
    auto disk = make_disk("iops=1000,latency=1ms,queue=round-robin", clock);
    ASSERT_TRUE(disk);
    Burst b(clock);
    for (int i = 0; i < 201; i++) b.add(Op::Read);
    b.submit(*disk, 0, 0, 200);
    b.submit(*disk, 7, 200, 201);
    disk->drain();
    EXPECT_LE(b.latency(200), 3 * kMs);
}

TEST(PerfQueue, OutstandingLimit) {
    VirtualClock clock;
    auto disk = make_disk("max-outstanding=4,latency=10ms", clock);
    ASSERT_TRUE(disk);
    Load load(*disk, {{Op::Read, 4096, 32}});
    load.start_all();
    clock.run_until(kSec);
    const uint64_t c0 = load.completed(0);
    clock.run_until(11 * kSec);
    EXPECT_NEAR(double(load.completed(0) - c0) / 10, 400, 4);
    const Stats s = disk->stats();
    EXPECT_EQ(s.in_service, 4u);
    EXPECT_EQ(s.queued, 28u);
    EXPECT_NEAR(double(s.last.latency.p50), 80e6, 80e6 * 0.01);  // 32 / 400 per second
    load.stop_all();
    disk->drain();
}

// Little's law at saturation: 500 IOPS x 2 ms = 1 in service, the rest wait in the host.
// A machine reset or an unplug (ModelBackend::abandon): nothing waits for the caps or the
// latency. On the virtual clock, which moves only when told, every request completes exactly
// once while no time passes: cancelled if it never reached storage, done if it had.
TEST(PerfQueue, AbandonCancelsWhatDidNotReachStorage) {
    VirtualClock clock;
    auto disk = make_disk("iops=10,burst=off,latency=1s", clock);
    ASSERT_TRUE(disk);
    Burst b(clock);
    constexpr size_t kN = 50;
    for (size_t i = 0; i < kN; i++) b.add(Op::Read);
    b.submit(*disk, 0, 0, kN);
    const Stats before = disk->stats();
    ASSERT_GT(before.queued, kN / 2);
    ASSERT_EQ(before.queued + before.in_service, kN);
    disk->abandon(true);
    EXPECT_EQ(clock.now(), 0);
    EXPECT_TRUE(b.all_once());
    size_t cancelled = 0, done = 0;
    for (size_t i = 0; i < kN; i++) {
        cancelled += b.result(i) == -ECANCELED;
        done += b.result(i) == 0;
    }
    EXPECT_EQ(cancelled, before.queued);
    EXPECT_EQ(done, before.in_service) << "at the inner backend: done, without the latency";
    const Stats after = disk->stats();
    EXPECT_EQ(after.cancelled, before.queued);
    EXPECT_EQ(after.ios, before.in_service);
    EXPECT_EQ(after.queued, 0u);
    EXPECT_EQ(after.in_service, 0u);
    // Submitted while abandoned: cancelled at once.
    b.add(Op::Read);
    b.submit(*disk, 0, kN, kN + 1);
    EXPECT_EQ(b.count(kN), 1);
    EXPECT_EQ(b.result(kN), -ECANCELED);
    // Modelled again afterwards: the latency applies.
    disk->abandon(false);
    b.add(Op::Read);
    b.submit(*disk, 0, kN + 1, kN + 2);
    EXPECT_EQ(b.count(kN + 1), 0);
    disk->drain();
    EXPECT_EQ(b.result(kN + 1), 0);
    EXPECT_GE(b.latency(kN + 1), kSec);
    EXPECT_TRUE(b.all_once());
}

// Reads past the disk's caps wait for the VM's having reserved their time there. A machine
// reset cancels them and, once over (abandon(false)), starts the VM's caps afresh: the next
// boot's first read does not wait for the cancelled ones' reservations (6 s of them here).
TEST(PerfQueue, AResetForgetsTheSharedCapsReservations) {
    VmConfig v;
    v.caps.iops = 5;
    v.caps.burst = BurstMode::Off;
    std::string err;
    auto vm = VmLimits::create(v, err);
    ASSERT_TRUE(vm) << err;
    VirtualClock clock;
    auto disk = make_disk("latency=0", clock, vm);
    ASSERT_TRUE(disk);
    Burst b(clock);
    constexpr size_t kN = 32;
    for (size_t i = 0; i <= kN; i++) b.add(Op::Read);
    b.submit(*disk, 0, 0, kN);
    ASSERT_GT(disk->stats().queued, kN - 4) << "waiting for the VM's caps";
    disk->abandon(true);
    disk->abandon(false);
    b.submit(*disk, 0, kN, kN + 1);
    disk->drain();
    EXPECT_TRUE(b.all_once());
    EXPECT_LT(b.latency(kN), kSec) << "the cancelled reads' reservations still held the VM's caps";
}

TEST(PerfQueue, StatisticsUnderSaturation) {
    VirtualClock clock;
    auto disk = make_disk("iops=500,latency=2ms", clock);
    ASSERT_TRUE(disk);
    Load load(*disk, {{Op::Read, 4096, 64}});
    load.start_all();
    clock.run_until(10 * kSec + 1);
    const Stats s = disk->stats();
    EXPECT_EQ(s.last.end, 10 * kSec);
    EXPECT_NEAR(s.last.iops, 500, 5);
    EXPECT_NEAR(s.last.queue_avg, 63, 1);
    EXPECT_GE(s.last.queue_max, 62u);
    EXPECT_LE(s.last.queue_max, 64u);
    EXPECT_NEAR(double(s.last.latency.p50), 128e6, 128e6 * 0.02);
    EXPECT_NEAR(double(s.last.latency.p99), 128e6, 128e6 * 0.02);
    EXPECT_NEAR(s.last.throttle_mean, 126e6, 126e6 * 0.02);
    EXPECT_NEAR(double(s.last.throttle_max), 126e6, 126e6 * 0.03);
    EXPECT_EQ(s.in_service + s.queued, 64u);
    EXPECT_LE(s.in_service, 2u);
    EXPECT_EQ(s.ios, s.reads);
    EXPECT_EQ(s.bytes_read, s.reads * 4096);
    load.stop_all();
    disk->drain();
    const Stats e = disk->stats();
    EXPECT_EQ(e.queued, 0u);
    EXPECT_EQ(e.in_service, 0u);
    EXPECT_EQ(e.ios, load.completed(0));
}

TEST(PerfQueue, FirstIntervalStartsAtCreation) {
    VirtualClock clock(500 * kMs);
    auto disk = make_disk("iops=500,latency=2ms", clock);
    ASSERT_TRUE(disk);
    Load load(*disk, {{Op::Read, 4096, 8}});
    load.start_all();
    clock.run_until(kSec);
    const Stats s = disk->stats();
    EXPECT_EQ(s.last.start, 500 * kMs);
    EXPECT_EQ(s.last.end, kSec);
    EXPECT_NEAR(s.last.iops, 500, 10);
    load.stop_all();
    disk->drain();
}

TEST(PerfQueue, IdleIntervalsReadEmpty) {
    VirtualClock clock;
    auto disk = make_disk("iops=500,latency=2ms", clock);
    ASSERT_TRUE(disk);
    Load load(*disk, {{Op::Read, 4096, 4}});
    load.start_all();
    clock.run_until(3 * kSec);
    load.stop_all();
    disk->drain();
    clock.run_until(60 * kSec + 500 * kMs);
    const Stats s = disk->stats();
    EXPECT_EQ(s.last.start, 59 * kSec);
    EXPECT_EQ(s.last.end, 60 * kSec);
    EXPECT_EQ(s.last.ios, 0u);
    EXPECT_EQ(s.last.iops, 0);
}

} // namespace
} // namespace hvstor::perf
