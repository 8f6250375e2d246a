#include "hvstor/perf/clock.h"

#include <sys/prctl.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <thread>

#include "hvstor/thread.h"

namespace hvstor::perf {
namespace {

class ThreadTimer final : public Timer {
public:
    ThreadTimer(std::function<void()> fire, Nanos min_period) : fire_(std::move(fire)), min_period_(min_period) {
        thread_ = start_thread("hvstor-perf", [this] { loop(); });
    }
    ~ThreadTimer() override {
        {
            std::lock_guard lock(mu_);
            stop_ = true;
        }
        cv_.notify_one();
        thread_.join();
    }
    ThreadTimer(const ThreadTimer&) = delete;
    ThreadTimer& operator=(const ThreadTimer&) = delete;

    void arm(Nanos deadline) override {
        std::lock_guard lock(mu_);
        if (deadline >= deadline_) return;
        deadline_ = deadline;
        // Only an earlier deadline needs the sleeper to recompute; a busy model keeps arming
        // later ones, which cost just the lock.
        cv_.notify_one();
    }

private:
    void loop() {
        // The default 50 us slack would add to every modelled latency.
        prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
        std::unique_lock lock(mu_);
        while (!stop_) {
            if (deadline_ == kNever) {
                cv_.wait(lock);
                continue;
            }
            using namespace std::chrono;
            const steady_clock::time_point when{nanoseconds(std::max(deadline_, last_fire_ + min_period_))};
            if (steady_clock::now() < when) {
                cv_.wait_until(lock, when);
                continue;
            }
            deadline_ = kNever;
            last_fire_ = duration_cast<nanoseconds>(steady_clock::now().time_since_epoch()).count();
            lock.unlock();
            fire_();
            lock.lock();
        }
    }

    std::function<void()> fire_;
    const Nanos min_period_;
    std::mutex mu_;
    std::condition_variable cv_;
    Nanos deadline_ = kNever;
    Nanos last_fire_ = 0;
    bool stop_ = false;
    std::thread thread_;
};

} // namespace

Nanos HostClock::now() const {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return Nanos(ts.tv_sec) * kSec + ts.tv_nsec;
}

std::unique_ptr<Timer> HostClock::make_timer(std::function<void()> fire) {
    return std::make_unique<ThreadTimer>(std::move(fire), min_period_);
}

class VirtualClock::VTimer final : public Timer {
public:
    VTimer(VirtualClock& clock, std::function<void()> fire) : clock_(clock), fire_(std::move(fire)) {}
    ~VTimer() override {
        std::unique_lock lock(clock_.mu_);
        clock_.idle_.wait(lock, [this] { return !running_; });
        auto& v = clock_.timers_;
        v.erase(std::find(v.begin(), v.end(), this));
    }
    VTimer(const VTimer&) = delete;
    VTimer& operator=(const VTimer&) = delete;

    void arm(Nanos deadline) override {
        std::lock_guard lock(clock_.mu_);
        deadline_ = std::min(deadline_, deadline);
    }

    VirtualClock& clock_;
    std::function<void()> fire_;
    Nanos deadline_ = kNever;
    bool running_ = false;
};

VirtualClock::~VirtualClock() = default;

Nanos VirtualClock::now() const {
    std::lock_guard lock(mu_);
    return now_;
}

std::unique_ptr<Timer> VirtualClock::make_timer(std::function<void()> fire) {
    auto t = std::make_unique<VTimer>(*this, std::move(fire));
    std::lock_guard lock(mu_);
    timers_.push_back(t.get());
    return t;
}

VirtualClock::VTimer* VirtualClock::earliest_locked() const {
    VTimer* best = nullptr;
    for (VTimer* t : timers_)
        if (t->deadline_ != kNever && (!best || t->deadline_ < best->deadline_)) best = t;
    return best;
}

Nanos VirtualClock::next_deadline() const {
    std::lock_guard lock(mu_);
    VTimer* t = earliest_locked();
    return t ? t->deadline_ : kNever;
}

bool VirtualClock::fire_next(Nanos limit) {
    std::unique_lock lock(mu_);
    VTimer* t = earliest_locked();
    if (!t || t->deadline_ > limit) return false;
    now_ = std::max(now_, t->deadline_);
    t->deadline_ = kNever;
    t->running_ = true;
    lock.unlock();
    t->fire_();
    lock.lock();
    t->running_ = false;
    idle_.notify_all();
    return true;
}

bool VirtualClock::step() { return fire_next(kNever); }

void VirtualClock::run_until(Nanos t) {
    while (fire_next(t)) {
    }
    std::lock_guard lock(mu_);
    now_ = std::max(now_, t);
}

} // namespace hvstor::perf
