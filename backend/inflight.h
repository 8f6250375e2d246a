// Counts requests a backend has accepted and not yet completed, for drain().
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace hvstor::backend::detail {

class Inflight {
public:
    void add(uint64_t n) {
        if (n == 0) return;
        std::lock_guard lock(mu_);
        count_ += n;
    }
    // Called after the completions were delivered. The notification happens under the
    // lock so that a drainer woken here can destroy the backend the moment we unlock.
    void done(uint64_t n) {
        if (n == 0) return;
        std::lock_guard lock(mu_);
        count_ -= n;
        if (count_ == 0) cv_.notify_all();
    }
    void wait() {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [this] { return count_ == 0; });
    }

private:
    std::mutex mu_;
    std::condition_variable cv_;
    uint64_t count_ = 0;
};

} // namespace hvstor::backend::detail
