// A channel's runtime on its own, with a handler that only counts: what one round may take.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <new>
#include <thread>
#include <vector>

#include "fake_host.h"
#include "fake_loop.h"
#include "storvsc_rings.h"
#include "hvstor/vmbus/channel.h"

using namespace hvstor;
using namespace hvstor::vmbus;
using hvstor::test::FakeHost;
using hvstor::test::StorvscRings;

namespace {

constexpr uint64_t kRings = 0x200000;

// Takes every packet at once, as a handler whose requests all complete inline would, and
// records how many packets each round's batch had.
class CountingHandler final : public PacketHandler {
public:
    void on_wake(ChannelRuntime&) override {}
    bool can_accept(ChannelRuntime&) override { return true; }
    void on_packet(ChannelRuntime&, const PacketDescriptor&, std::span<const uint8_t>) override {
        batch_++;
        total.fetch_add(1);
    }
    void on_batch_end(ChannelRuntime&) override {
        largest.store(std::max(largest.load(), batch_));
        batches.fetch_add(1);
        batch_ = 0;
    }
    void on_stop(ChannelRuntime&) override {}

    std::atomic<uint32_t> total{0}, largest{0}, batches{0};

private:
    uint32_t batch_ = 0; // the worker's
};

// The OPENCHANNEL of relid 1 over the rings StorvscRings::rings(1, kRings) set up; its
// ring page numbers are kept in `pfns`, which the request refers to.
OpenRequest ring_request(std::vector<uint64_t>& pfns, GuestSignal signal) {
    pfns.clear();
    for (uint32_t i = 0; i < 2 * StorvscRings::kRingPages; i++) pfns.push_back(kRings / 4096 + i);
    OpenRequest req;
    req.child_relid = 1;
    req.ring_pfns = pfns;
    req.downstream_page_offset = StorvscRings::kRingPages;
    req.signal = std::move(signal);
    return req;
}

// `n` small packets queued before the channel opens (the worker's first round finds them all
// there); the largest batch once the worker took every one.
void rounds_over_a_full_ring(EventLoop* loop, uint32_t n, CountingHandler& h) {
    FakeHost host;
    StorvscRings guest(host, [](StorvscRings::Chan&) {});
    auto c = guest.rings(1, kRings);
    const std::vector<uint8_t> body(16 + 8, 0);
    for (uint32_t i = 0; i < n; i++)
        ASSERT_TRUE(guest.write_packet(c, uint16_t(PacketType::DataInband), i + 1, body, 16)) << "ring full at " << i;

    std::vector<uint64_t> pfns;
    OpenRequest req = ring_request(pfns, [](uint32_t) {});
    ChannelStats stats;
    ChannelOptions opt;
    opt.inline_rounds = false;
    opt.loop = loop;
    std::string err;
    auto rt = ChannelRuntime::open(host, req, h, stats, err, opt);
    ASSERT_TRUE(rt) << err;
    // No bound of its own: a worker that never takes them all hangs the test, and the
    // test runner's timeout ends it.
    while (h.total.load() < n) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    rt.reset();
}

// A round that took every packet there was would let a guest that keeps the ring full
// hold one batch open for good (a LUN's detach waits for the batch to end).
TEST(ChannelTest, WorkerRoundsTakeAtMostTheirBudget) {
    constexpr uint32_t kPackets = 1000;
    static_assert(kPackets > 3 * kWorkerRoundBudget);
    CountingHandler h;
    rounds_over_a_full_ring(nullptr, kPackets, h);
    EXPECT_EQ(h.total.load(), kPackets);
    EXPECT_LE(h.largest.load(), kWorkerRoundBudget);
    EXPECT_GE(h.batches.load(), (kPackets + kWorkerRoundBudget - 1) / kWorkerRoundBudget);
}

TEST(ChannelTest, LoopTurnsTakeAtMostTheBudgetPerRound) {
    constexpr uint32_t kPackets = 1000;
    hvstor::test::FakeLoop loop;
    CountingHandler h;
    rounds_over_a_full_ring(&loop, kPackets, h);
    EXPECT_EQ(h.total.load(), kPackets);
    EXPECT_LE(h.largest.load(), kWorkerRoundBudget);
}

} // namespace

namespace {

// The guest-to-host ring's header page and the host-to-guest ring: all a channel may write.
std::vector<uint8_t> ring_image(FakeHost& host) {
    return {host.ram(kRings), host.ram(kRings) + 2 * StorvscRings::kRingPages * 4096};
}

// A channel opened while the VM is paused takes nothing from its ring, not even masking it,
// until the VM runs; paused again, it takes nothing more, and it stops as usual.
void paused_channel(EventLoop* loop) {
    FakeHost host;
    StorvscRings guest(host, [](StorvscRings::Chan&) {});
    auto c = guest.rings(1, kRings);
    const std::vector<uint8_t> body(16 + 8, 0);
    host.run_gate().pause();
    for (uint32_t i = 0; i < 10; i++) ASSERT_TRUE(guest.write_packet(c, uint16_t(PacketType::DataInband), i + 1, body, 16));
    const auto image = ring_image(host);

    std::atomic<uint32_t> signals{0};
    std::vector<uint64_t> pfns;
    OpenRequest req = ring_request(pfns, [&](uint32_t) { signals++; });
    ChannelStats stats;
    ChannelOptions opt;
    opt.loop = loop;
    CountingHandler h;
    std::string err;
    auto rt = ChannelRuntime::open(host, req, h, stats, err, opt);
    ASSERT_TRUE(rt) << err;
    rt->notify_guest_signal();
    // Time for a worker that ignores the pause to take the packets; the check does not
    // depend on it taking that long.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_EQ(h.total.load(), 0u) << "packets taken while paused";
    EXPECT_TRUE(ring_image(host) == image) << "a ring written while paused";
    EXPECT_EQ(signals.load(), 0u);

    host.run_gate().resume();
    while (h.total.load() < 10) std::this_thread::sleep_for(std::chrono::milliseconds(1));

    host.run_gate().pause();
    for (uint32_t i = 0; i < 5; i++) ASSERT_TRUE(guest.write_packet(c, uint16_t(PacketType::DataInband), i + 11, body, 16));
    rt->notify_guest_signal();
    rt->notify_completion();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_EQ(h.total.load(), 10u) << "packets taken while paused";
    rt.reset(); // stops while paused: no deadlock
    EXPECT_EQ(h.total.load(), 10u);
}

TEST(ChannelTest, PausedWorkerTakesNothingAndStillStops) { paused_channel(nullptr); }

TEST(ChannelTest, PausedLoopChannelTakesNothingAndStillStops) {
    hvstor::test::FakeLoop loop;
    paused_channel(&loop);
}

// A listener that throws on resume (out of memory) does not keep the others asleep, and
// the exception still reaches the caller.
TEST(RunGateTest, ResumeTellsEveryListenerWhenOneThrows) {
    struct Throws : RunGate::Listener {
        void on_resume() override { throw std::bad_alloc(); }
    } first;
    struct Counts : RunGate::Listener {
        int told = 0;
        void on_resume() override { told++; }
    } second;
    RunGate gate;
    gate.add(&first);
    gate.add(&second);
    gate.pause();
    EXPECT_THROW(gate.resume(), std::bad_alloc);
    EXPECT_EQ(second.told, 1);
    EXPECT_TRUE(gate.running());
    gate.remove(&first);
    gate.remove(&second);
}

// A Section inside another on the same thread is taken without counting again; a pause
// still waits for the outer one, and a Section on another thread is not nested.
TEST(RunGateTest, NestedSectionsHoldOffAPauseUntilTheOuterEnds) {
    RunGate gate;
    std::atomic<bool> paused{false};
    std::thread pauser;
    {
        RunGate::Section outer(gate);
        ASSERT_TRUE(outer);
        pauser = std::thread([&] {
            gate.pause();
            paused = true;
        });
        while (gate.running()) std::this_thread::yield();  // the gate is closed
        {
            RunGate::Section inner(gate);
            EXPECT_TRUE(inner) << "a nested section is part of the outer one";
        }
        std::thread other([&] { EXPECT_FALSE(RunGate::Section(gate)) << "another thread's is not"; });
        other.join();
        EXPECT_FALSE(paused.load()) << "the pause returned inside a section";
    }
    pauser.join();
    EXPECT_TRUE(paused.load());
    EXPECT_FALSE(RunGate::Section(gate)) << "the thread's last section ended with the outer one";
    gate.resume();
    EXPECT_TRUE(RunGate::Section(gate));
}

} // namespace
