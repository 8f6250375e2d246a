// The device model of one VM as the QEMU glue builds it: the Hyper-V partition, the VMBus
// server on its SynIC, the VM-wide performance caps, and the SCSI controllers with their
// disks. Each object owns what it built, so tearing down the machine tears down everything
// in the order the parts need: disks, then controllers, then the server and partition.
//
// A private header of hw/capi, like disk_factory.h.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "disk_factory.h"
#include "hvstor/host.h"
#include "hvstor/hyperv/partition.h"
#include "hvstor/perf/vm.h"
#include "hvstor/state.h"
#include "hvstor/storvsp/controller.h"
#include "hvstor/vmbus/guid.h"
#include "hvstor/vmbus/server.h"

namespace hvstor::capi {

// "5.3" for vmbus::version::kV5_3.
std::string version_text(uint32_t version);
// The versions the server speaks, newest first: "5.3 5.2 5.1 5.0 4.1 4.0 3.0 2.4".
std::string known_versions();

struct MachineConfig {
    uint32_t nr_vps = 1;          // 1..4096
    uint16_t hypercall_port = 0;  // the I/O port the hypercall page traps through
    uint32_t max_version = vmbus::version::kV5_3;  // one of vmbus::version::kAll
};

// Bad settings of a machine or a controller, in words for the user.
class ConfigError : public std::invalid_argument {
public:
    using std::invalid_argument::invalid_argument;
};

class Machine;

// A started controller (its primary channel offered) and the disks on its LUNs.
class ScsiController {
public:
    // Throws ConfigError for settings out of range, std::runtime_error when the offer fails.
    // With `loops`, the channels turn in them, without, in threads of their own: cfg.loops
    // is set from them (they live as long as the controller).
    ScsiController(Machine& machine, const vmbus::Guid& instance, storvsp::ControllerConfig cfg,
                   std::vector<std::unique_ptr<vmbus::EventLoop>> loops = {});
    ~ScsiController();
    ScsiController(const ScsiController&) = delete;
    ScsiController& operator=(const ScsiController&) = delete;

    storvsp::Controller& controller() { return *ctl_; }

    // Builds a disk with the machine's DiskFactory and keeps it until the controller goes.
    // Throws DiskError.
    AttachedDisk& add_disk(const DiskSpec& spec);

    // Hot removal: takes `disk` off its LUN (the guest is told to rescan), waits for its I/O
    // and frees it. Throws std::invalid_argument when `disk` is not one of this controller's
    // disks (never added, or removed already); nothing changes then.
    void remove_disk(const AttachedDisk* disk);

    // Hot removal that does not wait for the disk's I/O: takes `disk` off its LUN now
    // (AttachedDisk::detach), then, on a thread of its own, waits for its I/O, frees it and
    // calls `done` (from that thread). For a VMM that must not block while a slow or
    // throttled backend finishes what it was given. Throws as remove_disk; nothing changes
    // then. Without a thread to spare it does the rest here, done() included.
    void start_removal(const AttachedDisk* disk, std::function<void()> done);

    size_t disk_count();

    // Live statistics as JSON (hvstor_controller_stats_json).
    std::string stats_json() const;

    // Saved state: the controller's, then each disk's (by LUN: its model's buckets). A load
    // needs the same disks at the same LUNs, each modelled or not as in the state.
    void save(state::Writer& w);
    void load(state::Reader& r);
    // The controller's finish_load() and abort_load() (storvsp::Controller), after the bus's.
    // A failed load also puts the buckets of the models it loaded back as they were: a
    // machine reset leaves them alone, and the load must leave nothing of the state behind.
    void finish_load();
    void abort_load();

    // Every disk's injected faults off (true) or back on (false).
    void suspend_faults(bool on);
    // Every modelled disk's requests abandoned (true: cancelled unless at the storage) or
    // modelled again (false): perf::ModelBackend::abandon, for a machine reset.
    void abandon_io(bool on);

    // hv-storvsc's notify: "enumerate-bus" or "remove-device" to the guest now. Throws
    // ConfigError for another value, std::runtime_error when the guest has no session.
    void notify(std::string_view what);
    // hv-storvsc's reset: "answer", "ignore" or "fail" (storvsp::ResetAnswer). Throws
    // ConfigError for another value; nothing changes then.
    void set_reset(std::string_view how);
    std::string reset() const { return storvsp::reset_answer_name(ctl_->reset_answer()); }

private:
    Machine& machine_;
    std::vector<std::unique_ptr<vmbus::EventLoop>> loops_; // before the controller: outlive it
    std::unique_ptr<storvsp::Controller> ctl_;
    // Off the list; throws std::invalid_argument when it is not there.
    std::unique_ptr<AttachedDisk> take(const AttachedDisk* disk);
    std::unique_ptr<AttachedDisk> take_locked(const AttachedDisk* disk); // mu_ held

    std::mutex mu_;  // disks_, removals_, disks_before_: the glue may realize devices from more than one thread
    std::vector<std::unique_ptr<AttachedDisk>> disks_;
    // load(): each disk it loaded, by LUN, as it was before (AttachedDisk::save), for
    // abort_load().
    std::vector<std::pair<uint8_t, std::vector<uint8_t>>> disks_before_;
    // Removal threads: each finishes a disk, which completes through the controller, so
    // they are joined before it goes; finished ones when the next removal starts.
    struct RemovalState {
        std::unique_ptr<AttachedDisk> disk;
        std::function<void()> done;
        std::atomic<bool> over{false};
        void finish();
    };
    struct Removal {
        std::thread thread;
        std::shared_ptr<RemovalState> state;
    };
    std::vector<Removal> removals_;
};

// Throws ConfigError unless the settings are ones a controller can run with.
void check_controller_config(const storvsp::ControllerConfig& cfg);

class Machine {
public:
    // Throws ConfigError for settings out of range.
    Machine(Host& host, const MachineConfig& cfg);
    ~Machine();
    Machine(const Machine&) = delete;
    Machine& operator=(const Machine&) = delete;

    Host& host() { return host_; }
    hv::Partition& partition() { return partition_; }
    vmbus::Server& server() { return server_; }

    // Power-on state for a machine reset: the guest's connection first, then the SynIC and
    // MSRs it was built on.
    void reset();

    // Saved state (savevm, migration), with the VM stopped: the partition, the VMBus server
    // and each controller, in one versioned stream (hvstor_vmbus_save).
    std::vector<uint8_t> save();
    // Loads what save() wrote, with the VM stopped and the machine just reset. Throws
    // std::runtime_error naming what could not be loaded; the machine is reset then.
    void load(std::span<const uint8_t> data);

    // The VM stops (false) or runs again (true): the host's RunGate. Pausing waits for the
    // rounds and deliveries in progress, running the host's poll meanwhile.
    void set_running(bool running);

    // VM-level caps for the modelled disks created afterwards, from a property string such
    // as "profile=Standard_F32s_v2,time-scale=8". Throws ConfigError.
    void set_vm_perf(std::string_view spec);

    // Live statistics of the bus as JSON (hvstor_vmbus_stats_json).
    std::string stats_json();

    // Builds disks sharing this machine's VM caps (those set when it is called).
    DiskFactory disk_factory() const;

    // Builds and starts a controller, kept until the machine goes. Throws as its constructor.
    ScsiController& add_controller(const vmbus::Guid& instance, const storvsp::ControllerConfig& cfg,
                                   std::vector<std::unique_ptr<vmbus::EventLoop>> loops = {});

private:
    void load_parts(std::span<const uint8_t> data);

    Host& host_;
    hv::Partition partition_;
    vmbus::Server server_;
    mutable std::mutex mu_;  // vm_limits_, controllers_
    std::shared_ptr<perf::VmLimits> vm_limits_;
    std::vector<std::unique_ptr<ScsiController>> controllers_;
};

} // namespace hvstor::capi
