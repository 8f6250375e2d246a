// Fault injection: the text form of a fault, and the injector the Disk consults.
#include <charconv>
#include <system_error>

#include "fault_injector.h"
#include "target.h"
#include "hvstor/thread.h"

namespace hvstor::scsi {

namespace {

bool number(std::string_view s, uint64_t& out) {
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    return ec == std::errc() && p == s.data() + s.size() && !s.empty();
}

bool bounded(std::string_view key, std::string_view v, uint64_t lo, uint64_t hi, uint64_t& out, std::string& err) {
    if (number(v, out) && out >= lo && out <= hi) return true;
    err = "fault: " + std::string(key) + "=" + std::string(v) + " is not a number in " + std::to_string(lo) + ".." +
          std::to_string(hi);
    return false;
}

bool parse_action(std::string_view key, std::string_view v, FaultSpec& f, std::string& err) {
    using A = FaultSpec::Action;
    if (key == "error") {
        if (v == "medium") f.action = A::MediumError;
        else if (v == "not-ready") f.action = A::NotReady;
        else if (v == "unit-attention") f.action = A::UnitAttention;
        else if (v == "busy") f.action = A::Busy;
        else {
            err = "fault: error=" + std::string(v) + " is not one of medium, not-ready, unit-attention, busy";
            return false;
        }
        return true;
    }
    f.action = A::Stall;
    if (v == "hold") return true;
    uint64_t ms;
    if (!bounded(key, v, 1, 3600000, ms, err)) return false;
    f.stall_ms = uint32_t(ms);
    return true;
}

bool parse_ops(std::string_view v, FaultSpec& f, std::string& err) {
    f.reads = v == "read" || v == "any";
    f.writes = v == "write" || v == "any";
    f.flushes = v == "flush" || v == "any";
    if (f.reads || f.writes || f.flushes) return true;
    err = "fault: ops=" + std::string(v) + " is not one of read, write, flush, any";
    return false;
}

bool parse_lba(std::string_view v, FaultSpec& f, std::string& err) {
    const size_t dash = v.find('-');
    const std::string_view first = v.substr(0, dash), last = dash == v.npos ? first : v.substr(dash + 1);
    if (number(first, f.lba_first) && number(last, f.lba_last) && f.lba_first <= f.lba_last) return true;
    err = "fault: lba=" + std::string(v) + " is not FIRST or FIRST-LAST (FIRST <= LAST)";
    return false;
}

bool parse_item(std::string_view key, std::string_view v, FaultSpec& f, bool& have_action, std::string& err) {
    uint64_t n;
    if (key == "error" || key == "stall") {
        if (have_action) {
            err = "fault: more than one action (error= or stall=)";
            return false;
        }
        have_action = true;
        return parse_action(key, v, f, err);
    }
    if (key == "ops") return parse_ops(v, f, err);
    if (key == "lba") return parse_lba(v, f, err);
    if (key == "every") return bounded(key, v, 1, 1000000, n, err) && (f.every = uint32_t(n), true);
    if (key == "percent") return bounded(key, v, 1, 100, n, err) && (f.percent = uint32_t(n), true);
    if (key == "seed") return bounded(key, v, 0, UINT64_MAX, f.seed, err);
    if (key == "count") return bounded(key, v, 1, UINT64_MAX, f.count, err);
    err = "fault: unknown setting '" + std::string(key) + "' (want error=, stall=, ops=, lba=, every=, percent=, seed=, count=)";
    return false;
}

// The blocks a read or write touches; false for other commands.
bool extent(const Command& cmd, uint64_t& lba, uint64_t& blocks) {
    const uint8_t* c = cmd.cdb.data();
    using namespace detail;
    switch (c[0]) {
    case op::kRead6:
    case op::kWrite6:
        lba = (c[1] & 0x1Fu) << 16 | c[2] << 8 | c[3];
        blocks = c[4] ? c[4] : 256;
        return true;
    case op::kRead10:
    case op::kWrite10:
        lba = get32(&c[2]);
        blocks = get16(&c[7]);
        return true;
    case op::kRead12:
    case op::kWrite12:
        lba = get32(&c[2]);
        blocks = get32(&c[6]);
        return true;
    case op::kRead16:
    case op::kWrite16:
        lba = get64(&c[2]);
        blocks = get32(&c[10]);
        return true;
    default:
        return false;
    }
}

bool is_read(uint8_t opcode) {
    using namespace detail::op;
    return opcode == kRead6 || opcode == kRead10 || opcode == kRead12 || opcode == kRead16;
}
bool is_flush(uint8_t opcode) { return opcode == detail::op::kSyncCache10 || opcode == detail::op::kSyncCache16; }

} // namespace

bool parse_fault(std::string_view text, FaultSpec& out, std::string& err) {
    FaultSpec f;
    bool have_action = false;
    if (text.empty() || text == "none") {
        out = f;
        return true;
    }
    while (!text.empty()) {
        const size_t comma = text.find(',');
        const std::string_view item = text.substr(0, comma);
        text = comma == text.npos ? std::string_view() : text.substr(comma + 1);
        const size_t eq = item.find('=');
        if (eq == item.npos) {
            err = "fault: '" + std::string(item) + "' is not NAME=VALUE";
            return false;
        }
        if (!parse_item(item.substr(0, eq), item.substr(eq + 1), f, have_action, err)) return false;
    }
    if (!have_action) {
        err = "fault: no action (error=... or stall=...)";
        return false;
    }
    out = f;
    return true;
}

namespace detail {

void FaultInjector::set(const FaultSpec& spec) {
    std::vector<Command*> now;
    {
        std::lock_guard lock(mu_);
        spec_ = spec;
        matched_ = injected_ = 0;
        // splitmix64 of the seed: every seed a different, non-zero xorshift state.
        uint64_t z = spec.seed + 0x9E3779B97F4A7C15ull;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        rng_ = z ? z : 1;
        for (const Held& h : held_) now.push_back(h.cmd);
        held_.clear();
        active_.store(spec.action != FaultSpec::Action::None && !suspended_);
    }
    release(std::move(now));
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
    uint64_t lba, blocks;
    if (!extent(cmd, lba, blocks)) return false;
    if (!(is_read(opcode) ? spec_.reads : spec_.writes)) return false;
    // Touches [lba_first, lba_last]: starts at or before its end and ends after its start.
    return lba <= spec_.lba_last && (blocks == 0 ? lba : lba + blocks - 1) >= spec_.lba_first;
}

FaultInjector::Verdict FaultInjector::check(Command& cmd) {
    using A = FaultSpec::Action;
    if (!active_.load(std::memory_order_relaxed)) return Verdict::Pass;
    std::lock_guard lock(mu_);
    if (spec_.action == A::None || suspended_ || !matches(cmd) || ++matched_ % spec_.every != 0) return Verdict::Pass;
    if (spec_.percent < 100) {
        rng_ ^= rng_ << 13; // xorshift64: the same seed injects into the same commands
        rng_ ^= rng_ >> 7;
        rng_ ^= rng_ << 17;
        if (rng_ % 100 >= spec_.percent) return Verdict::Pass;
    }
    if (spec_.count && injected_ >= spec_.count) return Verdict::Pass;
    if (spec_.action == A::Stall && !timer_.joinable() && spec_.stall_ms) {
        try {
            timer_ = start_thread("hvstor-fault", [this] { run_timer(); });
        } catch (const std::system_error&) {
            return Verdict::Pass; // no thread to time the stall: the command runs
        }
    }
    injected_++;
    stats_.faults.fetch_add(1, std::memory_order_relaxed);
    cmd.data_transferred = 0;
    switch (spec_.action) {
    case A::MediumError:
        if (is_read(cmd.cdb[0])) fail(cmd, kSenseMediumError, kUnrecoveredReadError);
        else fail(cmd, kSenseMediumError, kWriteError);
        return Verdict::Answered;
    case A::NotReady:
        fail(cmd, kSenseNotReady, Asc{0x04, 0x01}); // becoming ready: the guest retries
        return Verdict::Answered;
    case A::UnitAttention:
        fail(cmd, kSenseUnitAttention, Asc{0x29, 0x00}); // power on, reset or bus device reset
        return Verdict::Answered;
    case A::Busy:
        busy(cmd);
        return Verdict::Answered;
    default:
        break;
    }
    const auto until = spec_.stall_ms ? Clock::now() + std::chrono::milliseconds(spec_.stall_ms) : Clock::time_point::max();
    held_.push_back({&cmd, until});
    stats_.stalled.fetch_add(1, std::memory_order_relaxed);
    cv_.notify_all();
    return Verdict::Held;
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
