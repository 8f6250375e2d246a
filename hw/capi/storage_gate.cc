#include "storage_gate.h"

#include <cerrno>
#include <utility>

#include "hvstor/trace.h"

namespace hvstor::capi {

StorageGate::StorageGate(std::unique_ptr<backend::Backend> storage, RunGate& gate)
    : WrappingBackend(std::move(storage)), gate_(gate) {
    gate_.add_storage(this);
}

StorageGate::~StorageGate() { gate_.remove_storage(this); }

void StorageGate::submit(std::span<backend::Request* const> reqs) {
    if (reqs.empty()) return;
    for (;;) {
        {
            RunGate::Section running(gate_);
            if (running) {
                inner_->submit(reqs);
                return;
            }
        }
        std::unique_lock lock(mu_);
        if (abandoning_) {
            lock.unlock();
            cancel(reqs);
            return;
        }
        // Checked under mu_: a resume that opens the gate after this takes mu_ in
        // on_resume, and finds these.
        if (!gate_.running()) {
            held_.insert(held_.end(), reqs.begin(), reqs.end());
            lock.unlock();
            trace<HVSTOR_TRACE_storage_held>(trace_id(), reqs.size());
            return;
        }
    }
}

void StorageGate::on_resume() {
    std::vector<backend::Request*> go;
    {
        std::lock_guard lock(mu_);
        if (held_.empty()) return;
        go.swap(held_);
        resubmitting_++;
    }
    // Until they are at the storage, a drain (a disk's removal racing `cont`) waits for
    // them: its inner drain would not see them yet.
    struct Done {
        StorageGate& g;
        ~Done() {
            std::lock_guard lock(g.mu_);
            if (--g.resubmitting_ == 0) g.resubmitted_.notify_all();
        }
    } done{*this};
    trace<HVSTOR_TRACE_storage_resumed>(trace_id(), go.size());
    // The resuming thread (QEMU's main loop): the storage's submit does not wait for it,
    // though a file's may wait for room in the kernel's AIO queue.
    submit(go);
}

void StorageGate::drain() {
    {
        std::unique_lock lock(mu_);
        draining_++;
        resubmitted_.wait(lock, [this] { return resubmitting_ == 0; });
        draining_--;
    }
    inner_->drain();
}

void StorageGate::on_pause() {
    // Nothing new reaches the storage now; what it has must finish before the VM counts as
    // stopped. QEMU's block layer is drained by vm_stop itself, after the run-state handlers,
    // and a request it holds for werror=stop never finishes before the VM runs again.
    if (!inner_->drained_by_vmm()) inner_->drain();
}

void StorageGate::abandon(bool on) {
    std::vector<backend::Request*> gone;
    {
        std::lock_guard lock(mu_);
        abandoning_ = on;
        if (on) gone.swap(held_);
    }
    cancel(gone);
}

size_t StorageGate::held() const {
    std::lock_guard lock(mu_);
    return held_.size();
}

int StorageGate::draining() const {
    std::lock_guard lock(mu_);
    return draining_;
}

void StorageGate::cancel(std::span<backend::Request* const> reqs) {
    if (reqs.empty()) return;
    trace<HVSTOR_TRACE_storage_cancelled>(trace_id(), reqs.size());
    for (backend::Request* r : reqs) {
        r->result = -ECANCELED;
        r->done->complete(r);
    }
}

} // namespace hvstor::capi
