#include "io_pool.h"

namespace hvstor::perf::detail {

void IoPool::grow() {
    constexpr size_t kChunk = 256;
    chunks_.push_back(std::make_unique<Io[]>(kChunk));
    Io* c = chunks_.back().get();
    for (size_t i = 0; i < kChunk; i++) put(&c[i]);
}

} // namespace hvstor::perf::detail
