// The VM's run state as the device model sees it.
//
// While the VMM has the VM stopped (QMP `stop`, a debugger's halt, a memory dump), no thread
// of the model may read a ring, write guest memory or raise an interrupt. Every piece of code
// that does one of those runs inside a Section: a channel's round, a SynIC delivery, an event
// flag. A Section is taken without waiting; when the VM is paused it is not taken, and the
// code leaves its work where it is (a completion stays on its queue, a message in the SynIC's,
// a packet in the ring) for a Listener to pick up on resume.
//
// pause() closes the gate and waits for the Sections in progress, which are short: a round
// of at most kWorkerRoundBudget packets (its submissions to a file backend included), one
// SynIC delivery. Nothing inside a Section waits for the guest or for a pause. pause() and resume() come from one thread at a time (QEMU's
// main loop); neither may be called from inside a Section.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <vector>

namespace hvstor {

class RunGate {
public:
    // Told when the VM runs again, on the resuming thread, after the gate opened. It must
    // not block (it may take a Section and the lock of its own state) and must not add or
    // remove listeners. A listener removed returns from remove() only once no call to it
    // is in progress.
    class Listener {
    public:
        virtual void on_resume() = 0;

    protected:
        ~Listener() = default;
    };

    class Section {
    public:
        explicit Section(RunGate& gate) : gate_(gate), in_(gate.enter()) {}
        ~Section() {
            if (in_) gate_.leave();
        }
        Section(const Section&) = delete;
        Section& operator=(const Section&) = delete;
        // Whether the VM runs: the section may touch guest memory and raise interrupts.
        explicit operator bool() const { return in_; }

    private:
        RunGate& gate_;
        const bool in_;
    };

    bool running() const { return !(state_.load() & kPaused); }

    // Closes the gate, then waits for the Sections in progress; `poll` runs about every
    // millisecond meanwhile (the VMM's work a Section's thread might be waiting on).
    template <typename Poll> void pause(Poll&& poll) {
        std::lock_guard control(control_mu_);
        state_.fetch_or(kPaused);
        std::unique_lock lock(wait_mu_);
        while (state_.load() & kCountMask) {
            wait_cv_.wait_for(lock, std::chrono::milliseconds(1));
            lock.unlock();
            poll();
            lock.lock();
        }
    }
    void pause() {
        pause([] {});
    }

    // Opens the gate and tells every listener. One that throws (out of memory) does not
    // keep the others asleep: each is told, then the first exception goes on.
    void resume() {
        std::lock_guard control(control_mu_);
        state_.fetch_and(~kPaused);
        std::lock_guard lock(listeners_mu_);
        std::exception_ptr first;
        for (Listener* l : listeners_) {
            try {
                l->on_resume();
            } catch (...) {
                if (!first) first = std::current_exception();
            }
        }
        if (first) std::rethrow_exception(first);
    }

    void add(Listener* l) {
        std::lock_guard lock(listeners_mu_);
        listeners_.push_back(l);
    }
    void remove(Listener* l) {
        std::lock_guard lock(listeners_mu_);
        listeners_.erase(std::remove(listeners_.begin(), listeners_.end(), l), listeners_.end());
    }

private:
    static constexpr uint64_t kPaused = uint64_t(1) << 63;
    static constexpr uint64_t kCountMask = kPaused - 1;

    // One read-modify-write each way on state_, so a pause and an entry are totally ordered:
    // either the entry saw the gate closed, or pause() sees its count.
    bool enter() {
        if (!(state_.fetch_add(1) & kPaused)) return true;
        leave();
        return false;
    }
    void leave() {
        if (state_.fetch_sub(1) == (kPaused | 1)) {
            std::lock_guard lock(wait_mu_);
            wait_cv_.notify_all();
        }
    }

    std::atomic<uint64_t> state_{0}; // kPaused | Sections in progress
    std::mutex control_mu_;          // one pause or resume at a time
    std::mutex wait_mu_;
    std::condition_variable wait_cv_;
    std::mutex listeners_mu_;
    std::vector<Listener*> listeners_; // open channels and the SynIC: bounded
};

} // namespace hvstor
