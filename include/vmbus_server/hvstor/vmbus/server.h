// The VMBus server: version negotiation, channel offers, GPADLs and channel open/close
// requests from the guest, answered over SynIC messages. It is the Bus devices offer
// their channels on.
#pragma once

#include <array>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "hvstor/guest_log.h"
#include "hvstor/hyperv/partition.h"
#include "hvstor/state.h"
#include "hvstor/vmbus/bus.h"
#include "hvstor/vmbus/guid.h"
#include "hvstor/vmbus/messages.h"

namespace hvstor::vmbus {

// A guest physical address descriptor list: the pages the guest shared for a channel.
struct Gpadl {
    uint32_t id = 0;
    uint32_t child_relid = 0;
    uint16_t range_count = 0;
    uint32_t expected_pfns = 0;
    // Ranges as sent: for each, byte_count, byte_offset, then its pfns.
    std::vector<uint64_t> range_data;
    // GPADL_TEARDOWN came while the GPADL backs a channel's rings: unusable, and kept (so
    // its id cannot be reused) until the GPADL_TORNDOWN held for it is sent.
    bool torn_down = false;
    bool complete() const;
    // Each range's words: {byte_count, byte_offset}, then the pages it spans; nothing more.
    bool ranges_consistent() const;
};

struct ServerConfig {
    uint32_t max_version = version::kV5_3;
    // Largest GPADL accepted, in pages (the guest's rings are far smaller), and how many
    // may exist at once: together they bound the host memory a guest can make us hold.
    uint32_t max_gpadl_pages = 65536;
    uint32_t max_gpadls = 1024;
};

struct ServerStats {
    uint64_t messages_in = 0;
    uint64_t messages_out = 0;
    uint64_t bad_messages = 0;   // malformed, out of state, unknown
    uint64_t send_failures = 0;  // SynIC refused a message
    // At the time of the reading.
    uint32_t offers = 0;         // channels offered to devices (not rescinded)
    uint32_t open_channels = 0;
    uint32_t gpadls = 0;
    uint32_t version = 0;        // negotiated; 0 when the guest is not connected
};

class Server final : public hv::MessageHandler, public Bus {
public:
    static constexpr uint32_t kMaxRelid = 2047;
    // Connection ids for channel signals are kSignalBase + child_relid.
    static constexpr uint32_t kSignalBase = 0x10000;

    Server(hv::Synic& synic, const ServerConfig& cfg);

    // Bus. A rescinded relid is reused once the guest released it.
    uint32_t offer(const OfferInfo& offer) override;
    bool rescind(uint32_t relid) override;
    uint32_t bind(const OfferInfo& offer) override;

    hv::Status on_post_message(uint32_t vp, uint32_t connection_id, uint32_t message_type,
                               std::span<const uint8_t> payload) override;
    hv::Status on_signal_event(uint32_t vp, uint32_t connection_id, uint16_t flag) override;

    bool connected() const;
    uint32_t negotiated_version() const; // 0 when not connected
    uint32_t target_vp() const;
    uint8_t message_sint() const;
    size_t gpadl_count() const;
    bool channel_open(uint32_t relid) const;
    ServerStats stats() const;

    // Saved state (savevm, migration), with the VM stopped: the connection, every offer with
    // its relid and whether it is open (on which GPADL, split and VP), the GPADLs, and the
    // answers still owed. A close still in progress is saved as done: the next machine has
    // no I/O of the old one's to wait for, so its held GPADL_TORNDOWN and UNLOAD_RESPONSE
    // are sent at once after the load.
    void save(state::Writer& w) const;
    // Loading is three steps, with the VM stopped and the server as a machine reset leaves it
    // (no connection, no close running). load() restores the connection and the GPADLs and
    // puts each offer at its saved relid: a device's offer made here is matched by its type,
    // instance and subchannel index; one the saved state lacks is refused. Each device then
    // attaches its handlers with bind() (subchannels exist only in the saved state until
    // then). finish_load() checks every offer has its device, reopens the channels that
    // were open (ChannelHandler::on_open) and queues the messages owed; they reach the
    // guest when the VM runs. False with the reason in the reader (load) or `err`.
    bool load(state::Reader& r);
    bool finish_load(std::string& err);
    // A load failed and the machine was reset: if load() had moved the devices' offers, they
    // go back to the relids they had, what only the saved state had is dropped, and the
    // connection's target VP and SINT are what they were; a load refused before that changed
    // none of them.
    void abort_load();

    // Drop the connection, the GPADLs and open channels; offers stay registered. Returns
    // once every device has finished closing (machine reset: nothing may write guest
    // memory afterwards), which waits for their outstanding I/O.
    void reset();

private:
    struct Offer {
        OfferInfo info;
        uint32_t relid = 0;
        bool offered = false;
        bool open = false;
        bool rescinded = false; // waiting for RELID_RELEASED
        // Closed, but the handler has not called its CloseDone yet: its worker may still be
        // writing to the old rings, so no OPEN is accepted and the rings' GPADL_TORNDOWN
        // is held back until it has.
        bool closing = false;
        uint64_t close_token = 0; // of the close in progress
        uint32_t target_vp = 0;
        uint32_t ring_gpadl = 0; // of the current or last open
        // The rest of the open request, kept so that a loaded machine can reopen it.
        uint32_t downstream_offset = 0;
        std::array<uint8_t, 120> user_data{};
    };
    struct Outgoing {
        uint32_t vp;
        uint8_t sint;
        std::vector<uint8_t> bytes;
    };
    using Outbox = std::vector<Outgoing>;

    // Replies are collected under the lock and posted after it is dropped, so that no
    // lock of ours is held while the VMM raises the interrupt.
    template <typename T> void queue_to(Outbox& out, uint32_t vp, uint8_t sint, const T& msg) {
        const auto* p = reinterpret_cast<const uint8_t*>(&msg);
        out.push_back({vp, sint, std::vector<uint8_t>(p, p + sizeof msg)});
    }
    template <typename T> void queue(Outbox& out, const T& msg) { queue_to(out, target_vp_, sint_, msg); }
    // Messages are built under mu_ and posted after it is let go. Such an outbox is for the
    // connection as it was then: sending_locked() (under mu_, before letting go) counts it, and
    // flush() posts it and ends the count, so a reset waits until it is in the guest's memory.
    // Nothing that can throw may come between the two.
    void sending_locked(const Outbox& out);
    void flush(const Outbox& out);

    hv::Status handle_locked(uint32_t connection_id, MsgType type, std::span<const uint8_t> m, Outbox& out);
    hv::Status initiate_contact(uint32_t connection_id, std::span<const uint8_t> m, Outbox& out);
    void request_offers(Outbox& out);
    void gpadl_header(std::span<const uint8_t> m, Outbox& out);
    void gpadl_body(std::span<const uint8_t> m, Outbox& out);
    void gpadl_teardown(std::span<const uint8_t> m, Outbox& out);
    void open_channel(std::span<const uint8_t> m, Outbox& out);
    void close_channel(std::span<const uint8_t> m);
    void modify_channel(std::span<const uint8_t> m, Outbox& out);
    void unload(Outbox& out);
    void relid_released(std::span<const uint8_t> m);
    void close_locked(Offer& ch);
    // The open request for `ch` on GPADL `ring` (checked: one range at offset 0), as the
    // guest sent it or as it was saved.
    OpenRequest open_request(const Offer& ch, const Gpadl& ring) const;
    // Loading (server_state.cc): the parts of the stream, each checked as it is read.
    std::vector<std::unique_ptr<Offer>> read_offers(state::Reader& r, uint32_t version) const;
    std::map<uint32_t, Gpadl> read_gpadls(state::Reader& r) const;
    bool load_offers_locked(std::vector<std::unique_ptr<Offer>> saved, state::Reader& r);
    // The answers the saved machine still owed, whose closes are over here (not those of
    // the rings of channels open again: their closes come).
    void queue_owed_locked(bool unload_owed, const std::vector<uint32_t>& open_rings);
    std::vector<uint32_t> saved_open_rings_locked() const;
    void run_closes();
    void close_done(uint64_t token);
    // The GPADL backs the rings of a channel that is open or still closing.
    bool backs_live_rings(const Gpadl& g) const;
    void finish_gpadl(Gpadl& g, Outbox& out);
    void fail_gpadl(Gpadl& g, Outbox& out);
    void answer_gpadl(uint32_t relid, uint32_t id, uint32_t status, Outbox& out);
    void drop_connection_locked();
    // A message the guest should not have sent: counted, and logged with its field and value.
    [[gnu::format(printf, 2, 3)]] void bad(const char* fmt, ...);
    const char* open_refusal(const OpenChannel& req) const;
    OfferChannel make_offer(const Offer& ch) const;
    Offer* find(uint32_t relid);
    Host& host() const { return synic_.host(); }

    hv::Synic& synic_;
    ServerConfig cfg_;
    mutable std::mutex mu_;
    uint32_t version_ = 0;
    uint32_t target_vp_ = 0;
    uint8_t sint_ = kVmbusSint;
    bool offers_requested_ = false;
    std::vector<std::unique_ptr<Offer>> offers_; // index = relid - 1; null = free
    struct Closing {
        ChannelHandler* handler;
        uint32_t relid, ring_gpadl;
    };
    // Each close is known by a token from close_locked to its CloseDone, so that a late
    // CloseDone finds its own offer even after the relid was released and reused.
    uint64_t next_close_token_ = 0;
    std::map<uint64_t, Closing> closes_;        // in progress (closes_in_progress_ of them)
    std::vector<uint64_t> closing_;             // started by run_closes, after mu_
    uint32_t closes_in_progress_ = 0;
    uint32_t sending_ = 0;              // outboxes counted by sending_locked(), not yet posted
    std::condition_variable closes_cv_; // closes_in_progress_ or sending_ reached 0
    // GPADLs whose GPADL_TORNDOWN waits for their channel's close (each is in gpadls_,
    // torn_down: at most max_gpadls). Dropped with the connection.
    std::vector<uint32_t> held_torndown_;
    bool unload_owed_ = false; // UNLOAD_RESPONSE, once no close is in progress
    Outbox load_out_;          // load(): messages finish_load() sends
    // load(): the devices' offers and the connection's target as they were, for abort_load();
    // none before a load moved them.
    struct BeforeLoad {
        std::vector<std::pair<OfferInfo, uint32_t>> offers;
        uint32_t target_vp;
        uint8_t sint;
    };
    std::optional<BeforeLoad> before_load_;
    std::map<uint32_t, Gpadl> gpadls_;
    ServerStats stats_;
    GuestErrorLog log_; // under mu_
};

} // namespace hvstor::vmbus
