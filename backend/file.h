// File (or block device) backend on Linux native AIO.
//
// Data path: reads and writes go to the kernel with io_submit, on an O_DIRECT descriptor
// when the request's buffers and offset suit the file's direct I/O alignment, else on a
// second, buffered descriptor of the same file (the kernel keeps the page cache coherent
// with direct I/O, and a guest buffer is never refused for its alignment). One reaper thread
// waits on an eventfd that every AIO completion signals and completes requests in batches.
// Requests beyond the AIO context's depth wait in a queue that the reaper feeds as slots
// free up, so submit() does not wait for a slot of ours. It can still sleep: when io_submit
// itself answers EAGAIN (the kernel's AIO limits), it retries after 50 us to 1 ms, a bounded
// number of times, before handing the request to a worker. FUA writes carry RWF_DSYNC.
//
// Slow path: a small pool of worker threads runs what AIO cannot do well, synchronously:
// flush (fdatasync: IOCB_CMD_FDSYNC is not supported by many file systems), discard and
// write-zeroes (fallocate, which has no AIO form), the remainder of a short read or write,
// a request the kernel refused at io_submit (for instance RWF_DSYNC on a kernel without
// per-request flags: the worker writes, then fdatasyncs), and a direct request refused for
// alignment (-EINVAL), which is retried buffered and turns O_DIRECT off for the file.
#pragma once

#include <libaio.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "hvstor/backend/backend.h"
#include "inflight.h"

namespace hvstor::backend::detail {

// Closes on destruction.
class Fd {
public:
    Fd() = default;
    explicit Fd(int fd) : fd_(fd) {}
    ~Fd() { reset(); }
    Fd(Fd&& o) noexcept : fd_(o.release()) {}
    Fd& operator=(Fd&& o) noexcept {
        if (this != &o) {
            reset();
            fd_ = o.release();
        }
        return *this;
    }
    int get() const { return fd_; }
    bool valid() const { return fd_ >= 0; }
    int release() {
        int fd = fd_;
        fd_ = -1;
        return fd;
    }
    void reset();

private:
    int fd_ = -1;
};

// One request in the file backend's hands. Pooled: the iocb must stay put while the
// kernel owns it, and the data path should not allocate.
struct FileIo {
    iocb cb{};
    Request* req = nullptr;
    uint64_t done_bytes = 0;  // progress already made, for resuming a short transfer
    bool direct = false;      // issued on the O_DIRECT descriptor
};

struct FileSetup {
    std::string path;
    bool read_only = false;
    Fd buffered;
    Fd direct;          // invalid when O_DIRECT is off or unsupported
    uint64_t size = 0;
    uint32_t mem_align = 4096;  // direct I/O: buffer address alignment
    uint32_t off_align = 4096;  // direct I/O: offset and segment length alignment
    bool block_device = false;
};

class FileBackend final : public Backend {
public:
    // Takes the opened descriptors; fails (nullptr, err) when AIO cannot be set up.
    static std::unique_ptr<Backend> create(FileSetup setup, std::string& err);
    ~FileBackend() override;
    FileBackend(const FileBackend&) = delete;
    FileBackend& operator=(const FileBackend&) = delete;

    uint64_t size() const override { return size_.load(std::memory_order_acquire); }
    uint32_t block_size() const override { return 512; }
    bool read_only() const override { return s_.read_only; }
    std::string describe() const override;
    void submit(std::span<Request* const> reqs) override;
    void drain() override { inflight_.wait(); }
    // io_submit on the buffered descriptor (direct=off, or a request O_DIRECT cannot take)
    // does the I/O before it returns; a busy kernel makes it retry.
    bool resize(uint64_t bytes, std::string& err) override;

private:
    explicit FileBackend(FileSetup setup) : s_(std::move(setup)), size_(s_.size) {}
    bool storage_length(uint64_t& len, std::string& err) const;
    bool grow(uint64_t old, uint64_t bytes, std::string& err);
    bool start(std::string& err);

    bool direct_ok(const Request& req) const;
    FileIo* acquire();
    void release(FileIo* io);
    void finish(FileIo* io, int result);

    // AIO data path (file.cc).
    void prepare(FileIo* io);
    void enqueue(std::span<FileIo* const> ios);
    void pump();
    void submit_now(FileIo** ios, size_t n);
    void reap_loop();
    bool on_event(FileIo* io, long res);

    // Synchronous slow path (file_sync.cc).
    void to_worker(FileIo* io);
    void worker_loop();
    int run_sync(FileIo& io);
    int transfer_sync(FileIo& io);
    int write_zeros_sync(uint64_t offset, uint64_t length);
    int zero_range(uint64_t offset, uint64_t length);

    FileSetup s_;
    // The disk's size: s_.size at open, then what resize() made it. The file may be longer
    // (a shrink leaves it as it is).
    std::atomic<uint64_t> size_;
    std::mutex resize_mu_;
    io_context_t ctx_ = nullptr;
    unsigned ctx_depth_ = 0;
    Fd efd_;  // signalled by every AIO completion, and once more to stop the reaper
    std::thread reaper_;
    std::atomic<bool> stopping_{false};
    // Cleared when a direct request fails for alignment we thought was right.
    std::atomic<bool> direct_enabled_{false};

    std::mutex pool_mu_;
    std::deque<FileIo> pool_storage_;  // deque: elements never move
    std::vector<FileIo*> pool_free_;

    std::mutex q_mu_;
    std::deque<FileIo*> pending_;  // waiting for a slot in the AIO context
    unsigned free_slots_ = 0;

    std::mutex w_mu_;
    std::condition_variable w_cv_;
    std::deque<FileIo*> work_;
    bool w_stop_ = false;
    std::vector<std::thread> workers_;

    Inflight inflight_;
};

} // namespace hvstor::backend::detail
