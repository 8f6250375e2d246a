// An event loop on a thread of its own, as the host's (QEMU: an IOThread) would run
// channels: poll() over the watched fds, one `ready` at a time. Counts the calls it made.
#pragma once

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "hvstor/thread.h"
#include "hvstor/vmbus/event_loop.h"

namespace hvstor::test {

class FakeLoop final : public vmbus::EventLoop {
public:
    FakeLoop() : ctl_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
        thread_ = start_thread("fake-loop", [this] { run(); });
    }
    ~FakeLoop() override {
        {
            std::lock_guard lock(mu_);
            quit_ = true;
        }
        poke();
        thread_.join();
        close(ctl_);
    }

    void* watch(int fd, void (*ready)(void*), void* arg) override {
        auto w = std::make_unique<Watch>(Watch{fd, ready, arg});
        Watch* h = w.get();
        {
            std::lock_guard lock(mu_);
            watches_.push_back(std::move(w));
        }
        poke();
        return h;
    }
    void unwatch(void* handle) override {
        std::unique_lock lock(mu_);
        auto it = std::find_if(watches_.begin(), watches_.end(), [&](const auto& w) { return w.get() == handle; });
        if (it == watches_.end()) {
            bad_unwatches_++;
            return;
        }
        std::unique_ptr<Watch> gone = std::move(*it);
        watches_.erase(it);
        // The loop's own thread is never inside this watch's ready here (the contract).
        if (std::this_thread::get_id() != thread_.get_id())
            idle_.wait(lock, [&] { return running_ != handle; });
        lock.unlock();
        poke();
    }

    bool on_loop_thread() const { return std::this_thread::get_id() == thread_.get_id(); }
    uint64_t calls() const { return calls_.load(); }
    size_t watching() const {
        std::lock_guard lock(mu_);
        return watches_.size();
    }
    uint64_t bad_unwatches() const {
        std::lock_guard lock(mu_);
        return bad_unwatches_;
    }

private:
    struct Watch {
        int fd;
        void (*ready)(void*);
        void* arg;
    };
    void poke() {
        const uint64_t one = 1;
        [[maybe_unused]] ssize_t n = write(ctl_, &one, sizeof one);
    }
    void run() {
        std::vector<pollfd> fds;
        std::vector<Watch*> polled;
        for (;;) {
            fds.assign(1, pollfd{ctl_, POLLIN, 0});
            polled.clear();
            {
                std::lock_guard lock(mu_);
                if (quit_) return;
                for (auto& w : watches_) {
                    fds.push_back(pollfd{w->fd, POLLIN, 0});
                    polled.push_back(w.get());
                }
            }
            poll(fds.data(), fds.size(), -1);
            uint64_t v;
            [[maybe_unused]] ssize_t n = read(ctl_, &v, sizeof v);
            for (size_t i = 0; i < polled.size(); i++) {
                if (!(fds[i + 1].revents & POLLIN)) continue;
                Watch* w = polled[i];
                {
                    // Unwatched since the poll: no call, the handle may be gone.
                    std::lock_guard lock(mu_);
                    if (std::none_of(watches_.begin(), watches_.end(), [&](const auto& x) { return x.get() == w; }))
                        continue;
                    running_ = w;
                }
                calls_++;
                w->ready(w->arg);
                {
                    std::lock_guard lock(mu_);
                    running_ = nullptr;
                }
                idle_.notify_all();
            }
        }
    }

    const int ctl_;
    mutable std::mutex mu_;
    std::condition_variable idle_;
    std::vector<std::unique_ptr<Watch>> watches_;
    const void* running_ = nullptr;
    bool quit_ = false;
    uint64_t bad_unwatches_ = 0;
    std::atomic<uint64_t> calls_{0};
    std::thread thread_;
};

} // namespace hvstor::test
