#include "hvstor/hyperv/partition.h"

#include <cstdarg>
#include <cstdio>
#include <cstring>

#include "hvstor/hyperv/msr.h"

namespace hvstor::hv {

namespace {

constexpr uint64_t kHypercallEnable = 1;
constexpr uint64_t kHypercallLocked = 2;
constexpr uint64_t kPageMask = ~uint64_t(kPageSize - 1);
constexpr uint64_t kVpAssistEnable = 1;
// What wrmsr keeps of the hypercall and VP assist MSRs.
constexpr uint64_t kHypercallKept = kPageMask | kHypercallEnable | kHypercallLocked;
constexpr uint64_t kVpAssistKept = kPageMask | kVpAssistEnable;
constexpr uint64_t kReferenceTscEnable = 1;
// The saved state's section.
constexpr uint32_t kStateTag = 0x48565054; // 'HVPT'
constexpr uint32_t kStateVersion = 1;
constexpr uint32_t kHighBit = 0x80000000u; // message types with it are the hypervisor's

bool crosses_page(uint64_t gpa, uint64_t len) {
    return (gpa & (kPageSize - 1)) + len > kPageSize;
}

// Writes why a call is refused into `why` (n bytes) and returns its status.
[[gnu::format(printf, 4, 5)]] Status refuse(char* why, size_t n, Status st, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(why, n, fmt, ap);
    va_end(ap);
    return st;
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
    : host_(host), cfg_(cfg), synic_(host, cfg.nr_vps), vp_assist_(cfg.nr_vps, 0), log_(host, "hyperv: ") {
    cpuid_.max_vps = cfg.nr_vps;
}

void Partition::reset() {
    {
        std::lock_guard lock(mu_);
        guest_os_id_ = 0;
        set_hypercall_msr_locked(0);
        tsc_invariant_control_ = 0;
        reference_tsc_ = 0;
        std::fill(vp_assist_.begin(), vp_assist_.end(), 0);
    }
    synic_.reset();
}

void Partition::cpuid(uint32_t leaf, uint32_t subleaf, CpuidRegs& regs) const {
    apply_cpuid(cpuid_, leaf, subleaf, regs);
}

bool Partition::hypercall_page_enabled() const { return hypercalls_on_.load(std::memory_order_acquire); }

void Partition::set_hypercall_msr_locked(uint64_t v) {
    hypercall_msr_ = v;
    hypercalls_on_.store(v & kHypercallEnable, std::memory_order_release);
}

// Hyper-V (TLFS, "Establishing the hypercall interface") answers a hypercall with #UD until
// the guest has written a non-zero guest OS id and enabled the hypercall page. The stub's OUT
// is a port any guest code can reach, page or no page, and the port handler cannot raise #UD
// under TCG: such a call is refused with a status instead. Linux writes both MSRs in
// hyperv_init() before its first hypercall, and hyperv_cleanup() (kexec, kdump) drops its
// page pointer before it clears them, so it never meets this refusal.
const char* Partition::hypercalls_off() const {
    std::lock_guard lock(mu_);
    if (guest_os_id_ == 0) return "before a guest OS id is set";
    if (!(hypercall_msr_ & kHypercallEnable)) return "with the hypercall page disabled";
    return nullptr;
}

PartitionStats Partition::stats() const {
    std::lock_guard lock(mu_);
    return stats_;
}

MsrResult Partition::msr_fault_locked(uint32_t vp, const char* access, uint32_t m, uint64_t val, const char* why) {
    stats_.msr_faults++;
    if (std::strcmp(access, "wrmsr") == 0)
        log_("VP %u wrmsr MSR 0x%x value 0x%llx: %s (#GP)", vp, m, static_cast<unsigned long long>(val), why);
    else
        log_("VP %u %s MSR 0x%x: %s (#GP)", vp, access, m, why);
    return MsrResult::Fault;
}

MsrResult Partition::rdmsr(uint32_t vp, uint32_t m, uint64_t& val) {
    if (!msr::in_range(m)) return MsrResult::NotOurs;
    std::unique_lock lock(mu_, std::defer_lock);
    if (vp >= cfg_.nr_vps) {
        lock.lock();
        return msr_fault_locked(vp, "rdmsr", m, 0, "no such VP");
    }
    MsrResult r = synic_.rdmsr(vp, m, val);
    if (r == MsrResult::Handled) return r; // the SynIC's own: no partition lock on that path
    lock.lock();
    if (r == MsrResult::Fault) return msr_fault_locked(vp, "rdmsr", m, 0, "refused by the SynIC");
    if (r != MsrResult::NotOurs) return r;
    switch (m) {
    case msr::kGuestOsId: val = guest_os_id_; return MsrResult::Handled;
    case msr::kHypercall: val = hypercall_msr_; return MsrResult::Handled;
    case msr::kVpIndex: val = vp; return MsrResult::Handled;
    case msr::kVpAssistPage: val = vp_assist_[vp]; return MsrResult::Handled;
    case msr::kTscInvariantControl: val = tsc_invariant_control_; return MsrResult::Handled;
    case msr::kReferenceTsc: val = reference_tsc_; return MsrResult::Handled;
    default: return msr_fault_locked(vp, "rdmsr", m, 0, "not implemented");
    }
}

MsrResult Partition::wrmsr(uint32_t vp, uint32_t m, uint64_t val) {
    if (!msr::in_range(m)) return MsrResult::NotOurs;
    std::unique_lock lock(mu_, std::defer_lock);
    if (vp >= cfg_.nr_vps) {
        lock.lock();
        return msr_fault_locked(vp, "wrmsr", m, val, "no such VP");
    }
    MsrResult r = synic_.wrmsr(vp, m, val);
    if (r == MsrResult::Handled) return r; // the SynIC's own (EOM, every message): no partition lock
    lock.lock();
    if (r == MsrResult::Fault)
        return msr_fault_locked(vp, "wrmsr", m, val, "refused by the SynIC (read-only, or a SINT vector below 16)");
    if (r != MsrResult::NotOurs) return r;
    switch (m) {
    case msr::kGuestOsId:
        guest_os_id_ = val;
        // TLFS: clearing it disables the page.
        if (val == 0) set_hypercall_msr_locked(hypercall_msr_ & ~kHypercallEnable);
        return MsrResult::Handled;
    case msr::kHypercall: {
        if (hypercall_msr_ & kHypercallLocked) return MsrResult::Handled; // ignored once locked
        uint64_t next = val & kHypercallKept;
        // The page cannot be enabled before the guest identified itself.
        if (guest_os_id_ == 0) next &= ~kHypercallEnable;
        if (next & kHypercallEnable) {
            auto stub = hypercall_stub(cfg_.hypercall_port);
            if (!host_.write_gpa(next & kPageMask, stub.data(), stub.size()))
                return msr_fault_locked(vp, "wrmsr", m, val, "the hypercall page is not guest RAM");
        }
        set_hypercall_msr_locked(next);
        return MsrResult::Handled;
    }
    case msr::kVpIndex: return msr_fault_locked(vp, "wrmsr", m, val, "read-only");
    case msr::kVpAssistPage:
        // Accepted and remembered; nothing in this partition reads the page.
        vp_assist_[vp] = val & kVpAssistKept;
        return MsrResult::Handled;
    case msr::kTscInvariantControl:
        tsc_invariant_control_ = val & 1;
        return MsrResult::Handled;
    case msr::kReferenceTsc:
        // The TSC page is not offered (its privilege bit is clear in CPUID), but Linux's
        // hyperv_cleanup() (kexec, kdump) turns it off unconditionally: a read and a write
        // with the enable bit clear. Only turning it on is refused.
        if (val & kReferenceTscEnable)
            return msr_fault_locked(vp, "wrmsr", m, val, "the reference TSC page is not offered");
        reference_tsc_ = val & kPageMask;
        return MsrResult::Handled;
    default: return msr_fault_locked(vp, "wrmsr", m, val, "not implemented");
    }
}

// The SynIC's section follows outside mu_: the SynIC's lock is never taken under it.
void Partition::save(state::Writer& w) const {
    {
        std::lock_guard lock(mu_);
        w.begin(kStateTag, kStateVersion);
        w.u64(guest_os_id_);
        w.u64(hypercall_msr_);
        w.u64(tsc_invariant_control_);
        w.u64(reference_tsc_);
        w.u32(static_cast<uint32_t>(vp_assist_.size()));
        for (uint64_t a : vp_assist_) w.u64(a);
    }
    synic_.save(w);
}

// Both parts are parsed before either is applied, so a bad SynIC section leaves the
// partition's MSRs as they were too.
bool Partition::load(state::Reader& r) {
    r.begin(kStateTag, kStateVersion, "the partition state");
    const uint64_t os_id = r.u64("GUEST_OS_ID");
    uint64_t hypercall = r.u64("HYPERCALL") & kHypercallKept;
    // As wrmsr: the page is not enabled before the guest identified itself.
    if (os_id == 0) hypercall &= ~kHypercallEnable;
    const uint64_t tsc_invariant = r.u64("TSC_INVARIANT_CONTROL") & 1;
    const uint64_t reference_tsc = r.u64("REFERENCE_TSC");
    if (r.ok() && (reference_tsc & kReferenceTscEnable))
        r.fail("REFERENCE_TSC", "enables the page, which is not offered", reference_tsc);
    const uint32_t n = r.u32("the VP assist page count");
    if (r.ok() && n != cfg_.nr_vps) r.fail("the VP assist page count", "differs from this partition's VP count", n);
    std::vector<uint64_t> assist;
    if (r.ok()) {
        assist.resize(n);
        for (uint64_t& a : assist) a = r.u64("a VP assist page") & kVpAssistKept;
    }
    Synic::Loaded synic;
    if (!r.ok() || !synic_.parse(r, synic)) return false;
    {
        std::lock_guard lock(mu_);
        guest_os_id_ = os_id;
        set_hypercall_msr_locked(hypercall);
        tsc_invariant_control_ = tsc_invariant;
        reference_tsc_ = reference_tsc & kPageMask;
        vp_assist_.swap(assist);
    }
    synic_.apply(std::move(synic));
    return true;
}

uint64_t Partition::hypercall(uint32_t vp, uint64_t control, uint64_t input, uint64_t /*output*/) {
    HypercallControl c{control};
    Status st;
    Why why{};
    if (vp >= cfg_.nr_vps) {
        st = Status::InvalidParameter;
        refuse(why, kWhyLen, st, "no such VP");
    } else if (!hypercalls_on_.load(std::memory_order_acquire)) {
        st = Status::OperationDenied;
        const char* off = hypercalls_off();
        refuse(why, kWhyLen, st, "call code 0x%x %s (Hyper-V raises #UD)", unsigned(c.code()),
               off ? off : "while the guest was turning hypercalls on");
    } else if (c.rep_count() != 0 || c.rep_start() != 0 || c.var_header_size() != 0) {
        st = Status::InvalidHypercallInput; // neither call is a rep or variable-size call
        refuse(why, kWhyLen, st, "rep count %u, rep start %u, variable header %u (want 0, 0, 0)",
               unsigned(c.rep_count()), unsigned(c.rep_start()), unsigned(c.var_header_size()));
    } else {
        switch (static_cast<CallCode>(c.code())) {
        case CallCode::PostMessage: st = post_message(vp, c, input, why); break;
        case CallCode::SignalEvent: st = signal_event(vp, c, input, why); break;
        default:
            st = Status::InvalidHypercallCode;
            refuse(why, kWhyLen, st, "unknown call code");
            break;
        }
    }
    std::lock_guard lock(mu_);
    stats_.hypercalls++;
    if (st != Status::Success) stats_.hypercall_errors++;
    // Statuses from the message handler (a full queue, say) are its own to report.
    if (why[0])
        log_("VP %u hypercall control 0x%llx input 0x%llx: %s (status %u)", vp, static_cast<unsigned long long>(control),
             static_cast<unsigned long long>(input), why, unsigned(st));
    return static_cast<uint64_t>(st);
}

Status Partition::post_message(uint32_t vp, const HypercallControl& c, uint64_t input, Why& why) {
    if (c.fast()) return refuse(why, kWhyLen, Status::InvalidHypercallInput, "POST_MESSAGE as a fast call");
    if (input & 7) return refuse(why, kWhyLen, Status::InvalidAlignment, "POST_MESSAGE input not 8-byte aligned");
    uint8_t buf[kPostMessageHeader + kMessagePayloadMax];
    if (crosses_page(input, kPostMessageHeader))
        return refuse(why, kWhyLen, Status::InvalidAlignment, "POST_MESSAGE header crosses a page");
    if (!host_.read_gpa(input, buf, kPostMessageHeader))
        return refuse(why, kWhyLen, Status::InvalidParameter, "POST_MESSAGE input is not guest RAM");
    uint32_t conn, type, size;
    std::memcpy(&conn, buf, 4);
    std::memcpy(&type, buf + 8, 4);
    std::memcpy(&size, buf + 12, 4);
    if (size > kMessagePayloadMax)
        return refuse(why, kWhyLen, Status::InvalidParameter, "POST_MESSAGE payload_size %u > %u", size, unsigned(kMessagePayloadMax));
    if (type == 0 || (type & kHighBit))
        return refuse(why, kWhyLen, Status::InvalidParameter, "POST_MESSAGE message_type 0x%x (want 1..0x7fffffff)", type);
    if (crosses_page(input, kPostMessageHeader + size))
        return refuse(why, kWhyLen, Status::InvalidAlignment, "POST_MESSAGE payload_size %u crosses a page", size);
    if (size && !host_.read_gpa(input + kPostMessageHeader, buf + kPostMessageHeader, size))
        return refuse(why, kWhyLen, Status::InvalidParameter, "POST_MESSAGE payload is not guest RAM");
    if (!handler_) return refuse(why, kWhyLen, Status::InvalidConnectionId, "POST_MESSAGE connection_id %u: nobody listens", conn);
    return handler_->on_post_message(vp, conn, type, std::span<const uint8_t>(buf + kPostMessageHeader, size));
}

Status Partition::signal_event(uint32_t vp, const HypercallControl& c, uint64_t input, Why& why) {
    uint64_t in = input;
    if (!c.fast()) {
        if (input & 7) return refuse(why, kWhyLen, Status::InvalidAlignment, "SIGNAL_EVENT input not 8-byte aligned");
        if (!host_.read_gpa(input, &in, sizeof in))
            return refuse(why, kWhyLen, Status::InvalidParameter, "SIGNAL_EVENT input is not guest RAM");
    }
    const uint32_t conn = static_cast<uint32_t>(in);
    const uint16_t flag = static_cast<uint16_t>(in >> 32);
    if ((in >> 48) != 0)
        return refuse(why, kWhyLen, Status::InvalidHypercallInput, "SIGNAL_EVENT reserved bits 0x%llx (want 0)",
                      static_cast<unsigned long long>(in >> 48));
    if (!handler_)
        return refuse(why, kWhyLen, Status::InvalidConnectionId, "SIGNAL_EVENT connection_id %u: nobody listens", conn);
    return handler_->on_signal_event(vp, conn, flag);
}

} // namespace hvstor::hv
