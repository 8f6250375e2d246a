#include "fanout.h"

#include <array>
#include <new>

namespace hvstor::scsi::detail {

Fanout::Fanout(Command& cmd, backend::CompletionSink& disk, backend::Op op, size_t count)
    : cmd_(cmd), disk_(disk), op_(op), reqs_(count), remaining_(count) {}

Fanout* Fanout::create(Command& cmd, backend::CompletionSink& disk, backend::Op op, size_t count) {
    if (count == 0 || count > kMaxFanout) return nullptr;
    try {
        auto* f = new Fanout(cmd, disk, op, count);
        for (auto& r : f->reqs_) {
            r.done = f;
            r.opaque = &cmd;
            r.queue = cmd.queue;
        }
        return f;
    } catch (const std::bad_alloc&) {
        return nullptr;
    }
}

Fanout::~Fanout() {
    if (in_flight) in_flight->fetch_sub(1, std::memory_order_release);
}

void Fanout::start(backend::Backend& be) {
    // A copy on the stack: the last completion may free this object, and with it reqs_,
    // while the backend is still walking the list it was given.
    std::array<backend::Request*, kMaxFanout> list{};
    const size_t n = reqs_.size();
    for (size_t i = 0; i < n; i++) list[i] = &reqs_[i];
    be.submit(std::span<backend::Request* const>(list.data(), n));
}

void Fanout::complete(backend::Request* req) {
    if (req->result != 0) {
        int none = 0;
        error_.compare_exchange_strong(none, req->result);
    }
    if (remaining_.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
    backend::Request& carrier = cmd_.be_req;
    carrier = backend::Request{};
    carrier.op = op_;
    carrier.result = error_.load();
    carrier.opaque = &cmd_;
    carrier.done = &disk_;
    backend::CompletionSink& disk = disk_;
    // Gone before the command completes: its sink may tear everything down.
    delete this;
    disk.complete(&carrier);
}

} // namespace hvstor::scsi::detail
