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

    // A controller with a disk built from `spec`, and the guest connected to it through
    // the open primary channel `ch`.
    void serve(const capi::DiskSpec& spec) {
        capi::ScsiController& c =
            machine->add_controller(*vmbus::Guid::parse("f8b3781b-1e82-4818-a1c3-63d806ec1500"), {});
        disk = &c.add_disk(spec);
        connect();
        ch = guest.open(c.controller().primary_relid(), kRings, 0x100);
        ASSERT_TRUE(ch);
        ASSERT_TRUE(guest.handshake(*ch));
    }

    // One READ(10) or WRITE(10) of 4 KiB at `buf`; the completion.
    std::optional<FakeStorvsc::Completion> rw(bool write, uint32_t lba, uint64_t buf) {
        guest.send_srb(*ch, rw10(write, lba, 8), buf, 4096);
        return guest.wait(*ch);
    }

    static capi::DiskSpec ram(bool read_only) {
        capi::DiskSpec spec;
        spec.backend = "ram";
        spec.size = 1 << 20;
        spec.read_only = read_only;
        return spec;
    }

    FakeHost host;
    std::unique_ptr<capi::Machine> machine =
        std::make_unique<capi::Machine>(host, capi::MachineConfig{2, 0x5A58});
    FakeGuest g{host, machine->partition()};
    FakeStorvsc guest{host, machine->partition(), g};
    capi::AttachedDisk* disk = nullptr;
    std::optional<FakeStorvsc::Chan> ch;
};

TEST_F(MachineTest, AssembledDiskServesTheGuest) {
    ASSERT_NO_FATAL_FAILURE(serve(ram(false)));
    for (uint32_t i = 0; i < 4096; i++) *host.ram(kBuf + i) = uint8_t(i * 7 + 3);
    auto r = rw(true, 8, kBuf);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->pkt.srb.srb_status, kSrbSuccess);
    r = rw(false, 8, kBuf + 0x2000);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->pkt.srb.srb_status, kSrbSuccess);
    EXPECT_EQ(std::memcmp(host.ram(kBuf), host.ram(kBuf + 0x2000), 4096), 0);

    EXPECT_EQ(disk->stats_json(),
              R"({"disk":"lun0","model":false,"reads":1,"writes":1,"bytes_read":4096,"bytes_written":4096,"errors":0})");
    // Torn down with the channel open: the disk, then the controller, then the server.
    machine.reset();
}

// readonly=on reaches the guest for a RAM disk too: writes end in DATA PROTECT.
TEST_F(MachineTest, AssembledReadOnlyDiskRefusesWrites) {
    ASSERT_NO_FATAL_FAILURE(serve(ram(true)));
    auto r = rw(false, 0, kBuf);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->pkt.srb.srb_status, kSrbSuccess);
    r = rw(true, 0, kBuf);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->pkt.srb.scsi_status, scsi::kStatusCheckCondition);
    EXPECT_EQ(r->pkt.srb.cdb_or_sense[2] & 0xF, scsi::kSenseDataProtect);

    // The refused write counts as a write and an error, and moved no bytes.
    EXPECT_EQ(disk->stats_json(),
              R"({"disk":"lun0","model":false,"reads":1,"writes":1,"bytes_read":4096,"bytes_written":0,"errors":1})");
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
