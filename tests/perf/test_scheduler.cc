// The scheduler on its own: entries, times and decisions as plain values, no clock or backend.
#include <gtest/gtest.h>

#include <algorithm>
#include <deque>

#include "scheduler.h"

namespace hvstor::perf::detail {
namespace {

using backend::Op;

// Entries by index, and the decisions of each call as lists of indices.
struct Harness {
    explicit Harness(const ModelConfig& cfg, VmLimits* vm = nullptr) : sched(cfg, vm, 0) {}

    size_t arrive(Nanos now, Op op = Op::Read, uint32_t channel = 0, uint64_t length = 4096) {
        Entry& e = entries.emplace_back();
        e.op = op;
        e.length = length;
        e.channel = channel;
        sched.arrive(&e, now);
        return entries.size() - 1;
    }
    void arrive_n(size_t n, Nanos now, Op op = Op::Read, uint32_t channel = 0) {
        for (size_t i = 0; i < n; i++) arrive(now, op, channel);
    }
    size_t index(const Entry* e) const {
        for (size_t i = 0; i < entries.size(); i++)
            if (&entries[i] == e) return i;
        return SIZE_MAX;
    }
    void record(const Decisions& d) {
        issued.clear();
        done.clear();
        for (Entry* e : d.issue.span()) issued.push_back(index(e));
        for (Entry* e : d.done.span()) done.push_back(index(e));
    }
    void dispatch(Nanos now) {
        Decisions d;
        sched.dispatch(now, d);
        record(d);
    }
    void expire(Nanos now) {
        Decisions d;
        sched.expire(now, d);
        record(d);
    }
    bool served(size_t i, Nanos now) {
        Decisions d;
        const bool r = sched.served(&entries[i], now, d);
        record(d);
        return r;
    }
    void shutdown(Nanos now) {
        Decisions d;
        sched.shutdown(now, d);
        record(d);
    }
    void cancel(Nanos now) {
        Decisions d;
        sched.cancel(now, d);
        record(d);
    }

    Scheduler sched;
    std::deque<Entry> entries;
    std::vector<size_t> issued, done;
};

using List = std::vector<size_t>;

TEST(PerfScheduler, PacesAtTheCapInModelTime) {
    ModelConfig cfg;
    cfg.caps.iops = 1000;  // a bucket of two IOs, then one per ms
    Harness h(cfg);
    h.arrive_n(5, 0);
    h.dispatch(0);
    EXPECT_EQ(h.issued, (List{0, 1}));
    EXPECT_EQ(h.sched.next_event(), kMs);
    EXPECT_EQ(h.sched.host_queue(), 3u);
    h.expire(kMs);
    EXPECT_EQ(h.issued, (List{2}));
    EXPECT_EQ(h.entries[2].issued, kMs);
    // Called late: each IO still leaves at the instant it was due.
    h.expire(10 * kMs);
    EXPECT_EQ(h.issued, (List{3, 4}));
    EXPECT_EQ(h.entries[3].issued, 2 * kMs);
    EXPECT_EQ(h.entries[4].issued, 3 * kMs);
    EXPECT_EQ(h.sched.next_event(), kNever);
    EXPECT_EQ(h.sched.host_queue(), 0u);
    EXPECT_EQ(h.sched.in_service(), 5u);
    EXPECT_EQ(h.sched.cost_units(), 5u);
}

TEST(PerfScheduler, LargeIosCostSeveralUnits) {
    ModelConfig cfg;
    Harness h(cfg);
    const size_t big = h.arrive(0, Op::Write, 0, 1024 * 1024 + 512);
    const size_t flush = h.arrive(0, Op::Flush, 0, 0);
    EXPECT_EQ(h.entries[big].units, 5);
    EXPECT_EQ(h.entries[big].bytes, 1024 * 1024 + 512);
    EXPECT_EQ(h.entries[big].dir, 1);
    EXPECT_EQ(h.entries[flush].units, 1);
    EXPECT_EQ(h.entries[flush].bytes, 0);
    EXPECT_EQ(h.entries[flush].dir, 1);
}

TEST(PerfScheduler, DoneAtTheLaterOfLatencyAndService) {
    ModelConfig cfg;
    cfg.read_latency = {DistKind::Fixed, 2 * kMs, 2 * kMs};
    Harness h(cfg);
    h.arrive_n(2, 0);
    h.dispatch(0);
    EXPECT_EQ(h.issued, (List{0, 1}));
    EXPECT_EQ(h.entries[0].due, 2 * kMs);
    EXPECT_EQ(h.sched.next_event(), 2 * kMs);
    // Entry 0 is served early: done when its latency runs out.
    EXPECT_FALSE(h.served(0, kMs));
    h.expire(2 * kMs);
    EXPECT_EQ(h.done, (List{0}));
    // Entry 1 is served late: done then.
    EXPECT_TRUE(h.served(1, 5 * kMs));
    EXPECT_EQ(h.done, (List{1}));
    EXPECT_EQ(h.sched.in_service(), 0u);
}

// An entry served exactly when due is done before its event fires; the event is then stale,
// also once the entry is reused.
TEST(PerfScheduler, EventsOfAFinishedEntryAreStale) {
    ModelConfig cfg;
    cfg.read_latency = {DistKind::Fixed, 2 * kMs, 2 * kMs};
    Harness h(cfg);
    h.arrive(0);
    h.dispatch(0);
    EXPECT_TRUE(h.served(0, 2 * kMs));
    EXPECT_EQ(h.done, (List{0}));
    h.entries[0].op = Op::Read;
    h.sched.arrive(&h.entries[0], 2 * kMs);
    h.dispatch(2 * kMs);
    EXPECT_EQ(h.issued, (List{0}));
    h.expire(2 * kMs);  // the first use's event
    EXPECT_TRUE(h.done.empty());
    EXPECT_FALSE(h.served(0, 3 * kMs));
    h.expire(4 * kMs);
    EXPECT_EQ(h.done, (List{0}));
}

TEST(PerfScheduler, FifoHoldsAWriteBehindReads) {
    ModelConfig cfg;
    cfg.caps.iops = 1000;
    Harness h(cfg);
    h.arrive_n(4, 0, Op::Read);
    const size_t w = h.arrive(0, Op::Write);
    h.dispatch(0);
    EXPECT_EQ(h.issued, (List{0, 1}));
    h.expire(kSec);
    EXPECT_EQ(h.issued, (List{2, 3, w}));
    EXPECT_EQ(h.entries[w].issued, 3 * kMs);
}

TEST(PerfScheduler, PerDirectionQueuesTakeTurns) {
    ModelConfig cfg;
    cfg.caps.iops = 1000;
    cfg.queue = Discipline::PerDirection;
    Harness h(cfg);
    h.arrive_n(4, 0, Op::Read);
    const size_t w = h.arrive(0, Op::Write);
    h.dispatch(0);
    EXPECT_EQ(h.issued, (List{0, w}));
}

// A head held back by its own direction's cap lets the other direction go.
TEST(PerfScheduler, PerDirectionCapHoldsOnlyItsDirection) {
    ModelConfig cfg;
    cfg.read_iops = 1000;
    cfg.queue = Discipline::PerDirection;
    Harness h(cfg);
    h.arrive_n(4, 0, Op::Read);
    h.arrive_n(3, 0, Op::Write);
    h.dispatch(0);
    EXPECT_EQ(h.issued, (List{0, 4, 1, 5, 6}));
    EXPECT_EQ(h.sched.next_event(), kMs);
}

TEST(PerfScheduler, RoundRobinServesChannelsInTurn) {
    ModelConfig cfg;
    cfg.caps.iops = 1000;
    cfg.queue = Discipline::RoundRobin;
    Harness h(cfg);
    h.arrive_n(3, 0, Op::Read, 0);
    h.arrive_n(2, 0, Op::Read, 7);
    h.arrive(0, Op::Read, 4096 + 7);  // folds onto channel 7
    h.dispatch(0);
    EXPECT_EQ(h.issued, (List{0, 3}));
    h.expire(kSec);
    EXPECT_EQ(h.issued, (List{1, 4, 2, 5}));
}

TEST(PerfScheduler, OutstandingLimit) {
    ModelConfig cfg;
    cfg.max_outstanding = 2;
    Harness h(cfg);
    h.arrive_n(4, 0);
    h.dispatch(0);
    EXPECT_EQ(h.issued, (List{0, 1}));
    EXPECT_EQ(h.sched.host_queue(), 2u);
    EXPECT_TRUE(h.served(1, kMs));
    EXPECT_EQ(h.done, (List{1}));
    EXPECT_EQ(h.issued, (List{2}));
    EXPECT_EQ(h.entries[2].issued, kMs);
}

TEST(PerfScheduler, VmCapsWaitInTheHost) {
    VmConfig v;
    v.caps.iops = 1000;
    std::string err;
    auto vm = VmLimits::create(v, err);
    ASSERT_TRUE(vm) << err;
    ModelConfig cfg;
    Harness h(cfg, vm.get());
    h.arrive_n(4, 0);
    h.dispatch(0);
    EXPECT_EQ(h.issued, (List{0, 1}));
    EXPECT_EQ(h.sched.host_queue(), 2u);  // past the disk, waiting for the VM
    EXPECT_EQ(h.sched.next_event(), kMs);
    h.expire(kMs);
    EXPECT_EQ(h.issued, (List{2}));
    h.expire(5 * kMs);
    EXPECT_EQ(h.issued, (List{3}));
    EXPECT_EQ(h.entries[3].issued, 2 * kMs);
    EXPECT_EQ(h.sched.host_queue(), 0u);
}

// Six reads at t=0 on a 1000 IOPS disk (a bucket of two), at most 3 outstanding, 1 s of
// latency, behind a 500 IOPS VM: 0 and 1 are issued at once; after 1 ms, 2 has passed the
// disk and waits for the VM, and 3 to 5 are queued.
struct BehindTheVm {
    static std::shared_ptr<VmLimits> vm_caps() {
        VmConfig v;
        v.caps.iops = 500;
        std::string err;
        auto vm = VmLimits::create(v, err);
        if (!vm) ADD_FAILURE() << err;
        return vm;
    }
    static ModelConfig config() {
        ModelConfig cfg;
        cfg.caps.iops = 1000;
        cfg.max_outstanding = 3;
        cfg.read_latency = {DistKind::Fixed, kSec, kSec};
        return cfg;
    }
    BehindTheVm() {
        h.arrive_n(6, 0);
        h.dispatch(0);
    }
    std::shared_ptr<VmLimits> vm = vm_caps();
    Harness h{config(), vm.get()};
};

TEST(PerfScheduler, ShutdownLiftsEverything) {
    BehindTheVm b;
    ASSERT_TRUE(b.vm);
    Harness& h = b.h;
    EXPECT_EQ(h.issued, (List{0, 1}));
    h.expire(kMs);  // entry 2 passes the disk, then waits for the VM
    EXPECT_TRUE(h.issued.empty());
    EXPECT_FALSE(h.served(0, kMs));
    h.shutdown(kMs);
    EXPECT_EQ(h.done, (List{0}));  // its latency no longer counts
    EXPECT_EQ(h.issued, (List{2, 3, 4, 5}));
    EXPECT_EQ(h.sched.host_queue(), 0u);
    EXPECT_EQ(h.sched.next_event(), kNever);
    for (size_t i = 1; i < 6; i++) {
        EXPECT_TRUE(h.served(i, kMs)) << i;
        EXPECT_EQ(h.done, (List{i}));
    }
    EXPECT_EQ(h.sched.in_service(), 0u);
}

// A machine reset or an unplug: what has not reached the inner backend (queued, or past the
// disk's caps waiting for the VM's) is done at once, cancelled; what is at the inner backend
// is done when served, its latency dropped. IOs that come afterwards are modelled again.
TEST(PerfScheduler, CancelEndsWhatDidNotReachStorage) {
    BehindTheVm b;
    ASSERT_TRUE(b.vm);
    Harness& h = b.h;
    h.expire(kMs);  // 0 and 1 in service, 2 waits for the VM, 3 to 5 queued
    EXPECT_FALSE(h.served(0, kMs));
    h.cancel(kMs);
    List done = h.done;
    std::sort(done.begin(), done.end());
    EXPECT_EQ(done, (List{0, 2, 3, 4, 5}));
    EXPECT_TRUE(h.issued.empty()) << "nothing more reaches the inner backend";
    for (size_t i = 2; i < 6; i++) EXPECT_TRUE(h.entries[i].cancelled) << i;
    EXPECT_FALSE(h.entries[0].cancelled) << "served: done as it is";
    EXPECT_EQ(h.entries[0].finished, kMs);
    EXPECT_EQ(h.sched.host_queue(), 0u);
    EXPECT_EQ(h.sched.next_event(), kNever);
    EXPECT_TRUE(h.served(1, 2 * kMs)) << "at the inner backend: done when served, not at its due time";
    EXPECT_EQ(h.done, (List{1}));
    EXPECT_FALSE(h.entries[1].cancelled);
    EXPECT_EQ(h.sched.in_service(), 0u);
    // Modelled again: the latency applies, and the outstanding limit has its slots back.
    h.arrive_n(3, 10 * kMs);
    h.dispatch(10 * kMs);
    EXPECT_EQ(h.issued, (List{6, 7}));  // the disk's bucket of two
    EXPECT_FALSE(h.served(6, 10 * kMs));
    EXPECT_FALSE(h.entries[6].cancelled);
}

TEST(PerfScheduler, CreditsAtAGivenTime) {
    ModelConfig cfg;
    cfg.caps.iops = 100;
    cfg.caps.burst = BurstMode::Credit;
    cfg.caps.burst_iops = 1100;
    cfg.caps.burst_duration = 10 * kSec;
    cfg.caps.burst_start = 0;
    Harness h(cfg);
    EXPECT_TRUE(h.sched.credits(0).enabled);
    EXPECT_EQ(h.sched.credits(0).iops_capacity, 10000);
    EXPECT_NEAR(h.sched.credits(10 * kSec).iops, 1000, 1);
    EXPECT_NEAR(h.sched.credits(0).iops, 0, 1e-9);  // looking did not move the buckets
}

} // namespace
} // namespace hvstor::perf::detail
