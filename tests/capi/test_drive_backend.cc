// hv-disk's drive=: storage the QEMU glue provides through HvstorBlockOps. Well-formed
// requests reach the glue with their fields intact and complete once each, from the glue's
// own thread; bad ones are answered without it; freeing the disk drains the glue first.
#include <gtest/gtest.h>

#include <sys/uio.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "controller_fixture.h"
#include "disk_factory.h"
#include "fake_host.h"
#include "hvstor/capi.h"
#include "machine.h"

using namespace hvstor;
using hvstor::capi::DiskError;
using hvstor::capi::DiskFactory;
using hvstor::capi::DiskSpec;

namespace {

// The glue's side: a RAM image, requests queued by submit and completed by a thread of its
// own (QEMU completes them in an IOThread), the way HvstorBlockOps asks.
class FakeDrive {
public:
    explicit FakeDrive(uint64_t size, bool read_only = false)
        : image_(size), read_only_(read_only), worker_([this] { run(); }) {}
    ~FakeDrive() {
        {
            std::lock_guard lock(mu_);
            stop_ = true;
        }
        cv_.notify_all();
        worker_.join();
    }

    HvstorBlockOps ops() {
        HvstorBlockOps o{};
        o.opaque = this;
        o.size = image_.size();
        o.read_only = read_only_;
        o.name = name_.c_str();
        o.submit = [](void* self, const HvstorBlockIo* io, void* token) {
            static_cast<FakeDrive*>(self)->submit(*io, token);
        };
        o.drain = [](void* self) { static_cast<FakeDrive*>(self)->drain(); };
        o.length = [](void* self) { return static_cast<FakeDrive*>(self)->length_.load(); };
        return o;
    }

    std::vector<HvstorBlockIo> seen() {
        std::lock_guard lock(mu_);
        return seen_;
    }
    int drains() const { return drains_.load(); }
    // What QEMU's block_resize does to the node: the image's length changes.
    void set_length(uint64_t bytes) {
        image_.resize(bytes);
        length_ = bytes;
    }
    std::vector<uint8_t>& image() { return image_; }
    // Held requests wait for release() before they run.
    void hold() {
        std::lock_guard lock(mu_);
        held_ = true;
    }
    void release() {
        {
            std::lock_guard lock(mu_);
            held_ = false;
        }
        cv_.notify_all();
    }

private:
    struct Pending {
        HvstorBlockIo io;
        void* token;
    };

    void submit(const HvstorBlockIo& io, void* token) {
        {
            std::lock_guard lock(mu_);
            seen_.push_back(io);
            queue_.push_back({io, token});
            outstanding_++;
        }
        cv_.notify_all();
    }

    void drain() {
        drains_++;
        std::unique_lock lock(mu_);
        cv_.wait(lock, [this] { return outstanding_ == 0; });
    }

    void run() {
        std::unique_lock lock(mu_);
        for (;;) {
            cv_.wait(lock, [this] { return stop_ || (!queue_.empty() && !held_); });
            if (stop_) return;
            Pending p = queue_.front();
            queue_.pop_front();
            lock.unlock();
            const int r = execute(p.io);
            hvstor_block_complete(p.token, r);
            lock.lock();
            outstanding_--;
            cv_.notify_all();
        }
    }

    int execute(const HvstorBlockIo& io) {
        uint64_t at = io.offset;
        for (uint32_t i = 0; i < io.iovcnt; i++) {
            auto* buf = static_cast<uint8_t*>(io.iov[i].iov_base);
            if (io.op == HVSTOR_BLOCK_READ) std::memcpy(buf, image_.data() + at, io.iov[i].iov_len);
            if (io.op == HVSTOR_BLOCK_WRITE) std::memcpy(image_.data() + at, buf, io.iov[i].iov_len);
            at += io.iov[i].iov_len;
        }
        if (io.op == HVSTOR_BLOCK_WRITE_ZEROES)
            std::fill_n(image_.begin() + static_cast<std::ptrdiff_t>(io.offset), io.length, 0);
        return 0;
    }

    std::vector<uint8_t> image_;
    const bool read_only_;
    const std::string name_ = "drive:drive0 (fake)";
    std::mutex mu_;
    std::condition_variable cv_;
    std::deque<Pending> queue_;
    std::vector<HvstorBlockIo> seen_;
    uint64_t outstanding_ = 0;
    bool held_ = false;
    bool stop_ = false;
    std::atomic<int> drains_{0};
    std::atomic<uint64_t> length_{image_.size()};
    std::thread worker_;  // last: starts once the rest is built
};

// Counts completions and keeps each request's result; wait() for a number of them.
class Sink : public backend::CompletionSink {
public:
    void complete(backend::Request* r) override {
        std::lock_guard lock(mu_);
        results_.push_back(r->result);
        cv_.notify_all();
    }
    std::vector<int> wait(size_t n) {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return results_.size() >= n; });
        return results_;
    }

private:
    std::mutex mu_;
    std::condition_variable cv_;
    std::vector<int> results_;
};

backend::Request request(backend::Op op, uint64_t offset, std::vector<uint8_t>& buf, iovec& iov, Sink& sink) {
    iov = {buf.data(), buf.size()};
    backend::Request r;
    r.op = op;
    r.offset = offset;
    r.length = buf.size();
    r.iov = &iov;
    r.iovcnt = 1;
    r.done = &sink;
    return r;
}

class DriveBackendTest : public capi::test::ControllerTest {
protected:
    DiskSpec spec(FakeDrive& drive) {
        DiskSpec s;
        s.backend = "drive";
        s.block = drive.ops();
        return s;
    }
};

TEST_F(DriveBackendTest, RequestsReachTheGlueAndCompleteFromItsThread) {
    FakeDrive drive(1 << 20);
    auto d = DiskFactory().attach(ctl(), spec(drive));
    EXPECT_EQ(d->backend().size(), 1u << 20);
    EXPECT_EQ(d->backend().describe(), "drive:drive0 (fake)");
    EXPECT_EQ(d->scsi().blocks(), 2048u);

    Sink sink;
    std::vector<uint8_t> out(8192, 0x5a), in(8192, 0);
    iovec wiov{}, riov{};
    backend::Request w = request(backend::Op::Write, 4096, out, wiov, sink);
    w.fua = true;
    backend::Request* wp = &w;
    d->backend().submit({&wp, 1});
    ASSERT_EQ(sink.wait(1), std::vector<int>({0}));
    backend::Request r = request(backend::Op::Read, 4096, in, riov, sink);
    backend::Request f;
    f.op = backend::Op::Flush;
    f.done = &sink;
    backend::Request* batch[] = {&r, &f};
    d->backend().submit(batch);
    EXPECT_EQ(sink.wait(3), std::vector<int>({0, 0, 0}));
    EXPECT_EQ(in, out);

    const auto seen = drive.seen();
    ASSERT_EQ(seen.size(), 3u);
    EXPECT_EQ(seen[0].op, HVSTOR_BLOCK_WRITE);
    EXPECT_TRUE(seen[0].fua);
    EXPECT_EQ(seen[0].offset, 4096u);
    EXPECT_EQ(seen[0].length, 8192u);
    EXPECT_EQ(seen[0].iovcnt, 1u);
    EXPECT_EQ(seen[1].op, HVSTOR_BLOCK_READ);
    EXPECT_FALSE(seen[1].fua);
    EXPECT_EQ(seen[2].op, HVSTOR_BLOCK_FLUSH);
}

TEST_F(DriveBackendTest, BadRequestsAreAnsweredWithoutTheGlue) {
    FakeDrive drive(1 << 20, /*read_only=*/true);
    auto d = DiskFactory().attach(ctl(), spec(drive));
    EXPECT_TRUE(d->backend().read_only());
    Sink sink;
    std::vector<uint8_t> buf(4096);
    iovec i1{}, i2{}, i3{};
    backend::Request past = request(backend::Op::Read, 1 << 20, buf, i1, sink);
    backend::Request odd = request(backend::Op::Read, 100, buf, i2, sink);
    backend::Request write = request(backend::Op::Write, 0, buf, i3, sink);
    backend::Request* batch[] = {&past, &odd, &write};
    d->backend().submit(batch);
    EXPECT_EQ(sink.wait(3), std::vector<int>({-EINVAL, -EINVAL, -EROFS}));
    EXPECT_TRUE(drive.seen().empty());
}

TEST_F(DriveBackendTest, ReadOnlyOnTheDiskProtectsAWritableDrive) {
    FakeDrive drive(1 << 20);
    DiskSpec s = spec(drive);
    s.read_only = true;
    auto d = DiskFactory().attach(ctl(), s);
    EXPECT_TRUE(d->backend().read_only());
    Sink sink;
    std::vector<uint8_t> buf(4096, 1);
    iovec iov{};
    backend::Request w = request(backend::Op::Write, 0, buf, iov, sink);
    backend::Request* wp = &w;
    d->backend().submit({&wp, 1});
    EXPECT_EQ(sink.wait(1), std::vector<int>({-EROFS}));
    EXPECT_TRUE(drive.seen().empty());
}

TEST_F(DriveBackendTest, FreeingTheDiskWaitsForTheGlue) {
    FakeDrive drive(1 << 20);
    auto d = DiskFactory().attach(ctl(), spec(drive));
    Sink sink;
    std::vector<uint8_t> buf(4096);
    iovec iov{};
    backend::Request r = request(backend::Op::Read, 0, buf, iov, sink);
    backend::Request* rp = &r;
    drive.hold();
    d->backend().submit({&rp, 1});
    std::atomic<bool> freed{false};
    std::thread freer([&] {
        d.reset();
        freed = true;
    });
    // The free cannot finish before the held request has completed: it waits in the glue's
    // drain, which cannot return while the request is queued.
    while (drive.drains() == 0 && !freed.load()) std::this_thread::yield();
    EXPECT_FALSE(freed.load());
    drive.release();
    freer.join();
    EXPECT_EQ(sink.wait(1), std::vector<int>({0}));
    EXPECT_TRUE(freed.load());
}

// The disk's capacity follows the drive: up to the length the node has now (block_resize
// grows it), never past it.
// Hot removal for a VMM that must not block on it (QEMU's device_del runs under the BQL):
// when start_removal returns, the disk is off its LUN although its backend still holds a
// request; waiting for it, freeing the disk and calling done happen on a thread of the
// model once the backend lets the request go. (Were it to wait, this test would hang
// instead: the request is let go only after start_removal returns.)
TEST_F(DriveBackendTest, StartedRemovalDoesNotWaitForTheDisksRequests) {
    FakeDrive drive(1 << 20);
    drive.hold();
    capi::AttachedDisk& d = controller.add_disk(spec(drive));
    Sink sink;
    std::vector<uint8_t> buf(4096);
    iovec iov{};
    backend::Request r = request(backend::Op::Read, 0, buf, iov, sink);
    backend::Request* rp = &r;
    d.backend().submit({&rp, 1});
    ASSERT_EQ(drive.seen().size(), 1u);

    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    std::thread::id done_on;
    controller.start_removal(&d, [&] {
        std::lock_guard lock(mu);
        done = true;
        done_on = std::this_thread::get_id();
        cv.notify_all();
    });
    EXPECT_EQ(controller.disk_count(), 0u);
    {
        std::lock_guard lock(mu);
        EXPECT_FALSE(done) << "done before the disk's request finished";
    }
    EXPECT_THROW(controller.start_removal(&d, [] {}), std::invalid_argument) << "removed already";
    FakeDrive other(1 << 20);
    capi::AttachedDisk* next = nullptr;
    EXPECT_NO_THROW(next = &controller.add_disk(spec(other))) << "off its LUN at once: the LUN takes a new disk";
    if (next) controller.remove_disk(next); // before `other` goes

    drive.release();
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return done; });
    EXPECT_NE(done_on, std::this_thread::get_id());
    EXPECT_EQ(sink.wait(1), std::vector<int>({0})) << "the held request completed once";
}

TEST_F(DriveBackendTest, CapacityGoesUpToTheDrivesLength) {
    FakeDrive drive(1 << 20);
    auto d = DiskFactory().attach(ctl(), spec(drive));
    std::string err;
    EXPECT_FALSE(d->backend().resize(2 << 20, err));
    EXPECT_EQ(err, "drive:drive0 (fake) holds 1048576 bytes; the disk takes a non-zero multiple of 512 up to that, "
                   "not 2097152 (grow the drive with block_resize)");
    EXPECT_EQ(d->backend().size(), 1u << 20);
    drive.set_length(2 << 20);
    ASSERT_TRUE(d->backend().resize(2 << 20, err)) << err;
    EXPECT_EQ(d->backend().size(), 2u << 20);
    EXPECT_TRUE(d->backend().resize(512 << 10, err)) << err;
    EXPECT_EQ(d->backend().size(), 512u << 10);
    EXPECT_FALSE(d->backend().resize(1000, err));
    EXPECT_FALSE(d->backend().resize(0, err));

    // Requests are checked against the new size.
    Sink sink;
    std::vector<uint8_t> buf(4096);
    iovec iov{};
    backend::Request r = request(backend::Op::Read, 512 << 10, buf, iov, sink);
    backend::Request* rp = &r;
    d->backend().submit({&rp, 1});
    EXPECT_EQ(sink.wait(1), std::vector<int>({-EINVAL}));
}

TEST_F(DriveBackendTest, BadSettingsAreNamed) {
    FakeDrive odd(1000);
    EXPECT_EQ(refusal(spec(odd)), "drive: the image is 1000 bytes; hv-disk needs a non-zero multiple of 512");
    FakeDrive drive(1 << 20);
    DiskSpec s = spec(drive);
    s.block->drain = nullptr;
    EXPECT_EQ(refusal(s), "backend=drive: the glue gave no submit, drain or length");
    s = spec(drive);
    s.block.reset();
    EXPECT_EQ(refusal(s), "backend=drive needs drive=ID");
    s = spec(drive);
    s.backend = "ram";
    s.size = 4096;
    EXPECT_EQ(refusal(s), "drive= takes the place of a backend; backend=ram goes without it");
}

} // namespace
