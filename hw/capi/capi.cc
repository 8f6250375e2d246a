// The C boundary: wraps the C++ partition and VMBus server for the QEMU glue.
#include "hvstor/capi.h"

#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <string>

#include "hvstor/hyperv/partition.h"
#include "hvstor/vmbus/server.h"

namespace {

class OpsHost final : public hvstor::Host {
public:
    explicit OpsHost(const HvstorHostOps& ops) : ops_(ops) {}
    bool read_gpa(uint64_t gpa, void* dst, size_t len) override { return ops_.read_gpa(ops_.opaque, gpa, dst, len); }
    bool write_gpa(uint64_t gpa, const void* src, size_t len) override {
        return ops_.write_gpa(ops_.opaque, gpa, src, len);
    }
    bool atomic_or_u32(uint64_t gpa, uint32_t mask) override { return ops_.atomic_or_u32(ops_.opaque, gpa, mask); }
    void raise_vector(uint32_t vp, uint8_t vector) override { ops_.raise_vector(ops_.opaque, vp, vector); }

private:
    HvstorHostOps ops_;
};

char* dup_message(const std::string& s) {
    char* p = static_cast<char*>(std::malloc(s.size() + 1));
    if (p) std::memcpy(p, s.c_str(), s.size() + 1);
    return p;
}

HvstorMsrResult to_c(hvstor::hv::MsrResult r) {
    switch (r) {
    case hvstor::hv::MsrResult::Handled: return HVSTOR_MSR_HANDLED;
    case hvstor::hv::MsrResult::Fault: return HVSTOR_MSR_FAULT;
    default: return HVSTOR_MSR_NOT_OURS;
    }
}

} // namespace

struct HvstorVmbus {
    OpsHost host;
    hvstor::hv::Partition partition;
    hvstor::vmbus::Server server;

    HvstorVmbus(const HvstorHostOps& ops, uint32_t nr_vps, uint16_t port, uint32_t max_version)
        : host(ops), partition(host, {nr_vps, port}), server(partition.synic(), {max_version, 65536}) {
        partition.set_message_handler(&server);
    }
};

extern "C" {

bool hvstor_parse_vmbus_version(const char* text, uint32_t* version) {
    unsigned major = 0, minor = 0;
    char tail = 0;
    if (!text || std::sscanf(text, "%u.%u%c", &major, &minor, &tail) != 2) return false;
    const uint32_t v = (major << 16) | minor;
    for (uint32_t k : hvstor::vmbus::version::kAll) {
        if (k == v) {
            *version = v;
            return true;
        }
    }
    return false;
}

HvstorVmbus* hvstor_vmbus_new(const HvstorHostOps* ops, uint32_t nr_vps, uint16_t port, uint32_t max_version,
                              char** err) {
    try {
        if (!ops || !ops->read_gpa || !ops->write_gpa || !ops->atomic_or_u32 || !ops->raise_vector)
            throw std::invalid_argument("incomplete host operations");
        if (nr_vps == 0 || nr_vps > 4096) throw std::invalid_argument("vCPU count must be 1..4096");
        return new HvstorVmbus(*ops, nr_vps, port, max_version);
    } catch (const std::exception& e) {
        if (err) *err = dup_message(e.what());
        return nullptr;
    }
}

void hvstor_vmbus_free(HvstorVmbus* vb) { delete vb; }

void hvstor_vmbus_reset(HvstorVmbus* vb) {
    vb->server.reset();
    vb->partition.reset();
}

void hvstor_cpuid(HvstorVmbus* vb, uint32_t leaf, uint32_t subleaf, uint32_t* eax, uint32_t* ebx, uint32_t* ecx,
                  uint32_t* edx) {
    hvstor::hv::CpuidRegs r{*eax, *ebx, *ecx, *edx};
    vb->partition.cpuid(leaf, subleaf, r);
    *eax = r.eax;
    *ebx = r.ebx;
    *ecx = r.ecx;
    *edx = r.edx;
}

HvstorMsrResult hvstor_rdmsr(HvstorVmbus* vb, uint32_t vp, uint32_t msr, uint64_t* val) {
    return to_c(vb->partition.rdmsr(vp, msr, *val));
}

HvstorMsrResult hvstor_wrmsr(HvstorVmbus* vb, uint32_t vp, uint32_t msr, uint64_t val) {
    return to_c(vb->partition.wrmsr(vp, msr, val));
}

uint64_t hvstor_hypercall(HvstorVmbus* vb, uint32_t vp, uint64_t control, uint64_t input, uint64_t output) {
    try {
        return vb->partition.hypercall(vp, control, input, output);
    } catch (const std::bad_alloc&) {
        return static_cast<uint64_t>(hvstor::hv::Status::InsufficientMemory);
    }
}

uint32_t hvstor_vmbus_add_scsi_controller(HvstorVmbus* vb, const uint8_t instance[16]) {
    try {
        hvstor::vmbus::OfferInfo info;
        info.type = hvstor::vmbus::kScsiControllerType;
        std::memcpy(info.instance.bytes.data(), instance, 16);
        return vb->server.add_offer(info);
    } catch (const std::exception&) {
        return 0;
    }
}

void hvstor_vmbus_stats(HvstorVmbus* vb, HvstorStats* out) {
    auto p = vb->partition.stats();
    auto s = vb->server.stats();
    auto y = vb->partition.synic().stats();
    *out = HvstorStats{p.hypercalls, p.hypercall_errors, p.msr_faults, s.messages_in, s.messages_out,
                       s.bad_messages, y.messages_deferred, vb->server.negotiated_version()};
}

} // extern "C"
