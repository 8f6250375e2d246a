// An event loop as the host's (QEMU: an IOThread) would run channels: poll() over the watched
// fds, one `ready` at a time. Either on a thread of its own (FakeLoop::Thread) or driven by the
// caller's run_ready() (FakeLoop::Caller: a fuzzer interleaves turns with its own steps).
// Counts the calls it made and the unwatches of handles it never gave or already forgot.
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
    enum Driver { Thread, Caller };

    explicit FakeLoop(Driver driver = Thread) : ctl_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
        if (driver == Thread)
            thread_ = start_thread("fake-loop", [this] {
                while (!quit_.load()) run_ready(-1);
            });
    }
    ~FakeLoop() override {
        if (thread_.joinable()) {
            quit_ = true;
            poke();
            thread_.join();
        }
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
        // The contract keeps unwatch out of the watch's own ready, so the running thread is
        // never waiting here for itself.
        if (runner_ != std::this_thread::get_id())
            idle_.wait(lock, [&] { return running_ != handle; });
        lock.unlock();
        poke();
    }

    // Waits up to timeout_ms (-1: for ever, 0: not at all) for a watched fd to be readable, then
    // runs each readable watch's ready once; whether any ran.
    bool run_ready(int timeout_ms = 0) {
        std::vector<pollfd> fds{pollfd{ctl_, POLLIN, 0}};
        std::vector<const Watch*> polled;
        {
            std::lock_guard lock(mu_);
            for (const auto& w : watches_) {
                fds.push_back(pollfd{w->fd, POLLIN, 0});
                polled.push_back(w.get());
            }
        }
        if (poll(fds.data(), fds.size(), timeout_ms) <= 0) return false;
        uint64_t v;
        [[maybe_unused]] ssize_t n = read(ctl_, &v, sizeof v);
        bool ran = false;
        for (size_t i = 0; i < polled.size(); i++) {
            if (!(fds[i + 1].revents & POLLIN)) continue;
            Watch w;
            {
                // Unwatched since the poll: no call, the handle may be gone.
                std::lock_guard lock(mu_);
                if (std::none_of(watches_.begin(), watches_.end(), [&](const auto& x) { return x.get() == polled[i]; }))
                    continue;
                w = *polled[i];
                running_ = polled[i];
                runner_ = std::this_thread::get_id();
            }
            calls_++;
            w.ready(w.arg);
            ran = true;
            {
                std::lock_guard lock(mu_);
                running_ = nullptr;
                runner_ = {};
            }
            idle_.notify_all();
        }
        return ran;
    }

    bool on_loop_thread() const { return std::this_thread::get_id() == thread_.get_id(); }
    uint64_t calls() const { return calls_.load(); }
    // calls() at a moment no turn runs: whatever a turn does with work given after this
    // returns, it does in a call counted after it (a turn already running could take it).
    uint64_t calls_when_idle() {
        std::unique_lock lock(mu_);
        idle_.wait(lock, [&] { return running_ == nullptr; });
        return calls_.load();
    }
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
        int fd = -1;
        void (*ready)(void*) = nullptr;
        void* arg = nullptr;
    };
    void poke() {
        const uint64_t one = 1;
        [[maybe_unused]] ssize_t n = write(ctl_, &one, sizeof one);
    }

    const int ctl_;
    mutable std::mutex mu_;
    std::condition_variable idle_;
    std::vector<std::unique_ptr<Watch>> watches_;
    const void* running_ = nullptr;
    std::thread::id runner_;
    uint64_t bad_unwatches_ = 0;
    std::atomic<bool> quit_{false};
    std::atomic<uint64_t> calls_{0};
    std::thread thread_;
};

} // namespace hvstor::test
