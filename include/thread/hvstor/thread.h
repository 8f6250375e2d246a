// The threads the device model starts, and the host's hooks on them.
//
// A VMM may need to know every thread that calls into it. QEMU does: guest memory accesses
// (address_space_*, the RAM block lookups behind address_space_unmap) take its RCU read
// lock, and a read lock taken by a thread RCU does not know of does not hold off a memory
// map change, which then frees the FlatView under it. So every thread of the model runs
// the host's `enter` hook before anything else and its `leave` hook last, after its last
// call into the host (QEMU: rcu_register_thread / rcu_unregister_thread).
//
// Header only, and seen by every layer that starts threads (backend, scsi, perf, vmbus,
// storvsp): it includes nothing of ours.
#pragma once

#include <pthread.h>

#include <atomic>
#include <string>
#include <thread>
#include <utility>

namespace hvstor {

struct ThreadHooks {
    void (*enter)() = nullptr; // first thing on the new thread
    void (*leave)() = nullptr; // last thing on it
};

namespace thread_detail {
// One slot, published whole: a thread runs the enter and leave of the same hooks.
inline std::atomic<const ThreadHooks*> hooks{nullptr};
} // namespace thread_detail

// Sets the hooks for threads started from now on; `hooks` must outlive every thread of the
// model (a static). nullptr: none. Threads already running keep the hooks they started with.
inline void set_thread_hooks(const ThreadHooks* hooks) {
    thread_detail::hooks.store(hooks, std::memory_order_release);
}

// std::thread running a copy of fn between the hooks, named `name` for ps, top and gdb
// (Linux shows the first 15 characters). The copy is also destroyed between them: what it
// holds may call the host when it goes (the last reference to a channel unmaps its rings).
// Throws std::system_error as std::thread does; the caller's fn is untouched then, so a
// caller can run it itself instead.
template <typename F> std::thread start_thread(std::string name, const F& fn) {
    const ThreadHooks* h = thread_detail::hooks.load(std::memory_order_acquire);
    // An init-capture: a plain [fn] of a const reference would capture a const F, which the
    // body below could only copy, leaving the closure's copy to be destroyed after leave.
    return std::thread([h, name = std::move(name), fn = F(fn)]() mutable {
        pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
        if (h && h->enter) h->enter();
        struct Leave {
            const ThreadHooks* h;
            ~Leave() {
                if (h && h->leave) h->leave();
            }
        } leave{h};
        F body = std::move(fn);
        body();
    });
}

} // namespace hvstor
