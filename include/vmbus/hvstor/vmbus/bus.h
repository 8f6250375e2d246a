// What a VMBus device sees of the bus: it offers channels, the bus calls it back when the
// guest opens, signals, retargets or closes one, and it withdraws offers. The VMBus server
// (include/vmbus_server) is the real bus; tests drive devices through a fake one, with no
// partition or SynIC behind it.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <span>

#include "hvstor/vmbus/guid.h"

namespace hvstor::vmbus {

// NT status values: OPENCHANNEL_RESULT, GPADL_CREATED, MODIFYCHANNEL_RESPONSE.
constexpr uint32_t kStatusSuccess = 0;
constexpr uint32_t kStatusUnsuccessful = 0xC0000001;
constexpr uint32_t kStatusNotSupported = 0xC00000BB;
constexpr uint32_t kStatusInvalidParameter = 0xC000000D;

// Raises the channel's interrupt on a VP. Set by the bus; called from the channel's worker.
using GuestSignal = std::function<void(uint32_t vp)>;

// Tells the bus that a closed channel's device no longer touches its rings. Called once,
// from any thread, with no lock held that the handler's on_close() or on_open() takes.
using CloseDone = std::function<void()>;

// An OPENCHANNEL the bus has checked: the ring GPADL is one page-aligned range and the split
// leaves pages on both sides. Valid for the duration of ChannelHandler::on_open.
struct OpenRequest {
    uint32_t child_relid = 0;
    uint32_t target_vp = 0;
    // Guest pages of both rings: [0, downstream_page_offset) guest-to-host, the rest
    // host-to-guest. Each ring's first page is its header.
    std::span<const uint64_t> ring_pfns;
    uint32_t downstream_page_offset = 0;
    std::array<uint8_t, 120> user_data{};
    GuestSignal signal;
};

// The device behind an offer. Without one, opens are refused with an error status.
class ChannelHandler {
public:
    virtual ~ChannelHandler() = default;
    // Returns an NT status for OPENCHANNEL_RESULT.
    virtual uint32_t on_open(const OpenRequest& req) = 0;
    // The guest closed the channel (or the bus withdrew it). Called on a vCPU thread: it
    // must not wait for the device's outstanding work. Once the device has stopped and no
    // longer touches the ring pages, it calls done() (possibly before returning). Until then
    // the bus refuses to reopen the channel and holds back the guest's GPADL teardown of
    // its rings, so the guest cannot reuse those pages while the device still writes them.
    // No packet may be sent on the channel once on_close() was called.
    virtual void on_close(uint32_t child_relid, CloseDone done) = 0;
    // The guest signalled the open channel.
    virtual void on_guest_signal(uint32_t child_relid) = 0;
    // MODIFYCHANNEL moved the channel's interrupts to another VP.
    virtual void on_target_vp(uint32_t child_relid, uint32_t vp) = 0;
};

struct OfferInfo {
    Guid type;
    Guid instance;
    uint16_t subchannel_index = 0;
    ChannelHandler* handler = nullptr;
};

class Bus {
public:
    virtual ~Bus() = default;
    // Offers a channel now if the guest is connected, else when it asks for offers.
    // Returns the child relid, 0 when none is left. The handler must outlive the offer.
    // Never call it with a lock held that on_close() or on_open() of any handler takes.
    virtual uint32_t offer(const OfferInfo& offer) = 0;
    // Withdraws an offer, closing the channel first (on_close is called before it returns;
    // the close may finish later). False if there is no such offer.
    virtual bool rescind(uint32_t relid) = 0;
    // Loading saved state (savevm, migration): attaches `offer.handler` to the offer the
    // saved state has for the same type, instance and subchannel index, and returns its
    // relid; 0 when the saved state has no such offer. The bus then reopens the channel if
    // it was open, calling on_open as for the guest's OPENCHANNEL.
    virtual uint32_t bind(const OfferInfo& offer) = 0;
};

} // namespace hvstor::vmbus
