// Shared fixtures for the SCSI target and backend tests: a recording command sink, commands
// that own their buffers, CDB builders, a scriptable fake backend and temporary files.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/uio.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "hvstor/backend/backend.h"
#include "hvstor/scsi/disk.h"

namespace hvstor::scsi::test {

using backend::Backend;
using backend::Op;
using backend::Request;

// Counts completions, and how often each item completed.
template <typename T> class CompletionCounter {
public:
    void record(const T* x) {
        std::lock_guard lock(mu_);
        times_[x]++;
        total_++;
        cv_.notify_all();
    }
    // Waits until `n` completions in all have arrived, with no bound of its own (the test
    // runner's timeout ends a test that waits for ever).
    void wait_total(size_t n) {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return total_ >= n; });
    }
    size_t total() {
        std::lock_guard lock(mu_);
        return total_;
    }
    int times(const T* x) {
        std::lock_guard lock(mu_);
        auto it = times_.find(x);
        return it == times_.end() ? 0 : it->second;
    }

private:
    std::mutex mu_;
    std::condition_variable cv_;
    std::map<const T*, int> times_;
    size_t total_ = 0;
};

// Remembers every command completion.
class RecordingSink : public CommandSink, public CompletionCounter<Command> {
public:
    void command_done(Command* cmd) override { record(cmd); }
};

// A command with its own buffer. Not movable: the Command points into it.
struct Io {
    Command cmd;
    std::vector<uint8_t> buf;
    iovec iov{};

    Io(const std::vector<uint8_t>& cdb, Dir dir = Dir::None, size_t len = 0) : buf(len) {
        std::copy(cdb.begin(), cdb.end(), cmd.cdb.begin());
        cmd.cdb_len = static_cast<uint8_t>(cdb.size());
        cmd.dir = dir;
        iov = {buf.data(), len};
        cmd.iov = len ? &iov : nullptr;
        cmd.iovcnt = len ? 1 : 0;
        cmd.xfer_len = static_cast<uint32_t>(len);
    }
    Io(const Io&) = delete;
    Io& operator=(const Io&) = delete;

    uint8_t status() const { return cmd.status; }
    uint8_t key() const { return cmd.sense_len ? cmd.sense[2] & 0x0F : 0; }
    uint8_t asc() const { return cmd.sense_len ? cmd.sense[12] : 0; }
    uint8_t ascq() const { return cmd.sense_len ? cmd.sense[13] : 0; }
};

inline void put_be(std::vector<uint8_t>& v, size_t at, uint64_t x, size_t bytes) {
    for (size_t i = 0; i < bytes; i++) v[at + i] = static_cast<uint8_t>(x >> (8 * (bytes - 1 - i)));
}
inline uint64_t get_be(const uint8_t* p, size_t bytes) {
    uint64_t x = 0;
    for (size_t i = 0; i < bytes; i++) x = x << 8 | p[i];
    return x;
}

// CDB builders. `flags` is byte 1.
inline std::vector<uint8_t> cdb6(uint8_t op, uint32_t lba, uint8_t len, uint8_t b1 = 0) {
    std::vector<uint8_t> c(6);
    c[0] = op;
    c[1] = static_cast<uint8_t>(b1 | ((lba >> 16) & 0x1F));
    c[2] = static_cast<uint8_t>(lba >> 8);
    c[3] = static_cast<uint8_t>(lba);
    c[4] = len;
    return c;
}
inline std::vector<uint8_t> cdb10(uint8_t op, uint32_t lba, uint16_t len, uint8_t flags = 0) {
    std::vector<uint8_t> c(10);
    c[0] = op;
    c[1] = flags;
    put_be(c, 2, lba, 4);
    put_be(c, 7, len, 2);
    return c;
}
inline std::vector<uint8_t> cdb12(uint8_t op, uint32_t lba, uint32_t len, uint8_t flags = 0) {
    std::vector<uint8_t> c(12);
    c[0] = op;
    c[1] = flags;
    put_be(c, 2, lba, 4);
    put_be(c, 6, len, 4);
    return c;
}
inline std::vector<uint8_t> cdb16(uint8_t op, uint64_t lba, uint32_t len, uint8_t flags = 0) {
    std::vector<uint8_t> c(16);
    c[0] = op;
    c[1] = flags;
    put_be(c, 2, lba, 8);
    put_be(c, 10, len, 4);
    return c;
}
inline std::vector<uint8_t> inquiry(bool evpd, uint8_t page, uint16_t alloc) {
    std::vector<uint8_t> c(6);
    c[0] = 0x12;
    c[1] = evpd ? 1 : 0;
    c[2] = page;
    put_be(c, 3, alloc, 2);
    return c;
}

// A disk over some backend, with synchronous helpers.
struct DiskRig {
    RecordingSink sink;
    Disk disk;
    DiskRig(Backend& be, const DiskConfig& cfg = {}) : disk(be, cfg, sink) {}

    // Submits and waits for the completion; checks it came exactly once.
    void run(Io& io) {
        const size_t before = sink.total();
        const int times_before = sink.times(&io.cmd);  // tests reuse addresses
        disk.submit(&io.cmd);
        sink.wait_total(before + 1);
        EXPECT_EQ(sink.times(&io.cmd), times_before + 1);
        EXPECT_EQ(sink.total(), before + 1);
    }
};

// Records what reaches it. Completes inline with `result` unless `defer` is set, in which
// case release() completes everything held. Reads fill buffers with `fill`.
class FakeBackend : public Backend {
public:
    explicit FakeBackend(uint64_t size = 64 << 20, bool ro = false) : size_(size), ro_(ro) {}
    uint64_t size() const override { return size_; }
    uint32_t block_size() const override { return 512; }
    bool read_only() const override { return ro_; }
    std::string describe() const override { return "fake"; }
    void submit(std::span<Request* const> reqs) override {
        std::vector<Request*> now;
        {
            std::lock_guard lock(mu_);
            submit_calls++;
            for (Request* r : reqs) {
                seen.push_back(*r);
                if (defer)
                    held_.push_back(r);
                else
                    now.push_back(r);
            }
        }
        for (Request* r : now) finish(r);
    }
    void drain() override {}
    void release() {
        std::vector<Request*> h;
        {
            std::lock_guard lock(mu_);
            h.swap(held_);
        }
        for (Request* r : h) finish(r);
    }

    int result = 0;
    bool defer = false;
    uint8_t fill = 0xAB;
    int submit_calls = 0;
    std::vector<Request> seen;

private:
    void finish(Request* r) {
        if (r->op == Op::Read && result == 0)
            for (uint32_t i = 0; i < r->iovcnt; i++) std::memset(r->iov[i].iov_base, fill, r->iov[i].iov_len);
        r->result = result;
        r->done->complete(r);
    }
    std::mutex mu_;
    std::vector<Request*> held_;
    uint64_t size_;
    bool ro_;
};

// A file of `size` zero bytes under /tmp (ext4 here, so O_DIRECT works), removed at the end.
struct TempFile {
    std::string path;
    explicit TempFile(uint64_t size) {
        char name[] = "/tmp/hvstor-scsi-XXXXXX";
        const int fd = mkstemp(name);
        EXPECT_GE(fd, 0);
        path = name;
        EXPECT_EQ(ftruncate(fd, static_cast<off_t>(size)), 0);
        close(fd);
    }
    ~TempFile() { unlink(path.c_str()); }
    std::vector<uint8_t> read(uint64_t off, size_t len) const {
        std::vector<uint8_t> v(len);
        const int fd = open(path.c_str(), O_RDONLY);
        EXPECT_EQ(pread(fd, v.data(), len, static_cast<off_t>(off)), static_cast<ssize_t>(len));
        close(fd);
        return v;
    }
    void write(uint64_t off, const std::vector<uint8_t>& v) const {
        const int fd = open(path.c_str(), O_WRONLY);
        EXPECT_EQ(pwrite(fd, v.data(), v.size(), static_cast<off_t>(off)), static_cast<ssize_t>(v.size()));
        close(fd);
    }
};

// Page-aligned memory, as O_DIRECT likes it and guest memory is.
struct AlignedBuf {
    uint8_t* p;
    size_t n;
    explicit AlignedBuf(size_t len) : p(static_cast<uint8_t*>(std::aligned_alloc(4096, (len + 4095) / 4096 * 4096))), n(len) {
        std::memset(p, 0, (len + 4095) / 4096 * 4096);
    }
    ~AlignedBuf() { std::free(p); }
    AlignedBuf(const AlignedBuf&) = delete;
    AlignedBuf& operator=(const AlignedBuf&) = delete;
};

// Waits for backend requests in tests of the backends alone.
class BackendSink : public backend::CompletionSink, public CompletionCounter<Request> {
public:
    void complete(Request* r) override { record(r); }
};

} // namespace hvstor::scsi::test
