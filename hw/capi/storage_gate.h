// A disk's storage behind the VM's run gate (hvstor/run_gate.h): no request reaches the
// storage while the VM is stopped, and stopping waits for the ones already there.
//
// A channel submits only inside a Section, so while the VM is stopped the guest sends
// nothing new. But two things above the storage release requests on their own timers: a
// disk model that held a request for its modelled latency or caps, and a stall fault. A read
// released to storage writes guest memory, and a stopped VM's memory must not change (a
// debugger's view, a memory dump, savevm). This wrapper, right above the storage, hands
// requests on inside a Section and holds those that come while the VM is stopped until it
// runs again. When the VM stops it waits for what the storage still has (on_pause), unless
// the VMM drains that storage itself (QEMU's block layer: Backend::drained_by_vmm).
//
// A private header of hw/capi: the disk factory puts one around every disk's storage.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "hvstor/backend/backend.h"
#include "hvstor/run_gate.h"

namespace hvstor::capi {

class StorageGate final : public backend::WrappingBackend, private RunGate::Listener {
public:
    StorageGate(std::unique_ptr<backend::Backend> storage, RunGate& gate);
    // Held requests must be gone (abandon) and the storage drained before.
    ~StorageGate() override;

    void submit(std::span<backend::Request* const> reqs) override;
    // Waits for the storage, and for held requests that a resume is handing to it. Those
    // still held while the VM is stopped are not waited for: the caller abandons them first
    // (a disk going away, a machine reset).
    void drain() override;

    // While on, requests held or arriving while the VM is stopped complete with -ECANCELED
    // instead of waiting for the VM to run (a machine reset, a disk's removal); those the VM
    // runs for still go to the storage. Off again: held as before.
    void abandon(bool on);

    // Requests held for the VM to run (statistics and tests).
    size_t held() const;
    // Drains waiting for a resume to hand held requests on (tests).
    int draining() const;

private:
    void on_resume() override;
    void on_pause() override;
    void cancel(std::span<backend::Request* const> reqs);

    RunGate& gate_;
    mutable std::mutex mu_;
    std::vector<backend::Request*> held_;  // at most what the guest has outstanding
    bool abandoning_ = false;
    int resubmitting_ = 0;                 // resumes handing held requests to the storage
    int draining_ = 0;                     // drains waiting for them
    std::condition_variable resubmitted_;
};

} // namespace hvstor::capi
