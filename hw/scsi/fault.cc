// Fault injection: the injector the Disk consults (the text form is fault_text.cc).
#include <system_error>

#include "fault_injector.h"
#include "target.h"
#include "hvstor/thread.h"

namespace hvstor::scsi {

namespace {

bool is_flush(uint8_t opcode) { return opcode == detail::op::kSyncCache10 || opcode == detail::op::kSyncCache16; }

} // namespace

namespace detail {

void FaultInjector::set(const FaultSpec& spec, const FaultCounts* counts) {
    std::vector<Command*> now;
    {
        std::lock_guard lock(mu_);
        spec_ = spec;
        matched_ = injected_ = 0;
        gen_++; // commands the old setting counted settle nothing of this one's
        unsettled_matched_ = unsettled_injected_ = 0;
        // splitmix64 of the seed: every seed a different, non-zero xorshift state.
        uint64_t z = spec.seed + 0x9E3779B97F4A7C15ull;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        rng_ = z ? z : 1;
        if (counts) {
            matched_ = counts->matched;
            injected_ = counts->injected;
            rng_ = counts->rng ? counts->rng : 1; // 0 would stay 0
        }
        for (const Held& h : held_) now.push_back(h.cmd);
        held_.clear();
        active_.store(spec.action != FaultSpec::Action::None && !suspended_);
    }
    release(std::move(now));
}

FaultCounts FaultInjector::counts() const {
    std::lock_guard lock(mu_);
    return FaultCounts{matched_ - unsettled_matched_, injected_ - unsettled_injected_, rng_};
}

void FaultInjector::settled(Command& cmd) {
    std::lock_guard lock(mu_);
    if (cmd.fault_mark.gen == gen_) {
        unsettled_matched_ -= cmd.fault_mark.matched;
        unsettled_injected_ -= cmd.fault_mark.injected;
    }
    cmd.fault_mark = {};
}

void FaultInjector::suspend(bool on) {
    std::vector<Command*> now;
    {
        std::lock_guard lock(mu_);
        suspended_ = on;
        for (const Held& h : held_) now.push_back(h.cmd);
        held_.clear();
        active_.store(spec_.action != FaultSpec::Action::None && !suspended_);
    }
    release(std::move(now));
}

bool FaultInjector::matches(const Command& cmd) const {
    const uint8_t opcode = cmd.cdb[0];
    if (is_flush(opcode)) return spec_.flushes;
    const bool read = detail::is_read_op(opcode);
    if (!read && !detail::is_write_op(opcode)) return false; // reads and writes only
    if (!(read ? spec_.reads : spec_.writes)) return false;
    uint64_t lba = 0, blocks = 0;
    detail::block_extent(cmd.cdb.data(), lba, blocks);
    // Touches [lba_first, lba_last]: starts at or before its end and ends after its start.
    return lba <= spec_.lba_last && (blocks == 0 ? lba : lba + blocks - 1) >= spec_.lba_first;
}

// Whether this matching command is the one to inject into: every=, percent=, count=. mu_ held.
bool FaultInjector::picked(Command& cmd) {
    if (spec_.action == FaultSpec::Action::None || suspended_ || !matches(cmd)) return false;
    cmd.fault_mark = {gen_, true, false};
    unsettled_matched_++;
    if (++matched_ % spec_.every != 0) return false;
    if (spec_.percent < 100) {
        rng_ ^= rng_ << 13; // xorshift64: the same seed injects into the same commands
        rng_ ^= rng_ >> 7;
        rng_ ^= rng_ << 17;
        if (rng_ % 100 >= spec_.percent) return false;
    }
    return !(spec_.count && injected_ >= spec_.count);
}

FaultInjector::Verdict FaultInjector::check(Command& cmd) {
    using A = FaultSpec::Action;
    if (!active_.load(std::memory_order_relaxed)) return Verdict::Pass;
    std::lock_guard lock(mu_);
    if (!picked(cmd)) return Verdict::Pass;
    if (spec_.action == A::Stall && !timer_.joinable() && spec_.stall_ms) {
        try {
            timer_ = start_thread("hvstor-fault", [this] { run_timer(); });
        } catch (const std::system_error&) {
            return Verdict::Pass; // no thread to time the stall: the command runs
        }
    }
    injected_++;
    cmd.fault_mark.injected = true;
    unsettled_injected_++;
    stats_.faults.fetch_add(1, std::memory_order_relaxed);
    if (spec_.has_op_status) {
        cmd.transport.op = true;
        cmd.transport.op_status = spec_.op_status;
    }
    return inject(cmd);
}

// The picked command's fate. mu_ held.
FaultInjector::Verdict FaultInjector::inject(Command& cmd) {
    using A = FaultSpec::Action;
    switch (spec_.action) {
    case A::MediumError:
        cmd.data_transferred = 0;
        if (detail::is_read_op(cmd.cdb[0])) fail(cmd, kSenseMediumError, kUnrecoveredReadError);
        else fail(cmd, kSenseMediumError, kWriteError);
        return Verdict::Answered;
    case A::NotReady:
        cmd.data_transferred = 0;
        fail(cmd, kSenseNotReady, Asc{0x04, 0x01}); // becoming ready: the guest retries
        return Verdict::Answered;
    case A::UnitAttention:
        cmd.data_transferred = 0;
        fail(cmd, kSenseUnitAttention, Asc{0x29, 0x00}); // power on, reset or bus device reset
        return Verdict::Answered;
    case A::Busy:
        cmd.data_transferred = 0;
        busy(cmd);
        return Verdict::Answered;
    case A::Srb:
        return answer_srb(cmd);
    case A::Stall:
        break;
    default:
        return Verdict::Pass; // OpStatus: the command runs; only its operation status differs
    }
    const auto until = spec_.stall_ms ? Clock::now() + std::chrono::milliseconds(spec_.stall_ms) : Clock::time_point::max();
    held_.push_back({&cmd, until});
    stats_.stalled.fetch_add(1, std::memory_order_relaxed);
    cv_.notify_all();
    return Verdict::Held;
}

// srb=: the transport's answer goes on the command. With bytes to report it runs first (a
// short read must have read what it reports); without, it never reaches the backend.
FaultInjector::Verdict FaultInjector::answer_srb(Command& cmd) {
    TransportAnswer& t = cmd.transport;
    t.srb = true;
    t.srb_status = spec_.srb_status;
    t.scsi_status = spec_.scsi_status;
    t.sense = {};
    t.sense_len = spec_.has_sense ? fixed_sense(t.sense, spec_.sense_key, Asc{spec_.asc, spec_.ascq}) : 0;
    constexpr uint8_t kSrbSuccess = 0x01, kSrbStatusMask = 0x3F; // the code without its flags
    const bool success = (spec_.srb_status & kSrbStatusMask) == kSrbSuccess;
    // Without data=, a success reports what the command moves (a READ of fewer blocks than
    // the guest's buffer moves fewer bytes), once it ran; anything else reports none.
    t.data_as_moved = !spec_.has_data && success;
    t.data_length = spec_.has_data ? spec_.data : 0;
    if (spec_.has_data ? spec_.data != 0 : success && cmd.xfer_len != 0) return Verdict::Pass;
    cmd.status = kStatusGood; // the disk's own fields: nothing ran, nothing failed
    cmd.sense_len = 0;
    cmd.data_transferred = 0;
    return Verdict::Answered;
}

void FaultInjector::release(std::vector<Command*> cmds) {
    for (Command* c : cmds) {
        stats_.stalled.fetch_sub(1, std::memory_order_relaxed);
        start_(c);
    }
}

void FaultInjector::run_timer() {
    std::unique_lock lock(mu_);
    while (!stopping_) {
        auto next = Clock::time_point::max();
        for (const Held& h : held_) next = std::min(next, h.until);
        if (next == Clock::time_point::max()) cv_.wait(lock);
        else cv_.wait_until(lock, next);
        std::vector<Command*> due;
        const auto now = Clock::now();
        for (auto it = held_.begin(); it != held_.end();) {
            if (it->until <= now) {
                due.push_back(it->cmd);
                it = held_.erase(it);
            } else {
                ++it;
            }
        }
        if (due.empty()) continue;
        lock.unlock();
        release(std::move(due));
        lock.lock();
    }
}

void FaultInjector::stop() {
    set(FaultSpec{});
    {
        std::lock_guard lock(mu_);
        stopping_ = true;
    }
    cv_.notify_all();
    if (timer_.joinable()) timer_.join();
}

} // namespace detail

} // namespace hvstor::scsi
