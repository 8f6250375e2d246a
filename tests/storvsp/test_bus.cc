// storvsp on its own: a controller on a loopback bus, with no partition, SynIC or VMBus
// server in this binary (it links the storvsp layer and what is below it, nothing else).
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "bus_rig.h"
#include "hvstor/guest_log.h"
#include "hvstor/scsi/disk.h"
#include "hvstor/storvsp/controller.h"

using namespace hvstor;
using namespace hvstor::storvsp;
using hvstor::test::FakeHost;
using hvstor::test::LoopbackBus;
using hvstor::test::StorvscRings;

namespace {

class StorvspBusTest : public hvstor::test::StorvspBusRig {
protected:
    void SetUp() override { build({}, kInstance, 16 << 20); }
    static VmscsiRequest rw10(bool write, uint32_t lba, uint16_t blocks) {
        VmscsiRequest s{};
        s.cdb_length = 10;
        s.cdb_or_sense[0] = write ? 0x2A : 0x28;
        s.data_in = write ? kDataWrite : kDataRead;
        s.cdb_or_sense[5] = uint8_t(lba);
        s.cdb_or_sense[8] = uint8_t(blocks);
        s.sense_info_length = kSenseBytes;
        return s;
    }
    void open_broken_and_close(size_t stopped_before);
};

TEST_F(StorvspBusTest, PrimaryIsOfferedAsASyntheticScsiController) {
    ASSERT_EQ(bus.offered.size(), 1u);
    auto o = bus.offer_of(bus.offered[0]);
    ASSERT_TRUE(o);
    EXPECT_EQ(o->type, vmbus::kScsiControllerType);
    EXPECT_EQ(o->subchannel_index, 0);
}

TEST_F(StorvspBusTest, HandshakeThenDataRoundTrip) {
    auto c = open_primary();
    ASSERT_TRUE(guest.handshake(c));
    for (uint32_t i = 0; i < 8192; i++) *host.ram(kBuf + i) = uint8_t(i * 13 + 1);
    guest.send_srb(c, rw10(true, 8, 16), kBuf, 8192);
    auto r = guest.wait(c);
    EXPECT_EQ(r.pkt.srb.srb_status, kSrbSuccess);
    guest.send_srb(c, rw10(false, 8, 16), kBuf + 0x10000, 8192);
    r = guest.wait(c);
    EXPECT_EQ(r.pkt.srb.srb_status, kSrbSuccess);
    EXPECT_EQ(std::memcmp(host.ram(kBuf), host.ram(kBuf + 0x10000), 8192), 0);
    EXPECT_GT(bus.interrupts.load(), 0u) << "completions raised the channel's interrupt";
}

TEST_F(StorvspBusTest, SubchannelsAreOfferedOnRequestAndWithdrawnWithThePrimary) {
    auto c = open_primary();
    ASSERT_TRUE(guest.handshake(c));
    EXPECT_EQ(ask_subchannels(c, 3), kStatusSuccess);
    // The offers follow the answer, from the channel's worker: closing the primary joins
    // that worker, so afterwards the offer list is complete.
    bus.close(c.relid);
    ASSERT_EQ(bus.offered.size(), 4u);
    EXPECT_EQ(bus.rescinded.size(), 3u) << "subchannels go with the primary";
    EXPECT_EQ(ctl->stats().subchannels_offered, 3u);
}

TEST_F(StorvspBusTest, MalformedPacketsAreAnsweredWithAnError) {
    auto c = open_primary();
    VstorPacket v{};
    v.operation = uint32_t(Operation::BeginInitialization);
    guest.send(c, v, 8); // shorter than any vstor packet
    auto r = guest.wait(c);
    EXPECT_EQ(r.pkt.status, kStatusInvalidParameter);
    guest.send_srb(c, rw10(false, 0, 1), kBuf, 512);
    r = guest.wait(c);
    EXPECT_EQ(r.pkt.status, kStatusInvalidDeviceState) << "SRB before the handshake";
    EXPECT_EQ(ctl->stats().bad_packets, 2u);
    // Each with a guest-error line that says where, which field and its value.
    const std::string where = "storvsp: relid " + std::to_string(c.relid) + ": ";
    EXPECT_TRUE(host.logged(where + "packet type 6 with 8 payload bytes: not a storage request"));
    EXPECT_TRUE(host.logged(where + "SRB before the handshake finished"));
}

TEST_F(StorvspBusTest, GuestErrorLinesNameTheController) {
    ctl.reset();
    ControllerConfig cfg;
    cfg.name = "hv-storvsc scsi0";
    ctl = std::make_unique<Controller>(host, bus, *vmbus::Guid::parse("f8b3781b-1e82-4818-a1c3-63d806ec1500"), cfg);
    std::string err;
    ASSERT_TRUE(ctl->start(err)) << err;
    ASSERT_TRUE(ctl->attach(0, disk.get(), err)) << err;
    auto c = open_primary();
    ASSERT_TRUE(guest.handshake(c));
    VmscsiRequest s = rw10(false, 0, 1);
    s.cdb_length = 20;
    guest.send_srb(c, s, kBuf, 512);
    guest.wait(c);
    EXPECT_TRUE(host.logged("hv-storvsc scsi0: relid " + std::to_string(c.relid) + ": SRB cdb_length 20 (want 1..16)"));
}

TEST_F(StorvspBusTest, EachSrbIsTracedOnArrivalAndCompletion) {
    auto c = open_primary();
    ASSERT_TRUE(guest.handshake(c));
    guest.send_srb(c, rw10(true, 8, 2), kBuf, 1024);
    auto r = guest.wait(c);
    VmscsiRequest bad = rw10(false, 0, 1);
    bad.cdb_length = 0;
    guest.send_srb(c, bad, kBuf, 512);
    guest.wait(c);
    // The handshake's four control operations, each with its answer's status.
    auto control = host.traced(HVSTOR_TRACE_storvsp_control);
    ASSERT_EQ(control.size(), 4u);
    for (auto& a : control) EXPECT_EQ(a[0], c.relid);
    const auto submit = host.traced(HVSTOR_TRACE_storvsp_srb_submit);
    const auto done = host.traced(HVSTOR_TRACE_storvsp_srb_complete);
    ASSERT_EQ(submit.size(), 2u);
    ASSERT_EQ(done.size(), 2u);
    // relid, transaction id, lun, opcode, bytes; then relid, id, srb status, scsi status, bytes.
    EXPECT_EQ(submit[0], (std::vector<uint64_t>{c.relid, r.trans_id, 0, 0x2A, 1024}));
    EXPECT_EQ(done[0], (std::vector<uint64_t>{c.relid, r.trans_id, kSrbSuccess, 0, 1024}));
    EXPECT_EQ(done[1][1], submit[1][1]);
    EXPECT_EQ(done[1][2], kSrbInvalidRequest);
}

TEST_F(StorvspBusTest, StatisticsPerChannel) {
    auto c = open_primary();
    ASSERT_TRUE(guest.handshake(c));
    for (int i = 0; i < 3; i++) {
        guest.send_srb(c, rw10(false, 0, 1), kBuf, 512);
        guest.wait(c);
    }
    VmscsiRequest bad = rw10(false, 0, 1);
    bad.cdb_length = 17;
    guest.send_srb(c, bad, kBuf, 512);
    guest.wait(c);
    const ControllerStats s = ctl->stats();
    ASSERT_EQ(s.channels.size(), 1u);
    const ChannelStatsSnapshot& p = s.channels[0];
    EXPECT_EQ(p.relid, c.relid);
    EXPECT_TRUE(p.open);
    EXPECT_EQ(p.srbs, 4u);
    EXPECT_EQ(p.completions, 4u);
    EXPECT_EQ(p.srb_errors, 1u);
    EXPECT_EQ(p.packets_in, 8u) << "four handshake packets and four SRBs";
    EXPECT_EQ(p.packets_out, 8u);
    EXPECT_EQ(p.outstanding, 0u);
    EXPECT_EQ(p.max_outstanding, 1u);
    EXPECT_GT(p.interrupts, 0u);
    EXPECT_EQ(s.srbs, 4u);
    EXPECT_EQ(s.open_channels, 1u);
    // Kept over a close and a new open.
    bus.close(c.relid);
    EXPECT_FALSE(ctl->stats().channels[0].open);
    EXPECT_EQ(ctl->stats().channels[0].packets_in, 8u);
}

TEST_F(StorvspBusTest, BadSrbFieldsAreNamedInTheGuestErrorLog) {
    auto c = open_primary();
    ASSERT_TRUE(guest.handshake(c));
    VmscsiRequest s = rw10(false, 0, 1);
    s.cdb_length = 20;
    guest.send_srb(c, s, kBuf, 512);
    auto r = guest.wait(c);
    EXPECT_EQ(r.pkt.srb.srb_status, kSrbInvalidRequest);
    EXPECT_TRUE(host.logged("SRB cdb_length 20 (want 1..16)"));

    guest.send_srb(c, rw10(false, 0, 1), FakeHost::kHoleStart, 512); // MMIO, not RAM
    r = guest.wait(c);
    EXPECT_EQ(r.pkt.srb.srb_status, kSrbInvalidRequest);
    EXPECT_TRUE(host.logged("SRB GPA-direct pfn 0x600 is not guest RAM"));

    VmscsiRequest big = rw10(false, 0, 1);
    guest.send_srb(c, big, kBuf, 1 << 20); // over max-transfer (256 KiB)
    r = guest.wait(c);
    EXPECT_EQ(r.pkt.srb.srb_status, kSrbInvalidRequest);
    EXPECT_TRUE(host.logged("SRB data_transfer_length 1048576 > max-transfer 262144"));
}

// A guest that makes every packet bad gets a burst of lines, then one a second: the log
// cannot be flooded. The clock stands still but for the second the test moves it on.
TEST_F(StorvspBusTest, GuestErrorLinesAreRateLimited) {
    host.stop_clock();
    auto c = open_primary();
    auto bad = [&] {
        VstorPacket v{};
        v.operation = 99;
        guest.send(c, v);
        guest.wait(c); // the line goes out before the answer
    };
    for (int i = 0; i < 200; i++) bad();
    EXPECT_EQ(ctl->stats().bad_packets, 200u);
    EXPECT_EQ(host.guest_errors.size(), size_t(GuestErrorLog::kBurst));
    host.advance_clock(std::chrono::seconds(1));
    bad();
    bad();
    ASSERT_EQ(host.guest_errors.size(), size_t(GuestErrorLog::kBurst) + 1) << "one line a second";
    EXPECT_NE(host.guest_errors.back().find("(180 more held back)"), std::string::npos) << host.guest_errors.back();
}

// Opens the primary with the guest-to-host ring's write index past its end, lets the worker
// find it (one guest-error line, if the budget allows) and closes the channel again.
void StorvspBusTest::open_broken_and_close(size_t stopped_before) {
    auto c = guest.rings(ctl->primary_relid(), kRings);
    c.out.store(0, 0xFFFFFFF0u);
    ASSERT_EQ(bus.open(c.relid, kRings, kPages), vmbus::kStatusSuccess);
    bus.signal(c.relid);
    // The worker's round saw the index and stopped the channel before it closes.
    while (host.traced(HVSTOR_TRACE_channel_stopped).size() <= stopped_before) std::this_thread::yield();
    bus.close(c.relid);
}

// A channel's runtime is made anew on every OPENCHANNEL: a guest that breaks its ring and
// reopens the channel in a loop gets one burst of lines for the controller, then one a second
// (the issue: a fresh burst of 20 per open, 161 lines a second where one was promised).
TEST_F(StorvspBusTest, ReopeningAChannelGetsNoFreshBurstOfGuestErrorLines) {
    host.stop_clock();
    constexpr size_t kReopens = 3 * GuestErrorLog::kBurst;
    for (size_t i = 0; i < kReopens; i++) open_broken_and_close(i);
    const std::string what = "impossible write index";
    EXPECT_EQ(host.count_logged(what), size_t(GuestErrorLog::kBurst));
    // Three seconds later, as many reopens again: three more lines, not three bursts.
    for (size_t i = kReopens; i < 2 * kReopens; i++) {
        if (i % 20 == 0) host.advance_clock(std::chrono::seconds(1));
        open_broken_and_close(i);
    }
    EXPECT_EQ(host.count_logged(what), size_t(GuestErrorLog::kBurst) + 3);
    EXPECT_TRUE(host.logged("more held back)"));
}

// The budget is the controller's: lines from the primary and a subchannel, from the ring
// (the channel runtime) and from the storage protocol (the queue), all draw on it.
TEST_F(StorvspBusTest, AControllersChannelsShareOneGuestErrorBudget) {
    host.stop_clock();
    auto c = open_primary();
    ASSERT_TRUE(guest.handshake(c));
    ASSERT_EQ(ask_subchannels(c, 1), kStatusSuccess);
    // The offer follows the answer, from the worker, which traces it when done.
    while (host.traced(HVSTOR_TRACE_storvsp_subchannels).empty()) std::this_thread::yield();
    ASSERT_EQ(bus.offered.size(), 2u);
    constexpr uint64_t kSubRings = 0x480000;
    auto sc = guest.rings(bus.offered[1], kSubRings);
    ASSERT_EQ(bus.open(sc.relid, kSubRings, kPages), vmbus::kStatusSuccess);
    for (size_t i = 0; i < GuestErrorLog::kBurst; i++) {
        VstorPacket bad{};
        bad.operation = 99;
        auto& ch = i % 2 ? sc : c;
        guest.send(ch, bad);
        guest.wait(ch);
    }
    EXPECT_EQ(host.guest_errors.size(), size_t(GuestErrorLog::kBurst));
    EXPECT_EQ(host.count_logged("subchannel operation 99"), size_t(GuestErrorLog::kBurst) / 2);
    // Spent: a bad packet on either channel, or a broken ring, logs nothing more.
    VstorPacket bad{};
    bad.operation = 99;
    guest.send(sc, bad);
    guest.wait(sc);
    bus.close(sc.relid);
    bus.close(c.relid);
    open_broken_and_close(0);
    EXPECT_EQ(host.guest_errors.size(), size_t(GuestErrorLog::kBurst));
    host.advance_clock(std::chrono::seconds(1));
    open_broken_and_close(1);
    EXPECT_EQ(host.guest_errors.size(), size_t(GuestErrorLog::kBurst) + 1);
    EXPECT_TRUE(host.logged("impossible write index"));
}

} // namespace
