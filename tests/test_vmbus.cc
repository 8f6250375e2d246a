#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <span>
#include <thread>
#include <type_traits>

#include "fake_guest.h"
#include "fake_host.h"
#include "hvstor/hyperv/partition.h"
#include "hvstor/vmbus/server.h"

using namespace hvstor;
using namespace hvstor::vmbus;
using hv::Status;
using hvstor::test::FakeGuest;
using hvstor::test::FakeHost;

namespace {

class FakeChannel : public ChannelHandler {
public:
    uint32_t on_open(const OpenRequest& r) override {
        opens++;
        ring_pages = uint32_t(r.ring_pfns.size());
        return status;
    }
    void on_close(uint32_t, CloseDone done) override {
        closes++;
        done();
    }
    void on_guest_signal(uint32_t) override { signals++; }
    void on_target_vp(uint32_t, uint32_t vp) override { target = vp; }
    uint32_t target = 0;
    uint32_t status = kStatusSuccess;
    int opens = 0, closes = 0, signals = 0;
    uint32_t ring_pages = 0;
};

class VmbusTest : public ::testing::Test {
protected:
    void SetUp() override {
        p.set_message_handler(&server);
        for (uint32_t vp = 0; vp < 4; vp++) g.enable_synic(vp);
    }

    InitiateContact contact(uint32_t ver, uint32_t vp = 0, uint8_t sint = 2) {
        InitiateContact c{};
        c.hdr.msgtype = uint32_t(MsgType::InitiateContact);
        c.version_requested = ver;
        c.target_vcpu = vp;
        if (ver >= version::kV5_0) c.v5.msg_sint = sint;
        return c;
    }
    // Negotiates as Linux does: 5.x on connection 4, older on 1.
    VersionResponse negotiate(uint32_t ver, uint32_t vp = 0) {
        auto c = contact(ver, vp);
        EXPECT_EQ(g.post(vp, ver >= version::kV5_0 ? 4 : 1, c), uint16_t(Status::Success));
        return g.take_as<VersionResponse>(vp);
    }
    template <typename T> T msg(MsgType t) {
        T m{};
        if constexpr (std::is_same_v<T, MsgHeader>) m.msgtype = uint32_t(t);
        else m.hdr.msgtype = uint32_t(t);
        return m;
    }
    void connect_and_list(uint32_t vp = 0) {
        ASSERT_EQ(negotiate(version::kV5_3, vp).version_supported, 1);
        g.post(vp, 1, msg<MsgHeader>(MsgType::RequestOffers));
        while (g.take(vp)) {
        }
    }
    // Sends a GPADL of `pages` pages for `relid`, split over header and bodies the way
    // Linux does (26 pfns in the header, 28 per body).
    void send_gpadl(uint32_t relid, uint32_t id, uint32_t pages, uint32_t extra_pfns = 0) {
        std::vector<uint8_t> buf(240);
        GpadlHeader h{};
        h.hdr.msgtype = uint32_t(MsgType::GpadlHeader);
        h.child_relid = relid;
        h.gpadl = id;
        h.rangecount = 1;
        h.range_buflen = uint16_t(8 + 8 * pages);
        std::vector<uint64_t> pfns;
        for (uint32_t i = 0; i < pages + extra_pfns; i++) pfns.push_back(0x1000 + i);
        const uint64_t range = uint64_t(pages) * 4096; // byte_count, offset 0
        size_t first = std::min<size_t>(pfns.size(), 26);
        std::memcpy(buf.data(), &h, sizeof h);
        std::memcpy(buf.data() + sizeof h, &range, 8);
        std::memcpy(buf.data() + sizeof h + 8, pfns.data(), first * 8);
        ASSERT_EQ(g.post(0, 1, buf.data(), sizeof h + 8 + first * 8), 0);
        for (size_t at = first; at < pfns.size(); at += 28) {
            size_t n = std::min<size_t>(pfns.size() - at, 28);
            GpadlBody b{};
            b.hdr.msgtype = uint32_t(MsgType::GpadlBody);
            b.gpadl = id;
            std::memcpy(buf.data(), &b, sizeof b);
            std::memcpy(buf.data() + sizeof b, pfns.data() + at, n * 8);
            ASSERT_EQ(g.post(0, 1, buf.data(), sizeof b + n * 8), 0);
        }
    }

    // Offers a channel with no device behind it, connects, and starts GPADL `id` for it with a
    // GPADL_HEADER of one range, `range_buflen` bytes of range words, that carries none of
    // them: they are left to GPADL_BODY messages (post_gpadl_body). Returns post()'s status.
    uint16_t start_gpadl_without_range_words(uint32_t id, uint16_t range_buflen) {
        OfferInfo a;
        a.type = kScsiControllerType;
        server.offer(a);
        connect_and_list();
        GpadlHeader h = msg<GpadlHeader>(MsgType::GpadlHeader);
        h.child_relid = 1;
        h.gpadl = id;
        h.rangecount = 1;
        h.range_buflen = range_buflen;
        return g.post(0, 1, h);
    }
    // A GPADL_BODY of GPADL `id` carrying `words` (none: the bare body). Returns post()'s status.
    uint16_t post_gpadl_body(uint32_t id, std::span<const uint64_t> words) {
        GpadlBody b = msg<GpadlBody>(MsgType::GpadlBody);
        b.gpadl = id;
        std::vector<uint8_t> buf(sizeof b + words.size_bytes());
        std::memcpy(buf.data(), &b, sizeof b);
        if (!words.empty()) std::memcpy(buf.data() + sizeof b, words.data(), words.size_bytes());
        return g.post(0, 1, buf.data(), buf.size());
    }

    // Offers one channel backed by `dev`, connects, and shares a 66-page ring GPADL 5.
    void offer_with_ring(FakeChannel& dev) {
        OfferInfo a;
        a.type = kScsiControllerType;
        a.handler = &dev;
        server.offer(a);
        connect_and_list();
        send_gpadl(1, 5, 66);
        g.take(0);
    }
    // offer_with_ring, then the guest opens the channel on that ring. Returns OPENCHANNEL's
    // answer status.
    uint32_t open_with_ring(FakeChannel& dev) {
        offer_with_ring(dev);
        g.post(0, 1, open_request());
        return g.take_as<OpenResult>(0).status;
    }
    // The host rescinds `relid`'s offer, the guest takes the RESCINDCHANNELOFFER and
    // releases the relid.
    void rescind_and_release(uint32_t relid) {
        ASSERT_TRUE(server.rescind(relid));
        g.take(0); // RESCINDCHANNELOFFER
        RelidReleased rr = msg<RelidReleased>(MsgType::RelidReleased);
        rr.child_relid = relid;
        g.post(0, 1, rr);
    }
    OpenChannel open_request() {
        OpenChannel o = msg<OpenChannel>(MsgType::OpenChannel);
        o.child_relid = 1;
        o.openid = 1;
        o.ringbuffer_gpadlhandle = 5;
        o.downstream_ringbuffer_pageoffset = 33;
        return o;
    }

    FakeHost host;
    hv::Partition p{host, hv::PartitionConfig{4, 0x5A58}};
    Server server{p.synic(), ServerConfig{}};
    FakeGuest g{host, p};
};

} // namespace

TEST_F(VmbusTest, EveryLinuxVersionNegotiates) {
    for (uint32_t ver : version::kAll) {
        auto r = negotiate(ver);
        EXPECT_EQ(r.hdr.msgtype, uint32_t(MsgType::VersionResponse));
        EXPECT_EQ(r.version_supported, 1) << std::hex << ver;
        EXPECT_EQ(r.msg_conn_id, ver >= version::kV5_0 ? 1u : 0u);
        EXPECT_EQ(server.negotiated_version(), ver);
    }
}

// The reproduction: with guest OS id 0 and the hypercall MSR 0 an INITIATE_CONTACT
// connected. Hyper-V raises #UD there; the partition refuses the call before the server sees
// it, and the guest that then does what Linux's hyperv_init() does connects.
TEST_F(VmbusTest, ContactWithoutGuestOsIdOrHypercallPageIsRefused) {
    ASSERT_EQ(p.wrmsr(0, hv::msr::kGuestOsId, 0), hv::MsrResult::Handled); // clears the page's enable bit too
    ASSERT_EQ(p.wrmsr(0, hv::msr::kHypercall, 0), hv::MsrResult::Handled);
    auto c = contact(version::kV5_3);
    EXPECT_EQ(g.post(0, 4, c), uint16_t(Status::OperationDenied));
    EXPECT_FALSE(g.take(0)) << "no VERSION_RESPONSE";
    EXPECT_FALSE(server.connected());
    EXPECT_TRUE(host.logged("call code 0x5c before a guest OS id is set"));
    // Identified, the page still off.
    ASSERT_EQ(p.wrmsr(0, hv::msr::kGuestOsId, FakeGuest::kLinuxGuestOsId), hv::MsrResult::Handled);
    EXPECT_EQ(g.post(0, 4, c), uint16_t(Status::OperationDenied));
    EXPECT_FALSE(server.connected());
    g.enable_hypercalls();
    EXPECT_EQ(negotiate(version::kV5_3).version_supported, 1);
    EXPECT_TRUE(server.connected());
}

TEST_F(VmbusTest, VersionsAboveMaxAreRefusedSoTheGuestMovesOn) {
    Server old{p.synic(), ServerConfig{version::kWin10Rs3, 65536}};
    p.set_message_handler(&old);
    for (uint32_t ver : {version::kV5_3, version::kV5_2, version::kV5_1, version::kV5_0}) {
        auto r = negotiate(ver);
        EXPECT_EQ(r.version_supported, 0) << std::hex << ver;
        EXPECT_FALSE(old.connected());
    }
    EXPECT_EQ(negotiate(version::kWin10Rs3).version_supported, 1);
    EXPECT_TRUE(old.connected());
}

TEST_F(VmbusTest, UnknownVersionsRefused) {
    for (uint32_t ver : {0x00010001u, 0x00000013u, 0x00060000u, 0x00050004u}) {
        auto c = contact(ver);
        g.post(0, 1, c);
        EXPECT_EQ(g.take_as<VersionResponse>(0).version_supported, 0) << std::hex << ver;
    }
    EXPECT_FALSE(server.connected());
}

TEST_F(VmbusTest, OldVersionOnConnection4IsInvalidConnection) {
    auto c = contact(version::kWin10);
    EXPECT_EQ(g.post(0, 4, c), uint16_t(Status::InvalidConnectionId));
    EXPECT_FALSE(g.take(0));
}

TEST_F(VmbusTest, UnknownConnectionId) {
    auto c = contact(version::kV5_3);
    EXPECT_EQ(g.post(0, 2, c), uint16_t(Status::InvalidConnectionId));
    EXPECT_EQ(g.post(0, 0x12345, c), uint16_t(Status::InvalidConnectionId));
}

TEST_F(VmbusTest, ResponseGoesToRequestedVpAndSint) {
    auto c = contact(version::kV5_3, 3, 5);
    g.enable_synic(3, 5);
    EXPECT_EQ(g.post(0, 4, c), 0);
    EXPECT_FALSE(g.take(0));
    auto r = g.take_as<VersionResponse>(3, 5);
    EXPECT_EQ(r.version_supported, 1);
    EXPECT_EQ(server.target_vp(), 3u);
    EXPECT_EQ(server.message_sint(), 5);
}

TEST_F(VmbusTest, BadContactRejected) {
    auto c = contact(version::kV5_3, 9);
    EXPECT_EQ(g.post(0, 4, c), uint16_t(Status::InvalidParameter)) << "vp out of range";
    c = contact(version::kV5_3, 0, 16);
    EXPECT_EQ(g.post(0, 4, c), uint16_t(Status::InvalidParameter)) << "sint out of range";
    uint8_t shorty[20] = {14};
    EXPECT_EQ(g.post(0, 4, shorty, sizeof shorty), uint16_t(Status::InvalidParameter)) << "truncated";
    uint8_t tiny[4] = {14};
    EXPECT_EQ(g.post(0, 1, tiny, sizeof tiny), uint16_t(Status::InvalidParameter));
    EXPECT_FALSE(server.connected());
}

TEST_F(VmbusTest, MessagesBeforeContactIgnored) {
    g.post(0, 1, msg<MsgHeader>(MsgType::RequestOffers));
    EXPECT_FALSE(g.take(0));
    EXPECT_EQ(server.stats().bad_messages, 1u);
}

TEST_F(VmbusTest, OffersThenAllOffersDelivered) {
    OfferInfo a;
    a.type = kScsiControllerType;
    a.instance = *Guid::parse("00000000-1111-2222-3333-444455556666");
    OfferInfo b = a;
    b.instance.bytes[15] = 0x77;
    EXPECT_EQ(server.offer(a), 1u);
    EXPECT_EQ(server.offer(b), 2u);
    ASSERT_EQ(negotiate(version::kV5_3).version_supported, 1);
    g.post(0, 1, msg<MsgHeader>(MsgType::RequestOffers));

    for (uint32_t relid : {1u, 2u}) {
        auto m = g.take(0);
        ASSERT_TRUE(m);
        ASSERT_GE(m->size(), 196u) << "the guest's minimum for OFFERCHANNEL";
        OfferChannel o;
        std::memcpy(&o, m->data(), sizeof o);
        EXPECT_EQ(o.hdr.msgtype, uint32_t(MsgType::OfferChannel));
        EXPECT_EQ(std::memcmp(o.offer.if_type, kScsiControllerType.bytes.data(), 16), 0);
        const Guid& inst = relid == 1 ? a.instance : b.instance;
        EXPECT_EQ(std::memcmp(o.offer.if_instance, inst.bytes.data(), 16), 0);
        EXPECT_EQ(o.child_relid, relid);
        EXPECT_EQ(o.monitor_allocated, 0) << "pitfall 3";
        EXPECT_EQ(o.is_dedicated_interrupt, 1);
        EXPECT_EQ(o.offer.sub_channel_index, 0);
        EXPECT_EQ(o.connection_id, Server::kSignalBase + relid);
    }
    EXPECT_EQ(g.take_as<MsgHeader>(0).msgtype, uint32_t(MsgType::AllOffersDelivered));
}

TEST_F(VmbusTest, ScsiGuidWireOrder) {
    const uint8_t wire[16] = {0xd9, 0x63, 0x61, 0xba, 0xa1, 0x04, 0x29, 0x4d,
                              0xb6, 0x05, 0x72, 0xe2, 0xff, 0xb1, 0xdc, 0x7f};
    EXPECT_EQ(std::memcmp(kScsiControllerType.bytes.data(), wire, 16), 0);
    EXPECT_EQ(kScsiControllerType.to_string(), "ba6163d9-04a1-4d29-b605-72e2ffb1dc7f");
    EXPECT_FALSE(Guid::parse("ba6163d9-04a1-4d29-b605-72e2ffb1dc7"));
    EXPECT_FALSE(Guid::parse("ba6163d9x04a1-4d29-b605-72e2ffb1dc7f"));
    EXPECT_FALSE(Guid::parse("zz6163d9-04a1-4d29-b605-72e2ffb1dc7f"));
}

TEST_F(VmbusTest, UnloadAnswersAndDisconnects) {
    connect_and_list();
    g.post(0, 1, msg<MsgHeader>(MsgType::Unload));
    EXPECT_EQ(g.take_as<MsgHeader>(0).msgtype, uint32_t(MsgType::UnloadResponse));
    EXPECT_FALSE(server.connected());
}

TEST_F(VmbusTest, GpadlAcrossBodiesAndTeardown) {
    OfferInfo a;
    a.type = kScsiControllerType;
    server.offer(a);
    connect_and_list();
    send_gpadl(1, 0xE1E10, 66); // a 2 x 128 KiB ring plus two header pages
    auto c = g.take_as<GpadlCreated>(0);
    EXPECT_EQ(c.hdr.msgtype, uint32_t(MsgType::GpadlCreated));
    EXPECT_EQ(c.gpadl, 0xE1E10u);
    EXPECT_EQ(c.child_relid, 1u);
    EXPECT_EQ(c.creation_status, kStatusSuccess);
    EXPECT_EQ(server.gpadl_count(), 1u);

    GpadlTeardown t = msg<GpadlTeardown>(MsgType::GpadlTeardown);
    t.child_relid = 1;
    t.gpadl = 0xE1E10;
    g.post(0, 1, t);
    auto d = g.take_as<GpadlTorndown>(0);
    EXPECT_EQ(d.hdr.msgtype, uint32_t(MsgType::GpadlTorndown));
    EXPECT_EQ(d.gpadl, 0xE1E10u);
    EXPECT_EQ(server.gpadl_count(), 0u);
}

TEST_F(VmbusTest, BadGpadlsAreAnsweredWithFailure) {
    OfferInfo a;
    a.type = kScsiControllerType;
    server.offer(a);
    connect_and_list();
    send_gpadl(7, 1, 4); // no such channel
    EXPECT_NE(g.take_as<GpadlCreated>(0).creation_status, kStatusSuccess);
    send_gpadl(1, 2, 40, 3); // more pages than announced
    EXPECT_NE(g.take_as<GpadlCreated>(0).creation_status, kStatusSuccess);
    send_gpadl(1, 3, 4);
    EXPECT_EQ(g.take_as<GpadlCreated>(0).creation_status, kStatusSuccess);
    send_gpadl(1, 3, 4); // duplicate id
    EXPECT_NE(g.take_as<GpadlCreated>(0).creation_status, kStatusSuccess);
    EXPECT_EQ(server.gpadl_count(), 1u);
}

TEST_F(VmbusTest, GpadlBodyWithoutPfnsBeforeAnyRangeWordIsHarmless) {
    // The header announces one range of two pages (three words) and carries none of them.
    ASSERT_EQ(start_gpadl_without_range_words(9, 3 * 8), 0);
    EXPECT_FALSE(g.take(0)) << "no answer before the GPADL is complete";
    // A body with no pfns while nothing is stored yet: nothing to copy (and, under UBSan,
    // no memcpy to the null data of an empty vector).
    ASSERT_EQ(post_gpadl_body(9, {}), 0);
    EXPECT_FALSE(g.take(0));
    // The words arrive in the next body and the GPADL is created.
    const uint64_t words[3] = {2 * 4096, 0x1000, 0x1001};
    ASSERT_EQ(post_gpadl_body(9, words), 0);
    auto c = g.take_as<GpadlCreated>(0);
    EXPECT_EQ(c.gpadl, 9u);
    EXPECT_EQ(c.creation_status, kStatusSuccess);
    EXPECT_EQ(server.gpadl_count(), 1u);
}

TEST_F(VmbusTest, GpadlCountIsBounded) {
    Server small{p.synic(), ServerConfig{version::kV5_3, 65536, 3}};
    p.set_message_handler(&small);
    OfferInfo a;
    a.type = kScsiControllerType;
    small.offer(a);
    ASSERT_EQ(negotiate(version::kV5_3).version_supported, 1);
    g.post(0, 1, msg<MsgHeader>(MsgType::RequestOffers));
    while (g.take(0)) {
    }
    for (uint32_t id = 1; id <= 4; id++) {
        send_gpadl(1, id, 2);
        auto c = g.take_as<GpadlCreated>(0);
        if (id <= 3) EXPECT_EQ(c.creation_status, kStatusSuccess) << id;
        else EXPECT_NE(c.creation_status, kStatusSuccess) << "over the limit";
    }
    EXPECT_EQ(small.gpadl_count(), 3u);
}

TEST_F(VmbusTest, OpenWithoutDeviceIsRefusedWithStatus) {
    OfferInfo a;
    a.type = kScsiControllerType;
    server.offer(a);
    connect_and_list();
    send_gpadl(1, 5, 66);
    g.take(0);
    OpenChannel o = msg<OpenChannel>(MsgType::OpenChannel);
    o.child_relid = 1;
    o.openid = 1;
    o.ringbuffer_gpadlhandle = 5;
    o.downstream_ringbuffer_pageoffset = 33;
    g.post(0, 1, o);
    auto r = g.take_as<OpenResult>(0);
    EXPECT_EQ(r.hdr.msgtype, uint32_t(MsgType::OpenChannelResult));
    EXPECT_EQ(r.child_relid, 1u);
    EXPECT_EQ(r.status, kStatusNotSupported);
    EXPECT_FALSE(server.channel_open(1));
}

// A message on a connection id the bus does not listen on, and a signal for a channel that
// is not open, are refused and logged.
TEST_F(VmbusTest, WrongConnectionIdsAreLogged) {
    EXPECT_EQ(g.post(0, 3, msg<MsgHeader>(MsgType::RequestOffers)), uint16_t(Status::InvalidConnectionId));
    EXPECT_TRUE(host.logged("vmbus: POST_MESSAGE connection_id 3 (want 1 or 4)"));
    EXPECT_EQ(uint16_t(p.hypercall(0, 0x5D | (1u << 16), Server::kSignalBase + 9, 0)),
              uint16_t(Status::InvalidConnectionId));
    EXPECT_TRUE(host.logged("vmbus: SIGNAL_EVENT connection_id " + std::to_string(Server::kSignalBase + 9) +
                            ": no open channel has it"));
}

TEST_F(VmbusTest, OpenCloseSignalWithDevice) {
    FakeChannel dev;
    offer_with_ring(dev);
    OpenChannel o = open_request();
    o.downstream_ringbuffer_pageoffset = 66; // past the end
    g.post(0, 1, o);
    EXPECT_NE(g.take_as<OpenResult>(0).status, kStatusSuccess);
    EXPECT_TRUE(host.logged("vmbus: OPENCHANNEL child_relid 1 gpadl 5 downstream_ringbuffer_pageoffset 66 "
                            "target_vp 0: the ring split lies outside the gpadl"));
    o.downstream_ringbuffer_pageoffset = 33;
    o.ringbuffer_gpadlhandle = 6; // unknown gpadl
    g.post(0, 1, o);
    EXPECT_NE(g.take_as<OpenResult>(0).status, kStatusSuccess);
    o.ringbuffer_gpadlhandle = 5;
    g.post(0, 1, o);
    EXPECT_EQ(g.take_as<OpenResult>(0).status, kStatusSuccess);
    EXPECT_EQ(dev.opens, 1);
    EXPECT_EQ(dev.ring_pages, 66u);
    EXPECT_TRUE(server.channel_open(1));

    EXPECT_EQ(uint16_t(p.hypercall(0, 0x5D | (1u << 16), Server::kSignalBase + 1, 0)), 0);
    EXPECT_EQ(dev.signals, 1);
    EXPECT_EQ(uint16_t(p.hypercall(0, 0x5D | (1u << 16), Server::kSignalBase + 2, 0)),
              uint16_t(Status::InvalidConnectionId));

    ModifyChannel m = msg<ModifyChannel>(MsgType::ModifyChannel);
    m.child_relid = 1;
    m.target_vp = 2;
    g.post(0, 1, m);
    EXPECT_EQ(g.take_as<ModifyChannelResponse>(0).status, kStatusSuccess);
    EXPECT_EQ(dev.target, 2u);

    CloseChannel c = msg<CloseChannel>(MsgType::CloseChannel);
    c.child_relid = 1;
    g.post(0, 1, c);
    EXPECT_EQ(dev.closes, 1);
    EXPECT_FALSE(server.channel_open(1));
    EXPECT_EQ(uint16_t(p.hypercall(0, 0x5D | (1u << 16), Server::kSignalBase + 1, 0)),
              uint16_t(Status::InvalidConnectionId));
}

TEST_F(VmbusTest, UnloadClosesOpenChannels) {
    FakeChannel dev;
    offer_with_ring(dev);
    g.post(0, 1, open_request());
    g.take(0);
    g.post(0, 1, msg<MsgHeader>(MsgType::Unload));
    EXPECT_EQ(dev.closes, 1);
    EXPECT_EQ(server.gpadl_count(), 0u);
}

TEST_F(VmbusTest, HotAddedOfferIsSentRightAway) {
    connect_and_list();
    OfferInfo a;
    a.type = kScsiControllerType;
    EXPECT_EQ(server.offer(a), 1u);
    auto o = g.take_as<OfferChannel>(0);
    EXPECT_EQ(o.hdr.msgtype, uint32_t(MsgType::OfferChannel));
    EXPECT_EQ(o.child_relid, 1u);
}

TEST_F(VmbusTest, ModifyResponseOnlyFrom53) {
    ASSERT_EQ(negotiate(version::kV5_2).version_supported, 1);
    ModifyChannel m = msg<ModifyChannel>(MsgType::ModifyChannel);
    m.child_relid = 1;
    g.post(0, 1, m);
    EXPECT_FALSE(g.take(0));
}

TEST_F(VmbusTest, GarbageNeverCrashes) {
    connect_and_list();
    std::vector<uint8_t> buf(240);
    uint32_t seed = 1;
    for (int i = 0; i < 20000; i++) {
        for (auto& b : buf) {
            seed = seed * 1103515245 + 12345;
            b = uint8_t(seed >> 16);
        }
        uint32_t type = 1 + (seed >> 8) % 25;
        std::memcpy(buf.data(), &type, 4);
        size_t len = (seed >> 4) % 241;
        g.post(0, 1, buf.data(), len);
        while (g.take(0)) {
        }
    }
    SUCCEED() << "bad messages counted: " << server.stats().bad_messages;
    EXPECT_GT(server.stats().bad_messages, 0u);
}

namespace {

// A device whose close finishes when the test says, like a worker draining slow I/O.
class SlowCloseChannel : public FakeChannel {
public:
    void on_close(uint32_t, CloseDone done) override {
        closes++;
        pending = std::move(done);
    }
    void finish_close() {
        CloseDone d = std::move(pending);
        pending = nullptr;
        d();
    }
    CloseDone pending;
};

} // namespace

// CLOSECHANNEL on one vCPU, OPENCHANNEL of the same relid on another while the close is
// still running: the open must be refused, or two workers would serve one channel.
TEST_F(VmbusTest, OpenIsRefusedWhileTheCloseIsInProgress) {
    SlowCloseChannel dev;
    ASSERT_EQ(open_with_ring(dev), kStatusSuccess);

    CloseChannel c = msg<CloseChannel>(MsgType::CloseChannel);
    c.child_relid = 1;
    g.post(1, 1, c); // returns at once: the device finishes its close later
    ASSERT_TRUE(dev.pending);
    g.post(2, 1, open_request());
    EXPECT_NE(g.take_as<OpenResult>(0).status, kStatusSuccess);
    EXPECT_EQ(dev.opens, 1) << "the device never saw the second open";
    dev.finish_close();
    EXPECT_EQ(dev.closes, 1);
    // Once the close has finished, the guest may open the channel again.
    g.post(0, 1, open_request());
    EXPECT_EQ(g.take_as<OpenResult>(0).status, kStatusSuccess);
    EXPECT_EQ(dev.opens, 2);
}

// The guest frees its ring pages once GPADL_TORNDOWN arrives: while the device still
// finishes its close (waiting for slow I/O), the answer is held back, and the vCPU that
// asked is never blocked meanwhile. A GPADL teardown of a ring still open is held too.
TEST_F(VmbusTest, RingGpadlTorndownWaitsForTheDevicesClose) {
    SlowCloseChannel dev;
    ASSERT_EQ(open_with_ring(dev), kStatusSuccess);
    GpadlTeardown t = msg<GpadlTeardown>(MsgType::GpadlTeardown);
    t.gpadl = 5;
    g.post(0, 1, t);
    EXPECT_FALSE(g.take(0)) << "torn down while the channel is open";
    CloseChannel c = msg<CloseChannel>(MsgType::CloseChannel);
    c.child_relid = 1;
    g.post(0, 1, c);
    ASSERT_TRUE(dev.pending);
    EXPECT_FALSE(g.take(0)) << "torn down while the device may still write the rings";
    dev.finish_close();
    auto r = g.take_as<GpadlTorndown>(0);
    EXPECT_EQ(r.hdr.msgtype, uint32_t(MsgType::GpadlTorndown));
    EXPECT_EQ(r.gpadl, 5u);
    // Any other GPADL is answered at once.
    send_gpadl(1, 6, 4);
    ASSERT_EQ(g.take_as<GpadlCreated>(0).creation_status, kStatusSuccess);
    t.gpadl = 6;
    g.post(0, 1, t);
    EXPECT_EQ(g.take_as<GpadlTorndown>(0).gpadl, 6u);
}

// UNLOAD (kexec, shutdown) closes every channel; the guest reuses all its memory once
// UNLOAD_RESPONSE arrives, so that waits for the devices too.
TEST_F(VmbusTest, UnloadResponseWaitsForEveryClose) {
    SlowCloseChannel dev;
    ASSERT_EQ(open_with_ring(dev), kStatusSuccess);
    g.post(0, 1, msg<MsgHeader>(MsgType::Unload));
    ASSERT_TRUE(dev.pending);
    EXPECT_FALSE(g.take(0)) << "UNLOAD_RESPONSE before the device stopped";
    dev.finish_close();
    EXPECT_EQ(g.take_as<MsgHeader>(0).msgtype, uint32_t(MsgType::UnloadResponse));
}

// A close that finished just before a reset is still posting what it owed (UNLOAD_RESPONSE
// here) when the reset comes: the reset waits for that, so nothing the old connection was
// owed reaches guest memory after it. It once returned as soon as no close was in progress.
TEST_F(VmbusTest, ResetWaitsForAnswersBeingPosted) {
    SlowCloseChannel dev;
    ASSERT_EQ(open_with_ring(dev), kStatusSuccess);
    g.post(0, 1, msg<MsgHeader>(MsgType::Unload));
    ASSERT_TRUE(dev.pending);
    // The answer then goes straight into the free slot, with its interrupt.
    ASSERT_FALSE(g.take(0)) << "the message slot is free";
    std::atomic<bool> posting{false}, go{false}, reset_done{false};
    std::atomic<int> polls{0};
    // The answer's interrupt holds the closer's thread in the middle of its post.
    host.on_raise = [&] {
        posting = true;
        while (!go) std::this_thread::yield();
    };
    std::thread closer([&] { dev.finish_close(); });
    while (!posting) std::this_thread::yield();
    host.on_poll = [&] { polls++; };
    std::thread resetter([&] {
        server.reset();
        reset_done = true;
    });
    while (!reset_done && polls == 0) std::this_thread::yield(); // it returned, or it waits
    EXPECT_FALSE(reset_done) << "the reset returned while the close's answer was being posted";
    go = true;
    closer.join();
    resetter.join();
    host.on_raise = nullptr;
    host.on_poll = nullptr;
    EXPECT_EQ(g.take_as<MsgHeader>(0).msgtype, uint32_t(MsgType::UnloadResponse));
}

// An OPENCHANNEL for a relid this connection was never offered (the guest skipped
// REQUESTOFFERS and guessed it) is refused.
TEST_F(VmbusTest, OpenOfARelidNotOfferedOnThisConnectionIsRefused) {
    // (The refusal is named in the guest-error log.)
    FakeChannel dev;
    OfferInfo a;
    a.type = kScsiControllerType;
    a.handler = &dev;
    server.offer(a);
    ASSERT_EQ(negotiate(version::kV5_3).version_supported, 1);
    send_gpadl(1, 5, 66);
    g.take(0);
    g.post(0, 1, open_request());
    EXPECT_NE(g.take_as<OpenResult>(0).status, kStatusSuccess);
    EXPECT_EQ(dev.opens, 0);
    EXPECT_TRUE(host.logged("OPENCHANNEL child_relid 1 gpadl 5 downstream_ringbuffer_pageoffset 33 target_vp 0: "
                            "not offered on this connection"));
}

// A GPADL_HEADER may carry no range words at all and leave them all to GPADL_BODY
// messages (Linux never does; any guest may). Found by the vmbus_messages fuzzer: the
// server copied zero words to the null data() of an empty vector (UBSan aborts on that).
TEST_F(VmbusTest, GpadlHeaderWithEveryRangeWordInBodies) {
    start_gpadl_without_range_words(9, 16); // {byte_count, byte_offset} and one pfn
    const uint64_t words[2] = {4096, 0x1000};
    post_gpadl_body(9, words);
    auto c = g.take_as<GpadlCreated>(0);
    EXPECT_EQ(c.gpadl, 9u);
    EXPECT_EQ(c.creation_status, kStatusSuccess);
}

// A user tracing with -trace 'hvstor_vmbus_*' sees the connection, the offer, the ring
// GPADL and the open, each with the values the guest sent; and the bus statistics count them.
TEST_F(VmbusTest, HandshakeIsTracedAndCounted) {
    FakeChannel dev;
    ASSERT_EQ(open_with_ring(dev), kStatusSuccess);
    EXPECT_EQ(host.traced(HVSTOR_TRACE_vmbus_connect),
              (std::vector<std::vector<uint64_t>>{{version::kV5_3, 0, 2}}));
    EXPECT_EQ(host.traced(HVSTOR_TRACE_vmbus_offer), (std::vector<std::vector<uint64_t>>{{1, 0}}));
    EXPECT_EQ(host.traced(HVSTOR_TRACE_vmbus_gpadl_create), (std::vector<std::vector<uint64_t>>{{1, 5, 66}}));
    EXPECT_EQ(host.traced(HVSTOR_TRACE_vmbus_open), (std::vector<std::vector<uint64_t>>{{1, 5, 33, 0}}));
    EXPECT_EQ(host.traced(HVSTOR_TRACE_vmbus_open_result), (std::vector<std::vector<uint64_t>>{{1, 0}}));
    // Every message in and out: INITIATE_CONTACT, REQUEST_OFFERS, GPADL_HEADER and its
    // bodies, OPENCHANNEL.
    const auto in = host.traced(HVSTOR_TRACE_vmbus_msg_in);
    ASSERT_GE(in.size(), 4u);
    EXPECT_EQ(in.front()[1], uint64_t(MsgType::InitiateContact));
    EXPECT_EQ(in.back()[1], uint64_t(MsgType::OpenChannel));
    const ServerStats s = server.stats();
    EXPECT_EQ(s.messages_in, in.size());
    EXPECT_EQ(s.messages_out, host.traced(HVSTOR_TRACE_vmbus_msg_out).size());
    EXPECT_EQ(s.offers, 1u);
    EXPECT_EQ(s.open_channels, 1u);
    EXPECT_EQ(s.gpadls, 1u);
    EXPECT_EQ(s.version, version::kV5_3);

    CloseChannel c = msg<CloseChannel>(MsgType::CloseChannel);
    c.child_relid = 1;
    g.post(0, 1, c);
    EXPECT_EQ(host.traced(HVSTOR_TRACE_vmbus_close), (std::vector<std::vector<uint64_t>>{{1}}));
    EXPECT_EQ(server.stats().open_channels, 0u);
}

// A guest that tears down the ring GPADL of an open channel again and again (re-creating
// the id in between) gets one held entry, not one per round: the torn-down GPADL keeps its
// id until its answer is sent, and the answer is sent once.
TEST_F(VmbusTest, HeldTorndownIsBoundedAndAnsweredOnce) {
    FakeChannel dev;
    ASSERT_EQ(open_with_ring(dev), kStatusSuccess);
    GpadlTeardown t = msg<GpadlTeardown>(MsgType::GpadlTeardown);
    t.gpadl = 5;
    for (int i = 0; i < 3000; i++) {
        g.post(0, 1, t);
        send_gpadl(1, 5, 66); // the id is still taken: refused
        ASSERT_EQ(g.take_as<GpadlCreated>(0).creation_status, kStatusInvalidParameter);
    }
    CloseChannel c = msg<CloseChannel>(MsgType::CloseChannel);
    c.child_relid = 1;
    g.post(0, 1, c);
    int torndown = 0;
    while (auto m = g.take(0)) {
        uint32_t type;
        std::memcpy(&type, m->data(), 4);
        torndown += type == uint32_t(MsgType::GpadlTorndown);
    }
    EXPECT_EQ(torndown, 1);
    EXPECT_EQ(server.gpadl_count(), 0u);
}

// Answers held for one connection (a ring's GPADL_TORNDOWN, UNLOAD_RESPONSE) are not sent
// to the next one when the close finishes after the guest reconnected (kexec).
TEST_F(VmbusTest, HeldAnswersAreNotSentToTheNextConnection) {
    SlowCloseChannel dev;
    ASSERT_EQ(open_with_ring(dev), kStatusSuccess);
    CloseChannel c = msg<CloseChannel>(MsgType::CloseChannel);
    c.child_relid = 1;
    g.post(0, 1, c);
    GpadlTeardown t = msg<GpadlTeardown>(MsgType::GpadlTeardown);
    t.gpadl = 5;
    g.post(0, 1, t);
    g.post(0, 1, msg<MsgHeader>(MsgType::Unload));
    EXPECT_FALSE(g.take(0));
    ASSERT_EQ(negotiate(version::kV5_3).version_supported, 1);
    dev.finish_close();
    auto m = g.take(0);
    uint32_t type = 0;
    if (m) std::memcpy(&type, m->data(), 4);
    EXPECT_FALSE(m) << "an answer of the old connection (message type " << type << ") reached the new one";
}

// A guest that never sends RELID_RELEASED keeps every rescinded relid: offers stop at
// kMaxRelid (memory stays bounded) with a log line naming why, and one release lets the next
// offer reuse that relid.
TEST_F(VmbusTest, UnreleasedRelidsAreBoundedAndReleaseReusesThem) {
    connect_and_list();
    FakeChannel dev;
    OfferInfo a;
    a.type = kScsiControllerType;
    a.handler = &dev;
    for (uint32_t i = 1; i <= Server::kMaxRelid; i++) {
        ASSERT_EQ(server.offer(a), i);
        ASSERT_TRUE(server.rescind(i));
    }
    while (g.take(0)) {
    }
    EXPECT_EQ(server.offer(a), 0u);
    EXPECT_TRUE(host.logged("vmbus: no relid left for a new offer: 2047 in use, 2047 of them rescinded and not "
                            "released by the guest"));
    RelidReleased rr = msg<RelidReleased>(MsgType::RelidReleased);
    rr.child_relid = 700;
    g.post(0, 1, rr);
    EXPECT_EQ(server.offer(a), 700u);
    EXPECT_EQ(server.offer(a), 0u);
}

// The guest releases the relid of a rescinded channel whose close still runs, then tears
// down its ring GPADL: the answer still waits for the close, which may touch the ring until
// it is done (the released offer's slot is gone, the close is not).
TEST_F(VmbusTest, RingTeardownAfterRelidReleaseWaitsForTheClose) {
    SlowCloseChannel dev;
    offer_with_ring(dev);
    g.post(0, 1, open_request());
    ASSERT_EQ(g.take_as<OpenResult>(0).status, kStatusSuccess);
    rescind_and_release(1);
    ASSERT_TRUE(dev.pending);  // the close is still running
    GpadlTeardown t = msg<GpadlTeardown>(MsgType::GpadlTeardown);
    t.gpadl = 5;
    g.post(0, 1, t);
    EXPECT_FALSE(g.take(0)) << "GPADL_TORNDOWN while the closing device may still touch the ring";
    dev.finish_close();
    EXPECT_EQ(g.take_as<GpadlTorndown>(0).gpadl, 5u);
}

// A CloseDone that comes after the guest released the relid and the slot went to another
// offer leaves the new offer alone.
TEST_F(VmbusTest, LateCloseDoneLeavesAReusedRelidAlone) {
    SlowCloseChannel dev;
    ASSERT_EQ(open_with_ring(dev), kStatusSuccess);
    rescind_and_release(1);
    ASSERT_TRUE(dev.pending);  // the close is still running
    SlowCloseChannel dev2;
    OfferInfo a;
    a.type = kScsiControllerType;
    a.handler = &dev2;
    ASSERT_EQ(server.offer(a), 1u);
    g.take(0); // its OFFERCHANNEL
    send_gpadl(1, 6, 66);
    g.take(0);
    OpenChannel o = open_request();
    o.ringbuffer_gpadlhandle = 6;
    g.post(0, 1, o);
    ASSERT_EQ(g.take_as<OpenResult>(0).status, kStatusSuccess);
    CloseChannel c = msg<CloseChannel>(MsgType::CloseChannel);
    c.child_relid = 1;
    g.post(0, 1, c);
    ASSERT_TRUE(dev2.pending);
    dev.finish_close(); // the old device's close: must not end the new one's
    g.post(0, 1, open_request());
    o.ringbuffer_gpadlhandle = 6;
    g.post(0, 1, o);
    EXPECT_NE(g.take_as<OpenResult>(0).status, kStatusSuccess) << "reopened while its close runs";
    dev2.finish_close();
}
