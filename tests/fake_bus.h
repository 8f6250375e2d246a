// A VMBus with nothing behind it: a device's offers are recorded, and the test opens,
// signals and closes channels directly, with rings in fake guest RAM. Lets a device such
// as storvsp be tested without a partition, a SynIC or the VMBus server.
#pragma once

#include <atomic>
#include <condition_variable>
#include <map>
#include <optional>
#include <set>
#include <mutex>
#include <vector>

#include "fake_host.h"
#include "hvstor/vmbus/bus.h"

namespace hvstor::test {

class LoopbackBus final : public vmbus::Bus {
public:
    uint32_t offer(const vmbus::OfferInfo& info) override {
        std::lock_guard lock(mu_);
        const uint32_t relid = next_relid_++;
        offers_[relid] = info;
        offered.push_back(relid);
        return relid;
    }
    bool rescind(uint32_t relid) override {
        vmbus::ChannelHandler* h = nullptr;
        {
            std::lock_guard lock(mu_);
            auto it = offers_.find(relid);
            if (it == offers_.end()) return false;
            if (open_.erase(relid)) h = it->second.handler;
            offers_.erase(it);
            rescinded.push_back(relid);
        }
        if (h) close_and_wait(h, relid);
        return true;
    }

    // No saved state behind this bus: an offer made here is bound to its own handler again.
    uint32_t bind(const vmbus::OfferInfo& info) override {
        std::lock_guard lock(mu_);
        for (auto& [relid, o] : offers_) {
            if (o.type == info.type && o.instance == info.instance && o.subchannel_index == info.subchannel_index) {
                o.handler = info.handler;
                return relid;
            }
        }
        return 0;
    }

    // The guest's side. Opens `relid` on `pages` ring pages at `base`, split in half;
    // returns the device's NT status.
    uint32_t open(uint32_t relid, uint64_t base, uint32_t pages, uint32_t vp = 0) {
        vmbus::ChannelHandler* h = handler(relid);
        if (!h) return vmbus::kStatusInvalidParameter;
        std::vector<uint64_t> pfns;
        for (uint32_t i = 0; i < pages; i++) pfns.push_back(base / kPageSize + i);
        vmbus::OpenRequest req;
        req.child_relid = relid;
        req.target_vp = vp;
        req.ring_pfns = pfns;
        req.downstream_page_offset = pages / 2;
        req.signal = [this](uint32_t) { interrupts++; };
        const uint32_t st = h->on_open(req);
        if (st == vmbus::kStatusSuccess) {
            std::lock_guard lock(mu_);
            open_.insert(relid);
        }
        return st;
    }
    void close(uint32_t relid) {
        vmbus::ChannelHandler* h = nullptr;
        {
            std::lock_guard lock(mu_);
            if (open_.erase(relid)) h = offers_[relid].handler;
        }
        if (h) close_and_wait(h, relid);
    }
    // The guest's CLOSECHANNEL without waiting for the device: returns a flag that turns
    // true once the device called its CloseDone.
    std::shared_ptr<std::atomic<bool>> begin_close(uint32_t relid) {
        auto finished = std::make_shared<std::atomic<bool>>(false);
        vmbus::ChannelHandler* h = nullptr;
        {
            std::lock_guard lock(mu_);
            if (open_.erase(relid)) h = offers_[relid].handler;
        }
        if (!h) {
            *finished = true;
            return finished;
        }
        h->on_close(relid, [this, finished] {
            std::lock_guard lock(mu_);
            *finished = true;
            closed_cv_.notify_all();
        });
        return finished;
    }
    void wait_closed(const std::shared_ptr<std::atomic<bool>>& finished) {
        std::unique_lock lock(mu_);
        closed_cv_.wait(lock, [&] { return finished->load(); });
    }
    void signal(uint32_t relid) {
        if (vmbus::ChannelHandler* h = handler(relid)) h->on_guest_signal(relid);
    }
    std::optional<vmbus::OfferInfo> offer_of(uint32_t relid) {
        std::lock_guard lock(mu_);
        auto it = offers_.find(relid);
        if (it == offers_.end()) return std::nullopt;
        return it->second;
    }

    std::vector<uint32_t> offered, rescinded; // read only after the device is quiet
    std::atomic<uint64_t> interrupts{0};

private:
    // As the VMBus server does for the guest, waits until the device no longer uses the
    // rings (tests then reuse their pages).
    void close_and_wait(vmbus::ChannelHandler* h, uint32_t relid) {
        auto finished = std::make_shared<std::atomic<bool>>(false);
        h->on_close(relid, [this, finished] {
            std::lock_guard lock(mu_);
            *finished = true;
            closed_cv_.notify_all();
        });
        wait_closed(finished);
    }
    vmbus::ChannelHandler* handler(uint32_t relid) {
        std::lock_guard lock(mu_);
        auto it = offers_.find(relid);
        return it == offers_.end() ? nullptr : it->second.handler;
    }

    std::mutex mu_;
    std::condition_variable closed_cv_;
    uint32_t next_relid_ = 1;
    std::map<uint32_t, vmbus::OfferInfo> offers_;
    std::set<uint32_t> open_;
};

} // namespace hvstor::test
