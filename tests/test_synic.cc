#include <gtest/gtest.h>

#include "fake_guest.h"
#include "fake_host.h"
#include "hvstor/hyperv/msr.h"
#include "hvstor/hyperv/partition.h"

using namespace hvstor;
using namespace hvstor::hv;
using hvstor::test::FakeGuest;
using hvstor::test::FakeHost;

namespace {

class SynicTest : public ::testing::Test {
protected:
    FakeHost host;
    Partition p{host, PartitionConfig{2, 0x5A58}};
    FakeGuest g{host, p};
    Synic& s = p.synic();

    bool post(uint32_t vp, uint8_t b0, uint8_t size = 16) {
        std::vector<uint8_t> m(size, 0);
        m[0] = b0;
        return s.post_message(vp, 2, 1, m);
    }
    uint64_t slot(uint32_t vp, uint8_t sint = 2) { return g.simp(vp) + sint * 256ull; }
};

} // namespace

TEST_F(SynicTest, DeliversIntoSlotAndRaisesVector) {
    g.enable_synic(1);
    ASSERT_TRUE(post(1, 0xAB, 24));
    EXPECT_EQ(host.load<uint32_t>(slot(1)), 1u) << "message_type";
    EXPECT_EQ(host.load<uint8_t>(slot(1) + 4), 24) << "payload_size";
    EXPECT_EQ(host.load<uint8_t>(slot(1) + 5), 0) << "no msg_pending";
    EXPECT_EQ(host.load<uint8_t>(slot(1) + 16), 0xAB);
    ASSERT_EQ(host.irqs.size(), 1u);
    EXPECT_EQ(host.irqs[0].vp, 1u);
    EXPECT_EQ(host.irqs[0].vector, 0xF3);
}

TEST_F(SynicTest, BusySlotSetsPendingAndEomRedelivers) {
    g.enable_synic(0);
    ASSERT_TRUE(post(0, 1));
    ASSERT_TRUE(post(0, 2));
    ASSERT_TRUE(post(0, 3));
    EXPECT_EQ(host.irqs.size(), 1u) << "only the first message went in";
    EXPECT_EQ(host.load<uint8_t>(slot(0) + 5) & 1, 1) << "msg_pending set on the busy slot";
    EXPECT_EQ(s.queued_messages(0, 2), 2u);
    EXPECT_GE(s.stats().messages_deferred, 1u);

    auto m1 = g.take(0); // clears the slot and writes EOM since msg_pending was set
    ASSERT_TRUE(m1);
    EXPECT_EQ((*m1)[0], 1);
    auto m2 = g.take(0);
    ASSERT_TRUE(m2);
    EXPECT_EQ((*m2)[0], 2);
    auto m3 = g.take(0);
    ASSERT_TRUE(m3);
    EXPECT_EQ((*m3)[0], 3);
    EXPECT_FALSE(g.take(0));
    EXPECT_EQ(host.irqs.size(), 3u);
    EXPECT_EQ(s.queued_messages(0, 2), 0u);
}

TEST_F(SynicTest, SlotClearedWithoutEomIsNoticedOnNextPost) {
    // The guest clears the slot without seeing msg_pending (it was not set yet):
    // the next post finds it free.
    g.enable_synic(0);
    post(0, 1);
    host.store<uint32_t>(slot(0), 0);
    post(0, 2);
    auto m = g.take(0);
    ASSERT_TRUE(m);
    EXPECT_EQ((*m)[0], 2);
}

TEST_F(SynicTest, QueuedUntilGuestEnablesSynic) {
    ASSERT_TRUE(post(1, 7));
    EXPECT_TRUE(host.irqs.empty());
    EXPECT_EQ(s.queued_messages(1, 2), 1u);
    g.enable_synic(1);
    EXPECT_EQ(host.irqs.size(), 1u);
    auto m = g.take(1);
    ASSERT_TRUE(m);
    EXPECT_EQ((*m)[0], 7);
}

TEST_F(SynicTest, MaskedSintHoldsMessages) {
    g.enable_synic(0);
    p.wrmsr(0, msr::kSint0 + 2, 0xF3 | (1 << 16));
    post(0, 5);
    EXPECT_TRUE(host.irqs.empty());
    p.wrmsr(0, msr::kSint0 + 2, 0xF3);
    EXPECT_EQ(host.irqs.size(), 1u);
}

TEST_F(SynicTest, SimpOnBadGpaKeepsMessageQueued) {
    p.wrmsr(0, msr::kSimp, FakeHost::kHoleStart | 1);
    p.wrmsr(0, msr::kSint0 + 2, 0xF3);
    p.wrmsr(0, msr::kScontrol, 1);
    EXPECT_TRUE(post(0, 1));
    EXPECT_TRUE(host.irqs.empty());
    EXPECT_EQ(s.queued_messages(0, 2), 1u);
    p.wrmsr(0, msr::kSimp, g.simp(0) | 1);
    EXPECT_EQ(host.irqs.size(), 1u);
}

TEST_F(SynicTest, RejectsBadArguments) {
    std::vector<uint8_t> big(241, 0), ok(8, 0);
    EXPECT_FALSE(s.post_message(0, 2, 1, big));
    EXPECT_FALSE(s.post_message(2, 2, 1, ok)) << "vp out of range";
    EXPECT_FALSE(s.post_message(0, 16, 1, ok)) << "sint out of range";
    EXPECT_FALSE(s.post_message(0, 2, 0, ok)) << "type 0 means empty";
}

// Bounded for the whole partition, not per (VP, SINT): spreading messages over every VP and
// SINT gains a guest nothing.
TEST_F(SynicTest, QueuedMessagesAreBoundedPartitionWide) {
    std::vector<uint8_t> m(8, 0);
    for (size_t i = 0; i < Synic::kMaxQueued; i++)
        ASSERT_TRUE(s.post_message(uint32_t(i % s.nr_vps()), uint8_t(i % kSintCount), 1, m)) << i;
    for (uint32_t vp = 0; vp < s.nr_vps(); vp++)
        for (uint8_t sint = 0; sint < kSintCount; sint++) EXPECT_FALSE(s.post_message(vp, sint, 1, m));
    // Delivering one makes room for one.
    g.enable_synic(0);
    EXPECT_TRUE(s.post_message(1, 3, 1, m));
    EXPECT_FALSE(s.post_message(1, 3, 1, m));
}

TEST_F(SynicTest, EventFlagsSetBitAndRaise) {
    EXPECT_FALSE(s.signal_event(0, 2, 5)) << "SIEFP not enabled yet";
    g.enable_synic(0);
    host.irqs.clear();
    ASSERT_TRUE(s.signal_event(0, 2, 5));
    ASSERT_TRUE(s.signal_event(0, 2, 37));
    const uint64_t base = g.siefp(0) + 2 * 256;
    EXPECT_EQ(host.load<uint32_t>(base), 1u << 5);
    EXPECT_EQ(host.load<uint32_t>(base + 4), 1u << 5);
    EXPECT_EQ(host.irqs.size(), 2u);
    EXPECT_FALSE(s.signal_event(0, 2, 2048));
}

// While the VM is paused (QMP stop, a debugger, a memory dump) nothing reaches the guest:
// no message slot or event flag changes and no SINT is raised, whoever posts (a closer
// thread, a QMP command). Resuming delivers each exactly once, messages in order.
TEST_F(SynicTest, PausedVmGetsNothingUntilItRunsAgain) {
    g.enable_synic(0);
    host.irqs.clear();
    host.run_gate().pause();
    ASSERT_TRUE(post(0, 1));
    ASSERT_TRUE(post(0, 2));
    ASSERT_TRUE(s.signal_event(0, 2, 5));
    ASSERT_TRUE(s.signal_event(0, 2, 5)) << "the same flag twice: held once";
    ASSERT_TRUE(s.signal_event(0, 2, 37));
    p.wrmsr(0, msr::kEom, 0); // a redelivery point: still nothing while paused
    EXPECT_EQ(host.load<uint32_t>(slot(0)), 0u) << "a message slot written while paused";
    const uint64_t flags = g.siefp(0) + 2 * 256;
    EXPECT_EQ(host.load<uint32_t>(flags), 0u) << "an event flag set while paused";
    EXPECT_EQ(host.load<uint32_t>(flags + 4), 0u);
    EXPECT_TRUE(host.irqs.empty()) << "a SINT raised while paused";
    EXPECT_EQ(s.queued_messages(0, 2), 2u);
    EXPECT_EQ(s.held_events(), 2u);

    host.run_gate().resume();
    EXPECT_EQ(host.load<uint32_t>(flags), 1u << 5);
    EXPECT_EQ(host.load<uint32_t>(flags + 4), 1u << 5);
    EXPECT_EQ(s.held_events(), 0u);
    auto m1 = g.take(0);
    ASSERT_TRUE(m1);
    EXPECT_EQ((*m1)[0], 1);
    auto m2 = g.take(0);
    ASSERT_TRUE(m2);
    EXPECT_EQ((*m2)[0], 2);
    EXPECT_FALSE(g.take(0)) << "a message delivered twice";
    EXPECT_EQ(s.stats().events_signalled, 2u);
}

// A machine reset while paused drops what was held, as it drops queued messages.
TEST_F(SynicTest, ResetWhilePausedDropsHeldFlags) {
    g.enable_synic(0);
    host.run_gate().pause();
    ASSERT_TRUE(s.signal_event(0, 2, 5));
    ASSERT_TRUE(post(0, 1));
    p.reset();
    host.irqs.clear();
    host.run_gate().resume();
    EXPECT_EQ(s.held_events(), 0u);
    EXPECT_EQ(s.queued_messages(0, 2), 0u);
    EXPECT_TRUE(host.irqs.empty());
}
