#include "queue.h"

#include <algorithm>
#include <cstring>
#include <system_error>
#include <thread>

#include "hvstor/thread.h"
#include "hvstor/trace.h"

namespace hvstor::storvsp {

namespace {

// A completion: descriptor, a 64-byte vstor packet, trailer. The guest's incoming ring
// takes packets of at most 80 bytes (descriptor + packet).
const uint32_t kCompletionBytes = vmbus::OutgoingRing::packet_bytes(sizeof(VstorPacket));
constexpr uint8_t kReportLuns = 0xA0;
constexpr uint8_t kInquiry = 0x12;

bool version_known(uint16_t v) { return v == kVersionWin8 || v == kVersionWin8_1 || v == kVersionWin10; }

} // namespace

Queue::Queue(Controller& ctl, uint16_t index) : ctl_(ctl), index_(index), log_(ctl.host_, ctl.cfg_.name + ": ", &ctl.guest_errors_) {
    const uint32_t n = ctl_.cfg_.max_outstanding_per_channel;
    const size_t max_pages = ctl_.cfg_.max_transfer_bytes / kPageSize + 1;
    pool_.resize(n);
    free_.reserve(n);
    held_resets_.reserve(kMaxHeldResets); // the worker never allocates for them
    for (auto& c : pool_) {
        c.channel = this;
        c.pages.reserve(max_pages);
        c.iov.reserve(max_pages);
        c.gpas.reserve(max_pages);
        c.cmd.opaque = &c;
        c.cmd.queue = index;
        free_.push_back(&c);
    }
    done_.reserve(n);
    done_swap_.reserve(n);
}

void Queue::join_closer() {
    if (closer_.joinable()) closer_.join();
}

Queue::~Queue() {
    join_closer();
    std::shared_ptr<vmbus::ChannelRuntime> rt;
    {
        std::lock_guard lock(mu_);
        rt = std::move(runtime_);
    }
    if (rt) rt->stop();
}

bool Queue::is_open() const {
    std::lock_guard lock(mu_);
    return runtime_ != nullptr;
}

bool Queue::request_notice(Notice n) {
    std::lock_guard lock(mu_);
    if (!runtime_) return false; // the guest scans when it connects
    notices_.fetch_or(1u << unsigned(n));
    runtime_->wake();
    return true;
}

void Queue::notice_may_go() {
    std::lock_guard lock(mu_);
    if (runtime_ && notices_.load()) runtime_->wake();
}

void Queue::wake_for_resets() {
    std::lock_guard lock(mu_);
    if (runtime_) runtime_->wake();
}

void Queue::lun_detached(uint8_t) {
    wake_for_resets(); // its held RESET_LUNs, if any, are answered in the next round
}

uint32_t Queue::on_open(const vmbus::OpenRequest& req) {
    std::lock_guard lock(mu_);
    // A previous session's worker may still be draining: its state (the request pool,
    // outstanding_) is not the new one's to share.
    if (runtime_ || closing_) return vmbus::kStatusUnsuccessful;
    state_ = InitState::Start;
    // What an earlier session or a load that failed left: the one place they are cleared.
    saved_answers_.clear();
    saved_requests_.clear();
    held_resets_.clear();
    resets_held_seen_.store(0, std::memory_order_relaxed);
    if (restore_) {
        // A loaded machine's channel, open before the save: its session goes on. The worker
        // takes the rest up in its first round (resume_saved).
        state_ = static_cast<InitState>(restore_->state);
        held_resets_.assign(restore_->held_resets.begin(), restore_->held_resets.end()); // keeps its reserve
        resets_held_seen_.store(uint32_t(held_resets_.size()), std::memory_order_relaxed);
        saved_answers_ = std::move(restore_->answers);
        saved_requests_ = std::move(restore_->requests);
        if (index_ == 0) notices_ = restore_->notices;
        restore_.reset();
    } else if (index_ == 0) {
        // A new session: no handshake yet (a round of the old one that ran on after its
        // close could have set ready_ again), and its own scan makes any held notice moot.
        ctl_.session_++;
        ctl_.ready_ = false;
        ctl_.srb_seen_ = false;
        notices_ = 0;
    }
    session_ = ctl_.session_.load();
    log_.set_prefix(ctl_.cfg_.name + ": relid " + std::to_string(req.child_relid) + ": ");
    std::string err;
    vmbus::ChannelRuntime::Options opt;
    opt.inline_rounds = ctl_.cfg_.inline_rounds;
    opt.max_packet = max_request_packet(ctl_.cfg_);
    opt.error_budget = &ctl_.guest_errors_;
    const auto& loops = ctl_.cfg_.loops;
    if (!loops.empty()) opt.loop = loops[queue_place(ctl_.cfg_, index_) % loops.size()];
    runtime_ = vmbus::ChannelRuntime::open(ctl_.host_, req, *this, ring_stats_, err, opt);
    if (runtime_) return vmbus::kStatusSuccess;
    log_("OPENCHANNEL refused: %s", err.c_str()); // no worker runs: log_ is this thread's
    return vmbus::kStatusInvalidParameter;
}

void Queue::on_close(uint32_t, vmbus::CloseDone done) {
    std::shared_ptr<vmbus::ChannelRuntime> rt;
    {
        std::lock_guard lock(mu_);
        rt = std::move(runtime_);
        // Only a close that has something to stop waits; the bus closes only open channels.
        if (rt) closing_ = true;
    }
    // Nothing is sent on this channel from now on (completions still owed are dropped
    // when they come); requests on subchannels are refused until the guest opens again.
    if (index_ == 0) {
        ctl_.ready_ = false;
        ctl_.srb_seen_ = false;
    }
    if (rt) rt->request_stop();
    // No reopen before the previous closer finished (closing_), so this joins a thread
    // that has finished or is returning.
    if (closer_.joinable()) closer_.join();
    auto finish = [this, rt, done = std::move(done)] {
        if (rt) rt->stop(); // waits for outstanding commands; takes no VMM lock
        // A save sees the rest whole or not at all: it may run now, with the VM stopped.
        RunGate::Change change(ctl_.host_.run_gate());
        if (index_ == 0) ctl_.primary_closed();
        closing_ = false;
        done();
    };
    try {
        closer_ = start_thread("hvstor-close", finish);
    } catch (const std::system_error&) {
        finish(); // no thread to spare: finish here, as slow as the outstanding I/O
    }
}

void Queue::on_guest_signal(uint32_t) {
    // Not under mu_: the signal may run a round here, whose commands may complete at once
    // (done() takes mu_). The reference keeps the runtime alive if a close takes it now.
    std::shared_ptr<vmbus::ChannelRuntime> rt;
    {
        std::lock_guard lock(mu_);
        rt = runtime_;
    }
    if (rt) rt->notify_guest_signal();
}

void Queue::on_target_vp(uint32_t, uint32_t vp) {
    std::lock_guard lock(mu_);
    if (runtime_) runtime_->set_target_vp(vp);
}

// The worker takes the whole list at each wake-up, so only the completion that finds the
// list empty needs to wake it: one eventfd write per batch of completions, not per I/O.
void Queue::done(IoContext* ctx) {
    bool first;
    {
        std::lock_guard lock(done_mu_);
        first = done_.empty();
        done_.push_back(ctx);
    }
    done_cv_.notify_one();
    if (!first) return;
    // Not under mu_: the completion may run a round on this thread (see on_guest_signal).
    std::shared_ptr<vmbus::ChannelRuntime> rt;
    {
        std::lock_guard lock(mu_);
        rt = runtime_;
    }
    if (rt) rt->notify_completion();
}

void Queue::on_wake(vmbus::ChannelRuntime& ch) {
    if (!saved_answers_.empty() || !saved_requests_.empty()) resume_saved(ch);
    {
        std::lock_guard lock(done_mu_);
        done_swap_.swap(done_);
    }
    // Completions still owed from an earlier round go first, in order.
    size_t sent = 0;
    while (sent < unsent_.size() && send_completion(ch, *unsent_[sent])) finish(unsent_[sent++]);
    unsent_.erase(unsent_.begin(), unsent_.begin() + std::ptrdiff_t(sent));
    for (IoContext* ctx : done_swap_) complete(ch, ctx);
    done_swap_.clear();
    answer_held_resets(ch);
    send_notices(ch);
}

// A notice waits until the guest can take it (its first SRB after the handshake: before
// that, Linux would queue the notice's work on a workqueue it has not created yet), and must
// not take the room of an answer owed: room for all of them, plus itself.
void Queue::send_notices(vmbus::ChannelRuntime& ch) {
    if (!notices_.load() || !ctl_.srb_seen_.load()) return;
    for (const Notice n : {Notice::EnumerateBus, Notice::RemoveDevice}) {
        const uint32_t bit = 1u << unsigned(n);
        if (!(notices_.load() & bit)) continue;
        if (!ch.reserve_out((owed() + 1) * kCompletionBytes)) return;
        // Cleared before it is sent: a request that comes meanwhile sends another.
        notices_.fetch_and(~bit);
        VstorPacket p{};
        const bool enumerate = n == Notice::EnumerateBus;
        p.operation = static_cast<uint32_t>(enumerate ? Operation::EnumerateBus : Operation::RemoveDevice);
        if (!ch.send(vmbus::PacketType::DataInband, 0, 0,
                     std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(&p), sizeof p))) {
            notices_.fetch_or(bit);
            return;
        }
        if (enumerate) {
            enumerate_sent_.inc();
            trace<HVSTOR_TRACE_storvsp_enumerate>(ch.relid());
        } else {
            remove_device_sent_.inc();
            trace<HVSTOR_TRACE_storvsp_remove_device>(ch.relid());
        }
    }
}

// Resets held under ResetAnswer::Ignore: answered once the setting is another (as it says),
// and a RESET_LUN whose LUN was detached (with success: there is nothing left to reset).
void Queue::answer_held_resets(vmbus::ChannelRuntime& ch) {
    if (held_resets_.empty()) return;
    const ResetAnswer a = ctl_.reset_answer_.load();
    size_t kept = 0;
    for (HeldReset& h : held_resets_) {
        const VmscsiRequest& srb = h.packet.srb;
        // Asked of the controller now, not remembered: a detach between two rounds, or one
        // before the reset arrived, is seen all the same.
        const bool lun_gone = static_cast<Operation>(h.packet.operation) == Operation::ResetLun &&
                              !ctl_.lookup(srb.path_id, srb.target_id, srb.lun);
        if (a == ResetAnswer::Ignore && !lun_gone) {
            held_resets_[kept++] = h;
            continue;
        }
        const bool fail = a == ResetAnswer::Fail && !lun_gone;
        answer_control(ch, h.trans_id, h.packet, h.len, fail ? kStatusUnsuccessful : kStatusSuccess);
    }
    held_resets_.resize(kept);
    resets_held_seen_.store(uint32_t(kept), std::memory_order_relaxed);
}

bool Queue::may_run_inline(vmbus::ChannelRuntime&) {
    // Once the primary finished the handshake (subchannels have none of their own), and
    // while every attached disk's submits return without waiting.
    // Not while requests carried in a loaded state wait to be executed again: all of them go
    // in one batch, more than an inline round may take.
    return ctl_.cfg_.inline_rounds && ctl_.ready_.load() && ctl_.blocking_disks_.load() == 0 &&
           saved_requests_.empty();
}

bool Queue::takes_inline(const vmbus::PacketDescriptor& d, std::span<const uint8_t> pkt) {
    // SRBs only: control operations (resets, CREATE_SUB_CHANNELS with its allocations and
    // offers) and malformed packets go to the worker.
    const uint32_t off = uint32_t(d.offset8) * 8;
    uint32_t op = 0;
    if ((d.type != uint16_t(vmbus::PacketType::DataInband) && d.type != uint16_t(vmbus::PacketType::DataUsingGpaDirect)) ||
        off > pkt.size() || pkt.size() - off < kVstorPacketMin)
        return false;
    std::memcpy(&op, pkt.data() + off, sizeof op);
    return static_cast<Operation>(op) == Operation::ExecuteSrb;
}

bool Queue::can_accept(vmbus::ChannelRuntime& ch) {
    // Completions held back go out before anything new is taken; the guest signals once
    // they fit.
    if (!unsent_.empty()) {
        ch.reserve_out(uint32_t(unsent_.size()) * kCompletionBytes);
        return false;
    }
    if (free_.empty()) {
        if (!pool_exhausted_) { // counted once per episode, not per look at the ring
            pool_exhausted_ = true;
            busy_.inc();
            trace<HVSTOR_TRACE_storvsp_srb_busy>(ch.relid(), outstanding_);
        }
        return false;
    }
    // Never take a request whose completion might not fit: room for every completion
    // (and held reset's answer) still owed, plus this one.
    return ch.reserve_out((owed() + 1) * kCompletionBytes);
}

void Queue::on_stop(vmbus::ChannelRuntime&) {
    // Every command taken from the ring completes; wait for them, then let go of the
    // guest's pages. The guest closed the channel, so nothing more is sent.
    std::unique_lock lock(done_mu_);
    done_cv_.wait(lock, [&] { return done_.size() + unsent_.size() == outstanding_; });
    for (IoContext* ctx : done_) release(ctx);
    for (IoContext* ctx : unsent_) release(ctx);
    done_.clear();
    unsent_.clear();
    outstanding_ = 0;
    // Held resets go unanswered: the guest closed the channel, as for completions owed.
    held_resets_.clear();
    resets_held_seen_.store(0, std::memory_order_relaxed);
    outstanding_seen_.store(0, std::memory_order_relaxed);
    state_ = InitState::Start;
}

bool Queue::reply(vmbus::ChannelRuntime& ch, uint64_t trans_id, const VstorPacket& p, uint32_t len) {
    // Space was reserved in can_accept(); only a guest that moved its read index back, or
    // broke its ring, makes this fail.
    return ch.send(vmbus::PacketType::Completion, 0, trans_id,
            std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(&p), len));
}

void Queue::on_packet(vmbus::ChannelRuntime& ch, const vmbus::PacketDescriptor& d, std::span<const uint8_t> pkt) {
    // The ring checked d against the packet; check again here so that this function is
    // safe on its own: an offset past the end leaves no payload, never a wrapped length.
    const uint32_t off = uint32_t(d.offset8) * 8;
    const uint32_t avail = off <= pkt.size() ? uint32_t(pkt.size()) - off : 0;
    VstorPacket p{};
    if ((d.type != uint16_t(vmbus::PacketType::DataInband) &&
         d.type != uint16_t(vmbus::PacketType::DataUsingGpaDirect)) ||
        avail < kVstorPacketMin) {
        // Not a storage request at all. Answer what can be answered, so a guest waiting
        // on this transaction id is not left hanging.
        bad_packets_.inc();
        log_("packet type %u with %u payload bytes: not a storage request (want type 6 or 9, at least %u bytes)",
             unsigned(d.type), avail, unsigned(kVstorPacketMin));
        p.operation = static_cast<uint32_t>(Operation::CompleteIo);
        p.status = kStatusInvalidParameter;
        reply(ch, d.trans_id, p, sizeof p);
        return;
    }
    const uint32_t len = std::min<uint32_t>(avail, sizeof p);
    std::memcpy(&p, pkt.data() + off, len);
    if (static_cast<Operation>(p.operation) == Operation::ExecuteSrb) execute_srb(ch, d, pkt, p, len);
    else control(ch, d.trans_id, p, len);
}

void Queue::control(vmbus::ChannelRuntime& ch, uint64_t trans_id, VstorPacket& p, uint32_t len) {
    const auto op = static_cast<Operation>(p.operation);
    uint32_t status = kStatusSuccess;
    const bool primary = index_ == 0;
    const char* why = "out of order (handshake state)";
    switch (op) {
    case Operation::BeginInitialization:
        if (primary) {
            state_ = InitState::Initializing;
            ctl_.ready_ = false;
            ctl_.srb_seen_ = false;
        } else {
            status = kStatusInvalidDeviceState;
        }
        break;
    case Operation::QueryProtocolVersion:
        if (!primary || state_ == InitState::Start) status = kStatusInvalidDeviceState;
        else if (!version_known(p.version.major_minor) || p.version.major_minor > ctl_.cfg_.max_protocol_version) {
            // Linux tries versions newest first: a mismatch is the handshake, not an error.
            return answer_control(ch, trans_id, p, len, kStatusRevisionMismatch);
        }
        else state_ = InitState::VersionAgreed;
        break;
    case Operation::QueryProperties:
        if (!primary || (state_ != InitState::VersionAgreed && state_ != InitState::Ready)) {
            status = kStatusInvalidDeviceState;
            break;
        }
        std::memset(p.raw, 0, sizeof p.raw);
        p.properties.max_channel_count = ctl_.cfg_.max_subchannels;
        p.properties.flags = ctl_.cfg_.max_subchannels ? kFlagMultiChannel : 0;
        p.properties.max_transfer_bytes = ctl_.cfg_.max_transfer_bytes;
        break;
    case Operation::EndInitialization:
        if (primary && (state_ == InitState::VersionAgreed || state_ == InitState::Ready)) {
            state_ = InitState::Ready;
            ctl_.ready_ = true;
        } else {
            status = kStatusInvalidDeviceState;
        }
        break;
    case Operation::CreateSubChannels: {
        const uint16_t n = p.sub_channel_count;
        if (!primary || state_ != InitState::Ready) status = kStatusInvalidDeviceState;
        else if (n == 0 || n > ctl_.cfg_.max_subchannels) {
            status = kStatusInvalidParameter;
            log_("CREATE_SUB_CHANNELS sub_channel_count %u (want 1..%u)", unsigned(n),
                 unsigned(ctl_.cfg_.max_subchannels));
            why = nullptr;
        }
        if (status != kStatusSuccess) break;
        answer_control(ch, trans_id, p, len, kStatusSuccess);
        // Offers go out after the answer; the guest installed its subchannel callback
        // before asking.
        if (const uint16_t got = ctl_.create_subchannels(n); got < n)
            log_("CREATE_SUB_CHANNELS sub_channel_count %u: %u offered (the rest still open, still finishing "
                 "the requests of an earlier close, or no relid left)",
                 unsigned(n), unsigned(got));
        return;
    }
    case Operation::ResetLun:
    case Operation::ResetBus:
    case Operation::ResetAdapter:
        return reset(ch, trans_id, p, len);
    case Operation::FcHbaData:
        status = fc_hba_data(p, why);
        break;
    default:
        status = kStatusInvalidDeviceRequest;
        why = "unknown operation";
        break;
    }
    if (status != kStatusSuccess) {
        bad_packets_.inc();
        if (why)
            log_("%s operation %u: %s", primary ? "primary" : "subchannel", unsigned(p.operation), why);
    }
    answer_control(ch, trans_id, p, len, status);
}

// An FC HBA's names, asked for between QUERY_PROPERTIES and END_INITIALIZATION. Other
// classes refuse it as an unknown operation.
uint32_t Queue::fc_hba_data(VstorPacket& p, const char*& why) const {
    const DeviceClass cls = ctl_.cfg_.device_class;
    if (cls != DeviceClass::Fc) {
        why = cls == DeviceClass::Ide ? "FCHBA_DATA on a class=ide controller (only class=fc has WWNs)"
                                      : "FCHBA_DATA on a class=scsi controller (only class=fc has WWNs)";
        return kStatusInvalidDeviceRequest;
    }
    if (index_ != 0 || (state_ != InitState::VersionAgreed && state_ != InitState::Ready))
        return kStatusInvalidDeviceState;
    FcWwnPacket& w = p.wwn;
    std::memset(p.raw, 0, sizeof p.raw);
    w.primary_active = 1;
    for (int i = 0; i < 8; i++) {
        w.primary_port_wwn[i] = uint8_t(ctl_.cfg_.port_wwn >> (56 - 8 * i));
        w.primary_node_wwn[i] = uint8_t(ctl_.cfg_.node_wwn >> (56 - 8 * i));
    }
    // No standby port: the secondary pair repeats the primary, so a guest that reads
    // either finds the same names.
    std::memcpy(w.secondary_port_wwn, w.primary_port_wwn, 8);
    std::memcpy(w.secondary_node_wwn, w.primary_node_wwn, 8);
    return kStatusSuccess;
}

// RESET_LUN, RESET_BUS, RESET_ADAPTER: counted, then answered as the controller's
// ResetAnswer says. Requests already taken still complete normally.
void Queue::reset(vmbus::ChannelRuntime& ch, uint64_t trans_id, VstorPacket& p, uint32_t len) {
    const auto op = static_cast<Operation>(p.operation);
    (op == Operation::ResetLun ? reset_lun_ : op == Operation::ResetBus ? reset_bus_ : reset_adapter_).inc();
    switch (ctl_.reset_answer_.load()) {
    case ResetAnswer::Answer:
        return answer_control(ch, trans_id, p, len, kStatusSuccess);
    case ResetAnswer::Fail:
        return answer_control(ch, trans_id, p, len, kStatusUnsuccessful);
    case ResetAnswer::Ignore:
        // A RESET_LUN of a LUN that is not there has nothing to wait for.
        if (op == Operation::ResetLun && !ctl_.lookup(p.srb.path_id, p.srb.target_id, p.srb.lun))
            return answer_control(ch, trans_id, p, len, kStatusSuccess);
        break;
    }
    if (held_resets_.size() >= kMaxHeldResets) {
        log_("operation %u: %zu resets are held already (at most %zu under reset=ignore); answered 0x%x",
             unsigned(p.operation), held_resets_.size(), kMaxHeldResets, kStatusInvalidDeviceState);
        return answer_control(ch, trans_id, p, len, kStatusInvalidDeviceState);
    }
    // The room of its answer was kept when the packet was taken (can_accept), and stays
    // kept while it is held (owed()).
    held_resets_.push_back({trans_id, p, len});
    resets_held_seen_.store(uint32_t(held_resets_.size()), std::memory_order_relaxed);
    trace<HVSTOR_TRACE_storvsp_reset_held>(ch.relid(), p.operation);
}

void Queue::answer_control(vmbus::ChannelRuntime& ch, uint64_t trans_id, VstorPacket& p, uint32_t len,
                           uint32_t status) {
    trace<HVSTOR_TRACE_storvsp_control>(ch.relid(), p.operation, status);
    p.operation = static_cast<uint32_t>(Operation::CompleteIo);
    p.status = status;
    reply(ch, trans_id, p, len);
}

bool Queue::map_gpa_ranges(IoContext& ctx, std::span<const uint8_t> pkt, uint32_t payload_off, uint32_t bytes) {
    // GPA-direct layout after the descriptor: u32 reserved, u32 range count, then ranges
    // of {u32 byte_count, u32 byte_offset, u64 pfn[]}, all before the payload.
    constexpr uint32_t kHdr = sizeof(vmbus::PacketDescriptor);
    if (payload_off < kHdr + 8 + 8) {
        log_("SRB GPA-direct payload offset %u leaves no room for a range", payload_off);
        return false;
    }
    uint32_t nranges;
    std::memcpy(&nranges, pkt.data() + kHdr + 4, 4);
    if (nranges == 0) {
        log_("SRB GPA-direct range count 0 for %u bytes", bytes);
        return false;
    }
    uint32_t pos = kHdr + 8;
    uint32_t left = bytes;
    for (uint32_t r = 0; r < nranges && left; r++) {
        if (pos + 8 > payload_off) {
            log_("SRB GPA-direct range %u of %u lies past the payload offset %u", r, nranges, payload_off);
            return false;
        }
        uint32_t count, offset;
        std::memcpy(&count, pkt.data() + pos, 4);
        std::memcpy(&offset, pkt.data() + pos + 4, 4);
        pos += 8;
        if (offset >= kPageSize) {
            log_("SRB GPA-direct range %u byte_offset %u >= 4096", r, offset);
            return false;
        }
        const uint64_t npfns = (uint64_t(offset) + count + kPageSize - 1) / kPageSize;
        if (npfns > (payload_off - pos) / 8) {
            log_("SRB GPA-direct range %u byte_count %u needs %llu pfns, the packet holds %u", r, count,
                 static_cast<unsigned long long>(npfns), (payload_off - pos) / 8);
            return false;
        }
        uint32_t in_page = offset, range_left = count;
        for (uint64_t i = 0; i < npfns && left && range_left; i++) {
            uint64_t pfn;
            std::memcpy(&pfn, pkt.data() + pos + i * 8, 8);
            const uint32_t n = std::min({kPageSize - in_page, left, range_left});
            if (ctx.pages.size() == ctx.pages.capacity()) {
                log_("SRB GPA-direct ranges split %u bytes into more than %zu pieces", bytes, ctx.pages.capacity());
                return false;
            }
            void* host = pfn < (1ull << 52) ? ctl_.host_.map(pfn * kPageSize + in_page, n, ctx.writes_guest) : nullptr;
            if (!host) {
                log_("SRB GPA-direct pfn 0x%llx is not guest RAM", static_cast<unsigned long long>(pfn));
                return false;
            }
            ctx.pages.push_back({host, n});
            ctx.gpas.push_back(pfn * kPageSize + in_page);
            // Guest pages that are contiguous on the host become one iovec.
            if (!ctx.iov.empty() &&
                static_cast<uint8_t*>(ctx.iov.back().iov_base) + ctx.iov.back().iov_len == host)
                ctx.iov.back().iov_len += n;
            else
                ctx.iov.push_back({host, n});
            left -= n;
            range_left -= n;
            in_page = 0;
        }
        pos += uint32_t(npfns * 8);
    }
    if (left) log_("SRB GPA-direct ranges cover %u of data_transfer_length %u bytes", bytes - left, bytes);
    return left == 0;
}

bool Queue::map_data(IoContext& ctx, const vmbus::PacketDescriptor& d, std::span<const uint8_t> pkt, uint32_t bytes) {
    if (bytes > ctl_.cfg_.max_transfer_bytes) {
        log_("SRB data_transfer_length %u > max-transfer %u", bytes, ctl_.cfg_.max_transfer_bytes);
        return false;
    }
    if (d.type != uint16_t(vmbus::PacketType::DataUsingGpaDirect)) {
        log_("SRB with data in a packet of type %u (data needs GPA direct, type 9)", unsigned(d.type));
        return false;
    }
    if (bytes && !map_gpa_ranges(ctx, pkt, uint32_t(d.offset8) * 8, bytes)) return false;
    scsi::Command& c = ctx.cmd;
    c.iov = ctx.iov.data();
    c.iovcnt = uint32_t(ctx.iov.size());
    c.xfer_len = bytes;
    return true;
}

void Queue::unmap(IoContext& ctx) {
    for (const iovec& v : ctx.pages) ctl_.host_.unmap(v.iov_base, v.iov_len, ctx.writes_guest);
    ctx.pages.clear();
    ctx.gpas.clear();
    ctx.iov.clear();
}

void Queue::execute_srb(vmbus::ChannelRuntime& ch, const vmbus::PacketDescriptor& d, std::span<const uint8_t> pkt,
                              const VstorPacket& p, uint32_t len) {
    srbs_.inc();
    trace<HVSTOR_TRACE_storvsp_srb_submit>(ch.relid(), d.trans_id, p.srb.lun, p.srb.cdb_or_sense[0],
                                           p.srb.data_transfer_length);
    if (!ctl_.ready_) {
        // Requests before the handshake finished.
        VstorPacket r = p;
        r.operation = static_cast<uint32_t>(Operation::CompleteIo);
        r.status = kStatusInvalidDeviceState;
        bad_packets_.inc();
        log_("SRB before the handshake finished (END_INITIALIZATION)");
        reply(ch, d.trans_id, r, len);
        return;
    }
    if (!ctl_.srb_seen_.load(std::memory_order_relaxed)) note_first_srb();
    IoContext* ctx = free_.back();
    free_.pop_back();
    outstanding_++;
    count_outstanding();
    ctx->trans_id = d.trans_id;
    ctx->req = p;
    ctx->req_len = len;
    ctx->srb_override = 0;
    scsi::Command& c = ctx->cmd;
    c.status = scsi::kStatusGood;
    c.sense_len = 0;
    c.data_transferred = 0;
    c.iov = nullptr;
    c.iovcnt = 0;
    c.xfer_len = 0;
    c.transport = {};

    const VmscsiRequest& srb = p.srb;
    const uint8_t data_in = srb.data_in;
    if (srb.cdb_length == 0 || srb.cdb_length > 16 || data_in > kDataNone) {
        if (data_in > kDataNone) log_("SRB data_in %u (want 0..2)", unsigned(data_in));
        else log_("SRB cdb_length %u (want 1..16)", unsigned(srb.cdb_length));
        ctx->srb_override = kSrbInvalidRequest;
        return complete(ch, ctx);
    }
    c.cdb_len = srb.cdb_length;
    c.cdb.fill(0);
    std::memcpy(c.cdb.data(), srb.cdb_or_sense, srb.cdb_length);
    // data_in is the truth: 6.1 can leave a stale range on a command without data.
    c.dir = data_in == kDataRead ? scsi::Dir::FromDevice : data_in == kDataWrite ? scsi::Dir::ToDevice : scsi::Dir::None;
    ctx->writes_guest = c.dir == scsi::Dir::FromDevice;
    if (c.dir != scsi::Dir::None && !map_data(*ctx, d, pkt, srb.data_transfer_length)) {
        unmap(*ctx);
        ctx->srb_override = kSrbInvalidRequest;
        return complete(ch, ctx);
    }

    if (c.cdb[0] == kReportLuns) {
        if (ctl_.addresses(srb.path_id, srb.target_id)) scsi::answer_report_luns(c, ctl_.luns());
        else scsi::answer_report_luns(c, {});
        return complete(ch, ctx);
    }
    if (!in_batch_) {
        batch_seq_.fetch_add(1, std::memory_order_seq_cst); // odd: disks may be held
        in_batch_ = true;
    }
    scsi::Disk* disk = ctl_.lookup(srb.path_id, srb.target_id, srb.lun);
    if (!disk) {
        scsi::answer_absent_lun(c);
        // INQUIRY answers with "no device here"; anything else tells the guest the LUN
        // is gone, and it removes it.
        if (c.cdb[0] != kInquiry) ctx->srb_override = kSrbInvalidLun;
        return complete(ch, ctx);
    }
    for (auto& [dk, cmds] : batch_) {
        if (dk == disk) {
            cmds.push_back(&c);
            return;
        }
    }
    batch_.push_back({disk, {&c}});
}

void Queue::note_first_srb() {
    if (session_ != ctl_.session_.load() || ctl_.srb_seen_.exchange(true)) return;
    // A reopen between the check and the exchange (open: session_, then srb_seen_) is seen
    // here: the flag is the new session's to set.
    if (session_ == ctl_.session_.load()) ctl_.primary_->notice_may_go();
    else ctl_.srb_seen_ = false;
}

void Queue::on_batch_end(vmbus::ChannelRuntime&) {
    // Entries stay, with their capacity, so batches allocate nothing once warm. A disk
    // pointer is only used while its entry holds commands taken in this batch.
    for (auto& [disk, cmds] : batch_) {
        if (!cmds.empty()) disk->submit(cmds);
        cmds.clear();
    }
    if (in_batch_) {
        batch_seq_.fetch_add(1, std::memory_order_release); // even: no disk held
        in_batch_ = false;
    }
}

void Queue::wait_batch_boundary() const {
    const uint64_t seq = batch_seq_.load(std::memory_order_seq_cst);
    if (!(seq & 1)) return;
    // A batch is short (parsing and non-blocking submits): yield until it has moved on.
    while (batch_seq_.load(std::memory_order_acquire) == seq) std::this_thread::yield();
}

void Queue::release(IoContext* ctx) {
    unmap(*ctx);
    free_.push_back(ctx);
    pool_exhausted_ = false;
}

namespace {

// A fault's answer (scsi::TransportAnswer) in place of what the command's status implies.
void apply_transport(const scsi::TransportAnswer& t, uint32_t moved, VstorPacket& r) {
    if (t.op) r.status = t.op_status;
    if (!t.srb) return;
    VmscsiRequest& srb = r.srb;
    srb.srb_status = t.srb_status;
    srb.scsi_status = t.scsi_status;
    std::memset(srb.cdb_or_sense, 0, kSenseBytes);
    const auto n = uint8_t(std::min<size_t>({t.sense_len, kSenseBytes, t.sense.size()}));
    std::memcpy(srb.cdb_or_sense, t.sense.data(), n);
    srb.sense_info_length = n;
    srb.data_transfer_length = t.data_as_moved ? moved : t.data_length;
}

} // namespace

VstorPacket Queue::completion(const IoContext& ctx) const {
    const scsi::Command& c = ctx.cmd;
    VstorPacket r = ctx.req;
    r.operation = static_cast<uint32_t>(Operation::CompleteIo);
    r.flags = 0;
    r.status = kStatusSuccess;
    VmscsiRequest& srb = r.srb;
    srb.scsi_status = c.status;
    srb.sense_info_length = 0;
    srb.data_transfer_length = c.data_transferred;
    if (ctx.srb_override) {
        srb.srb_status = ctx.srb_override;
        if (ctx.srb_override != kSrbInvalidLun) srb.scsi_status = 0;
        srb.data_transfer_length = 0;
    } else if (c.status == scsi::kStatusGood) {
        srb.srb_status = kSrbSuccess;
    } else {
        srb.srb_status = kSrbError;
        if (c.status == scsi::kStatusCheckCondition && c.sense_len) {
            const uint8_t n = std::min<uint8_t>(c.sense_len, kSenseBytes);
            std::memset(srb.cdb_or_sense, 0, kSenseBytes);
            std::memcpy(srb.cdb_or_sense, c.sense.data(), n);
            srb.sense_info_length = n;
            srb.srb_status |= kSrbAutosenseValid;
        }
    }
    apply_transport(c.transport, c.data_transferred, r);
    return r;
}

bool Queue::send_completion(vmbus::ChannelRuntime& ch, const IoContext& ctx) {
    const VstorPacket r = completion(ctx);
    const VmscsiRequest& srb = r.srb;
    if (!reply(ch, ctx.trans_id, r, ctx.req_len)) return false;
    completions_.inc();
    if (srb.srb_status != kSrbSuccess) srb_errors_.inc();
    trace<HVSTOR_TRACE_storvsp_srb_complete>(ch.relid(), ctx.trans_id, srb.srb_status, srb.scsi_status,
                                             srb.data_transfer_length);
    return true;
}

void Queue::complete(vmbus::ChannelRuntime& ch, IoContext* ctx) {
    // Once one completion is held back, later ones wait behind it: the guest sees them
    // in the order the commands finished.
    if (!unsent_.empty() || !send_completion(ch, *ctx)) {
        unsent_.push_back(ctx);
        return;
    }
    finish(ctx);
}

void Queue::finish(IoContext* ctx) {
    outstanding_--;
    outstanding_seen_.store(outstanding_, std::memory_order_relaxed);
    release(ctx);
}

void Queue::count_outstanding() {
    outstanding_seen_.store(outstanding_, std::memory_order_relaxed);
    if (outstanding_ > max_outstanding_.load(std::memory_order_relaxed))
        max_outstanding_.store(outstanding_, std::memory_order_relaxed);
}

ChannelStatsSnapshot Queue::stats() const {
    ChannelStatsSnapshot s;
    s.index = index_;
    s.relid = relid();
    s.open = is_open();
    s.packets_in = ring_stats_.packets_in.load(std::memory_order_relaxed);
    s.packets_out = ring_stats_.packets_out.load(std::memory_order_relaxed);
    s.guest_signals = ring_stats_.guest_signals.load(std::memory_order_relaxed);
    s.interrupts = ring_stats_.host_signals.load(std::memory_order_relaxed);
    s.wakeups = ring_stats_.wakeups.load(std::memory_order_relaxed);
    s.inline_rounds = ring_stats_.inline_rounds.load(std::memory_order_relaxed);
    s.ring_full_waits = ring_stats_.ring_full_waits.load(std::memory_order_relaxed);
    s.srbs = srbs_.read();
    s.completions = completions_.read();
    s.srb_errors = srb_errors_.read();
    s.bad_packets = bad_packets_.read();
    s.busy = busy_.read();
    s.outstanding = outstanding_seen_.load(std::memory_order_relaxed);
    s.max_outstanding = max_outstanding_.load(std::memory_order_relaxed);
    s.reset_lun = reset_lun_.read();
    s.reset_bus = reset_bus_.read();
    s.reset_adapter = reset_adapter_.read();
    s.resets_held = resets_held_seen_.load(std::memory_order_relaxed);
    s.enumerate_bus_sent = enumerate_sent_.read();
    s.remove_device_sent = remove_device_sent_.read();
    return s;
}

} // namespace hvstor::storvsp
