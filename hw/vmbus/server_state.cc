// The VMBus server's saved state (savevm, migration): see Server::save and Server::load.
#include <algorithm>
#include <cstring>

#include "hvstor/vmbus/server.h"

namespace hvstor::vmbus {

namespace {

constexpr uint32_t kTag = 0x53424d56; // "VMBS"
constexpr uint32_t kVersion = 1;

void put_guid(state::Writer& w, const Guid& g) { w.fixed(g.bytes); }

Guid get_guid(state::Reader& r, const char* what) {
    Guid g;
    r.fixed(what, g.bytes);
    return g;
}

bool same_offer(const OfferInfo& a, const OfferInfo& b) {
    return a.type == b.type && a.instance == b.instance && a.subchannel_index == b.subchannel_index;
}

std::string describe(const OfferInfo& o) {
    return o.instance.to_string() + " subchannel " + std::to_string(o.subchannel_index);
}

} // namespace

void Server::save(state::Writer& w) const {
    std::lock_guard lock(mu_);
    w.begin(kTag, kVersion);
    w.u32(version_);
    w.u32(target_vp_);
    w.u8(sint_);
    w.boolean(offers_requested_);
    // Answers owed: once no close runs on the next machine, they are due at once.
    w.boolean(unload_owed_);
    w.u32(uint32_t(std::count_if(offers_.begin(), offers_.end(), [](const auto& o) { return o != nullptr; })));
    for (const auto& ch : offers_) {
        if (!ch) continue;
        w.u32(ch->relid);
        put_guid(w, ch->info.type);
        put_guid(w, ch->info.instance);
        w.u16(ch->info.subchannel_index);
        w.boolean(ch->offered);
        w.boolean(ch->open);
        w.boolean(ch->rescinded);
        w.u32(ch->target_vp);
        w.u32(ch->ring_gpadl);
        w.u32(ch->downstream_offset);
        w.fixed(ch->user_data);
    }
    w.u32(uint32_t(gpadls_.size()));
    for (const auto& [id, g] : gpadls_) {
        w.u32(id);
        w.u32(g.child_relid);
        w.u16(g.range_count);
        w.u32(g.expected_pfns);
        w.u32(uint32_t(g.range_data.size()));
        for (uint64_t v : g.range_data) w.u64(v);
        // Torn down and held: its channel's close is over on the next machine.
        w.boolean(g.torn_down);
    }
}

std::vector<std::unique_ptr<Server::Offer>> Server::read_offers(state::Reader& r, uint32_t version) const {
    std::vector<std::unique_ptr<Offer>> saved;
    const uint32_t n = r.count("the offer count", kMaxRelid, 4 + 16 + 16 + 2);
    for (uint32_t i = 0; i < n && r.ok(); i++) {
        auto ch = std::make_unique<Offer>();
        ch->relid = r.u32("an offer's relid");
        ch->info.type = get_guid(r, "an offer's type");
        ch->info.instance = get_guid(r, "an offer's instance");
        ch->info.subchannel_index = r.u16("an offer's subchannel index");
        ch->offered = r.boolean("an offer's offered flag");
        ch->open = r.boolean("an offer's open flag");
        ch->rescinded = r.boolean("an offer's rescinded flag");
        ch->target_vp = r.u32("an open channel's target VP");
        ch->ring_gpadl = r.u32("an open channel's ring GPADL");
        ch->downstream_offset = r.u32("an open channel's ring split");
        r.fixed("an open channel's user data", ch->user_data);
        if (ch->relid == 0 || ch->relid > kMaxRelid) r.fail("an offer's relid", "is not 1..2047", ch->relid);
        if (ch->open && (ch->rescinded || !ch->offered || version == 0))
            r.fail("an open channel", "is rescinded, not offered or on no connection; relid", ch->relid);
        if (ch->open && ch->target_vp >= synic_.nr_vps())
            r.fail("an open channel's target VP", "is not a VP of this machine", ch->target_vp);
        saved.push_back(std::move(ch));
    }
    return saved;
}

std::map<uint32_t, Gpadl> Server::read_gpadls(state::Reader& r) const {
    std::map<uint32_t, Gpadl> gpadls;
    const uint32_t n = r.count("the GPADL count", cfg_.max_gpadls, 19);
    for (uint32_t i = 0; i < n && r.ok(); i++) {
        Gpadl g;
        g.id = r.u32("a GPADL's id");
        g.child_relid = r.u32("a GPADL's relid");
        g.range_count = r.u16("a GPADL's range count");
        g.expected_pfns = r.u32("a GPADL's page count");
        const uint32_t words = r.count("a GPADL's words", cfg_.max_gpadl_pages + g.range_count, 8);
        g.range_data.resize(words);
        for (uint64_t& v : g.range_data) v = r.u64("a GPADL's word");
        g.torn_down = r.boolean("a GPADL's torn-down flag");
        if (g.range_count == 0 || g.expected_pfns > cfg_.max_gpadl_pages ||
            g.range_data.size() > size_t(g.expected_pfns) + g.range_count || (g.complete() && !g.ranges_consistent()))
            r.fail("GPADL", "has ranges that do not match its pages", g.id);
        const uint32_t id = g.id;
        if (!gpadls.emplace(id, std::move(g)).second) r.fail("GPADL", "is in the state twice", id);
    }
    return gpadls;
}

bool Server::load(state::Reader& r) {
    if (!r.begin(kTag, kVersion, "the VMBus server's state")) return false;
    const uint32_t version = r.u32("the VMBus version");
    const uint32_t target_vp = r.u32("the connection's target VP");
    const uint8_t sint = r.u8("the connection's SINT");
    const bool offers_requested = r.boolean("offers requested");
    const bool unload_owed = r.boolean("UNLOAD_RESPONSE owed");
    const auto& known = version::kAll;
    if (version != 0 && (std::find(std::begin(known), std::end(known), version) == std::end(known) ||
                         version > cfg_.max_version))
        r.fail("the VMBus version", "is not one this bridge speaks (see vmbus-version)", version);
    if (target_vp >= synic_.nr_vps()) r.fail("the connection's target VP", "is not a VP of this machine", target_vp);
    if (sint >= hv::kSintCount) r.fail("the connection's SINT", "is not 0..15", sint);
    auto saved = read_offers(r, version);
    auto gpadls = read_gpadls(r);
    if (!r.ok()) return false;

    std::lock_guard lock(mu_);
    if (version_ != 0 || closes_in_progress_ || sending_ || !gpadls_.empty()) {
        r.fail("the VMBus server", "is not at power-on (a machine reset comes before a load); its version is",
               version_);
        return false;
    }
    gpadls_ = std::move(gpadls);
    // Each open channel's ring GPADL must be there, whole, one range at offset 0, with room
    // for its split.
    for (const auto& ch : saved) {
        if (!ch->open) continue;
        auto g = gpadls_.find(ch->ring_gpadl);
        // Torn down is allowed: its GPADL_TORNDOWN waits for the channel's close, as it did.
        if (g == gpadls_.end() || !g->second.complete() || g->second.child_relid != ch->relid ||
            g->second.range_count != 1 || (g->second.range_data[0] >> 32) != 0 || ch->downstream_offset < 2 ||
            g->second.expected_pfns < 4 || ch->downstream_offset > g->second.expected_pfns - 2)
            r.fail("the ring GPADL of open channel relid", "is missing or unusable", ch->relid);
    }
    if (!r.ok() || !load_offers_locked(std::move(saved), r)) {
        gpadls_.clear();
        return false;
    }
    before_load_->target_vp = target_vp_;
    before_load_->sint = sint_;
    version_ = version;
    target_vp_ = target_vp;
    sint_ = sint;
    offers_requested_ = offers_requested;
    queue_owed_locked(unload_owed, saved_open_rings_locked());
    return true;
}

std::vector<uint32_t> Server::saved_open_rings_locked() const {
    std::vector<uint32_t> rings;
    for (const auto& ch : offers_)
        if (ch && ch->open) rings.push_back(ch->ring_gpadl);
    return rings;
}

void Server::queue_owed_locked(bool unload_owed, const std::vector<uint32_t>& open_rings) {
    load_out_.clear();
    held_torndown_.clear();
    for (auto it = gpadls_.begin(); it != gpadls_.end();) {
        if (!it->second.torn_down) {
            ++it;
            continue;
        }
        if (std::find(open_rings.begin(), open_rings.end(), it->first) != open_rings.end()) {
            held_torndown_.push_back(it->first); // answered when its channel's close is done
            ++it;
            continue;
        }
        GpadlTorndown t{};
        t.hdr = MsgHeader{static_cast<uint32_t>(MsgType::GpadlTorndown), 0};
        t.gpadl = it->first;
        queue(load_out_, t);
        it = gpadls_.erase(it);
    }
    if (unload_owed) queue(load_out_, MsgHeader{static_cast<uint32_t>(MsgType::UnloadResponse), 0});
}

// The devices' offers (made when this machine was built) move to the relids the saved state
// gives the same type, instance and subchannel index; offers only the saved state has wait
// for bind().
bool Server::load_offers_locked(std::vector<std::unique_ptr<Offer>> saved, state::Reader& r) {
    std::vector<std::unique_ptr<Offer>> placed;
    std::vector<bool> taken(offers_.size(), false);
    for (auto& ch : saved) {
        if (ch->relid > placed.size()) placed.resize(ch->relid);
        if (placed[ch->relid - 1]) return r.fail("relid", "is in the state twice", ch->relid), false;
        for (size_t i = 0; i < offers_.size() && !ch->rescinded; i++) {
            const Offer* dev = offers_[i].get();
            if (!dev || dev->rescinded || taken[i] || !same_offer(dev->info, ch->info)) continue;
            ch->info.handler = dev->info.handler;
            taken[i] = true;
            break;
        }
        placed[ch->relid - 1] = std::move(ch);
    }
    for (size_t i = 0; i < offers_.size(); i++) {
        const Offer* dev = offers_[i].get();
        if (dev && !dev->rescinded && !taken[i])
            return r.fail(("the saved state has no channel for this machine's " + describe(dev->info) + ", relid").c_str(),
                          "(start it with the same devices as the saved one)", dev->relid),
                   false;
    }
    // Nothing was changed before this point: a refused load leaves the offers as they were.
    before_load_.emplace();
    for (const auto& o : offers_)
        if (o && !o->rescinded) before_load_->offers.push_back({o->info, o->relid});
    offers_ = std::move(placed);
    return true;
}

uint32_t Server::bind(const OfferInfo& offer) {
    std::lock_guard lock(mu_);
    for (auto& ch : offers_) {
        if (!ch || ch->rescinded || !same_offer(ch->info, offer)) continue;
        if (ch->info.handler && ch->info.handler != offer.handler) return 0;
        ch->info.handler = offer.handler;
        return ch->relid;
    }
    return 0;
}

bool Server::finish_load(std::string& err) {
    Outbox out;
    {
        std::lock_guard lock(mu_);
        for (auto& ch : offers_) {
            if (!ch || ch->rescinded) continue;
            if (!ch->info.handler) {
                err = "the saved state has channel relid " + std::to_string(ch->relid) + " (" + describe(ch->info) +
                      ") that no device of this machine took";
                return false;
            }
            if (!ch->open) continue;
            const uint32_t st = ch->info.handler->on_open(open_request(*ch, gpadls_.at(ch->ring_gpadl)));
            if (st != kStatusSuccess) {
                ch->open = false;
                err = "reopening channel relid " + std::to_string(ch->relid) + " failed with status " + std::to_string(st);
                return false;
            }
        }
        out.swap(load_out_);
        before_load_.reset();
        sending_locked(out);
    }
    flush(out);
    return true;
}

void Server::abort_load() {
    std::lock_guard lock(mu_);
    drop_connection_locked(); // the reset did; nothing is open, nothing owed
    load_out_.clear();
    // Refused before the offers moved (a stream cut short, a section this build cannot
    // read): they are where they were, and the devices keep them.
    if (!before_load_) return;
    target_vp_ = before_load_->target_vp;
    sint_ = before_load_->sint;
    offers_.clear();
    for (const auto& [info, relid] : before_load_->offers) {
        if (relid > offers_.size()) offers_.resize(relid);
        auto ch = std::make_unique<Offer>();
        ch->info = info;
        ch->relid = relid;
        offers_[relid - 1] = std::move(ch);
    }
    before_load_.reset();
}

} // namespace hvstor::vmbus
