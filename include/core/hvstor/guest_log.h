// Reports a guest's protocol violations, one line each naming where, the field and its
// value ("relid 3: SRB cdb_length 20 > 16"), through Host::guest_error (QEMU: LOG_GUEST_ERROR).
// A guest can make every packet bad, so each reporter lets through a burst of lines and then
// one line per second, and says how many it held back.
#pragma once

#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <string>

#include "hvstor/host.h"

namespace hvstor {

class GuestErrorLog {
public:
    static constexpr int kBurst = 20;

    GuestErrorLog(Host& host, std::string prefix) : host_(host), prefix_(std::move(prefix)) {}

    // Not thread-safe: one reporter per thread (a channel's worker), or under a lock.
    [[gnu::format(printf, 2, 3)]] void operator()(const char* fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        vlog(fmt, ap);
        va_end(ap);
    }
    [[gnu::format(printf, 2, 0)]] void vlog(const char* fmt, va_list ap) {
        const auto now = std::chrono::steady_clock::now();
        if (now - window_ >= std::chrono::seconds(1)) {
            window_ = now;
            budget_ = budget_ < kBurst ? budget_ + 1 : kBurst;
        }
        if (budget_ == 0) {
            held_back_++;
            return;
        }
        budget_--;
        char msg[256];
        std::vsnprintf(msg, sizeof msg, fmt, ap);
        std::string line = prefix_ + msg;
        if (held_back_) {
            line += " (" + std::to_string(held_back_) + " more held back)";
            held_back_ = 0;
        }
        host_.guest_error(line.c_str());
    }

    void set_prefix(std::string prefix) { prefix_ = std::move(prefix); }

private:
    Host& host_;
    std::string prefix_;
    int budget_ = kBurst;
    unsigned long held_back_ = 0;
    std::chrono::steady_clock::time_point window_{};
};

} // namespace hvstor
