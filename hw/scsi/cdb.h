// Private to the SCSI target: opcodes, additional sense codes, big-endian field access and
// the limits the disk both advertises and enforces.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "hvstor/scsi/disk.h"

namespace hvstor::scsi::detail {

namespace op {
constexpr uint8_t kTestUnitReady = 0x00, kRequestSense = 0x03, kRead6 = 0x08, kWrite6 = 0x0A,
                  kInquiry = 0x12, kModeSelect6 = 0x15, kModeSense6 = 0x1A, kStartStopUnit = 0x1B,
                  kReadCapacity10 = 0x25, kRead10 = 0x28, kWrite10 = 0x2A, kVerify10 = 0x2F,
                  kSyncCache10 = 0x35, kWriteSame10 = 0x41, kUnmap = 0x42, kModeSelect10 = 0x55,
                  kModeSense10 = 0x5A, kPersistentReserveIn = 0x5E, kPersistentReserveOut = 0x5F,
                  kRead16 = 0x88, kWrite16 = 0x8A, kVerify16 = 0x8F, kSyncCache16 = 0x91,
                  kWriteSame16 = 0x93, kServiceActionIn16 = 0x9E, kReportLuns = 0xA0,
                  kRead12 = 0xA8, kWrite12 = 0xAA;
constexpr uint8_t kSaReadCapacity16 = 0x10;
} // namespace op

// Additional sense code and qualifier.
struct Asc {
    uint8_t asc, ascq;
};
constexpr Asc kNoAdditionalSense{0x00, 0x00};
constexpr Asc kWriteError{0x0C, 0x00};
constexpr Asc kUnrecoveredReadError{0x11, 0x00};
constexpr Asc kParameterListLengthError{0x1A, 0x00};
constexpr Asc kInvalidOpcode{0x20, 0x00};
constexpr Asc kLbaOutOfRange{0x21, 0x00};
constexpr Asc kInvalidFieldInCdb{0x24, 0x00};
constexpr Asc kLunNotSupported{0x25, 0x00};
constexpr Asc kInvalidFieldInParameterList{0x26, 0x00};
constexpr Asc kWriteProtected{0x27, 0x00};
constexpr Asc kSpaceAllocationFailed{0x27, 0x07};
constexpr Asc kCapacityDataChanged{0x2A, 0x09};
constexpr Asc kCommandsClearedByDeviceServer{0x2F, 0x02};
constexpr Asc kSavingParametersNotSupported{0x39, 0x00};

// Work per command, advertised in the Block Limits VPD page and enforced (target.h turns
// them into blocks), so that a reset or an unplug, which wait for every command's backend
// work, never wait minutes for one command:
// - WRITE SAME, any pattern, with or without UNMAP: the disk's maximum transfer length, and
//   at most 8 MiB, as Hyper-V's virtual disk limits it (OpenVMM's scsidisk, which mirrors
//   it: VHDMP_MAX_WRITE_SAME_LENGTH_BYTES, capped by the maximum transfer length). A
//   non-zero pattern is written out in full, so one command writes no more than one
//   transfer would. Above it: CHECK CONDITION, ILLEGAL REQUEST, INVALID FIELD IN CDB (SBC).
// - UNMAP: 2 GiB over all descriptors of one command (SBC's MAXIMUM UNMAP LBA COUNT is per
//   command), at most 64 descriptors. Hyper-V advertises no bound (0xFFFFFFFF blocks, 4096
//   descriptors); here a discard is a hole punch or MADV_DONTNEED, but a file system that
//   cannot punch holes falls back to writing zeros, where 2 GiB is seconds, not minutes.
//   Above it: ILLEGAL REQUEST, INVALID FIELD IN PARAMETER LIST (SBC). Linux sends one
//   descriptor per UNMAP and splits discards at the advertised count.
constexpr uint64_t kMaxWriteSameBytes = 8u << 20;
constexpr uint64_t kMaxUnmapBytes = 2ull << 30;
constexpr uint32_t kMaxUnmapDescriptors = 64;
constexpr uint32_t kUnmapGranularity = 8;           // 4 KiB: file system blocks and pages
constexpr uint8_t kPhysicalBlockExponent = 3;       // 4 KiB physical sectors, as Hyper-V reports
constexpr uint32_t kMaxBlockSize = 4096;

inline uint16_t get16(const uint8_t* p) { return static_cast<uint16_t>(p[0] << 8 | p[1]); }
inline uint32_t get32(const uint8_t* p) {
    return static_cast<uint32_t>(p[0]) << 24 | static_cast<uint32_t>(p[1]) << 16 |
           static_cast<uint32_t>(p[2]) << 8 | p[3];
}
inline uint64_t get64(const uint8_t* p) { return static_cast<uint64_t>(get32(p)) << 32 | get32(p + 4); }
inline void put16(uint8_t* p, uint16_t v) {
    p[0] = static_cast<uint8_t>(v >> 8);
    p[1] = static_cast<uint8_t>(v);
}
inline void put32(uint8_t* p, uint32_t v) {
    put16(p, static_cast<uint16_t>(v >> 16));
    put16(p + 2, static_cast<uint16_t>(v));
}
inline void put64(uint8_t* p, uint64_t v) {
    put32(p, static_cast<uint32_t>(v >> 32));
    put32(p + 4, static_cast<uint32_t>(v));
}

// READ (6, 10, 12, 16); WRITE (6, 10, 12, 16).
inline bool is_read_op(uint8_t o) { return o == op::kRead6 || o == op::kRead10 || o == op::kRead12 || o == op::kRead16; }
inline bool is_write_op(uint8_t o) {
    return o == op::kWrite6 || o == op::kWrite10 || o == op::kWrite12 || o == op::kWrite16;
}

// The LBA and block count of a command that carries them in READ's layout for its CDB
// size: READ and WRITE (6, 10, 12, 16), VERIFY and WRITE SAME (10, 16). A 6-byte length of
// 0 means 256 blocks. False for any other command; lba and blocks are then untouched.
inline bool block_extent(const uint8_t* c, uint64_t& lba, uint64_t& blocks) {
    switch (c[0]) {
    case op::kRead6:
    case op::kWrite6:
        lba = (c[1] & 0x1Fu) << 16 | c[2] << 8 | c[3];
        blocks = c[4] == 0 ? 256 : c[4];
        return true;
    case op::kRead10:
    case op::kWrite10:
    case op::kVerify10:
    case op::kWriteSame10:
        lba = get32(&c[2]);
        blocks = get16(&c[7]);
        return true;
    case op::kRead12:
    case op::kWrite12:
        lba = get32(&c[2]);
        blocks = get32(&c[6]);
        return true;
    case op::kRead16:
    case op::kWrite16:
    case op::kVerify16:
    case op::kWriteSame16:
        lba = get64(&c[2]);
        blocks = get32(&c[10]);
        return true;
    default:
        return false;
    }
}

// Length of a CDB from its group code; 0 for the groups with no fixed length.
uint8_t cdb_size(uint8_t opcode);

// CHECK CONDITION with fixed-format sense; nothing transferred.
void fail(Command& cmd, uint8_t key, Asc asc);
inline void fail_cdb(Command& cmd) { fail(cmd, kSenseIllegalRequest, kInvalidFieldInCdb); }

// GOOD with nothing transferred.
void succeed(Command& cmd);

// BUSY, so that the guest retries: memory for a rare command's helper was short.
void busy(Command& cmd);

// Answers a data-in command with `len` bytes of `data`, cut to the allocation length and
// the guest's buffer. A buffer going the wrong way is ILLEGAL REQUEST.
void reply(Command& cmd, const uint8_t* data, size_t len, size_t alloc);

// Copies space-padded ASCII into a fixed-width field, blanking unprintable characters.
void put_ascii(uint8_t* dst, size_t width, const std::string& s);

// Fixed-format sense data (current error) in `out`; returns its length, 18.
uint8_t fixed_sense(std::array<uint8_t, 18>& out, uint8_t key, Asc asc);

// REQUEST SENSE answered as data (GOOD status) carrying the given sense.
void reply_sense_data(Command& cmd, uint8_t key, Asc asc);

} // namespace hvstor::scsi::detail
