// Machine: an assembled controller and disk serve a guest end to end, and the machine tears
// down in the order its parts need while a channel is open.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <optional>

#include "fake_guest.h"
#include "fake_host.h"
#include "fake_storvsc.h"
#include "machine.h"

using namespace hvstor;
using namespace hvstor::storvsp;
using hvstor::test::FakeGuest;
using hvstor::test::FakeHost;
using hvstor::test::FakeStorvsc;

namespace {

constexpr uint64_t kRings = 0x400000;
constexpr uint64_t kBuf = 0x500000;

VmscsiRequest rw10(bool write, uint32_t lba, uint16_t blocks) {
    VmscsiRequest s{};
    s.cdb_length = 10;
    s.cdb_or_sense[0] = write ? 0x2A : 0x28;
    s.data_in = write ? kDataWrite : kDataRead;
    s.sense_info_length = kSenseBytes;
    s.cdb_or_sense[2] = uint8_t(lba >> 24);
    s.cdb_or_sense[3] = uint8_t(lba >> 16);
    s.cdb_or_sense[4] = uint8_t(lba >> 8);
    s.cdb_or_sense[5] = uint8_t(lba);
    s.cdb_or_sense[7] = uint8_t(blocks >> 8);
    s.cdb_or_sense[8] = uint8_t(blocks);
    return s;
}

class MachineTest : public ::testing::Test {
protected:
    void connect() {
        for (uint32_t vp = 0; vp < 2; vp++) g.enable_synic(vp);
        vmbus::InitiateContact c{};
        c.hdr.msgtype = uint32_t(vmbus::MsgType::InitiateContact);
        c.version_requested = vmbus::version::kV5_3;
        c.v5.msg_sint = 2;
        g.post(0, 4, c);
        ASSERT_TRUE(guest.wait_message<vmbus::VersionResponse>(vmbus::MsgType::VersionResponse));
        vmbus::MsgHeader h{uint32_t(vmbus::MsgType::RequestOffers), 0};
        g.post(0, 1, h);
        ASSERT_TRUE(guest.wait_message<vmbus::MsgHeader>(vmbus::MsgType::AllOffersDelivered));
    }

    FakeHost host;
    std::unique_ptr<capi::Machine> machine =
        std::make_unique<capi::Machine>(host, capi::MachineConfig{2, 0x5A58});
    FakeGuest g{host, machine->partition()};
    FakeStorvsc guest{host, machine->partition(), g};
};

TEST_F(MachineTest, AssembledDiskServesTheGuest) {
    capi::ScsiController& c =
        machine->add_controller(*vmbus::Guid::parse("f8b3781b-1e82-4818-a1c3-63d806ec1500"), {});
    capi::DiskSpec spec;
    spec.backend = "ram";
    spec.size = 1 << 20;
    capi::AttachedDisk& d = c.add_disk(spec);
    connect();
    auto ch = guest.open(c.controller().primary_relid(), kRings, 0x100);
    ASSERT_TRUE(ch);
    ASSERT_TRUE(guest.handshake(*ch));

    for (uint32_t i = 0; i < 4096; i++) *host.ram(kBuf + i) = uint8_t(i * 7 + 3);
    guest.send_srb(*ch, rw10(true, 8, 8), kBuf, 4096);
    auto r = guest.wait(*ch);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->pkt.srb.srb_status, kSrbSuccess);
    guest.send_srb(*ch, rw10(false, 8, 8), kBuf + 0x2000, 4096);
    r = guest.wait(*ch);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->pkt.srb.srb_status, kSrbSuccess);
    EXPECT_EQ(std::memcmp(host.ram(kBuf), host.ram(kBuf + 0x2000), 4096), 0);

    EXPECT_EQ(d.stats_json(),
              R"({"disk":"lun0","model":false,"reads":1,"writes":1,"bytes_read":4096,"bytes_written":4096,"errors":0})");
    // Torn down with the channel open: the disk, then the controller, then the server.
    machine.reset();
}

TEST_F(MachineTest, SettingsAreChecked) {
    FakeHost h;
    EXPECT_THROW(capi::Machine(h, capi::MachineConfig{0, 1}), capi::ConfigError);
    EXPECT_THROW(capi::Machine(h, capi::MachineConfig{4097, 1}), capi::ConfigError);
    EXPECT_THROW(capi::Machine(h, capi::MachineConfig{1, 1, 0x00050004}), capi::ConfigError);
    storvsp::ControllerConfig cc;
    cc.max_transfer_bytes = 8 * 1024 * 1024 + 4096;
    EXPECT_THROW(capi::check_controller_config(cc), capi::ConfigError);
    cc.max_transfer_bytes = 8 * 1024 * 1024;
    EXPECT_NO_THROW(capi::check_controller_config(cc));
}

TEST_F(MachineTest, ResetDisconnectsTheGuest) {
    connect();
    EXPECT_NE(machine->server().negotiated_version(), 0u);
    machine->reset();
    EXPECT_EQ(machine->server().negotiated_version(), 0u);
}

} // namespace
