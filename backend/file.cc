#include "file.h"

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstring>

#include "validate.h"
#include "hvstor/thread.h"

namespace hvstor::backend {
namespace detail {

namespace {

constexpr uint32_t kBlock = 512;
// Requests handed to io_submit per call, and reaped per io_getevents call.
constexpr size_t kBatch = 64;
constexpr long kReapBatch = 128;
constexpr unsigned kWorkers = 2;
// A context this deep is never the bottleneck; smaller ones are tried when the
// system-wide aio-max-nr is nearly used up.
constexpr unsigned kDepths[] = {1024, 256, 64, 16};
// io_submit answering EAGAIN this many times in a row sends the request to a worker.
constexpr unsigned kBusyRetries = 1000;

std::string errno_text(int e) { return std::strerror(e); }

} // namespace

void Fd::reset() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
}

std::unique_ptr<Backend> FileBackend::create(FileSetup setup, std::string& err) {
    std::unique_ptr<FileBackend> be(new FileBackend(std::move(setup)));
    be->direct_enabled_ = be->s_.direct.valid();
    if (!be->start(err)) return nullptr;
    return be;
}

bool FileBackend::start(std::string& err) {
    efd_ = Fd(eventfd(0, EFD_CLOEXEC));
    if (!efd_.valid()) {
        err = "file backend: " + s_.path + ": eventfd: " + errno_text(errno);
        return false;
    }
    int r = -EINVAL;
    for (unsigned depth : kDepths) {
        ctx_ = nullptr;
        r = io_setup(static_cast<int>(depth), &ctx_);
        if (r == 0) {
            ctx_depth_ = depth;
            break;
        }
        ctx_ = nullptr;
        if (r != -EAGAIN) break;
    }
    if (r != 0) {
        err = "file backend: " + s_.path + ": io_setup: " + errno_text(-r);
        return false;
    }
    free_slots_ = ctx_depth_;
    reaper_ = start_thread("hvstor-aio", [this] { reap_loop(); });
    for (unsigned i = 0; i < kWorkers; i++) workers_.push_back(start_thread("hvstor-file", [this] { worker_loop(); }));
    return true;
}

FileBackend::~FileBackend() {
    drain();
    {
        std::lock_guard lock(w_mu_);
        w_stop_ = true;
    }
    w_cv_.notify_all();
    for (auto& t : workers_) t.join();
    if (reaper_.joinable()) {
        stopping_.store(true);
        const uint64_t one = 1;
        // A full counter (impossible here: the reaper reads it) would only delay the stop.
        while (write(efd_.get(), &one, sizeof one) < 0 && errno == EINTR) {
        }
        reaper_.join();
    }
    if (ctx_ != nullptr) io_destroy(ctx_);
}

std::string FileBackend::describe() const {
    std::string d = "file:" + s_.path;
    std::string flags;
    if (direct_enabled_.load(std::memory_order_relaxed)) flags = "O_DIRECT";
    if (s_.read_only) flags += flags.empty() ? "read-only" : ", read-only";
    if (!flags.empty()) d += " (" + flags + ")";
    return d;
}

// How many bytes the file (or device) holds now.
bool FileBackend::storage_length(uint64_t& len, std::string& err) const {
    const std::string who = "file backend: " + s_.path + ": ";
    if (s_.block_device) {
        if (ioctl(s_.buffered.get(), BLKGETSIZE64, &len) == 0) return true;
        err = who + "BLKGETSIZE64: " + errno_text(errno);
        return false;
    }
    struct stat st {};
    if (fstat(s_.buffered.get(), &st) == 0) {
        len = static_cast<uint64_t>(st.st_size);
        return true;
    }
    err = who + "fstat: " + errno_text(errno);
    return false;
}

// A shrink only lowers the size requests are checked against: the file keeps its length,
// so a write admitted before still lands inside it, and nothing past the new end is lost
// until a grow exposes it again (zeroed then).
bool FileBackend::resize(uint64_t bytes, std::string& err) {
    const std::string who = "file backend: " + s_.path;
    if (!resizable(who, bytes, kBlock, err)) return false;
    if (s_.read_only) {
        err = who + ": read-only, its size cannot change";
        return false;
    }
    std::lock_guard lock(resize_mu_);
    const uint64_t old = size_.load(std::memory_order_relaxed);
    if (bytes > old && !grow(old, bytes, err)) return false;
    size_.store(bytes, std::memory_order_release);
    return true;
}

// Makes [old, bytes) readable as zeros: what an earlier shrink left in the file is zeroed,
// and a file shorter than `bytes` is extended (a block device cannot be).
bool FileBackend::grow(uint64_t old, uint64_t bytes, std::string& err) {
    const std::string who = "file backend: " + s_.path + ": ";
    uint64_t len = 0;
    if (!storage_length(len, err)) return false;
    if (bytes > len && s_.block_device) {
        err = who + "cannot grow to " + std::to_string(bytes) + " bytes, the device holds " + std::to_string(len);
        return false;
    }
    const uint64_t stale_end = std::min(bytes, len);
    if (stale_end > old) {
        const int r = zero_range(old, stale_end - old);
        if (r != 0) {
            err = who + "zeroing the bytes a grow exposes: " + errno_text(-r);
            return false;
        }
    }
    if (bytes <= len) return true;
    int e = EFBIG;  // beyond what off_t holds
    if (bytes <= static_cast<uint64_t>(INT64_MAX)) e = ftruncate(s_.buffered.get(), static_cast<off_t>(bytes)) == 0 ? 0 : errno;
    if (e == 0) return true;
    err = who + "cannot grow the file to " + std::to_string(bytes) + " bytes: " + errno_text(e);
    return false;
}

FileIo* FileBackend::acquire() {
    std::lock_guard lock(pool_mu_);
    if (pool_free_.empty()) return &pool_storage_.emplace_back();
    FileIo* io = pool_free_.back();
    pool_free_.pop_back();
    return io;
}

void FileBackend::release(FileIo* io) {
    io->req = nullptr;
    std::lock_guard lock(pool_mu_);
    pool_free_.push_back(io);
}

void FileBackend::finish(FileIo* io, int result) {
    Request* req = io->req;
    // Released first: the completion may submit again and reuse it.
    release(io);
    end_request(*req, result);
}

bool FileBackend::direct_ok(const Request& req) const {
    if (!direct_enabled_.load(std::memory_order_relaxed)) return false;
    if (req.offset % s_.off_align != 0 || req.length % s_.off_align != 0) return false;
    for (uint32_t i = 0; i < req.iovcnt; i++) {
        if (reinterpret_cast<uintptr_t>(req.iov[i].iov_base) % s_.mem_align != 0) return false;
        if (req.iov[i].iov_len % s_.off_align != 0) return false;
    }
    return true;
}

void FileBackend::submit(std::span<Request* const> reqs) {
    if (reqs.empty()) return;
    inflight_.add(reqs.size());
    FileIo* batch[kBatch];
    size_t n = 0;
    uint64_t completed_here = 0;
    for (Request* req : reqs) {
        begin_request(*this, *req);
        const int r = validate(*req, size(), kBlock, s_.read_only);
        // Nothing to move for an empty range; an empty iovec list would only trouble the
        // kernel.
        if (r != 0 || (req->op != Op::Flush && req->length == 0)) {
            end_request(*req, r);
            completed_here++;
            continue;
        }
        FileIo* io = acquire();
        io->req = req;
        io->done_bytes = 0;
        io->direct = false;
        const bool data = req->op == Op::Read || req->op == Op::Write;
        if (data && req->iovcnt <= IOV_MAX) {
            prepare(io);
            batch[n++] = io;
            if (n == kBatch) {
                enqueue(std::span(batch, n));
                n = 0;
            }
        } else {
            to_worker(io);
        }
    }
    if (n != 0) enqueue(std::span(batch, n));
    inflight_.done(completed_here);
}

void FileBackend::prepare(FileIo* io) {
    const Request& r = *io->req;
    io->direct = direct_ok(r);
    const int fd = io->direct ? s_.direct.get() : s_.buffered.get();
    const int cnt = static_cast<int>(r.iovcnt);
    const auto off = static_cast<long long>(r.offset);
    if (r.op == Op::Read)
        io_prep_preadv(&io->cb, fd, r.iov, cnt, off);
    else
        io_prep_pwritev2(&io->cb, fd, r.iov, cnt, off, r.fua ? RWF_DSYNC : 0);
    io_set_eventfd(&io->cb, efd_.get());
    io->cb.data = io;
}

void FileBackend::enqueue(std::span<FileIo* const> ios) {
    {
        std::lock_guard lock(q_mu_);
        pending_.insert(pending_.end(), ios.begin(), ios.end());
    }
    pump();
}

// Moves pending requests into the kernel while the context has room. Called by submitters
// and by the reaper after it frees slots; both change the queue and the slot count under
// q_mu_ before pumping, so a request can never sit in the queue with free slots and
// nobody left to pump it.
void FileBackend::pump() {
    for (;;) {
        FileIo* batch[kBatch];
        size_t n = 0;
        {
            std::lock_guard lock(q_mu_);
            while (n < kBatch && free_slots_ > 0 && !pending_.empty()) {
                batch[n++] = pending_.front();
                pending_.pop_front();
                free_slots_--;
            }
        }
        if (n == 0) return;
        submit_now(batch, n);
    }
}

void FileBackend::submit_now(FileIo** ios, size_t n) {
    iocb* cbs[kBatch];
    for (size_t i = 0; i < n; i++) cbs[i] = &ios[i]->cb;
    size_t i = 0;
    unsigned busy = 0;
    while (i < n) {
        const int r = io_submit(ctx_, static_cast<long>(n - i), cbs + i);
        if (r > 0) {
            i += static_cast<size_t>(r);
            busy = 0;
            continue;
        }
        if ((r == -EAGAIN || r == -EINTR || r == 0) && busy < kBusyRetries) {
            busy++;
            std::this_thread::sleep_for(std::chrono::microseconds(busy < 10 ? 50 : 1000));
            continue;
        }
        // Refused outright (an unsupported flag, an odd buffer), or the kernel stayed busy
        // for a long time: the slow path needs no AIO slot and still finishes the request.
        {
            std::lock_guard lock(q_mu_);
            free_slots_++;
        }
        to_worker(ios[i]);
        i++;
        busy = 0;
    }
}

void FileBackend::reap_loop() {
    io_event events[kReapBatch];
    for (;;) {
        uint64_t count;
        if (read(efd_.get(), &count, sizeof count) < 0 && errno == EINTR) continue;
        // Set only after drain(): nothing is in flight any more.
        if (stopping_.load()) return;
        for (;;) {
            timespec no_wait{0, 0};
            const int n = io_getevents(ctx_, 0, kReapBatch, events, &no_wait);
            if (n == -EINTR) continue;
            if (n <= 0) break;
            {
                std::lock_guard lock(q_mu_);
                free_slots_ += static_cast<unsigned>(n);
            }
            uint64_t finished = 0;
            for (int k = 0; k < n; k++) {
                auto* io = static_cast<FileIo*>(events[k].data);
                if (on_event(io, static_cast<long>(events[k].res))) finished++;
            }
            inflight_.done(finished);
            pump();
        }
    }
}

// True when the request completed; false when it moved on to a worker.
bool FileBackend::on_event(FileIo* io, long res) {
    const Request& r = *io->req;
    if (res < 0) {
        if (res == -EINVAL && io->direct) {
            // Our idea of the direct I/O alignment was wrong for this file: stop using
            // O_DIRECT rather than pay a failed attempt on every request.
            direct_enabled_.store(false, std::memory_order_relaxed);
            io->done_bytes = 0;
            to_worker(io);
            return false;
        }
        finish(io, static_cast<int>(res));
        return true;
    }
    const uint64_t remaining = r.length - io->done_bytes;
    if (static_cast<uint64_t>(res) >= remaining) {
        finish(io, 0);
        return true;
    }
    io->done_bytes += static_cast<uint64_t>(res);
    to_worker(io);
    return false;
}

} // namespace detail

namespace {

// Direct I/O alignment of an open O_DIRECT descriptor. False when the kernel reports that
// this file cannot do direct I/O at all.
bool direct_alignment(detail::FileSetup& s) {
    struct statx stx {};
    if (statx(s.direct.get(), "", AT_EMPTY_PATH, STATX_DIOALIGN, &stx) == 0 &&
        (stx.stx_mask & STATX_DIOALIGN) != 0) {
        if (stx.stx_dio_offset_align == 0 || stx.stx_dio_mem_align == 0) return false;
        s.mem_align = stx.stx_dio_mem_align;
        s.off_align = stx.stx_dio_offset_align;
        return true;
    }
    // Kernels before 6.1 do not say. Their direct I/O wants both addresses and lengths
    // aligned to the logical block size of the device; for files 4 KiB covers every
    // common file system.
    if (s.block_device) {
        int lbs = 0;
        if (ioctl(s.direct.get(), BLKSSZGET, &lbs) == 0 && lbs > 0) {
            s.mem_align = s.off_align = static_cast<uint32_t>(lbs);
            return true;
        }
    }
    s.mem_align = s.off_align = 4096;
    return true;
}

} // namespace

std::unique_ptr<Backend> open_file(const std::string& path, const FileOptions& opts, std::string& err) {
    const std::string who = "file backend: " + path + ": ";
    detail::FileSetup s;
    s.path = path;
    s.read_only = opts.read_only;
    const int flags = (opts.read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC;
    s.buffered = detail::Fd(open(path.c_str(), flags));
    if (!s.buffered.valid()) {
        err = who + std::strerror(errno);
        return nullptr;
    }
    struct stat st {};
    if (fstat(s.buffered.get(), &st) != 0) {
        err = who + "fstat: " + std::strerror(errno);
        return nullptr;
    }
    if (S_ISREG(st.st_mode)) {
        s.size = static_cast<uint64_t>(st.st_size);
    } else if (S_ISBLK(st.st_mode)) {
        s.block_device = true;
        if (ioctl(s.buffered.get(), BLKGETSIZE64, &s.size) != 0) {
            err = who + "BLKGETSIZE64: " + std::strerror(errno);
            return nullptr;
        }
    } else {
        err = who + "not a regular file or block device";
        return nullptr;
    }
    if (s.size == 0 || s.size % 512 != 0) {
        err = who + "size " + std::to_string(s.size) + " is not a positive multiple of 512";
        return nullptr;
    }
    if (opts.direct) {
        s.direct = detail::Fd(open(path.c_str(), flags | O_DIRECT));
        if (!s.direct.valid()) {
            // EINVAL: the file system has no direct I/O; the buffered descriptor serves.
            if (errno != EINVAL) {
                err = who + "O_DIRECT: " + std::strerror(errno);
                return nullptr;
            }
        } else if (!direct_alignment(s)) {
            s.direct.reset();
        }
    }
    return detail::FileBackend::create(std::move(s), err);
}

} // namespace hvstor::backend
