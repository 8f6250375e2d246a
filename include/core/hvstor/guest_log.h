// Reports a guest's protocol violations, one line each naming where, the field and its
// value ("relid 3: SRB cdb_length 20 > 16"), through Host::guest_error (QEMU: LOG_GUEST_ERROR).
// A guest can make every packet bad, so each reporter lets through a burst of lines and then
// one line per second, and says how many it held back. Reporters that live shorter than what
// they report on (a channel's runtime, made anew on every OPENCHANNEL) or that share one
// device (the channels of a controller) draw on one budget that outlives them all: a guest
// that reopens a channel in a loop, or breaks every channel at once, gets one burst and then
// one line a second for the whole device. Time comes from Host::now(), which tests move by hand.
#pragma once

#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <mutex>
#include <string>

#include "hvstor/host.h"

namespace hvstor {

// How many lines may go out now; any thread (two vCPUs and the channels' workers race).
class GuestErrorBudget {
public:
    static constexpr int kBurst = 20;

    // True when a line may go out at `now`; `held` is then how many were held back before it.
    bool take(std::chrono::steady_clock::time_point now, unsigned long& held) {
        std::lock_guard lock(mu_);
        if (now - window_ >= std::chrono::seconds(1)) {
            window_ = now;
            budget_ = budget_ < kBurst ? budget_ + 1 : kBurst;
        }
        if (budget_ == 0) {
            held_back_++;
            return false;
        }
        budget_--;
        held = held_back_;
        held_back_ = 0;
        return true;
    }

private:
    std::mutex mu_;
    int budget_ = kBurst;
    unsigned long held_back_ = 0;
    std::chrono::steady_clock::time_point window_{};
};

class GuestErrorLog {
public:
    static constexpr int kBurst = GuestErrorBudget::kBurst;

    // `shared`, when given, outlives the reporter and may be shared with others.
    GuestErrorLog(Host& host, std::string prefix, GuestErrorBudget* shared = nullptr)
        : host_(host), prefix_(std::move(prefix)), budget_(shared ? *shared : own_) {}
    GuestErrorLog(const GuestErrorLog&) = delete;
    GuestErrorLog& operator=(const GuestErrorLog&) = delete;

    // The prefix is not thread-safe: one reporter per thread (a channel's worker), or under
    // a lock; the budget is.
    [[gnu::format(printf, 2, 3)]] void operator()(const char* fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        vlog(fmt, ap);
        va_end(ap);
    }
    [[gnu::format(printf, 2, 0)]] void vlog(const char* fmt, va_list ap) {
        unsigned long held = 0;
        if (!budget_.take(host_.now(), held)) return;
        char msg[256];
        std::vsnprintf(msg, sizeof msg, fmt, ap);
        std::string line = prefix_ + msg;
        if (held) line += " (" + std::to_string(held) + " more held back)";
        host_.guest_error(line.c_str());
    }

    void set_prefix(std::string prefix) { prefix_ = std::move(prefix); }

private:
    Host& host_;
    std::string prefix_;
    GuestErrorBudget own_;
    GuestErrorBudget& budget_;
};

} // namespace hvstor
