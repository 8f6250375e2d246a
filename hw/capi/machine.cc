#include "machine.h"

#include <algorithm>
#include <string>
#include <system_error>

#include "hvstor/json.h"
#include "hvstor/state.h"
#include "hvstor/thread.h"

namespace hvstor::capi {

namespace {

// Checked before the partition allocates per-VP state for a count nothing can use.
hv::PartitionConfig partition_config(const MachineConfig& cfg) {
    if (cfg.nr_vps == 0 || cfg.nr_vps > 4096) throw ConfigError("vCPU count must be 1..4096");
    const auto& known = vmbus::version::kAll;
    if (std::find(std::begin(known), std::end(known), cfg.max_version) == std::end(known))
        throw ConfigError("VMBus version " + version_text(cfg.max_version) + " is not one this server speaks");
    return hv::PartitionConfig{cfg.nr_vps, cfg.hypercall_port};
}

vmbus::ServerConfig server_config(const MachineConfig& cfg) {
    vmbus::ServerConfig sc;
    sc.max_version = cfg.max_version;
    return sc;
}

const storvsp::ControllerConfig& checked(const storvsp::ControllerConfig& cfg) {
    check_controller_config(cfg);
    return cfg;
}

} // namespace

std::string version_text(uint32_t version) {
    return std::to_string(version >> 16) + "." + std::to_string(version & 0xFFFF);
}

std::string known_versions() {
    std::string s;
    for (uint32_t v : vmbus::version::kAll) {
        if (!s.empty()) s += ' ';
        s += version_text(v);
    }
    return s;
}

void check_controller_config(const storvsp::ControllerConfig& cfg) {
    std::string err;
    if (!storvsp::validate(cfg, err)) throw ConfigError(err);
}

namespace {

// A controller's channels turn in the loops it owns, and only in those.
storvsp::ControllerConfig turning_in(storvsp::ControllerConfig cfg,
                                     const std::vector<std::unique_ptr<vmbus::EventLoop>>& loops) {
    cfg.loops.clear();
    for (const auto& l : loops) cfg.loops.push_back(l.get());
    return cfg;
}

} // namespace

ScsiController::ScsiController(Machine& machine, const vmbus::Guid& instance, storvsp::ControllerConfig cfg,
                               std::vector<std::unique_ptr<vmbus::EventLoop>> loops)
    : machine_(machine), loops_(std::move(loops)),
      // The one place a controller is built: it is wired to the machine's bus here.
      ctl_(std::make_unique<storvsp::Controller>(machine.host(), machine.server(), instance,
                                                 checked(turning_in(std::move(cfg), loops_)))) {
    std::string err;
    if (!ctl_->start(err)) throw std::runtime_error(err);
}

ScsiController::~ScsiController() {
    // Disks complete their I/O through the controller: they go first, those being removed
    // too.
    std::vector<Removal> removals;
    {
        std::lock_guard lock(mu_);
        disks_.clear();
        removals.swap(removals_);
    }
    for (auto& r : removals) r.thread.join();
}

AttachedDisk& ScsiController::add_disk(const DiskSpec& spec) {
    auto disk = machine_.disk_factory().attach(*ctl_, spec);
    std::lock_guard lock(mu_);
    disks_.push_back(std::move(disk));
    return *disks_.back();
}

std::unique_ptr<AttachedDisk> ScsiController::take(const AttachedDisk* disk) {
    std::lock_guard lock(mu_);
    return take_locked(disk);
}

std::unique_ptr<AttachedDisk> ScsiController::take_locked(const AttachedDisk* disk) {
    auto it = std::find_if(disks_.begin(), disks_.end(), [&](const auto& d) { return d.get() == disk; });
    if (it == disks_.end()) throw std::invalid_argument("the disk is not on this controller (removed already?)");
    std::unique_ptr<AttachedDisk> gone = std::move(*it);
    disks_.erase(it);
    return gone;
}

void ScsiController::remove_disk(const AttachedDisk* disk) {
    // Outside the lock: detaching waits for the channel workers, then for the disk's I/O.
    take(disk).reset();
}

void ScsiController::start_removal(const AttachedDisk* disk, std::function<void()> done) {
    auto r = std::make_shared<RemovalState>();
    r->done = std::move(done);
    bool started = false;
    {
        std::lock_guard lock(mu_);
        // Finished removals: their threads are past done() (none takes mu_), so joining is
        // only waiting for them to exit.
        for (auto it = removals_.begin(); it != removals_.end();) {
            if (it->state->over.load(std::memory_order_acquire)) {
                it->thread.join();
                it = removals_.erase(it);
            } else {
                ++it;
            }
        }
        removals_.reserve(removals_.size() + 1); // the push below cannot fail then
        r->disk = take_locked(disk);             // the last step that may throw
        // From here the removal always completes and calls done(). Detaching fails only
        // before it changes anything (an allocation): the disk's destructor, on the removal
        // thread, detaches it then. Workers never take mu_, so waiting for them under it
        // is safe.
        try {
            r->disk->detach();
        } catch (const std::exception&) {
        }
        try {
            removals_.push_back({start_thread("hvstor-remove", [r] { r->finish(); }), r});
            started = true;
        } catch (const std::exception&) {
            // No thread to spare: finished below, as slowly as remove_disk.
        }
    }
    if (!started) r->finish();
}

void ScsiController::RemovalState::finish() {
    disk.reset(); // waits for the disk's I/O
    done();
    over.store(true, std::memory_order_release);
}

size_t ScsiController::disk_count() {
    std::lock_guard lock(mu_);
    return disks_.size();
}

std::string ScsiController::stats_json() const {
    const storvsp::ControllerStats s = ctl_->stats();
    JsonWriter w;
    w.num("srbs", s.srbs).num("completions", s.completions).num("srb_errors", s.srb_errors);
    w.num("bad_packets", s.bad_packets).num("subchannels_offered", s.subchannels_offered);
    w.num("open_channels", s.open_channels).num("reset_lun", s.reset_lun).num("reset_bus", s.reset_bus);
    w.num("reset_adapter", s.reset_adapter).num("resets_held", s.resets_held);
    w.num("enumerate_bus_sent", s.enumerate_bus_sent).num("remove_device_sent", s.remove_device_sent);
    w.begin_array("channels");
    for (const auto& c : s.channels) {
        w.begin_element().num("index", uint32_t(c.index)).num("relid", c.relid).boolean("open", c.open);
        w.num("packets_in", c.packets_in).num("packets_out", c.packets_out);
        w.num("srbs", c.srbs).num("completions", c.completions).num("srb_errors", c.srb_errors);
        w.num("bad_packets", c.bad_packets).num("guest_signals", c.guest_signals).num("interrupts", c.interrupts);
        w.num("wakeups", c.wakeups).num("inline_rounds", c.inline_rounds);
        w.num("ring_full_waits", c.ring_full_waits).num("busy", c.busy);
        w.num("outstanding", c.outstanding).num("max_outstanding", c.max_outstanding).end_object();
    }
    return w.end_array().done();
}

void ScsiController::save(state::Writer& w) {
    ctl_->save(w);
    std::lock_guard lock(mu_);
    w.u32(uint32_t(disks_.size()));
    for (const auto& d : disks_) {
        w.u8(d->lun());
        w.boolean(d->model() != nullptr);
        d->save(w);
    }
}

void ScsiController::load(state::Reader& r) {
    if (!ctl_->load(r)) return;
    std::lock_guard lock(mu_);
    const uint32_t n = r.count("a controller's disk count", uint32_t(storvsp::Controller::kMaxLuns), 2);
    if (r.ok() && n != disks_.size()) r.fail("a controller's disk count", "differs from this controller's", n);
    std::vector<bool> seen(storvsp::Controller::kMaxLuns, false);
    for (uint32_t i = 0; i < n && r.ok(); i++) {
        const uint8_t lun = r.u8("a disk's LUN");
        const bool modelled = r.boolean("a disk's model flag");
        auto d = std::find_if(disks_.begin(), disks_.end(), [&](const auto& x) { return x->lun() == lun; });
        if (!r.ok()) break;
        if (d == disks_.end() || ((*d)->model() != nullptr) != modelled) {
            r.fail("the disk at LUN", "is missing here, or modelled (perf=) here and not there or the reverse", lun);
            break;
        }
        if (seen[lun]) { // each once: a disk listed twice stands for one the state lacks
            r.fail("the disk at LUN", "is in the state twice", lun);
            break;
        }
        seen[lun] = true;
        // The disk as it is now, for abort_load().
        state::Writer before;
        (*d)->save(before);
        disks_before_.emplace_back(lun, before.take());
        (*d)->load(r);
    }
}

void ScsiController::finish_load() {
    ctl_->finish_load();
    std::lock_guard lock(mu_);
    disks_before_.clear();
}

void ScsiController::abort_load() {
    ctl_->abort_load();
    std::lock_guard lock(mu_);
    for (const auto& before : disks_before_) {
        auto d = std::find_if(disks_.begin(), disks_.end(), [&](const auto& x) { return x->lun() == before.first; });
        state::Reader r(before.second);
        if (d != disks_.end()) (*d)->load(r);
    }
    disks_before_.clear();
}

Machine::Machine(Host& host, const MachineConfig& cfg)
    : host_(host), partition_(host, partition_config(cfg)), server_(partition_.synic(), server_config(cfg)) {
    partition_.set_message_handler(&server_);
}

Machine::~Machine() {
    {
        std::lock_guard lock(mu_);
        controllers_.clear();
    }
    partition_.set_message_handler(nullptr);
}

void Machine::reset() {
    // The reset waits, under QEMU's big lock, for every request the guest sent. Not for one
    // that a stall fault holds (it could only be released over QMP, which waits for the
    // reset), nor for the disk models' caps: what no storage has started is cancelled.
    std::vector<ScsiController*> ctls;
    {
        std::lock_guard lock(mu_);
        for (auto& c : controllers_) ctls.push_back(c.get());
    }
    for (ScsiController* c : ctls) {
        c->suspend_faults(true);
        c->abandon_io(true);
    }
    server_.reset();
    partition_.reset();
    for (ScsiController* c : ctls) {
        c->abandon_io(false);
        c->suspend_faults(false);
    }
}

namespace {

constexpr uint32_t kStateTag = 0x414d5648; // "HVMA"
// 2: each disk's fault (its text and counts), between its model flag and its model's state.
constexpr uint32_t kStateVersion = 2;

} // namespace

std::vector<uint8_t> Machine::save() {
    RunGate& gate = host_.run_gate();
    if (gate.running()) throw std::logic_error("the machine's state is saved with the VM stopped");
    // Closes that finish meanwhile (their storage let go) are in the state whole or not at all.
    RunGate::Snapshot snapshot(gate);
    state::Writer w;
    w.begin(kStateTag, kStateVersion);
    partition_.save(w);
    server_.save(w);
    std::lock_guard lock(mu_);
    w.u32(uint32_t(controllers_.size()));
    for (const auto& c : controllers_) {
        w.fixed(c->controller().instance().bytes);
        c->save(w);
    }
    return w.take();
}

void Machine::load(std::span<const uint8_t> data) {
    try {
        load_parts(data);
    } catch (...) {
        // A refused load leaves the machine as a reset does, never half loaded: what it
        // reopened is closed, the offers go back to their relids, the queues drop what
        // they took, the disk models' buckets are as they were.
        reset();
        server_.abort_load();
        std::lock_guard lock(mu_);
        for (auto& c : controllers_) c->abort_load();
        throw;
    }
}

void Machine::load_parts(std::span<const uint8_t> data) {
    state::Reader r(data);
    auto check = [&r] {
        if (!r.ok()) throw std::runtime_error("hv-vmbus-bridge state: " + r.error());
    };
    // This build's version only: an older stream lays its disks out otherwise.
    const uint32_t version = r.begin(kStateTag, kStateVersion, "the machine's state");
    if (r.ok() && version != kStateVersion) r.fail("the machine's state", "has a version this build cannot load", version);
    check();
    if (!partition_.load(r)) check();
    if (!server_.load(r)) check();
    std::vector<ScsiController*> ctls;
    {
        std::lock_guard lock(mu_);
        for (auto& c : controllers_) ctls.push_back(c.get());
    }
    const uint32_t n = r.count("the controller count", uint32_t(ctls.size()), 16);
    check();
    if (n != ctls.size()) r.fail("the controller count", "differs from this machine's", n);
    for (uint32_t i = 0; i < n && r.ok(); i++) {
        vmbus::Guid instance;
        r.fixed("a controller's instance", instance.bytes);
        auto it = std::find_if(ctls.begin(), ctls.end(),
                               [&](ScsiController* c) { return c && c->controller().instance() == instance; });
        if (it == ctls.end()) {
            r.fail(("controller " + instance.to_string() + ", index").c_str(), "is not on this machine", i);
            break;
        }
        (*it)->load(r);
        *it = nullptr; // each once
    }
    r.done();
    check();
    std::string err;
    if (!server_.finish_load(err)) throw std::runtime_error("hv-vmbus-bridge state: " + err);
    std::lock_guard lock(mu_);
    for (auto& c : controllers_) c->finish_load();
}

void Machine::set_running(bool running) {
    RunGate& gate = host_.run_gate();
    if (running) {
        gate.resume();
        return;
    }
    gate.pause([this] { host_.poll_while_waiting(); });
    // Nothing writes guest memory now. What was written through mappings still open (rings,
    // buffers of requests not yet answered) is marked dirty, so a migration's last pass,
    // which comes after the stop, sends it.
    std::lock_guard lock(mu_);
    for (auto& c : controllers_) c->controller().mark_written();
}

void ScsiController::notify(std::string_view what) {
    storvsp::Notice n;
    std::string err;
    if (!storvsp::parse_notice(what, n, err)) throw ConfigError(err);
    if (!ctl_->notify(n, err)) throw std::runtime_error("notify=" + std::string(what) + ": " + err);
}

void ScsiController::set_reset(std::string_view how) {
    storvsp::ResetAnswer a;
    std::string err;
    if (!storvsp::parse_reset_answer(how, a, err)) throw ConfigError(err);
    ctl_->set_reset_answer(a);
}

void ScsiController::suspend_faults(bool on) {
    std::lock_guard lock(mu_);
    for (auto& d : disks_) d->suspend_faults(on);
}

void ScsiController::abandon_io(bool on) {
    // Under the lock, as the disks may be removed meanwhile: the completions this runs go
    // to the channels, which never take it.
    std::lock_guard lock(mu_);
    for (auto& d : disks_) d->abandon_io(on);
}

void Machine::set_vm_perf(std::string_view spec) {
    std::string err;
    auto limits = perf::VmLimits::create(spec, err);
    if (!limits) throw ConfigError(err);
    std::lock_guard lock(mu_);
    vm_limits_ = std::move(limits);
}

std::string Machine::stats_json() {
    const vmbus::ServerStats v = server_.stats();
    const hv::PartitionStats p = partition_.stats();
    const hv::SynicStats sy = partition_.synic().stats();
    JsonWriter w;
    w.str("version", v.version ? version_text(v.version) : "").num("messages_in", v.messages_in);
    w.num("messages_out", v.messages_out).num("bad_messages", v.bad_messages).num("send_failures", v.send_failures);
    w.num("offers", v.offers).num("open_channels", v.open_channels).num("gpadls", v.gpadls);
    w.num("hypercalls", p.hypercalls).num("hypercall_errors", p.hypercall_errors).num("msr_faults", p.msr_faults);
    w.num("synic_messages", sy.messages_delivered).num("synic_messages_deferred", sy.messages_deferred);
    w.num("synic_events", sy.events_signalled);
    return w.done();
}

DiskFactory Machine::disk_factory() const {
    std::lock_guard lock(mu_);
    return DiskFactory(vm_limits_, nullptr, &host_.run_gate());
}

ScsiController& Machine::add_controller(const vmbus::Guid& instance, const storvsp::ControllerConfig& cfg,
                                        std::vector<std::unique_ptr<vmbus::EventLoop>> loops) {
    auto c = std::make_unique<ScsiController>(*this, instance, cfg, std::move(loops));
    std::lock_guard lock(mu_);
    controllers_.push_back(std::move(c));
    return *controllers_.back();
}

} // namespace hvstor::capi
