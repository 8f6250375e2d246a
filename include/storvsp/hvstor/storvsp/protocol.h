// The storage protocol between hv_storvsc (guest) and the host, as carried in VMBus
// packets: the 64-byte vstor packet and the SRB inside it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace hvstor::storvsp {

enum class Operation : uint32_t {
    CompleteIo = 1,
    RemoveDevice = 2,
    ExecuteSrb = 3,
    ResetLun = 4,
    ResetAdapter = 5,
    ResetBus = 6,
    BeginInitialization = 7,
    EndInitialization = 8,
    QueryProtocolVersion = 9,
    QueryProperties = 10,
    EnumerateBus = 11,
    FcHbaData = 12,
    CreateSubChannels = 13,
    EventNotification = 14,
};

// Protocol versions, major << 8 | minor.
constexpr uint16_t kVersionWin8 = 0x0501;
constexpr uint16_t kVersionWin8_1 = 0x0600; // "Blue"
constexpr uint16_t kVersionWin10 = 0x0602;  // "Threshold"

// NT status values in vstor packets.
constexpr uint32_t kStatusSuccess = 0;
constexpr uint32_t kStatusRevisionMismatch = 0xC0000059;
constexpr uint32_t kStatusInvalidDeviceRequest = 0xC0000010;
constexpr uint32_t kStatusInvalidParameter = 0xC000000D;
constexpr uint32_t kStatusInvalidDeviceState = 0xC0000184;
constexpr uint32_t kStatusUnsuccessful = 0xC0000001;

// SRB status values; the guest reads sense data only with AutosenseValid.
constexpr uint8_t kSrbSuccess = 0x01;
constexpr uint8_t kSrbAborted = 0x02;
constexpr uint8_t kSrbError = 0x04;
constexpr uint8_t kSrbInvalidRequest = 0x06;
constexpr uint8_t kSrbDataOverrun = 0x12;
constexpr uint8_t kSrbInvalidLun = 0x20;
constexpr uint8_t kSrbAutosenseValid = 0x80;

// data_in
constexpr uint8_t kDataWrite = 0;
constexpr uint8_t kDataRead = 1;
constexpr uint8_t kDataNone = 2;

constexpr size_t kSenseBytes = 20;
constexpr uint32_t kFlagMultiChannel = 1;

#pragma pack(push, 1)

struct VmscsiRequest {
    uint16_t length;
    uint8_t srb_status;
    uint8_t scsi_status;
    uint8_t port_number;
    uint8_t path_id;
    uint8_t target_id;
    uint8_t lun;
    uint8_t cdb_length;
    uint8_t sense_info_length;
    uint8_t data_in;
    uint8_t reserved;
    uint32_t data_transfer_length;
    uint8_t cdb_or_sense[kSenseBytes]; // CDB in the request, sense data in the completion
    // win8 extension
    uint16_t reserve;
    uint8_t queue_tag;
    uint8_t queue_action;
    uint32_t srb_flags;
    uint32_t time_out_value;
    uint32_t queue_sort_key;
};
static_assert(sizeof(VmscsiRequest) == 52);
static_assert(offsetof(VmscsiRequest, data_transfer_length) == 12);
static_assert(offsetof(VmscsiRequest, cdb_or_sense) == 16);
static_assert(offsetof(VmscsiRequest, srb_flags) == 40);

struct ChannelProperties {
    uint32_t reserved;
    uint16_t max_channel_count; // the guest takes it as the number of SUBchannels
    uint16_t reserved1;
    uint32_t flags;
    uint32_t max_transfer_bytes;
    uint64_t reserved2;
};
static_assert(sizeof(ChannelProperties) == 24);

// FCHBA_DATA's answer (Linux: struct hv_fc_wwn_packet): the HBA's world wide names, each
// big-endian as FC writes them; the guest takes the primary pair when primary_active is
// set, else the secondary.
struct FcWwnPacket {
    uint8_t primary_active;
    uint8_t reserved[3];
    uint8_t primary_port_wwn[8];
    uint8_t primary_node_wwn[8];
    uint8_t secondary_port_wwn[8];
    uint8_t secondary_node_wwn[8];
};
static_assert(sizeof(FcWwnPacket) == 36);
static_assert(offsetof(FcWwnPacket, primary_port_wwn) == 4);

struct ProtocolVersion {
    uint16_t major_minor;
    uint16_t revision;
};

struct VstorPacket {
    uint32_t operation;
    uint32_t flags;
    uint32_t status;
    union {
        VmscsiRequest srb;
        ChannelProperties properties;
        ProtocolVersion version;
        uint16_t sub_channel_count;
        FcWwnPacket wwn;
        uint8_t raw[52];
    };
};
static_assert(sizeof(VstorPacket) == 64);
// Guests before win8 negotiation (Linux before 5.19) send the packet without the SRB's
// win8 extension.
constexpr size_t kVstorPacketMin = 48;
static_assert(offsetof(VstorPacket, wwn) + sizeof(FcWwnPacket) <= kVstorPacketMin,
              "FCHBA_DATA's answer fits in the shortest packet, sized like the request");

#pragma pack(pop)

} // namespace hvstor::storvsp
