// A controller's saved state (savevm, migration): see Controller::save and Controller::load.
#include <algorithm>
#include <cstring>

#include "hvstor/trace.h"
#include "queue.h"

namespace hvstor::storvsp {

namespace {

constexpr uint32_t kTag = 0x50535653; // "SVSP"
constexpr uint32_t kVersion = 1;
constexpr uint32_t kDescriptorBytes = sizeof(vmbus::PacketDescriptor);

void put_answer(state::Writer& w, const Queue::Answer& a) {
    w.u64(a.trans_id);
    w.fixed({reinterpret_cast<const uint8_t*>(&a.packet), sizeof a.packet});
    w.u32(a.len);
}

Queue::Answer get_answer(state::Reader& r, const char* what) {
    Queue::Answer a{};
    a.trans_id = r.u64(what);
    r.fixed(what, {reinterpret_cast<uint8_t*>(&a.packet), sizeof a.packet});
    a.len = r.u32(what);
    if (a.len < kVstorPacketMin || a.len > sizeof a.packet) r.fail(what, "has a packet length outside 1..64 bytes:", a.len);
    return a;
}

// The request as the guest could have sent it: GPA-direct with one range per mapped piece
// (each within a page), or in-band without data. The replay parses it as any other packet.
std::vector<uint8_t> request_packet(const IoContext& ctx) {
    // A data SRB of no bytes has no ranges, but is GPA-direct all the same.
    const bool data = ctx.cmd.dir != scsi::Dir::None;
    const uint32_t head = kDescriptorBytes + (data ? 8 + 16 * uint32_t(ctx.gpas.size()) : 0);
    std::vector<uint8_t> out(head + ctx.req_len);
    vmbus::PacketDescriptor d{};
    d.type = uint16_t(data ? vmbus::PacketType::DataUsingGpaDirect : vmbus::PacketType::DataInband);
    d.offset8 = uint16_t(head / 8);
    d.len8 = uint16_t((out.size() + 7) / 8);
    d.flags = vmbus::kPacketFlagCompletionRequested;
    d.trans_id = ctx.trans_id;
    std::memcpy(out.data(), &d, sizeof d);
    uint8_t* p = out.data() + kDescriptorBytes;
    if (data) {
        const uint32_t ranges = uint32_t(ctx.gpas.size());
        std::memcpy(p + 4, &ranges, 4);
        p += 8;
        for (size_t i = 0; i < ctx.gpas.size(); i++, p += 16) {
            const uint32_t count = uint32_t(ctx.pages[i].iov_len), offset = uint32_t(ctx.gpas[i] % kPageSize);
            const uint64_t pfn = ctx.gpas[i] / kPageSize;
            std::memcpy(p, &count, 4);
            std::memcpy(p + 4, &offset, 4);
            std::memcpy(p + 8, &pfn, 8);
        }
    }
    std::memcpy(p, &ctx.req, ctx.req_len);
    return out;
}

// Only SRBs are carried: a control operation is answered in the round that takes it.
bool is_srb(const std::vector<uint8_t>& pkt) {
    vmbus::PacketDescriptor d;
    if (pkt.size() < sizeof d) return false;
    std::memcpy(&d, pkt.data(), sizeof d);
    const size_t off = size_t(d.offset8) * 8;
    uint32_t op = 0;
    if (off < sizeof d || pkt.size() < off + kVstorPacketMin) return false;
    std::memcpy(&op, pkt.data() + off, sizeof op);
    return static_cast<Operation>(op) == Operation::ExecuteSrb;
}

} // namespace

void Queue::save(state::Writer& w) const {
    std::lock_guard lock(mu_);
    w.u16(index_);
    w.u32(relid());
    // Closing: the next machine has no session here; what it owed is dropped, as a close does.
    const bool open = runtime_ != nullptr;
    w.boolean(open);
    if (!open) return;
    w.u8(static_cast<uint8_t>(state_));
    w.u32(notices_.load());
    w.u32(uint32_t(held_resets_.size()));
    for (const Answer& a : held_resets_) put_answer(w, a);
    const std::vector<IoContext*> done = [&] {
        std::lock_guard dl(done_mu_);
        return done_;
    }();
    // The guest gets them in the order the commands finished: carried ones, held back ones,
    // then the ones no round has sent yet.
    w.u32(uint32_t(saved_answers_.size() + unsent_.size() + done.size()));
    for (const Answer& a : saved_answers_) put_answer(w, a);
    for (const std::vector<IoContext*>* list : {&unsent_, &done})
        for (const IoContext* ctx : *list) put_answer(w, {ctx->trans_id, completion(*ctx), ctx->req_len});
    // The rest of the taken requests are still with a disk (its model, a fault, the storage
    // gate): executed again after the load.
    std::vector<bool> idle(pool_.size(), false);
    for (const std::vector<IoContext*>* list : {&free_, &unsent_, &done})
        for (const IoContext* ctx : *list) idle[size_t(ctx - pool_.data())] = true;
    std::vector<const IoContext*> running;
    for (size_t i = 0; i < pool_.size(); i++)
        if (!idle[i]) running.push_back(&pool_[i]);
    w.u32(uint32_t(saved_requests_.size() + running.size()));
    for (const auto& pkt : saved_requests_) w.bytes(pkt);
    for (const IoContext* ctx : running) w.bytes(request_packet(*ctx));
}

bool Queue::read_saved(state::Reader& r, const ControllerConfig& cfg, uint16_t& index, uint32_t& relid, bool& open,
                       Saved& out) {
    index = r.u16("a queue's index");
    relid = r.u32("a queue's relid");
    open = r.boolean("a queue's open flag");
    if (index >= max_queues(cfg)) r.fail("a queue's index", "is beyond this controller's queues (max-subchannels)", index);
    if (!open || !r.ok()) return r.ok();
    out.state = r.u8("a queue's handshake state");
    if (out.state > uint8_t(InitState::Ready)) r.fail("a queue's handshake state", "is not 0..3", out.state);
    out.notices = r.u32("a queue's notices");
    if (out.notices > 3) r.fail("a queue's notices", "has bits other than 0 and 1", out.notices);
    const uint32_t held = r.count("a queue's held resets", kMaxHeldResets, 76);
    for (uint32_t i = 0; i < held && r.ok(); i++) out.held_resets.push_back(get_answer(r, "a held reset"));
    // Together no more than the queue may have outstanding: its pool takes them again.
    const uint32_t limit = cfg.max_outstanding_per_channel;
    const uint32_t answers = r.count("a queue's answers", limit, 76);
    for (uint32_t i = 0; i < answers && r.ok(); i++) out.answers.push_back(get_answer(r, "an answer"));
    const uint32_t requests = r.count("a queue's unfinished requests", limit - answers, 4);
    for (uint32_t i = 0; i < requests && r.ok(); i++) {
        out.requests.push_back(r.bytes("an unfinished request", max_request_packet(cfg)));
        if (r.ok() && !is_srb(out.requests.back()))
            r.fail("an unfinished request", "is not an EXECUTE_SRB packet; its length is", out.requests.back().size());
    }
    return r.ok();
}

void Queue::restore_on_open(Saved s) {
    std::lock_guard lock(mu_);
    restore_ = std::make_unique<Saved>(std::move(s));
}

void Queue::mark_written() const {
    std::lock_guard lock(mu_);
    if (!runtime_) return; // closed: nothing of it is the guest's to read any more
    runtime_->mark_written();
    // A released context has no pages; one taken keeps them until it is answered.
    for (const IoContext& ctx : pool_)
        if (ctx.writes_guest)
            for (const iovec& v : ctx.pages) ctl_.host_.mark_written(v.iov_base, v.iov_len);
}

void Queue::drop_restore() {
    std::lock_guard lock(mu_);
    restore_.reset(); // what an open took of it already, the next open clears
}

// Room for each answer was kept in the outgoing ring before the save (owed()), and the ring
// is as it was. The requests go through on_packet as if just taken, in a batch of their own.
void Queue::resume_saved(vmbus::ChannelRuntime& ch) {
    size_t sent = 0;
    while (sent < saved_answers_.size() &&
           reply(ch, saved_answers_[sent].trans_id, saved_answers_[sent].packet, saved_answers_[sent].len))
        sent++;
    saved_answers_.erase(saved_answers_.begin(), saved_answers_.begin() + std::ptrdiff_t(sent));
    if (saved_requests_.empty() || free_.size() < saved_requests_.size()) return;
    for (const auto& pkt : saved_requests_) {
        vmbus::PacketDescriptor d;
        std::memcpy(&d, pkt.data(), sizeof d);
        on_packet(ch, d, pkt);
    }
    saved_requests_.clear();
    on_batch_end(ch);
}

void Controller::mark_written() const {
    std::lock_guard lock(mu_);
    for (const auto& q : channels_) q->mark_written();
}

void Controller::finish_load() {
    before_load_.reset();
    std::vector<Queue*> queues;
    {
        std::lock_guard lock(mu_);
        for (auto& q : channels_) queues.push_back(q.get());
    }
    // A queue saved open whose channel the bus did not reopen (the state's two sections
    // disagree) has no session to go on with: what it loaded must not reach the guest's
    // next one.
    for (Queue* q : queues)
        if (!q->is_open()) q->drop_restore();
    if (primary_->is_open()) return;
    // The primary's session ended with it, as its close would have ended it: the handshake,
    // and the subchannels.
    ready_ = false;
    srb_seen_ = false;
    primary_closed();
}

void Controller::abort_load() {
    std::vector<Queue*> queues;
    {
        std::lock_guard lock(mu_);
        for (auto& q : channels_) queues.push_back(q.get());
    }
    for (Queue* q : queues) {
        q->drop_restore();
        if (q != primary_) q->set_relid(0); // the bus dropped the offers only the state had
    }
    vmbus::OfferInfo info;
    info.type = class_guid(cfg_.device_class);
    info.instance = instance_;
    info.handler = primary_;
    primary_relid_ = bus_.bind(info);
    primary_->set_relid(primary_relid_);
    ready_ = false;
    srb_seen_ = false;
    if (!before_load_) return;
    reset_answer_ = before_load_->reset_answer;
    subchannels_offered_ = before_load_->subchannels_offered;
    // The queues only the state had: no offer, no channel and no closer refers to them any
    // more (the reset waited for the closes). Each joins its closer as it goes, which may
    // take mu_: they go outside it.
    std::vector<std::unique_ptr<Queue>> added;
    {
        std::lock_guard lock(mu_);
        for (size_t i = before_load_->queues; i < channels_.size(); i++) added.push_back(std::move(channels_[i]));
        channels_.resize(before_load_->queues);
    }
    before_load_.reset();
    added.clear();
}

void Controller::save(state::Writer& w) const {
    w.begin(kTag, kVersion);
    w.boolean(ready_.load());
    w.boolean(srb_seen_.load());
    w.u8(static_cast<uint8_t>(reset_answer_.load()));
    w.u64(subchannels_offered_.load());
    std::lock_guard lock(mu_);
    w.u32(uint32_t(channels_.size()));
    for (const auto& q : channels_) q->save(w);
}

bool Controller::load(state::Reader& r) {
    if (!r.begin(kTag, kVersion, "a storage controller's state")) return false;
    const bool ready = r.boolean("the handshake's end");
    const bool srb_seen = r.boolean("an SRB seen");
    const uint8_t answer = r.u8("the reset answer");
    if (answer > uint8_t(ResetAnswer::Fail)) r.fail("the reset answer", "is not 0..2", answer);
    const uint64_t offered = r.u64("subchannels offered");
    struct One {
        uint32_t relid;
        bool open;
        Queue::Saved saved;
    };
    std::vector<One> queues(r.count("the queue count", uint32_t(max_queues(cfg_)), 7));
    for (size_t i = 0; i < queues.size() && r.ok(); i++) {
        uint16_t index = 0;
        Queue::read_saved(r, cfg_, index, queues[i].relid, queues[i].open, queues[i].saved);
        if (index != i) r.fail("a queue's index", "is out of order", index);
    }
    if (queues.empty() || (r.ok() && !queues[0].relid)) r.fail("the primary channel", "has no relid", 0);
    if (!r.ok()) return false;
    {
        std::lock_guard lock(mu_);
        const bool any_open = std::any_of(channels_.begin(), channels_.end(), [](const auto& q) { return q->is_open() || q->closing(); });
        if (ready_ || any_open) return r.fail("the controller", "is not at power-on (a machine reset comes before a load)", 0), false;
        before_load_ = BeforeLoad{reset_answer_.load(), subchannels_offered_.load(), channels_.size()};
        while (channels_.size() < queues.size()) channels_.push_back(std::make_unique<Queue>(*this, uint16_t(channels_.size())));
    }
    for (size_t i = 0; i < queues.size(); i++) {
        Queue& q = *channels_[i];
        if (!queues[i].relid) {
            q.set_relid(0);
            continue;
        }
        vmbus::OfferInfo info;
        info.type = class_guid(cfg_.device_class);
        info.instance = instance_;
        info.subchannel_index = uint16_t(i);
        info.handler = &q;
        const uint32_t got = bus_.bind(info);
        if (got != queues[i].relid) return r.fail("the saved relid of a queue", "has no offer on this bus; index", i), false;
        q.set_relid(got);
        if (queues[i].open) q.restore_on_open(std::move(queues[i].saved));
    }
    primary_relid_ = channels_[0]->relid();
    session_++;
    ready_ = ready;
    srb_seen_ = srb_seen;
    reset_answer_ = static_cast<ResetAnswer>(answer);
    subchannels_offered_ = offered;
    return true;
}

} // namespace hvstor::storvsp
