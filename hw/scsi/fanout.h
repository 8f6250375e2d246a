// A command served by several backend requests at once (UNMAP with several descriptors, a
// WRITE SAME with a data pattern). Completes the command exactly once, through the disk,
// after the last request, with the first error seen.
#pragma once

#include <sys/uio.h>

#include <atomic>
#include <cstdint>
#include <vector>

#include "hvstor/backend/backend.h"
#include "hvstor/scsi/disk.h"

namespace hvstor::scsi::detail {

constexpr size_t kMaxFanout = 64;

class Fanout final : public backend::CompletionSink {
public:
    // nullptr when memory is short. `count` is at most kMaxFanout; `op` is what the command's
    // own backend request reports to the disk at the end (for the sense of an error).
    static Fanout* create(Command& cmd, backend::CompletionSink& disk, backend::Op op, size_t count);

    backend::Request& request(size_t i) { return reqs_[i]; }
    // Storage that lives as long as the requests, for their data and iovec lists.
    std::vector<uint8_t> data;
    std::vector<iovec> iovs;

    // Submits every request in one call. The Fanout may be gone when this returns.
    void start(backend::Backend& be);

    // Decremented once when the Fanout is destroyed (its last request done, or never
    // started): lets the creator count fanouts in flight.
    std::atomic<uint32_t>* in_flight = nullptr;
    ~Fanout() override;

private:
    Fanout(Command& cmd, backend::CompletionSink& disk, backend::Op op, size_t count);
    void complete(backend::Request* req) override;

    Command& cmd_;
    backend::CompletionSink& disk_;
    backend::Op op_;
    std::vector<backend::Request> reqs_;
    std::atomic<size_t> remaining_;
    std::atomic<int> error_{0};
};

} // namespace hvstor::scsi::detail
