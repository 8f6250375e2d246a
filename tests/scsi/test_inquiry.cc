// INQUIRY standard data and VPD pages.
#include "scsi_test.h"

namespace hvstor::scsi::test {
namespace {

std::string text(const uint8_t* p, size_t n) { return std::string(reinterpret_cast<const char*>(p), n); }

struct InquiryTest : ::testing::Test {
    FakeBackend be{1ULL << 30};
    DiskConfig cfg = [] {
        DiskConfig c;
        c.serial = "SER-0042";
        c.max_transfer_bytes = 512 * 1024;
        return c;
    }();
    DiskRig rig{be, cfg};
};

TEST_F(InquiryTest, StandardData) {
    Io io(inquiry(false, 0, 96), Dir::FromDevice, 96);
    rig.run(io);
    ASSERT_EQ(io.status(), kStatusGood);
    ASSERT_EQ(io.cmd.data_transferred, 36u);
    const uint8_t* d = io.buf.data();
    EXPECT_EQ(d[0], 0x00);         // connected direct-access device
    EXPECT_EQ(d[2], 0x05);         // SPC-3
    EXPECT_EQ(d[3] & 0x0F, 0x02);  // response data format
    EXPECT_EQ(d[4], 31);
    EXPECT_TRUE(d[7] & 0x02);  // CmdQue
    EXPECT_EQ(text(d + 8, 8), "Msft    ");
    EXPECT_EQ(text(d + 16, 16), "Virtual Disk    ");
    EXPECT_EQ(text(d + 32, 4), "1.0 ");
}

TEST_F(InquiryTest, AllocationLengthTruncates) {
    Io io(inquiry(false, 0, 5), Dir::FromDevice, 96);
    rig.run(io);
    EXPECT_EQ(io.status(), kStatusGood);
    EXPECT_EQ(io.cmd.data_transferred, 5u);
    EXPECT_EQ(io.buf[4], 31);
    EXPECT_EQ(io.buf[5], 0);  // untouched
    // A buffer smaller than the allocation length: a short transfer, not an error.
    Io small(inquiry(false, 0, 96), Dir::FromDevice, 10);
    rig.run(small);
    EXPECT_EQ(small.status(), kStatusGood);
    EXPECT_EQ(small.cmd.data_transferred, 10u);
    Io zero(inquiry(false, 0, 0), Dir::FromDevice, 96);
    rig.run(zero);
    EXPECT_EQ(zero.status(), kStatusGood);
    EXPECT_EQ(zero.cmd.data_transferred, 0u);
}

TEST_F(InquiryTest, SupportedPages) {
    Io io(inquiry(true, 0x00, 255), Dir::FromDevice, 255);
    rig.run(io);
    ASSERT_EQ(io.status(), kStatusGood);
    const uint8_t* d = io.buf.data();
    EXPECT_EQ(d[1], 0x00);
    std::vector<uint8_t> pages(d + 4, d + 4 + d[3]);
    EXPECT_EQ(pages, (std::vector<uint8_t>{0x00, 0x80, 0x83, 0xB0, 0xB1, 0xB2}));
    EXPECT_EQ(io.cmd.data_transferred, 4u + pages.size());
}

TEST_F(InquiryTest, SerialPage) {
    Io io(inquiry(true, 0x80, 255), Dir::FromDevice, 255);
    rig.run(io);
    ASSERT_EQ(io.status(), kStatusGood);
    EXPECT_EQ(io.buf[1], 0x80);
    EXPECT_EQ(io.buf[3], 8);
    EXPECT_EQ(text(&io.buf[4], 8), "SER-0042");
}

TEST_F(InquiryTest, NoSerialNoPage) {
    FakeBackend b2;
    DiskRig r2{b2};
    Io io(inquiry(true, 0x80, 255), Dir::FromDevice, 255);
    r2.run(io);
    EXPECT_EQ(io.status(), kStatusCheckCondition);
    EXPECT_EQ(io.key(), kSenseIllegalRequest);
    EXPECT_EQ(io.asc(), 0x24);
    Io list(inquiry(true, 0x00, 255), Dir::FromDevice, 255);
    r2.run(list);
    EXPECT_EQ(std::vector<uint8_t>(&list.buf[4], &list.buf[4] + list.buf[3]),
              (std::vector<uint8_t>{0x00, 0x83, 0xB0, 0xB1, 0xB2}));
    // Without serial or explicit id only the T10 designator is there.
    Io id(inquiry(true, 0x83, 255), Dir::FromDevice, 255);
    r2.run(id);
    ASSERT_EQ(id.status(), kStatusGood);
    EXPECT_EQ(get_be(&id.buf[2], 2), 4u + 24u);
}

TEST_F(InquiryTest, DeviceIdentification) {
    Io io(inquiry(true, 0x83, 255), Dir::FromDevice, 255);
    rig.run(io);
    ASSERT_EQ(io.status(), kStatusGood);
    const uint8_t* d = io.buf.data();
    const size_t len = get_be(d + 2, 2);
    // T10 vendor ID designator first.
    const uint8_t* t10 = d + 4;
    EXPECT_EQ(t10[0] & 0x0F, 2);  // ASCII
    EXPECT_EQ(t10[1] & 0x0F, 1);  // T10 vendor ID
    EXPECT_EQ(text(t10 + 4, 8), "Msft    ");
    EXPECT_EQ(text(t10 + 4 + 24, 8), "SER-0042");
    const uint8_t* naa = t10 + 4 + t10[3];
    EXPECT_EQ(naa[0] & 0x0F, 1);  // binary
    EXPECT_EQ(naa[1] & 0x0F, 3);  // NAA
    ASSERT_EQ(naa[3], 16);
    EXPECT_EQ(naa[4] >> 4, 6);
    EXPECT_EQ(get_be(naa + 4, 4) >> 4, 0x6002248u);  // Microsoft OUI
    EXPECT_EQ(static_cast<size_t>(naa + 20 - (d + 4)), len);
    // Derived from the serial: stable, and different for another serial.
    Io again(inquiry(true, 0x83, 255), Dir::FromDevice, 255);
    rig.run(again);
    EXPECT_EQ(again.buf, io.buf);
    DiskConfig other = cfg;
    other.serial = "SER-0043";
    FakeBackend b2;
    DiskRig r2{b2, other};
    Io io2(inquiry(true, 0x83, 255), Dir::FromDevice, 255);
    r2.run(io2);
    const size_t off = static_cast<size_t>(naa - d);
    ASSERT_EQ(io2.buf[off + 3], 16);  // same layout: the serials are equally long
    EXPECT_NE(std::vector<uint8_t>(&io2.buf[off + 4], &io2.buf[off + 20]),
              std::vector<uint8_t>(&io.buf[off + 4], &io.buf[off + 20]));
}

TEST_F(InquiryTest, ExplicitNaa) {
    DiskConfig c;
    c.naa_id = 0x0123456789ABCDEFULL;
    FakeBackend b2;
    DiskRig r2{b2, c};
    Io io(inquiry(true, 0x83, 255), Dir::FromDevice, 255);
    r2.run(io);
    ASSERT_EQ(io.status(), kStatusGood);
    const uint8_t* naa = io.buf.data() + 4 + 4 + 24;
    ASSERT_EQ(naa[1] & 0x0F, 3);
    EXPECT_EQ(get_be(naa + 12, 8), 0x0123456789ABCDEFULL);
}

TEST_F(InquiryTest, BlockLimits) {
    Io io(inquiry(true, 0xB0, 255), Dir::FromDevice, 255);
    rig.run(io);
    ASSERT_EQ(io.status(), kStatusGood);
    const uint8_t* d = io.buf.data();
    EXPECT_EQ(get_be(d + 2, 2), 0x3Cu);
    EXPECT_EQ(io.cmd.data_transferred, 64u);
    EXPECT_EQ(get_be(d + 8, 4), 1024u);  // 512 KiB / 512
    EXPECT_EQ(get_be(d + 20, 4), 0x400000u);  // max unmap LBA count: 2 GiB per command
    EXPECT_EQ(get_be(d + 24, 4), 64u);        // max unmap descriptors
    EXPECT_EQ(get_be(d + 36, 8), 1024u);      // max write same length: the max transfer (<= 8 MiB)
}

TEST_F(InquiryTest, CharacteristicsAndProvisioning) {
    Io c(inquiry(true, 0xB1, 255), Dir::FromDevice, 255);
    rig.run(c);
    ASSERT_EQ(c.status(), kStatusGood);
    EXPECT_EQ(get_be(&c.buf[4], 2), 1u);  // non-rotating
    Io p(inquiry(true, 0xB2, 255), Dir::FromDevice, 255);
    rig.run(p);
    ASSERT_EQ(p.status(), kStatusGood);
    EXPECT_TRUE(p.buf[5] & 0x80);  // LBPU
    EXPECT_TRUE(p.buf[5] & 0x40);  // LBPWS
    EXPECT_EQ(p.cmd.data_transferred, 8u);
}

TEST_F(InquiryTest, BadCdbs) {
    Io unknown(inquiry(true, 0xC7, 255), Dir::FromDevice, 255);
    rig.run(unknown);
    EXPECT_EQ(unknown.status(), kStatusCheckCondition);
    EXPECT_EQ(unknown.asc(), 0x24);
    Io page_without_evpd(inquiry(false, 0x83, 255), Dir::FromDevice, 255);
    rig.run(page_without_evpd);
    EXPECT_EQ(page_without_evpd.asc(), 0x24);
    auto c = inquiry(false, 0, 36);
    c[1] = 0x02;  // CMDDT
    Io cmddt(c, Dir::FromDevice, 36);
    rig.run(cmddt);
    EXPECT_EQ(cmddt.asc(), 0x24);
    Io wrong_dir(inquiry(false, 0, 36), Dir::ToDevice, 36);
    rig.run(wrong_dir);
    EXPECT_EQ(wrong_dir.status(), kStatusCheckCondition);
    EXPECT_EQ(wrong_dir.key(), kSenseIllegalRequest);
    // A CDB shorter than its opcode's size.
    Io shortc(inquiry(false, 0, 36), Dir::FromDevice, 36);
    shortc.cmd.cdb_len = 4;
    rig.run(shortc);
    EXPECT_EQ(shortc.asc(), 0x24);
    Io empty(inquiry(false, 0, 36), Dir::FromDevice, 36);
    empty.cmd.cdb_len = 0;
    rig.run(empty);
    EXPECT_EQ(empty.key(), kSenseIllegalRequest);
    Io toolong(inquiry(false, 0, 36), Dir::FromDevice, 36);
    toolong.cmd.cdb_len = 17;
    rig.run(toolong);
    EXPECT_EQ(toolong.key(), kSenseIllegalRequest);
}

TEST_F(InquiryTest, UnprintableConfigIsBlanked) {
    DiskConfig c;
    c.vendor = "Ab\x01\x7F";
    c.product = "A very long product name indeed";
    FakeBackend b2;
    DiskRig r2{b2, c};
    Io io(inquiry(false, 0, 36), Dir::FromDevice, 36);
    r2.run(io);
    EXPECT_EQ(text(&io.buf[8], 8), "Ab      ");
    EXPECT_EQ(text(&io.buf[16], 16), "A very long prod");
}

} // namespace
} // namespace hvstor::scsi::test
