// The model's record of one IO in flight: the scheduler's entry, the guest's request and the
// request made from it for the inner backend. Records are allocated in chunks that live as
// long as the model and are recycled through a free list, so a warm model allocates nothing
// per IO.
#pragma once

#include <memory>
#include <vector>

#include "hvstor/backend/backend.h"
#include "scheduler.h"

namespace hvstor::perf::detail {

struct Io : Entry {
    backend::Request inner;  // what the inner backend sees; opaque points back here
    backend::Request* guest = nullptr;
    Io* free_next = nullptr;
};

class IoPool {
public:
    // A record whose entry's generation (Entry::gen) is kept from its last use, so events
    // still pointing at it stay stale; everything else is the caller's to set.
    Io* get() {
        if (!free_) grow();
        Io* io = free_;
        free_ = io->free_next;
        io->free_next = nullptr;
        return io;
    }
    void put(Io* io) {
        io->free_next = free_;
        free_ = io;
    }

private:
    void grow();

    std::vector<std::unique_ptr<Io[]>> chunks_;
    Io* free_ = nullptr;
};

} // namespace hvstor::perf::detail
