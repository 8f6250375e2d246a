// Private to the SCSI target: the Disk's fault injector (hvstor/scsi/fault.h). The Disk asks
// it about each command before starting it; a stalled command is held here and handed back
// to the Disk, to start as if it had just arrived, when its time is up or the fault changes.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "hvstor/scsi/disk.h"
#include "hvstor/scsi/fault.h"

namespace hvstor::scsi::detail {

class FaultInjector {
public:
    enum class Verdict { Pass, Answered, Held };
    using Start = std::function<void(Command*)>;

    FaultInjector(DiskStats& stats, Start start) : stats_(stats), start_(std::move(start)) {}
    ~FaultInjector() { stop(); }

    // Any thread. Replaces the fault; commands held by the old one start now. With counts,
    // the fault goes on from them (a loaded machine's); else from its start.
    void set(const FaultSpec& spec, const FaultCounts* counts = nullptr);
    // See Disk::fault_counts.
    FaultCounts counts() const;
    // The command is answered: what this fault counted of it (Command::fault_mark) settles.
    void settled(Command& cmd);
    // Before a command starts (any thread): Pass (it runs; a transport answer may be set on
    // it, Command::transport), or Answered (its status and sense, or its transport answer,
    // are set: deliver it), or Held (it starts later through Start).
    Verdict check(Command& cmd);
    // No fault from now on, nothing held, no thread: before the disk's I/O is drained.
    void stop();
    // While suspended every command passes (and those held start now); the fault stays.
    void suspend(bool on);

private:
    using Clock = std::chrono::steady_clock;
    struct Held {
        Command* cmd;
        Clock::time_point until; // max(): until the fault changes
    };
    bool matches(const Command& cmd) const;
    bool picked(Command& cmd);
    Verdict inject(Command& cmd);
    Verdict answer_srb(Command& cmd);
    void release(std::vector<Command*> cmds);
    void run_timer();

    DiskStats& stats_;
    Start start_;
    std::atomic<bool> active_{false}; // a fault is set: the only cost on the path without one
    mutable std::mutex mu_;
    std::condition_variable cv_;
    FaultSpec spec_;
    uint64_t matched_ = 0, injected_ = 0, rng_ = 1;
    uint64_t gen_ = 0;                                  // set()s so far: the marks' generation
    uint64_t unsettled_matched_ = 0, unsettled_injected_ = 0; // of commands not yet answered
    std::vector<Held> held_;
    std::thread timer_; // started with the first timed stall
    bool stopping_ = false;
    bool suspended_ = false;
};

} // namespace hvstor::scsi::detail
