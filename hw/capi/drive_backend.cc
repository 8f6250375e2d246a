#include "drive_backend.h"

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

    uint64_t size() const override { return ops_.size; }
    uint32_t block_size() const override { return kBlock; }
    bool read_only() const override { return ops_.read_only; }
    std::string describe() const override { return name_; }

    void submit(std::span<backend::Request* const> reqs) override {
        for (backend::Request* req : reqs) {
            const int e = backend::check_request(*req, *this);
            if (e != 0) {
                req->result = e;
                req->done->complete(req);
                continue;
            }
            const HvstorBlockIo io{to_c(req->op), req->fua, req->offset, req->length, req->iov, req->iovcnt};
            ops_.submit(ops_.opaque, &io, req);
        }
    }

    void drain() override { ops_.drain(ops_.opaque); }

private:
    HvstorBlockOps ops_;
    const std::string name_;
};

} // namespace

std::unique_ptr<backend::Backend> make_drive_backend(const HvstorBlockOps& ops) {
    if (!ops.submit || !ops.drain) throw DiskError("backend=drive: the glue gave no submit or drain");
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
            auto* req = static_cast<hvstor::backend::Request*>(token);
            req->result = result;
            req->done->complete(req);
        },
        [](const char* text) { std::fprintf(stderr, "hvstor: hvstor_block_complete: %s\n", text); });
}
