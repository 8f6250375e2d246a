// StorageGate: a stopped VM's storage gets no request, so a read a disk model or a stall
// fault releases while the VM is stopped does not write guest memory; stopping waits for
// what the storage has; a reset or removal cancels what waits for the VM to run. Every
// request completes exactly once. No test waits on the host's clock.
#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "controller_fixture.h"
#include "disk_factory.h"
#include "hvstor/perf/clock.h"
#include "storage_gate.h"
#include "trace_capture.h"

using namespace hvstor;
using hvstor::capi::DiskFactory;
using hvstor::capi::DiskSpec;
using hvstor::capi::StorageGate;

namespace {

constexpr uint32_t kBlock = 4096;

// Keeps each request's result, in completion order; counts completions per request.
class Sink : public backend::CompletionSink {
public:
    void complete(backend::Request* r) override {
        std::lock_guard lock(mu);
        results.push_back(r->result);
        ++times[r];
    }
    size_t count() {
        std::lock_guard lock(mu);
        return results.size();
    }
    std::mutex mu;
    std::vector<int> results;
    std::map<backend::Request*, int> times;
};

// One block's read or write of `buf` at `offset`.
struct Io {
    Io(backend::Op op, uint64_t offset, std::vector<uint8_t>& buf, Sink& sink) : iov{buf.data(), buf.size()} {
        req.op = op;
        req.offset = offset;
        req.length = buf.size();
        req.iov = &iov;
        req.iovcnt = 1;
        req.done = &sink;
    }
    iovec iov;
    backend::Request req;
    backend::Request* ptr() { return &req; }
};

std::unique_ptr<backend::Backend> ram(uint64_t size) {
    std::string err;
    auto be = backend::make_ram(size, err);
    EXPECT_TRUE(be) << err;
    return be;
}

// Writes `fill` to block 0 of `be` (synchronous: RAM completes inside submit).
void write_block(backend::Backend& be, uint8_t fill) {
    std::vector<uint8_t> data(kBlock, fill);
    Sink sink;
    Io w(backend::Op::Write, 0, data, sink);
    backend::Request* r = w.ptr();
    be.submit({&r, 1});
    ASSERT_EQ(sink.results, std::vector<int>{0});
}

// Storage that keeps what it is given until the test completes it; drain() waits for that.
class HeldStorage final : public backend::Backend {
public:
    explicit HeldStorage(bool by_vmm) : by_vmm_(by_vmm) {}
    uint64_t size() const override { return 1 << 20; }
    uint32_t block_size() const override { return 512; }
    bool read_only() const override { return false; }
    std::string describe() const override { return "held"; }
    bool drained_by_vmm() const override { return by_vmm_; }
    void submit(std::span<backend::Request* const> reqs) override {
        std::lock_guard lock(mu_);
        got_.insert(got_.end(), reqs.begin(), reqs.end());
    }
    void drain() override {
        drains.fetch_add(1);
        if (by_vmm_) {
            ADD_FAILURE() << "the VMM drains this storage: no one else may wait for it";
            return;
        }
        std::unique_lock lock(mu_);
        cv_.wait(lock, [this] { return got_.empty(); });
    }
    size_t in_flight() {
        std::lock_guard lock(mu_);
        return got_.size();
    }
    void complete_all() {
        std::vector<backend::Request*> go;
        {
            std::lock_guard lock(mu_);
            go.swap(got_);
        }
        for (backend::Request* r : go) {
            r->result = 0;
            r->done->complete(r);
        }
        std::lock_guard lock(mu_);
        cv_.notify_all();
    }
    std::atomic<int> drains{0};

private:
    const bool by_vmm_;
    std::mutex mu_;
    std::condition_variable cv_;
    std::vector<backend::Request*> got_;
};

} // namespace

TEST(StorageGate, AReadWhileStoppedWaitsForTheVmAndWritesNothingBefore) {
    RunGate run;
    StorageGate gate(ram(1 << 20), run);
    write_block(gate, 0xA5);

    run.pause();
    std::vector<uint8_t> buf(kBlock, 0);
    Sink sink;
    Io rd(backend::Op::Read, 0, buf, sink);
    backend::Request* r = rd.ptr();
    gate.submit({&r, 1});
    EXPECT_EQ(sink.count(), 0u);
    EXPECT_EQ(gate.held(), 1u);
    EXPECT_EQ(buf, std::vector<uint8_t>(kBlock, 0)) << "guest memory written while the VM was stopped";

    run.resume();
    EXPECT_EQ(sink.results, std::vector<int>{0});
    EXPECT_EQ(gate.held(), 0u);
    EXPECT_EQ(buf, std::vector<uint8_t>(kBlock, 0xA5));
}

// A gate over HeldStorage, and a read submitted while the VM runs: at the storage.
struct OneReadAtTheStorage {
    explicit OneReadAtTheStorage(bool by_vmm)
        : held(*new HeldStorage(by_vmm)), gate(std::unique_ptr<backend::Backend>(&held), run),
          rd(backend::Op::Read, 0, buf, sink) {
        backend::Request* r = rd.ptr();
        gate.submit({&r, 1});
    }
    RunGate run;
    HeldStorage& held;  // the gate's
    StorageGate gate;
    std::vector<uint8_t> buf = std::vector<uint8_t>(kBlock);
    Sink sink;
    Io rd;
};

TEST(StorageGate, StoppingWaitsForWhatTheStorageHas) {
    OneReadAtTheStorage t(false);
    RunGate& run = t.run;
    HeldStorage& held = t.held;
    Sink& sink = t.sink;
    ASSERT_EQ(held.in_flight(), 1u);

    std::atomic<bool> stopped{false};
    std::thread stopper([&] {
        run.pause();
        stopped = true;
    });
    // The stop is inside the gate's on_pause, waiting for the storage: it returns only
    // once the read completed.
    while (held.drains.load() == 0 && !stopped.load()) std::this_thread::yield();
    EXPECT_FALSE(stopped.load()) << "the stop returned with the read still at the storage";
    held.complete_all();
    stopper.join();
    EXPECT_TRUE(stopped.load());
    EXPECT_EQ(sink.results, std::vector<int>{0});
    run.resume();
}

TEST(StorageGate, StorageTheVmmDrainsIsNotWaitedFor) {
    // QEMU's block layer: vm_stop drains it itself, and a request werror=stop holds there
    // stays until the VM runs again; waiting for it in the run-state handler never ends.
    OneReadAtTheStorage t(true);
    RunGate& run = t.run;
    HeldStorage& held = t.held;
    Sink& sink = t.sink;
    run.pause();
    EXPECT_EQ(held.drains.load(), 0);
    EXPECT_EQ(held.in_flight(), 1u);
    run.resume();
    held.complete_all();
    EXPECT_EQ(sink.results, std::vector<int>{0});
}

TEST(StorageGate, AbandonCancelsWhatWaitsForTheVm) {
    RunGate run;
    StorageGate gate(ram(1 << 20), run);
    gate.set_trace_id(7);
    hvstor::test::TraceCapture trace;
    std::vector<uint8_t> a(kBlock), b(kBlock), c(kBlock);
    Sink sink;
    Io ra(backend::Op::Read, 0, a, sink), rb(backend::Op::Read, 0, b, sink), rc(backend::Op::Read, 0, c, sink);
    backend::Request* pa = ra.ptr();
    backend::Request* pb = rb.ptr();
    backend::Request* pc = rc.ptr();

    run.pause();
    gate.submit({&pa, 1});
    ASSERT_EQ(sink.count(), 0u);
    gate.abandon(true);  // a machine reset while the VM is stopped
    EXPECT_EQ(sink.results, std::vector<int>{-ECANCELED});
    gate.submit({&pb, 1});  // released by a model meanwhile: cancelled at once
    EXPECT_EQ(sink.results, (std::vector<int>{-ECANCELED, -ECANCELED}));
    gate.abandon(false);
    gate.submit({&pc, 1});  // held again
    EXPECT_EQ(sink.count(), 2u);
    run.resume();
    EXPECT_EQ(sink.results, (std::vector<int>{-ECANCELED, -ECANCELED, 0}));
    for (auto& [req, n] : sink.times) EXPECT_EQ(n, 1) << "a request completed " << n << " times";
    // What the host saw: a and c held, a and b cancelled, c handed on when the VM ran.
    using Args = std::vector<std::vector<uint64_t>>;
    EXPECT_EQ(trace.traced(HVSTOR_TRACE_storage_held), (Args{{7, 1}, {7, 1}}));
    EXPECT_EQ(trace.traced(HVSTOR_TRACE_storage_cancelled), (Args{{7, 1}, {7, 1}}));
    EXPECT_EQ(trace.traced(HVSTOR_TRACE_storage_resumed), (Args{{7, 1}}));
}

// Storage that notes a request it gets while the test says the VM is stopped: from pause()'s
// return to resume()'s call.
class WatchedStorage final : public backend::Backend {
public:
    WatchedStorage() {
        std::string err;
        null_ = backend::make_null(1 << 20, err);  // drops writes: one buffer serves all
    }
    uint64_t size() const override { return null_->size(); }
    uint32_t block_size() const override { return 512; }
    bool read_only() const override { return false; }
    std::string describe() const override { return "watched"; }
    void drain() override {}
    void submit(std::span<backend::Request* const> reqs) override {
        if (stopped.load()) while_stopped.fetch_add(reqs.size());
        null_->submit(reqs);
    }
    std::atomic<bool> stopped{false};
    std::atomic<size_t> while_stopped{0};

private:
    std::unique_ptr<backend::Backend> null_;
};

TEST(StorageGate, StopsAndRunsRacingSubmissionsLoseNothing) {
    // Submitters on two threads while the VM stops and runs again and again: nothing
    // reaches the storage while stopped, every request completes once, and none stays held
    // once the VM runs for good.
    RunGate run;
    auto storage = std::make_unique<WatchedStorage>();
    WatchedStorage& watched = *storage;
    StorageGate gate(std::move(storage), run);
    constexpr int kPerThread = 4000;
    std::vector<uint8_t> buf(512);
    Sink sink;
    std::vector<std::unique_ptr<Io>> ios;
    for (int i = 0; i < 2 * kPerThread; i++) {
        ios.push_back(std::make_unique<Io>(backend::Op::Write, 0, buf, sink));
    }
    std::atomic<int> submitters{2};
    auto submit = [&](int from) {
        for (int i = from; i < from + kPerThread; i++) {
            backend::Request* r = ios[i]->ptr();
            gate.submit({&r, 1});
        }
        submitters.fetch_sub(1);
    };
    std::thread t1(submit, 0), t2(submit, kPerThread);
    while (submitters.load() > 0) {
        run.pause();
        watched.stopped = true;
        std::this_thread::yield();
        watched.stopped = false;
        run.resume();
    }
    t1.join();
    t2.join();
    EXPECT_EQ(watched.while_stopped.load(), 0u);
    EXPECT_EQ(gate.held(), 0u);
    EXPECT_EQ(sink.count(), size_t(2 * kPerThread));
    for (auto& [req, n] : sink.times) EXPECT_EQ(n, 1);
}

// Storage whose submit waits until the test lets it go (a file's submit waiting for room).
class SlowSubmitStorage final : public backend::Backend {
public:
    uint64_t size() const override { return 1 << 20; }
    uint32_t block_size() const override { return 512; }
    bool read_only() const override { return false; }
    std::string describe() const override { return "slow submit"; }
    void drain() override {}  // completes inside submit: nothing left after it
    void submit(std::span<backend::Request* const> reqs) override {
        entered = true;
        while (!go.load()) std::this_thread::yield();
        for (backend::Request* r : reqs) {
            r->result = 0;
            r->done->complete(r);
        }
    }
    std::atomic<bool> entered{false}, go{false};
};

TEST(StorageGate, ADrainWaitsForHeldRequestsAResumeIsHandingOn) {
    // A disk removed just as the VM runs again: its drain must not return while the resume
    // is still handing the held requests to the storage, whose own drain does not see them
    // yet; the disk they complete into would be gone.
    RunGate run;
    auto storage = std::make_unique<SlowSubmitStorage>();
    SlowSubmitStorage& slow = *storage;
    StorageGate gate(std::move(storage), run);
    std::vector<uint8_t> buf(kBlock);
    Sink sink;
    Io w(backend::Op::Write, 0, buf, sink);
    backend::Request* r = w.ptr();
    run.pause();
    gate.submit({&r, 1});
    std::thread resumer([&] { run.resume(); });
    while (!slow.entered.load()) std::this_thread::yield();
    std::atomic<bool> drained{false};
    std::thread drainer([&] {
        gate.drain();
        drained = true;
    });
    // Either the drain waits for the resume, or it returned without waiting (the bug).
    while (gate.draining() == 0 && !drained.load()) std::this_thread::yield();
    EXPECT_FALSE(drained.load()) << "the drain returned before the held request reached the storage";
    slow.go = true;
    resumer.join();
    drainer.join();
    EXPECT_EQ(sink.results, std::vector<int>{0});
}

// The disk as the machine builds it: a model at 100 IOPS over the gated RAM storage, on a
// virtual clock.
class StorageGateDiskTest : public capi::test::ControllerTest {
protected:
    std::unique_ptr<capi::AttachedDisk> modelled_disk() {
        DiskSpec s;
        s.backend = "ram";
        s.size = 1 << 20;
        s.perf = "iops=100";
        return DiskFactory(nullptr, &clock, &run).attach(ctl(), s);
    }
    perf::VirtualClock clock;
    RunGate run;
};

TEST_F(StorageGateDiskTest, AModelReleasingAReadWhileStoppedWritesNoGuestMemory) {
    // The model holds reads for its caps; its timer fires while the VM is stopped.
    auto d = modelled_disk();
    ASSERT_NE(d->model(), nullptr);
    write_block(d->model()->inner(), 0x5A);

    // Four reads while the VM runs, at 100 IOPS: the first goes to the storage at once,
    // the model queues the others, and its timer releases them once the VM has stopped.
    constexpr int kReads = 4;
    std::vector<std::vector<uint8_t>> bufs(kReads, std::vector<uint8_t>(kBlock, 0));
    Sink sink;
    std::vector<std::unique_ptr<Io>> reads;
    std::vector<backend::Request*> batch;
    for (auto& b : bufs) {
        reads.push_back(std::make_unique<Io>(backend::Op::Read, 0, b, sink));
        batch.push_back(reads.back()->ptr());
    }
    d->backend().submit(batch);
    ASSERT_GE(d->model()->stats().queued, 1u) << "the model queued none: its timer releases nothing";
    const size_t before = sink.count();
    run.pause();
    clock.advance(perf::kNever / 2);  // every modelled delay is over
    EXPECT_EQ(sink.count(), before);
    for (size_t i = before; i < kReads; i++)
        EXPECT_EQ(bufs[i], std::vector<uint8_t>(kBlock, 0)) << "guest memory written while the VM was stopped";

    run.resume();
    clock.advance(1000000000);
    d->backend().drain();
    EXPECT_EQ(sink.results, std::vector<int>(kReads, 0));
    for (auto& b : bufs) EXPECT_EQ(b, std::vector<uint8_t>(kBlock, 0x5A));
}

TEST_F(StorageGateDiskTest, ADiskRemovedWhileStoppedCancelsWhatItHeld) {
    auto d = modelled_disk();
    std::vector<uint8_t> buf(kBlock, 0);
    Sink sink;
    Io rd(backend::Op::Read, 0, buf, sink);
    backend::Request* r = rd.ptr();
    run.pause();
    d->backend().submit({&r, 1});
    clock.advance(perf::kNever / 2);
    ASSERT_EQ(sink.count(), 0u);
    d.reset();  // device_del while stopped: returns, with the read answered
    EXPECT_EQ(sink.results.size(), 1u);
    EXPECT_NE(sink.results.at(0), 0);
    EXPECT_EQ(buf, std::vector<uint8_t>(kBlock, 0));
    run.resume();
}
