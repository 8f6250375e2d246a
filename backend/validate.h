// Request checks shared by every backend, so that each one refuses the same things.
#pragma once

#include <cstdint>
#include <string>

#include "hvstor/backend/backend.h"

namespace hvstor::backend::detail {

// 0 when `req` is well formed for a device of `size` bytes, else -EINVAL (bad op, range,
// alignment or buffer list) or -EROFS (a modifying op on a read-only device).
int validate(const Request& req, uint64_t size, uint32_t block_size, bool read_only);

// For Backend::resize: true when `bytes` is a size a backend of `block_size` can take at
// all (a non-zero multiple of the block size), else false with "WHO: ..." in `err`.
bool resizable(const std::string& who, uint64_t bytes, uint32_t block_size, std::string& err);

// "1G", "512M", "4096": the largest binary unit that divides `bytes`.
std::string size_text(uint64_t bytes);

} // namespace hvstor::backend::detail
