// Time for the performance model. The model only asks "what time is it" and "call me back at
// or after T", so the same code runs on the host's monotonic clock inside QEMU and on a virtual
// clock in tests, where hours of simulated load take milliseconds and every run is identical.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <vector>

namespace hvstor::perf {

using Nanos = int64_t;
constexpr Nanos kNever = std::numeric_limits<Nanos>::max();
constexpr Nanos kUs = 1'000, kMs = 1'000'000, kSec = 1'000'000'000;

// A one-shot timer owned by one client. Destroying it cancels it and waits for a callback
// running on another thread to return, so the client may then free what the callback
// touches; it must not be destroyed from its own callback.
class Timer {
public:
    virtual ~Timer() = default;
    // The callback runs once at or after the earliest deadline armed since it last ran (arming
    // a later deadline than a pending one changes nothing). The callback may re-arm.
    virtual void arm(Nanos deadline) = 0;
};

class Clock {
public:
    virtual ~Clock() = default;
    virtual Nanos now() const = 0;
    virtual std::unique_ptr<Timer> make_timer(std::function<void()> fire) = 0;
    // For waiting on a clock that only moves when told to: fires the earliest armed timer
    // (advancing time to it) and returns true; false on a clock that moves by itself or when
    // nothing is armed.
    virtual bool step() { return false; }
};

// CLOCK_MONOTONIC. Each timer has its own thread, which sleeps on a condition variable until
// the earliest deadline; arming a later deadline costs no system call. A timer fires at most
// once per `min_period`: under load one wake-up then serves many IOs, at the price of up to
// that much added to a deadline.
class HostClock final : public Clock {
public:
    explicit HostClock(Nanos min_period = 0) : min_period_(min_period) {}
    Nanos now() const override;
    std::unique_ptr<Timer> make_timer(std::function<void()> fire) override;

private:
    Nanos min_period_;
};

// Moves only when told to. Timers fire on the thread that moves the clock, in deadline order
// (ties in creation order), with now() equal to their deadline. Thread-safe, but meant to be
// driven from one thread.
class VirtualClock final : public Clock {
public:
    explicit VirtualClock(Nanos start = 0) : now_(start) {}
    ~VirtualClock() override;
    Nanos now() const override;
    std::unique_ptr<Timer> make_timer(std::function<void()> fire) override;
    bool step() override;

    // Fires every timer due at or before t (including ones armed by callbacks meanwhile),
    // then sets the time to t.
    void run_until(Nanos t);
    void advance(Nanos d) { run_until(now() + d); }
    // The earliest armed deadline, kNever when none.
    Nanos next_deadline() const;

private:
    class VTimer;
    friend class VTimer;
    VTimer* earliest_locked() const;
    bool fire_next(Nanos limit);

    mutable std::mutex mu_;
    std::condition_variable idle_;  // a callback returned
    Nanos now_;
    std::vector<VTimer*> timers_;  // creation order, for deterministic ties
};

} // namespace hvstor::perf
