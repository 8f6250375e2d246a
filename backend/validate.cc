#include "validate.h"

#include <cerrno>
#include <iterator>

#include "hvstor/trace.h"

namespace hvstor::backend::detail {

int validate(const Request& req, uint64_t size, uint32_t block_size, bool read_only) {
    switch (req.op) {
    case Op::Read:
    case Op::Write:
    case Op::Flush:
    case Op::Discard:
    case Op::WriteZeroes:
        break;
    default:
        return -EINVAL;
    }
    // A flush covers the whole device, so its range fields carry no meaning.
    if (req.op != Op::Flush) {
        if (req.offset % block_size != 0 || req.length % block_size != 0) return -EINVAL;
        if (req.offset > size || req.length > size - req.offset) return -EINVAL;
    }
    if (req.op == Op::Read || req.op == Op::Write) {
        if (req.iovcnt != 0 && req.iov == nullptr) return -EINVAL;
        // Compared element by element so that a huge iov_len cannot wrap the sum.
        uint64_t total = 0;
        for (uint32_t i = 0; i < req.iovcnt; i++) {
            const size_t len = req.iov[i].iov_len;
            if (len > req.length - total) return -EINVAL;
            if (len != 0 && req.iov[i].iov_base == nullptr) return -EINVAL;
            total += len;
        }
        if (total != req.length) return -EINVAL;
    }
    if (read_only && req.op != Op::Read && req.op != Op::Flush) return -EROFS;
    return 0;
}

bool resizable(const std::string& who, uint64_t bytes, uint32_t block_size, std::string& err) {
    if (bytes != 0 && bytes % block_size == 0) return true;
    err = who + ": size " + std::to_string(bytes) + " is not a positive multiple of " + std::to_string(block_size);
    return false;
}

std::string size_text(uint64_t bytes) {
    static constexpr const char* kUnits[] = {"", "K", "M", "G", "T", "P"};
    size_t unit = 0;
    while (bytes != 0 && bytes % 1024 == 0 && unit + 1 < std::size(kUnits)) {
        bytes /= 1024;
        unit++;
    }
    return std::to_string(bytes) + kUnits[unit];
}

} // namespace hvstor::backend::detail

namespace hvstor::backend {

int check_request(const Request& req, const Backend& be) {
    return detail::validate(req, be.size(), be.block_size(), be.read_only());
}

void begin_request(const Backend& be, Request& req) {
    req.trace_id = be.trace_id();
    trace<HVSTOR_TRACE_backend_submit>(req.trace_id, req.op, req.offset, req.length);
}

void end_request(Request& req, int result) {
    req.result = result;
    trace<HVSTOR_TRACE_backend_complete>(req.trace_id, req.op, static_cast<int64_t>(result));
    if (result < 0) trace<HVSTOR_TRACE_backend_error>(req.trace_id, req.op, -result);
    // The request is the submitter's again from here on.
    req.done->complete(&req);
}

} // namespace hvstor::backend
