// The small commands: TEST UNIT READY, START STOP UNIT, REQUEST SENSE, READ CAPACITY,
// VERIFY, SYNCHRONIZE CACHE, PERSISTENT RESERVE, and unknown opcodes.
#include "scsi_test.h"

namespace hvstor::scsi::test {
namespace {

struct CommandTest : ::testing::Test {
    FakeBackend be{1 << 20};
    DiskRig rig{be};
};

TEST_F(CommandTest, TestUnitReadyAndStartStop) {
    Io tur({0x00, 0, 0, 0, 0, 0});
    rig.run(tur);
    EXPECT_EQ(tur.status(), kStatusGood);
    EXPECT_EQ(tur.cmd.sense_len, 0);
    Io ssu({0x1B, 0, 0, 0, 0x01, 0});
    rig.run(ssu);
    EXPECT_EQ(ssu.status(), kStatusGood);
    EXPECT_TRUE(be.seen.empty());
}

TEST_F(CommandTest, RequestSense) {
    Io fixed({0x03, 0, 0, 0, 252, 0}, Dir::FromDevice, 252);
    rig.run(fixed);
    ASSERT_EQ(fixed.status(), kStatusGood);
    EXPECT_EQ(fixed.cmd.data_transferred, 18u);
    EXPECT_EQ(fixed.buf[0], 0x70);
    EXPECT_EQ(fixed.buf[2], kSenseNoSense);
    EXPECT_EQ(fixed.buf[7], 10);
    Io desc({0x03, 0x01, 0, 0, 252, 0}, Dir::FromDevice, 252);
    rig.run(desc);
    EXPECT_EQ(desc.cmd.data_transferred, 8u);
    EXPECT_EQ(desc.buf[0], 0x72);
    Io cut({0x03, 0, 0, 0, 4, 0}, Dir::FromDevice, 252);
    rig.run(cut);
    EXPECT_EQ(cut.cmd.data_transferred, 4u);
}

TEST_F(CommandTest, ReadCapacity10) {
    Io io({0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0}, Dir::FromDevice, 8);
    rig.run(io);
    ASSERT_EQ(io.status(), kStatusGood);
    EXPECT_EQ(io.cmd.data_transferred, 8u);
    EXPECT_EQ(get_be(&io.buf[0], 4), 2047u);
    EXPECT_EQ(get_be(&io.buf[4], 4), 512u);
    Io bad({0x25, 0, 0, 0, 0, 1, 0, 0, 0, 0}, Dir::FromDevice, 8);  // LBA without PMI
    rig.run(bad);
    EXPECT_EQ(bad.asc(), 0x24);
}

TEST_F(CommandTest, ReadCapacityOfHugeDisk) {
    FakeBackend big(5ULL << 40);  // 5 TiB: more blocks than 32 bits hold
    DiskRig r{big};
    Io io10({0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0}, Dir::FromDevice, 8);
    r.run(io10);
    EXPECT_EQ(get_be(&io10.buf[0], 4), 0xFFFFFFFFu);
    std::vector<uint8_t> c(16);
    c[0] = 0x9E;
    c[1] = 0x10;
    put_be(c, 10, 32, 4);
    Io io16(c, Dir::FromDevice, 32);
    r.run(io16);
    ASSERT_EQ(io16.status(), kStatusGood);
    EXPECT_EQ(io16.cmd.data_transferred, 32u);
    EXPECT_EQ(get_be(&io16.buf[0], 8), (5ULL << 40) / 512 - 1);
    EXPECT_EQ(get_be(&io16.buf[8], 4), 512u);
    EXPECT_TRUE(io16.buf[14] & 0x80);  // LBPME: the guest enables discard on this
    EXPECT_EQ(r.disk.blocks(), (5ULL << 40) / 512);
}

TEST_F(CommandTest, ReadCapacity16AllocationAndServiceAction) {
    std::vector<uint8_t> c(16);
    c[0] = 0x9E;
    c[1] = 0x10;
    put_be(c, 10, 12, 4);
    Io cut(c, Dir::FromDevice, 32);
    rig.run(cut);
    EXPECT_EQ(cut.cmd.data_transferred, 12u);
    c[1] = 0x12;  // GET LBA STATUS: not supported
    Io other(c, Dir::FromDevice, 32);
    rig.run(other);
    EXPECT_EQ(other.status(), kStatusCheckCondition);
    EXPECT_EQ(other.asc(), 0x24);
}

TEST_F(CommandTest, Verify) {
    Io v10(cdb10(0x2F, 100, 10), Dir::None, 0);
    rig.run(v10);
    EXPECT_EQ(v10.status(), kStatusGood);
    Io v16(cdb16(0x8F, 2040, 8), Dir::None, 0);
    rig.run(v16);
    EXPECT_EQ(v16.status(), kStatusGood);
    Io bad(cdb16(0x8F, 2040, 9), Dir::None, 0);
    rig.run(bad);
    EXPECT_EQ(bad.asc(), 0x21);
    EXPECT_TRUE(be.seen.empty());
}

TEST_F(CommandTest, SynchronizeCache) {
    Io s10(cdb10(0x35, 0, 0), Dir::None, 0);
    rig.run(s10);
    EXPECT_EQ(s10.status(), kStatusGood);
    ASSERT_EQ(be.seen.size(), 1u);
    EXPECT_EQ(be.seen[0].op, Op::Flush);
    Io s16(cdb16(0x91, 10, 10), Dir::None, 0);
    rig.run(s16);
    EXPECT_EQ(s16.status(), kStatusGood);
    EXPECT_EQ(be.seen.back().op, Op::Flush);
    EXPECT_EQ(rig.disk.stats().flushes.load(), 2u);
    Io bad(cdb10(0x35, 4000, 1), Dir::None, 0);
    rig.run(bad);
    EXPECT_EQ(bad.asc(), 0x21);
    be.result = -EIO;
    Io fail(cdb10(0x35, 0, 0), Dir::None, 0);
    rig.run(fail);
    EXPECT_EQ(fail.key(), kSenseMediumError);
}

TEST_F(CommandTest, PersistentReserve) {
    std::vector<uint8_t> in(10);
    in[0] = 0x5E;
    in[1] = 0x00;  // READ KEYS
    put_be(in, 7, 64, 2);
    Io keys(in, Dir::FromDevice, 64);
    keys.buf.assign(64, 0xFF);
    rig.run(keys);
    ASSERT_EQ(keys.status(), kStatusGood);
    EXPECT_EQ(keys.cmd.data_transferred, 8u);
    EXPECT_EQ(get_be(&keys.buf[0], 8), 0u);  // generation 0, no keys
    in[1] = 0x1F;
    Io bad(in, Dir::FromDevice, 64);
    rig.run(bad);
    EXPECT_EQ(bad.asc(), 0x24);
    std::vector<uint8_t> out(10);
    out[0] = 0x5F;
    Io o(out, Dir::ToDevice, 24);
    rig.run(o);
    EXPECT_EQ(o.status(), kStatusCheckCondition);
    EXPECT_EQ(o.key(), kSenseIllegalRequest);
    EXPECT_EQ(o.asc(), 0x20);
}

TEST_F(CommandTest, UnknownOpcodes) {
    for (uint8_t op : {0x01, 0x1E, 0x37, 0x7F, 0xA0, 0xC0, 0xFF}) {
        Io io({op, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0});
        rig.run(io);
        EXPECT_EQ(io.status(), kStatusCheckCondition) << int(op);
        EXPECT_EQ(io.key(), kSenseIllegalRequest);
        EXPECT_EQ(io.asc(), 0x20);
        EXPECT_EQ(io.ascq(), 0x00);
    }
    EXPECT_EQ(rig.disk.stats().errors.load(), 7u);
    EXPECT_EQ(rig.disk.stats().other.load(), 7u);
}

TEST(SetSense, FixedFormat) {
    Command c;
    c.status = kStatusGood;
    set_sense(c, kSenseHardwareError, 0x44, 0x01);
    EXPECT_EQ(c.status, kStatusCheckCondition);
    EXPECT_EQ(c.sense_len, 18);
    EXPECT_EQ(c.sense[0], 0x70);
    EXPECT_EQ(c.sense[2], kSenseHardwareError);
    EXPECT_EQ(c.sense[7], 10);
    EXPECT_EQ(c.sense[12], 0x44);
    EXPECT_EQ(c.sense[13], 0x01);
}

TEST(CopyIov, BothWays) {
    uint8_t a[3], b[5];
    iovec iov[3] = {{a, 3}, {nullptr, 0}, {b, 5}};
    const uint8_t src[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    EXPECT_EQ(copy_to_iov(iov, 3, src, 10), 8u);
    EXPECT_EQ(a[2], 3);
    EXPECT_EQ(b[0], 4);
    EXPECT_EQ(b[4], 8);
    EXPECT_EQ(copy_to_iov(iov, 3, src, 2), 2u);
    uint8_t dst[10] = {};
    EXPECT_EQ(copy_from_iov(iov, 3, dst, 10), 8u);
    EXPECT_EQ(dst[0], 1);
    EXPECT_EQ(dst[7], 8);
    EXPECT_EQ(copy_from_iov(iov, 3, dst, 4), 4u);
    EXPECT_EQ(copy_to_iov(nullptr, 0, src, 10), 0u);
}

} // namespace
} // namespace hvstor::scsi::test
