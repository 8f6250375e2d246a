// Ring buffers against a guest that changes shared memory while the host reads it.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "fake_host.h"
#include "hvstor/vmbus/ring.h"

using namespace hvstor;
using namespace hvstor::vmbus;
using hvstor::test::FakeHost;

namespace {

constexpr uint64_t kRingGpa = 0x200000;
constexpr uint32_t kPages = 3; // header + two data pages

IncomingRing make_incoming(FakeHost& host) {
    std::vector<uint64_t> pfns;
    for (uint32_t i = 0; i < kPages; i++) pfns.push_back(kRingGpa / 4096 + i);
    RingPages pages;
    EXPECT_TRUE(pages.map(host, pfns));
    return IncomingRing(std::move(pages));
}

// A guest flips offset8 of a queued packet between a sane value and one past the packet
// while the host peeks at it over and over. Whatever the timing, the packet handed on
// must carry the descriptor that was checked: a header fetched a second time from guest
// memory could say the payload starts 512 KiB past a 32-byte packet.
TEST(RingTest, DescriptorIsFetchedOnceAndHandedOnAsChecked) {
    FakeHost host;
    IncomingRing ring = make_incoming(host);
    PacketDescriptor d{};
    d.type = uint16_t(PacketType::DataInband);
    d.offset8 = 2;
    d.len8 = 4;
    d.trans_id = 7;
    uint8_t* data = host.ram(kRingGpa + 4096);
    std::memcpy(data, &d, sizeof d);
    std::atomic_ref<uint32_t>(*reinterpret_cast<uint32_t*>(host.ram(kRingGpa))).store(32 + 8);

    std::atomic<bool> stop{false};
    std::atomic<uint64_t> flips{0};
    std::thread guest([&] {
        std::atomic_ref<uint16_t> offset8(*reinterpret_cast<uint16_t*>(data + 2));
        while (!stop.load(std::memory_order_relaxed)) {
            // As long in each state, so that a read lands in either.
            offset8.store(0xFFFF, std::memory_order_relaxed);
            flips.fetch_add(1, std::memory_order_relaxed);
            offset8.store(2, std::memory_order_relaxed);
            flips.fetch_add(1, std::memory_order_relaxed);
        }
    });
    // Counted, not timed: enough rounds that the reads interleave with the flips on any
    // machine that runs both threads at once.
    uint64_t ok = 0, corrupt = 0, inconsistent = 0;
    std::vector<uint8_t> pkt;
    for (int i = 0; i < 2000000; i++) {
        PacketDescriptor got{};
        switch (ring.peek(got, pkt)) {
        case IncomingRing::Status::Ok: {
            ok++;
            PacketDescriptor inpkt;
            std::memcpy(&inpkt, pkt.data(), sizeof inpkt);
            if (std::memcmp(&inpkt, &got, sizeof got) != 0 || uint32_t(inpkt.offset8) * 8 > pkt.size() ||
                uint32_t(got.len8) * 8 != pkt.size())
                inconsistent++;
            break;
        }
        case IncomingRing::Status::Corrupt: corrupt++; break;
        case IncomingRing::Status::Empty: ADD_FAILURE() << "the packet vanished"; break;
        }
    }
    stop = true;
    guest.join();
    EXPECT_EQ(inconsistent, 0u) << ok << " packets peeked, " << corrupt << " refused, " << flips.load() << " flips";
    EXPECT_GT(ok, 0u);
}

} // namespace

// A channel's handler sets the largest packet it takes: one of exactly that length is
// read, one 8 bytes longer is an impossible descriptor.
TEST(RingTest, PacketsUpToTheHandlersMaximumAreRead) {
    FakeHost host;
    std::vector<uint64_t> pfns;
    for (uint32_t i = 0; i < kPages; i++) pfns.push_back(kRingGpa / 4096 + i);
    for (const uint32_t len : {4096u, 4104u}) {
        std::memset(host.ram(kRingGpa), 0, kPages * 4096);
        RingPages pages;
        ASSERT_TRUE(pages.map(host, pfns));
        IncomingRing ring(std::move(pages), 4096);
        PacketDescriptor d{};
        d.type = uint16_t(PacketType::DataInband);
        d.offset8 = 2;
        d.len8 = uint16_t(len / 8);
        d.trans_id = len;
        std::memcpy(host.ram(kRingGpa + 4096), &d, sizeof d);
        std::atomic_ref<uint32_t>(*reinterpret_cast<uint32_t*>(host.ram(kRingGpa))).store(len + 8);
        PacketDescriptor got{};
        std::vector<uint8_t> pkt;
        EXPECT_EQ(ring.peek(got, pkt), len == 4096 ? IncomingRing::Status::Ok : IncomingRing::Status::Corrupt) << len;
        if (len == 4096) {
            EXPECT_EQ(pkt.size(), 4096u);
        }
    }
}
