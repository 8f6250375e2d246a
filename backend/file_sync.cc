// The file backend's synchronous slow path, run on its worker threads.
#include <fcntl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <vector>

#include "file.h"

namespace hvstor::backend::detail {

namespace {

// Segments handed to one preadv/pwritev call (always below IOV_MAX).
constexpr int kWindow = 64;
constexpr uint64_t kZeroChunk = 1 << 20;

// fallocate modes a file system or device may lack: the caller has a fallback.
bool unsupported(int e) { return e == EOPNOTSUPP || e == ENOSYS || e == EINVAL || e == ENOTTY; }

} // namespace

void FileBackend::to_worker(FileIo* io) {
    {
        std::lock_guard lock(w_mu_);
        work_.push_back(io);
    }
    w_cv_.notify_one();
}

void FileBackend::worker_loop() {
    for (;;) {
        FileIo* io;
        {
            std::unique_lock lock(w_mu_);
            w_cv_.wait(lock, [this] { return w_stop_ || !work_.empty(); });
            if (work_.empty()) return;
            io = work_.front();
            work_.pop_front();
        }
        finish(io, run_sync(*io));
        inflight_.done(1);
    }
}

int FileBackend::run_sync(FileIo& io) {
    const Request& r = *io.req;
    const int fd = s_.buffered.get();
    const auto off = static_cast<off_t>(r.offset);
    const auto len = static_cast<off_t>(r.length);
    switch (r.op) {
    case Op::Read:
    case Op::Write:
        return transfer_sync(io);
    case Op::Flush:
        // fdatasync on one descriptor covers the inode, so writes issued on either
        // descriptor are included.
        return fdatasync(fd) == 0 ? 0 : -errno;
    case Op::Discard:
        if (fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off, len) == 0) return 0;
        if (!unsupported(errno)) return -errno;
        return write_zeros_sync(r.offset, r.length);
    case Op::WriteZeroes:
        return zero_range(r.offset, r.length);
    }
    return -EINVAL;
}

int FileBackend::zero_range(uint64_t offset, uint64_t length) {
    const int fd = s_.buffered.get();
    const auto off = static_cast<off_t>(offset);
    const auto len = static_cast<off_t>(length);
    if (fallocate(fd, FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE, off, len) == 0) return 0;
    if (!unsupported(errno)) return -errno;
    // A hole reads back as zeros on files and block devices alike.
    if (fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off, len) == 0) return 0;
    if (!unsupported(errno)) return -errno;
    return write_zeros_sync(offset, length);
}

// Moves what is left of a read or write with plain preadv/pwritev on the buffered
// descriptor, which takes any alignment, resuming after `done_bytes`.
int FileBackend::transfer_sync(FileIo& io) {
    const Request& r = *io.req;
    const int fd = s_.buffered.get();
    uint64_t done = io.done_bytes;
    uint32_t idx = 0;
    size_t skip = static_cast<size_t>(done);
    while (idx < r.iovcnt && skip >= r.iov[idx].iov_len) {
        skip -= r.iov[idx].iov_len;
        idx++;
    }
    iovec window[kWindow];
    while (done < r.length) {
        int cnt = 0;
        for (uint32_t j = idx; j < r.iovcnt && cnt < kWindow; j++) {
            iovec v = r.iov[j];
            if (j == idx) {
                v.iov_base = static_cast<char*>(v.iov_base) + skip;
                v.iov_len -= skip;
            }
            if (v.iov_len != 0) window[cnt++] = v;
        }
        const auto pos = static_cast<off_t>(r.offset + done);
        const ssize_t n = r.op == Op::Read ? preadv(fd, window, cnt, pos) : pwritev(fd, window, cnt, pos);
        if (n < 0) {
            if (errno == EINTR) continue;
            return -errno;
        }
        if (n == 0) return -EIO;  // the file shrank under us
        done += static_cast<uint64_t>(n);
        skip += static_cast<size_t>(n);
        while (idx < r.iovcnt && skip >= r.iov[idx].iov_len) {
            skip -= r.iov[idx].iov_len;
            idx++;
        }
    }
    // One fdatasync also covers any part the AIO path already wrote with RWF_DSYNC or not.
    if (r.op == Op::Write && r.fua && fdatasync(fd) != 0) return -errno;
    return 0;
}

int FileBackend::write_zeros_sync(uint64_t offset, uint64_t length) {
    const int fd = s_.buffered.get();
    const std::vector<char> zeros(static_cast<size_t>(std::min(length, kZeroChunk)), 0);
    while (length != 0) {
        const size_t chunk = static_cast<size_t>(std::min<uint64_t>(length, zeros.size()));
        const ssize_t n = pwrite(fd, zeros.data(), chunk, static_cast<off_t>(offset));
        if (n < 0) {
            if (errno == EINTR) continue;
            return -errno;
        }
        if (n == 0) return -EIO;
        offset += static_cast<uint64_t>(n);
        length -= static_cast<uint64_t>(n);
    }
    return 0;
}

} // namespace hvstor::backend::detail
