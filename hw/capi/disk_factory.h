// Building a disk from its settings: the backend (file, RAM or null), the performance
// model around it when asked for, the SCSI disk over that, attached to a controller's LUN.
//
// A private header of hw/capi: only capi.cc and the tests use it. The QEMU glue sees the C
// ABI alone, and no layer below capi may depend on how devices are assembled.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "hvstor/backend/backend.h"
#include "hvstor/capi.h"
#include "hvstor/perf/clock.h"
#include "hvstor/perf/model.h"
#include "hvstor/perf/vm.h"
#include "hvstor/run_gate.h"
#include "hvstor/scsi/disk.h"
#include "hvstor/state.h"
#include "hvstor/storvsp/controller.h"

namespace hvstor::capi {

class StorageGate;

// What an hv-disk's properties ask for.
struct DiskSpec {
    std::string backend;  // "file", "ram", "null" or "drive"
    std::string path;     // file
    std::optional<HvstorBlockOps> block;  // drive: the glue's storage (QEMU's block layer)
    uint64_t size = 0;    // ram, null: bytes, a non-zero multiple of 512
    bool read_only = false;
    bool direct = true;   // file: O_DIRECT where the file system allows it
    std::string serial;   // "" for none
    uint8_t lun = 0;
    std::string perf;     // performance model settings (docs/perf-model.md), "" for none
    // The caps this disk shares with the other disks of one model object (perf::VmLimits::
    // group); passed after the disk's own caps and before the VM's. Null for none.
    std::shared_ptr<perf::VmLimits> group;
    std::string name;     // statistics and timeline; "" means "lun<N>"
    std::string fault;    // injected fault (hvstor/scsi/fault.h), "" for none
    // The device's own notices of this disk: ENUMERATE_BUS when it is attached or detached,
    // UNIT ATTENTION when its capacity changes. Without them the guest learns of either
    // only when a test tells it (hv-storvsc notify=, a fault's srb=...,sense=6/2a/09).
    bool notices = true;
};

// A disk on a LUN, with everything it is built from. Destroying it detaches the LUN (see
// detach), then waits for the I/O the disk still has in its backend; it must go before its
// controller.
class AttachedDisk {
public:
    ~AttachedDisk();
    AttachedDisk(const AttachedDisk&) = delete;
    AttachedDisk& operator=(const AttachedDisk&) = delete;

    const std::string& name() const { return name_; }
    uint8_t lun() const { return lun_; }

    // Takes the disk off its LUN: the guest is told to rescan (unless the disk was made
    // without notices) and later commands for the
    // LUN are answered as for an absent one. Returns once no channel worker can still hold
    // the disk, with the commands a stall fault held handed to the backend; what the disk
    // has in its backend is still running. Once only; the destructor does it otherwise.
    void detach();
    // What the SCSI disk submits to: the model when there is one, else the storage.
    backend::Backend& backend() { return *backend_; }
    perf::ModelBackend* model() { return model_; }  // null without perf settings
    const scsi::Disk& scsi() const { return *disk_; }

    // Live statistics as one JSON object: the model's when there is one, else the SCSI
    // disk's counters.
    std::string stats_json();

    // Replaces the injected fault (hvstor/scsi/fault.h; "none" clears it). Throws DiskError
    // with the reason when the text is not a fault; nothing changes then.
    void set_fault(std::string_view text);
    // The fault in effect, as it was set ("none" for none).
    std::string fault() const;
    // Saved state: the fault's text and where it stands (scsi::FaultCounts), then the
    // model's buckets when the disk has a model (last: the bytes a clock changes). A load
    // reads the fault whole and checks it before anything changes; then the disk's fault
    // is the saved one, going on from its counts. A bad one fails the reader.
    void save(state::Writer& w);
    void load(state::Reader& r);
    // See scsi::Disk::suspend_faults.
    void suspend_faults(bool on) { disk_->suspend_faults(on); }
    // See perf::ModelBackend::abandon and StorageGate::abandon: what the model holds back,
    // and what waits for a stopped VM to run, is cancelled.
    void abandon_io(bool on);

    // Changes the capacity while the guest runs (scsi::Disk::resize: the guest's next
    // command gets a unit attention). Throws DiskError with the reason when the size is not
    // a non-zero multiple of 512 or the backend cannot take it; nothing changes then.
    void resize(uint64_t bytes);
    uint64_t size_bytes() const { return backend_->size(); }

private:
    friend class DiskFactory;
    AttachedDisk(storvsp::Controller& ctl, uint8_t lun, std::string name, bool notices);
    // The fault `f`, written as `text`; going on from `counts` when given.
    void apply_fault(const scsi::FaultSpec& f, std::string_view text, const scsi::FaultCounts* counts);

    storvsp::Controller& ctl_;
    const uint8_t lun_;
    const bool notices_;
    const std::string name_;
    std::unique_ptr<backend::Backend> backend_;
    perf::ModelBackend* model_ = nullptr;  // backend_.get() when modelled
    StorageGate* gate_ = nullptr;          // around the storage, when built with a run gate
    std::unique_ptr<scsi::Disk> disk_;
    bool attached_ = false;
    // fault_, and its change with the disk's. Taken after the controller's lock and before
    // the injector's; held while a change releases the commands a stall held.
    mutable std::mutex fault_mu_;
    std::string fault_ = "none";
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
    // `gate`: the VM's run state; with one, each disk's storage is a StorageGate's (no
    // request reaches it while the VM is stopped). It must outlive the disks.
    explicit DiskFactory(std::shared_ptr<perf::VmLimits> vm = nullptr, perf::Clock* clock = nullptr,
                         RunGate* gate = nullptr)
        : vm_(std::move(vm)), clock_(clock), gate_(gate) {}

    // Builds the disk `spec` describes and attaches it to `ctl`. Throws DiskError.
    std::unique_ptr<AttachedDisk> attach(storvsp::Controller& ctl, const DiskSpec& spec) const;

    // The storage alone (no model): the file, RAM, null or drive backend, read-only if asked.
    // Throws DiskError.
    static std::unique_ptr<backend::Backend> open_storage(const DiskSpec& spec);

private:
    std::unique_ptr<perf::ModelBackend> wrap_in_model(std::unique_ptr<backend::Backend> storage,
                                                      const DiskSpec& spec, const std::string& name) const;

    std::shared_ptr<perf::VmLimits> vm_;
    perf::Clock* clock_;
    RunGate* gate_;
};

} // namespace hvstor::capi
