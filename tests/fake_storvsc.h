// A fake hv_storvsc over the whole VMBus stack: opens channels of a storvsp controller
// with GPADL and OPENCHANNEL messages through the fake guest and the partition, and signals
// with the SIGNAL_EVENT hypercall. The protocol itself is StorvscRings'.
#pragma once

#include "fake_guest.h"
#include "storvsc_rings.h"
#include "hvstor/vmbus/server.h"

namespace hvstor::test {

class FakeStorvsc : public StorvscRings {
public:
    FakeStorvsc(FakeHost& host, hv::Partition& p, FakeGuest& g)
        : StorvscRings(host,
                       [&p](Chan& c) { p.hypercall(0, 0x5D | (1u << 16), vmbus::Server::kSignalBase + c.relid, 0); }),
          g_(g) {}

    // GPADL + OPENCHANNEL for `relid`, rings at `base` (2 * kRingPages pages).
    std::optional<Chan> open(uint32_t relid, uint64_t base, uint32_t gpadl, uint32_t* open_status = nullptr) {
        Chan c = rings(relid, base);
        send_gpadl(relid, gpadl, base, 2 * kRingPages);
        auto created = wait_message<vmbus::GpadlCreated>(vmbus::MsgType::GpadlCreated);
        if (created.creation_status != 0) return std::nullopt;
        vmbus::OpenChannel o{};
        o.hdr.msgtype = uint32_t(vmbus::MsgType::OpenChannel);
        o.child_relid = relid;
        o.openid = relid;
        o.ringbuffer_gpadlhandle = gpadl;
        o.downstream_ringbuffer_pageoffset = kRingPages;
        g_.post(0, 1, o);
        auto r = wait_message<vmbus::OpenResult>(vmbus::MsgType::OpenChannelResult);
        if (open_status) *open_status = r.status;
        if (r.status != 0) return std::nullopt;
        return c;
    }

    void close(Chan& c) {
        vmbus::CloseChannel m{};
        m.hdr.msgtype = uint32_t(vmbus::MsgType::CloseChannel);
        m.child_relid = c.relid;
        g_.post(0, 1, m);
    }

    // Waits for a VMBus message of `type` on VP 0, skipping others into `others`, with no
    // bound of its own (the test runner's timeout ends a test that waits for ever).
    template <typename T> T wait_message(vmbus::MsgType type) {
        for (;;) {
            auto m = g_.take(0);
            if (!m) {
                std::this_thread::sleep_for(1ms);
                continue;
            }
            uint32_t mt;
            std::memcpy(&mt, m->data(), 4);
            if (mt == uint32_t(type) && m->size() >= sizeof(T)) {
                T out;
                std::memcpy(&out, m->data(), sizeof out);
                return out;
            }
            others.push_back(*m);
        }
    }
    // How many messages of `type` were skipped into `others`.
    size_t skipped(vmbus::MsgType type) const {
        size_t n = 0;
        for (const auto& m : others) {
            uint32_t mt = 0;
            std::memcpy(&mt, m.data(), std::min<size_t>(m.size(), 4));
            n += mt == uint32_t(type);
        }
        return n;
    }

    std::vector<std::vector<uint8_t>> others;

private:
    void send_gpadl(uint32_t relid, uint32_t id, uint64_t base, uint32_t pages) {
        std::vector<uint64_t> pfns;
        for (uint32_t i = 0; i < pages; i++) pfns.push_back((base >> 12) + i);
        std::vector<uint8_t> buf(240);
        vmbus::GpadlHeader h{};
        h.hdr.msgtype = uint32_t(vmbus::MsgType::GpadlHeader);
        h.child_relid = relid;
        h.gpadl = id;
        h.rangecount = 1;
        h.range_buflen = uint16_t(8 + 8 * pages);
        const uint64_t range = uint64_t(pages) * 4096;
        const size_t first = std::min<size_t>(pfns.size(), 26);
        std::memcpy(buf.data(), &h, sizeof h);
        std::memcpy(buf.data() + sizeof h, &range, 8);
        std::memcpy(buf.data() + sizeof h + 8, pfns.data(), first * 8);
        g_.post(0, 1, buf.data(), sizeof h + 8 + first * 8);
        for (size_t at = first; at < pfns.size(); at += 28) {
            const size_t n = std::min<size_t>(pfns.size() - at, 28);
            vmbus::GpadlBody b{};
            b.hdr.msgtype = uint32_t(vmbus::MsgType::GpadlBody);
            b.gpadl = id;
            std::memcpy(buf.data(), &b, sizeof b);
            std::memcpy(buf.data() + sizeof b, pfns.data() + at, n * 8);
            g_.post(0, 1, buf.data(), sizeof b + n * 8);
        }
    }

    FakeGuest& g_;
};

} // namespace hvstor::test
