#include "hvstor/hyperv/synic.h"

#include <atomic>
#include <cstring>

#include "hvstor/hyperv/msr.h"

namespace hvstor::hv {

namespace {

constexpr uint64_t kEnable = 1;
constexpr uint64_t kPageMask = ~uint64_t(kPageSize - 1);
constexpr uint32_t kSversion = 1;

// Offsets inside a 256-byte message slot (TLFS hv_message).
constexpr uint64_t kSlotType = 0;
constexpr uint64_t kSlotSize = 4;
constexpr uint64_t kSlotFlags = 5;
constexpr uint64_t kSlotPayload = 16;
constexpr uint8_t kFlagMsgPending = 1;

bool sint_masked(uint64_t sint) { return sint & (1ull << 16); }
uint8_t sint_vector(uint64_t sint) { return static_cast<uint8_t>(sint & 0xFF); }

} // namespace

Synic::Synic(Host& host, uint32_t nr_vps) : host_(host), vps_(nr_vps) {
    for (auto& v : vps_) reset_vp(v);
    host_.run_gate().add(this);
}

Synic::~Synic() { host_.run_gate().remove(this); }

void Synic::reset_vp(Vp& v) {
    v.scontrol = 0;
    v.siefp = 0;
    v.simp = 0;
    v.sint.fill(kSintMasked);
    for (auto& q : v.queue) {
        queued_ -= q.size();
        q.clear();
    }
}

void Synic::reset() {
    std::lock_guard lock(mu_);
    for (auto& v : vps_) reset_vp(v);
    held_events_.clear();
}

MsrResult Synic::rdmsr(uint32_t vp, uint32_t m, uint64_t& val) {
    std::lock_guard lock(mu_);
    if (vp >= vps_.size()) return MsrResult::Fault;
    const Vp& v = vps_[vp];
    switch (m) {
    case msr::kScontrol: val = v.scontrol; return MsrResult::Handled;
    case msr::kSversion: val = kSversion; return MsrResult::Handled;
    case msr::kSiefp: val = v.siefp; return MsrResult::Handled;
    case msr::kSimp: val = v.simp; return MsrResult::Handled;
    case msr::kEom: val = 0; return MsrResult::Handled;
    default:
        if (m >= msr::kSint0 && m <= msr::kSint15) {
            val = v.sint[m - msr::kSint0];
            return MsrResult::Handled;
        }
        return MsrResult::NotOurs;
    }
}

MsrResult Synic::wrmsr(uint32_t vp, uint32_t m, uint64_t val) {
    std::vector<Irq> irqs;
    RunGate::Section running(host_.run_gate()); // else delivered on resume
    {
        std::lock_guard lock(mu_);
        if (vp >= vps_.size()) return MsrResult::Fault;
        Vp& v = vps_[vp];
        switch (m) {
        case msr::kScontrol:
            v.scontrol = val & kEnable;
            break;
        case msr::kSversion:
            return MsrResult::Fault; // read-only
        case msr::kSiefp:
            v.siefp = val & (kPageMask | kEnable);
            break;
        case msr::kSimp:
            v.simp = val & (kPageMask | kEnable);
            break;
        case msr::kEom:
            break; // redelivery below
        default:
            if (m >= msr::kSint0 && m <= msr::kSint15) {
                // Vectors 0-15 are reserved: an unmasked SINT with one is refused.
                if (!sint_masked(val) && sint_vector(val) < 16) return MsrResult::Fault;
                // Keep vector, masked, auto-EOI and polling; the rest is reserved.
                v.sint[m - msr::kSint0] = val & (0xFFull | (7ull << 16));
                break;
            }
            return MsrResult::NotOurs;
        }
        // Any of these may have made a queued message deliverable.
        if (running) deliver_all_locked(vp, irqs);
    }
    raise(irqs);
    return MsrResult::Handled;
}

bool Synic::post_message(uint32_t vp, uint8_t sint, uint32_t type, std::span<const uint8_t> payload) {
    if (type == 0 || payload.size() > kMessagePayloadMax) return false;
    std::vector<Irq> irqs;
    RunGate::Section running(host_.run_gate()); // else delivered on resume
    {
        std::lock_guard lock(mu_);
        if (vp >= vps_.size() || sint >= kSintCount) return false;
        auto& q = vps_[vp].queue[sint];
        if (queued_ >= kMaxQueued) return false;
        Message msg;
        msg.type = type;
        msg.size = static_cast<uint8_t>(payload.size());
        std::memcpy(msg.payload.data(), payload.data(), payload.size());
        q.push_back(msg);
        queued_++;
        if (running) deliver_locked(vp, sint, irqs);
    }
    raise(irqs);
    return true;
}

void Synic::deliver_all_locked(uint32_t vp, std::vector<Irq>& irqs) {
    for (uint8_t s = 0; s < kSintCount; s++) deliver_locked(vp, s, irqs);
}

// The slot belongs to the host while its message_type is zero. When it is busy, set
// msg_pending so the guest writes EOM after clearing it, then look again: the guest
// may have cleared the slot before it could see the flag.
void Synic::deliver_locked(uint32_t vp, uint8_t sint, std::vector<Irq>& irqs) {
    Vp& v = vps_[vp];
    auto& q = v.queue[sint];
    while (!q.empty()) {
        if (!(v.scontrol & kEnable) || !(v.simp & kEnable) || sint_masked(v.sint[sint])) return;
        const uint64_t slot = (v.simp & kPageMask) + uint64_t(sint) * kMessageSlotSize;
        uint32_t cur = 0;
        if (!host_.read_gpa(slot + kSlotType, &cur, sizeof cur)) return;
        if (cur != 0) {
            uint8_t flags = 0;
            if (!host_.read_gpa(slot + kSlotFlags, &flags, 1)) return;
            flags |= kFlagMsgPending;
            if (!host_.write_gpa(slot + kSlotFlags, &flags, 1)) return;
            std::atomic_thread_fence(std::memory_order_seq_cst);
            if (!host_.read_gpa(slot + kSlotType, &cur, sizeof cur)) return;
            if (cur != 0) {
                stats_.messages_deferred++;
                return; // EOM will bring us back
            }
        }
        const Message& msg = q.front();
        uint8_t hdr[16] = {};
        hdr[kSlotSize] = msg.size;
        // msg_pending is recomputed for each message: none until a later one finds the
        // slot busy.
        if (!host_.write_gpa(slot + kSlotSize, hdr + kSlotSize, sizeof hdr - kSlotSize)) return;
        if (!host_.write_gpa(slot + kSlotPayload, msg.payload.data(), msg.size)) return;
        std::atomic_thread_fence(std::memory_order_seq_cst);
        if (!host_.write_gpa(slot + kSlotType, &msg.type, sizeof msg.type)) return;
        q.pop_front();
        queued_--;
        stats_.messages_delivered++;
        irqs.push_back({vp, sint_vector(v.sint[sint])});
    }
}

bool Synic::signal_event(uint32_t vp, uint8_t sint, uint32_t flag) {
    std::vector<Irq> irqs;
    RunGate::Section running(host_.run_gate());
    {
        std::lock_guard lock(mu_);
        if (vp >= vps_.size() || sint >= kSintCount || flag >= kEventFlagsPerSint) return false;
        const Vp& v = vps_[vp];
        if (!(v.scontrol & kEnable) || !(v.siefp & kEnable)) return false;
        if (!running) {
            held_events_.insert(uint64_t(vp) << 32 | uint64_t(sint) << 16 | flag);
            return true;
        }
        if (!set_event_locked(vp, sint, flag, irqs)) return false;
    }
    raise(irqs);
    return true;
}

bool Synic::set_event_locked(uint32_t vp, uint8_t sint, uint32_t flag, std::vector<Irq>& irqs) {
    const Vp& v = vps_[vp];
    if (!(v.scontrol & kEnable) || !(v.siefp & kEnable)) return false;
    const uint64_t word = (v.siefp & kPageMask) + uint64_t(sint) * (kEventFlagsPerSint / 8) + (flag / 32) * 4;
    if (!host_.atomic_or_u32(word, 1u << (flag % 32))) return false;
    stats_.events_signalled++;
    if (!sint_masked(v.sint[sint])) irqs.push_back({vp, sint_vector(v.sint[sint])});
    return true;
}

// Messages first, in their order, then the flags, as if each had come at this moment. A
// flag whose page the guest disabled meanwhile is dropped, as it would have been then.
void Synic::on_resume() {
    std::vector<Irq> irqs;
    RunGate::Section running(host_.run_gate());
    if (!running) return; // paused again: the next resume delivers
    {
        std::lock_guard lock(mu_);
        for (uint32_t vp = 0; vp < vps_.size(); vp++) deliver_all_locked(vp, irqs);
        for (uint64_t e : held_events_)
            set_event_locked(uint32_t(e >> 32), uint8_t(e >> 16), uint32_t(e & 0xFFFF), irqs);
        held_events_.clear();
    }
    raise(irqs);
}

void Synic::raise(const std::vector<Irq>& irqs) {
    for (const Irq& i : irqs) host_.raise_vector(i.vp, i.vector);
}

size_t Synic::queued_messages(uint32_t vp, uint8_t sint) const {
    std::lock_guard lock(mu_);
    if (vp >= vps_.size() || sint >= kSintCount) return 0;
    return vps_[vp].queue[sint].size();
}

size_t Synic::held_events() const {
    std::lock_guard lock(mu_);
    return held_events_.size();
}

SynicStats Synic::stats() const {
    std::lock_guard lock(mu_);
    return stats_;
}

} // namespace hvstor::hv
