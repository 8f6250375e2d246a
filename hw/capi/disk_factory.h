// Building a disk from its settings: the backend (file, RAM or null), the performance
// model around it when asked for, the SCSI disk over that, attached to a controller's LUN.
//
// A private header of hw/capi: only capi.cc and the tests use it. The QEMU glue sees the C
// ABI alone, and no layer below capi may depend on how devices are assembled.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

#include "hvstor/backend/backend.h"
#include "hvstor/perf/clock.h"
#include "hvstor/perf/model.h"
#include "hvstor/perf/vm.h"
#include "hvstor/scsi/disk.h"
#include "hvstor/storvsp/controller.h"

namespace hvstor::capi {

// What an hv-disk's properties ask for.
struct DiskSpec {
    std::string backend;  // "file", "ram" or "null"
    std::string path;     // file
    uint64_t size = 0;    // ram, null: bytes, a non-zero multiple of 512
    bool read_only = false;
    bool direct = true;   // file: O_DIRECT where the file system allows it
    std::string serial;   // "" for none
    uint8_t lun = 0;
    std::string perf;     // performance model settings (docs/perf-model.md), "" for none
    std::string name;     // statistics and timeline; "" means "lun<N>"
};

// What the SCSI disk submits to: passes requests to the disk's backend until closed. After
// close() it never touches that backend again and fails each request with -ENODEV, so the
// backend can be freed while a channel worker may still hold the SCSI disk: storvsp looks
// LUNs up without a lock, and a worker that found the disk just before it was detached may
// submit to it afterwards.
class BackendGate final : public backend::Backend {
public:
    explicit BackendGate(backend::Backend& inner);

    uint64_t size() const override { return size_; }
    uint32_t block_size() const override { return block_size_; }
    bool read_only() const override { return read_only_; }
    std::string describe() const override;
    void submit(std::span<backend::Request* const> reqs) override;
    // The backend's drain() while open; nothing to wait for once closed.
    void drain() override;

    // Returns once no submit() is inside the backend; later ones fail. The backend's own
    // requests still run: drain it next.
    void close();
    bool closed() const { return closed_.load(); }

private:
    backend::Backend* inner_;
    // Kept: the SCSI disk asks on every submit, also after close().
    const uint64_t size_;
    const uint32_t block_size_;
    const bool read_only_;
    std::atomic<bool> closed_{false};
    std::atomic<uint32_t> users_{0};  // submit() calls in progress
};

// A disk on a LUN, with everything it is built from. It must go before its controller.
class AttachedDisk {
public:
    // retire(), if not done, and frees the rest: only once no channel worker can hold the
    // SCSI disk (never attached, or the controller's channels are stopped).
    ~AttachedDisk();
    AttachedDisk(const AttachedDisk&) = delete;
    AttachedDisk& operator=(const AttachedDisk&) = delete;

    const std::string& name() const { return name_; }
    uint8_t lun() const { return lun_; }
    // What the SCSI disk submits to (through the gate): the model when there is one, else
    // the storage. Not after retire().
    backend::Backend& backend() { return *backend_; }
    perf::ModelBackend* model() { return model_; }  // null without perf settings
    const scsi::Disk& scsi() const { return *disk_; }

    // Live statistics as one JSON object: the model's when there is one, else the SCSI
    // disk's counters.
    std::string stats_json();

    // Takes the disk off its LUN (the guest is told to rescan), closes the gate, waits until
    // none of its requests is left in the backend, and frees the backend and model. The
    // SCSI disk and the gate stay, for a channel worker that may still hold the disk: the
    // object must be kept until the controller's workers are gone. Once; later calls do
    // nothing. Allocates nothing.
    void retire();
    bool retired() const { return retired_; }

private:
    friend class DiskFactory;
    AttachedDisk(storvsp::Controller& ctl, uint8_t lun, std::string name);

    storvsp::Controller& ctl_;
    const uint8_t lun_;
    const std::string name_;
    std::unique_ptr<backend::Backend> backend_;
    perf::ModelBackend* model_ = nullptr;  // backend_.get() when modelled
    std::unique_ptr<BackendGate> gate_;    // over backend_
    std::unique_ptr<scsi::Disk> disk_;     // over gate_
    bool attached_ = false;
    bool retired_ = false;
};

// Why a disk could not be built, in words for the user: bad settings name the setting.
class DiskError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

class DiskFactory {
public:
    // `vm`: the VM's caps, shared by every modelled disk this factory builds (may be null).
    // `clock`: the models' clock; null for the host's. Another clock must outlive the disks.
    explicit DiskFactory(std::shared_ptr<perf::VmLimits> vm = nullptr, perf::Clock* clock = nullptr)
        : vm_(std::move(vm)), clock_(clock) {}

    // Builds the disk `spec` describes and attaches it to `ctl`. Throws DiskError.
    std::unique_ptr<AttachedDisk> attach(storvsp::Controller& ctl, const DiskSpec& spec) const;

    // The storage alone (no model): the file, RAM or null backend, read-only if asked.
    // Throws DiskError.
    static std::unique_ptr<backend::Backend> open_storage(const DiskSpec& spec);

private:
    std::unique_ptr<perf::ModelBackend> wrap_in_model(std::unique_ptr<backend::Backend> storage,
                                                      const std::string& settings, const std::string& name) const;

    std::shared_ptr<perf::VmLimits> vm_;
    perf::Clock* clock_;
};

} // namespace hvstor::capi
