// The three VMBus device classes Linux's storvsc binds (ControllerConfig::device_class): the
// class GUID of the offers, FCHBA_DATA (answered by an FC HBA only) and an IDE accelerator's
// addressing, on a loopback bus.
#include <gtest/gtest.h>

#include <cstring>

#include "bus_rig.h"
#include "hvstor/scsi/disk.h"
#include "hvstor/storvsp/controller.h"

using namespace hvstor;
using namespace hvstor::storvsp;
using hvstor::test::FakeHost;
using hvstor::test::LoopbackBus;
using hvstor::test::StorvscRings;

namespace {

constexpr const char* kScsiInstance = hvstor::test::StorvspBusRig::kInstance;
// As Hyper-V names an IDE accelerator: channel 1, target (device) 1.
constexpr const char* kIdeInstance = "00000001-0001-8899-0000-000000000000";
constexpr uint64_t kPortWwn = 0xc003ff0000ff0101, kNodeWwn = 0x5001a4b2c3d4e5f6;

class DeviceClassTest : public hvstor::test::StorvspBusRig {
protected:
    // A controller of class `cls` with a RAM disk at LUN 0, offered on the loopback bus.
    void build(DeviceClass cls, const char* instance = kScsiInstance) {
        ControllerConfig cfg;
        cfg.device_class = cls;
        if (cls == DeviceClass::Ide) cfg.max_subchannels = 0;
        if (cls == DeviceClass::Fc) {
            cfg.port_wwn = kPortWwn;
            cfg.node_wwn = kNodeWwn;
        }
        StorvspBusRig::build(cfg, instance);
    }
    // Sends a control operation with nothing but its code; its answer.
    StorvscRings::Completion op(StorvscRings::Chan& c, Operation o, size_t len = sizeof(VstorPacket)) {
        VstorPacket v{};
        v.operation = uint32_t(o);
        guest.send(c, v, len);
        return guest.wait(c);
    }
    // Linux's storvsc_channel_init up to QUERY_PROPERTIES (FCHBA_DATA comes next on FC).
    void begin(StorvscRings::Chan& c) {
        ASSERT_EQ(op(c, Operation::BeginInitialization).pkt.status, kStatusSuccess);
        VstorPacket v{};
        v.operation = uint32_t(Operation::QueryProtocolVersion);
        v.version.major_minor = kVersionWin10;
        guest.send(c, v);
        ASSERT_EQ(guest.wait(c).pkt.status, kStatusSuccess);
        ASSERT_EQ(op(c, Operation::QueryProperties).pkt.status, kStatusSuccess);
    }
    // An SRB without data to `target` on `path`, LUN 0; its SRB status.
    uint8_t unit_ready(StorvscRings::Chan& c, uint8_t path, uint8_t target) {
        VmscsiRequest s{};
        s.cdb_length = 6;
        s.data_in = kDataNone;
        s.path_id = path;
        s.target_id = target;
        s.sense_info_length = kSenseBytes;
        guest.send_srb(c, s, 0, 0);
        return guest.wait(c).pkt.srb.srb_status;
    }
    // REPORT LUNS to `target`: how many LUNs it lists.
    uint32_t report_luns(StorvscRings::Chan& c, uint8_t target) {
        VmscsiRequest s{};
        s.cdb_length = 12;
        s.cdb_or_sense[0] = 0xA0;
        s.cdb_or_sense[9] = 64;
        s.data_in = kDataRead;
        s.target_id = target;
        std::memset(host.ram(kBuf), 0xEE, 64);
        guest.send_srb(c, s, kBuf, 64);
        EXPECT_EQ(guest.wait(c).pkt.srb.srb_status, kSrbSuccess);
        return uint32_t(*host.ram(kBuf + 3)) / 8;
    }
    static uint64_t be64(const uint8_t* b) {
        uint64_t v = 0;
        for (int i = 0; i < 8; i++) v = v << 8 | b[i];
        return v;
    }

};

TEST(DeviceClass, NamesAndGuidsAreTheThreeStorvscBinds) {
    DeviceClass c{};
    std::string err;
    ASSERT_TRUE(parse_device_class("ide", c, err));
    EXPECT_EQ(c, DeviceClass::Ide);
    EXPECT_EQ(class_guid(c).to_string(), "32412632-86cb-44a2-9b5c-50d1417354f5");
    ASSERT_TRUE(parse_device_class("fc", c, err));
    EXPECT_EQ(class_guid(c).to_string(), "2f9bcc4a-0069-4af3-b76b-6fd0be528cda");
    ASSERT_TRUE(parse_device_class("scsi", c, err));
    EXPECT_EQ(class_guid(c).to_string(), "ba6163d9-04a1-4d29-b605-72e2ffb1dc7f");
    EXPECT_FALSE(parse_device_class("sata", c, err));
    EXPECT_EQ(err, "class=sata is not one of scsi, ide, fc");
    // Linux: target = dev_instance.b[5] << 8 | b[4], the GUID's second group.
    EXPECT_EQ(ide_target(*vmbus::Guid::parse(kIdeInstance)), 1);
    EXPECT_EQ(ide_target(*vmbus::Guid::parse("00000000-0203-8899-0000-000000000000")), 0x0203);
}

TEST_F(DeviceClassTest, PrimaryAndSubchannelsAreOfferedWithTheClassGuid) {
    for (DeviceClass cls : {DeviceClass::Scsi, DeviceClass::Fc}) {
        SCOPED_TRACE(device_class_name(cls));
        bus.offered.clear();
        build(cls);
        auto o = bus.offer_of(ctl->primary_relid());
        ASSERT_TRUE(o);
        EXPECT_EQ(o->type, class_guid(cls));
        auto c = open_primary();
        ASSERT_TRUE(guest.handshake(c));
        ASSERT_EQ(ask_subchannels(c, 2), kStatusSuccess);
        ASSERT_EQ(bus.offered.size(), 3u);
        for (uint32_t relid : bus.offered) EXPECT_EQ(bus.offer_of(relid)->type, class_guid(cls));
        bus.close(c.relid);
        ctl.reset();
    }
}

TEST_F(DeviceClassTest, FcHbaDataAnswersTheWwnsBigEndianPrimaryActive) {
    build(DeviceClass::Fc);
    auto c = open_primary();
    EXPECT_EQ(op(c, Operation::FcHbaData).pkt.status, kStatusInvalidDeviceState) << "before the handshake";
    begin(c);
    // A guest before win8 negotiation sends 48 bytes; the names fit in them.
    auto r = op(c, Operation::FcHbaData, kVstorPacketMin);
    EXPECT_EQ(r.pkt.operation, uint32_t(Operation::CompleteIo));
    ASSERT_EQ(r.pkt.status, kStatusSuccess);
    EXPECT_EQ(r.len, kVstorPacketMin);
    EXPECT_EQ(r.pkt.wwn.primary_active, 1);
    EXPECT_EQ(be64(r.pkt.wwn.primary_port_wwn), kPortWwn);
    EXPECT_EQ(be64(r.pkt.wwn.primary_node_wwn), kNodeWwn);
    EXPECT_EQ(be64(r.pkt.wwn.secondary_port_wwn), kPortWwn);
    EXPECT_EQ(be64(r.pkt.wwn.secondary_node_wwn), kNodeWwn);
    EXPECT_EQ(op(c, Operation::EndInitialization).pkt.status, kStatusSuccess);
    EXPECT_EQ(op(c, Operation::FcHbaData).pkt.status, kStatusSuccess) << "asked again once ready";
    EXPECT_EQ(unit_ready(c, 0, 0), kSrbSuccess);
    EXPECT_EQ(ctl->stats().bad_packets, 1u);
}

TEST_F(DeviceClassTest, FcHbaDataIsRefusedOnScsiAndIde) {
    for (DeviceClass cls : {DeviceClass::Scsi, DeviceClass::Ide}) {
        SCOPED_TRACE(device_class_name(cls));
        build(cls, cls == DeviceClass::Ide ? kIdeInstance : kScsiInstance);
        auto c = open_primary();
        begin(c);
        auto r = op(c, Operation::FcHbaData);
        EXPECT_EQ(r.pkt.operation, uint32_t(Operation::CompleteIo));
        EXPECT_EQ(r.pkt.status, kStatusInvalidDeviceRequest);
        EXPECT_TRUE(host.logged(std::string("operation 12: FCHBA_DATA on a class=") + device_class_name(cls) +
                                " controller"));
        EXPECT_EQ(ctl->stats().bad_packets, 1u);
        EXPECT_EQ(op(c, Operation::EndInitialization).pkt.status, kStatusSuccess) << "the handshake goes on";
        bus.close(c.relid);
        ctl.reset();
    }
}

TEST_F(DeviceClassTest, IdeAnswersOnItsTargetOnAnyPathAtLunZeroOnly) {
    build(DeviceClass::Ide, kIdeInstance);
    EXPECT_EQ(bus.offer_of(ctl->primary_relid())->type, vmbus::kIdeAcceleratorType);
    std::string err;
    EXPECT_FALSE(ctl->attach(1, disk.get(), err));
    EXPECT_EQ(err, "class=ide takes one disk, at lun 0, not lun 1");
    auto c = open_primary();
    auto props = guest.handshake(c);
    ASSERT_TRUE(props);
    EXPECT_EQ(props->max_channel_count, 0);
    EXPECT_EQ(props->flags & kFlagMultiChannel, 0u) << "no subchannels";
    // Linux sends its own channel (0) as the path; openvmm forces the IDE channel's.
    EXPECT_EQ(unit_ready(c, 0, 1), kSrbSuccess);
    EXPECT_EQ(unit_ready(c, 1, 1), kSrbSuccess);
    EXPECT_EQ(unit_ready(c, 0, 0), kSrbInvalidLun) << "target 0 is not this disk's";
    EXPECT_EQ(unit_ready(c, 0, 2), kSrbInvalidLun);
    EXPECT_EQ(report_luns(c, 1), 1u);
    EXPECT_EQ(report_luns(c, 0), 0u);
}

TEST_F(DeviceClassTest, IdeTargetBeyondAChannelsTwoIsRefused) {
    ControllerConfig cfg;
    cfg.device_class = DeviceClass::Ide;
    cfg.max_subchannels = 0;
    ctl = std::make_unique<Controller>(host, bus, *vmbus::Guid::parse("00000000-0002-8899-0000-000000000000"), cfg);
    std::string err;
    EXPECT_FALSE(ctl->start(err));
    EXPECT_NE(err.find("names IDE target 2"), std::string::npos) << err;
    EXPECT_TRUE(bus.offered.empty());
}

} // namespace
