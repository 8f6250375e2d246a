#include "hvstor/vmbus/server.h"

#include <algorithm>
#include <chrono>
#include <cstdarg>
#include <cstring>

#include "hvstor/trace.h"

namespace hvstor::vmbus {

using hv::Status;

namespace {

template <typename T> bool parse(std::span<const uint8_t> m, T& out) {
    if (m.size() < sizeof(T)) return false;
    std::memcpy(&out, m.data(), sizeof(T));
    return true;
}

MsgHeader header(MsgType t) { return MsgHeader{static_cast<uint32_t>(t), 0}; }

bool known_version(uint32_t v) {
    return std::find(std::begin(version::kAll), std::end(version::kAll), v) != std::end(version::kAll);
}


} // namespace

bool Gpadl::complete() const {
    return range_data.size() == expected_pfns + range_count;
}

Server::Server(hv::Synic& synic, const ServerConfig& cfg)
    : synic_(synic), cfg_(cfg), log_(synic.host(), "vmbus: ") {}

void Server::bad(const char* fmt, ...) {
    stats_.bad_messages++;
    va_list ap;
    va_start(ap, fmt);
    log_.vlog(fmt, ap);
    va_end(ap);
}

uint32_t Server::offer(const OfferInfo& offer) {
    Outbox out;
    uint32_t relid;
    {
        std::lock_guard lock(mu_);
        // Reuse relids the guest released; otherwise the next one.
        auto slot = std::find(offers_.begin(), offers_.end(), nullptr);
        if (slot == offers_.end()) {
            if (offers_.size() >= kMaxRelid) {
                // Rescinded offers keep their relid until the guest sends RELID_RELEASED, as
                // on Hyper-V: a guest that never does runs out of them, and only itself.
                const auto held = std::count_if(offers_.begin(), offers_.end(), [](const auto& o) {
                    return o && o->rescinded;
                });
                log_("no relid left for a new offer: %u in use, %ld of them rescinded and not released by the guest",
                     kMaxRelid, long(held));
                return 0;
            }
            slot = offers_.insert(offers_.end(), nullptr);
        }
        auto ch = std::make_unique<Offer>();
        ch->info = offer;
        ch->relid = relid = static_cast<uint32_t>(slot - offers_.begin() + 1);
        if (offers_requested_) {
            queue(out, make_offer(*ch));
            ch->offered = true;
        }
        *slot = std::move(ch);
        sending_locked(out);
    }
    trace<HVSTOR_TRACE_vmbus_offer>(relid, offer.subchannel_index);
    flush(out);
    return relid;
}

Server::Offer* Server::find(uint32_t relid) {
    if (relid == 0 || relid > offers_.size()) return nullptr;
    Offer* ch = offers_[relid - 1].get();
    return ch && !ch->rescinded ? ch : nullptr;
}

bool Server::rescind(uint32_t relid) {
    Outbox out;
    {
        std::lock_guard lock(mu_);
        Offer* ch = find(relid);
        if (!ch) return false;
        trace<HVSTOR_TRACE_vmbus_rescind>(relid);
        close_locked(*ch);
        if (version_ != 0 && ch->offered) {
            RescindOffer r{};
            r.hdr = header(MsgType::RescindChannelOffer);
            r.child_relid = relid;
            queue(out, r);
            ch->rescinded = true; // the slot is freed by RELID_RELEASED
        } else {
            offers_[relid - 1].reset();
        }
        sending_locked(out);
    }
    flush(out); // first: nothing may come between the count and the post (see flush)
    run_closes();
    return true;
}

void Server::close_locked(Offer& ch) {
    if (ch.open) trace<HVSTOR_TRACE_vmbus_close>(ch.relid);
    if (ch.open && ch.info.handler) {
        const uint64_t token = ++next_close_token_;
        closes_[token] = {ch.info.handler, ch.relid, ch.ring_gpadl};
        closing_.push_back(token);
        ch.closing = true;
        ch.close_token = token;
        closes_in_progress_++;
    }
    ch.open = false;
}

// Handlers start their close in on_close and finish it whenever their outstanding work
// allows (close_done). on_close is never called with our lock held, so a worker blocked on
// it (offering subchannels, say) cannot deadlock the close, and a slow device never holds
// up the vCPU that sent CLOSECHANNEL.
void Server::run_closes() {
    std::vector<std::pair<Closing, uint64_t>> todo;
    {
        std::lock_guard lock(mu_);
        for (uint64_t token : closing_) todo.push_back({closes_.at(token), token});
        closing_.clear();
    }
    for (auto& [c, token] : todo) c.handler->on_close(c.relid, [this, token = token] { close_done(token); });
}

void Server::close_done(uint64_t token) {
    Outbox out;
    {
        std::lock_guard lock(mu_);
        auto it = closes_.find(token);
        if (it == closes_.end()) return; // a CloseDone called twice: ignored
        const Closing c = it->second;
        closes_.erase(it);
        // The offer may be gone (rescinded and released) or reused by another device.
        if (c.relid <= offers_.size() && offers_[c.relid - 1] && offers_[c.relid - 1]->close_token == token)
            offers_[c.relid - 1]->closing = false;
        // Its ring GPADL, if the guest has torn it down meanwhile.
        auto held = std::find(held_torndown_.begin(), held_torndown_.end(), c.ring_gpadl);
        auto g = gpadls_.find(c.ring_gpadl);
        if (held != held_torndown_.end() && g != gpadls_.end() && g->second.child_relid == c.relid) {
            GpadlTorndown r{};
            r.hdr = header(MsgType::GpadlTorndown);
            r.gpadl = c.ring_gpadl;
            queue(out, r);
            held_torndown_.erase(held);
            gpadls_.erase(g);
        }
        if (--closes_in_progress_ == 0) {
            if (unload_owed_) queue(out, header(MsgType::UnloadResponse));
            unload_owed_ = false;
            closes_cv_.notify_all();
        }
        sending_locked(out);
    }
    flush(out);
}

bool Server::backs_live_rings(const Gpadl& g) const {
    const Offer* ch = g.child_relid && g.child_relid <= offers_.size() ? offers_[g.child_relid - 1].get() : nullptr;
    if (ch && ch->open && ch->ring_gpadl == g.id) return true;
    // A close still running, also of an offer the guest has released since (its slot gone).
    return std::any_of(closes_.begin(), closes_.end(), [&](const auto& c) {
        return c.second.relid == g.child_relid && c.second.ring_gpadl == g.id;
    });
}

bool Server::connected() const {
    std::lock_guard lock(mu_);
    return version_ != 0;
}
uint32_t Server::negotiated_version() const {
    std::lock_guard lock(mu_);
    return version_;
}
uint32_t Server::target_vp() const {
    std::lock_guard lock(mu_);
    return target_vp_;
}
uint8_t Server::message_sint() const {
    std::lock_guard lock(mu_);
    return sint_;
}
size_t Server::gpadl_count() const {
    std::lock_guard lock(mu_);
    return gpadls_.size();
}
bool Server::channel_open(uint32_t relid) const {
    std::lock_guard lock(mu_);
    return relid && relid <= offers_.size() && offers_[relid - 1] && offers_[relid - 1]->open;
}
ServerStats Server::stats() const {
    std::lock_guard lock(mu_);
    ServerStats s = stats_;
    for (const auto& ch : offers_) {
        if (!ch || ch->rescinded) continue;
        s.offers++;
        s.open_channels += ch->open;
    }
    s.gpadls = uint32_t(gpadls_.size());
    s.version = version_;
    return s;
}

void Server::reset() {
    trace<HVSTOR_TRACE_vmbus_reset>();
    {
        std::lock_guard lock(mu_);
        drop_connection_locked();
    }
    run_closes();
    std::unique_lock lock(mu_);
    // The closes may wait for I/O that needs the host's event loop, which is this thread's.
    // Then the answers built before the connection went (a close that finished just now)
    // must be posted: nothing may reach the old connection's pages after the reset.
    while (!closes_cv_.wait_for(lock, std::chrono::milliseconds(1),
                                [&] { return closes_in_progress_ == 0 && sending_ == 0; })) {
        lock.unlock();
        host().poll_while_waiting();
        lock.lock();
    }
}

void Server::drop_connection_locked() {
    for (auto& ch : offers_) {
        if (!ch) continue;
        close_locked(*ch);
        ch->offered = false;
        if (ch->rescinded) ch.reset(); // a new connection never hears of it
    }
    gpadls_.clear();
    // Answers held for this connection are never sent to the next one.
    held_torndown_.clear();
    unload_owed_ = false;
    version_ = 0;
    offers_requested_ = false;
}

void Server::sending_locked(const Outbox& out) {
    if (!out.empty()) sending_++;
}

void Server::flush(const Outbox& out) {
    if (out.empty()) return;
    uint64_t sent = 0;
    // The count ends however the posting ends: a reset must not wait for ever on an outbox
    // whose post threw (an allocation in the SynIC's queue).
    auto posted = [&] {
        std::lock_guard lock(mu_);
        stats_.messages_out += sent;
        stats_.send_failures += out.size() - sent;
        if (--sending_ == 0) closes_cv_.notify_all();
    };
    try {
        for (const auto& o : out) {
            uint32_t type = 0;
            std::memcpy(&type, o.bytes.data(), std::min(o.bytes.size(), sizeof type));
            trace<HVSTOR_TRACE_vmbus_msg_out>(o.vp, type, o.bytes.size());
            sent += synic_.post_message(o.vp, o.sint, kHvMessageTypeVmbus, o.bytes);
        }
    } catch (...) {
        posted();
        throw;
    }
    posted();
}

Status Server::on_post_message(uint32_t vp, uint32_t connection_id, uint32_t message_type,
                               std::span<const uint8_t> payload) {
    if (connection_id != kMessageConnectionId && connection_id != kMessageConnectionId4) {
        std::lock_guard lock(mu_);
        bad("POST_MESSAGE connection_id %u (want %u or %u)", connection_id, kMessageConnectionId, kMessageConnectionId4);
        return Status::InvalidConnectionId;
    }
    if (message_type != kHvMessageTypeVmbus || payload.size() < sizeof(MsgHeader)) {
        std::lock_guard lock(mu_);
        bad("message type %u, %zu bytes: not a VMBus message", message_type, payload.size());
        return Status::InvalidParameter;
    }
    MsgHeader hdr;
    parse(payload, hdr);
    trace<HVSTOR_TRACE_vmbus_msg_in>(vp, hdr.msgtype, payload.size());
    Outbox out;
    Status st;
    {
        std::lock_guard lock(mu_);
        stats_.messages_in++;
        st = handle_locked(connection_id, static_cast<MsgType>(hdr.msgtype), payload, out);
        sending_locked(out);
    }
    flush(out); // first: nothing may come between the count and the post (see flush)
    run_closes();
    return st;
}

Status Server::handle_locked(uint32_t connection_id, MsgType type, std::span<const uint8_t> m, Outbox& out) {
    if (type == MsgType::InitiateContact) return initiate_contact(connection_id, m, out);
    // Connection id 4 only takes the 5.x INITIATE_CONTACT.
    if (connection_id != kMessageConnectionId) return Status::InvalidConnectionId;
    if (version_ == 0) {
        bad("message %u before INITIATE_CONTACT", unsigned(type)); // nothing else before a version
        return Status::Success;
    }
    switch (type) {
    case MsgType::RequestOffers: request_offers(out); break;
    case MsgType::GpadlHeader: gpadl_header(m, out); break;
    case MsgType::GpadlBody: gpadl_body(m, out); break;
    case MsgType::GpadlTeardown: gpadl_teardown(m, out); break;
    case MsgType::OpenChannel: open_channel(m, out); break;
    case MsgType::CloseChannel: close_channel(m); break;
    case MsgType::ModifyChannel: modify_channel(m, out); break;
    case MsgType::RelidReleased: relid_released(m); break;
    case MsgType::Unload: unload(out); break;
    default: bad("unknown message type %u", unsigned(type)); break;
    }
    return Status::Success;
}

Status Server::initiate_contact(uint32_t connection_id, std::span<const uint8_t> m, Outbox& out) {
    InitiateContact req;
    if (!parse(m, req)) {
        bad("INITIATE_CONTACT of %zu bytes (want %zu)", m.size(), sizeof req);
        return Status::InvalidParameter;
    }
    const uint32_t ver = req.version_requested;
    // From 5.0 on the guest posts to connection 4; older versions go to 1. A guest
    // trying an old version on 4 is told to move on, as Hyper-V does.
    if (connection_id == kMessageConnectionId4 && ver < version::kV5_0) return Status::InvalidConnectionId;
    const uint8_t sint = ver >= version::kV5_0 ? req.v5.msg_sint : kVmbusSint;
    if (sint >= hv::kSintCount || req.target_vcpu >= synic_.nr_vps()) {
        bad("INITIATE_CONTACT msg_sint %u target_vcpu %u (want < 16, < %u)", unsigned(sint), req.target_vcpu,
            synic_.nr_vps());
        return Status::InvalidParameter;
    }
    // A new contact (after kexec, say) replaces whatever connection existed, and nothing
    // held for an earlier one (an UNLOAD_RESPONSE owed since an UNLOAD) is sent to it.
    if (version_ != 0) drop_connection_locked();
    unload_owed_ = false;

    VersionResponse resp{};
    resp.hdr = header(MsgType::VersionResponse);
    if (known_version(ver) && ver <= cfg_.max_version) {
        version_ = ver;
        target_vp_ = req.target_vcpu;
        sint_ = sint;
        resp.version_supported = 1;
        resp.msg_conn_id = ver >= version::kV5_0 ? kMessageConnectionId : 0;
        trace<HVSTOR_TRACE_vmbus_connect>(ver, req.target_vcpu, sint);
    }
    queue_to(out, req.target_vcpu, sint, resp);
    return Status::Success;
}

OfferChannel Server::make_offer(const Offer& ch) const {
    OfferChannel o{};
    o.hdr = header(MsgType::OfferChannel);
    std::memcpy(o.offer.if_type, ch.info.type.bytes.data(), 16);
    std::memcpy(o.offer.if_instance, ch.info.instance.bytes.data(), 16);
    o.offer.sub_channel_index = ch.info.subchannel_index;
    o.child_relid = ch.relid;
    // No monitor pages: the guest then signals with SIGNAL_EVENT hypercalls.
    o.monitor_allocated = 0;
    o.is_dedicated_interrupt = 1;
    o.connection_id = kSignalBase + ch.relid;
    return o;
}

void Server::request_offers(Outbox& out) {
    for (auto& ch : offers_) {
        if (!ch || ch->rescinded) continue;
        queue(out, make_offer(*ch));
        ch->offered = true;
    }
    queue(out, header(MsgType::AllOffersDelivered));
    offers_requested_ = true;
}

// Each range: one word {byte_count, byte_offset}, then the pages it spans.
bool Gpadl::ranges_consistent() const {
    size_t i = 0;
    for (uint16_t r = 0; r < range_count; r++) {
        if (i >= range_data.size()) return false;
        const uint64_t w = range_data[i++];
        const uint64_t byte_count = uint32_t(w), byte_offset = w >> 32;
        const uint64_t pages = (byte_offset + byte_count + kPageSize - 1) / kPageSize;
        if (byte_count == 0 || byte_offset >= kPageSize || pages > range_data.size() - i) return false;
        i += pages;
    }
    return i == range_data.size();
}

void Server::answer_gpadl(uint32_t relid, uint32_t id, uint32_t status, Outbox& out) {
    GpadlCreated c{};
    c.hdr = header(MsgType::GpadlCreated);
    c.child_relid = relid;
    c.gpadl = id;
    c.creation_status = status;
    queue(out, c);
}

void Server::fail_gpadl(Gpadl& g, Outbox& out) {
    bad("GPADL %u: its ranges do not match the pfns sent", g.id);
    answer_gpadl(g.child_relid, g.id, kStatusInvalidParameter, out);
    gpadls_.erase(g.id);
}

void Server::finish_gpadl(Gpadl& g, Outbox& out) {
    if (g.ranges_consistent()) {
        trace<HVSTOR_TRACE_vmbus_gpadl_create>(g.child_relid, g.id, g.expected_pfns);
        answer_gpadl(g.child_relid, g.id, kStatusSuccess, out);
    } else {
        fail_gpadl(g, out);
    }
}

void Server::gpadl_header(std::span<const uint8_t> m, Outbox& out) {
    GpadlHeader h;
    if (!parse(m, h)) {
        bad("GPADL_HEADER of %zu bytes", m.size());
        return; // nothing to answer: no gpadl id could be read
    }
    auto fail = [&] {
        bad("GPADL_HEADER gpadl %u child_relid %u rangecount %u range_buflen %u refused", h.gpadl, h.child_relid,
            unsigned(h.rangecount), unsigned(h.range_buflen));
        answer_gpadl(h.child_relid, h.gpadl, kStatusInvalidParameter, out);
    };
    const size_t words = h.range_buflen / 8;
    const size_t carried = (m.size() - sizeof h) / 8;
    if (!find(h.child_relid) || gpadls_.count(h.gpadl) || gpadls_.size() >= cfg_.max_gpadls ||
        h.rangecount == 0 || h.range_buflen % 8 ||
        words < 2u * h.rangecount || words - h.rangecount > cfg_.max_gpadl_pages || carried > words)
        return fail();
    Gpadl g;
    g.id = h.gpadl;
    g.child_relid = h.child_relid;
    g.range_count = h.rangecount;
    g.expected_pfns = static_cast<uint32_t>(words - h.rangecount);
    g.range_data.resize(carried);
    if (carried) std::memcpy(g.range_data.data(), m.data() + sizeof h, carried * 8); // all may come in bodies
    auto& stored = gpadls_[g.id] = std::move(g);
    if (stored.complete()) finish_gpadl(stored, out);
}

void Server::gpadl_body(std::span<const uint8_t> m, Outbox& out) {
    GpadlBody b;
    if (!parse(m, b)) {
        bad("GPADL_BODY of %zu bytes", m.size());
        return;
    }
    auto it = gpadls_.find(b.gpadl);
    if (it == gpadls_.end() || it->second.complete()) {
        bad("GPADL_BODY for gpadl %u, which is not being built", b.gpadl);
        return;
    }
    Gpadl& g = it->second;
    const size_t carried = (m.size() - sizeof b) / 8;
    const size_t want = g.expected_pfns + g.range_count - g.range_data.size();
    if (carried > want) {
        // More pages than the header announced: refuse the whole GPADL.
        fail_gpadl(g, out);
        return;
    }
    const size_t at = g.range_data.size();
    g.range_data.resize(at + carried);
    if (carried) std::memcpy(g.range_data.data() + at, m.data() + sizeof b, carried * 8); // may be nothing yet
    if (g.complete()) finish_gpadl(g, out);
}

void Server::gpadl_teardown(std::span<const uint8_t> m, Outbox& out) {
    GpadlTeardown t;
    if (!parse(m, t)) {
        bad("GPADL_TEARDOWN of %zu bytes", m.size());
        return;
    }
    if (auto g = gpadls_.find(t.gpadl); g != gpadls_.end()) {
        trace<HVSTOR_TRACE_vmbus_gpadl_teardown>(g->second.child_relid, t.gpadl);
        if (g->second.torn_down) {
            bad("GPADL_TEARDOWN of gpadl %u, already being torn down", t.gpadl);
            return; // its answer is still to come
        }
        if (backs_live_rings(g->second)) {
            // The device may still write those pages: answered once its close is done.
            g->second.torn_down = true;
            held_torndown_.push_back(t.gpadl);
            return;
        }
        gpadls_.erase(g);
    } else {
        bad("GPADL_TEARDOWN of unknown gpadl %u", t.gpadl);
    }
    // Answered even for an unknown id: the guest waits for it.
    GpadlTorndown r{};
    r.hdr = header(MsgType::GpadlTorndown);
    r.gpadl = t.gpadl;
    queue(out, r);
}

void Server::open_channel(std::span<const uint8_t> m, Outbox& out) {
    OpenChannel req;
    if (!parse(m, req)) {
        bad("OPENCHANNEL of %zu bytes", m.size());
        return;
    }
    OpenResult r{};
    r.hdr = header(MsgType::OpenChannelResult);
    r.child_relid = req.child_relid;
    r.openid = req.openid;
    r.status = kStatusInvalidParameter;
    trace<HVSTOR_TRACE_vmbus_open>(req.child_relid, req.ringbuffer_gpadlhandle, req.downstream_ringbuffer_pageoffset,
                                   req.target_vp);

    Offer* ch = find(req.child_relid);
    auto g = gpadls_.find(req.ringbuffer_gpadlhandle);
    if (const char* why = open_refusal(req)) {
        bad("OPENCHANNEL child_relid %u gpadl %u downstream_ringbuffer_pageoffset %u target_vp %u: %s",
            req.child_relid, req.ringbuffer_gpadlhandle, req.downstream_ringbuffer_pageoffset, req.target_vp, why);
    } else if (!ch->info.handler) {
        r.status = kStatusNotSupported;
    } else if (const Gpadl& ring = g->second;
               // A ring GPADL is one range at offset 0: word 0 is {byte_count, byte_offset}.
               ring.range_count != 1 || ring.range_data.size() < 2 || (ring.range_data[0] >> 32) != 0) {
        bad("OPENCHANNEL child_relid %u: ring gpadl %u is not one range at offset 0", req.child_relid,
            req.ringbuffer_gpadlhandle);
    } else {
        ch->target_vp = req.target_vp;
        ch->downstream_offset = req.downstream_ringbuffer_pageoffset;
        std::memcpy(ch->user_data.data(), req.userdata, sizeof req.userdata);
        r.status = ch->info.handler->on_open(open_request(*ch, ring));
        if (r.status == kStatusSuccess) {
            ch->open = true;
            ch->ring_gpadl = req.ringbuffer_gpadlhandle;
        }
    }
    trace<HVSTOR_TRACE_vmbus_open_result>(req.child_relid, r.status);
    queue(out, r);
}

OpenRequest Server::open_request(const Offer& ch, const Gpadl& ring) const {
    OpenRequest o;
    o.child_relid = ch.relid;
    o.target_vp = ch.target_vp;
    o.ring_pfns = std::span<const uint64_t>(ring.range_data).subspan(1);
    o.downstream_page_offset = ch.downstream_offset;
    o.user_data = ch.user_data;
    // The connection's SINT as of this open: a later reconnect reopens the channel.
    o.signal = [&synic = synic_, sint = sint_, relid = ch.relid](uint32_t vp) { synic.signal_event(vp, sint, relid); };
    return o;
}

// Why an OPENCHANNEL cannot be served, or nullptr.
const char* Server::open_refusal(const OpenChannel& req) const {
    const Offer* ch = req.child_relid && req.child_relid <= offers_.size() ? offers_[req.child_relid - 1].get() : nullptr;
    if (!ch || ch->rescinded) return "no such offer";
    if (!ch->offered) return "not offered on this connection";
    if (ch->open) return "already open";
    if (ch->closing) return "its close is still in progress";
    auto g = gpadls_.find(req.ringbuffer_gpadlhandle);
    if (g == gpadls_.end() || !g->second.complete() || g->second.torn_down) return "no such gpadl";
    if (g->second.child_relid != req.child_relid) return "the gpadl belongs to another channel";
    if (req.target_vp >= synic_.nr_vps()) return "no such VP";
    if (req.downstream_ringbuffer_pageoffset == 0 || req.downstream_ringbuffer_pageoffset >= g->second.expected_pfns)
        return "the ring split lies outside the gpadl";
    return nullptr;
}

void Server::close_channel(std::span<const uint8_t> m) {
    CloseChannel c;
    Offer* ch = parse(m, c) ? find(c.child_relid) : nullptr;
    if (!ch || !ch->open) {
        bad("CLOSECHANNEL child_relid %u: not open", m.size() >= sizeof c ? c.child_relid : 0);
        return;
    }
    close_locked(*ch);
}

void Server::relid_released(std::span<const uint8_t> m) {
    RelidReleased r;
    if (!parse(m, r) || r.child_relid == 0 || r.child_relid > offers_.size() || !offers_[r.child_relid - 1] ||
        !offers_[r.child_relid - 1]->rescinded) {
        bad("RELID_RELEASED child_relid %u: not rescinded", m.size() >= sizeof r ? r.child_relid : 0);
        return;
    }
    offers_[r.child_relid - 1].reset();
}

void Server::modify_channel(std::span<const uint8_t> m, Outbox& out) {
    ModifyChannel req;
    if (!parse(m, req)) {
        bad("MODIFYCHANNEL of %zu bytes", m.size());
        return;
    }
    Offer* ch = find(req.child_relid);
    const bool ok = ch && ch->open && req.target_vp < synic_.nr_vps();
    if (ok) {
        trace<HVSTOR_TRACE_vmbus_target_vp>(ch->relid, req.target_vp);
        ch->target_vp = req.target_vp;
        if (ch->info.handler) ch->info.handler->on_target_vp(ch->relid, req.target_vp);
    } else {
        bad("MODIFYCHANNEL child_relid %u target_vp %u: not an open channel or no such VP", req.child_relid,
            req.target_vp);
    }
    // Only 5.3 guests wait for an answer.
    if (version_ >= version::kV5_3) {
        ModifyChannelResponse r{};
        r.hdr = header(MsgType::ModifyChannelResponse);
        r.child_relid = req.child_relid;
        r.status = ok ? kStatusSuccess : kStatusInvalidParameter;
        queue(out, r);
    }
}

void Server::unload(Outbox& out) {
    trace<HVSTOR_TRACE_vmbus_unload>();
    drop_connection_locked();
    // The guest reuses its ring pages once answered: not before every device stopped.
    if (closes_in_progress_) unload_owed_ = true;
    else queue(out, header(MsgType::UnloadResponse));
}

Status Server::on_signal_event(uint32_t /*vp*/, uint32_t connection_id, uint16_t /*flag*/) {
    ChannelHandler* h = nullptr;
    uint32_t relid = connection_id - kSignalBase;
    {
        std::lock_guard lock(mu_);
        Offer* ch = connection_id > kSignalBase ? find(relid) : nullptr;
        if (!ch || !ch->open) {
            log_("SIGNAL_EVENT connection_id %u: no open channel has it", connection_id);
            return Status::InvalidConnectionId;
        }
        h = ch->info.handler;
    }
    if (h) h->on_guest_signal(relid);
    return Status::Success;
}

} // namespace hvstor::vmbus
