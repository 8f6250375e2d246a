// Null backend: no storage at all, for measuring everything above the data path.
#include <atomic>
#include <cerrno>
#include <cstring>

#include "inflight.h"
#include "validate.h"

namespace hvstor::backend {
namespace {

constexpr uint32_t kBlock = 512;

class NullBackend final : public Backend {
public:
    bool submit_may_block() const override { return false; }
    explicit NullBackend(uint64_t size) : size_(size) {}
    ~NullBackend() override { drain(); }

    uint64_t size() const override { return size_.load(std::memory_order_acquire); }
    uint32_t block_size() const override { return kBlock; }
    bool read_only() const override { return false; }
    std::string describe() const override { return "null:" + detail::size_text(size()); }

    void submit(std::span<Request* const> reqs) override {
        inflight_.add(reqs.size());
        for (Request* req : reqs) {
            begin_request(*this, *req);
            int r = detail::validate(*req, size(), kBlock, false);
            if (r == 0 && req->op == Op::Read) {
                for (uint32_t i = 0; i < req->iovcnt; i++)
                    std::memset(req->iov[i].iov_base, 0, req->iov[i].iov_len);
            }
            end_request(*req, r);
        }
        inflight_.done(reqs.size());
    }

    void drain() override { inflight_.wait(); }

    bool resize(uint64_t bytes, std::string& err) override {
        if (!detail::resizable("null backend", bytes, kBlock, err)) return false;
        size_.store(bytes, std::memory_order_release);
        return true;
    }

private:
    std::atomic<uint64_t> size_;
    detail::Inflight inflight_;
};

} // namespace

std::unique_ptr<Backend> make_null(uint64_t size, std::string& /*err*/) {
    return std::make_unique<NullBackend>(size);
}

} // namespace hvstor::backend
