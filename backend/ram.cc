// RAM backend: an anonymous mapping, so a large disk costs only the pages written.
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>

#include "inflight.h"
#include "validate.h"

namespace hvstor::backend {
namespace {

constexpr uint32_t kBlock = 512;

class RamBackend final : public Backend {
public:
    RamBackend(uint8_t* mem, uint64_t size, size_t map_len)
        : mem_(mem), size_(size), capacity_(size), map_len_(map_len), page_(static_cast<size_t>(sysconf(_SC_PAGESIZE))) {}
    ~RamBackend() override {
        drain();
        munmap(mem_, map_len_);
    }
    RamBackend(const RamBackend&) = delete;
    RamBackend& operator=(const RamBackend&) = delete;

    uint64_t size() const override { return size_.load(std::memory_order_acquire); }
    uint32_t block_size() const override { return kBlock; }
    bool read_only() const override { return false; }
    std::string describe() const override { return "ram:" + detail::size_text(size()); }

    void submit(std::span<Request* const> reqs) override {
        // Counted for the whole call: completions run inline, and drain() on another
        // thread must not return while this loop still touches the requests.
        inflight_.add(reqs.size());
        for (Request* req : reqs) {
            begin_request(*this, *req);
            int r = detail::validate(*req, size(), kBlock, false);
            if (r == 0) r = execute(*req);
            end_request(*req, r);
        }
        inflight_.done(reqs.size());
    }

    void drain() override { inflight_.wait(); }
    // A copy within memory mapped at creation.
    bool submit_may_block() const override { return false; }

    // Within the mapping made at creation. A request checked against the old size may
    // still copy beyond a new, smaller one: the memory stays mapped, so that is harmless.
    bool resize(uint64_t bytes, std::string& err) override {
        if (!detail::resizable("ram backend", bytes, kBlock, err)) return false;
        if (bytes > capacity_) {
            err = "ram backend: cannot grow to " + std::to_string(bytes) + " bytes: its memory was mapped once, for the " +
                  std::to_string(capacity_) + " bytes it was made with";
            return false;
        }
        std::lock_guard lock(resize_mu_);
        const uint64_t old = size_.load(std::memory_order_relaxed);
        if (bytes > old) zero(old, bytes - old);  // left by an earlier shrink
        size_.store(bytes, std::memory_order_release);
        return true;
    }

private:
    int execute(const Request& req) {
        uint8_t* p = mem_ + req.offset;
        switch (req.op) {
        case Op::Read:
            for (uint32_t i = 0; i < req.iovcnt; i++) {
                std::memcpy(req.iov[i].iov_base, p, req.iov[i].iov_len);
                p += req.iov[i].iov_len;
            }
            return 0;
        case Op::Write:
            for (uint32_t i = 0; i < req.iovcnt; i++) {
                std::memcpy(p, req.iov[i].iov_base, req.iov[i].iov_len);
                p += req.iov[i].iov_len;
            }
            return 0;
        case Op::Flush:
            return 0;
        case Op::Discard:
        case Op::WriteZeroes:
            zero(req.offset, req.length);
            return 0;
        }
        return -EINVAL;
    }

    // Whole pages go back to the kernel (a private anonymous mapping reads back zeros after
    // MADV_DONTNEED), so discarding a large range also releases its memory.
    void zero(uint64_t offset, uint64_t length) {
        const uint64_t end = offset + length;
        const uint64_t first_page = (offset + page_ - 1) / page_ * page_;
        const uint64_t last_page = end / page_ * page_;
        if (first_page < last_page &&
            madvise(mem_ + first_page, last_page - first_page, MADV_DONTNEED) == 0) {
            std::memset(mem_ + offset, 0, first_page - offset);
            std::memset(mem_ + last_page, 0, end - last_page);
            return;
        }
        std::memset(mem_ + offset, 0, length);
    }

    uint8_t* mem_;
    std::atomic<uint64_t> size_;
    const uint64_t capacity_;  // the most resize() takes
    std::mutex resize_mu_;
    size_t map_len_;
    size_t page_;
    detail::Inflight inflight_;
};

} // namespace

std::unique_ptr<Backend> make_ram(uint64_t size, std::string& err) {
    if (size == 0 || size % kBlock != 0) {
        err = "ram backend: size " + std::to_string(size) + " is not a positive multiple of 512";
        return nullptr;
    }
    if (size > SIZE_MAX / 2) {
        err = "ram backend: size " + std::to_string(size) + " is too large";
        return nullptr;
    }
    const size_t len = static_cast<size_t>(size);
    // MAP_NORESERVE: a sparse disk larger than free memory is fine until it is filled.
    void* mem = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                     -1, 0);
    if (mem == MAP_FAILED) {
        err = "ram backend: cannot map " + detail::size_text(size) + ": " + std::strerror(errno);
        return nullptr;
    }
    return std::make_unique<RamBackend>(static_cast<uint8_t*>(mem), size, len);
}

} // namespace hvstor::backend
