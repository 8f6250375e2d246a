// The transport-level answers of a fault (hvstor/scsi/fault.h: srb=, scsi=, sense=, data=,
// autosense=, opstatus=): the text, every refusal, and what goes on the matching command
// (Command::transport) for storvsp to apply; tests/test_storvsp.cc checks the completion.
#include "fault_test.h"

namespace hvstor::scsi::test {
namespace {

TEST(FaultSrbText, EveryNamedStatusAndItsCode) {
    const std::pair<const char*, uint8_t> srb[] = {
        {"success", 0x01},  {"aborted", 0x02},           {"error", 0x04},     {"busy", 0x05},
        {"invalid-request", 0x06}, {"timeout", 0x09},    {"selection-timeout", 0x0a},
        {"bus-reset", 0x0e}, {"data-overrun", 0x12},     {"invalid-lun", 0x20}, {"internal-error", 0x30},
    };
    for (auto [name, code] : srb) {
        const FaultSpec f = parse_ok(std::string("srb=") + name);
        EXPECT_EQ(f.action, FaultSpec::Action::Srb) << name;
        EXPECT_EQ(f.srb_status, code) << name << ": no sense, no autosense flag";
        EXPECT_EQ(f.scsi_status, 0x00) << name << ": GOOD without sense=";
        EXPECT_FALSE(f.has_sense);
        EXPECT_FALSE(f.has_data);
        EXPECT_FALSE(f.has_op_status);
    }
    const std::pair<const char*, uint8_t> scsi[] = {
        {"good", 0x00}, {"check-condition", 0x02}, {"busy", 0x08}, {"task-set-full", 0x28}, {"0x01", 0x01}};
    for (auto [name, code] : scsi) EXPECT_EQ(parse_ok(std::string("srb=success,scsi=") + name).scsi_status, code);
}

TEST(FaultSrbText, SenseSetsAutosenseAndCheckConditionUnlessSaidOtherwise) {
    FaultSpec f = parse_ok("srb=aborted,scsi=check-condition,sense=6/2a/09,ops=read,count=1");
    EXPECT_EQ(f.srb_status, 0x82);
    EXPECT_EQ(f.scsi_status, 0x02);
    EXPECT_TRUE(f.has_sense);
    EXPECT_EQ(f.sense_key, 0x6);
    EXPECT_EQ(f.asc, 0x2a);
    EXPECT_EQ(f.ascq, 0x09);
    EXPECT_EQ(f.count, 1u);
    EXPECT_FALSE(f.writes);
    f = parse_ok("srb=error,sense=3/11/00"); // the medium error as storvsp itself reports it
    EXPECT_EQ(f.srb_status, 0x84);
    EXPECT_EQ(f.scsi_status, 0x02) << "CHECK CONDITION is the default with sense";
    f = parse_ok("srb=error,sense=3/11/00,autosense=off");
    EXPECT_EQ(f.srb_status, 0x04);
    f = parse_ok("srb=error,sense=3/11/00,scsi=good"); // SRB 0x84 with GOOD: the guest's stale sense_hdr
    EXPECT_EQ(f.srb_status, 0x84);
    EXPECT_EQ(f.scsi_status, 0x00);
    f = parse_ok("sense=B/4b/0,srb=aborted"); // any order, either case, one or two digits
    EXPECT_EQ(f.srb_status, 0x82);
    EXPECT_EQ(f.sense_key, 0xB);
    EXPECT_EQ(f.asc, 0x4b);
    EXPECT_EQ(f.ascq, 0x00);
    f = parse_ok("srb=error,scsi=check-condition,autosense=on"); // the flag with no sense to parse
    EXPECT_EQ(f.srb_status, 0x84);
    EXPECT_FALSE(f.has_sense);
}

TEST(FaultSrbText, RawBytesCarryTheirFlagsAsWritten) {
    EXPECT_EQ(parse_ok("srb=0x81").srb_status, 0x81);
    EXPECT_EQ(parse_ok("srb=0x41").srb_status, 0x41);
    EXPECT_EQ(parse_ok("srb=0X4").srb_status, 0x04);
    FaultSpec f = parse_ok("srb=0x12,sense=3/11/00");
    EXPECT_EQ(f.srb_status, 0x12) << "no flag added to a raw byte";
    EXPECT_EQ(f.scsi_status, 0x02);
    EXPECT_EQ(parse_ok("srb=0xff,scsi=0xfe").scsi_status, 0xfe);
}

TEST(FaultSrbText, DataAndOperationStatus) {
    FaultSpec f = parse_ok("srb=data-overrun,data=2048");
    EXPECT_TRUE(f.has_data);
    EXPECT_EQ(f.data, 2048u);
    EXPECT_EQ(parse_ok("srb=success,data=0").data, 0u);
    EXPECT_EQ(parse_ok("srb=success,data=4294967295").data, 4294967295u);
    f = parse_ok("srb=error,opstatus=0xC0000001");
    EXPECT_EQ(f.action, FaultSpec::Action::Srb);
    EXPECT_TRUE(f.has_op_status);
    EXPECT_EQ(f.op_status, 0xC0000001u);
    f = parse_ok("opstatus=0x1,ops=write");
    EXPECT_EQ(f.action, FaultSpec::Action::OpStatus) << "alone it is the action";
    EXPECT_EQ(f.op_status, 1u);
    f = parse_ok("error=medium,opstatus=0xffffffff");
    EXPECT_EQ(f.action, FaultSpec::Action::MediumError) << "with another action, part of its answer";
    EXPECT_EQ(f.op_status, 0xffffffffu);
}

// Every value is checked, and the message names it.
TEST(FaultSrbText, EveryRefusalNamesTheValue) {
    EXPECT_EQ(parse_error("srb=fine"),
              "fault: srb=fine is not one of success, aborted, error, busy, invalid-request, timeout, "
              "selection-timeout, bus-reset, data-overrun, invalid-lun, internal-error, or a byte 0x00..0xff");
    EXPECT_EQ(parse_error("srb=0x100").substr(0, 29), "fault: srb=0x100 is not one o");
    EXPECT_EQ(parse_error("srb=0x").substr(0, 26), "fault: srb=0x is not one o");
    EXPECT_EQ(parse_error("srb=4").substr(0, 23), "fault: srb=4 is not one");
    EXPECT_EQ(parse_error("srb=0xg1").substr(0, 25), "fault: srb=0xg1 is not on");
    EXPECT_EQ(parse_error("srb=error,scsi=bad"),
              "fault: scsi=bad is not one of good, check-condition, busy, task-set-full, or a byte 0x00..0xff");
    EXPECT_EQ(parse_error("srb=error,sense=3/11"),
              "fault: sense=3/11 is not KEY/ASC/ASCQ in hex (KEY 0..f, ASC and ASCQ 00..ff, e.g. 3/11/00)");
    EXPECT_EQ(parse_error("srb=error,sense=10/11/00").substr(0, 39), "fault: sense=10/11/00 is not KEY/ASC/AS");
    EXPECT_EQ(parse_error("srb=error,sense=3/111/00").substr(0, 39), "fault: sense=3/111/00 is not KEY/ASC/AS");
    EXPECT_EQ(parse_error("srb=error,sense=3/11/0g").substr(0, 38), "fault: sense=3/11/0g is not KEY/ASC/AS");
    EXPECT_EQ(parse_error("srb=error,sense=3/11/00/1").substr(0, 40), "fault: sense=3/11/00/1 is not KEY/ASC/AS");
    EXPECT_EQ(parse_error("srb=error,sense=0x3/11/00").substr(0, 40), "fault: sense=0x3/11/00 is not KEY/ASC/AS");
    EXPECT_EQ(parse_error("srb=error,data=-1"), "fault: data=-1 is not a number in 0..4294967295");
    EXPECT_EQ(parse_error("srb=error,data=4294967296"), "fault: data=4294967296 is not a number in 0..4294967295");
    EXPECT_EQ(parse_error("srb=error,data=1k"), "fault: data=1k is not a number in 0..4294967295");
    EXPECT_EQ(parse_error("srb=error,opstatus=12"), "fault: opstatus=12 is not a 32-bit hex number 0x0..0xffffffff");
    EXPECT_EQ(parse_error("opstatus=0x123456789"),
              "fault: opstatus=0x123456789 is not a 32-bit hex number 0x0..0xffffffff");
    EXPECT_EQ(parse_error("opstatus=0x"), "fault: opstatus=0x is not a 32-bit hex number 0x0..0xffffffff");
    EXPECT_EQ(parse_error("srb=error,autosense=yes"), "fault: autosense=yes is not on or off");
    EXPECT_EQ(parse_error("srb=0x84,autosense=off"),
              "fault: autosense= is for a named srb= status; a byte 0xNN carries its flags as written");
    EXPECT_EQ(parse_error("srb=error,srb=aborted"), "fault: more than one action (error=, stall= or srb=)");
    EXPECT_EQ(parse_error("error=medium,srb=aborted"), "fault: more than one action (error=, stall= or srb=)");
    EXPECT_EQ(parse_error("stall=hold,scsi=busy"), "fault: scsi= goes with srb=");
    EXPECT_EQ(parse_error("error=busy,sense=3/11/00"), "fault: sense= goes with srb=");
    EXPECT_EQ(parse_error("opstatus=0x1,data=512"), "fault: data= goes with srb=");
    EXPECT_EQ(parse_error("autosense=on,ops=read"), "fault: no action (error=, stall=, srb= or opstatus=)");
    EXPECT_EQ(parse_error("ops=read,scsi=good,error=medium"), "fault: scsi= goes with srb=");
}

class FaultSrbTest : public ::testing::Test {
protected:
    void inject(const std::string& text) { rig.disk.set_fault(parse_ok(text)); }
    FakeBackend be;
    DiskRig rig{be};
};

// Without bytes to report, the command never reaches the backend and carries exactly the
// fault's fields; the disk's own say nothing failed.
TEST_F(FaultSrbTest, AnswerWithoutDataNeverReachesTheBackend) {
    inject("srb=aborted,scsi=check-condition,sense=6/2a/09,opstatus=0xc0000001");
    Io r(cdb10(kRead10, 0, 8), Dir::FromDevice, 4096);
    rig.run(r);
    const TransportAnswer& t = r.cmd.transport;
    EXPECT_TRUE(t.srb);
    EXPECT_EQ(t.srb_status, 0x82);
    EXPECT_EQ(t.scsi_status, 0x02);
    ASSERT_EQ(t.sense_len, 18);
    EXPECT_EQ(t.sense[0], 0x70) << "fixed format, current";
    EXPECT_EQ(t.sense[2], 0x6);
    EXPECT_EQ(t.sense[7], 10) << "additional sense length";
    EXPECT_EQ(t.sense[12], 0x2a);
    EXPECT_EQ(t.sense[13], 0x09);
    EXPECT_EQ(t.data_length, 0u) << "default for an error status";
    EXPECT_TRUE(t.op);
    EXPECT_EQ(t.op_status, 0xc0000001u);
    EXPECT_EQ(r.status(), kStatusGood);
    EXPECT_EQ(r.cmd.data_transferred, 0u);
    EXPECT_TRUE(be.seen.empty());
    EXPECT_EQ(rig.disk.stats().faults.load(), 1u);
    EXPECT_EQ(rig.disk.stats().errors.load(), 0u) << "no CHECK CONDITION of the disk's own";
}

// With bytes to report (data=, or a success status's default), the command runs first, so
// that the bytes reported are real; the transport's fields then replace its own.
TEST_F(FaultSrbTest, AnswerWithDataRunsTheCommandFirst) {
    inject("srb=success,data=2048,ops=read");
    Io r(cdb10(kRead10, 0, 8), Dir::FromDevice, 4096);
    rig.run(r);
    ASSERT_EQ(be.seen.size(), 1u);
    EXPECT_EQ(r.buf[4095], 0xAB) << "the backend filled the buffer";
    EXPECT_TRUE(r.cmd.transport.srb);
    EXPECT_EQ(r.cmd.transport.srb_status, 0x01);
    EXPECT_EQ(r.cmd.transport.data_length, 2048u);
    EXPECT_EQ(r.cmd.transport.sense_len, 0);
    EXPECT_EQ(r.cmd.data_transferred, 4096u) << "what the disk did";
    inject("srb=success,scsi=check-condition");
    Io w(cdb10(kWrite10, 8, 2), Dir::ToDevice, 1024);
    rig.run(w);
    EXPECT_EQ(be.seen.size(), 2u);
    EXPECT_TRUE(w.cmd.transport.data_as_moved) << "success: what the command moved, by default";
    EXPECT_EQ(w.cmd.data_transferred, 1024u);
    EXPECT_EQ(w.cmd.transport.scsi_status, 0x02);
    inject("srb=0x81");
    Io r2(cdb10(kRead10, 0, 1), Dir::FromDevice, 512);
    rig.run(r2);
    EXPECT_TRUE(r2.cmd.transport.data_as_moved) << "SUCCESS with a flag is still success";
    EXPECT_EQ(r2.cmd.data_transferred, 512u);
    inject("srb=data-overrun,data=100000");
    Io r3(cdb10(kRead10, 0, 1), Dir::FromDevice, 512);
    rig.run(r3);
    EXPECT_EQ(r3.cmd.transport.data_length, 100000u) << "reported as given, even past the buffer";
    EXPECT_EQ(be.seen.size(), 4u);
}

// A command that ran and failed on the disk keeps its own answer: the bytes a fault reports
// must have moved.
TEST_F(FaultSrbTest, ACommandThatFailedOnTheDiskKeepsItsOwnAnswer) {
    be.result = -5;
    inject("srb=success,data=512");
    Io r(cdb10(kRead10, 0, 1), Dir::FromDevice, 512);
    rig.run(r);
    EXPECT_EQ(r.status(), kStatusCheckCondition);
    EXPECT_FALSE(r.cmd.transport.srb);
    Io past(cdb10(kRead10, 0x7FFFFFF0, 1), Dir::FromDevice, 512); // never reaches the backend
    rig.run(past);
    EXPECT_EQ(past.status(), kStatusCheckCondition);
    EXPECT_FALSE(past.cmd.transport.srb);
}

// opstatus= alone: the command runs as usual, only its completion's operation status differs.
TEST_F(FaultSrbTest, OperationStatusAloneLetsTheCommandRun) {
    inject("opstatus=0xc0000185,ops=write,count=1");
    Io w(cdb10(kWrite10, 0, 1), Dir::ToDevice, 512);
    rig.run(w);
    EXPECT_EQ(w.status(), kStatusGood);
    EXPECT_EQ(w.cmd.data_transferred, 512u);
    EXPECT_FALSE(w.cmd.transport.srb);
    EXPECT_TRUE(w.cmd.transport.op);
    EXPECT_EQ(w.cmd.transport.op_status, 0xc0000185u);
    Io w2(cdb10(kWrite10, 0, 1), Dir::ToDevice, 512);
    rig.run(w2);
    EXPECT_FALSE(w2.cmd.transport.op) << "count=1";
    EXPECT_EQ(be.seen.size(), 2u);
    EXPECT_EQ(rig.disk.stats().faults.load(), 1u);
}

// The fields of a command that did not match do not linger on a reused Command.
TEST_F(FaultSrbTest, TheAnswerIsClearedWhenTheCommandIsSubmittedAgain) {
    inject("srb=timeout,ops=flush,count=1");
    Io f(cdb10(kSyncCache10, 0, 0));
    rig.run(f);
    EXPECT_TRUE(f.cmd.transport.srb);
    EXPECT_EQ(f.cmd.transport.srb_status, 0x09);
    rig.run(f);
    EXPECT_FALSE(f.cmd.transport.srb);
    EXPECT_EQ(be.seen.size(), 1u);
}

// A capacity change's unit attention comes first and is the disk's own; with the disk's
// capacity notice off, nothing is reported, and a fault can report it instead.
TEST_F(FaultSrbTest, CapacityNoticeOffLeavesTheReportToAFault) {
    DiskConfig cfg;
    cfg.capacity_notice = false;
    std::string err;
    auto ram = backend::make_ram(4 << 20, err);
    ASSERT_TRUE(ram) << err;
    DiskRig quiet(*ram, cfg);
    ASSERT_TRUE(quiet.disk.resize(2 << 20, err)) << err;
    Io r(cdb10(kRead10, 0, 1), Dir::FromDevice, 512);
    quiet.run(r);
    EXPECT_EQ(r.status(), kStatusGood) << "no unit attention";
    EXPECT_EQ(quiet.disk.stats().unit_attentions.load(), 0u);
    EXPECT_EQ(quiet.disk.blocks(), (2u << 20) / 512) << "the size changed all the same";
    quiet.disk.set_fault(parse_ok("srb=aborted,scsi=check-condition,sense=6/2a/09,count=1"));
    Io r2(cdb10(kRead10, 0, 1), Dir::FromDevice, 512);
    quiet.run(r2);
    EXPECT_EQ(r2.cmd.transport.srb_status, 0x82);
}

} // namespace
} // namespace hvstor::scsi::test
