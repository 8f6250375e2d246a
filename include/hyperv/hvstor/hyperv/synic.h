// Synthetic interrupt controller (SynIC) per virtual processor: the message page
// (SIMP) and event flags page (SIEFP) the guest registers, the 16 SINTs, and
// message queues with msg_pending / EOM redelivery.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <mutex>
#include <set>
#include <span>
#include <vector>

#include "hvstor/host.h"
#include "hvstor/state.h"

namespace hvstor::hv {

enum class MsrResult {
    Handled,  // the value was read or written
    Fault,    // inject #GP
    NotOurs,  // not a Hyper-V MSR: the CPU model handles it
};

constexpr size_t kSintCount = 16;
constexpr size_t kMessageSlotSize = 256;
constexpr size_t kMessagePayloadMax = 240;
constexpr size_t kEventFlagsPerSint = 2048;

struct Message {
    uint32_t type = 0;
    uint8_t size = 0;
    std::array<uint8_t, kMessagePayloadMax> payload{};
};

struct SynicStats {
    uint64_t messages_delivered = 0;
    uint64_t messages_deferred = 0;  // slot busy, waited for EOM
    uint64_t events_signalled = 0;
};

// While the VM is paused (Host::run_gate) nothing is written to the SIMP or SIEFP pages
// and no SINT is raised: messages wait in their queues and event flags in a set (one entry
// per distinct flag: bounded), and both go out when the VM runs again.
class Synic final : private RunGate::Listener {
public:
    // Undelivered messages held for all VPs and SINTs together: a guest that keeps its
    // SIMP disabled while it makes the host answer cannot grow host memory past ~4 MiB.
    // Far above what a guest with every controller and subchannel offered needs.
    static constexpr size_t kMaxQueued = 16384;

    Synic(Host& host, uint32_t nr_vps);
    ~Synic();
    Synic(const Synic&) = delete;
    Synic& operator=(const Synic&) = delete;

    uint32_t nr_vps() const { return static_cast<uint32_t>(vps_.size()); }
    Host& host() const { return host_; }

    // SCONTROL, SVERSION, SIEFP, SIMP, EOM and SINT0-15. NotOurs for other MSRs.
    MsrResult rdmsr(uint32_t vp, uint32_t msr, uint64_t& val);
    MsrResult wrmsr(uint32_t vp, uint32_t msr, uint64_t val);

    // Queues a message for (vp, sint) and delivers it as soon as the slot is free.
    // Returns false only when vp or sint is out of range, the payload is too large or
    // kMaxQueued messages are waiting; a message accepted here is never dropped.
    bool post_message(uint32_t vp, uint8_t sint, uint32_t type, std::span<const uint8_t> payload);

    // Sets event flag `flag` of `sint` in vp's SIEFP page and raises the SINT's vector.
    // False when the SIEFP page is not enabled or the arguments are out of range. While the
    // VM is paused the flag is held and set on resume.
    bool signal_event(uint32_t vp, uint8_t sint, uint32_t flag);

    size_t queued_messages(uint32_t vp, uint8_t sint) const;
    // Event flags held while the VM is paused.
    size_t held_events() const;
    SynicStats stats() const;

    // Back to power-on state (all pages disabled, SINTs masked, queues and held flags empty).
    void reset();

    // Saved state (savevm, migration): each VP's SCONTROL, SIEFP, SIMP and SINTs, the messages
    // still queued and the event flags held. Those were accepted (a message accepted is never
    // dropped), so the destination must deliver them. Not saved: the guest's pages (guest RAM,
    // which the VMM carries) and the stats (this process's counters, which load leaves as
    // they are).
    void save(state::Writer& w) const;
    // Loads a section save() wrote, with the VM stopped: it writes no guest memory and raises
    // no SINT; on_resume delivers the queues and held flags once the VM runs. The stream is
    // untrusted: the VP count must match, and each value is checked as wrmsr, post_message
    // and signal_event check theirs. All or nothing: on false (r.error() names the field)
    // this SynIC is as it was. Bytes after the section are the caller's to check (r.done()).
    bool load(state::Reader& r);

    // load() in two steps, for a caller that loads more than the SynIC all or nothing
    // (Partition::load): parse() checks everything and changes nothing, apply() cannot fail.
    class Loaded;
    bool parse(state::Reader& r, Loaded& out) const;
    void apply(Loaded&& in);

private:
    struct Irq {
        uint32_t vp;
        uint8_t vector;
    };
    struct Vp {
        uint64_t scontrol = 0;
        uint64_t siefp = 0;
        uint64_t simp = 0;
        std::array<uint64_t, kSintCount> sint{};
        std::array<std::deque<Message>, kSintCount> queue;
    };

    static constexpr uint64_t kSintMasked = 1ull << 16;

    void reset_vp(Vp& v);
    bool parse_vp(state::Reader& r, Vp& v, size_t& queued) const;
    bool parse_held(state::Reader& r, std::set<uint64_t>& held) const;
    void deliver_locked(uint32_t vp, uint8_t sint, std::vector<Irq>& irqs);
    void deliver_all_locked(uint32_t vp, std::vector<Irq>& irqs);
    bool set_event_locked(uint32_t vp, uint8_t sint, uint32_t flag, std::vector<Irq>& irqs);
    void raise(const std::vector<Irq>& irqs);
    // The VM runs again: delivers what waited (RunGate::Listener).
    void on_resume() override;

    Host& host_;
    mutable std::mutex mu_;
    std::vector<Vp> vps_;
    size_t queued_ = 0; // messages in all queues
    // Event flags signalled while paused: vp << 32 | sint << 16 | flag.
    std::set<uint64_t> held_events_;
    SynicStats stats_;
};

// A SynIC state parse() read and checked, for apply().
class Synic::Loaded {
    friend class Synic;
    std::vector<Vp> vps_;
    std::set<uint64_t> held_events_;
    size_t queued_ = 0;
};

} // namespace hvstor::hv
