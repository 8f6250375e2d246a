// The VM's run state as the device model sees it.
//
// While the VMM has the VM stopped (QMP `stop`, a debugger's halt, a memory dump), no thread
// of the model may read a ring, write guest memory or raise an interrupt. Every piece of code
// that does one of those runs inside a Section: a channel's round, a SynIC delivery, an event
// flag; storage I/O is handed to the storage inside one (below). A Section is taken without waiting; when the VM is paused it is not taken, and the
// code leaves its work where it is (a completion stays on its queue, a message in the SynIC's,
// a packet in the ring) for a Listener to pick up on resume.
//
// pause() closes the gate and waits for the Sections in progress, which are short: a round
// of at most kWorkerRoundBudget packets (its submissions to a file backend included), one
// SynIC delivery. Nothing inside a Section waits for the guest or for a pause. pause() and
// resume() come from one thread at a time (QEMU's main loop); neither may be called from
// inside a Section.
//
// Storage I/O is the one thing that writes guest memory over a longer time than a Section:
// a disk's run-gated storage (hw/capi/storage_gate.h) hands requests to its storage inside a
// Section, holds the ones that come while the VM is stopped (a disk model or a stall fault
// releases them on its own timer), and waits in on_pause() for those in flight.
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
    //
    // Storage listeners (add_storage: a disk's StorageGate) are kept apart, under a lock of
    // their own, because their calls wait for storage: on_pause for the I/O in flight,
    // on_resume for a submission that needs room. A storage completion can end the last
    // reference to a channel, whose removal from the other list must then not wait behind
    // them. Storage listeners are told first on resume, and alone on pause.
    class Listener {
    public:
        virtual void on_resume() = 0;
        // The VM has stopped: called by pause() once the Sections in progress are over, on
        // the pausing thread, for storage listeners only: to wait for the storage's I/O in
        // flight (which writes guest memory outside any Section). It must not wait for the
        // VMM's main loop.
        virtual void on_pause() {}

    protected:
        ~Listener() = default;
    };

    // A Section inside another of the same gate on the same thread (a disk's storage
    // submission inside a channel's round) is free: the outer one already holds off a pause.
    class Section {
    public:
        explicit Section(RunGate& gate) : gate_(gate), nested_(inner_of == &gate), in_(nested_ || gate.enter()) {
            if (in_ && !nested_ && !inner_of) {
                inner_of = &gate;
                outermost_ = true;
            }
        }
        ~Section() {
            if (outermost_) inner_of = nullptr;
            if (in_ && !nested_) gate_.leave();
        }
        Section(const Section&) = delete;
        Section& operator=(const Section&) = delete;
        // Whether the VM runs: the section may touch guest memory and raise interrupts.
        explicit operator bool() const { return in_; }

    private:
        // The gate this thread's outermost Section holds, if any.
        static inline thread_local const RunGate* inner_of = nullptr;

        RunGate& gate_;
        const bool nested_;
        const bool in_;
        bool outermost_ = false;
    };

    bool running() const { return !(state_.load() & kPaused); }

    // Closes the gate, then waits for the Sections in progress; `poll` runs about every
    // millisecond meanwhile (the VMM's work a Section's thread might be waiting on). Then
    // tells every listener (on_pause).
    template <typename Poll> void pause(Poll&& poll) {
        std::lock_guard control(control_mu_);
        state_.fetch_or(kPaused);
        {
            std::unique_lock lock(wait_mu_);
            while (state_.load() & kCountMask) {
                wait_cv_.wait_for(lock, std::chrono::milliseconds(1));
                lock.unlock();
                poll();
                lock.lock();
            }
        }
        storage_.each([](Listener* l) { l->on_pause(); });
    }
    void pause() {
        pause([] {});
    }

    // Opens the gate and tells every listener (on_resume), the storage listeners first. One
    // that throws (out of memory) does not keep the others asleep: each is told, then the
    // first exception goes on.
    void resume() {
        std::lock_guard control(control_mu_);
        state_.fetch_and(~kPaused);
        std::exception_ptr first;
        storage_.each([](Listener* l) { l->on_resume(); }, first);
        listeners_.each([](Listener* l) { l->on_resume(); }, first);
        if (first) std::rethrow_exception(first);
    }

    // Channels and the SynIC.
    void add(Listener* l) { listeners_.add(l); }
    void remove(Listener* l) { listeners_.remove(l); }
    // Disks' storage (see Listener).
    void add_storage(Listener* l) { storage_.add(l); }
    void remove_storage(Listener* l) { storage_.remove(l); }

    // Saved state. While the VM is paused, a few steps of device threads still change state
    // that a save reads in several parts: a channel's close finishing once the storage let go
    // of its last request (the subchannels withdrawn, the bus told, its answers posted).
    // Such a step holds a Change for its duration, and a save holds a Snapshot: the save sees
    // each step whole or not at all. Changes never wait for a Snapshot that is only waiting
    // (one may be nested in another, on one thread or across threads that wait for each
    // other); a Snapshot waits until no Change is in progress, then holds new ones off.
    // Neither may be taken inside a Section, and a Change must never wait for the guest,
    // the storage or a resume.
    class Change {
    public:
        explicit Change(RunGate& g) : g_(g) {
            std::unique_lock lock(g_.save_mu_);
            g_.save_cv_.wait(lock, [&] { return !g_.saving_; });
            g_.changes_++;
        }
        ~Change() {
            std::lock_guard lock(g_.save_mu_);
            if (--g_.changes_ == 0) g_.save_cv_.notify_all();
        }
        Change(const Change&) = delete;
        Change& operator=(const Change&) = delete;

    private:
        RunGate& g_;
    };
    class Snapshot {
    public:
        explicit Snapshot(RunGate& g) : g_(g) {
            std::unique_lock lock(g_.save_mu_);
            g_.save_cv_.wait(lock, [&] { return g_.changes_ == 0 && !g_.saving_; });
            g_.saving_ = true;
        }
        ~Snapshot() {
            std::lock_guard lock(g_.save_mu_);
            g_.saving_ = false;
            g_.save_cv_.notify_all();
        }
        Snapshot(const Snapshot&) = delete;
        Snapshot& operator=(const Snapshot&) = delete;

    private:
        RunGate& g_;
    };

private:
    class Registry {
    public:
        void add(Listener* l) {
            std::lock_guard lock(mu_);
            list_.push_back(l);
        }
        void remove(Listener* l) {
            std::lock_guard lock(mu_);
            list_.erase(std::remove(list_.begin(), list_.end(), l), list_.end());
        }
        // Tells each; the first exception is kept in `first`.
        template <typename Tell> void each(Tell&& tell, std::exception_ptr& first) {
            std::lock_guard lock(mu_);
            for (Listener* l : list_) {
                try {
                    tell(l);
                } catch (...) {
                    if (!first) first = std::current_exception();
                }
            }
        }
        template <typename Tell> void each(Tell&& tell) {
            std::exception_ptr first;
            each(tell, first);
            if (first) std::rethrow_exception(first);
        }

    private:
        std::mutex mu_;
        std::vector<Listener*> list_;  // bounded: open channels, the SynIC, disks
    };

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
    Registry listeners_;  // open channels and the SynIC
    Registry storage_;    // disks' storage gates
    std::mutex save_mu_;  // changes_, saving_
    std::condition_variable save_cv_;
    uint32_t changes_ = 0; // Changes in progress
    bool saving_ = false;  // a Snapshot is held
};

} // namespace hvstor
