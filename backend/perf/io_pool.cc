#include "io_pool.h"

namespace hvstor::perf::detail {

Io* IoPool::get() {
    if (!free_) {
        constexpr size_t kChunk = 256;
        chunks_.push_back(std::make_unique<Io[]>(kChunk));
        Io* c = chunks_.back().get();
        for (size_t i = 0; i < kChunk; i++) put(&c[i]);
    }
    Io* io = free_;
    free_ = io->free_next;
    io->free_next = nullptr;
    return io;
}

void IoPool::put(Io* io) {
    io->free_next = free_;
    free_ = io;
}

} // namespace hvstor::perf::detail
