// UNMAP and WRITE SAME.
#include "scsi_test.h"

namespace hvstor::scsi::test {
namespace {

struct Desc {
    uint64_t lba;
    uint32_t blocks;
};

std::vector<uint8_t> unmap_params(const std::vector<Desc>& d) {
    std::vector<uint8_t> p(8 + 16 * d.size());
    put_be(p, 0, p.size() - 2, 2);
    put_be(p, 2, 16 * d.size(), 2);
    for (size_t i = 0; i < d.size(); i++) {
        put_be(p, 8 + 16 * i, d[i].lba, 8);
        put_be(p, 8 + 16 * i + 8, d[i].blocks, 4);
    }
    return p;
}

std::unique_ptr<Io> unmap_io(const std::vector<uint8_t>& params, uint8_t b1 = 0) {
    std::vector<uint8_t> c(10);
    c[0] = 0x42;
    c[1] = b1;
    put_be(c, 7, params.size(), 2);
    auto io = std::make_unique<Io>(c, Dir::ToDevice, params.size());
    std::copy(params.begin(), params.end(), io->buf.begin());
    return io;
}

std::unique_ptr<Io> write_same(bool sixteen, uint64_t lba, uint32_t blocks, uint8_t flags, uint8_t fill,
                               size_t buf = 512) {
    auto c = sixteen ? cdb16(0x93, lba, blocks, flags) : cdb10(0x41, static_cast<uint32_t>(lba), static_cast<uint16_t>(blocks), flags);
    auto io = std::make_unique<Io>(c, buf ? Dir::ToDevice : Dir::None, buf);
    std::fill(io->buf.begin(), io->buf.end(), fill);
    return io;
}

struct UnmapFake : ::testing::Test {
    FakeBackend be{1 << 20};  // 2048 blocks
    DiskRig rig{be};
    void expect_fail(Io& io, uint8_t key, uint8_t asc) {
        rig.run(io);
        EXPECT_EQ(io.status(), kStatusCheckCondition);
        EXPECT_EQ(io.key(), key);
        EXPECT_EQ(io.asc(), asc);
    }
};

TEST_F(UnmapFake, OneDescriptorOneDiscard) {
    auto io = unmap_io(unmap_params({{16, 8}}));
    rig.run(*io);
    ASSERT_EQ(io->status(), kStatusGood);
    ASSERT_EQ(be.seen.size(), 1u);
    EXPECT_EQ(be.seen[0].op, Op::Discard);
    EXPECT_EQ(be.seen[0].offset, 16u * 512);
    EXPECT_EQ(be.seen[0].length, 8u * 512);
}

TEST_F(UnmapFake, SeveralDescriptorsOneCompletion) {
    be.defer = true;
    auto io = unmap_io(unmap_params({{0, 8}, {100, 0}, {200, 16}, {2040, 8}}));
    rig.disk.submit(&io->cmd);
    EXPECT_EQ(be.submit_calls, 1);
    ASSERT_EQ(be.seen.size(), 3u);  // the empty one is skipped
    EXPECT_EQ(be.seen[1].offset, 200u * 512);
    EXPECT_EQ(be.seen[2].length, 8u * 512);
    EXPECT_EQ(rig.sink.total(), 0u);
    be.release();
    rig.sink.wait_total(1);
    EXPECT_EQ(rig.sink.times(&io->cmd), 1);
    EXPECT_EQ(io->status(), kStatusGood);
}

TEST_F(UnmapFake, ErrorInOneOfSeveral) {
    be.result = -EIO;
    auto io = unmap_io(unmap_params({{0, 8}, {200, 16}}));
    rig.run(*io);
    EXPECT_EQ(io->status(), kStatusCheckCondition);
    EXPECT_EQ(io->key(), kSenseMediumError);
    EXPECT_EQ(rig.sink.total(), 1u);
}

TEST_F(UnmapFake, ValidatesEverythingBeforeDoingAnything) {
    auto oor = unmap_io(unmap_params({{0, 8}, {2047, 2}}));
    expect_fail(*oor, kSenseIllegalRequest, 0x21);
    std::vector<Desc> many(65, {0, 1});
    auto too_many = unmap_io(unmap_params(many));
    expect_fail(*too_many, kSenseIllegalRequest, 0x26);
    EXPECT_TRUE(be.seen.empty());
}

TEST_F(UnmapFake, ParameterListLengths) {
    auto p = unmap_params({{0, 8}});
    auto short_list = unmap_io(std::vector<uint8_t>(p.begin(), p.begin() + 6));
    expect_fail(*short_list, kSenseIllegalRequest, 0x1A);
    auto q = p;
    put_be(q, 2, 32, 2);  // descriptor length past the list
    auto past = unmap_io(q);
    expect_fail(*past, kSenseIllegalRequest, 0x1A);
    q = p;
    put_be(q, 0, 100, 2);  // data length past the list
    auto past2 = unmap_io(q);
    expect_fail(*past2, kSenseIllegalRequest, 0x1A);
    q = p;
    put_be(q, 0, 2, 2);  // data length too small for its descriptors
    auto inconsistent = unmap_io(q);
    expect_fail(*inconsistent, kSenseIllegalRequest, 0x1A);
    auto shortbuf = unmap_io(p);
    shortbuf->cmd.xfer_len = 10;
    expect_fail(*shortbuf, kSenseIllegalRequest, 0x1A);
    auto anchor = unmap_io(p, 0x01);
    expect_fail(*anchor, kSenseIllegalRequest, 0x24);
    EXPECT_TRUE(be.seen.empty());
    // A trailing partial descriptor is ignored.
    q = p;
    q.resize(q.size() + 8);
    put_be(q, 0, q.size() - 2, 2);
    put_be(q, 2, 16 + 8, 2);
    auto partial = unmap_io(q);
    rig.run(*partial);
    EXPECT_EQ(partial->status(), kStatusGood);
    EXPECT_EQ(be.seen.size(), 1u);
    auto empty = unmap_io({});
    rig.run(*empty);
    EXPECT_EQ(empty->status(), kStatusGood);
}

TEST_F(UnmapFake, WriteSameMapsToDiscardOrZeroes) {
    auto un = write_same(true, 10, 100, 0x08, 0);
    rig.run(*un);
    ASSERT_EQ(un->status(), kStatusGood);
    EXPECT_EQ(be.seen.back().op, Op::Discard);
    EXPECT_EQ(be.seen.back().offset, 10u * 512);
    EXPECT_EQ(be.seen.back().length, 100u * 512);
    auto zero = write_same(false, 20, 30, 0, 0);
    rig.run(*zero);
    ASSERT_EQ(zero->status(), kStatusGood);
    EXPECT_EQ(be.seen.back().op, Op::WriteZeroes);
    EXPECT_EQ(be.seen.back().length, 30u * 512);
    auto un10 = write_same(false, 20, 30, 0x08, 0);
    rig.run(*un10);
    EXPECT_EQ(be.seen.back().op, Op::Discard);
    auto ndob = write_same(true, 5, 5, 0x01, 0, 0);
    rig.run(*ndob);
    ASSERT_EQ(ndob->status(), kStatusGood);
    EXPECT_EQ(be.seen.back().op, Op::WriteZeroes);
    // A pattern with UNMAP set is written, not unmapped.
    auto pat = write_same(true, 0, 4, 0x08, 0x5C);
    rig.run(*pat);
    ASSERT_EQ(pat->status(), kStatusGood);
    EXPECT_EQ(be.seen.back().op, Op::Write);
    EXPECT_EQ(be.seen.back().length, 4u * 512);
}

// Each pattern command holds a buffer and makes the backend write up to a transfer's worth:
// only a few run at once per disk, the rest are answered BUSY, and a finished one makes room.
TEST_F(UnmapFake, PatternWriteSamesInFlightAreBounded) {
    be.defer = true;
    std::vector<std::unique_ptr<Io>> ios;
    for (int i = 0; i < 6; i++) ios.push_back(write_same(true, 0, 512, 0, 0x5C));
    for (auto& io : ios) rig.disk.submit(&io->cmd);
    rig.sink.wait_total(2); // the two past the bound complete at once
    EXPECT_EQ(ios[4]->status(), kStatusBusy);
    EXPECT_EQ(ios[5]->status(), kStatusBusy);
    const size_t held = be.seen.size();
    EXPECT_EQ(held, 4u) << "one request each: 512 blocks fit in one";
    be.release();
    rig.sink.wait_total(6);
    for (int i = 0; i < 4; i++) EXPECT_EQ(ios[size_t(i)]->status(), kStatusGood);
    auto again = write_same(true, 0, 512, 0, 0x5C);
    rig.disk.submit(&again->cmd);
    EXPECT_EQ(be.seen.size(), held + 1) << "room again once they finished";
    be.release();
    rig.sink.wait_total(7);
    EXPECT_EQ(again->status(), kStatusGood);
}

TEST_F(UnmapFake, WriteSameBadCdbs) {
    auto zero_len = write_same(true, 0, 0, 0, 0);
    expect_fail(*zero_len, kSenseIllegalRequest, 0x24);
    auto huge = write_same(true, 0, 0x800000, 0, 0);
    expect_fail(*huge, kSenseIllegalRequest, 0x24);
    auto oor = write_same(true, 2040, 9, 0, 0);
    expect_fail(*oor, kSenseIllegalRequest, 0x21);
    auto anchor = write_same(true, 0, 1, 0x10, 0);
    expect_fail(*anchor, kSenseIllegalRequest, 0x24);
    auto prot = write_same(false, 0, 1, 0x20, 0);
    expect_fail(*prot, kSenseIllegalRequest, 0x24);
    auto shortbuf = write_same(true, 0, 1, 0, 0, 100);
    expect_fail(*shortbuf, kSenseIllegalRequest, 0x24);
    auto nobuf = write_same(false, 0, 1, 0, 0, 0);
    expect_fail(*nobuf, kSenseIllegalRequest, 0x24);
    EXPECT_TRUE(be.seen.empty());
}

// The work one command may ask for is bounded and advertised (Block Limits VPD): MAXIMUM
// WRITE SAME LENGTH, the maximum transfer length capped at 8 MiB as on Hyper-V, for every
// pattern; MAXIMUM UNMAP LBA COUNT, 2 GiB over all of an UNMAP's descriptors. At the limit a
// command runs; above it, it is refused with the sense SBC names and no backend I/O.
struct WorkLimits : ::testing::Test {
    FakeBackend be{8ull << 30}; // records requests, holds no data: room for 2 GiB ranges
    void expect_refused(DiskRig& rig, Io& io, uint8_t asc) {
        const size_t before = be.seen.size();
        rig.run(io);
        EXPECT_EQ(io.status(), kStatusCheckCondition);
        EXPECT_EQ(io.key(), kSenseIllegalRequest);
        EXPECT_EQ(io.asc(), asc);
        EXPECT_EQ(io.ascq(), 0);
        EXPECT_EQ(be.seen.size(), before) << "no backend I/O";
    }
    uint64_t vpd(DiskRig& rig, size_t at, size_t bytes) {
        Io io(inquiry(true, 0xB0, 64), Dir::FromDevice, 64);
        rig.run(io);
        EXPECT_EQ(io.status(), kStatusGood);
        return get_be(io.buf.data() + at, bytes);
    }
};

TEST_F(WorkLimits, WriteSameUpToTheMaximumTransferLength) {
    DiskRig rig{be}; // max transfer 256 KiB: 512 blocks
    ASSERT_EQ(vpd(rig, 36, 8), 512u) << "MAXIMUM WRITE SAME LENGTH";
    // At the limit, each kind: zeros, unmap, a pattern (written out), WRITE SAME(10).
    const struct {
        bool sixteen;
        uint8_t flags, fill;
        Op op;
    } kinds[] = {{true, 0, 0, Op::WriteZeroes}, {true, 0x08, 0, Op::Discard}, {true, 0, 0x5C, Op::Write},
                 {false, 0, 0, Op::WriteZeroes}, {false, 0x08, 0x5C, Op::Write}};
    for (const auto& k : kinds) {
        auto at = write_same(k.sixteen, 1000, 512, k.flags, k.fill);
        rig.run(*at);
        ASSERT_EQ(at->status(), kStatusGood);
        EXPECT_EQ(be.seen.back().op, k.op);
        EXPECT_EQ(be.seen.back().offset, 1000u * 512);
        EXPECT_EQ(be.seen.back().length, 512u * 512);
        auto above = write_same(k.sixteen, 1000, 513, k.flags, k.fill);
        expect_refused(rig, *above, 0x24); // INVALID FIELD IN CDB
    }
    // The command: a non-zero pattern over 2 GiB.
    auto huge = write_same(true, 0, 0x400000, 0, 0x5C);
    expect_refused(rig, *huge, 0x24);
}

TEST_F(WorkLimits, WriteSameIsCappedAt8MiBWhateverTheTransferLength) {
    DiskConfig cfg;
    cfg.max_transfer_bytes = 64 << 20;
    DiskRig rig{be, cfg};
    ASSERT_EQ(vpd(rig, 8, 4), (64u << 20) / 512) << "MAXIMUM TRANSFER LENGTH";
    ASSERT_EQ(vpd(rig, 36, 8), (8u << 20) / 512) << "MAXIMUM WRITE SAME LENGTH";
    auto at = write_same(true, 0, 16384, 0, 0x5C);
    rig.run(*at);
    ASSERT_EQ(at->status(), kStatusGood);
    EXPECT_EQ(be.seen.back().length, 8u << 20);
    auto above = write_same(true, 0, 16385, 0x08, 0);
    expect_refused(rig, *above, 0x24);
}

TEST_F(WorkLimits, UnmapUpTo2GiBPerCommand) {
    DiskRig rig{be};
    ASSERT_EQ(vpd(rig, 20, 4), 0x400000u) << "MAXIMUM UNMAP LBA COUNT: 2 GiB of 512-byte blocks";
    ASSERT_EQ(vpd(rig, 24, 4), 64u) << "MAXIMUM UNMAP BLOCK DESCRIPTOR COUNT";
    auto one = unmap_io(unmap_params({{0, 0x400000}}));
    rig.run(*one);
    ASSERT_EQ(one->status(), kStatusGood);
    EXPECT_EQ(be.seen.back().length, 2ull << 30);
    // The count is the sum over the list: two halves at the limit, one block more above it.
    auto halves = unmap_io(unmap_params({{0, 0x200000}, {0x800000, 0x200000}}));
    rig.run(*halves);
    ASSERT_EQ(halves->status(), kStatusGood);
    const size_t seen = be.seen.size();
    auto over = unmap_io(unmap_params({{0, 0x200000}, {0x800000, 0x200000}, {0xA00000, 1}}));
    expect_refused(rig, *over, 0x26); // INVALID FIELD IN PARAMETER LIST
    std::vector<Desc> many(64, {0, 0x10000});
    many.push_back({0, 0x10000});
    auto too_many = unmap_io(unmap_params(many));
    expect_refused(rig, *too_many, 0x26);
    auto one_over = unmap_io(unmap_params({{0, 0x400001}}));
    expect_refused(rig, *one_over, 0x26);
    EXPECT_EQ(be.seen.size(), seen);
}

TEST(UnmapReadOnly, DataProtect) {
    FakeBackend be(1 << 20, true);
    DiskRig rig{be};
    auto u = unmap_io(unmap_params({{0, 8}}));
    rig.run(*u);
    EXPECT_EQ(u->key(), kSenseDataProtect);
    EXPECT_EQ(u->asc(), 0x27);
    auto ws = write_same(true, 0, 8, 0x08, 0);
    rig.run(*ws);
    EXPECT_EQ(ws->key(), kSenseDataProtect);
    EXPECT_TRUE(be.seen.empty());
}

// On real backends the ranges read back as zeros afterwards.
void zeroing(Backend& be) {
    DiskConfig cfg;
    cfg.max_transfer_bytes = 8 << 20; // WRITE SAME of up to 8 MiB
    DiskRig rig{be, cfg};
    const uint32_t blocks = static_cast<uint32_t>(be.size() / 512);
    Io fill(cdb10(0x2A, 0, 256), Dir::ToDevice, 256 * 512);
    std::fill(fill.buf.begin(), fill.buf.end(), 0xA5);
    rig.run(fill);
    ASSERT_EQ(fill.status(), kStatusGood);
    auto u = unmap_io(unmap_params({{8, 8}, {64, 16}}));
    rig.run(*u);
    ASSERT_EQ(u->status(), kStatusGood);
    auto ws = write_same(false, 128, 8, 0, 0);
    rig.run(*ws);
    ASSERT_EQ(ws->status(), kStatusGood);
    auto wsu = write_same(true, 200, 8, 0x08, 0);
    rig.run(*wsu);
    ASSERT_EQ(wsu->status(), kStatusGood);
    Io back(cdb10(0x28, 0, 256), Dir::FromDevice, 256 * 512);
    rig.run(back);
    ASSERT_EQ(back.status(), kStatusGood);
    for (uint32_t b = 0; b < 256; b++) {
        const bool zero = (b >= 8 && b < 16) || (b >= 64 && b < 80) || (b >= 128 && b < 136) || (b >= 200 && b < 208);
        ASSERT_EQ(back.buf[b * 512], zero ? 0 : 0xA5) << b;
        ASSERT_EQ(back.buf[b * 512 + 511], zero ? 0 : 0xA5) << b;
    }
    // A pattern over more blocks than its buffer (1 MiB) holds: one buffer, many iovecs.
    const uint32_t n = std::min<uint32_t>(blocks - 300, 16384);
    auto pat = write_same(true, 300, n, 0, 0);
    for (size_t i = 0; i < 512; i++) pat->buf[i] = static_cast<uint8_t>(i + 1);
    rig.run(*pat);
    ASSERT_EQ(pat->status(), kStatusGood);
    EXPECT_EQ(pat->cmd.data_transferred, 512u);
    for (uint64_t lba : {uint64_t{300}, uint64_t{300} + n / 2, uint64_t{300} + n - 1}) {
        Io r(cdb16(0x88, lba, 1), Dir::FromDevice, 512);
        rig.run(r);
        for (size_t i = 0; i < 512; i++) ASSERT_EQ(r.buf[i], static_cast<uint8_t>(i + 1)) << lba;
    }
    Io after(cdb16(0x88, 300 + n, 1), Dir::FromDevice, 512);
    rig.run(after);
    EXPECT_EQ(after.buf[0], 0);
}

TEST(UnmapZeroing, Ram) {
    std::string err;
    auto be = backend::make_ram(64 << 20, err);
    ASSERT_TRUE(be);
    zeroing(*be);
}

TEST(UnmapZeroing, File) {
    TempFile f(64 << 20);
    std::string err;
    auto be = backend::open_file(f.path, backend::FileOptions{}, err);
    ASSERT_TRUE(be) << err;
    zeroing(*be);
    be->drain();
    EXPECT_EQ(f.read(8 * 512, 8 * 512), std::vector<uint8_t>(8 * 512, 0));
    EXPECT_EQ(f.read(16 * 512, 512), std::vector<uint8_t>(512, 0xA5));
}

} // namespace
} // namespace hvstor::scsi::test
