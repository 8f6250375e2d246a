#include "hvstor/hyperv/synic.h"

#include <algorithm>
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
// Vectors 0-15 are reserved: an unmasked SINT with one is refused.
bool sint_refused(uint64_t sint) { return !sint_masked(sint) && sint_vector(sint) < 16; }
// Of a SINT, vector, masked, auto-EOI and polling are kept; the rest is reserved.
constexpr uint64_t kSintKept = 0xFFull | (7ull << 16);

// The saved state's section.
constexpr uint32_t kStateTag = 0x53594E43; // 'SYNC'
constexpr uint32_t kStateVersion = 1;
// The smallest saved message (type, payload length) and held flag (vp, sint, flag), to
// bound counts by what the stream can hold before anything is allocated for them.
constexpr size_t kSavedMessageMin = 4 + 4;
constexpr size_t kSavedEvent = 4 + 1 + 2;

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
                if (sint_refused(val)) return MsrResult::Fault;
                v.sint[m - msr::kSint0] = val & kSintKept;
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
        std::copy(payload.begin(), payload.end(), msg.payload.begin()); // not memcpy: empty, data() may be null
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

// Held flags are saved by their parts, not by held_events_'s packing, which is this build's.
void Synic::save(state::Writer& w) const {
    std::lock_guard lock(mu_);
    w.begin(kStateTag, kStateVersion);
    w.u32(nr_vps());
    for (const Vp& v : vps_) {
        w.u64(v.scontrol);
        w.u64(v.siefp);
        w.u64(v.simp);
        for (uint64_t sint : v.sint) w.u64(sint);
        for (const auto& q : v.queue) {
            w.u32(static_cast<uint32_t>(q.size()));
            for (const Message& m : q) {
                w.u32(m.type);
                w.bytes({m.payload.data(), m.size});
            }
        }
    }
    w.u32(static_cast<uint32_t>(held_events_.size()));
    for (uint64_t e : held_events_) {
        w.u32(uint32_t(e >> 32));
        w.u8(uint8_t(e >> 16));
        w.u16(uint16_t(e & 0xFFFF));
    }
}

bool Synic::load(state::Reader& r) {
    Loaded in;
    if (!parse(r, in)) return false;
    apply(std::move(in));
    return true;
}

// vps_.size() is fixed at construction: no lock needed to read the configuration.
bool Synic::parse(state::Reader& r, Loaded& out) const {
    r.begin(kStateTag, kStateVersion, "the SynIC state");
    const uint32_t n = r.u32("the SynIC's VP count");
    if (r.ok() && n != nr_vps()) r.fail("the SynIC's VP count", "differs from this partition's", n);
    if (!r.ok()) return false;
    std::vector<Vp> vps(n);
    size_t queued = 0;
    for (Vp& v : vps)
        if (!parse_vp(r, v, queued)) return false;
    std::set<uint64_t> held;
    if (!parse_held(r, held)) return false;
    out.vps_ = std::move(vps);
    out.held_events_ = std::move(held);
    out.queued_ = queued;
    return true;
}

// Values are kept as wrmsr keeps them, and a message as post_message takes it: the state
// loaded is one a guest and this host could have made.
bool Synic::parse_vp(state::Reader& r, Vp& v, size_t& queued) const {
    v.scontrol = r.u64("SCONTROL") & kEnable;
    v.siefp = r.u64("SIEFP") & (kPageMask | kEnable);
    v.simp = r.u64("SIMP") & (kPageMask | kEnable);
    for (uint64_t& sint : v.sint) {
        const uint64_t val = r.u64("a SINT");
        if (r.ok() && sint_refused(val)) r.fail("a SINT", "is unmasked with a vector below 16", val);
        sint = val & kSintKept;
    }
    for (auto& q : v.queue) {
        const uint32_t n = r.count("a SINT's queued message count", uint32_t(kMaxQueued - queued), kSavedMessageMin);
        for (uint32_t i = 0; i < n && r.ok(); i++) {
            Message m;
            m.type = r.u32("a queued message's type");
            if (r.ok() && m.type == 0) r.fail("a queued message's type", "is 0 (an empty slot)", 0);
            const auto payload = r.bytes("a queued message's payload", kMessagePayloadMax);
            m.size = static_cast<uint8_t>(payload.size());
            std::copy(payload.begin(), payload.end(), m.payload.begin());
            q.push_back(m);
            queued++;
        }
        if (!r.ok()) return false;
    }
    return r.ok();
}

bool Synic::parse_held(state::Reader& r, std::set<uint64_t>& held) const {
    const uint64_t distinct = uint64_t(nr_vps()) * kSintCount * kEventFlagsPerSint;
    const uint32_t max = uint32_t(std::min<uint64_t>(distinct, UINT32_MAX));
    const uint32_t n = r.count("the held event flag count", max, kSavedEvent);
    for (uint32_t i = 0; i < n && r.ok(); i++) {
        const uint32_t vp = r.u32("a held event flag's VP");
        const uint8_t sint = r.u8("a held event flag's SINT");
        const uint16_t flag = r.u16("a held event flag");
        if (!r.ok()) break;
        if (vp >= nr_vps()) r.fail("a held event flag's VP", "is out of range", vp);
        else if (sint >= kSintCount) r.fail("a held event flag's SINT", "is out of range", sint);
        else if (flag >= kEventFlagsPerSint) r.fail("a held event flag", "is out of range", flag);
        else if (!held.insert(uint64_t(vp) << 32 | uint64_t(sint) << 16 | flag).second)
            r.fail("a held event flag", "is listed twice", flag);
    }
    return r.ok();
}

// The old state leaves with `in`, freed outside the lock.
void Synic::apply(Loaded&& in) {
    std::lock_guard lock(mu_);
    vps_.swap(in.vps_);
    held_events_.swap(in.held_events_);
    queued_ = in.queued_;
}

} // namespace hvstor::hv
