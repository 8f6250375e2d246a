// A short list gathered under the model's lock and acted on after it. Most batches fit
// inline, so the common path allocates nothing, and the inline part is left uninitialized:
// several batches are made per IO.
#pragma once

#include <array>
#include <cstddef>
#include <span>
#include <vector>

namespace hvstor::perf::detail {

template <class T>
class Batch {
public:
    void push(T v) {
        if (n_ < inline_.size()) inline_[n_++] = v;
        else spill(v);
    }
    bool empty() const { return n_ == 0; }
    size_t size() const { return n_; }
    std::span<const T> span() const {
        if (n_ <= inline_.size()) return {inline_.data(), n_};
        return {more_.data(), more_.size()};
    }

private:
    void spill(T v) {
        if (more_.empty()) more_.assign(inline_.begin(), inline_.end());
        more_.push_back(v);
        n_++;
    }

    std::array<T, 32> inline_;
    std::vector<T> more_;
    size_t n_ = 0;
};

} // namespace hvstor::perf::detail
