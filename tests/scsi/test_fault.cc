// Fault injection (hvstor/scsi/fault.h): the text form, and what each fault does to the
// commands it matches, with every command completed exactly once.
#include "fault_test.h"

namespace hvstor::scsi::test {
namespace {

TEST(FaultText, ParsesEverySetting) {
    FaultSpec f = parse_ok("error=medium,ops=read,lba=2048-4095,every=3,percent=50,seed=7,count=5");
    EXPECT_EQ(f.action, FaultSpec::Action::MediumError);
    EXPECT_TRUE(f.reads);
    EXPECT_FALSE(f.writes);
    EXPECT_FALSE(f.flushes);
    EXPECT_EQ(f.lba_first, 2048u);
    EXPECT_EQ(f.lba_last, 4095u);
    EXPECT_EQ(f.every, 3u);
    EXPECT_EQ(f.percent, 50u);
    EXPECT_EQ(f.seed, 7u);
    EXPECT_EQ(f.count, 5u);
    EXPECT_EQ(parse_ok("stall=hold,ops=write").action, FaultSpec::Action::Stall);
    EXPECT_EQ(parse_ok("stall=250").stall_ms, 250u);
    EXPECT_EQ(parse_ok("error=busy").action, FaultSpec::Action::Busy);
    EXPECT_EQ(parse_ok("error=not-ready").action, FaultSpec::Action::NotReady);
    EXPECT_EQ(parse_ok("error=unit-attention,lba=9").lba_last, 9u);
    EXPECT_EQ(parse_ok("").action, FaultSpec::Action::None);
    EXPECT_EQ(parse_ok("none").action, FaultSpec::Action::None);
}

// The key table (what -object hv-fault offers) and the parser know the same settings.
TEST(FaultText, KeyTableIsWhatTheParserKnows) {
    const std::string unknown = parse_error("colour=red");
    EXPECT_NE(unknown.find("unknown setting 'colour'"), std::string::npos) << unknown;
    ASSERT_EQ(fault_keys().size(), 14u);
    for (const FaultKey& k : fault_keys()) {
        FaultSpec f;
        std::string err;
        parse_fault(std::string(k.name) + "=?", f, err);
        EXPECT_EQ(err.find("unknown setting"), std::string::npos) << k.name << ": " << err;
        EXPECT_NE(unknown.find(std::string(k.name) + "="), std::string::npos) << k.name << " missing from: " << unknown;
        EXPECT_FALSE(k.meaning.empty()) << k.name;
    }
}

TEST(FaultText, BadSettingsAreNamed) {
    EXPECT_EQ(parse_error("error=fire"), "fault: error=fire is not one of medium, not-ready, unit-attention, busy");
    EXPECT_EQ(parse_error("ops=read"), "fault: no action (error=, stall=, srb= or opstatus=)");
    EXPECT_EQ(parse_error("error=busy,stall=10"), "fault: more than one action (error=, stall= or srb=)");
    EXPECT_EQ(parse_error("stall=0"), "fault: stall=0 is not a number in 1..3600000");
    EXPECT_EQ(parse_error("error=busy,percent=101"), "fault: percent=101 is not a number in 1..100");
    EXPECT_EQ(parse_error("error=busy,lba=9-3"), "fault: lba=9-3 is not FIRST or FIRST-LAST (FIRST <= LAST)");
    EXPECT_EQ(parse_error("error=busy,ops=trim"), "fault: ops=trim is not one of read, write, flush, any");
    EXPECT_EQ(parse_error("error=busy,often"), "fault: 'often' is not NAME=VALUE");
    EXPECT_EQ(parse_error("error=busy,when=now"),
              "fault: unknown setting 'when' (want error=, stall=, srb=, opstatus=, ops=, lba=, every=, percent=, "
              "seed=, count=; with srb=: scsi=, sense=, data=, autosense=)");
}

class FaultTest : public ::testing::Test {
protected:
    void inject(const std::string& text) { rig.disk.set_fault(parse_ok(text)); }
    FakeBackend be;
    DiskRig rig{be};
};

TEST_F(FaultTest, MediumErrorOnReadsOfARange) {
    inject("error=medium,ops=read,lba=100-199");
    Io before(cdb10(kRead10, 92, 8), Dir::FromDevice, 4096); // ends at 99
    rig.run(before);
    EXPECT_EQ(before.status(), kStatusGood);
    Io hit(cdb10(kRead10, 96, 8), Dir::FromDevice, 4096); // 96..103
    rig.run(hit);
    EXPECT_EQ(hit.status(), kStatusCheckCondition);
    EXPECT_EQ(hit.key(), kSenseMediumError);
    EXPECT_EQ(hit.asc(), 0x11) << "unrecovered read error";
    EXPECT_EQ(hit.cmd.data_transferred, 0u);
    Io write(cdb10(kWrite10, 150, 8), Dir::ToDevice, 4096);
    rig.run(write);
    EXPECT_EQ(write.status(), kStatusGood) << "only reads";
    EXPECT_EQ(rig.disk.stats().faults.load(), 1u);
    EXPECT_EQ(rig.disk.stats().errors.load(), 1u);
    EXPECT_EQ(be.seen.size(), 2u) << "the failed read never reached the backend";
}

TEST_F(FaultTest, EachErrorKindCarriesItsSense) {
    struct Case {
        const char* fault;
        uint8_t status, key, asc, ascq;
    } cases[] = {
        {"error=medium,ops=write", kStatusCheckCondition, kSenseMediumError, 0x0C, 0x00},
        {"error=not-ready", kStatusCheckCondition, kSenseNotReady, 0x04, 0x01},
        {"error=unit-attention", kStatusCheckCondition, kSenseUnitAttention, 0x29, 0x00},
        {"error=busy", kStatusBusy, 0, 0, 0},
    };
    for (const Case& c : cases) {
        inject(c.fault);
        Io w(cdb10(kWrite10, 0, 1), Dir::ToDevice, 512);
        rig.run(w);
        EXPECT_EQ(w.status(), c.status) << c.fault;
        EXPECT_EQ(w.key(), c.key) << c.fault;
        EXPECT_EQ(w.asc(), c.asc) << c.fault;
        EXPECT_EQ(w.ascq(), c.ascq) << c.fault;
    }
    EXPECT_TRUE(be.seen.empty());
}

TEST_F(FaultTest, EveryNthUpToACount) {
    inject("error=busy,every=3,count=2");
    int busy = 0;
    for (int i = 0; i < 12; i++) {
        Io r(cdb10(kRead10, uint32_t(i), 1), Dir::FromDevice, 512);
        rig.run(r);
        if (r.status() == kStatusBusy) {
            busy++;
            EXPECT_TRUE(i == 2 || i == 5) << "injected into command " << i;
        }
    }
    EXPECT_EQ(busy, 2);
    EXPECT_EQ(rig.disk.stats().faults.load(), 2u);
}

TEST_F(FaultTest, PercentIsRepeatableForASeed) {
    auto pattern = [&](const std::string& fault) {
        inject(fault);
        std::string hits;
        for (int i = 0; i < 200; i++) {
            Io r(cdb10(kRead10, 0, 1), Dir::FromDevice, 512);
            rig.run(r);
            hits += r.status() == kStatusBusy ? 'x' : '.';
        }
        return hits;
    };
    const std::string a = pattern("error=busy,percent=25,seed=42");
    const std::string b = pattern("error=busy,percent=25,seed=42");
    const std::string c = pattern("error=busy,percent=25,seed=43");
    EXPECT_EQ(a, b);
    EXPECT_NE(a, c);
    const auto n = std::count(a.begin(), a.end(), 'x');
    EXPECT_GT(n, 20);
    EXPECT_LT(n, 80);
}

TEST_F(FaultTest, FlushesMatchOnlyWhenAsked) {
    inject("error=medium,ops=write");
    Io f(cdb10(kSyncCache10, 0, 0));
    rig.run(f);
    EXPECT_EQ(f.status(), kStatusGood);
    inject("error=medium,ops=flush");
    Io g(cdb10(kSyncCache10, 0, 0));
    rig.run(g);
    EXPECT_EQ(g.status(), kStatusCheckCondition);
}

// A held command completes once, when the fault changes; the others run meanwhile.
TEST_F(FaultTest, HeldUntilTheFaultChanges) {
    inject("stall=hold,ops=write,count=1");
    Io w(cdb10(kWrite10, 0, 1), Dir::ToDevice, 512);
    rig.disk.submit(&w.cmd);
    EXPECT_EQ(rig.disk.stats().stalled.load(), 1u);
    Io r(cdb10(kRead10, 0, 1), Dir::FromDevice, 512);
    rig.run(r);
    EXPECT_EQ(r.status(), kStatusGood);
    Io w2(cdb10(kWrite10, 8, 1), Dir::ToDevice, 512);
    rig.run(w2); // count=1: only the first write is held
    EXPECT_EQ(rig.sink.times(&w.cmd), 0);
    inject("none");
    rig.sink.wait_total(3);
    EXPECT_EQ(rig.sink.times(&w.cmd), 1);
    EXPECT_EQ(w.status(), kStatusGood);
    EXPECT_EQ(rig.disk.stats().stalled.load(), 0u);
    EXPECT_EQ(be.seen.size(), 3u);
}

// A timed stall ends by itself (waited for as an event, not timed here).
TEST_F(FaultTest, TimedStallEndsByItself) {
    inject("stall=20");
    Io w(cdb10(kWrite10, 0, 1), Dir::ToDevice, 512);
    rig.run(w);
    EXPECT_EQ(w.status(), kStatusGood);
    EXPECT_EQ(rig.disk.stats().faults.load(), 1u);
    EXPECT_EQ(rig.disk.stats().stalled.load(), 0u);
}

// What a save carries of a fault (Disk::fault_counts): a command the fault counted is left
// out until it is answered, wherever it waits (the backend, a stall), as a load executes it
// again; one answered at once is in at once. A fault set with counts goes on from them.
TEST_F(FaultTest, CountsLeaveOutWhatIsNotAnswered) {
    be.defer = true;
    inject("error=busy,ops=read,every=2");
    Io first(cdb10(kRead10, 0, 1), Dir::FromDevice, 512);
    rig.disk.submit(&first.cmd); // matched, passes: in the backend
    EXPECT_EQ(rig.disk.fault_counts().matched, 0u);
    Io second(cdb10(kRead10, 8, 1), Dir::FromDevice, 512);
    rig.disk.submit(&second.cmd); // matched, injected: answered BUSY at once
    EXPECT_EQ(second.status(), kStatusBusy);
    FaultCounts c = rig.disk.fault_counts();
    EXPECT_EQ(c.matched, 1u);
    EXPECT_EQ(c.injected, 1u);
    be.release();
    rig.sink.wait_total(2);
    c = rig.disk.fault_counts();
    EXPECT_EQ(c.matched, 2u);
    EXPECT_EQ(c.injected, 1u);

    be.defer = false;
    rig.disk.set_fault(parse_ok("stall=hold,ops=write,count=1"));
    Io w(cdb10(kWrite10, 0, 1), Dir::ToDevice, 512);
    rig.disk.submit(&w.cmd);
    EXPECT_EQ(rig.disk.stats().stalled.load(), 1u);
    c = rig.disk.fault_counts();
    EXPECT_EQ(c.matched, 0u) << "the held write is counted";
    EXPECT_EQ(c.injected, 0u);

    // Going on from counts: the read matched once already, so the next one is the second.
    rig.disk.set_fault(parse_ok("error=busy,ops=read,every=2"), FaultCounts{1, 0, 1});
    rig.sink.wait_total(3); // the held write, released by the change
    Io third(cdb10(kRead10, 16, 1), Dir::FromDevice, 512);
    rig.run(third);
    EXPECT_EQ(third.status(), kStatusBusy);
}

// Before a disk's backend is drained for good, every held command goes to the backend.
TEST_F(FaultTest, StopReleasesEverythingHeld) {
    inject("stall=hold");
    std::vector<std::unique_ptr<Io>> ios;
    for (int i = 0; i < 5; i++) {
        ios.push_back(std::make_unique<Io>(cdb10(kRead10, uint32_t(i), 1), Dir::FromDevice, 512));
        rig.disk.submit(&ios.back()->cmd);
    }
    EXPECT_EQ(rig.sink.total(), 0u);
    rig.disk.stop_faults();
    rig.sink.wait_total(5);
    for (auto& io : ios) EXPECT_EQ(rig.sink.times(&io->cmd), 1);
    Io r(cdb10(kRead10, 0, 1), Dir::FromDevice, 512);
    rig.run(r); // no fault after stop
    EXPECT_EQ(rig.disk.stats().faults.load(), 5u);
}

} // namespace
} // namespace hvstor::scsi::test
