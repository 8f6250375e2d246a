// The storage protocol end to end through the Host seam: a fake hv_storvsc opens
// channels of a real controller over real rings, with RAM-backed SCSI disks.
#include <gtest/gtest.h>

#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>

#include "fake_guest.h"
#include "fake_host.h"
#include "fake_loop.h"
#include "fake_storvsc.h"
#include "hvstor/backend/backend.h"
#include "hvstor/scsi/disk.h"
#include "hvstor/storvsp/controller.h"

using namespace hvstor;
using namespace hvstor::storvsp;
using hvstor::test::FakeGuest;
using hvstor::test::FakeHost;
using hvstor::test::FakeStorvsc;

namespace {

constexpr uint64_t kRings = 0x400000;      // primary rings
constexpr uint64_t kSubRings = 0x480000;   // a subchannel's rings
constexpr uint64_t kBuf = 0x500000;        // data buffers

// A backend that holds requests until released, for back-pressure tests.
class GatedBackend : public backend::Backend {
public:
    uint64_t size() const override { return 1 << 20; }
    uint32_t block_size() const override { return 512; }
    bool read_only() const override { return false; }
    std::string describe() const override { return "gated"; }
    bool submit_may_block() const override { return may_block; }
    void submit(std::span<backend::Request* const> reqs) override {
        if (throw_next.exchange(false)) throw std::bad_alloc();
        std::lock_guard lock(mu);
        for (auto* r : reqs) held.push_back(r);
    }
    void drain() override {}
    size_t held_count() {
        std::lock_guard lock(mu);
        return held.size();
    }
    // Completes the request held longest.
    void release_one() {
        backend::Request* r;
        {
            std::lock_guard lock(mu);
            r = held.front();
            held.erase(held.begin());
        }
        r->result = 0;
        r->done->complete(r);
    }
    void release_all() {
        std::vector<backend::Request*> todo;
        {
            std::lock_guard lock(mu);
            todo.swap(held);
        }
        for (auto* r : todo) {
            r->result = 0;
            r->done->complete(r);
        }
    }
    std::mutex mu;
    std::vector<backend::Request*> held;
    bool may_block = false;              // what it says of its submits
    std::atomic<bool> throw_next{false}; // the next submit throws (an allocation failing)
};

class StorvspTest : public ::testing::Test {
protected:
    void SetUp() override { build({}); }

    // With HVSTOR_TEST_EVENT_LOOP set (./hvstor test runs the suite a second time so), every
    // channel turns in an event loop instead of a thread of its own.
    void build(ControllerConfig cfg) {
        ctl.reset();
        if (std::getenv("HVSTOR_TEST_EVENT_LOOP") && cfg.loops.empty()) {
            if (!loop) loop = std::make_unique<hvstor::test::FakeLoop>();
            cfg.loops = {loop.get()};
        }
        p.set_message_handler(&server);
        for (uint32_t vp = 0; vp < 4; vp++) g.enable_synic(vp);
        ctl = std::make_unique<Controller>(host, server, *vmbus::Guid::parse(kInstance), cfg);
        std::string err;
        ASSERT_TRUE(ctl->start(err)) << err;
        std::string e2;
        ram = backend::make_ram(64 << 20, e2);
        ASSERT_TRUE(ram) << e2;
        disk = std::make_unique<scsi::Disk>(*ram, scsi::DiskConfig{}, *ctl);
        ASSERT_TRUE(ctl->attach(0, disk.get(), err)) << err;
        connect();
    }

    void connect() {
        vmbus::InitiateContact c{};
        c.hdr.msgtype = uint32_t(vmbus::MsgType::InitiateContact);
        c.version_requested = vmbus::version::kV5_3;
        c.v5.msg_sint = 2;
        g.post(0, 4, c);
        guest.wait_message<vmbus::VersionResponse>(vmbus::MsgType::VersionResponse);
        vmbus::MsgHeader h{uint32_t(vmbus::MsgType::RequestOffers), 0};
        g.post(0, 1, h);
        guest.wait_message<vmbus::MsgHeader>(vmbus::MsgType::AllOffersDelivered);
    }

    FakeStorvsc::Chan open_primary() {
        auto c = guest.open(ctl->primary_relid(), kRings, 0x100);
        EXPECT_TRUE(c);
        return c ? *c : FakeStorvsc::Chan{};
    }

    static VmscsiRequest srb(uint8_t op, uint8_t data_in, uint8_t lun = 0) {
        VmscsiRequest s{};
        s.cdb_length = 10;
        s.cdb_or_sense[0] = op;
        s.data_in = data_in;
        s.lun = lun;
        s.sense_info_length = kSenseBytes;
        return s;
    }
    static VmscsiRequest rw10(bool write, uint32_t lba, uint16_t blocks) {
        VmscsiRequest s = srb(write ? 0x2A : 0x28, write ? kDataWrite : kDataRead);
        s.cdb_or_sense[2] = uint8_t(lba >> 24);
        s.cdb_or_sense[3] = uint8_t(lba >> 16);
        s.cdb_or_sense[4] = uint8_t(lba >> 8);
        s.cdb_or_sense[5] = uint8_t(lba);
        s.cdb_or_sense[7] = uint8_t(blocks >> 8);
        s.cdb_or_sense[8] = uint8_t(blocks);
        return s;
    }
    static VmscsiRequest inquiry(uint8_t lun, uint8_t alloc = 96) {
        VmscsiRequest s = srb(0x12, kDataRead, lun);
        s.cdb_length = 6;
        s.cdb_or_sense[4] = alloc;
        return s;
    }

    // REPORT LUNS on `ch` (it needs no disk) is answered, with its transaction id.
    void expect_report_luns(FakeStorvsc::Chan ch) {
        VmscsiRequest rl = srb(0xA0, kDataRead);
        rl.cdb_length = 12;
        rl.cdb_or_sense[9] = 64;
        const uint64_t id = guest.send_srb(ch, rl, kBuf + 0x10000, 64);
        auto r = guest.wait(ch);
        EXPECT_EQ(r.trans_id, id);
    }
    void release_relid(uint32_t relid) {
        vmbus::RelidReleased rr{};
        rr.hdr.msgtype = uint32_t(vmbus::MsgType::RelidReleased);
        rr.child_relid = relid;
        g.post(0, 1, rr);
    }
    void tear_down_gpadl(uint32_t gpadl) {
        vmbus::GpadlTeardown t{};
        t.hdr.msgtype = uint32_t(vmbus::MsgType::GpadlTeardown);
        t.gpadl = gpadl;
        g.post(0, 1, t);
    }

    // CREATE_SUB_CHANNELS for `count` subchannels on `c`; its answer.
    FakeStorvsc::Completion ask_subchannels(FakeStorvsc::Chan& c, uint16_t count) {
        VstorPacket v{};
        v.operation = uint32_t(Operation::CreateSubChannels);
        v.sub_channel_count = count;
        guest.send(c, v);
        return guest.wait(c);
    }
    // The relid of the next channel offered.
    uint32_t next_offer() { return guest.wait_message<vmbus::OfferChannel>(vmbus::MsgType::OfferChannel).child_relid; }
    // One more subchannel asked for on `c`, offered and opened with its rings at `rings`
    // under GPADL `gpadl`; nullopt, with the failure recorded, if a step fails.
    std::optional<FakeStorvsc::Chan> open_subchannel(FakeStorvsc::Chan& c, uint64_t rings, uint32_t gpadl) {
        EXPECT_EQ(ask_subchannels(c, 1).pkt.status, kStatusSuccess);
        const uint32_t sub = next_offer();
        auto sc = guest.open(sub, rings, gpadl);
        EXPECT_TRUE(sc);
        return sc;
    }

    // The controller again, its channels in two loops of their own (l0, l1), every round a
    // turn in them.
    void build_in_two_loops(ControllerConfig cfg) {
        l0 = std::make_unique<hvstor::test::FakeLoop>();
        l1 = std::make_unique<hvstor::test::FakeLoop>();
        cfg.inline_rounds = false;
        cfg.loops = {l0.get(), l1.get()};
        build(cfg);
    }

    // LUN 0 becomes a disk whose requests wait until gated.release_all().
    void gate_lun0() {
        gated_disk = std::make_unique<scsi::Disk>(gated, scsi::DiskConfig{}, *ctl);
        ctl->detach(0);
        std::string err;
        ASSERT_TRUE(ctl->attach(0, gated_disk.get(), err)) << err;
    }

    // `n` reads of LUN 0 (gate_lun0) sent on c, all held by the disk; their transaction ids.
    std::set<uint64_t> hold_reads(FakeStorvsc::Chan& c, size_t n) {
        std::set<uint64_t> ids;
        for (size_t i = 0; i < n; i++) ids.insert(guest.send_srb(c, rw10(false, 0, 8), kBuf, 4096));
        while (gated.held_count() < n) std::this_thread::yield();
        return ids;
    }

    // What a paused VM must keep as it is: guest RAM and the interrupts raised so far.
    struct Still {
        std::vector<uint8_t> ram;
        size_t irqs;
    };
    Still still() { return {{host.ram(0), host.ram(0) + FakeHost::kRamSize}, host.irq_count()}; }
    void expect_still(const Still& s) {
        EXPECT_TRUE(std::vector<uint8_t>(host.ram(0), host.ram(0) + FakeHost::kRamSize) == s.ram)
            << "guest memory written while paused";
        EXPECT_EQ(host.irq_count(), s.irqs) << "an interrupt raised while paused";
    }

    // A subchannel is closed while LUN 0 holds `held` of its reads, then the primary is
    // closed and opened again and a subchannel asked for while the old one still drains (a
    // fresh queue serves it). After gate_lun0(); the old subchannel's ring GPADL is 0x200.
    struct Reopened {
        FakeStorvsc::Chan old_sub, primary, sub;
    };
    void reopen_while_a_subchannel_drains(int held, std::optional<Reopened>& out) {
        constexpr uint64_t kRings2 = 0x700000, kSubRings2 = 0x780000;
        auto c = open_primary();
        ASSERT_TRUE(guest.handshake(c));
        auto sc = open_subchannel(c, kSubRings, 0x200);
        ASSERT_TRUE(sc);
        for (int i = 0; i < held; i++) guest.send_srb(*sc, rw10(false, 0, 8), kBuf, 4096);
        while (gated.held_count() < size_t(held)) std::this_thread::yield();
        guest.close(*sc); // its close waits for the held requests
        guest.close(c);   // the primary's close withdraws the subchannel
        guest.wait_message<vmbus::RescindOffer>(vmbus::MsgType::RescindChannelOffer);
        release_relid(sc->relid);
        tear_down_gpadl(0x100);
        guest.wait_message<vmbus::GpadlTorndown>(vmbus::MsgType::GpadlTorndown); // the primary closed
        auto c2 = guest.open(ctl->primary_relid(), kRings2, 0x101);
        ASSERT_TRUE(c2);
        ASSERT_TRUE(guest.handshake(*c2));
        auto sc2 = open_subchannel(*c2, kSubRings2, 0x201);
        ASSERT_TRUE(sc2) << "a fresh queue serves the new subchannel";
        out = Reopened{*sc, *c2, *sc2};
    }

    static constexpr const char* kInstance = "f8b3781b-1e82-4818-a1c3-63d806ec1500";
    FakeHost host;
    hv::Partition p{host, hv::PartitionConfig{4, 0x5A58}};
    vmbus::Server server{p.synic(), vmbus::ServerConfig{}};
    FakeGuest g{host, p};
    FakeStorvsc guest{host, p, g};
    std::unique_ptr<backend::Backend> ram;
    std::unique_ptr<hvstor::test::FakeLoop> loop; // outlives the controller
    std::unique_ptr<hvstor::test::FakeLoop> l0, l1; // build_in_two_loops's, the same
    std::unique_ptr<Controller> ctl;
    std::unique_ptr<scsi::Disk> disk;
    GatedBackend gated;
    std::unique_ptr<scsi::Disk> gated_disk;

    void TearDown() override {
        ctl.reset(); // before the disks and backends they complete through
        if (loop) {
            EXPECT_EQ(loop->watching(), 0u) << "every channel let go of the loop";
            EXPECT_EQ(loop->bad_unwatches(), 0u);
        }
        disk.reset();
        gated_disk.reset();
    }
};

} // namespace

TEST_F(StorvspTest, HandshakeAndProperties) {
    auto c = open_primary();
    auto props = guest.handshake(c);
    ASSERT_TRUE(props);
    EXPECT_EQ(props->max_channel_count, 16);
    EXPECT_EQ(props->flags & kFlagMultiChannel, kFlagMultiChannel);
    EXPECT_EQ(props->max_transfer_bytes, 256u * 1024);
    EXPECT_EQ(ctl->open_channels(), 1u);
}

TEST_F(StorvspTest, VersionNegotiationAsLinuxTriesIt) {
    build({16, 256 * 1024, 256, kVersionWin8_1});
    auto c = open_primary();
    VstorPacket v{};
    v.operation = uint32_t(Operation::BeginInitialization);
    guest.send(c, v);
    ASSERT_EQ(guest.wait(c).pkt.status, kStatusSuccess);
    for (uint16_t ver : {kVersionWin10, kVersionWin8_1}) {
        v = {};
        v.operation = uint32_t(Operation::QueryProtocolVersion);
        v.version.major_minor = ver;
        guest.send(c, v);
        auto r = guest.wait(c);
        EXPECT_EQ(r.pkt.operation, uint32_t(Operation::CompleteIo));
        if (ver == kVersionWin10) EXPECT_EQ(r.pkt.status, kStatusRevisionMismatch);
        else EXPECT_EQ(r.pkt.status, kStatusSuccess);
    }
    v = {};
    v.operation = uint32_t(Operation::QueryProtocolVersion);
    v.version.major_minor = 0x0700;
    guest.send(c, v);
    EXPECT_NE(guest.wait(c).pkt.status, kStatusSuccess) << "unknown version";
}

TEST_F(StorvspTest, OutOfOrderAndUnknownPacketsGetErrorStatus) {
    auto c = open_primary();
    VstorPacket v{};
    v.operation = uint32_t(Operation::QueryProperties);
    uint64_t id = guest.send(c, v);
    auto r = guest.wait(c);
    EXPECT_EQ(r.trans_id, id);
    EXPECT_EQ(r.pkt.status, kStatusInvalidDeviceState);

    guest.send_srb(c, srb(0x00, kDataNone), 0, 0);
    r = guest.wait(c);
    EXPECT_EQ(r.pkt.status, kStatusInvalidDeviceState) << "SRB before the handshake";

    v = {};
    v.operation = 99;
    guest.send(c, v);
    EXPECT_EQ(guest.wait(c).pkt.status, kStatusInvalidDeviceRequest);

    v = {};
    v.operation = uint32_t(Operation::BeginInitialization);
    guest.send(c, v, 20); // truncated
    r = guest.wait(c);
    EXPECT_NE(r.pkt.status, kStatusSuccess);
    EXPECT_GE(ctl->stats().bad_packets, 4u);
}

TEST_F(StorvspTest, InquiryPresentAndAbsentLun) {
    auto c = open_primary();
    ASSERT_TRUE(guest.handshake(c));
    guest.send_srb(c, inquiry(0), kBuf, 96);
    auto r = guest.wait(c);
    EXPECT_EQ(r.pkt.srb.srb_status, kSrbSuccess);
    EXPECT_EQ(r.len, 64u) << "completion sized like the request";
    EXPECT_EQ(std::memcmp(host.ram(kBuf + 8), "Msft    ", 8), 0);
    EXPECT_EQ(std::memcmp(host.ram(kBuf + 16), "Virtual Disk    ", 16), 0);

    guest.send_srb(c, inquiry(5), kBuf, 96);
    r = guest.wait(c);
    EXPECT_EQ(r.pkt.srb.srb_status, kSrbSuccess);
    EXPECT_EQ(*host.ram(kBuf), 0x7F) << "no phantom disks";

    guest.send_srb(c, srb(0x00, kDataNone, 5), 0, 0); // TEST UNIT READY
    r = guest.wait(c);
    EXPECT_EQ(r.pkt.srb.srb_status, kSrbInvalidLun);

    VmscsiRequest other = srb(0x00, kDataNone);
    other.target_id = 1;
    guest.send_srb(c, other, 0, 0);
    EXPECT_EQ(guest.wait(c).pkt.srb.srb_status, kSrbInvalidLun) << "only target 0 has disks";
}

TEST_F(StorvspTest, WriteReadRoundTripUnalignedAcrossPages) {
    auto c = open_primary();
    ASSERT_TRUE(guest.handshake(c));
    const uint64_t wbuf = kBuf + 0x234, rbuf = kBuf + 0x20000 + 0x10;
    for (uint32_t i = 0; i < 16384; i++) *host.ram(wbuf + i) = uint8_t(i * 7 + 3);
    guest.send_srb(c, rw10(true, 100, 32), wbuf, 16384);
    auto r = guest.wait(c);
    EXPECT_EQ(r.pkt.srb.srb_status, kSrbSuccess);
    EXPECT_EQ(r.pkt.srb.data_transfer_length, 16384u);
    guest.send_srb(c, rw10(false, 100, 32), rbuf, 16384);
    r = guest.wait(c);
    EXPECT_EQ(r.pkt.srb.srb_status, kSrbSuccess);
    EXPECT_EQ(std::memcmp(host.ram(wbuf), host.ram(rbuf), 16384), 0);
    EXPECT_EQ(host.maps.load(), host.unmaps.load() + 2 * (FakeStorvsc::kRingPages)) << "data pages all unmapped";
}

TEST_F(StorvspTest, CheckConditionCarriesSense) {
    auto c = open_primary();
    ASSERT_TRUE(guest.handshake(c));
    guest.send_srb(c, rw10(false, 0x7FFFFFFF, 8), kBuf, 4096);
    auto r = guest.wait(c);
    EXPECT_EQ(r.pkt.srb.srb_status, kSrbError | kSrbAutosenseValid);
    EXPECT_EQ(r.pkt.srb.scsi_status, scsi::kStatusCheckCondition);
    EXPECT_GT(r.pkt.srb.sense_info_length, 0);
    EXPECT_EQ(r.pkt.srb.cdb_or_sense[2] & 0xF, scsi::kSenseIllegalRequest);
    EXPECT_EQ(r.pkt.srb.cdb_or_sense[12], 0x21) << "LBA out of range";
}

// An SRB for max-transfer bytes at an unaligned buffer, as Linux sends it: one range of
// 2049 pfns, a 16.5 KiB packet for 8 MiB. The channel takes it and answers (the ring once
// refused packets over 8 KiB as impossible, and the channel stopped for good).
TEST_F(StorvspTest, LargestTransferAtAnyAlignmentIsOnePacketTheChannelTakes) {
    ControllerConfig cfg;
    cfg.max_transfer_bytes = 8u << 20;
    cfg.max_subchannels = 0;
    build(cfg);
    scsi::DiskConfig dc; // the disk's Block Limits allow as much
    dc.max_transfer_bytes = cfg.max_transfer_bytes;
    ctl->detach(0);
    disk = std::make_unique<scsi::Disk>(*ram, dc, *ctl);
    std::string err;
    ASSERT_TRUE(ctl->attach(0, disk.get(), err)) << err;
    auto c = open_primary();
    ASSERT_TRUE(guest.handshake(c));
    EXPECT_GT(max_request_packet(cfg), 16u * 1024);
    for (const bool write : {true, false}) {
        const uint32_t len = cfg.max_transfer_bytes, off = 0x200;
        VstorPacket v{};
        v.operation = uint32_t(Operation::ExecuteSrb);
        v.srb = rw10(write, 0, uint16_t(len / 512));
        v.srb.length = sizeof v.srb;
        v.srb.data_transfer_length = len;
        // More than the guest's RAM: the pfns name 16 buffer pages over and over.
        uint32_t hdr;
        const auto body = FakeStorvsc::gpa_direct(v, len, off, [](uint32_t i) { return (kBuf >> 12) + i % 16; }, hdr);
        ASSERT_GT(body.size(), 16u * 1024);
        const uint64_t id = c.next_id++;
        ASSERT_TRUE(guest.write_packet(c, uint16_t(vmbus::PacketType::DataUsingGpaDirect), id, body, hdr));
        // The answer, or the channel's report that it stopped (then no answer ever comes).
        std::optional<FakeStorvsc::Completion> answer;
        while (!(answer = guest.poll(c))) {
            ASSERT_FALSE(host.logged("the channel stops")) << "a packet of " << body.size() << " bytes";
            std::this_thread::yield();
        }
        const auto& r = *answer;
        EXPECT_EQ(r.trans_id, id);
        EXPECT_EQ(r.pkt.srb.srb_status, kSrbSuccess) << (write ? "write" : "read");
        EXPECT_EQ(r.pkt.srb.data_transfer_length, len);
    }
    EXPECT_EQ(ctl->stats().bad_packets, 0u);
}

// A disk added while the guest is still in its handshake: the rescan notice waits for the
// guest's first SRB after it. Linux queues a notice's work on a workqueue it creates only
// after the handshake, so a notice before then (it once was the first packet after the open)
// is a NULL pointer in the guest.
TEST_F(StorvspTest, RescanNoticeWaitsForTheGuestsFirstSrbAfterTheHandshake) {
    auto c = open_primary();
    std::string e;
    auto r2 = backend::make_ram(1 << 20, e);
    scsi::Disk d2(*r2, {}, *ctl);
    ASSERT_TRUE(ctl->attach(1, &d2, e));
    VstorPacket v{};
    v.operation = uint32_t(Operation::BeginInitialization);
    const uint64_t begin = guest.send(c, v);
    auto r = guest.wait(c);
    EXPECT_EQ(r.type, uint16_t(vmbus::PacketType::Completion));
    EXPECT_EQ(r.trans_id, begin) << "operation " << r.pkt.operation << " came first";
    ASSERT_TRUE(guest.handshake(c));
    EXPECT_FALSE(guest.poll(c)) << "no notice before the guest's first SRB";
    const uint64_t id = guest.send_srb(c, inquiry(1), kBuf, 96);
    int notices = 0, answers = 0;
    while (notices + answers < 2) {
        r = guest.wait(c);
        if (r.type == uint16_t(vmbus::PacketType::DataInband) &&
            r.pkt.operation == uint32_t(Operation::EnumerateBus))
            notices++;
        else if (r.trans_id == id)
            answers++;
        else
            ADD_FAILURE() << "unexpected packet, operation " << r.pkt.operation;
    }
    EXPECT_EQ(notices, 1);
    EXPECT_EQ(answers, 1);
    expect_report_luns(c); // and nothing else came in between
    ctl->detach(1);
    r = guest.wait(c);
    EXPECT_EQ(r.pkt.operation, uint32_t(Operation::EnumerateBus)) << "later notices go at once";
}

// Hot-plug on one thread while the guest's CREATE_SUB_CHANNELS grows the controller's list
// of queues on the primary's worker. attach and detach reach the primary without that list
// (they once read it unlocked while it was being reallocated: ThreadSanitizer).
TEST_F(StorvspTest, HotPlugWhileSubchannelsAreCreated) {
    auto c = open_primary();
    ASSERT_TRUE(guest.handshake(c));
    expect_report_luns(c);
    std::string e;
    auto r2 = backend::make_ram(1 << 20, e);
    scsi::Disk d2(*r2, {}, *ctl);
    std::atomic<bool> stop{false};
    std::thread plug([&] {
        while (!stop.load()) {
            std::string err;
            EXPECT_TRUE(ctl->attach(1, &d2, err)) << err;
            ctl->detach(1);
        }
    });
    for (int i = 0; i < 16; i++) {
        VstorPacket v{};
        v.operation = uint32_t(Operation::CreateSubChannels);
        v.sub_channel_count = 1;
        const uint64_t id = guest.send(c, v);
        FakeStorvsc::Completion r;
        do r = guest.wait(c); // rescan notices come in between
        while (r.trans_id != id);
        EXPECT_EQ(r.pkt.status, kStatusSuccess);
    }
    stop = true;
    plug.join();
    EXPECT_EQ(ctl->stats().subchannels_offered, 16u);
}

// An OPENCHANNEL whose rings the device cannot map is refused, and the log says why.
TEST_F(StorvspTest, OpenWithRingsOutsideRamIsRefusedAndLogged) {
    uint32_t status = 0;
    EXPECT_FALSE(guest.open(ctl->primary_relid(), FakeHost::kHoleStart, 0x100, &status));
    EXPECT_EQ(status, vmbus::kStatusInvalidParameter);
    EXPECT_TRUE(host.logged("OPENCHANNEL refused: ring pages are not guest RAM"));
    auto c = guest.open(ctl->primary_relid(), kRings, 0x101); // rings in RAM: served
    ASSERT_TRUE(c);
    EXPECT_TRUE(guest.handshake(*c));
}

TEST_F(StorvspTest, BadBuffersAreInvalidRequests) {
    auto c = open_primary();
    ASSERT_TRUE(guest.handshake(c));
    guest.send_srb(c, rw10(false, 0, 8), FakeHost::kHoleStart, 4096); // MMIO
    EXPECT_EQ(guest.wait(c).pkt.srb.srb_status, kSrbInvalidRequest);
    guest.send_srb(c, rw10(false, 0, 8), FakeHost::kRamSize + 4096, 4096); // outside RAM
    EXPECT_EQ(guest.wait(c).pkt.srb.srb_status, kSrbInvalidRequest);
    guest.send_srb(c, rw10(false, 0, 8), FakeHost::kHoleStart - 2048, 4096); // runs into MMIO
    EXPECT_EQ(guest.wait(c).pkt.srb.srb_status, kSrbInvalidRequest);
    // Larger than max_transfer_bytes.
    VmscsiRequest big = rw10(false, 0, 1024);
    guest.send_srb(c, big, kBuf, 512 * 1024);
    EXPECT_EQ(guest.wait(c).pkt.srb.srb_status, kSrbInvalidRequest);
    // A data command sent inband (no buffer).
    guest.send_srb(c, rw10(false, 0, 8), 0, 0);
    auto r = guest.wait(c);
    EXPECT_NE(r.pkt.srb.srb_status, kSrbSuccess);
    VmscsiRequest badcdb = srb(0x00, kDataNone);
    badcdb.cdb_length = 17;
    guest.send_srb(c, badcdb, 0, 0);
    EXPECT_EQ(guest.wait(c).pkt.srb.srb_status, kSrbInvalidRequest);
    VmscsiRequest baddir = srb(0x00, 7);
    guest.send_srb(c, baddir, 0, 0);
    EXPECT_EQ(guest.wait(c).pkt.srb.srb_status, kSrbInvalidRequest);
    EXPECT_EQ(host.maps.load(), host.unmaps.load() + 2 * (FakeStorvsc::kRingPages));
}

TEST_F(StorvspTest, TruncatedRangeListIsRejected) {
    auto c = open_primary();
    ASSERT_TRUE(guest.handshake(c));
    // A GPA-direct packet claiming 16 KiB but carrying one pfn.
    VstorPacket v{};
    v.operation = uint32_t(Operation::ExecuteSrb);
    v.srb = rw10(false, 0, 32);
    v.srb.data_transfer_length = 16384;
    std::vector<uint8_t> body(16 + 8 + 8 + 8 + sizeof v);
    uint32_t rc = 1, count = 16384, off = 0;
    uint64_t pfn = kBuf >> 12;
    std::memcpy(body.data() + 20, &rc, 4);
    std::memcpy(body.data() + 24, &count, 4);
    std::memcpy(body.data() + 28, &off, 4);
    std::memcpy(body.data() + 32, &pfn, 8);
    std::memcpy(body.data() + 40, &v, sizeof v);
    ASSERT_TRUE(guest.write_packet(c, uint16_t(vmbus::PacketType::DataUsingGpaDirect), 77, body, 40));
    auto r = guest.wait(c);
    EXPECT_EQ(r.trans_id, 77u);
    EXPECT_EQ(r.pkt.srb.srb_status, kSrbInvalidRequest);
}

TEST_F(StorvspTest, ReportLunsFromTheTable) {
    std::string e;
    auto r2 = backend::make_ram(1 << 20, e);
    scsi::Disk d2(*r2, {}, *ctl);
    std::string err;
    ASSERT_TRUE(ctl->attach(3, &d2, err));
    EXPECT_FALSE(ctl->attach(3, &d2, err)) << "lun in use";
    EXPECT_FALSE(ctl->attach(200, &d2, err));
    auto c = open_primary();
    ASSERT_TRUE(guest.handshake(c));
    VmscsiRequest s = srb(0xA0, kDataRead);
    s.cdb_length = 12;
    s.cdb_or_sense[9] = 64; // allocation length
    guest.send_srb(c, s, kBuf, 64);
    auto r = guest.wait(c);
    EXPECT_EQ(r.pkt.srb.srb_status, kSrbSuccess);
    EXPECT_EQ(*host.ram(kBuf + 3), 16) << "two entries";
    EXPECT_EQ(*host.ram(kBuf + 8 + 1), 0);
    EXPECT_EQ(*host.ram(kBuf + 16 + 1), 3);
    ctl->detach(3);
}

TEST_F(StorvspTest, SubchannelsOnRequestThenRescindedWithPrimary) {
    auto c = open_primary();
    ASSERT_TRUE(guest.handshake(c));
    auto r = ask_subchannels(c, 3);
    EXPECT_EQ(r.pkt.status, kStatusSuccess);
    std::set<uint16_t> indices;
    uint32_t sub_relid = 0;
    for (int i = 0; i < 3; i++) {
        auto o = guest.wait_message<vmbus::OfferChannel>(vmbus::MsgType::OfferChannel);
        EXPECT_EQ(vmbus::Guid{}.bytes.size(), 16u);
        EXPECT_EQ(std::memcmp(o.offer.if_type, vmbus::kScsiControllerType.bytes.data(), 16), 0);
        EXPECT_EQ(std::memcmp(o.offer.if_instance, vmbus::Guid::parse(kInstance)->bytes.data(), 16), 0);
        indices.insert(o.offer.sub_channel_index);
        sub_relid = o.child_relid;
    }
    EXPECT_EQ(indices, (std::set<uint16_t>{1, 2, 3}));
    EXPECT_EQ(ctl->stats().subchannels_offered, 3u);

    auto sc = guest.open(sub_relid, kSubRings, 0x200);
    ASSERT_TRUE(sc);
    // Subchannels carry I/O only, no handshake of their own.
    for (uint32_t i = 0; i < 4096; i++) *host.ram(kBuf + i) = uint8_t(i);
    guest.send_srb(*sc, rw10(true, 8, 8), kBuf, 4096);
    ASSERT_EQ(guest.wait(*sc).pkt.srb.srb_status, kSrbSuccess);
    guest.send_srb(c, rw10(false, 8, 8), kBuf + 0x10000, 4096);
    ASSERT_EQ(guest.wait(c).pkt.srb.srb_status, kSrbSuccess);
    EXPECT_EQ(std::memcmp(host.ram(kBuf), host.ram(kBuf + 0x10000), 4096), 0);
    VstorPacket v{};
    v.operation = uint32_t(Operation::BeginInitialization);
    guest.send(*sc, v);
    EXPECT_EQ(guest.wait(*sc).pkt.status, kStatusInvalidDeviceState) << "init only on the primary";
    EXPECT_EQ(ctl->open_channels(), 2u);

    guest.others.clear();
    guest.close(*sc);
    guest.close(c);
    // The server answers the teardown of the primary's ring GPADL once the primary's close
    // has finished, and that close withdraws every subchannel first: each rescind comes
    // before the answer.
    tear_down_gpadl(0x100);
    guest.wait_message<vmbus::GpadlTorndown>(vmbus::MsgType::GpadlTorndown);
    EXPECT_EQ(guest.skipped(vmbus::MsgType::RescindChannelOffer), 3u);
    EXPECT_EQ(ctl->open_channels(), 0u);
}

TEST_F(StorvspTest, TooManySubchannelsRefused) {
    auto c = open_primary();
    ASSERT_TRUE(guest.handshake(c));
    auto r = ask_subchannels(c, 17);
    EXPECT_EQ(r.pkt.status, kStatusInvalidParameter);
}

TEST_F(StorvspTest, RingWrapsManyTimes) {
    auto c = open_primary();
    ASSERT_TRUE(guest.handshake(c));
    std::set<uint64_t> want;
    for (int i = 0; i < 5000; i++) {
        want.insert(guest.send_srb(c, inquiry(0, 36), kBuf + (i % 16) * 4096, 36));
        auto r = guest.wait(c);
        ASSERT_EQ(r.pkt.srb.srb_status, kSrbSuccess);
        ASSERT_TRUE(want.erase(r.trans_id));
    }
    EXPECT_TRUE(want.empty());
}

TEST_F(StorvspTest, OutstandingLimitAppliesBackPressureNeverDrops) {
    gate_lun0();
    auto c = open_primary();
    ASSERT_TRUE(guest.handshake(c));
    std::set<uint64_t> want;
    for (int i = 0; i < 300; i++) want.insert(guest.send_srb(c, rw10(false, 0, 8), kBuf, 4096));
    // 256 taken, the rest left in the ring: the worker counts busy when it finds a request
    // in the ring and no slot for it, and takes nothing more until a request completes.
    while (ctl->stats().channels[0].busy == 0) std::this_thread::yield();
    EXPECT_EQ(ctl->stats().srbs, 256u);
    while (gated.held_count() < 256) std::this_thread::yield();
    EXPECT_EQ(gated.held_count(), 256u);
    EXPECT_FALSE(guest.poll(c));
    while (!want.empty()) {
        gated.release_all();
        auto r = guest.wait(c);
        EXPECT_EQ(r.pkt.srb.srb_status, kSrbSuccess);
        ASSERT_TRUE(want.erase(r.trans_id)) << "completed twice or never sent";
    }
    // No extra completions: every request finished before this one was sent, and a round
    // sends what finished before it takes new requests from the ring.
    expect_report_luns(c);
    guest.close(c);
}

TEST_F(StorvspTest, FullCompletionRingWaitsForTheGuest) {
    auto c = open_primary();
    ASSERT_TRUE(guest.handshake(c));
    // Fill the guest->host ring twice over without reading completions: the host must
    // stop when the completions it owes would not fit, ask for room, and go on when the
    // guest reads.
    std::set<uint64_t> want;
    int sent = 0;
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < 1400; i++) {
            bool ok = false;
            uint64_t id = guest.send_srb(c, srb(0x00, kDataNone), 0, 0, &ok);
            if (!ok) break;
            want.insert(id);
            sent++;
        }
        // Until the host has read all it will: the ring is empty, or it stopped because
        // the completions it owes would not fit and asked for room.
        while (c.out.load(4) != c.out.load(0) && c.in.load(12) == 0) std::this_thread::yield();
    }
    ASSERT_GT(sent, 1600) << "the host must have drained the ring while completions fit";
    int drained = 0, refills = 0;
    while (!want.empty()) {
        auto r = guest.wait(c);
        ASSERT_TRUE(want.erase(r.trans_id));
        if (++drained % 400 == 0 && refills < 5) {
            // Keep the guest sending a little while it drains.
            refills++;
            bool ok = false;
            uint64_t id = guest.send_srb(c, srb(0x00, kDataNone), 0, 0, &ok);
            if (ok) want.insert(id);
        }
    }
    // No extra completions: every request finished before this one was sent, and a round
    // sends what finished before it takes new requests from the ring.
    expect_report_luns(c);
}

TEST_F(StorvspTest, HotAddTellsTheGuestToRescan) {
    auto c = open_primary();
    ASSERT_TRUE(guest.handshake(c));
    expect_report_luns(c); // the guest's scan: from now on it takes notices
    std::string e;
    auto r2 = backend::make_ram(1 << 20, e);
    scsi::Disk d2(*r2, {}, *ctl);
    ASSERT_TRUE(ctl->attach(1, &d2, e));
    auto r = guest.wait(c);
    EXPECT_EQ(r.type, uint16_t(vmbus::PacketType::DataInband));
    EXPECT_EQ(r.pkt.operation, uint32_t(Operation::EnumerateBus));
    ctl->detach(1);
    r = guest.wait(c);
    EXPECT_EQ(r.pkt.operation, uint32_t(Operation::EnumerateBus)) << "and on removal";
    guest.send_srb(c, inquiry(1), kBuf, 96);
    r = guest.wait(c);
    EXPECT_EQ(*host.ram(kBuf), 0x7F) << "gone after detach";
}

// A rescan notice (after a hot add) must not take the room of a completion the host owes:
// with the ring's room all reserved for completions, the notice waits until the guest has
// read some, and every request is still answered exactly once.
TEST_F(StorvspTest, RescanNoticeNeverTakesTheRoomOfAnOwedCompletion) {
    build({16, 256 * 1024, 4096, kVersionWin10}); // the ring, not the limit, bounds what is taken
    gate_lun0();
    auto c = open_primary();
    ASSERT_TRUE(guest.handshake(c));
    // As many completions as fit in the host-to-guest ring (one byte stays free).
    const uint32_t fit = (c.in.data_size() - 1) / vmbus::OutgoingRing::packet_bytes(sizeof(VstorPacket));
    std::set<uint64_t> want;
    for (uint32_t i = 0; i < fit + 10; i++) {
        bool ok = false;
        while (!ok) {
            const uint64_t id = guest.send_srb(c, rw10(false, 0, 8), kBuf, 4096, &ok);
            if (ok) want.insert(id);
            else std::this_thread::yield(); // the host is still reading
        }
    }
    // The host takes requests while their completions fit, then asks for room
    // (pending_send_sz) and takes no more until the guest has read some.
    while (c.in.load(12) == 0) std::this_thread::yield();
    EXPECT_EQ(ctl->stats().srbs, fit) << "the host takes exactly as many as it can answer";
    while (gated.held_count() < fit) std::this_thread::yield();
    ASSERT_EQ(gated.held_count(), fit);

    std::string err;
    auto r2 = backend::make_ram(1 << 20, err);
    scsi::Disk d2(*r2, {}, *ctl);
    ASSERT_TRUE(ctl->attach(1, &d2, err));
    const uint32_t packet = vmbus::OutgoingRing::packet_bytes(sizeof(VstorPacket));
    auto unread = [&] { return (c.in.load(0) + c.in.data_size() - c.in.load(4)) % c.in.data_size(); };
    // A host that sends the notice now gives away the room of one completion. The round
    // that sends the next completion looks at the notice after it: it sends what finished,
    // then the notice if there is room for it beside every completion still owed, and makes
    // both visible to the guest at its end. A notice sent earlier is already in the ring.
    gated.release_one();
    while (unread() == 0) std::this_thread::yield();
    EXPECT_EQ(unread(), packet) << "the notice took the room of an owed completion";
    vmbus::PacketDescriptor first{};
    c.in.copy_out(c.in.load(4), &first, sizeof first);
    EXPECT_EQ(first.type, uint16_t(vmbus::PacketType::Completion)) << "the notice came before a completion owed";
    gated.release_all();
    // Let the host write all it will before the guest reads anything: a full ring.
    while (unread() < fit * packet) std::this_thread::yield();
    // Requests the host takes later are held by the gate too: keep releasing while waiting.
    auto next = [&] {
        for (;;) {
            gated.release_all();
            if (auto r = guest.poll(c)) return *r;
            std::this_thread::yield();
        }
    };
    int rescans = 0;
    while (!want.empty()) {
        auto r = next();
        if (r.pkt.operation == uint32_t(Operation::EnumerateBus)) {
            rescans++;
            continue;
        }
        ASSERT_TRUE(want.erase(r.trans_id)) << "completed twice or never sent";
    }
    if (!rescans) {
        EXPECT_EQ(next().pkt.operation, uint32_t(Operation::EnumerateBus));
        rescans++;
    }
    EXPECT_EQ(rescans, 1);
    ctl->detach(1);
    ctl.reset(); // before d2
}

// A guest that moves its read index back takes away room the host had reserved: the
// completions that no longer fit are held, not dropped, and sent once room is back.
TEST_F(StorvspTest, CompletionsThatNoLongerFitAreHeldNotDropped) {
    gate_lun0();
    auto c = open_primary();
    ASSERT_TRUE(guest.handshake(c));
    std::set<uint64_t> want;
    for (int i = 0; i < 8; i++) want.insert(guest.send_srb(c, rw10(false, 0, 8), kBuf, 4096));
    while (gated.held_count() < 8) std::this_thread::yield();
    // The ring looks all but full to the host: 16 bytes free.
    const uint32_t w = c.in.load(0);
    c.in.store(4, (w + 16) % c.in.data_size());
    ASSERT_EQ(c.in.load(12), 0u) << "no pending_send_sz while the ring had room";
    gated.release_all();
    // The worker has seen the completions once it asks for room.
    while (c.in.load(12) == 0) std::this_thread::yield();
    EXPECT_EQ(c.in.load(0), w) << "nothing written over unread packets";
    // The guest reads "everything" and says so.
    c.in.store(4, w);
    guest.signal(c);
    while (!want.empty()) {
        auto r = guest.wait(c);
        ASSERT_TRUE(want.erase(r.trans_id)) << "completed twice or never sent";
    }
}

// Disks come and go (hot plug) while the guest keeps sending them I/O: once detach()
// returns, the disk may be freed; a worker still using it would be caught by ASan.
TEST_F(StorvspTest, DetachedDiskIsNeverUsedAfterDetachReturns) {
    auto c = open_primary();
    ASSERT_TRUE(guest.handshake(c));
    std::string err;
    auto r2 = backend::make_ram(1 << 20, err);
    ASSERT_TRUE(r2) << err;
    std::atomic<bool> done{false};
    int answered = 0;
    std::thread io([&] {
        // Batches of 32 keep the workers busy inside batches while disks change.
        for (int i = 0; i < 3000; i += 32) {
            for (int k = 0; k < 32; k++) {
                VmscsiRequest s = rw10(false, 0, 8);
                s.lun = 1;
                guest.send_srb(c, s, kBuf + 4096 * k, 4096);
            }
            // Rescan notices come in between; every request still gets its completion.
            for (int k = 0; k < 32;) {
                auto r = guest.wait(c);
                if (r.pkt.operation == uint32_t(Operation::EnumerateBus)) continue;
                answered++;
                k++;
            }
        }
        done = true;
    });
    int cycles = 0;
    while (!done) {
        auto d = std::make_unique<scsi::Disk>(*r2, scsi::DiskConfig{}, *ctl);
        ASSERT_TRUE(ctl->attach(1, d.get(), err)) << err;
        std::this_thread::yield();
        ctl->detach(1);
        r2->drain();
        d.reset();
        cycles++;
        if (cycles > 100000) break;
    }
    io.join();
    EXPECT_EQ(answered, 3008);
}

// CLOSECHANNEL while the disk still holds requests: the vCPU that sent it is not held
// (under QEMU it holds the BQL, so the whole VM and QMP would stall behind slow I/O); the
// ring GPADL's GPADL_TORNDOWN waits until the worker stopped, so the guest cannot reuse the
// ring pages under it; the held requests, completed after the close, write nothing.
TEST_F(StorvspTest, CloseWithIoInFlightNeverBlocksTheVcpu) {
    gate_lun0();
    auto c = open_primary();
    ASSERT_TRUE(guest.handshake(c));
    for (int i = 0; i < 4; i++) guest.send_srb(c, rw10(false, 0, 8), kBuf, 4096);
    while (gated.held_count() < 4) std::this_thread::yield();
    guest.close(c); // with the requests still held: returns (it used to wait for them)
    vmbus::GpadlTeardown t{};
    t.hdr.msgtype = uint32_t(vmbus::MsgType::GpadlTeardown);
    t.gpadl = 0x100;
    g.post(0, 1, t);
    EXPECT_FALSE(g.take(0)) << "GPADL_TORNDOWN while the device may still write the rings";
    const auto ring_write_index = host.load<uint32_t>(kRings + FakeStorvsc::kRingPages * kPageSize);
    gated.release_all();
    auto torn = guest.wait_message<vmbus::GpadlTorndown>(vmbus::MsgType::GpadlTorndown);
    EXPECT_EQ(torn.gpadl, 0x100u);
    EXPECT_EQ(host.load<uint32_t>(kRings + FakeStorvsc::kRingPages * kPageSize), ring_write_index)
        << "completions written into a closed channel's ring";
}

// A machine reset waits for the channels' closes and meanwhile lets the host run its own
// work (in QEMU the main loop, which a drive= request parked by a drained section needs).
// Here that work releases the held requests: the reset returns only because it polled.
TEST_F(StorvspTest, ResetPollsTheHostWhileItWaitsForCloses) {
    gate_lun0();
    auto c = open_primary();
    ASSERT_TRUE(guest.handshake(c));
    for (int i = 0; i < 4; i++) guest.send_srb(c, rw10(false, 0, 8), kBuf, 4096);
    while (gated.held_count() < 4) std::this_thread::yield();
    int polls = 0;
    host.on_poll = [&] {
        if (polls++ == 0) gated.release_all();
    };
    server.reset();
    host.on_poll = nullptr;
    EXPECT_GE(polls, 1);
    EXPECT_EQ(gated.held_count(), 0u);
}

// A guest that keeps closing subchannels while a stalled disk holds their requests and asks
// for new ones: each new subchannel needs a fresh queue (a closing one is never reused), and
// every queue keeps its request pool for the controller's life. At max_queues() (3 for one
// subchannel) no more are made: the guest gets fewer subchannels and a log line says why,
// and once the old requests drain their queues serve new subchannels again.
TEST_F(StorvspTest, ClosingSubchannelsPileUpNoFurtherThanMaxQueues) {
    build({1, 256 * 1024, 256, kVersionWin10});
    ASSERT_EQ(max_queues(ControllerConfig{1, 256 * 1024, 256, kVersionWin10}), 3u);
    gate_lun0();
    struct Cycle {
        uint64_t rings, sub_rings;
        uint32_t gpadl, sub_gpadl;
    };
    const Cycle cycles[] = {{kRings, kSubRings, 0x100, 0x200}, {0x700000, 0x780000, 0x101, 0x201}};
    std::vector<uint32_t> held_subs;
    for (const Cycle& cy : cycles) {
        auto c = guest.open(ctl->primary_relid(), cy.rings, cy.gpadl);
        ASSERT_TRUE(c);
        ASSERT_TRUE(guest.handshake(*c));
        auto sc = open_subchannel(*c, cy.sub_rings, cy.sub_gpadl);
        ASSERT_TRUE(sc);
        const size_t before = gated.held_count();
        guest.send_srb(*sc, rw10(false, 0, 8), kBuf, 4096);
        while (gated.held_count() == before) std::this_thread::yield();
        guest.close(*sc); // its queue drains the held request
        guest.close(*c);  // withdraws the subchannel
        guest.wait_message<vmbus::RescindOffer>(vmbus::MsgType::RescindChannelOffer);
        release_relid(sc->relid);
        tear_down_gpadl(cy.gpadl);
        guest.wait_message<vmbus::GpadlTorndown>(vmbus::MsgType::GpadlTorndown);
        held_subs.push_back(cy.sub_gpadl);
    }
    EXPECT_EQ(ctl->stats().subchannels_offered, 2u);
    // Two queues still closing, one primary: the third subchannel would need a fourth queue.
    auto c = guest.open(ctl->primary_relid(), 0x300000, 0x102);
    ASSERT_TRUE(c);
    ASSERT_TRUE(guest.handshake(*c));
    auto answer = ask_subchannels(*c, 1);
    ASSERT_EQ(answer.pkt.status, kStatusSuccess);
    const std::string why = "CREATE_SUB_CHANNELS sub_channel_count 1: 0 offered";
    while (!host.logged(why)) std::this_thread::yield();
    EXPECT_EQ(ctl->stats().subchannels_offered, 2u);
    EXPECT_EQ(ctl->stats().channels.size(), 3u) << "queues beyond max_queues()";
    // The old requests complete; their subchannels' closes finish with the GPADL teardowns.
    gated.release_all();
    for (uint32_t gpadl : held_subs) {
        tear_down_gpadl(gpadl);
        guest.wait_message<vmbus::GpadlTorndown>(vmbus::MsgType::GpadlTorndown);
    }
    auto sc = open_subchannel(*c, 0x380000, 0x202);
    ASSERT_TRUE(sc) << "a drained queue serves the new subchannel";
    ASSERT_NO_FATAL_FAILURE(expect_report_luns(*sc));
    EXPECT_EQ(ctl->stats().channels.size(), 3u);
}

// A subchannel closed with requests still held, then withdrawn with its primary, and asked
// for again after the guest reconnected the primary: the new offer must not reuse the queue
// whose worker still drains the old requests (two workers on one request pool, the old
// completions written into the new ring). The new subchannel opens, works and closes while
// the old requests are still held; the old ones, released later, appear nowhere.
TEST_F(StorvspTest, SubchannelAskedForAgainNeverReusesAQueueStillClosing) {
    gate_lun0();
    std::optional<Reopened> r;
    ASSERT_NO_FATAL_FAILURE(reopen_while_a_subchannel_drains(4, r));
    // Its own I/O works while the old requests are still held.
    ASSERT_NO_FATAL_FAILURE(expect_report_luns(r->sub));
    guest.close(r->sub); // on this thread: returns although the old queue still drains
    gated.release_all();
    // The old subchannel's close is done once its ring GPADL is torn down.
    tear_down_gpadl(0x200);
    guest.wait_message<vmbus::GpadlTorndown>(vmbus::MsgType::GpadlTorndown);
    EXPECT_FALSE(guest.poll(r->sub)) << "the old requests' completions reached the new ring";
    EXPECT_FALSE(guest.poll(r->old_sub)) << "completions written into a closed ring";
}

// Once the channel is ready, a guest signal that finds the worker asleep runs the round on
// the signalling thread (a vCPU's, in QEMU): a command the disk finishes at once is answered,
// with its interrupt, before the signalling hypercall returns.
TEST_F(StorvspTest, InlineRoundAnswersBeforeTheSignalReturns) {
    auto c = open_primary();
    ASSERT_TRUE(guest.handshake(c));
    EXPECT_EQ(ctl->stats().channels[0].inline_rounds, 0u) << "the handshake is the worker's";
    int answered_inline = 0;
    for (int i = 0; i < 10000 && answered_inline < 50; i++) {
        const auto before = ctl->stats().channels[0];
        const uint64_t id = guest.send_srb(c, rw10(false, uint32_t(i), 8), kBuf, 4096);
        const auto after = ctl->stats().channels[0];
        // The worker may still be finishing its previous round; then it takes this one.
        const bool ran_here = after.inline_rounds == before.inline_rounds + 1;
        auto r = ran_here ? guest.poll(c) : guest.wait(c);
        ASSERT_TRUE(r) << (ran_here ? "the inline round left its completion unsent" : "no answer");
        EXPECT_EQ(r->trans_id, id);
        EXPECT_EQ(r->pkt.srb.srb_status, kSrbSuccess);
        if (ran_here) {
            EXPECT_GE(after.interrupts, before.interrupts + 1) << "answered without an interrupt";
            answered_inline++;
        }
    }
    EXPECT_EQ(answered_inline, 50) << "a signal to an idle, ready channel never ran the round itself";
}

namespace {

// Threads of this process whose names start with `prefix`.
int threads_named(const std::string& prefix) {
    int n = 0;
    for (const auto& e : std::filesystem::directory_iterator("/proc/self/task")) {
        std::ifstream f(e.path() / "comm");
        std::string name;
        if (std::getline(f, name) && name.starts_with(prefix)) n++;
    }
    return n;
}

} // namespace

// iothread=: with event loops the channels' workers are turns in them, not threads of their
// own; channel i turns in loop i % n, and each channel's watch ends with the channel.
TEST_F(StorvspTest, ChannelsTurnInTheirEventLoops) {
    ControllerConfig cfg;
    build_in_two_loops(cfg);
    auto c = open_primary();
    ASSERT_TRUE(guest.handshake(c));
    auto sc = open_subchannel(c, kSubRings, 0x200);
    ASSERT_TRUE(sc);
    EXPECT_EQ(l0->watching(), 1u);
    EXPECT_EQ(l1->watching(), 1u);
    const uint64_t primary_turns = l0->calls_when_idle(), sub_turns = l1->calls_when_idle();
    const uint64_t sub_rounds = ctl->stats().channels[1].wakeups;
    for (uint32_t i = 0; i < 20; i++) {
        guest.send_srb(*sc, rw10(true, i, 8), kBuf, 4096);
        auto r = guest.wait(*sc);
        ASSERT_EQ(r.pkt.srb.srb_status, kSrbSuccess);
    }
    // Each SRB waited for the one before, so each was taken in a round of its own, every
    // round the worker's, in turns of the second loop (a turn may run several rounds).
    const auto sub_stats = ctl->stats().channels[1];
    EXPECT_GE(sub_stats.wakeups - sub_rounds, 20u);
    EXPECT_EQ(sub_stats.inline_rounds, 0u);
    EXPECT_GT(l1->calls(), sub_turns) << "the subchannel turns in the second loop";
    EXPECT_EQ(threads_named("hvstor-ch"), 0);
    expect_report_luns(c);
    EXPECT_GT(l0->calls(), primary_turns) << "the primary turns in the first";

    ctl.reset();
    EXPECT_EQ(l0->watching(), 0u);
    EXPECT_EQ(l1->watching(), 0u);
    EXPECT_EQ(l0->bad_unwatches() + l1->bad_unwatches(), 0u);
}

// A subchannel asked for while the one before it still closes gets a fresh queue past
// max_subchannels (index 2 here, with one subchannel); it turns in the loop of the place it
// takes (1), not in loop 2 mod 2 = 0, the primary's.
TEST_F(StorvspTest, QueueStandingInForAClosingOneTurnsInThatPlacesLoop) {
    ControllerConfig cfg;
    cfg.max_subchannels = 1;
    build_in_two_loops(cfg);
    EXPECT_EQ(queue_place(cfg, 0), 0u);
    EXPECT_EQ(queue_place(cfg, 1), 1u);
    EXPECT_EQ(queue_place(cfg, 2), 1u);
    gate_lun0();
    std::optional<Reopened> r;
    ASSERT_NO_FATAL_FAILURE(reopen_while_a_subchannel_drains(2, r));
    ASSERT_EQ(ctl->stats().channels.size(), 3u) << "the new subchannel has a queue of its own";
    const uint64_t l0_before = l0->calls_when_idle(), l1_before = l1->calls_when_idle();
    ASSERT_NO_FATAL_FAILURE(expect_report_luns(r->sub));
    EXPECT_GT(l1->calls(), l1_before) << "the new subchannel turns in its place's loop";
    EXPECT_EQ(l0->calls(), l0_before) << "the primary's loop ran the new subchannel";
    guest.close(r->sub);
    gated.release_all();
    tear_down_gpadl(0x200);
    guest.wait_message<vmbus::GpadlTorndown>(vmbus::MsgType::GpadlTorndown);
    ctl.reset();
    EXPECT_EQ(l0->watching() + l1->watching(), 0u);
    EXPECT_EQ(l0->bad_unwatches() + l1->bad_unwatches(), 0u);
}

TEST_F(StorvspTest, InlineRoundsOffLeavesEveryRoundToTheWorker) {
    ControllerConfig cfg;
    cfg.inline_rounds = false;
    build(cfg);
    auto c = open_primary();
    ASSERT_TRUE(guest.handshake(c));
    for (int i = 0; i < 50; i++) {
        const uint64_t id = guest.send_srb(c, rw10(false, uint32_t(i), 8), kBuf, 4096);
        auto r = guest.wait(c);
        EXPECT_EQ(r.trans_id, id);
    }
    const auto s = ctl->stats().channels[0];
    EXPECT_EQ(s.inline_rounds, 0u);
    EXPECT_GE(s.wakeups, 50u);
}

namespace {

// Completes every other request at once, the rest from a thread of its own: completions
// that wake the worker while the guest's signals run rounds inline.
class SplitBackend : public backend::Backend {
public:
    SplitBackend() : thread_([this] { run(); }) {}
    ~SplitBackend() override {
        {
            std::lock_guard lock(mu_);
            stop_ = true;
        }
        cv_.notify_all();
        thread_.join();
    }
    uint64_t size() const override { return 1 << 20; }
    uint32_t block_size() const override { return 512; }
    bool read_only() const override { return false; }
    std::string describe() const override { return "split"; }
    bool submit_may_block() const override { return false; }
    void submit(std::span<backend::Request* const> reqs) override {
        for (auto* r : reqs) {
            r->result = 0;
            if (n_++ % 2) {
                r->done->complete(r);
                continue;
            }
            {
                std::lock_guard lock(mu_);
                q_.push_back(r);
            }
            cv_.notify_one();
        }
    }
    void drain() override {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return q_.empty() && !busy_; });
    }

private:
    void run() {
        std::unique_lock lock(mu_);
        for (;;) {
            cv_.wait(lock, [&] { return stop_ || !q_.empty(); });
            if (q_.empty()) return;
            std::vector<backend::Request*> todo;
            todo.swap(q_);
            busy_ = true;
            lock.unlock();
            for (auto* r : todo) r->done->complete(r);
            lock.lock();
            busy_ = false;
            cv_.notify_all();
        }
    }
    std::atomic<uint64_t> n_{0};
    std::mutex mu_;
    std::condition_variable cv_;
    std::vector<backend::Request*> q_;
    bool busy_ = false, stop_ = false;
    std::thread thread_;
};

} // namespace

// Rounds on the guest's thread, on the backend's completion thread and on the worker take
// the channel in turns: every request is answered exactly once, and a close with requests
// in flight still waits for them. (Run under TSan by ./hvstor test.)
TEST_F(StorvspTest, InlineAndWorkerRoundsTakeTheChannelInTurns) {
    SplitBackend split;
    scsi::Disk split_disk(split, scsi::DiskConfig{}, *ctl);
    ctl->detach(0);
    std::string err;
    ASSERT_TRUE(ctl->attach(0, &split_disk, err)) << err;
    auto c = open_primary();
    ASSERT_TRUE(guest.handshake(c));
    std::set<uint64_t> pending;
    uint64_t answered = 0;
    for (int i = 0; i < 3000; i++) {
        pending.insert(guest.send_srb(c, rw10(i % 3 == 0, uint32_t(i % 512), 8), kBuf + uint64_t(i % 8) * 4096, 4096));
        while (auto r = guest.poll(c)) {
            ASSERT_EQ(pending.erase(r->trans_id), 1u) << "answered twice or never sent";
            EXPECT_EQ(r->pkt.srb.srb_status, kSrbSuccess);
            answered++;
        }
        while (pending.size() >= 16) {
            auto r = guest.wait(c);
            ASSERT_EQ(pending.erase(r.trans_id), 1u) << "answered twice or never sent";
            answered++;
        }
    }
    while (!pending.empty()) {
        auto r = guest.wait(c);
        ASSERT_EQ(pending.erase(r.trans_id), 1u) << "answered twice or never sent";
        answered++;
    }
    EXPECT_EQ(answered, 3000u);
    EXPECT_FALSE(guest.poll(c)) << "an extra completion";
    const auto s = ctl->stats().channels[0];
    EXPECT_GT(s.inline_rounds, 0u);
    EXPECT_EQ(s.completions, s.srbs);
    // Requests in flight at the close: the close waits for them, none is lost.
    for (int i = 0; i < 8; i++) guest.send_srb(c, rw10(false, uint32_t(i), 8), kBuf, 4096);
    guest.close(c);
    tear_down_gpadl(0x100);
    guest.wait_message<vmbus::GpadlTorndown>(vmbus::MsgType::GpadlTorndown);
    ctl->detach(0);
}

// A completion from a backend's thread that finds the worker asleep goes out on that
// thread: it runs the round, writes the completion and raises the interrupt before the
// backend's complete() returns.
TEST_F(StorvspTest, CompletionRunsTheRoundOnTheCompletingThread) {
    gate_lun0();
    auto c = open_primary();
    ASSERT_TRUE(guest.handshake(c));
    int sent_by_completer = 0;
    for (int i = 0; i < 10000 && sent_by_completer < 20; i++) {
        const uint64_t id = guest.send_srb(c, rw10(false, 0, 8), kBuf, 4096);
        while (gated.held_count() < 1) std::this_thread::yield();
        const auto before = ctl->stats().channels[0];
        gated.release_all();
        const auto after = ctl->stats().channels[0];
        // The worker may still be in the round that took the request; then it sends it.
        const bool ran_here = after.inline_rounds == before.inline_rounds + 1;
        auto r = ran_here ? guest.poll(c) : guest.wait(c);
        ASSERT_TRUE(r) << (ran_here ? "the completing thread's round left the completion unsent" : "no answer");
        EXPECT_EQ(r->trans_id, id);
        if (ran_here) {
            EXPECT_GE(after.interrupts, before.interrupts + 1) << "answered without an interrupt";
            sent_by_completer++;
        }
    }
    EXPECT_EQ(sent_by_completer, 20) << "a completion to an idle, ready channel never ran the round itself";
}

// Subchannels have no handshake of their own: once the primary's is done, theirs run inline
// too (storvsc sends most I/O on a CPU's own subchannel).
TEST_F(StorvspTest, SubchannelsRunInlineOnceThePrimaryIsReady) {
    auto c = open_primary();
    ASSERT_TRUE(guest.handshake(c));
    auto sc = open_subchannel(c, kSubRings, 0x200);
    ASSERT_TRUE(sc);
    for (int i = 0; i < 10000 && ctl->stats().channels[1].inline_rounds < 20; i++) {
        const uint64_t id = guest.send_srb(*sc, rw10(false, uint32_t(i), 8), kBuf, 4096);
        auto r = guest.wait(*sc);
        EXPECT_EQ(r.trans_id, id);
    }
    EXPECT_GE(ctl->stats().channels[1].inline_rounds, 20u) << "the subchannel never ran a round inline";
}

// A disk whose submits may wait (a file: buffered io_submit does the I/O) keeps every round
// on the workers while it is attached: a vCPU thread holding the BQL never waits for a disk.
TEST_F(StorvspTest, DiskThatMayBlockKeepsRoundsOnTheWorkers) {
    auto c = open_primary();
    ASSERT_TRUE(guest.handshake(c));
    gated.may_block = true;
    scsi::Disk slow(gated, scsi::DiskConfig{}, *ctl);
    std::string err;
    ASSERT_TRUE(ctl->attach(1, &slow, err)) << err;
    const uint64_t before = ctl->stats().channels[0].inline_rounds;
    for (int i = 0; i < 50; i++) {
        guest.send_srb(c, rw10(false, uint32_t(i), 8), kBuf, 4096); // LUN 0: RAM
        guest.wait(c);
    }
    EXPECT_EQ(ctl->stats().channels[0].inline_rounds, before) << "a round ran inline beside a disk that may block";
    ctl->detach(1);
    for (int i = 0; i < 10000 && ctl->stats().channels[0].inline_rounds == before; i++) {
        guest.send_srb(c, rw10(false, uint32_t(i), 8), kBuf, 4096);
        guest.wait(c);
    }
    EXPECT_GT(ctl->stats().channels[0].inline_rounds, before) << "rounds stayed on the worker after the detach";
}

// A control operation is left in the ring for the worker: an inline round only takes SRBs.
TEST_F(StorvspTest, InlineRoundsLeaveControlPacketsToTheWorker) {
    auto c = open_primary();
    ASSERT_TRUE(guest.handshake(c));
    for (int i = 0; i < 10000 && ctl->stats().channels[0].inline_rounds == 0; i++) {
        guest.send_srb(c, rw10(false, uint32_t(i), 8), kBuf, 4096);
        guest.wait(c);
    }
    ASSERT_GT(ctl->stats().channels[0].inline_rounds, 0u);
    // The worker now sleeps: were the signal's round to take CREATE_SUB_CHANNELS, the worker
    // would not wake for it.
    const uint64_t wakeups = ctl->stats().channels[0].wakeups;
    auto r = ask_subchannels(c, 1);
    EXPECT_EQ(r.pkt.status, kStatusSuccess);
    EXPECT_GT(ctl->stats().channels[0].wakeups, wakeups) << "the control packet was not the worker's";
}

// A round that fails halfway (only an allocation can) ends the process, on whichever thread
// it ran, rather than leave the channel owned by nobody and every later request unanswered.
TEST_F(StorvspTest, RoundThatThrowsEndsTheProcessInsteadOfWedgingTheChannel) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH(
        {
            gate_lun0();
            auto ch = open_primary();
            if (!guest.handshake(ch)) std::_Exit(0); // not the death asked for: fails
            gated.throw_next = true;
            try {
                guest.send_srb(ch, rw10(false, 0, 8), kBuf, 4096);
            } catch (...) {
                std::_Exit(0); // the throw reached the signalling thread: fails
            }
            // The round that took it, here or on the worker, must have ended the process: no
            // answer ever comes. A wedged channel hangs here instead (the run's timeout).
            while (!guest.poll(ch)) std::this_thread::yield();
            std::_Exit(0); // answered: fails
        },
        "");
}

// ---- Host events on demand: a fault's transport answer, notices, resets ----------------

namespace {

struct Expected {
    const char* fault;
    uint8_t srb_status, scsi_status, sense_len;
    uint32_t data, op_status;
    uint8_t key = 0, asc = 0, ascq = 0;
};

} // namespace

// Each srb= and opstatus= form of a fault reaches the guest with exactly its fields: the SRB
// and SCSI status, the sense with its length, the bytes reported, the packet's status. A
// reported byte count above 0 is real: the read brought the disk's data.
TEST_F(StorvspTest, FaultAnswersReachTheGuestWithExactlyTheirFields) {
    const Expected cases[] = {
        {"srb=error,scsi=check-condition,sense=3/11/00", 0x84, 0x02, 18, 0, 0, 0x3, 0x11, 0x00},
        {"srb=aborted,scsi=check-condition,sense=6/2a/09", 0x82, 0x02, 18, 0, 0, 0x6, 0x2a, 0x09},
        {"srb=error,sense=3/11/00,autosense=off", 0x04, 0x02, 18, 0, 0, 0x3, 0x11, 0x00},
        {"srb=timeout", 0x09, 0x00, 0, 0, 0},
        {"srb=selection-timeout", 0x0a, 0x00, 0, 0, 0},
        {"srb=bus-reset", 0x0e, 0x00, 0, 0, 0},
        {"srb=internal-error", 0x30, 0x00, 0, 0, 0},
        {"srb=busy,scsi=busy", 0x05, 0x08, 0, 0, 0},
        {"srb=invalid-request", 0x06, 0x00, 0, 0, 0},
        {"srb=data-overrun,data=2048", 0x12, 0x00, 0, 2048, 0},
        {"srb=success,data=2048,ops=read", 0x01, 0x00, 0, 2048, 0},
        {"srb=invalid-lun", 0x20, 0x00, 0, 0, 0},
        {"srb=success,scsi=check-condition", 0x01, 0x02, 0, 4096, 0},
        {"srb=success,scsi=task-set-full", 0x01, 0x28, 0, 4096, 0},
        {"srb=0x81", 0x81, 0x00, 0, 4096, 0},
        {"srb=0x92,data=1024", 0x92, 0x00, 0, 1024, 0},
        {"srb=error,opstatus=0xc0000001", 0x04, 0x00, 0, 0, 0xc0000001},
        {"opstatus=0xc0000185", 0x01, 0x00, 0, 4096, 0xc0000185},
    };
    auto c = open_primary();
    ASSERT_TRUE(guest.handshake(c));
    for (uint32_t i = 0; i < 4096; i++) *host.ram(kBuf + i) = uint8_t(i * 7 + 3);
    guest.send_srb(c, rw10(true, 64, 8), kBuf, 4096);
    ASSERT_EQ(guest.wait(c).pkt.srb.srb_status, kSrbSuccess);
    uint64_t errors = ctl->stats().srb_errors;
    for (const Expected& e : cases) {
        scsi::FaultSpec f;
        std::string err;
        ASSERT_TRUE(scsi::parse_fault(e.fault, f, err)) << err;
        disk->set_fault(f);
        std::memset(host.ram(kBuf + 0x10000), 0, 4096);
        const uint64_t id = guest.send_srb(c, rw10(false, 64, 8), kBuf + 0x10000, 4096);
        const auto r = guest.wait(c);
        ASSERT_EQ(r.trans_id, id) << e.fault;
        EXPECT_EQ(r.type, uint16_t(vmbus::PacketType::Completion)) << e.fault;
        EXPECT_EQ(r.pkt.operation, uint32_t(Operation::CompleteIo)) << e.fault;
        EXPECT_EQ(r.pkt.status, e.op_status) << e.fault;
        EXPECT_EQ(r.pkt.srb.srb_status, e.srb_status) << e.fault;
        EXPECT_EQ(r.pkt.srb.scsi_status, e.scsi_status) << e.fault;
        EXPECT_EQ(r.pkt.srb.sense_info_length, e.sense_len) << e.fault;
        EXPECT_EQ(r.pkt.srb.data_transfer_length, e.data) << e.fault;
        EXPECT_EQ(r.pkt.srb.lun, 0) << e.fault << ": the request's own fields are echoed";
        if (e.sense_len) {
            EXPECT_EQ(r.pkt.srb.cdb_or_sense[0], 0x70) << e.fault;
            EXPECT_EQ(r.pkt.srb.cdb_or_sense[2], e.key) << e.fault;
            EXPECT_EQ(r.pkt.srb.cdb_or_sense[12], e.asc) << e.fault;
            EXPECT_EQ(r.pkt.srb.cdb_or_sense[13], e.ascq) << e.fault;
        }
        if (std::string_view(e.fault).starts_with("srb=")) { // else the request's CDB, echoed as always
            for (size_t b = e.sense_len; b < kSenseBytes; b++)
                EXPECT_EQ(r.pkt.srb.cdb_or_sense[b], 0) << e.fault << ": sense byte " << b;
        }
        if (e.data) {
            EXPECT_EQ(std::memcmp(host.ram(kBuf), host.ram(kBuf + 0x10000), 4096), 0) << e.fault << ": the data read";
        }
        errors += e.srb_status != kSrbSuccess;
        EXPECT_EQ(ctl->stats().srb_errors, errors) << e.fault;
    }
    disk->set_fault({});
    guest.send_srb(c, rw10(false, 64, 8), kBuf + 0x10000, 4096);
    const auto r = guest.wait(c);
    EXPECT_EQ(r.pkt.srb.srb_status, kSrbSuccess) << "no fault: as before";
    EXPECT_EQ(r.pkt.status, kStatusSuccess);
    EXPECT_EQ(ctl->stats().srbs, ctl->stats().completions);
}

// A success status without data= reports the bytes the command moved, not the guest's
// buffer: a READ of one block into a 4 KiB buffer reports 512, as the disk does unfaulted.
TEST_F(StorvspTest, FaultSuccessReportsTheBytesTheCommandMoved) {
    auto c = open_primary();
    ASSERT_TRUE(guest.handshake(c));
    for (const char* fault : {"srb=success", "srb=0x81", "srb=success,scsi=check-condition"}) {
        scsi::FaultSpec f;
        std::string err;
        ASSERT_TRUE(scsi::parse_fault(fault, f, err)) << err;
        disk->set_fault(f);
        guest.send_srb(c, rw10(false, 0, 1), kBuf, 4096);
        EXPECT_EQ(guest.wait(c).pkt.srb.data_transfer_length, 512u) << fault;
    }
    disk->set_fault({});
    guest.send_srb(c, rw10(false, 0, 1), kBuf, 4096);
    EXPECT_EQ(guest.wait(c).pkt.srb.data_transfer_length, 512u) << "the same without a fault";
}

// The same answer on whichever channel the command came, and on a flush (no data at all).
TEST_F(StorvspTest, FaultAnswersOnASubchannelAndOnAFlush) {
    auto c = open_primary();
    ASSERT_TRUE(guest.handshake(c));
    auto sc = open_subchannel(c, kSubRings, 0x200);
    ASSERT_TRUE(sc);
    scsi::FaultSpec f;
    std::string err;
    ASSERT_TRUE(scsi::parse_fault("srb=bus-reset,ops=flush,opstatus=0x2", f, err)) << err;
    disk->set_fault(f);
    VmscsiRequest flush = srb(0x35, kDataNone);
    const uint64_t id = guest.send_srb(*sc, flush, 0, 0);
    auto r = guest.wait(*sc);
    EXPECT_EQ(r.trans_id, id);
    EXPECT_EQ(r.pkt.srb.srb_status, 0x0e);
    EXPECT_EQ(r.pkt.status, 2u);
    guest.send_srb(*sc, rw10(false, 0, 8), kBuf, 4096);
    EXPECT_EQ(guest.wait(*sc).pkt.srb.srb_status, kSrbSuccess) << "ops=flush: a read passes";
}

// notify: an unsolicited ENUMERATE_BUS or REMOVE_DEVICE on the primary, through the hot-plug
// notice's path (it waits for the guest's first SRB after its handshake); refused while the
// guest has no session.
TEST_F(StorvspTest, NotifySendsTheNoticeOnThePrimary) {
    std::string err;
    EXPECT_FALSE(ctl->notify(Notice::EnumerateBus, err));
    EXPECT_EQ(err, "no storvsc session: the guest has not opened the controller's channel");
    auto c = open_primary();
    ASSERT_TRUE(guest.handshake(c));
    ASSERT_TRUE(ctl->notify(Notice::RemoveDevice, err)) << err;
    EXPECT_FALSE(guest.poll(c)) << "no notice before the guest's first SRB";
    const uint64_t id = guest.send_srb(c, inquiry(0), kBuf, 96);
    FakeStorvsc::Completion r{};
    int notices = 0, answers = 0;
    while (notices + answers < 2) { // in either order
        r = guest.wait(c);
        if (r.type == uint16_t(vmbus::PacketType::DataInband)) {
            EXPECT_EQ(r.trans_id, 0u);
            EXPECT_EQ(r.pkt.operation, uint32_t(Operation::RemoveDevice));
            notices++;
        } else {
            EXPECT_EQ(r.trans_id, id);
            answers++;
        }
    }
    EXPECT_EQ(notices, 1);
    ASSERT_TRUE(ctl->notify(Notice::EnumerateBus, err)) << err;
    r = guest.wait(c);
    EXPECT_EQ(r.pkt.operation, uint32_t(Operation::EnumerateBus));
    EXPECT_EQ(r.trans_id, 0u);
    ASSERT_TRUE(ctl->notify(Notice::EnumerateBus, err));
    ASSERT_TRUE(ctl->notify(Notice::RemoveDevice, err));
    int enumerates = 0, removes = 0;
    while (enumerates + removes < 2) {
        r = guest.wait(c);
        enumerates += r.pkt.operation == uint32_t(Operation::EnumerateBus);
        removes += r.pkt.operation == uint32_t(Operation::RemoveDevice);
    }
    EXPECT_EQ(enumerates, 1);
    EXPECT_EQ(removes, 1);
    expect_report_luns(c); // nothing more came
    const ControllerStats s = ctl->stats();
    EXPECT_EQ(s.enumerate_bus_sent, 2u);
    EXPECT_EQ(s.remove_device_sent, 2u);
    EXPECT_EQ(host.traced(HVSTOR_TRACE_storvsp_remove_device).size(), 2u);
    guest.close(c);
    tear_down_gpadl(0x100);
    guest.wait_message<vmbus::GpadlTorndown>(vmbus::MsgType::GpadlTorndown);
    EXPECT_FALSE(ctl->notify(Notice::EnumerateBus, err)) << "the session ended";
}

// A disk attached or detached without its notice: the guest hears nothing until notify.
TEST_F(StorvspTest, DiskWithoutNoticesIsFoundOnlyWhenTheGuestIsTold) {
    auto c = open_primary();
    ASSERT_TRUE(guest.handshake(c));
    expect_report_luns(c);
    std::string err;
    auto r2 = backend::make_ram(1 << 20, err);
    scsi::Disk d2(*r2, {}, *ctl);
    ASSERT_TRUE(ctl->attach(1, &d2, err, false)) << err;
    expect_report_luns(c); // its answer is the next packet: no notice came before it
    EXPECT_EQ(ctl->stats().enumerate_bus_sent, 0u);
    ASSERT_TRUE(ctl->notify(Notice::EnumerateBus, err)) << err;
    EXPECT_EQ(guest.wait(c).pkt.operation, uint32_t(Operation::EnumerateBus));
    ctl->detach(1, false);
    expect_report_luns(c);
    EXPECT_EQ(ctl->stats().enumerate_bus_sent, 1u);
}

namespace {

VstorPacket reset_packet(Operation op, uint8_t lun = 0) {
    VstorPacket v{};
    v.operation = uint32_t(op);
    v.flags = 1;
    v.srb.lun = lun;
    return v;
}

} // namespace

// Each reset is counted by operation and answered as `reset` says: success, or failure.
TEST_F(StorvspTest, ResetsAreCountedAndAnsweredAsSet) {
    auto c = open_primary();
    ASSERT_TRUE(guest.handshake(c));
    const uint64_t bus = guest.send(c, reset_packet(Operation::ResetBus));
    auto r = guest.wait(c);
    EXPECT_EQ(r.trans_id, bus);
    EXPECT_EQ(r.pkt.operation, uint32_t(Operation::CompleteIo));
    EXPECT_EQ(r.pkt.status, kStatusSuccess);
    ctl->set_reset_answer(ResetAnswer::Fail);
    EXPECT_EQ(ctl->reset_answer(), ResetAnswer::Fail);
    for (Operation op : {Operation::ResetLun, Operation::ResetAdapter, Operation::ResetBus}) {
        const uint64_t id = guest.send(c, reset_packet(op));
        r = guest.wait(c);
        EXPECT_EQ(r.trans_id, id);
        EXPECT_EQ(r.pkt.status, kStatusUnsuccessful);
    }
    const ControllerStats s = ctl->stats();
    EXPECT_EQ(s.reset_bus, 2u);
    EXPECT_EQ(s.reset_lun, 1u);
    EXPECT_EQ(s.reset_adapter, 1u);
    EXPECT_EQ(s.resets_held, 0u);
    EXPECT_EQ(s.bad_packets, 0u) << "a failed reset is the host's answer, not a guest error";
    EXPECT_TRUE(host.guest_errors.empty());
}

// reset=ignore: a reset stays unanswered while SRBs go on; when the setting changes it is
// answered once, as the new setting says.
TEST_F(StorvspTest, IgnoredResetIsAnsweredOnceWhenTheSettingChanges) {
    auto c = open_primary();
    ASSERT_TRUE(guest.handshake(c));
    ctl->set_reset_answer(ResetAnswer::Ignore);
    const uint64_t held = guest.send(c, reset_packet(Operation::ResetBus));
    const uint64_t io = guest.send_srb(c, rw10(false, 0, 8), kBuf, 4096);
    EXPECT_EQ(guest.wait(c).trans_id, io) << "the SRB after it is answered; the reset is not";
    EXPECT_EQ(ctl->stats().resets_held, 1u);
    EXPECT_EQ(ctl->stats().reset_bus, 1u);
    EXPECT_EQ(host.traced(HVSTOR_TRACE_storvsp_reset_held).size(), 1u);
    ctl->set_reset_answer(ResetAnswer::Ignore); // no change: still held
    expect_report_luns(c);
    ctl->set_reset_answer(ResetAnswer::Answer);
    auto r = guest.wait(c);
    EXPECT_EQ(r.trans_id, held);
    EXPECT_EQ(r.pkt.operation, uint32_t(Operation::CompleteIo));
    EXPECT_EQ(r.pkt.status, kStatusSuccess);
    expect_report_luns(c); // answered once: nothing else came
    EXPECT_EQ(ctl->stats().resets_held, 0u);
    // Two held, released by fail: each answered once with the failure.
    ctl->set_reset_answer(ResetAnswer::Ignore);
    std::set<uint64_t> want{guest.send(c, reset_packet(Operation::ResetLun)),
                            guest.send(c, reset_packet(Operation::ResetAdapter))};
    while (ctl->stats().resets_held < 2) std::this_thread::yield();
    ctl->set_reset_answer(ResetAnswer::Fail);
    while (!want.empty()) {
        r = guest.wait(c);
        ASSERT_EQ(want.erase(r.trans_id), 1u) << "answered twice or never sent";
        EXPECT_EQ(r.pkt.status, kStatusUnsuccessful);
    }
    expect_report_luns(c);
}

// Held resets keep the room of their answers: a guest that fills the ring with requests
// while resets are held still gets every answer, the resets' too.
TEST_F(StorvspTest, HeldResetsKeepTheRoomOfTheirAnswers) {
    build({16, 256 * 1024, 4096, kVersionWin10});
    gate_lun0();
    auto c = open_primary();
    ASSERT_TRUE(guest.handshake(c));
    ctl->set_reset_answer(ResetAnswer::Ignore);
    std::set<uint64_t> want;
    for (int i = 0; i < 4; i++) want.insert(guest.send(c, reset_packet(Operation::ResetBus)));
    const uint32_t packet = vmbus::OutgoingRing::packet_bytes(sizeof(VstorPacket));
    const uint32_t fit = (c.in.data_size() - 1) / packet;
    for (uint32_t i = 0; i < fit; i++) {
        bool ok = false;
        while (!ok) {
            const uint64_t id = guest.send_srb(c, rw10(false, 0, 8), kBuf, 4096, &ok);
            if (ok) want.insert(id);
            else std::this_thread::yield();
        }
    }
    while (c.in.load(12) == 0) std::this_thread::yield(); // the host asked for room
    EXPECT_EQ(ctl->stats().srbs + 4, fit) << "the held resets' answers kept their room";
    ctl->set_reset_answer(ResetAnswer::Answer);
    for (;;) {
        gated.release_all();
        auto r = guest.poll(c);
        if (!r) {
            if (want.empty() && ctl->stats().srbs == ctl->stats().completions) break;
            std::this_thread::yield();
            continue;
        }
        want.erase(r->trans_id); // requests the host took later are not in `want`
    }
    EXPECT_TRUE(want.empty());
}

// A held reset goes with its channel's close, as completions owed to a closed channel do:
// the close finishes, nothing is written to the closed rings, and the next session starts
// with nothing held.
TEST_F(StorvspTest, HeldResetGoesWithTheClose) {
    auto c = open_primary();
    ASSERT_TRUE(guest.handshake(c));
    ctl->set_reset_answer(ResetAnswer::Ignore);
    guest.send(c, reset_packet(Operation::ResetBus));
    while (ctl->stats().resets_held < 1) std::this_thread::yield();
    guest.close(c);
    tear_down_gpadl(0x100);
    guest.wait_message<vmbus::GpadlTorndown>(vmbus::MsgType::GpadlTorndown);
    const auto write_index = c.in.load(0);
    EXPECT_EQ(ctl->stats().resets_held, 0u);
    ctl->set_reset_answer(ResetAnswer::Answer);
    EXPECT_EQ(c.in.load(0), write_index) << "an answer written into a closed channel's ring";
    auto c2 = guest.open(ctl->primary_relid(), kRings, 0x101);
    ASSERT_TRUE(c2);
    ASSERT_TRUE(guest.handshake(*c2)) << "an old reset's answer would have come first";
    expect_report_luns(*c2);
}

// A machine reset closes every channel: it does not wait for a held reset, which goes with
// the close.
TEST_F(StorvspTest, HeldResetGoesWithAMachineReset) {
    auto c = open_primary();
    ASSERT_TRUE(guest.handshake(c));
    ctl->set_reset_answer(ResetAnswer::Ignore);
    guest.send(c, reset_packet(Operation::ResetAdapter));
    while (ctl->stats().resets_held < 1) std::this_thread::yield();
    server.reset();
    EXPECT_EQ(ctl->stats().resets_held, 0u);
    EXPECT_EQ(ctl->stats().reset_adapter, 1u);
    EXPECT_EQ(ctl->reset_answer(), ResetAnswer::Ignore) << "the setting stays";
}

// A RESET_LUN held for a LUN that is detached is answered (success: nothing is left to
// reset); a RESET_BUS stays held.
TEST_F(StorvspTest, HeldLunResetIsAnsweredWhenItsLunIsDetached) {
    std::string err;
    auto r2 = backend::make_ram(1 << 20, err);
    scsi::Disk d2(*r2, {}, *ctl);
    ASSERT_TRUE(ctl->attach(1, &d2, err, false)) << err;
    auto c = open_primary();
    ASSERT_TRUE(guest.handshake(c));
    ctl->set_reset_answer(ResetAnswer::Ignore);
    guest.send(c, reset_packet(Operation::ResetBus));
    const uint64_t lun0 = guest.send(c, reset_packet(Operation::ResetLun, 0));
    const uint64_t lun1 = guest.send(c, reset_packet(Operation::ResetLun, 1));
    while (ctl->stats().resets_held < 3) std::this_thread::yield();
    ctl->detach(1, false);
    auto r = guest.wait(c);
    EXPECT_EQ(r.trans_id, lun1);
    EXPECT_EQ(r.pkt.status, kStatusSuccess);
    expect_report_luns(c);
    EXPECT_EQ(ctl->stats().resets_held, 2u);
    ctl->set_reset_answer(ResetAnswer::Fail);
    std::set<uint64_t> got;
    for (int i = 0; i < 2; i++) got.insert(guest.wait(c).trans_id);
    EXPECT_TRUE(got.count(lun0));
    EXPECT_EQ(got.size(), 2u);
}

// Under reset=ignore, a RESET_LUN of a LUN that is not there (never attached, or detached
// before the reset was read) is answered at once with success: nothing is left to reset.
TEST_F(StorvspTest, IgnoredLunResetOfAnAbsentLunIsAnsweredAtOnce) {
    auto c = open_primary();
    ASSERT_TRUE(guest.handshake(c));
    ctl->set_reset_answer(ResetAnswer::Ignore);
    const uint64_t absent = guest.send(c, reset_packet(Operation::ResetLun, 5));
    auto r = guest.wait(c);
    EXPECT_EQ(r.trans_id, absent);
    EXPECT_EQ(r.pkt.status, kStatusSuccess);
    std::string err;
    auto r2 = backend::make_ram(1 << 20, err);
    scsi::Disk d2(*r2, {}, *ctl);
    ASSERT_TRUE(ctl->attach(1, &d2, err, false)) << err;
    ctl->detach(1, false);
    const uint64_t gone = guest.send(c, reset_packet(Operation::ResetLun, 1));
    r = guest.wait(c);
    EXPECT_EQ(r.trans_id, gone) << "detached before the reset came";
    EXPECT_EQ(r.pkt.status, kStatusSuccess);
    EXPECT_EQ(ctl->stats().resets_held, 0u);
    guest.send(c, reset_packet(Operation::ResetLun, 0));
    while (ctl->stats().resets_held < 1) std::this_thread::yield();
    ctl->set_reset_answer(ResetAnswer::Answer);
    EXPECT_EQ(guest.wait(c).pkt.status, kStatusSuccess) << "a LUN that is there: held, then answered";
}

// Resets held under reset=ignore are bounded: past the cap each is answered with an error
// and a guest-error line, and the held ones are answered once the setting changes.
TEST_F(StorvspTest, HeldResetsAreBounded) {
    auto c = open_primary();
    ASSERT_TRUE(guest.handshake(c));
    ctl->set_reset_answer(ResetAnswer::Ignore);
    constexpr int kCap = 64, kMore = 5;
    for (int i = 0; i < kCap; i++) guest.send(c, reset_packet(Operation::ResetBus));
    while (ctl->stats().resets_held < uint32_t(kCap)) std::this_thread::yield();
    for (int i = 0; i < kMore; i++) {
        guest.send(c, reset_packet(Operation::ResetBus));
        EXPECT_EQ(guest.wait(c).pkt.status, kStatusInvalidDeviceState);
    }
    EXPECT_EQ(ctl->stats().resets_held, uint32_t(kCap));
    EXPECT_TRUE(host.logged("resets are held already (at most 64 under reset=ignore)"));
    ctl->set_reset_answer(ResetAnswer::Answer);
    for (int i = 0; i < kCap; i++) EXPECT_EQ(guest.wait(c).pkt.status, kStatusSuccess);
    EXPECT_EQ(ctl->stats().resets_held, 0u);
}

// The setting changes on one thread while the guest sends resets and I/O on two channels,
// each with its worker: every request is answered exactly once. (Run under TSan by
// ./hvstor test.)
TEST_F(StorvspTest, ResetSettingRacesWithTheGuestsResets) {
    auto c = open_primary();
    ASSERT_TRUE(guest.handshake(c));
    auto sc = open_subchannel(c, kSubRings, 0x200);
    ASSERT_TRUE(sc);
    std::atomic<bool> stop{false};
    std::thread flip([&] {
        const ResetAnswer order[] = {ResetAnswer::Ignore, ResetAnswer::Answer, ResetAnswer::Fail, ResetAnswer::Ignore};
        for (int i = 0; !stop.load(); i++) {
            ctl->set_reset_answer(order[i % 4]);
            std::this_thread::yield();
        }
    });
    std::set<uint64_t> want, want_sub;
    auto reap = [&] {
        while (auto r = guest.poll(c)) EXPECT_EQ(want.erase(r->trans_id), 1u) << "answered twice or never sent";
        while (auto r = guest.poll(*sc)) EXPECT_EQ(want_sub.erase(r->trans_id), 1u) << "answered twice or never sent";
    };
    for (int i = 0; i < 400; i++) { // each read into a buffer of its own: reads in flight at once
        FakeStorvsc::Chan& ch = i % 2 ? *sc : c;
        auto& w = i % 2 ? want_sub : want;
        w.insert(i % 4 == 0 ? guest.send(ch, reset_packet(i % 8 ? Operation::ResetBus : Operation::ResetLun))
                            : guest.send_srb(ch, rw10(false, uint32_t(i), 1), kBuf + 0x20000 + i * 512, 512));
        reap();
    }
    stop = true;
    flip.join();
    ctl->set_reset_answer(ResetAnswer::Answer);
    while (!want.empty()) ASSERT_EQ(want.erase(guest.wait(c).trans_id), 1u) << "answered twice or never sent";
    while (!want_sub.empty()) ASSERT_EQ(want_sub.erase(guest.wait(*sc).trans_id), 1u);
    expect_report_luns(c);
    const ControllerStats s = ctl->stats();
    EXPECT_EQ(s.reset_bus + s.reset_lun, 100u);
    EXPECT_EQ(s.resets_held, 0u);
}

// notify from two threads (two QMP clients, or a hot plug beside a notify) while the guest
// keeps the primary busy: no notice is lost after the last request, none is sent twice per
// request, and every SRB is answered once. (Run under TSan by ./hvstor test.)
TEST_F(StorvspTest, NoticesFromTwoThreadsWhileTheGuestWorks) {
    auto c = open_primary();
    ASSERT_TRUE(guest.handshake(c));
    expect_report_luns(c);
    std::atomic<int> requests{0};
    auto notifier = [&](Notice first) {
        std::string err;
        for (int i = 0; i < 200; i++) {
            EXPECT_TRUE(ctl->notify(i % 2 ? first : Notice(1 - int(first)), err)) << err;
            requests++;
        }
    };
    std::thread a(notifier, Notice::EnumerateBus), b(notifier, Notice::RemoveDevice);
    uint64_t enumerates = 0, removes = 0;
    std::set<uint64_t> want;
    auto take = [&](const FakeStorvsc::Completion& r) {
        if (r.type == uint16_t(vmbus::PacketType::DataInband)) {
            enumerates += r.pkt.operation == uint32_t(Operation::EnumerateBus);
            removes += r.pkt.operation == uint32_t(Operation::RemoveDevice);
            return;
        }
        EXPECT_EQ(want.erase(r.trans_id), 1u) << "answered twice or never sent";
    };
    for (int i = 0; i < 200; i++) {
        want.insert(guest.send_srb(c, rw10(false, uint32_t(i), 1), kBuf + 0x20000 + i * 512, 512));
        while (auto r = guest.poll(c)) take(*r);
    }
    a.join();
    b.join();
    while (!want.empty()) take(guest.wait(c));
    // After the last requests, one of each kind still comes. Two round trips make sure every
    // notice asked for before them went out ahead of the second answer.
    const uint64_t e0 = enumerates, r0 = removes;
    std::string err;
    ASSERT_TRUE(ctl->notify(Notice::EnumerateBus, err));
    ASSERT_TRUE(ctl->notify(Notice::RemoveDevice, err));
    for (int i = 0; i < 2; i++) {
        want.insert(guest.send_srb(c, rw10(false, 0, 1), kBuf, 512));
        while (!want.empty()) take(guest.wait(c));
    }
    EXPECT_GT(enumerates, e0);
    EXPECT_GT(removes, r0);
    EXPECT_FALSE(guest.poll(c)) << "a notice after the round trips";
    const ControllerStats s = ctl->stats();
    EXPECT_EQ(s.enumerate_bus_sent, enumerates) << "every notice sent arrived";
    EXPECT_EQ(s.remove_device_sent, removes);
    EXPECT_LE(enumerates + removes, uint64_t(requests.load()) + 2) << "at most one per request";
}

// ---- A stopped VM (QMP stop, a debugger's halt, a memory dump) ---------------------------

namespace {

// Time for a thread that ignores the pause to act; no check depends on it taking that long.
void let_threads_run() { std::this_thread::sleep_for(std::chrono::milliseconds(50)); }

} // namespace

// While paused no channel reads a ring, writes guest memory or raises an interrupt: a
// request the guest queued stays in the ring (the signal would have run a round on this
// thread), a completion stays with the controller (its release would have). Resuming does
// both, each exactly once.
TEST_F(StorvspTest, PausedVmNeitherReadsRingsNorWritesCompletions) {
    gate_lun0();
    auto c = open_primary();
    ASSERT_TRUE(guest.handshake(c));
    const uint64_t first = guest.send_srb(c, rw10(false, 0, 8), kBuf, 4096);
    while (gated.held_count() < 1) std::this_thread::yield();
    host.run_gate().pause();
    const uint64_t second = guest.send_srb(c, rw10(false, 8, 8), kBuf + 0x1000, 4096);
    const Still before = still();
    gated.release_all(); // `first` completes on this thread
    let_threads_run();
    EXPECT_EQ(gated.held_count(), 0u) << "a request taken from the ring while paused";
    expect_still(before);

    host.run_gate().resume();
    EXPECT_EQ(guest.wait(c).trans_id, first);
    while (gated.held_count() < 1) std::this_thread::yield();
    gated.release_all();
    EXPECT_EQ(guest.wait(c).trans_id, second);
    EXPECT_GT(host.irq_count(), before.irqs);
    // Exactly once: the next packet is the answer to the next request.
    const uint64_t third = guest.send_srb(c, inquiry(0), kBuf + 0x2000, 96);
    EXPECT_EQ(guest.wait(c).trans_id, third);
}

// A CLOSECHANNEL while paused finishes once its requests complete (they are dropped: the
// guest closed the channel), and the GPADL_TORNDOWN it held waits in the SynIC for resume.
TEST_F(StorvspTest, CloseWhilePausedFinishesAndAnswersOnResume) {
    gate_lun0();
    auto c = open_primary();
    ASSERT_TRUE(guest.handshake(c));
    hold_reads(c, 4);
    host.run_gate().pause();
    guest.close(c);
    tear_down_gpadl(0x100);
    const Still before = still();
    const size_t queued = p.synic().queued_messages(0, vmbus::kVmbusSint);
    gated.release_all();
    // The close finished: its GPADL_TORNDOWN is queued (the test runner's timeout ends a
    // close that never finishes).
    while (p.synic().queued_messages(0, vmbus::kVmbusSint) == queued) std::this_thread::yield();
    let_threads_run();
    expect_still(before);
    host.run_gate().resume();
    EXPECT_EQ(guest.wait_message<vmbus::GpadlTorndown>(vmbus::MsgType::GpadlTorndown).gpadl, 0x100u);
    EXPECT_TRUE(std::memcmp(host.ram(kRings), before.ram.data() + kRings, 2 * FakeStorvsc::kRingPages * kPageSize) == 0)
        << "a closed channel's ring written after resume";
}

// A machine reset while paused waits for the closes (here its poll releases the held
// requests) and returns; it writes nothing, and the guest can connect again once it runs.
TEST_F(StorvspTest, ResetWhilePausedReturnsAndWritesNothing) {
    gate_lun0();
    auto c = open_primary();
    ASSERT_TRUE(guest.handshake(c));
    hold_reads(c, 4);
    host.run_gate().pause();
    const Still before = still();
    host.on_poll = [&] { gated.release_all(); };
    server.reset();
    p.reset();
    host.on_poll = nullptr;
    EXPECT_EQ(gated.held_count(), 0u);
    expect_still(before);
    host.run_gate().resume();
}

// Unplugging a disk while paused returns at once (no channel is in a batch); its requests
// in flight complete meanwhile and are answered on resume, each once.
TEST_F(StorvspTest, UnplugWhilePausedAnswersEveryRequestOnResume) {
    gate_lun0();
    auto c = open_primary();
    ASSERT_TRUE(guest.handshake(c));
    const std::set<uint64_t> want = hold_reads(c, 3);
    host.run_gate().pause();
    const Still before = still();
    ctl->detach(0, false); // no rescan notice: the answers below are all the ring holds
    gated.release_all();
    let_threads_run();
    expect_still(before);
    EXPECT_FALSE(guest.poll(c));
    host.run_gate().resume();
    std::set<uint64_t> got;
    for (int i = 0; i < 3; i++) got.insert(guest.wait(c).trans_id);
    EXPECT_EQ(got, want);
    const uint64_t next = guest.send_srb(c, inquiry(0), kBuf + 0x2000, 96);
    EXPECT_EQ(guest.wait(c).trans_id, next) << "a request answered twice";
}
