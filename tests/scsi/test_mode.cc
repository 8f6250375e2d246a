// MODE SENSE and MODE SELECT.
#include "scsi_test.h"

namespace hvstor::scsi::test {
namespace {

std::vector<uint8_t> sense6(uint8_t page, uint8_t alloc, bool dbd = false, uint8_t pc = 0) {
    return {0x1A, static_cast<uint8_t>(dbd ? 0x08 : 0), static_cast<uint8_t>(pc << 6 | page), 0, alloc, 0};
}
std::vector<uint8_t> sense10(uint8_t page, uint16_t alloc, bool dbd = false, bool llbaa = false) {
    std::vector<uint8_t> c(10);
    c[0] = 0x5A;
    c[1] = static_cast<uint8_t>((dbd ? 0x08 : 0) | (llbaa ? 0x10 : 0));
    c[2] = page;
    put_be(c, 7, alloc, 2);
    return c;
}

// Finds a page in MODE SENSE data; nullptr when absent.
const uint8_t* find_page(const std::vector<uint8_t>& d, size_t start, size_t end, uint8_t code) {
    for (size_t pos = start; pos + 2 <= end; pos += d[pos + 1] + 2u)
        if ((d[pos] & 0x3F) == code) return &d[pos];
    return nullptr;
}

struct ModeTest : ::testing::Test {
    FakeBackend be{1 << 20};
    DiskRig rig{be};
};

TEST_F(ModeTest, Sense6Caching) {
    Io io(sense6(0x08, 255), Dir::FromDevice, 255);
    rig.run(io);
    ASSERT_EQ(io.status(), kStatusGood);
    const auto& d = io.buf;
    const size_t total = d[0] + 1u;
    EXPECT_EQ(io.cmd.data_transferred, total);
    EXPECT_EQ(d[2] & 0x80, 0);  // not write protected
    EXPECT_TRUE(d[2] & 0x10);   // DPOFUA: the guest will send FUA
    ASSERT_EQ(d[3], 8);         // one block descriptor
    EXPECT_EQ(get_be(&d[4], 4), 2048u);
    EXPECT_EQ(get_be(&d[9], 3), 512u);
    const uint8_t* p = find_page(d, 12, total, 0x08);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(p[1], 0x12);
    EXPECT_TRUE(p[2] & 0x04);  // WCE
    EXPECT_EQ(total, 4u + 8 + 20);
}

TEST_F(ModeTest, Sense6AllPagesNoDescriptor) {
    Io io(sense6(0x3F, 255, true), Dir::FromDevice, 255);
    rig.run(io);
    ASSERT_EQ(io.status(), kStatusGood);
    const size_t total = io.buf[0] + 1u;
    EXPECT_EQ(io.buf[3], 0);
    EXPECT_NE(find_page(io.buf, 4, total, 0x08), nullptr);
    EXPECT_NE(find_page(io.buf, 4, total, 0x0A), nullptr);
    EXPECT_EQ(total, 4u + 20 + 12);
}

TEST_F(ModeTest, Sense10ControlAndLongLba) {
    Io io(sense10(0x0A, 512, false, true), Dir::FromDevice, 512);
    rig.run(io);
    ASSERT_EQ(io.status(), kStatusGood);
    const auto& d = io.buf;
    const size_t total = get_be(&d[0], 2) + 2;
    EXPECT_EQ(io.cmd.data_transferred, total);
    EXPECT_TRUE(d[4] & 0x01);  // LONGLBA
    ASSERT_EQ(get_be(&d[6], 2), 16u);
    EXPECT_EQ(get_be(&d[8], 8), 2048u);
    EXPECT_EQ(get_be(&d[20], 4), 512u);
    const uint8_t* p = find_page(d, 24, total, 0x0A);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(p[1], 0x0A);
}

TEST_F(ModeTest, AllocationLength) {
    Io io(sense6(0x3F, 4), Dir::FromDevice, 255);
    rig.run(io);
    EXPECT_EQ(io.status(), kStatusGood);
    EXPECT_EQ(io.cmd.data_transferred, 4u);
    EXPECT_EQ(io.buf[0], 4 + 8 + 20 + 12 - 1);  // the full length, even when cut
    Io io10(sense10(0x08, 3), Dir::FromDevice, 255);
    rig.run(io10);
    EXPECT_EQ(io10.cmd.data_transferred, 3u);
}

TEST_F(ModeTest, WriteProtectBit) {
    FakeBackend ro(1 << 20, true);
    DiskRig r{ro};
    Io io(sense6(0x3F, 255), Dir::FromDevice, 255);
    r.run(io);
    EXPECT_TRUE(io.buf[2] & 0x80);
    Io io10(sense10(0x3F, 255), Dir::FromDevice, 255);
    r.run(io10);
    EXPECT_TRUE(io10.buf[3] & 0x80);
}

TEST_F(ModeTest, PageControl) {
    Io changeable(sense6(0x08, 255, true, 1), Dir::FromDevice, 255);
    rig.run(changeable);
    ASSERT_EQ(changeable.status(), kStatusGood);
    EXPECT_EQ(changeable.buf[4 + 2], 0);  // nothing changeable
    Io deflt(sense6(0x08, 255, true, 2), Dir::FromDevice, 255);
    rig.run(deflt);
    EXPECT_TRUE(deflt.buf[4 + 2] & 0x04);
    Io saved(sense6(0x08, 255, true, 3), Dir::FromDevice, 255);
    rig.run(saved);
    EXPECT_EQ(saved.status(), kStatusCheckCondition);
    EXPECT_EQ(saved.asc(), 0x39);
}

TEST_F(ModeTest, UnsupportedPagesAndSubpages) {
    Io io(sense6(0x1C, 255), Dir::FromDevice, 255);
    rig.run(io);
    EXPECT_EQ(io.asc(), 0x24);
    auto c = sense6(0x08, 255);
    c[3] = 0x01;
    Io sub(c, Dir::FromDevice, 255);
    rig.run(sub);
    EXPECT_EQ(sub.asc(), 0x24);
    c = sense6(0x3F, 255);
    c[3] = 0xFF;  // all pages and subpages
    Io all(c, Dir::FromDevice, 255);
    rig.run(all);
    EXPECT_EQ(all.status(), kStatusGood);
}

// What Linux sends when cache_type is written: the current caching page with WCE/RCD
// changed and the header's device-specific byte cleared.
std::vector<uint8_t> caching_select6(uint8_t byte2) {
    std::vector<uint8_t> p(4 + 20);
    p[4] = 0x08;
    p[5] = 0x12;
    p[6] = byte2;
    return p;
}

Io* select6(std::unique_ptr<Io>& holder, const std::vector<uint8_t>& params, uint8_t flags = 0x10) {
    std::vector<uint8_t> c = {0x15, flags, 0, 0, static_cast<uint8_t>(params.size()), 0};
    holder = std::make_unique<Io>(c, Dir::ToDevice, params.size());
    std::copy(params.begin(), params.end(), holder->buf.begin());
    return holder.get();
}

TEST_F(ModeTest, SelectAcceptsCachingChanges) {
    std::unique_ptr<Io> h;
    for (uint8_t b2 : {0x04, 0x00, 0x01, 0x05}) {
        Io* io = select6(h, caching_select6(b2));
        rig.run(*io);
        EXPECT_EQ(io->status(), kStatusGood) << int(b2);
        EXPECT_EQ(io->cmd.data_transferred, 24u);
    }
    // WCE stays on: the change is ignored.
    Io after(sense6(0x08, 255, true), Dir::FromDevice, 255);
    rig.run(after);
    EXPECT_TRUE(after.buf[6] & 0x04);
}

TEST_F(ModeTest, SelectRejectsMalformed) {
    std::unique_ptr<Io> h;
    auto expect = [&](const std::vector<uint8_t>& params, uint8_t asc, uint8_t flags = 0x10) {
        Io* io = select6(h, params, flags);
        rig.run(*io);
        EXPECT_EQ(io->status(), kStatusCheckCondition);
        EXPECT_EQ(io->key(), kSenseIllegalRequest);
        EXPECT_EQ(io->asc(), asc);
    };
    auto p = caching_select6(0x04);
    p[6] |= 0x40;  // a bit that is not changeable
    expect(p, 0x26);
    p = caching_select6(0x04);
    p[5] = 0x10;  // a page length other than ours
    expect(p, 0x26);
    p = caching_select6(0x04);
    p[4] = 0x1C;  // unknown page
    expect(p, 0x26);
    p = caching_select6(0x04);
    p.resize(10);  // page cut short
    expect(p, 0x1A);
    expect({0, 0}, 0x1A);               // shorter than a header
    expect(caching_select6(0x04), 0x24, 0x00);  // PF = 0
    std::vector<uint8_t> bd(4 + 8 + 20);  // block descriptor with another block size
    bd[3] = 8;
    put_be(bd, 4 + 5, 4096, 3);
    bd[12] = 0x08;
    bd[13] = 0x12;
    bd[14] = 0x04;
    expect(bd, 0x26);
    put_be(bd, 4 + 5, 512, 3);
    Io* ok = select6(h, bd);
    rig.run(*ok);
    EXPECT_EQ(ok->status(), kStatusGood);
    std::vector<uint8_t> odd_bd(4 + 4);
    odd_bd[3] = 4;
    expect(odd_bd, 0x26);
}

TEST_F(ModeTest, Select10AndEmptyList) {
    std::vector<uint8_t> params(8 + 12);
    params[8] = 0x0A;
    params[9] = 0x0A;
    params[11] = 0x10;
    std::vector<uint8_t> c(10);
    c[0] = 0x55;
    c[1] = 0x10;
    put_be(c, 7, params.size(), 2);
    Io io(c, Dir::ToDevice, params.size());
    std::copy(params.begin(), params.end(), io.buf.begin());
    rig.run(io);
    EXPECT_EQ(io.status(), kStatusGood);
    // The buffer is shorter than the parameter list length.
    Io shortb(c, Dir::ToDevice, 8);
    rig.run(shortb);
    EXPECT_EQ(shortb.asc(), 0x1A);
    Io empty({0x15, 0x10, 0, 0, 0, 0});
    rig.run(empty);
    EXPECT_EQ(empty.status(), kStatusGood);
}

} // namespace
} // namespace hvstor::scsi::test
