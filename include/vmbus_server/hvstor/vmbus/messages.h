// VMBus channel management messages (host <-> guest over SynIC SINT 2), laid out as
// the Linux guest (include/linux/hyperv.h) and Hyper-V exchange them.
#pragma once

#include <cstddef>
#include <cstdint>

namespace hvstor::vmbus {

// The SynIC message type VMBus channel messages travel with.
constexpr uint32_t kHvMessageTypeVmbus = 1;
// Connection ids the guest posts to: 4 for INITIATE_CONTACT from version 5.0 on,
// 1 for everything else (and the msg_conn_id we hand out).
constexpr uint32_t kMessageConnectionId = 1;
constexpr uint32_t kMessageConnectionId4 = 4;
constexpr uint8_t kVmbusSint = 2;

enum class MsgType : uint32_t {
    Invalid = 0,
    OfferChannel = 1,
    RescindChannelOffer = 2,
    RequestOffers = 3,
    AllOffersDelivered = 4,
    OpenChannel = 5,
    OpenChannelResult = 6,
    CloseChannel = 7,
    GpadlHeader = 8,
    GpadlBody = 9,
    GpadlCreated = 10,
    GpadlTeardown = 11,
    GpadlTorndown = 12,
    RelidReleased = 13,
    InitiateContact = 14,
    VersionResponse = 15,
    Unload = 16,
    UnloadResponse = 17,
    ModifyChannel = 22,
    ModifyChannelResponse = 24,
};

// Protocol versions, major << 16 | minor.
namespace version {
constexpr uint32_t kWin8 = 0x00020004;     // 2.4
constexpr uint32_t kWin8_1 = 0x00030000;   // 3.0
constexpr uint32_t kWin10 = 0x00040000;    // 4.0
constexpr uint32_t kWin10Rs3 = 0x00040001; // 4.1
constexpr uint32_t kV5_0 = 0x00050000;
constexpr uint32_t kV5_1 = 0x00050001;
constexpr uint32_t kV5_2 = 0x00050002;
constexpr uint32_t kV5_3 = 0x00050003;
// Everything this server speaks, newest first (the order Linux tries them).
constexpr uint32_t kAll[] = {kV5_3, kV5_2, kV5_1, kV5_0, kWin10Rs3, kWin10, kWin8_1, kWin8};
} // namespace version

#pragma pack(push, 1)

struct MsgHeader {
    uint32_t msgtype;
    uint32_t padding;
};
static_assert(sizeof(MsgHeader) == 8);

struct ContactV5 {
    uint8_t msg_sint;
    uint8_t msg_vtl;
    uint8_t reserved[2];
    uint32_t feature_flags;
};
static_assert(sizeof(ContactV5) == 8);

struct InitiateContact {
    MsgHeader hdr;
    uint32_t version_requested;
    uint32_t target_vcpu;
    union {
        uint64_t interrupt_page; // before 5.0
        ContactV5 v5;            // 5.0 and later
    };
    uint64_t monitor_page1;
    uint64_t monitor_page2;
};
static_assert(sizeof(InitiateContact) == 40);

struct VersionResponse {
    MsgHeader hdr;
    uint8_t version_supported;
    uint8_t connection_state;
    uint16_t padding;
    uint32_t msg_conn_id;
};
static_assert(sizeof(VersionResponse) == 16);

struct ChannelOffer {
    uint8_t if_type[16];
    uint8_t if_instance[16];
    uint64_t reserved1;
    uint64_t reserved2;
    uint16_t chn_flags;
    uint16_t mmio_megabytes;
    uint8_t user_def[120]; // pipe mode and user data
    uint16_t sub_channel_index;
    uint16_t reserved3;
};
static_assert(sizeof(ChannelOffer) == 176);

struct OfferChannel {
    MsgHeader hdr;
    ChannelOffer offer;
    uint32_t child_relid;
    uint8_t monitorid;
    uint8_t monitor_allocated; // bit 0
    uint16_t is_dedicated_interrupt; // bit 0
    uint32_t connection_id;
};
static_assert(sizeof(OfferChannel) == 196);
static_assert(offsetof(OfferChannel, child_relid) == 184);

struct RescindOffer {
    MsgHeader hdr;
    uint32_t child_relid;
};
static_assert(sizeof(RescindOffer) == 12);

struct GpaRange {
    uint32_t byte_count;
    uint32_t byte_offset;
    // uint64_t pfn_array[] follows
};
static_assert(sizeof(GpaRange) == 8);

struct GpadlHeader {
    MsgHeader hdr;
    uint32_t child_relid;
    uint32_t gpadl;
    uint16_t range_buflen;
    uint16_t rangecount;
    // GpaRange range[] follows
};
static_assert(sizeof(GpadlHeader) == 20);

struct GpadlBody {
    MsgHeader hdr;
    uint32_t msgnumber;
    uint32_t gpadl;
    // uint64_t pfn[] follows
};
static_assert(sizeof(GpadlBody) == 16);

struct GpadlCreated {
    MsgHeader hdr;
    uint32_t child_relid;
    uint32_t gpadl;
    uint32_t creation_status;
};
static_assert(sizeof(GpadlCreated) == 20);

struct GpadlTeardown {
    MsgHeader hdr;
    uint32_t child_relid;
    uint32_t gpadl;
};
static_assert(sizeof(GpadlTeardown) == 16);

struct GpadlTorndown {
    MsgHeader hdr;
    uint32_t gpadl;
};
static_assert(sizeof(GpadlTorndown) == 12);

struct OpenChannel {
    MsgHeader hdr;
    uint32_t child_relid;
    uint32_t openid;
    uint32_t ringbuffer_gpadlhandle;
    uint32_t target_vp;
    uint32_t downstream_ringbuffer_pageoffset;
    uint8_t userdata[120];
};
static_assert(sizeof(OpenChannel) == 148);

struct OpenResult {
    MsgHeader hdr;
    uint32_t child_relid;
    uint32_t openid;
    uint32_t status;
};
static_assert(sizeof(OpenResult) == 20);

struct CloseChannel {
    MsgHeader hdr;
    uint32_t child_relid;
};
static_assert(sizeof(CloseChannel) == 12);

struct RelidReleased {
    MsgHeader hdr;
    uint32_t child_relid;
};
static_assert(sizeof(RelidReleased) == 12);

struct ModifyChannel {
    MsgHeader hdr;
    uint32_t child_relid;
    uint32_t target_vp;
};
static_assert(sizeof(ModifyChannel) == 16);

struct ModifyChannelResponse {
    MsgHeader hdr;
    uint32_t child_relid;
    uint32_t status;
};
static_assert(sizeof(ModifyChannelResponse) == 16);

#pragma pack(pop)

} // namespace hvstor::vmbus
