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

namespace {

// The SynIC's saved state written field by field, as another build (or a hostile migration
// source) would write it: the tests below change one field at a time.
struct SynicImage {
    struct Queued {
        uint32_t type;
        std::vector<uint8_t> payload;
    };
    struct Vp {
        uint64_t scontrol = 0, siefp = 0, simp = 0;
        std::array<uint64_t, kSintCount> sint;
        std::array<std::vector<Queued>, kSintCount> queue;
        Vp() { sint.fill(1ull << 16); }
    };
    struct Held {
        uint32_t vp;
        uint8_t sint;
        uint16_t flag;
    };
    uint32_t tag = 0x53594E43;
    uint32_t version = 1;
    std::vector<Vp> vps = std::vector<Vp>(2);
    std::vector<Held> held;

    std::vector<uint8_t> bytes() const {
        state::Writer w;
        w.begin(tag, version);
        w.u32(uint32_t(vps.size()));
        for (const Vp& v : vps) {
            w.u64(v.scontrol);
            w.u64(v.siefp);
            w.u64(v.simp);
            for (uint64_t s : v.sint) w.u64(s);
            for (const auto& q : v.queue) {
                w.u32(uint32_t(q.size()));
                for (const Queued& m : q) {
                    w.u32(m.type);
                    w.bytes(m.payload);
                }
            }
        }
        w.u32(uint32_t(held.size()));
        for (const Held& h : held) {
            w.u32(h.vp);
            w.u8(h.sint);
            w.u16(h.flag);
        }
        return w.take();
    }
};

std::vector<uint8_t> saved(const Synic& s) {
    state::Writer w;
    s.save(w);
    return w.take();
}

// The source and destination of a migration: each its own host (guest RAM) and partition.
class SynicSaveTest : public SynicTest {
protected:
    FakeHost host2;
    Partition p2{host2, PartitionConfig{2, 0x5A58}};
    Synic& s2 = p2.synic();

    // Loads `b` into s2; on failure `error` says why.
    bool load(const std::vector<uint8_t>& b) {
        state::Reader r(b);
        const bool ok = s2.load(r);
        error = r.error();
        EXPECT_EQ(ok, r.ok());
        return ok;
    }
    // Gives s2 a state of its own, so a refused load that changed it shows.
    void give_target_state() {
        ASSERT_EQ(p2.wrmsr(1, msr::kSimp, 0x300001), MsrResult::Handled);
        ASSERT_EQ(p2.wrmsr(1, msr::kSint0 + 4, 0x51), MsrResult::Handled);
        std::vector<uint8_t> m(9, 0x77);
        ASSERT_TRUE(s2.post_message(1, 4, 3, m));
    }
    // Expects a refusal naming `why`, with s2 unchanged.
    void expect_refused(const std::vector<uint8_t>& b, const std::string& why) {
        give_target_state();
        const auto before = saved(s2);
        EXPECT_FALSE(load(b));
        EXPECT_NE(error.find(why), std::string::npos) << error;
        EXPECT_EQ(saved(s2), before) << "a refused load changed the SynIC";
    }

    std::string error;
};

std::vector<uint8_t> payload(uint8_t b0, size_t size) {
    std::vector<uint8_t> m(size);
    for (size_t i = 0; i < size; i++) m[i] = uint8_t(b0 + i);
    return m;
}

} // namespace

// What the stream holds, field by field: a change to it without a new version fails here.
TEST_F(SynicSaveTest, SavedStreamHasTheDocumentedLayout) {
    ASSERT_EQ(p.wrmsr(1, msr::kSimp, 0x100001), MsrResult::Handled);
    ASSERT_EQ(p.wrmsr(1, msr::kSint0 + 2, 0xF3 | (1ull << 17)), MsrResult::Handled);
    ASSERT_TRUE(s.post_message(1, 2, 5, payload(1, 3)));
    g.enable_synic(0);
    host.run_gate().pause();
    ASSERT_TRUE(s.signal_event(0, 2, 2047));
    SynicImage img;
    img.vps[0].scontrol = 1;
    img.vps[0].simp = g.simp(0) | 1;
    img.vps[0].siefp = g.siefp(0) | 1;
    img.vps[0].sint[2] = FakeGuest::kVector;
    img.vps[1].simp = 0x100001;
    img.vps[1].sint[2] = 0xF3 | (1ull << 17);
    img.vps[1].queue[2].push_back({5, payload(1, 3)});
    img.held.push_back({0, 2, 2047});
    EXPECT_EQ(saved(s), img.bytes());
    host.run_gate().resume();
}

// A migration: what the source had queued (SIMP disabled, VM paused, slot busy) and the
// flags it held arrive in the destination's guest memory as they would have on the source.
TEST_F(SynicSaveTest, RoundTripDeliversAsTheSourceWould) {
    g.enable_synic(0);
    ASSERT_TRUE(s.post_message(0, 2, 1, payload(0x10, 24))); // delivered: the slot is busy
    ASSERT_EQ(p.wrmsr(1, msr::kSint0 + 5, 0x61 | (1ull << 17)), MsrResult::Handled);
    ASSERT_EQ(p.wrmsr(1, msr::kScontrol, 1), MsrResult::Handled);
    ASSERT_TRUE(s.post_message(1, 5, 7, payload(0x20, 240))); // SIMP disabled: queued
    host.run_gate().pause();
    ASSERT_TRUE(s.post_message(0, 2, 2, payload(0x30, 1)));
    ASSERT_TRUE(s.post_message(0, 2, 3, payload(0x40, 17)));
    ASSERT_TRUE(s.signal_event(0, 2, 5));
    ASSERT_TRUE(s.signal_event(0, 7, 1000));
    const auto stream = saved(s);

    host2.run_gate().pause(); // an incoming migration starts stopped
    std::memcpy(host2.ram(0), host.ram(0), FakeHost::kRamSize); // the VMM carries guest RAM
    ASSERT_TRUE(load(stream)) << error;
    for (uint32_t vp = 0; vp < 2; vp++) {
        for (uint32_t m : {msr::kScontrol, msr::kSiefp, msr::kSimp}) {
            uint64_t a = 1, b = 2;
            p.rdmsr(vp, m, a);
            p2.rdmsr(vp, m, b);
            EXPECT_EQ(a, b) << "VP " << vp << " MSR " << std::hex << m;
        }
        for (uint32_t i = 0; i < kSintCount; i++) {
            uint64_t a = 1, b = 2;
            p.rdmsr(vp, msr::kSint0 + i, a);
            p2.rdmsr(vp, msr::kSint0 + i, b);
            EXPECT_EQ(a, b) << "VP " << vp << " SINT " << i;
            EXPECT_EQ(s2.queued_messages(vp, uint8_t(i)), s.queued_messages(vp, uint8_t(i)));
        }
    }
    EXPECT_EQ(s2.queued_messages(0, 2), 2u);
    EXPECT_EQ(s2.queued_messages(1, 5), 1u);
    EXPECT_EQ(s2.held_events(), 2u);
    EXPECT_EQ(s2.stats().messages_delivered, 0u) << "load keeps the stats";
    EXPECT_EQ(std::memcmp(host2.ram(0), host.ram(0), FakeHost::kRamSize), 0) << "load wrote guest memory";
    EXPECT_TRUE(host2.irqs.empty()) << "load raised a SINT";

    host.irqs.clear();
    host.run_gate().resume();
    host2.run_gate().resume();
    FakeGuest g2(host2, p2);
    for (FakeGuest* guest : {&g, &g2}) {
        Partition& part = guest == &g ? p : p2;
        ASSERT_EQ(part.wrmsr(1, msr::kSimp, g.simp(1) | 1), MsrResult::Handled);
        for (int i = 0; i < 2; i++) guest->take(0); // EOM brings the next one in
    }
    EXPECT_EQ(std::memcmp(host2.ram(0), host.ram(0), FakeHost::kRamSize), 0) << "guest memory differs";
    ASSERT_EQ(host2.irqs.size(), host.irqs.size());
    for (size_t i = 0; i < host.irqs.size(); i++) {
        EXPECT_EQ(host2.irqs[i].vp, host.irqs[i].vp) << i;
        EXPECT_EQ(host2.irqs[i].vector, host.irqs[i].vector) << i;
    }
    EXPECT_EQ(host.load<uint32_t>(g.siefp(0) + 7 * 256 + 1000 / 32 * 4), 1u << (1000 % 32));
    EXPECT_EQ(host2.load<uint32_t>(g.simp(1) + 5 * 256), 7u) << "the message queued with the SIMP disabled";
    EXPECT_EQ(std::memcmp(host2.ram(g.simp(1) + 5 * 256 + 16), payload(0x20, 240).data(), 240), 0);
    EXPECT_EQ(host2.load<uint32_t>(g.simp(0) + 2 * 256), 3u) << "the last of VP 0's messages";
    EXPECT_EQ(s2.queued_messages(0, 2), 0u);
    EXPECT_EQ(s2.held_events(), 0u);
    EXPECT_EQ(s2.stats().messages_delivered, 3u);
    EXPECT_EQ(s2.stats().events_signalled, 2u);
}

// The loaded messages count against kMaxQueued as the ones posted do.
TEST_F(SynicSaveTest, LoadedMessagesCountAgainstTheQueueBound) {
    SynicImage img;
    for (int i = 0; i < 3; i++) img.vps[1].queue[9].push_back({1, payload(0, 8)});
    ASSERT_TRUE(load(img.bytes())) << error;
    give_target_state(); // one more
    std::vector<uint8_t> m(8, 0);
    for (size_t i = 4; i < Synic::kMaxQueued; i++) ASSERT_TRUE(s2.post_message(0, 3, 1, m)) << i;
    EXPECT_FALSE(s2.post_message(0, 3, 1, m));
    img.vps[1].queue[9].clear();
    ASSERT_TRUE(load(img.bytes())) << error;
    EXPECT_TRUE(s2.post_message(0, 3, 1, m)) << "the count follows what was loaded";
}

// Every prefix of a valid stream is refused, reading no further than it goes, and leaves
// the SynIC as it was.
TEST_F(SynicSaveTest, EveryTruncationIsRefused) {
    g.enable_synic(0);
    host.run_gate().pause();
    ASSERT_TRUE(s.post_message(0, 2, 1, payload(1, 30)));
    ASSERT_TRUE(s.post_message(1, 3, 2, payload(2, 0)));
    ASSERT_TRUE(s.signal_event(0, 2, 9));
    const auto stream = saved(s);
    host.run_gate().resume();
    give_target_state();
    const auto before = saved(s2);
    for (size_t len = 0; len < stream.size(); len++) {
        const std::vector<uint8_t> cut(stream.begin(), stream.begin() + len);
        ASSERT_FALSE(load(cut)) << "a stream cut at " << len << " of " << stream.size() << " bytes was loaded";
        ASSERT_EQ(saved(s2), before) << "cut at " << len;
    }
    EXPECT_TRUE(load(stream)) << error;
}

TEST_F(SynicSaveTest, RefusesAnotherVpCount) {
    SynicImage img;
    img.vps.resize(3);
    expect_refused(img.bytes(), "the SynIC's VP count differs from this partition's (3)");
    img.vps.resize(1);
    expect_refused(img.bytes(), "the SynIC's VP count differs from this partition's (1)");
}

TEST_F(SynicSaveTest, RefusesAnotherSectionOrANewerVersion) {
    SynicImage img;
    img.tag = 0x48565054;
    expect_refused(img.bytes(), "the SynIC state has the wrong section tag");
    img = {};
    img.version = 2;
    expect_refused(img.bytes(), "the SynIC state has a version this build cannot load (2)");
    img.version = 0;
    expect_refused(img.bytes(), "version this build cannot load (0)");
}

// What wrmsr would answer with #GP is refused; what it would mask is masked.
TEST_F(SynicSaveTest, SintsAreCheckedAndMaskedAsWrmsrDoes) {
    SynicImage img;
    img.vps[1].sint[3] = 0x0F;
    expect_refused(img.bytes(), "a SINT is unmasked with a vector below 16 (15)");
    img.vps[1].sint[3] = 0x0F | (1ull << 16) | (1ull << 40); // masked: allowed, as by wrmsr
    img.vps[0].scontrol = ~0ull;
    img.vps[0].simp = 0x123456FFFull;
    img.vps[0].siefp = 0x2FFEull;
    ASSERT_TRUE(load(img.bytes())) << error;
    uint64_t v = 0;
    p2.rdmsr(1, msr::kSint0 + 3, v);
    EXPECT_EQ(v, 0x0Fu | (1ull << 16));
    p2.rdmsr(0, msr::kScontrol, v);
    EXPECT_EQ(v, 1u);
    p2.rdmsr(0, msr::kSimp, v);
    EXPECT_EQ(v, 0x123456001u);
    p2.rdmsr(0, msr::kSiefp, v);
    EXPECT_EQ(v, 0x2000u);
}

TEST_F(SynicSaveTest, RefusesMessagesPostMessageWouldRefuse) {
    SynicImage img;
    img.vps[1].queue[2].push_back({1, payload(0, 241)});
    expect_refused(img.bytes(), "a queued message's payload is longer than allowed (241)");
    img.vps[1].queue[2] = {{0, payload(0, 8)}};
    expect_refused(img.bytes(), "a queued message's type is 0");
    img.vps[1].queue[2] = {{1, payload(0, 240)}};
    EXPECT_TRUE(load(img.bytes())) << error;
}

TEST_F(SynicSaveTest, RefusesMoreQueuedMessagesThanTheBound) {
    SynicImage img;
    img.vps[0].queue[0].resize(Synic::kMaxQueued / 2, {1, {}});
    img.vps[1].queue[15].resize(Synic::kMaxQueued / 2 + 1, {1, {}});
    expect_refused(img.bytes(), "a SINT's queued message count is above the limit (8193)");
    img.vps[1].queue[15].pop_back();
    EXPECT_TRUE(load(img.bytes())) << error;
    EXPECT_EQ(s2.queued_messages(1, 15), Synic::kMaxQueued / 2);
}

TEST_F(SynicSaveTest, RefusesHeldFlagsOutOfRangeOrRepeated) {
    SynicImage img;
    img.held = {{2, 0, 0}};
    expect_refused(img.bytes(), "a held event flag's VP is out of range (2)");
    img.held = {{1, 16, 0}};
    expect_refused(img.bytes(), "a held event flag's SINT is out of range (16)");
    img.held = {{1, 15, 2048}};
    expect_refused(img.bytes(), "a held event flag is out of range (2048)");
    img.held = {{1, 15, 2047}, {1, 15, 2047}};
    expect_refused(img.bytes(), "a held event flag is listed twice (2047)");
    img.held.pop_back();
    ASSERT_TRUE(load(img.bytes())) << error;
    EXPECT_EQ(s2.held_events(), 1u);
}

// load() reads its section only: bytes after it are for the caller's done() to refuse.
TEST_F(SynicSaveTest, TrailingBytesAreLeftForDone) {
    auto b = SynicImage{}.bytes();
    b.push_back(0);
    state::Reader r(b);
    EXPECT_TRUE(s2.load(r));
    EXPECT_FALSE(r.done());
    EXPECT_EQ(r.error(), "the state has bytes left over (1)");
}
