// The block backends on their own: validation, data round trips, file specifics.
#include <sys/stat.h>

#include <climits>
#include <thread>

#include "scsi_test.h"

namespace hvstor::scsi::test {
namespace {

using backend::FileOptions;

// Runs one request synchronously and returns its result.
int run(Backend& be, Request& r) {
    BackendSink sink;
    r.done = &sink;
    r.result = 12345;
    Request* p = &r;
    be.submit(std::span<Request* const>(&p, 1));
    sink.wait_total(1);
    be.drain();
    EXPECT_EQ(sink.times(&r), 1);
    return r.result;
}

Request rw(Op op, uint64_t off, iovec* iov, uint32_t cnt, uint64_t len) {
    Request r;
    r.op = op;
    r.offset = off;
    r.length = len;
    r.iov = iov;
    r.iovcnt = cnt;
    return r;
}

// Every backend refuses the same malformed requests.
void check_validation(Backend& be) {
    std::vector<uint8_t> buf(4096);
    iovec iov{buf.data(), 4096};
    Request r = rw(Op::Read, 1, &iov, 1, 4096);  // misaligned offset
    EXPECT_EQ(run(be, r), -EINVAL);
    r = rw(Op::Read, 0, &iov, 1, 4000);  // misaligned length (and iov mismatch)
    EXPECT_EQ(run(be, r), -EINVAL);
    r = rw(Op::Read, be.size() - 512, &iov, 1, 4096);  // past the end
    EXPECT_EQ(run(be, r), -EINVAL);
    r = rw(Op::Read, UINT64_MAX - 511, &iov, 1, 4096);  // wraps
    EXPECT_EQ(run(be, r), -EINVAL);
    r = rw(Op::Read, 0, &iov, 1, 2048);  // iov total larger than length
    EXPECT_EQ(run(be, r), -EINVAL);
    iovec small{buf.data(), 1024};
    r = rw(Op::Write, 0, &small, 1, 2048);  // iov total smaller than length
    EXPECT_EQ(run(be, r), -EINVAL);
    r = rw(Op::Write, 0, nullptr, 1, 512);  // no list
    EXPECT_EQ(run(be, r), -EINVAL);
    r = rw(static_cast<Op>(99), 0, &iov, 1, 4096);  // no such op
    EXPECT_EQ(run(be, r), -EINVAL);
    r = rw(Op::Discard, be.size(), nullptr, 0, 512);
    EXPECT_EQ(run(be, r), -EINVAL);
    r = rw(Op::WriteZeroes, 256, nullptr, 0, 512);
    EXPECT_EQ(run(be, r), -EINVAL);
    r = rw(Op::Read, 0, &iov, 1, 4096);  // and a good one passes
    EXPECT_EQ(run(be, r), 0);
}

TEST(BackendValidation, Ram) {
    std::string err;
    auto be = backend::make_ram(1 << 20, err);
    ASSERT_TRUE(be) << err;
    check_validation(*be);
}

TEST(BackendValidation, Null) {
    std::string err;
    auto be = backend::make_null(1 << 20, err);
    ASSERT_TRUE(be) << err;
    check_validation(*be);
}

TEST(BackendValidation, File) {
    TempFile f(1 << 20);
    std::string err;
    auto be = backend::open_file(f.path, FileOptions{}, err);
    ASSERT_TRUE(be) << err;
    check_validation(*be);
}

TEST(BackendValidation, ReadOnlyFileRefusesModification) {
    TempFile f(1 << 20);
    std::string err;
    auto be = backend::open_file(f.path, FileOptions{.read_only = true, .direct = true}, err);
    ASSERT_TRUE(be) << err;
    EXPECT_TRUE(be->read_only());
    EXPECT_NE(be->describe().find("read-only"), std::string::npos);
    AlignedBuf buf(4096);
    iovec iov{buf.p, 4096};
    Request r = rw(Op::Write, 0, &iov, 1, 4096);
    EXPECT_EQ(run(*be, r), -EROFS);
    r = rw(Op::Discard, 0, nullptr, 0, 4096);
    EXPECT_EQ(run(*be, r), -EROFS);
    r = rw(Op::WriteZeroes, 0, nullptr, 0, 4096);
    EXPECT_EQ(run(*be, r), -EROFS);
    r = rw(Op::Read, 0, &iov, 1, 4096);
    EXPECT_EQ(run(*be, r), 0);
    r = rw(Op::Flush, 0, nullptr, 0, 0);
    EXPECT_EQ(run(*be, r), 0);
}

TEST(BackendFactories, RefuseBadSizesAndPaths) {
    std::string err;
    EXPECT_FALSE(backend::make_ram(0, err));
    EXPECT_FALSE(err.empty());
    err.clear();
    EXPECT_FALSE(backend::make_ram(1000, err));
    EXPECT_FALSE(err.empty());
    err.clear();
    EXPECT_FALSE(backend::open_file("/nonexistent/hvstor/disk.img", FileOptions{}, err));
    EXPECT_NE(err.find("/nonexistent/hvstor/disk.img"), std::string::npos);
    TempFile odd(1000);
    err.clear();
    EXPECT_FALSE(backend::open_file(odd.path, FileOptions{}, err));
    EXPECT_NE(err.find("512"), std::string::npos);
    err.clear();
    EXPECT_FALSE(backend::open_file("/tmp", FileOptions{}, err));
    EXPECT_FALSE(err.empty());
    auto n = backend::make_null(12345, err);  // any size
    ASSERT_TRUE(n);
    EXPECT_EQ(n->size(), 12345u);
}

TEST(BackendDescribe, Names) {
    std::string err;
    EXPECT_EQ(backend::make_ram(1 << 30, err)->describe(), "ram:1G");
    EXPECT_EQ(backend::make_null(3 << 20, err)->describe(), "null:3M");
    TempFile f(1 << 20);
    auto d = backend::open_file(f.path, FileOptions{}, err);
    ASSERT_TRUE(d) << err;
    EXPECT_EQ(d->describe(), "file:" + f.path + " (O_DIRECT)");  // /tmp is ext4 here
    auto b = backend::open_file(f.path, FileOptions{.read_only = false, .direct = false}, err);
    ASSERT_TRUE(b) << err;
    EXPECT_EQ(b->describe(), "file:" + f.path);
}

TEST(RamBackend, RoundTripAndZeroing) {
    std::string err;
    auto be = backend::make_ram(1 << 20, err);
    ASSERT_TRUE(be);
    std::vector<uint8_t> w(64 * 1024);
    for (size_t i = 0; i < w.size(); i++) w[i] = static_cast<uint8_t>(i * 7 + 1);
    iovec wi[2] = {{w.data(), 1000}, {w.data() + 1000, w.size() - 1000}};
    Request r = rw(Op::Write, 8192, wi, 2, w.size());
    ASSERT_EQ(run(*be, r), 0);
    std::vector<uint8_t> back(w.size());
    iovec ri{back.data(), back.size()};
    r = rw(Op::Read, 8192, &ri, 1, back.size());
    ASSERT_EQ(run(*be, r), 0);
    EXPECT_EQ(back, w);
    // Zero a range that starts and ends inside pages and spans whole ones.
    r = rw(Op::WriteZeroes, 8192 + 512, nullptr, 0, 3 * 4096 + 1024);
    ASSERT_EQ(run(*be, r), 0);
    r = rw(Op::Read, 8192, &ri, 1, back.size());
    ASSERT_EQ(run(*be, r), 0);
    for (size_t i = 0; i < back.size(); i++) {
        const bool zeroed = i >= 512 && i < 512 + 3 * 4096 + 1024;
        ASSERT_EQ(back[i], zeroed ? 0 : w[i]) << i;
    }
    r = rw(Op::Discard, 8192, nullptr, 0, w.size());
    ASSERT_EQ(run(*be, r), 0);
    r = rw(Op::Read, 8192, &ri, 1, back.size());
    ASSERT_EQ(run(*be, r), 0);
    EXPECT_EQ(back, std::vector<uint8_t>(back.size(), 0));
}

TEST(NullBackend, ReadsZerosDropsWrites) {
    std::string err;
    auto be = backend::make_null(1 << 20, err);
    std::vector<uint8_t> buf(4096, 0x5A);
    iovec iov{buf.data(), buf.size()};
    Request r = rw(Op::Write, 0, &iov, 1, 4096);
    EXPECT_EQ(run(*be, r), 0);
    r = rw(Op::Read, 0, &iov, 1, 4096);
    EXPECT_EQ(run(*be, r), 0);
    EXPECT_EQ(buf, std::vector<uint8_t>(4096, 0));
}

class FileBackendTest : public ::testing::TestWithParam<bool> {};

TEST_P(FileBackendTest, AlignedAndMisalignedRoundTrip) {
    TempFile f(4 << 20);
    std::string err;
    auto be = backend::open_file(f.path, FileOptions{.read_only = false, .direct = GetParam()}, err);
    ASSERT_TRUE(be) << err;
    EXPECT_EQ(be->size(), 4u << 20);

    // Aligned: the O_DIRECT path when enabled.
    AlignedBuf a(8192);
    for (size_t i = 0; i < a.n; i++) a.p[i] = static_cast<uint8_t>(i ^ 0x33);
    iovec ai{a.p, a.n};
    Request r = rw(Op::Write, 4096, &ai, 1, a.n);
    ASSERT_EQ(run(*be, r), 0);

    // Misaligned buffer address and odd segment lengths: must not fail.
    std::vector<uint8_t> raw(3 * 512 + 64);
    uint8_t* m = raw.data() + 8;
    for (size_t i = 0; i < 3 * 512; i++) m[i] = static_cast<uint8_t>(0xC0 + i % 31);
    iovec mi[3] = {{m, 100}, {m + 100, 1000}, {m + 1100, 436}};
    r = rw(Op::Write, 65536, mi, 3, 1536);
    ASSERT_EQ(run(*be, r), 0);
    be->drain();

    EXPECT_EQ(f.read(4096, a.n), std::vector<uint8_t>(a.p, a.p + a.n));
    EXPECT_EQ(f.read(65536, 1536), std::vector<uint8_t>(m, m + 1536));

    // And read both back through the other kind of buffer.
    std::vector<uint8_t> raw2(8192 + 64);
    uint8_t* m2 = raw2.data() + 3;
    iovec m2i[2] = {{m2, 5000}, {m2 + 5000, 3192}};
    r = rw(Op::Read, 4096, m2i, 2, 8192);
    ASSERT_EQ(run(*be, r), 0);
    EXPECT_EQ(std::vector<uint8_t>(m2, m2 + 8192), std::vector<uint8_t>(a.p, a.p + a.n));
    AlignedBuf b(4096);
    iovec bi{b.p, 1536};
    r = rw(Op::Read, 65536, &bi, 1, 1536);
    ASSERT_EQ(run(*be, r), 0);
    EXPECT_EQ(std::vector<uint8_t>(b.p, b.p + 1536), std::vector<uint8_t>(m, m + 1536));
}

TEST_P(FileBackendTest, FuaFlushDiscardZeroes) {
    TempFile f(1 << 20);
    f.write(0, std::vector<uint8_t>(1 << 20, 0xEE));
    std::string err;
    auto be = backend::open_file(f.path, FileOptions{.read_only = false, .direct = GetParam()}, err);
    ASSERT_TRUE(be) << err;
    AlignedBuf a(4096);
    std::memset(a.p, 0x11, 4096);
    iovec ai{a.p, 4096};
    Request r = rw(Op::Write, 0, &ai, 1, 4096);
    r.fua = true;
    ASSERT_EQ(run(*be, r), 0);
    EXPECT_EQ(f.read(0, 4096), std::vector<uint8_t>(4096, 0x11));
    r = rw(Op::Flush, 0, nullptr, 0, 0);
    ASSERT_EQ(run(*be, r), 0);
    r = rw(Op::Discard, 8192, nullptr, 0, 8192);
    ASSERT_EQ(run(*be, r), 0);
    EXPECT_EQ(f.read(8192, 8192), std::vector<uint8_t>(8192, 0));  // a hole
    r = rw(Op::WriteZeroes, 65536 + 512, nullptr, 0, 1024);
    ASSERT_EQ(run(*be, r), 0);
    EXPECT_EQ(f.read(65536, 512), std::vector<uint8_t>(512, 0xEE));
    EXPECT_EQ(f.read(65536 + 512, 1024), std::vector<uint8_t>(1024, 0));
    EXPECT_EQ(f.read(65536 + 1536, 512), std::vector<uint8_t>(512, 0xEE));
    // Empty ranges are fine.
    r = rw(Op::Discard, 0, nullptr, 0, 0);
    EXPECT_EQ(run(*be, r), 0);
    r = rw(Op::Read, 0, nullptr, 0, 0);
    EXPECT_EQ(run(*be, r), 0);
}

// More segments than one preadv takes: served by the slow path, still correct.
TEST_P(FileBackendTest, ManySegments) {
    TempFile f(4 << 20);
    std::string err;
    auto be = backend::open_file(f.path, FileOptions{.read_only = false, .direct = GetParam()}, err);
    ASSERT_TRUE(be) << err;
    const size_t segs = IOV_MAX + 100;
    AlignedBuf a(segs * 512);
    for (size_t i = 0; i < a.n; i++) a.p[i] = static_cast<uint8_t>(i / 512 + i);
    std::vector<iovec> iov(segs);
    for (size_t i = 0; i < segs; i++) iov[i] = {a.p + i * 512, 512};
    Request r = rw(Op::Write, 512, iov.data(), static_cast<uint32_t>(segs), a.n);
    ASSERT_EQ(run(*be, r), 0);
    EXPECT_EQ(f.read(512, a.n), std::vector<uint8_t>(a.p, a.p + a.n));
    AlignedBuf b(a.n);
    for (size_t i = 0; i < segs; i++) iov[i] = {b.p + i * 512, 512};
    r = rw(Op::Read, 512, iov.data(), static_cast<uint32_t>(segs), b.n);
    ASSERT_EQ(run(*be, r), 0);
    EXPECT_EQ(std::memcmp(a.p, b.p, a.n), 0);
}

// A large batch from several threads at once: each request completes exactly once and
// drain() returns only after all have.
TEST_P(FileBackendTest, ConcurrentBatchesAndDrain) {
    TempFile f(16 << 20);
    std::string err;
    auto be = backend::open_file(f.path, FileOptions{.read_only = false, .direct = GetParam()}, err);
    ASSERT_TRUE(be) << err;
    constexpr int kThreads = 4, kPerThread = 1500;  // more than the AIO context holds
    BackendSink sink;
    std::vector<Request> reqs(kThreads * kPerThread);
    AlignedBuf mem(kThreads * kPerThread * 4096);
    std::vector<iovec> iov(reqs.size());
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; t++) {
        threads.emplace_back([&, t] {
            std::vector<Request*> batch;
            for (int i = 0; i < kPerThread; i++) {
                const size_t k = static_cast<size_t>(t * kPerThread + i);
                iov[k] = {mem.p + k * 4096, 4096};
                std::memset(mem.p + k * 4096, static_cast<int>(k % 251), 4096);
                reqs[k] = rw(Op::Write, (k % 4096) * 4096, &iov[k], 1, 4096);
                reqs[k].done = &sink;
                batch.push_back(&reqs[k]);
            }
            be->submit(batch);
        });
    }
    for (auto& th : threads) th.join();
    be->drain();
    EXPECT_EQ(sink.total(), reqs.size());
    for (auto& r : reqs) {
        EXPECT_EQ(sink.times(&r), 1);
        EXPECT_EQ(r.result, 0);
    }
    // Requests k and k+4096 share a block; the one of them that landed last is there.
    auto got = f.read(0, 4096);
    EXPECT_TRUE(got[0] == 0 || got[0] == 4096 % 251) << int(got[0]);
}

// A file that shrank under the backend: the kernel returns a short read, the rest is
// retried, finds end of file, and the request fails with -EIO instead of hanging or
// reporting success. What lies before the end still arrives.
TEST_P(FileBackendTest, ShortReadAtShrunkEndFails) {
    TempFile f(1 << 20);
    f.write((1 << 20) - 4096, std::vector<uint8_t>(4096, 0x3C));
    std::string err;
    auto be = backend::open_file(f.path, FileOptions{.read_only = false, .direct = GetParam()}, err);
    ASSERT_TRUE(be) << err;
    ASSERT_EQ(truncate(f.path.c_str(), (1 << 20) - 2048), 0);
    AlignedBuf a(4096);
    iovec iov[3] = {{a.p, 1024}, {a.p + 1024, 1024}, {a.p + 2048, 2048}};
    Request r = rw(Op::Read, (1 << 20) - 4096, iov, 3, 4096);
    EXPECT_EQ(run(*be, r), -EIO);
    EXPECT_EQ(std::vector<uint8_t>(a.p, a.p + 2048), std::vector<uint8_t>(2048, 0x3C));
}

INSTANTIATE_TEST_SUITE_P(Direct, FileBackendTest, ::testing::Values(true, false),
                         [](const auto& info) { return info.param ? "ODirect" : "Buffered"; });

// The backend may be destroyed right after drain() with nothing pending, and at once with
// requests still in flight (its destructor drains).
// Growing extends the file and keeps what it held; shrinking leaves the file as long as it
// is and refuses requests past the new end; growing again zeroes what that exposes.
TEST_P(FileBackendTest, ResizeGrowsTheFileAndKeepsData) {
    TempFile f(1 << 20);
    std::vector<uint8_t> head(4096, 0x11), tail(4096, 0x22);
    f.write(0, head);
    f.write((1 << 20) - 4096, tail);
    std::string err;
    auto be = backend::open_file(f.path, FileOptions{.read_only = false, .direct = GetParam()}, err);
    ASSERT_TRUE(be) << err;
    ASSERT_TRUE(be->resize(3 << 20, err)) << err;
    EXPECT_EQ(be->size(), 3u << 20);
    struct stat st {};
    ASSERT_EQ(stat(f.path.c_str(), &st), 0);
    EXPECT_EQ(st.st_size, 3 << 20) << "the file grew";
    EXPECT_EQ(f.read(0, 4096), head);
    EXPECT_EQ(f.read((1 << 20) - 4096, 4096), tail);
    AlignedBuf a(8192);
    std::memset(a.p, 0x33, a.n);
    iovec ai{a.p, a.n};
    Request r = rw(Op::Write, (3 << 20) - 8192, &ai, 1, a.n);
    EXPECT_EQ(run(*be, r), 0) << "a write at the new end";
    EXPECT_EQ(f.read((3 << 20) - 8192, 8192), std::vector<uint8_t>(8192, 0x33));
    EXPECT_EQ(f.read(2 << 20, 4096), std::vector<uint8_t>(4096, 0)) << "the rest of the growth reads zeros";

    ASSERT_TRUE(be->resize(512 << 10, err)) << err;
    EXPECT_EQ(be->size(), 512u << 10);
    ASSERT_EQ(stat(f.path.c_str(), &st), 0);
    EXPECT_EQ(st.st_size, 3 << 20) << "a shrink keeps the file";
    r = rw(Op::Read, 512 << 10, &ai, 1, a.n);
    EXPECT_EQ(run(*be, r), -EINVAL) << "past the new end";
    r = rw(Op::Read, 0, &ai, 1, 4096);
    ai.iov_len = 4096;
    EXPECT_EQ(run(*be, r), 0);
    EXPECT_EQ(std::vector<uint8_t>(a.p, a.p + 4096), head);

    ASSERT_TRUE(be->resize(2 << 20, err)) << err;
    ASSERT_EQ(stat(f.path.c_str(), &st), 0);
    EXPECT_EQ(st.st_size, 3 << 20) << "within the file: no truncation";
    EXPECT_EQ(f.read((1 << 20) - 4096, 4096), std::vector<uint8_t>(4096, 0)) << "what the grow exposed is zeroed";
    EXPECT_EQ(f.read(0, 4096), head);
    EXPECT_EQ(f.read((3 << 20) - 8192, 8192), std::vector<uint8_t>(8192, 0x33)) << "beyond the disk: untouched";
}

TEST(FileBackend, ResizeRefusals) {
    TempFile f(1 << 20);
    std::string err;
    auto ro = backend::open_file(f.path, FileOptions{.read_only = true, .direct = false}, err);
    ASSERT_TRUE(ro) << err;
    EXPECT_FALSE(ro->resize(2 << 20, err));
    EXPECT_EQ(err, "file backend: " + f.path + ": read-only, its size cannot change");
    auto rw_be = backend::open_file(f.path, FileOptions{.read_only = false, .direct = false}, err);
    ASSERT_TRUE(rw_be) << err;
    EXPECT_FALSE(rw_be->resize(1000, err));
    EXPECT_EQ(err, "file backend: " + f.path + ": size 1000 is not a positive multiple of 512");
    EXPECT_FALSE(rw_be->resize(0, err));
    EXPECT_FALSE(rw_be->resize(UINT64_MAX - 511, err));
    EXPECT_EQ(err, "file backend: " + f.path + ": cannot grow the file to " + std::to_string(UINT64_MAX - 511) +
                       " bytes: " + std::strerror(EFBIG));
    EXPECT_EQ(rw_be->size(), 1u << 20) << "nothing changed";
    EXPECT_EQ(f.read(0, 1).size(), 1u);
    struct stat st {};
    ASSERT_EQ(stat(f.path.c_str(), &st), 0);
    EXPECT_EQ(st.st_size, 1 << 20);
}

TEST(FileBackend, DestroyWithRequestsInFlight) {
    TempFile f(1 << 20);
    std::string err;
    BackendSink sink;
    AlignedBuf a(64 * 4096);
    std::vector<Request> reqs(64);
    std::vector<iovec> iov(64);
    {
        auto be = backend::open_file(f.path, FileOptions{}, err);
        ASSERT_TRUE(be) << err;
        std::vector<Request*> batch;
        for (size_t i = 0; i < 64; i++) {
            iov[i] = {a.p + i * 4096, 4096};
            reqs[i] = rw(i % 2 ? Op::Read : Op::Write, i * 4096, &iov[i], 1, 4096);
            reqs[i].done = &sink;
            batch.push_back(&reqs[i]);
        }
        Request fl = rw(Op::Flush, 0, nullptr, 0, 0);
        fl.done = &sink;
        batch.push_back(&fl);
        be->submit(batch);
    }
    EXPECT_EQ(sink.total(), 65u);
}

} // namespace
} // namespace hvstor::scsi::test
