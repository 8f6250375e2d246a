// The exception barrier of the C boundary. An exception unwinding into QEMU's C frames
// ends in std::terminate (the frames have no handlers), so every extern "C" function runs
// its body through guarded() and turns whatever it throws into the function's own way of
// failing: NULL or false with a message, an error status, or a line on stderr.
#pragma once

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <type_traits>
#include <utility>

namespace hvstor::capi {

// What the exception being handled says. Only valid inside a catch block, and allocates
// nothing: the exception may be std::bad_alloc.
inline const char* current_exception_text() noexcept {
    try {
        throw;
    } catch (const std::exception& e) {
        return e.what();
    } catch (...) {
        return "unknown exception";
    }
}

// Runs body(); if it throws, returns on_error(text) instead, where text describes the
// exception (valid during the call). on_error must not throw.
template <typename Body, typename OnError>
auto guarded(Body&& body, OnError&& on_error) noexcept -> std::invoke_result_t<Body&> {
    try {
        return body();
    } catch (...) {
        return on_error(current_exception_text());
    }
}

// A malloc'd copy for the C side to free(); NULL when out of memory (the glue then says so).
inline char* dup_message(const char* s) noexcept {
    const size_t n = std::strlen(s) + 1;
    char* p = static_cast<char*>(std::malloc(n));
    if (p) std::memcpy(p, s, n);
    return p;
}

inline void report_once(std::atomic_flag& logged, const char* where, const char* text) noexcept {
    if (!logged.test_and_set())
        std::fprintf(stderr, "hvstor: %s: %s (later exceptions of this VMBus are not logged)\n", where, text);
}

// on_error for functions that report failure as a value plus a message in *err.
template <typename T>
auto fail_with(char** err, T value) noexcept {
    return [err, value](const char* text) noexcept {
        if (err) *err = dup_message(text);
        return value;
    };
}

// on_error for functions with no message channel: logs the first exception only (`logged`
// belongs to the object the function works on), because the guest drives these paths and a
// fault that repeats on every CPUID or hypercall would flood QEMU's log; then returns
// `value`.
template <typename T>
auto log_once(std::atomic_flag& logged, const char* where, T value) noexcept {
    return [&logged, where, value](const char* text) noexcept {
        report_once(logged, where, text);
        return value;
    };
}
// The same for functions that return nothing.
inline auto log_once(std::atomic_flag& logged, const char* where) noexcept {
    return [&logged, where](const char* text) noexcept { report_once(logged, where, text); };
}

} // namespace hvstor::capi
