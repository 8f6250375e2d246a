#include "drive_backend.h"

#include <atomic>
#include <cstdio>
#include <string>

#include "disk_factory.h"
#include "guard.h"

namespace hvstor::capi {
namespace {

constexpr uint32_t kBlock = 512;

HvstorBlockOp to_c(backend::Op op) {
    switch (op) {
    case backend::Op::Read: return HVSTOR_BLOCK_READ;
    case backend::Op::Write: return HVSTOR_BLOCK_WRITE;
    case backend::Op::Flush: return HVSTOR_BLOCK_FLUSH;
    case backend::Op::Discard: return HVSTOR_BLOCK_DISCARD;
    case backend::Op::WriteZeroes: return HVSTOR_BLOCK_WRITE_ZEROES;
    }
    return HVSTOR_BLOCK_READ;  // unreachable: check_request refused any other value
}

class DriveBackend final : public backend::Backend {
public:
    explicit DriveBackend(const HvstorBlockOps& ops) : ops_(ops), name_(ops.name ? ops.name : "drive") {
        ops_.name = nullptr;  // the glue's string need not outlive this call: name_ is the copy
    }
    // The glue's drain returns once every completion has returned: nothing is left after it.
    ~DriveBackend() override { drain(); }

    uint64_t size() const override { return size_.load(std::memory_order_acquire); }
    uint32_t block_size() const override { return kBlock; }
    bool read_only() const override { return ops_.read_only; }
    std::string describe() const override { return name_; }

    void submit(std::span<backend::Request* const> reqs) override {
        for (backend::Request* req : reqs) {
            backend::begin_request(*this, *req);
            const int e = backend::check_request(*req, *this);
            if (e != 0) {
                backend::end_request(*req, e);
                continue;
            }
            const HvstorBlockIo io{to_c(req->op), req->fua, req->offset, req->length, req->iov, req->iovcnt};
            ops_.submit(ops_.opaque, &io, req);
        }
    }

    void drain() override { ops_.drain(ops_.opaque); }
    // The glue queues each request for the drive's IOThread (HvstorBlockOps.submit).
    bool submit_may_block() const override { return false; }
    // QEMU's vm_stop drains the block layer, our requests queued for it included.
    bool drained_by_vmm() const override { return true; }

    // Up to the storage's own length: QEMU's block_resize grows that, not the disk.
    bool resize(uint64_t bytes, std::string& err) override {
        const uint64_t length = ops_.length(ops_.opaque);
        if (bytes % kBlock != 0 || bytes == 0 || bytes > length) {
            err = name_ + " holds " + std::to_string(length) +
                  " bytes; the disk takes a non-zero multiple of 512 up to that, not " + std::to_string(bytes) +
                  " (grow the drive with block_resize)";
            return false;
        }
        size_.store(bytes, std::memory_order_release);
        return true;
    }

private:
    HvstorBlockOps ops_;
    std::atomic<uint64_t> size_{ops_.size};
    const std::string name_;
};

} // namespace

std::unique_ptr<backend::Backend> make_drive_backend(const HvstorBlockOps& ops) {
    if (!ops.submit || !ops.drain || !ops.length)
        throw DiskError("backend=drive: the glue gave no submit, drain or length");
    if (ops.size == 0 || ops.size % kBlock)
        throw DiskError("drive: the image is " + std::to_string(ops.size) +
                        " bytes; hv-disk needs a non-zero multiple of 512");
    return std::make_unique<DriveBackend>(ops);
}

} // namespace hvstor::capi

extern "C" void hvstor_block_complete(void* token, int result) {
    // The token is the request submit() handed over; its sink never throws (the SCSI disk
    // completes through the controller), guarded all the same like every entry point.
    hvstor::capi::guarded(
        [&] {
            hvstor::backend::end_request(*static_cast<hvstor::backend::Request*>(token), result);
        },
        [](const char* text) { std::fprintf(stderr, "hvstor: hvstor_block_complete: %s\n", text); });
}
