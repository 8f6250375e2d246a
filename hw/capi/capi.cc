// The C ABI the QEMU glue calls: each function converts its arguments, calls the C++ device
// model (machine.h, disk_factory.h) inside guarded() so that no exception reaches C, and
// converts the result.
#include "hvstor/capi.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <span>
#include <vector>
#include <stdexcept>

#include "disk_factory.h"
#include "guard.h"
#include "hvstor/hyperv/hv_status.h"
#include "hvstor/scsi/fault.h"
#include "hvstor/thread.h"
#include "hvstor/trace.h"
#include "machine.h"

using hvstor::capi::fail_with;
using hvstor::capi::guarded;
using hvstor::capi::log_once;

// A model object's settings, and the caps the disks made with it share.
struct HvstorDiskModel {
    std::string settings;
    std::shared_ptr<hvstor::perf::VmLimits> group;
};

namespace {

class OpsHost final : public hvstor::Host {
public:
    explicit OpsHost(const HvstorHostOps& ops) : ops_(ops) {}
    bool read_gpa(uint64_t gpa, void* dst, size_t len) override { return ops_.read_gpa(ops_.opaque, gpa, dst, len); }
    bool write_gpa(uint64_t gpa, const void* src, size_t len) override {
        return ops_.write_gpa(ops_.opaque, gpa, src, len);
    }
    bool atomic_or_u32(uint64_t gpa, uint32_t mask) override { return ops_.atomic_or_u32(ops_.opaque, gpa, mask); }
    void* map(uint64_t gpa, size_t len, bool writable) override { return ops_.map(ops_.opaque, gpa, len, writable); }
    void unmap(void* ptr, size_t len, bool written) override { ops_.unmap(ops_.opaque, ptr, len, written); }
    void raise_vector(uint32_t vp, uint8_t vector) override { ops_.raise_vector(ops_.opaque, vp, vector); }
    void guest_error(const char* line) override {
        if (ops_.guest_error) ops_.guest_error(ops_.opaque, line);
    }
    void poll_while_waiting() override {
        if (ops_.poll_while_waiting) ops_.poll_while_waiting(ops_.opaque);
    }
    void mark_written(void* ptr, size_t len) override {
        if (ops_.mark_written) ops_.mark_written(ops_.opaque, ptr, len);
    }

private:
    HvstorHostOps ops_;
};

class OpsLoop final : public hvstor::vmbus::EventLoop {
public:
    explicit OpsLoop(const HvstorEventLoop& ops) : ops_(ops) {}
    void* watch(int fd, void (*ready)(void*), void* arg) override { return ops_.watch(ops_.opaque, fd, ready, arg); }
    void unwatch(void* handle) override { ops_.unwatch(ops_.opaque, handle); }

private:
    const HvstorEventLoop ops_;
};

// At most one loop per channel a controller can have: the primary and 256 subchannels.
constexpr uint32_t kMaxLoops = 257;

std::vector<std::unique_ptr<hvstor::vmbus::EventLoop>> loops_of(const HvstorControllerConfig& c) {
    std::vector<std::unique_ptr<hvstor::vmbus::EventLoop>> loops;
    if (!c.loops && !c.nr_loops) return loops;
    if (!c.loops || c.nr_loops < 1 || c.nr_loops > kMaxLoops)
        throw hvstor::capi::ConfigError("event loops: 1 to " + std::to_string(kMaxLoops) + " of them, not " +
                                        std::to_string(c.loops ? c.nr_loops : 0));
    for (uint32_t i = 0; i < c.nr_loops; i++) {
        if (!c.loops[i].watch || !c.loops[i].unwatch)
            throw hvstor::capi::ConfigError("event loop " + std::to_string(i) + " has no watch or unwatch");
        loops.push_back(std::make_unique<OpsLoop>(c.loops[i]));
    }
    return loops;
}

HvstorMsrResult to_c(hvstor::hv::MsrResult r) {
    switch (r) {
    case hvstor::hv::MsrResult::Handled: return HVSTOR_MSR_HANDLED;
    case hvstor::hv::MsrResult::Fault: return HVSTOR_MSR_FAULT;
    default: return HVSTOR_MSR_NOT_OURS;
    }
}

std::string str(const char* s) { return s ? s : ""; }

hvstor::capi::DiskSpec to_cpp(const HvstorDiskConfig& c) {
    hvstor::capi::DiskSpec s;
    s.backend = str(c.backend);
    s.path = str(c.path);
    s.size = c.size;
    s.read_only = c.read_only;
    s.direct = c.direct;
    s.serial = str(c.serial);
    s.lun = c.lun;
    s.perf = str(c.perf);
    if (c.model) {
        if (!s.perf.empty()) throw hvstor::capi::ConfigError("perf: settings and a model object, not both");
        s.perf = c.model->settings;
        s.group = c.model->group;
    }
    s.name = str(c.name);
    s.fault = str(c.fault);
    s.notices = !c.without_notices;
    if (c.block) s.block = *c.block;
    return s;
}

hvstor::storvsp::ControllerConfig to_cpp(const HvstorControllerConfig& c) {
    hvstor::storvsp::ControllerConfig cc;
    cc.max_subchannels = c.max_subchannels;
    cc.max_transfer_bytes = c.max_transfer_bytes;
    cc.max_outstanding_per_channel = c.max_outstanding;
    cc.inline_rounds = !c.worker_only;
    if (c.name && *c.name) cc.name = c.name;
    std::string err;
    if (c.reset && !hvstor::storvsp::parse_reset_answer(c.reset, cc.reset_answer, err))
        throw hvstor::capi::ConfigError(err);
    if (c.device_class && !hvstor::storvsp::parse_device_class(c.device_class, cc.device_class, err))
        throw hvstor::capi::ConfigError(err);
    if (c.port_wwn && !hvstor::storvsp::parse_wwn(c.port_wwn, "port-wwn", cc.port_wwn, err))
        throw hvstor::capi::ConfigError(err);
    if (c.node_wwn && !hvstor::storvsp::parse_wwn(c.node_wwn, "node-wwn", cc.node_wwn, err))
        throw hvstor::capi::ConfigError(err);
    return cc;
}

// A hypercall that failed on an exception (out of memory, or no thread for a channel being
// opened) answers "insufficient memory": Linux's vmbus_post_msg treats it as transient and
// retries, where other errors would fail the operation at once.
constexpr uint64_t kHypercallFailed = static_cast<uint64_t>(hvstor::hv::Status::InsufficientMemory);

} // namespace

struct HvstorVmbus {
    OpsHost host;  // before the machine, which keeps a reference to it
    hvstor::capi::Machine machine;
    // For the entry points with no message channel: see capi::log_once.
    std::atomic_flag exception_logged;

    HvstorVmbus(const HvstorHostOps& ops, const hvstor::capi::MachineConfig& cfg) : host(ops), machine(host, cfg) {}
};

namespace {

// A controller's or disk's handle is the C++ object itself (owned by its machine), so the
// handle types are never defined.
HvstorController* to_c(hvstor::capi::ScsiController* c) { return reinterpret_cast<HvstorController*>(c); }
hvstor::capi::ScsiController* to_cpp(HvstorController* c) { return reinterpret_cast<hvstor::capi::ScsiController*>(c); }
HvstorDisk* to_c(hvstor::capi::AttachedDisk* d) { return reinterpret_cast<HvstorDisk*>(d); }
hvstor::capi::AttachedDisk* to_cpp(HvstorDisk* d) { return reinterpret_cast<hvstor::capi::AttachedDisk*>(d); }

// hvstor_set_trace_hook's: one static sink that reads the hook at each event, so replacing
// the hook never frees anything a tracing thread may still hold.
std::atomic<void (*)(uint32_t, const uint64_t*)> trace_hook{nullptr};
void to_trace_hook(void* /*opaque*/, HvstorTraceEvent ev, const uint64_t* args) {
    if (auto* hook = trace_hook.load(std::memory_order_acquire)) hook(ev, args);
}
constexpr hvstor::TraceSink kTraceSink{to_trace_hook, nullptr};

} // namespace

extern "C" {

void hvstor_set_thread_hooks(void (*enter)(void), void (*leave)(void)) {
    // One slot: the hooks of threads already running stay valid, as the header asks.
    static hvstor::ThreadHooks slot;
    static std::atomic<bool> set{false};
    if (set.exchange(true)) {
        std::fputs("hvstor: hvstor_set_thread_hooks called again; the first hooks stay\n", stderr);
        return;
    }
    slot.enter = enter;
    slot.leave = leave;
    hvstor::set_thread_hooks(&slot);
}

void hvstor_set_trace_hook(void (*trace)(uint32_t event, const uint64_t* args)) {
    trace_hook.store(trace, std::memory_order_release);
    hvstor::set_trace_sink(trace ? &kTraceSink : nullptr);
}

bool hvstor_parse_vmbus_version(const char* text, uint32_t* version) {
    return guarded(
        [&] {
            unsigned major = 0, minor = 0;
            char tail = 0;
            if (!text || !version || std::sscanf(text, "%u.%u%c", &major, &minor, &tail) != 2) return false;
            const uint32_t v = (major << 16) | minor;
            for (uint32_t k : hvstor::vmbus::version::kAll) {
                if (k == v) {
                    *version = v;
                    return true;
                }
            }
            return false;
        },
        [](const char*) { return false; });
}

char* hvstor_vmbus_versions(void) {
    return guarded([] { return hvstor::capi::dup_message(hvstor::capi::known_versions().c_str()); },
                   [](const char*) -> char* { return nullptr; });
}

HvstorVmbus* hvstor_vmbus_new(const HvstorHostOps* ops, uint32_t nr_vps, uint16_t port, uint32_t max_version,
                              char** err) {
    return guarded(
        [&] {
            if (!ops || !ops->read_gpa || !ops->write_gpa || !ops->atomic_or_u32 || !ops->raise_vector ||
                !ops->map || !ops->unmap)
                throw std::invalid_argument("incomplete host operations");
            return new HvstorVmbus(*ops, hvstor::capi::MachineConfig{nr_vps, port, max_version});
        },
        fail_with(err, nullptr));
}

void hvstor_vmbus_free(HvstorVmbus* vb) {
    // Destructors do not throw (they are noexcept): guarded only so every entry point is.
    guarded([&] { delete vb; }, [](const char*) {});
}

void hvstor_vmbus_reset(HvstorVmbus* vb) {
    guarded([&] { vb->machine.reset(); }, log_once(vb->exception_logged, "hvstor_vmbus_reset"));
}

void hvstor_vmbus_set_running(HvstorVmbus* vb, bool running) {
    guarded([&] { vb->machine.set_running(running); }, log_once(vb->exception_logged, "hvstor_vmbus_set_running"));
}

bool hvstor_vmbus_save(HvstorVmbus* vb, uint8_t** data, size_t* len, char** err) {
    return guarded(
        [&] {
            const std::vector<uint8_t> bytes = vb->machine.save();
            auto* p = static_cast<uint8_t*>(std::malloc(bytes.empty() ? 1 : bytes.size()));
            if (!p) throw std::bad_alloc();
            std::memcpy(p, bytes.data(), bytes.size());
            *data = p;
            *len = bytes.size();
            return true;
        },
        fail_with(err, false));
}

bool hvstor_vmbus_load(HvstorVmbus* vb, const uint8_t* data, size_t len, char** err) {
    return guarded(
        [&] {
            vb->machine.load(std::span<const uint8_t>(data, len));
            return true;
        },
        fail_with(err, false));
}

void hvstor_cpuid(HvstorVmbus* vb, uint32_t leaf, uint32_t subleaf, uint32_t* eax, uint32_t* ebx, uint32_t* ecx,
                  uint32_t* edx) {
    // On an exception the registers keep what the CPU model put there.
    guarded(
        [&] {
            hvstor::hv::CpuidRegs r{*eax, *ebx, *ecx, *edx};
            vb->machine.partition().cpuid(leaf, subleaf, r);
            *eax = r.eax;
            *ebx = r.ebx;
            *ecx = r.ecx;
            *edx = r.edx;
        },
        log_once(vb->exception_logged, "hvstor_cpuid"));
}

HvstorMsrResult hvstor_rdmsr(HvstorVmbus* vb, uint32_t vp, uint32_t msr, uint64_t* val) {
    return guarded([&] { return to_c(vb->machine.partition().rdmsr(vp, msr, *val)); },
                   log_once(vb->exception_logged, "hvstor_rdmsr", HVSTOR_MSR_FAULT));
}

HvstorMsrResult hvstor_wrmsr(HvstorVmbus* vb, uint32_t vp, uint32_t msr, uint64_t val) {
    return guarded([&] { return to_c(vb->machine.partition().wrmsr(vp, msr, val)); },
                   log_once(vb->exception_logged, "hvstor_wrmsr", HVSTOR_MSR_FAULT));
}

uint64_t hvstor_hypercall(HvstorVmbus* vb, uint32_t vp, uint64_t control, uint64_t input, uint64_t output) {
    return guarded([&] { return vb->machine.partition().hypercall(vp, control, input, output); },
                   log_once(vb->exception_logged, "hvstor_hypercall", kHypercallFailed));
}

namespace {

enum class SettingsKind { DiskModel, VmCaps, Fault };

SettingsKind settings_kind(const char* kind) {
    const std::string k = str(kind);
    if (k == "disk-model") return SettingsKind::DiskModel;
    if (k == "vm-caps") return SettingsKind::VmCaps;
    if (k == "fault") return SettingsKind::Fault;
    throw std::invalid_argument("settings of '" + k + "': want disk-model, vm-caps or fault");
}

} // namespace

char* hvstor_settings_keys(const char* kind) {
    return guarded(
        [&] {
            std::string out;
            const SettingsKind k = settings_kind(kind);
            if (k == SettingsKind::Fault) {
                for (const auto& f : hvstor::scsi::fault_keys())
                    out += std::string(f.name) + "\t" + std::string(f.meaning) + "\n";
            } else {
                for (const auto& s : hvstor::perf::setting_keys(k == SettingsKind::VmCaps))
                    out += std::string(s.name) + "\t" + s.meaning + "\n";
            }
            return hvstor::capi::dup_message(out.c_str());
        },
        [](const char*) -> char* { return nullptr; });
}

bool hvstor_settings_check(const char* kind, const char* text, char** err) {
    return guarded(
        [&] {
            std::string why;
            bool ok;
            switch (settings_kind(kind)) {
            case SettingsKind::DiskModel: {
                hvstor::perf::ModelConfig mc;
                ok = hvstor::perf::parse_model_config(str(text), mc, why);
                break;
            }
            case SettingsKind::VmCaps: {
                hvstor::perf::VmConfig vc;
                ok = hvstor::perf::parse_vm_config(str(text), vc, why);
                break;
            }
            default: {
                hvstor::scsi::FaultSpec f;
                ok = hvstor::scsi::parse_fault(str(text), f, why);
            }
            }
            if (!ok) throw hvstor::capi::ConfigError(why);
            return true;
        },
        fail_with(err, false));
}

HvstorDiskModel* hvstor_disk_model_new(const char* settings, char** err) {
    return guarded(
        [&] {
            hvstor::perf::ModelConfig mc;
            std::string why;
            if (!hvstor::perf::parse_model_config(str(settings), mc, why)) throw hvstor::capi::ConfigError(why);
            // Per disk, not per model: the disks of one object would share one label and
            // write one timeline file over each other.
            if (!mc.name.empty() || !mc.timeline.empty())
                throw hvstor::capi::ConfigError("name and timeline are a disk's own: give them with the disk's "
                                                "settings as text (perf=...,timeline=FILE); a disk's statistics "
                                                "carry its id");
            return new HvstorDiskModel{str(settings), hvstor::perf::VmLimits::group(mc)};
        },
        fail_with(err, static_cast<HvstorDiskModel*>(nullptr)));
}

bool hvstor_disk_model_in_use(const HvstorDiskModel* m) {
    // Each disk made with it holds the group; the handle holds one more.
    return m && m->group.use_count() > 1;
}

void hvstor_disk_model_free(HvstorDiskModel* m) {
    guarded([&] { delete m; }, [](const char*) {});
}

bool hvstor_vmbus_set_vm_perf(HvstorVmbus* vb, const char* spec, char** err) {
    return guarded(
        [&] {
            if (!vb) throw std::invalid_argument("no VMBus");
            vb->machine.set_vm_perf(str(spec));
            return true;
        },
        fail_with(err, false));
}

HvstorController* hvstor_controller_new(HvstorVmbus* vb, const uint8_t instance[16],
                                        const HvstorControllerConfig* cfg, char** err) {
    return guarded(
        [&] {
            if (!vb || !instance || !cfg) throw std::invalid_argument("no VMBus, instance or settings");
            hvstor::vmbus::Guid g;
            std::memcpy(g.bytes.data(), instance, 16);
            return to_c(&vb->machine.add_controller(g, to_cpp(*cfg), loops_of(*cfg)));
        },
        fail_with(err, nullptr));
}

HvstorDisk* hvstor_disk_new(HvstorController* c, const HvstorDiskConfig* cfg, char** err) {
    return guarded(
        [&] {
            if (!c || !cfg) throw std::invalid_argument("no controller or settings");
            return to_c(&to_cpp(c)->add_disk(to_cpp(*cfg)));
        },
        fail_with(err, nullptr));
}

bool hvstor_disk_free(HvstorController* c, HvstorDisk* d, char** err) {
    return guarded(
        [&] {
            if (!d) return true;
            if (!c) throw std::invalid_argument("no controller");
            to_cpp(c)->remove_disk(to_cpp(d));
            return true;
        },
        fail_with(err, false));
}

bool hvstor_disk_remove(HvstorController* c, HvstorDisk* d, void (*done)(void*), void* opaque, char** err) {
    return guarded(
        [&] {
            if (!c || !d || !done) throw std::invalid_argument("no controller, disk or callback");
            to_cpp(c)->start_removal(to_cpp(d), [done, opaque] { done(opaque); });
            return true;
        },
        fail_with(err, false));
}

char* hvstor_disk_stats_json(HvstorDisk* d) {
    return guarded([&] { return d ? hvstor::capi::dup_message(to_cpp(d)->stats_json().c_str()) : nullptr; },
                   [](const char*) -> char* { return nullptr; });
}

bool hvstor_disk_set_fault(HvstorDisk* d, const char* fault, char** err) {
    return guarded(
        [&] {
            if (!d) throw std::invalid_argument("no disk");
            to_cpp(d)->set_fault(str(fault));
            return true;
        },
        fail_with(err, false));
}

char* hvstor_disk_fault(HvstorDisk* d) {
    return guarded([&] { return d ? hvstor::capi::dup_message(to_cpp(d)->fault().c_str()) : nullptr; },
                   [](const char*) -> char* { return nullptr; });
}

bool hvstor_disk_resize(HvstorDisk* d, uint64_t bytes, char** err) {
    return guarded(
        [&] {
            if (!d) throw std::invalid_argument("no disk");
            to_cpp(d)->resize(bytes);
            return true;
        },
        fail_with(err, false));
}

uint64_t hvstor_disk_size(HvstorDisk* d) {
    return guarded([&] { return d ? to_cpp(d)->size_bytes() : uint64_t{0}; }, [](const char*) { return uint64_t{0}; });
}

bool hvstor_controller_notify(HvstorController* c, const char* notice, char** err) {
    return guarded(
        [&] {
            if (!c) throw std::invalid_argument("no controller");
            to_cpp(c)->notify(str(notice));
            return true;
        },
        fail_with(err, false));
}

bool hvstor_controller_set_reset(HvstorController* c, const char* answer, char** err) {
    return guarded(
        [&] {
            if (!c) throw std::invalid_argument("no controller");
            to_cpp(c)->set_reset(str(answer));
            return true;
        },
        fail_with(err, false));
}

char* hvstor_controller_reset(HvstorController* c) {
    return guarded([&] { return c ? hvstor::capi::dup_message(to_cpp(c)->reset().c_str()) : nullptr; },
                   [](const char*) -> char* { return nullptr; });
}

char* hvstor_controller_stats_json(HvstorController* c) {
    return guarded([&] { return c ? hvstor::capi::dup_message(to_cpp(c)->stats_json().c_str()) : nullptr; },
                   [](const char*) -> char* { return nullptr; });
}

char* hvstor_vmbus_stats_json(HvstorVmbus* vb) {
    return guarded([&] { return vb ? hvstor::capi::dup_message(vb->machine.stats_json().c_str()) : nullptr; },
                   [](const char*) -> char* { return nullptr; });
}

} // extern "C"
