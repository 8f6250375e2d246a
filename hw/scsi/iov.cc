// Moving bytes between flat buffers and guest iovec lists.
#include <algorithm>
#include <cstring>
#include <new>

#include "target.h"

namespace hvstor::scsi {

size_t copy_to_iov(const iovec* iov, uint32_t iovcnt, const void* src, size_t len) {
    if (iov == nullptr || src == nullptr) return 0;
    const auto* p = static_cast<const uint8_t*>(src);
    size_t done = 0;
    for (uint32_t i = 0; i < iovcnt && done < len; i++) {
        const size_t n = std::min(iov[i].iov_len, len - done);
        if (n == 0) continue;
        std::memcpy(iov[i].iov_base, p + done, n);
        done += n;
    }
    return done;
}

size_t copy_from_iov(const iovec* iov, uint32_t iovcnt, void* dst, size_t len) {
    if (iov == nullptr || dst == nullptr) return 0;
    auto* p = static_cast<uint8_t*>(dst);
    size_t done = 0;
    for (uint32_t i = 0; i < iovcnt && done < len; i++) {
        const size_t n = std::min(iov[i].iov_len, len - done);
        if (n == 0) continue;
        std::memcpy(p + done, iov[i].iov_base, n);
        done += n;
    }
    return done;
}

namespace detail {

bool attach_buffer(Command& cmd, uint64_t bytes) {
    backend::Request& r = cmd.be_req;
    r.iov = nullptr;
    r.iovcnt = 0;
    if (bytes == 0) return true;
    if (cmd.iov == nullptr || cmd.xfer_len < bytes) {
        fail_cdb(cmd);
        return false;
    }
    uint64_t have = 0;
    uint32_t segs = 0;
    size_t last_used = 0;
    // Compared before adding, so that no segment length can wrap the sum.
    while (segs < cmd.iovcnt) {
        const size_t len = cmd.iov[segs++].iov_len;
        if (len >= bytes - have) {
            last_used = static_cast<size_t>(bytes - have);
            have = bytes;
            break;
        }
        have += len;
    }
    if (have < bytes) {
        // xfer_len promised more than the segments hold.
        fail_cdb(cmd);
        return false;
    }
    if (last_used == cmd.iov[segs - 1].iov_len) {
        r.iov = cmd.iov;
        r.iovcnt = segs;
        return true;
    }
    // The guest's buffer is longer than the transfer and ends inside a segment: the backend
    // needs an exact list, and the guest's list is not ours to modify.
    auto* copy = new (std::nothrow) iovec[segs];
    if (copy == nullptr) {
        busy(cmd);
        return false;
    }
    std::copy(cmd.iov, cmd.iov + segs, copy);
    copy[segs - 1].iov_len = last_used;
    r.iov = copy;
    r.iovcnt = segs;
    return true;
}

} // namespace detail
} // namespace hvstor::scsi
