// The C boundary: wraps the C++ partition and VMBus server for the QEMU glue. Every
// function runs its body inside guarded() so that no exception reaches C.
#include "hvstor/capi.h"

#include <atomic>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "guard.h"

#include "hvstor/backend/backend.h"
#include "hvstor/hyperv/partition.h"
#include "hvstor/perf/config.h"
#include "hvstor/perf/model.h"
#include "hvstor/perf/timeline.h"
#include "hvstor/perf/vm.h"
#include "hvstor/scsi/disk.h"
#include "hvstor/storvsp/controller.h"
#include "hvstor/vmbus/server.h"

using hvstor::capi::fail_with;
using hvstor::capi::guarded;
using hvstor::capi::log_once;

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

private:
    HvstorHostOps ops_;
};

HvstorMsrResult to_c(hvstor::hv::MsrResult r) {
    switch (r) {
    case hvstor::hv::MsrResult::Handled: return HVSTOR_MSR_HANDLED;
    case hvstor::hv::MsrResult::Fault: return HVSTOR_MSR_FAULT;
    default: return HVSTOR_MSR_NOT_OURS;
    }
}

// A hypercall that failed on an exception (out of memory, or no thread for a channel being
// opened) answers "insufficient memory": Linux's vmbus_post_msg treats it as transient and
// retries, where other errors would fail the operation at once.
constexpr uint64_t kHypercallFailed = static_cast<uint64_t>(hvstor::hv::Status::InsufficientMemory);

} // namespace

// A VMBus owns its controllers, and a controller its disks: freeing the VMBus tears down
// disks, then controllers, then the server and partition, the order each needs.
struct HvstorDisk {
    hvstor::storvsp::Controller* ctl = nullptr;
    uint8_t lun = 0;
    std::string name;
    std::unique_ptr<hvstor::backend::Backend> backend;  // the model when there is one
    hvstor::perf::ModelBackend* model = nullptr;         // = backend.get() or null
    std::unique_ptr<hvstor::scsi::Disk> disk;
    bool attached = false;

    ~HvstorDisk() {
        if (attached) ctl->detach(lun);
        // The SCSI disk completes through the controller: its I/O must be over first.
        if (backend) backend->drain();
    }
};

struct HvstorController {
    std::unique_ptr<hvstor::storvsp::Controller> ctl;
    HvstorVmbus* vb = nullptr;
    std::mutex mu;  // disks
    std::vector<std::unique_ptr<HvstorDisk>> disks;

    ~HvstorController() {
        std::lock_guard lock(mu);
        disks.clear();
    }
};

struct HvstorVmbus {
    OpsHost host;
    hvstor::hv::Partition partition;
    hvstor::vmbus::Server server;

    std::shared_ptr<hvstor::perf::VmLimits> vm_limits;
    // For the entry points with no message channel: see capi::log_once.
    std::atomic_flag exception_logged;
    std::mutex mu;  // controllers
    std::vector<std::unique_ptr<HvstorController>> controllers;

    HvstorVmbus(const HvstorHostOps& ops, uint32_t nr_vps, uint16_t port, uint32_t max_version)
        : host(ops), partition(host, {nr_vps, port}), server(partition.synic(), {max_version, 65536, 1024}) {
        partition.set_message_handler(&server);
    }
    ~HvstorVmbus() {
        {
            std::lock_guard lock(mu);
            controllers.clear();
        }
        partition.set_message_handler(nullptr);
    }
};

extern "C" {

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

HvstorVmbus* hvstor_vmbus_new(const HvstorHostOps* ops, uint32_t nr_vps, uint16_t port, uint32_t max_version,
                              char** err) {
    return guarded(
        [&] {
            if (!ops || !ops->read_gpa || !ops->write_gpa || !ops->atomic_or_u32 || !ops->raise_vector ||
                !ops->map || !ops->unmap)
                throw std::invalid_argument("incomplete host operations");
            if (nr_vps == 0 || nr_vps > 4096) throw std::invalid_argument("vCPU count must be 1..4096");
            return new HvstorVmbus(*ops, nr_vps, port, max_version);
        },
        fail_with(err, nullptr));
}

void hvstor_vmbus_free(HvstorVmbus* vb) {
    // Destructors do not throw (they are noexcept): guarded only so every entry point is.
    guarded([&] { delete vb; }, [](const char*) {});
}

void hvstor_vmbus_reset(HvstorVmbus* vb) {
    guarded(
        [&] {
            vb->server.reset();
            vb->partition.reset();
        },
        log_once(vb->exception_logged, "hvstor_vmbus_reset"));
}

void hvstor_cpuid(HvstorVmbus* vb, uint32_t leaf, uint32_t subleaf, uint32_t* eax, uint32_t* ebx, uint32_t* ecx,
                  uint32_t* edx) {
    // On an exception the registers keep what the CPU model put there.
    guarded(
        [&] {
            hvstor::hv::CpuidRegs r{*eax, *ebx, *ecx, *edx};
            vb->partition.cpuid(leaf, subleaf, r);
            *eax = r.eax;
            *ebx = r.ebx;
            *ecx = r.ecx;
            *edx = r.edx;
        },
        log_once(vb->exception_logged, "hvstor_cpuid"));
}

HvstorMsrResult hvstor_rdmsr(HvstorVmbus* vb, uint32_t vp, uint32_t msr, uint64_t* val) {
    return guarded([&] { return to_c(vb->partition.rdmsr(vp, msr, *val)); },
                   log_once(vb->exception_logged, "hvstor_rdmsr", HVSTOR_MSR_FAULT));
}

HvstorMsrResult hvstor_wrmsr(HvstorVmbus* vb, uint32_t vp, uint32_t msr, uint64_t val) {
    return guarded([&] { return to_c(vb->partition.wrmsr(vp, msr, val)); },
                   log_once(vb->exception_logged, "hvstor_wrmsr", HVSTOR_MSR_FAULT));
}

uint64_t hvstor_hypercall(HvstorVmbus* vb, uint32_t vp, uint64_t control, uint64_t input, uint64_t output) {
    return guarded([&] { return vb->partition.hypercall(vp, control, input, output); },
                   log_once(vb->exception_logged, "hvstor_hypercall", kHypercallFailed));
}

HvstorController* hvstor_controller_new(HvstorVmbus* vb, const uint8_t instance[16],
                                        const HvstorControllerConfig* cfg, char** err) {
    return guarded(
        [&] {
            if (!vb || !instance || !cfg) throw std::invalid_argument("no VMBus, instance or settings");
            hvstor::storvsp::ControllerConfig cc;
            cc.max_subchannels = cfg->max_subchannels;
            cc.max_transfer_bytes = cfg->max_transfer_bytes;
            cc.max_outstanding_per_channel = cfg->max_outstanding;
            if (cc.max_transfer_bytes < 4096 || cc.max_transfer_bytes > 8 * 1024 * 1024 ||
                cc.max_transfer_bytes % 4096)
                throw std::invalid_argument("max-transfer must be a multiple of 4096 between 4 KiB and 8 MiB");
            if (cc.max_outstanding_per_channel < 1 || cc.max_outstanding_per_channel > 4096)
                throw std::invalid_argument("outstanding limit must be 1..4096");
            if (cc.max_subchannels > 256) throw std::invalid_argument("at most 256 subchannels");
            hvstor::vmbus::Guid g;
            std::memcpy(g.bytes.data(), instance, 16);
            auto c = std::make_unique<HvstorController>();
            c->vb = vb;
            c->ctl = std::make_unique<hvstor::storvsp::Controller>(vb->host, vb->partition.synic(), vb->server, g, cc);
            std::string e;
            if (!c->ctl->start(e)) throw std::runtime_error(e);
            std::lock_guard lock(vb->mu);
            vb->controllers.push_back(std::move(c));
            return vb->controllers.back().get();
        },
        fail_with(err, nullptr));
}

HvstorDisk* hvstor_disk_new(HvstorController* c, const HvstorDiskConfig* cfg, char** err) {
    return guarded(
        [&] {
            if (!c || !cfg) throw std::invalid_argument("no controller or settings");
            std::string e, kind = cfg->backend ? cfg->backend : "";
            std::unique_ptr<hvstor::backend::Backend> be;
            if (kind == "file") {
                if (!cfg->path || !*cfg->path) throw std::invalid_argument("backend=file needs file=PATH");
                hvstor::backend::FileOptions fo;
                fo.read_only = cfg->read_only;
                fo.direct = cfg->direct;
                be = hvstor::backend::open_file(cfg->path, fo, e);
            } else if (kind == "ram" || kind == "null") {
                if (cfg->size == 0 || cfg->size % 512)
                    throw std::invalid_argument("size must be a non-zero multiple of 512");
                be = kind == "ram" ? hvstor::backend::make_ram(cfg->size, e) : hvstor::backend::make_null(cfg->size, e);
            } else {
                throw std::invalid_argument("backend must be file, ram or null, not '" + kind + "'");
            }
            if (!be) throw std::runtime_error(e);
            auto d = std::make_unique<HvstorDisk>();
            d->ctl = c->ctl.get();
            d->lun = cfg->lun;
            d->name = cfg->name && *cfg->name ? cfg->name : "lun" + std::to_string(cfg->lun);
            if (cfg->perf && *cfg->perf) {
                hvstor::perf::ModelConfig mc;
                if (!hvstor::perf::parse_model_config(cfg->perf, mc, e)) throw std::invalid_argument(e);
                if (mc.name.empty()) mc.name = d->name;
                auto model = hvstor::perf::make_model(std::move(be), mc, nullptr, c->vb->vm_limits, e);
                if (!model) throw std::invalid_argument(e);
                d->model = model.get();
                be = std::move(model);
            }
            d->backend = std::move(be);
            hvstor::scsi::DiskConfig dc;
            if (cfg->serial) dc.serial = cfg->serial;
            dc.max_transfer_bytes = c->ctl->config().max_transfer_bytes;
            d->disk = std::make_unique<hvstor::scsi::Disk>(*d->backend, dc, *c->ctl);
            if (!c->ctl->attach(cfg->lun, d->disk.get(), e)) throw std::invalid_argument(e);
            d->attached = true;
            std::lock_guard lock(c->mu);
            c->disks.push_back(std::move(d));
            return c->disks.back().get();
        },
        fail_with(err, nullptr));
}

bool hvstor_vmbus_set_vm_perf(HvstorVmbus* vb, const char* spec, char** err) {
    return guarded(
        [&] {
            hvstor::perf::VmConfig vc;
            std::string e;
            if (!hvstor::perf::parse_vm_config(spec ? spec : "", vc, e)) throw std::invalid_argument(e);
            auto limits = hvstor::perf::VmLimits::create(vc, e);
            if (!limits) throw std::invalid_argument(e);
            vb->vm_limits = std::move(limits);
            return true;
        },
        fail_with(err, false));
}

char* hvstor_disk_stats_json(HvstorDisk* d) {
    return guarded(
        [&] {
            std::string out;
            if (d->model) {
                out = hvstor::perf::TimelineWriter::format(d->name, d->model->stats());
            } else {
                const auto& s = d->disk->stats();
                out = "{\"disk\":\"" + d->name + "\",\"model\":false,\"reads\":" + std::to_string(s.reads.load()) +
                      ",\"writes\":" + std::to_string(s.writes.load()) + ",\"bytes_read\":" +
                      std::to_string(s.bytes_read.load()) + ",\"bytes_written\":" +
                      std::to_string(s.bytes_written.load()) + ",\"errors\":" + std::to_string(s.errors.load()) + "}";
            }
            return hvstor::capi::dup_message(out.c_str());
        },
        [](const char*) -> char* { return nullptr; });
}

} // extern "C"
