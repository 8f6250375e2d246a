// A Hyper-V partition as a Linux guest sees it: CPUID leaves, the synthetic MSRs,
// the hypercall page and hypercall dispatch, and the SynIC of each virtual processor.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <span>
#include <vector>

#include "hvstor/guest_log.h"
#include "hvstor/host.h"
#include "hvstor/hyperv/cpuid.h"
#include "hvstor/hyperv/hv_status.h"
#include "hvstor/hyperv/synic.h"
#include "hvstor/state.h"

namespace hvstor::hv {

// Receives what the guest sends with POST_MESSAGE and SIGNAL_EVENT (the VMBus server).
class MessageHandler {
public:
    virtual ~MessageHandler() = default;
    virtual Status on_post_message(uint32_t vp, uint32_t connection_id, uint32_t message_type,
                                   std::span<const uint8_t> payload) = 0;
    virtual Status on_signal_event(uint32_t vp, uint32_t connection_id, uint16_t flag) = 0;
};

struct PartitionConfig {
    uint32_t nr_vps = 1;
    // The I/O port the hypercall page traps through (see hypercall_stub()).
    uint16_t hypercall_port = 0;
};

struct PartitionStats {
    uint64_t hypercalls = 0;
    uint64_t hypercall_errors = 0;
    uint64_t msr_faults = 0;
};

class Partition {
public:
    // POST_MESSAGE input: u32 connection_id, u32 reserved, u32 message_type,
    // u32 payload_size, then the payload.
    static constexpr size_t kPostMessageHeader = 16;
    // The stub the guest calls: ENDBR64 (the guest checks it under IBT); keep the
    // input GPA in R11 because the port number goes in DX; OUT to the port traps to the
    // VMM on the calling vCPU's thread, which reads RCX/R11/R8 and writes RAX; RET.
    static constexpr size_t kStubSize = 13;
    static std::array<uint8_t, kStubSize> hypercall_stub(uint16_t port);

    Partition(Host& host, const PartitionConfig& cfg);

    uint32_t nr_vps() const { return cfg_.nr_vps; }
    const PartitionConfig& config() const { return cfg_; }
    Synic& synic() { return synic_; }

    void set_message_handler(MessageHandler* h) { handler_ = h; }

    void cpuid(uint32_t leaf, uint32_t subleaf, CpuidRegs& regs) const;

    // MSR access from vCPU `vp`. NotOurs outside the Hyper-V range; Fault for invalid
    // accesses inside it, which the VMM turns into #GP.
    MsrResult rdmsr(uint32_t vp, uint32_t msr, uint64_t& val);
    MsrResult wrmsr(uint32_t vp, uint32_t msr, uint64_t val);

    // A hypercall from vCPU `vp`: control (RCX), input (GPA or fast operand),
    // output (GPA or second fast operand). Returns the value for RAX. Refused with
    // OperationDenied (counted, logged) until the guest set a guest OS id and enabled the
    // hypercall page, where Hyper-V raises #UD.
    uint64_t hypercall(uint32_t vp, uint64_t control, uint64_t input, uint64_t output);

    bool hypercall_page_enabled() const;
    PartitionStats stats() const;

    // Power-on state for a machine reset.
    void reset();

    // Saved state (savevm, migration): the partition-wide MSRs (guest OS id, hypercall,
    // TSC invariant control, reference TSC), each VP's VP assist page, then the SynIC's
    // section (Synic::save). Not saved: the hypercall page's stub, which is guest RAM the
    // VMM carries, and the stats.
    void save(state::Writer& w) const;
    // Loads what save() wrote, with the VM stopped. The stream is untrusted: the VP count
    // must match and each MSR is kept as wrmsr keeps it (a reference TSC page enabled, which
    // wrmsr refuses, is refused). It does not write the hypercall page (guest RAM is restored
    // on its own) and raises nothing. All or nothing, the SynIC's part included: on false
    // (r.error() names the field) the partition is as it was. Bytes after the section are
    // the caller's to check (r.done()).
    bool load(state::Reader& r);

private:
    // Why a refused call or MSR access was refused, naming the field and its value.
    static constexpr size_t kWhyLen = 160;
    using Why = char[kWhyLen];
    Status post_message(uint32_t vp, const HypercallControl& c, uint64_t input, Why& why);
    Status signal_event(uint32_t vp, const HypercallControl& c, uint64_t input, Why& why);
    // Why hypercalls are off now (no guest OS id, or the page disabled), for the refusal's
    // line; null when they are on.
    const char* hypercalls_off() const;
    // Sets hypercall_msr_ and its mirror hypercalls_on_. Under mu_.
    void set_hypercall_msr_locked(uint64_t v);
    // Counts and logs an MSR access the guest gets #GP for. Under mu_.
    MsrResult msr_fault_locked(uint32_t vp, const char* access, uint32_t msr, uint64_t val, const char* why);

    Host& host_;
    PartitionConfig cfg_;
    CpuidConfig cpuid_;
    Synic synic_;
    MessageHandler* handler_ = nullptr;

    mutable std::mutex mu_;  // guards the partition-wide and per-VP MSR values below
    uint64_t guest_os_id_ = 0;
    uint64_t hypercall_msr_ = 0;
    // hypercall_msr_'s enable bit, read by every hypercall without the lock. The page cannot
    // be enabled before a guest OS id is set, and clearing the id disables it, so this alone
    // says whether hypercalls are on.
    std::atomic<bool> hypercalls_on_{false};
    uint64_t tsc_invariant_control_ = 0;
    uint64_t reference_tsc_ = 0;  // the page's GPA; never enabled (the page is not offered)
    std::vector<uint64_t> vp_assist_;
    PartitionStats stats_;
    GuestErrorLog log_; // under mu_
};

} // namespace hvstor::hv
