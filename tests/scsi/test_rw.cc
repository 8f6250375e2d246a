// READ / WRITE 6/10/12/16 through the disk: CDB decoding, limits, FUA, buffers, errors.
#include "scsi_test.h"

namespace hvstor::scsi::test {
namespace {

constexpr uint8_t kRead6 = 0x08, kWrite6 = 0x0A, kRead10 = 0x28, kWrite10 = 0x2A, kRead12 = 0xA8,
                  kWrite12 = 0xAA, kRead16 = 0x88, kWrite16 = 0x8A;
constexpr uint64_t kDiskBlocks = 2048;  // 1 MiB

struct RwTest : ::testing::Test {
    FakeBackend be{kDiskBlocks * 512};
    DiskRig rig{be};
    const Request& last() { return be.seen.back(); }
};

TEST_F(RwTest, DecodesEachForm) {
    struct Case {
        std::vector<uint8_t> cdb;
        Op op;
        uint64_t lba, blocks;
        bool fua;
    };
    const std::vector<Case> cases = {
        {cdb6(kRead6, 0x1F0102 % kDiskBlocks, 3), Op::Read, 0x1F0102 % kDiskBlocks, 3, false},
        {cdb6(kWrite6, 7, 2), Op::Write, 7, 2, false},
        {cdb10(kRead10, 100, 8), Op::Read, 100, 8, false},
        {cdb10(kWrite10, 200, 16, 0x08), Op::Write, 200, 16, true},
        {cdb12(kRead12, 300, 4), Op::Read, 300, 4, false},
        {cdb12(kWrite12, 400, 4, 0x08), Op::Write, 400, 4, true},
        {cdb16(kRead16, 500, 1), Op::Read, 500, 1, false},
        {cdb16(kWrite16, 600, 2, 0x08), Op::Write, 600, 2, true},
        {cdb16(kWrite16, 601, 2), Op::Write, 601, 2, false},
        {cdb10(kRead10, 10, 1, 0x08), Op::Read, 10, 1, false},  // FUA on a read is not passed on
    };
    for (const auto& c : cases) {
        const bool write = c.op == Op::Write;
        Io io(c.cdb, write ? Dir::ToDevice : Dir::FromDevice, c.blocks * 512);
        rig.run(io);
        ASSERT_EQ(io.status(), kStatusGood) << int(c.cdb[0]);
        EXPECT_EQ(io.cmd.data_transferred, c.blocks * 512);
        EXPECT_EQ(last().op, c.op);
        EXPECT_EQ(last().offset, c.lba * 512);
        EXPECT_EQ(last().length, c.blocks * 512);
        EXPECT_EQ(last().fua, c.fua) << int(c.cdb[0]);
        EXPECT_EQ(last().opaque, &io.cmd);
        if (!write) {
            EXPECT_EQ(io.buf[0], 0xAB);
        }
    }
}

TEST_F(RwTest, SixByteZeroMeans256) {
    Io io(cdb6(kRead6, 0, 0), Dir::FromDevice, 256 * 512);
    rig.run(io);
    ASSERT_EQ(io.status(), kStatusGood);
    EXPECT_EQ(last().length, 256u * 512);
    EXPECT_EQ(io.cmd.data_transferred, 256u * 512);
}

TEST_F(RwTest, ZeroLengthIsGoodAndNeverReachesBackend) {
    Io io(cdb10(kRead10, 5, 0), Dir::None, 0);
    rig.run(io);
    EXPECT_EQ(io.status(), kStatusGood);
    Io w(cdb16(kWrite16, 5, 0), Dir::None, 0);
    rig.run(w);
    EXPECT_EQ(w.status(), kStatusGood);
    EXPECT_TRUE(be.seen.empty());
}

TEST_F(RwTest, LbaOutOfRange) {
    for (auto cdb : {cdb10(kRead10, kDiskBlocks, 1), cdb10(kWrite10, kDiskBlocks - 1, 2),
                     cdb16(kRead16, ~0ULL, 1), cdb16(kRead16, kDiskBlocks - 4, 0xFFFFFFFF),
                     cdb12(kRead12, kDiskBlocks + 1, 0), cdb6(kRead6, kDiskBlocks - 1, 0)}) {
        const bool write = cdb[0] == kWrite10;
        Io io(cdb, write ? Dir::ToDevice : Dir::FromDevice, 4096);
        rig.run(io);
        EXPECT_EQ(io.status(), kStatusCheckCondition) << int(cdb[0]);
        EXPECT_EQ(io.key(), kSenseIllegalRequest);
        EXPECT_EQ(io.asc(), 0x21);
        EXPECT_EQ(io.ascq(), 0x00);
        EXPECT_EQ(io.cmd.data_transferred, 0u);
    }
    // The very last block is fine.
    Io ok(cdb10(kRead10, kDiskBlocks - 1, 1), Dir::FromDevice, 512);
    rig.run(ok);
    EXPECT_EQ(ok.status(), kStatusGood);
    EXPECT_EQ(be.seen.size(), 1u);
}

TEST_F(RwTest, OversizeTransferRefused) {
    // Default limit 256 KiB = 512 blocks.
    Io big(cdb10(kRead10, 0, 513), Dir::FromDevice, 513 * 512);
    rig.run(big);
    EXPECT_EQ(big.status(), kStatusCheckCondition);
    EXPECT_EQ(big.key(), kSenseIllegalRequest);
    EXPECT_EQ(big.asc(), 0x24);
    Io max(cdb10(kRead10, 0, 512), Dir::FromDevice, 512 * 512);
    rig.run(max);
    EXPECT_EQ(max.status(), kStatusGood);
}

TEST_F(RwTest, SenseFormat) {
    Io io(cdb10(kRead10, kDiskBlocks, 1), Dir::FromDevice, 512);
    rig.run(io);
    ASSERT_EQ(io.cmd.sense_len, 18);
    EXPECT_EQ(io.cmd.sense[0], 0x70);
    EXPECT_EQ(io.cmd.sense[7], 10);
}

TEST_F(RwTest, DirectionMismatch) {
    Io r(cdb10(kRead10, 0, 1), Dir::ToDevice, 512);
    rig.run(r);
    EXPECT_EQ(r.status(), kStatusCheckCondition);
    EXPECT_EQ(r.key(), kSenseIllegalRequest);
    Io w(cdb10(kWrite10, 0, 1), Dir::FromDevice, 512);
    rig.run(w);
    EXPECT_EQ(w.key(), kSenseIllegalRequest);
    Io n(cdb10(kWrite10, 0, 1), Dir::None, 0);
    rig.run(n);
    EXPECT_EQ(n.key(), kSenseIllegalRequest);
    EXPECT_TRUE(be.seen.empty());
}

TEST_F(RwTest, BufferSizes) {
    // Shorter than the transfer: refused.
    Io shortb(cdb10(kRead10, 0, 2), Dir::FromDevice, 1000);
    rig.run(shortb);
    EXPECT_EQ(shortb.status(), kStatusCheckCondition);
    EXPECT_EQ(shortb.asc(), 0x24);
    // xfer_len claiming more than the segments hold: refused.
    Io liar(cdb10(kRead10, 0, 2), Dir::FromDevice, 512);
    liar.cmd.xfer_len = 1024;
    rig.run(liar);
    EXPECT_EQ(liar.asc(), 0x24);
    EXPECT_TRUE(be.seen.empty());
    // Longer: only the transfer moves, and the backend sees an exact list (a copy that is
    // freed at completion, so it is checked while the request is held).
    be.defer = true;
    Io longb(cdb10(kRead10, 0, 2), Dir::FromDevice, 1500);
    rig.disk.submit(&longb.cmd);
    ASSERT_EQ(be.seen.size(), 1u);
    EXPECT_EQ(last().length, 1024u);
    ASSERT_EQ(last().iovcnt, 1u);
    EXPECT_NE(last().iov, &longb.iov);
    EXPECT_EQ(last().iov[0].iov_base, longb.buf.data());
    EXPECT_EQ(last().iov[0].iov_len, 1024u);
    be.release();
    rig.sink.wait_total(3);
    ASSERT_EQ(longb.status(), kStatusGood);
    EXPECT_EQ(longb.cmd.data_transferred, 1024u);
    EXPECT_EQ(longb.buf[1023], 0xAB);
    EXPECT_EQ(longb.buf[1024], 0x00);
}

TEST_F(RwTest, LongerBufferOnSegmentBoundaryUsesGuestList) {
    std::vector<uint8_t> a(1024), b(512);
    iovec iov[2] = {{a.data(), a.size()}, {b.data(), b.size()}};
    Io io(cdb10(kRead10, 0, 2), Dir::FromDevice, 0);
    io.cmd.iov = iov;
    io.cmd.iovcnt = 2;
    io.cmd.xfer_len = 1536;
    rig.run(io);
    ASSERT_EQ(io.status(), kStatusGood);
    EXPECT_EQ(last().iov, iov);
    EXPECT_EQ(last().iovcnt, 1u);
    EXPECT_EQ(b[0], 0);
}

TEST_F(RwTest, ProtectionFieldsRefused) {
    Io io(cdb10(kRead10, 0, 1, 0x20), Dir::FromDevice, 512);
    rig.run(io);
    EXPECT_EQ(io.asc(), 0x24);
    Io w(cdb16(kWrite16, 0, 1, 0x40), Dir::ToDevice, 512);
    rig.run(w);
    EXPECT_EQ(w.asc(), 0x24);
}

TEST_F(RwTest, BackendErrorsBecomeSense) {
    be.result = -EIO;
    Io r(cdb10(kRead10, 0, 1), Dir::FromDevice, 512);
    rig.run(r);
    EXPECT_EQ(r.status(), kStatusCheckCondition);
    EXPECT_EQ(r.key(), kSenseMediumError);
    EXPECT_EQ(r.asc(), 0x11);
    EXPECT_EQ(r.cmd.data_transferred, 0u);
    Io w(cdb10(kWrite10, 0, 1), Dir::ToDevice, 512);
    rig.run(w);
    EXPECT_EQ(w.key(), kSenseMediumError);
    EXPECT_EQ(w.asc(), 0x0C);
    be.result = -EROFS;
    Io p(cdb10(kWrite10, 0, 1), Dir::ToDevice, 512);
    rig.run(p);
    EXPECT_EQ(p.key(), kSenseDataProtect);
    EXPECT_EQ(p.asc(), 0x27);
    EXPECT_EQ(rig.disk.stats().errors.load(), 3u);
}

TEST_F(RwTest, BatchReachesBackendInOneSubmit) {
    be.defer = true;
    std::vector<std::unique_ptr<Io>> ios;
    std::vector<Command*> cmds;
    for (int i = 0; i < 10; i++) {
        const bool write = i % 2;
        ios.push_back(std::make_unique<Io>(cdb10(write ? kWrite10 : kRead10, static_cast<uint32_t>(i * 8), 8),
                                           write ? Dir::ToDevice : Dir::FromDevice, 4096));
        cmds.push_back(&ios.back()->cmd);
    }
    // An immediate answer in the middle does not split the batch.
    Io tur({0, 0, 0, 0, 0, 0});
    cmds.insert(cmds.begin() + 5, &tur.cmd);
    rig.disk.submit(cmds);
    EXPECT_EQ(be.submit_calls, 1);
    EXPECT_EQ(be.seen.size(), 10u);
    EXPECT_EQ(rig.sink.total(), 1u);  // only the TEST UNIT READY so far
    be.release();
    rig.sink.wait_total(11);
    for (Command* c : cmds) EXPECT_EQ(rig.sink.times(c), 1);
    const auto& s = rig.disk.stats();
    EXPECT_EQ(s.reads.load(), 5u);
    EXPECT_EQ(s.writes.load(), 5u);
    EXPECT_EQ(s.bytes_read.load(), 5u * 4096);
    EXPECT_EQ(s.bytes_written.load(), 5u * 4096);
    EXPECT_EQ(s.other.load(), 1u);
}

TEST_F(RwTest, LargeBatchStillOneSubmit) {
    be.defer = true;
    std::vector<std::unique_ptr<Io>> ios;
    std::vector<Command*> cmds;
    for (int i = 0; i < 200; i++) {
        ios.push_back(std::make_unique<Io>(cdb10(kRead10, static_cast<uint32_t>(i), 1), Dir::FromDevice, 512));
        cmds.push_back(&ios.back()->cmd);
    }
    rig.disk.submit(cmds);
    EXPECT_EQ(be.submit_calls, 1);
    EXPECT_EQ(be.seen.size(), 200u);
    be.release();
    rig.sink.wait_total(200);
    for (Command* c : cmds) {
        EXPECT_EQ(rig.sink.times(c), 1);
        EXPECT_EQ(c->status, kStatusGood);
    }
}

TEST(RwReadOnly, WritesGetDataProtect) {
    FakeBackend be(1 << 20, /*ro=*/true);
    DiskRig rig{be};
    for (auto cdb : {cdb10(kWrite10, 0, 1), cdb6(kWrite6, 0, 1), cdb16(kWrite16, 0, 1), cdb12(kWrite12, 0, 1)}) {
        Io io(cdb, Dir::ToDevice, 512);
        rig.run(io);
        EXPECT_EQ(io.status(), kStatusCheckCondition);
        EXPECT_EQ(io.key(), kSenseDataProtect);
        EXPECT_EQ(io.asc(), 0x27);
    }
    Io r(cdb10(kRead10, 0, 1), Dir::FromDevice, 512);
    rig.run(r);
    EXPECT_EQ(r.status(), kStatusGood);
    EXPECT_EQ(be.seen.size(), 1u);
}

TEST(RwReadOnly, RealReadOnlyFile) {
    TempFile f(1 << 20);
    std::string err;
    auto be = backend::open_file(f.path, backend::FileOptions{.read_only = true, .direct = true}, err);
    ASSERT_TRUE(be) << err;
    DiskRig rig{*be};
    Io w(cdb10(kWrite10, 0, 1), Dir::ToDevice, 512);
    rig.run(w);
    EXPECT_EQ(w.key(), kSenseDataProtect);
    Io ws(cdb10(0x41, 0, 1), Dir::ToDevice, 512);
    rig.run(ws);
    EXPECT_EQ(ws.key(), kSenseDataProtect);
}

// Data written through the disk reads back, on RAM and on a file, with aligned and
// misaligned guest buffers.
void round_trip(Backend& be, const TempFile* file) {
    DiskRig rig{be};
    AlignedBuf a(64 * 1024);
    for (size_t i = 0; i < a.n; i++) a.p[i] = static_cast<uint8_t>(i * 13 + 5);
    iovec ai{a.p, a.n};
    Io w(cdb16(kWrite16, 64, 128, 0x08), Dir::ToDevice, 0);
    w.cmd.iov = &ai;
    w.cmd.iovcnt = 1;
    w.cmd.xfer_len = static_cast<uint32_t>(a.n);
    rig.run(w);
    ASSERT_EQ(w.status(), kStatusGood);

    std::vector<uint8_t> raw(3000 + 16);
    uint8_t* m = raw.data() + 5;
    for (size_t i = 0; i < 3 * 512; i++) m[i] = static_cast<uint8_t>(0x70 + i % 17);
    iovec mi[2] = {{m, 700}, {m + 700, 836}};
    Io w2(cdb10(kWrite10, 1000, 3), Dir::ToDevice, 0);
    w2.cmd.iov = mi;
    w2.cmd.iovcnt = 2;
    w2.cmd.xfer_len = 1536;
    rig.run(w2);
    ASSERT_EQ(w2.status(), kStatusGood);
    be.drain();

    Io r(cdb10(kRead10, 64, 128), Dir::FromDevice, a.n);
    rig.run(r);
    ASSERT_EQ(r.status(), kStatusGood);
    EXPECT_EQ(r.buf, std::vector<uint8_t>(a.p, a.p + a.n));
    Io r2(cdb12(kRead12, 1000, 3), Dir::FromDevice, 1536);
    rig.run(r2);
    EXPECT_EQ(r2.buf, std::vector<uint8_t>(m, m + 1536));
    if (file) {
        EXPECT_EQ(file->read(64 * 512, a.n), std::vector<uint8_t>(a.p, a.p + a.n));
        EXPECT_EQ(file->read(1000 * 512, 1536), std::vector<uint8_t>(m, m + 1536));
    }
}

TEST(RwRoundTrip, Ram) {
    std::string err;
    auto be = backend::make_ram(4 << 20, err);
    ASSERT_TRUE(be);
    round_trip(*be, nullptr);
}

TEST(RwRoundTrip, FileDirect) {
    TempFile f(4 << 20);
    std::string err;
    auto be = backend::open_file(f.path, backend::FileOptions{}, err);
    ASSERT_TRUE(be) << err;
    round_trip(*be, &f);
}

TEST(RwRoundTrip, FileBuffered) {
    TempFile f(4 << 20);
    std::string err;
    auto be = backend::open_file(f.path, backend::FileOptions{.read_only = false, .direct = false}, err);
    ASSERT_TRUE(be) << err;
    round_trip(*be, &f);
}

} // namespace
} // namespace hvstor::scsi::test
