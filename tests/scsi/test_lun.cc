// The controller-side helpers: absent LUNs and REPORT LUNS.
#include "scsi_test.h"

namespace hvstor::scsi::test {
namespace {

TEST(AbsentLun, InquiryDescribesNoDevice) {
    Io io(inquiry(false, 0, 96), Dir::FromDevice, 96);
    answer_absent_lun(io.cmd);
    EXPECT_EQ(io.status(), kStatusGood);
    EXPECT_EQ(io.buf[0], 0x7F);
    EXPECT_EQ(io.cmd.data_transferred, 36u);
    Io vpd(inquiry(true, 0x83, 255), Dir::FromDevice, 255);
    answer_absent_lun(vpd.cmd);
    EXPECT_EQ(vpd.status(), kStatusGood);
    EXPECT_EQ(vpd.buf[0], 0x7F);
    Io cut(inquiry(false, 0, 1), Dir::FromDevice, 96);
    answer_absent_lun(cut.cmd);
    EXPECT_EQ(cut.cmd.data_transferred, 1u);
    EXPECT_EQ(cut.buf[0], 0x7F);
}

TEST(AbsentLun, OtherCommandsFail) {
    for (auto cdb : {std::vector<uint8_t>{0x00, 0, 0, 0, 0, 0}, cdb10(0x28, 0, 1), cdb10(0x2A, 0, 1),
                     std::vector<uint8_t>{0x1A, 0, 0x3F, 0, 192, 0}}) {
        Io io(cdb, cdb[0] == 0x2A ? Dir::ToDevice : Dir::FromDevice, 512);
        answer_absent_lun(io.cmd);
        EXPECT_EQ(io.status(), kStatusCheckCondition) << int(cdb[0]);
        EXPECT_EQ(io.key(), kSenseIllegalRequest);
        EXPECT_EQ(io.asc(), 0x25);
        EXPECT_EQ(io.cmd.sense_len, 18);
        EXPECT_EQ(io.cmd.data_transferred, 0u);
    }
}

TEST(AbsentLun, RequestSenseReturnsTheReason) {
    Io io({0x03, 0, 0, 0, 18, 0}, Dir::FromDevice, 18);
    answer_absent_lun(io.cmd);
    EXPECT_EQ(io.status(), kStatusGood);
    EXPECT_EQ(io.buf[2], kSenseIllegalRequest);
    EXPECT_EQ(io.buf[12], 0x25);
}

std::vector<uint8_t> report_luns(uint32_t alloc, uint8_t select = 0) {
    std::vector<uint8_t> c(12);
    c[0] = 0xA0;
    c[2] = select;
    put_be(c, 6, alloc, 4);
    return c;
}

TEST(ReportLuns, Encoding) {
    const std::vector<uint16_t> luns = {0, 1, 255, 256, 300, 0x3FFF, 0x4000};
    Io io(report_luns(4096), Dir::FromDevice, 4096);
    answer_report_luns(io.cmd, luns);
    ASSERT_EQ(io.status(), kStatusGood);
    EXPECT_EQ(get_be(&io.buf[0], 4), 6u * 8);  // 0x4000 cannot be encoded
    EXPECT_EQ(io.cmd.data_transferred, 8u + 6 * 8);
    auto entry = [&](size_t i) { return get_be(&io.buf[8 + 8 * i], 8); };
    EXPECT_EQ(entry(0), 0x0000000000000000ULL);
    EXPECT_EQ(entry(1), 0x0001000000000000ULL);
    EXPECT_EQ(entry(2), 0x00FF000000000000ULL);
    EXPECT_EQ(entry(3), 0x4100000000000000ULL);  // flat space
    EXPECT_EQ(entry(4), 0x412C000000000000ULL);
    EXPECT_EQ(entry(5), 0x7FFF000000000000ULL);
}

TEST(ReportLuns, AllocationLengthAndSelect) {
    const std::vector<uint16_t> luns = {0, 1, 2};
    Io cut(report_luns(16), Dir::FromDevice, 4096);
    answer_report_luns(cut.cmd, luns);
    EXPECT_EQ(cut.status(), kStatusGood);
    EXPECT_EQ(cut.cmd.data_transferred, 16u);
    EXPECT_EQ(get_be(&cut.buf[0], 4), 24u);  // the full length, even when cut
    Io wk(report_luns(4096, 1), Dir::FromDevice, 4096);
    answer_report_luns(wk.cmd, luns);
    EXPECT_EQ(get_be(&wk.buf[0], 4), 0u);
    Io bad(report_luns(4096, 0x33), Dir::FromDevice, 4096);
    answer_report_luns(bad.cmd, luns);
    EXPECT_EQ(bad.status(), kStatusCheckCondition);
    EXPECT_EQ(bad.asc(), 0x24);
    Io none(report_luns(4096), Dir::FromDevice, 4096);
    answer_report_luns(none.cmd, {});
    EXPECT_EQ(none.cmd.data_transferred, 8u);
}

} // namespace
} // namespace hvstor::scsi::test
