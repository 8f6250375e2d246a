#include "hvstor/hyperv/partition.h"

#include <cstring>

#include "hvstor/hyperv/msr.h"

namespace hvstor::hv {

namespace {

constexpr uint64_t kHypercallEnable = 1;
constexpr uint64_t kHypercallLocked = 2;
constexpr uint64_t kPageMask = ~uint64_t(kPageSize - 1);
constexpr uint64_t kVpAssistEnable = 1;
constexpr uint32_t kHighBit = 0x80000000u; // message types with it are the hypervisor's

bool crosses_page(uint64_t gpa, uint64_t len) {
    return (gpa & (kPageSize - 1)) + len > kPageSize;
}

} // namespace

std::array<uint8_t, Partition::kStubSize> Partition::hypercall_stub(uint16_t port) {
    return {
        0xF3, 0x0F, 0x1E, 0xFA,                          // endbr64
        0x49, 0x89, 0xD3,                                // mov r11, rdx
        0x66, 0xBA, uint8_t(port & 0xFF), uint8_t(port >> 8), // mov dx, port
        0xEF,                                            // out dx, eax
        0xC3,                                            // ret
    };
}

Partition::Partition(Host& host, const PartitionConfig& cfg)
    : host_(host), cfg_(cfg), synic_(host, cfg.nr_vps), vp_assist_(cfg.nr_vps, 0) {
    cpuid_.max_vps = cfg.nr_vps;
}

void Partition::reset() {
    {
        std::lock_guard lock(mu_);
        guest_os_id_ = 0;
        hypercall_msr_ = 0;
        tsc_invariant_control_ = 0;
        std::fill(vp_assist_.begin(), vp_assist_.end(), 0);
    }
    synic_.reset();
}

void Partition::cpuid(uint32_t leaf, uint32_t subleaf, CpuidRegs& regs) const {
    apply_cpuid(cpuid_, leaf, subleaf, regs);
}

bool Partition::hypercall_page_enabled() const {
    std::lock_guard lock(mu_);
    return hypercall_msr_ & kHypercallEnable;
}

PartitionStats Partition::stats() const {
    std::lock_guard lock(mu_);
    return stats_;
}

MsrResult Partition::rdmsr(uint32_t vp, uint32_t m, uint64_t& val) {
    if (!msr::in_range(m)) return MsrResult::NotOurs;
    if (vp >= cfg_.nr_vps) return MsrResult::Fault;
    MsrResult r = synic_.rdmsr(vp, m, val);
    if (r != MsrResult::NotOurs) return r;
    std::lock_guard lock(mu_);
    switch (m) {
    case msr::kGuestOsId: val = guest_os_id_; return MsrResult::Handled;
    case msr::kHypercall: val = hypercall_msr_; return MsrResult::Handled;
    case msr::kVpIndex: val = vp; return MsrResult::Handled;
    case msr::kVpAssistPage: val = vp_assist_[vp]; return MsrResult::Handled;
    case msr::kTscInvariantControl: val = tsc_invariant_control_; return MsrResult::Handled;
    default:
        stats_.msr_faults++;
        return MsrResult::Fault;
    }
}

MsrResult Partition::wrmsr(uint32_t vp, uint32_t m, uint64_t val) {
    if (!msr::in_range(m)) return MsrResult::NotOurs;
    if (vp >= cfg_.nr_vps) return MsrResult::Fault;
    MsrResult r = synic_.wrmsr(vp, m, val);
    if (r != MsrResult::NotOurs) return r;
    std::lock_guard lock(mu_);
    switch (m) {
    case msr::kGuestOsId:
        guest_os_id_ = val;
        if (val == 0) hypercall_msr_ &= ~kHypercallEnable; // TLFS: clearing it disables the page
        return MsrResult::Handled;
    case msr::kHypercall: {
        if (hypercall_msr_ & kHypercallLocked) return MsrResult::Handled; // ignored once locked
        uint64_t next = val & (kPageMask | kHypercallEnable | kHypercallLocked);
        // The page cannot be enabled before the guest identified itself.
        if (guest_os_id_ == 0) next &= ~kHypercallEnable;
        if (next & kHypercallEnable) {
            auto stub = hypercall_stub(cfg_.hypercall_port);
            if (!host_.write_gpa(next & kPageMask, stub.data(), stub.size())) {
                stats_.msr_faults++;
                return MsrResult::Fault; // not guest RAM
            }
        }
        hypercall_msr_ = next;
        return MsrResult::Handled;
    }
    case msr::kVpIndex:
        stats_.msr_faults++;
        return MsrResult::Fault; // read-only
    case msr::kVpAssistPage:
        // Accepted and remembered; nothing in this partition reads the page.
        vp_assist_[vp] = val & (kPageMask | kVpAssistEnable);
        return MsrResult::Handled;
    case msr::kTscInvariantControl:
        tsc_invariant_control_ = val & 1;
        return MsrResult::Handled;
    default:
        stats_.msr_faults++;
        return MsrResult::Fault;
    }
}

uint64_t Partition::hypercall(uint32_t vp, uint64_t control, uint64_t input, uint64_t /*output*/) {
    HypercallControl c{control};
    Status st;
    if (vp >= cfg_.nr_vps) {
        st = Status::InvalidParameter;
    } else if (c.rep_count() != 0 || c.rep_start() != 0 || c.var_header_size() != 0) {
        st = Status::InvalidHypercallInput; // neither call is a rep or variable-size call
    } else {
        switch (static_cast<CallCode>(c.code())) {
        case CallCode::PostMessage: st = post_message(vp, c, input); break;
        case CallCode::SignalEvent: st = signal_event(vp, c, input); break;
        default: st = Status::InvalidHypercallCode; break;
        }
    }
    std::lock_guard lock(mu_);
    stats_.hypercalls++;
    if (st != Status::Success) stats_.hypercall_errors++;
    return static_cast<uint64_t>(st);
}

Status Partition::post_message(uint32_t vp, const HypercallControl& c, uint64_t input) {
    if (c.fast()) return Status::InvalidHypercallInput;
    if (input & 7) return Status::InvalidAlignment;
    uint8_t buf[kPostMessageHeader + kMessagePayloadMax];
    if (crosses_page(input, kPostMessageHeader)) return Status::InvalidAlignment;
    if (!host_.read_gpa(input, buf, kPostMessageHeader)) return Status::InvalidParameter;
    uint32_t conn, type, size;
    std::memcpy(&conn, buf, 4);
    std::memcpy(&type, buf + 8, 4);
    std::memcpy(&size, buf + 12, 4);
    if (size > kMessagePayloadMax) return Status::InvalidParameter;
    if (type == 0 || (type & kHighBit)) return Status::InvalidParameter;
    if (crosses_page(input, kPostMessageHeader + size)) return Status::InvalidAlignment;
    if (size && !host_.read_gpa(input + kPostMessageHeader, buf + kPostMessageHeader, size))
        return Status::InvalidParameter;
    if (!handler_) return Status::InvalidConnectionId;
    return handler_->on_post_message(vp, conn, type, std::span<const uint8_t>(buf + kPostMessageHeader, size));
}

Status Partition::signal_event(uint32_t vp, const HypercallControl& c, uint64_t input) {
    uint64_t in = input;
    if (!c.fast()) {
        if (input & 7) return Status::InvalidAlignment;
        if (!host_.read_gpa(input, &in, sizeof in)) return Status::InvalidParameter;
    }
    const uint32_t conn = static_cast<uint32_t>(in);
    const uint16_t flag = static_cast<uint16_t>(in >> 32);
    if ((in >> 48) != 0) return Status::InvalidHypercallInput; // reserved, must be zero
    if (!handler_) return Status::InvalidConnectionId;
    return handler_->on_signal_event(vp, conn, flag);
}

} // namespace hvstor::hv
