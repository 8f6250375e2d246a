// A capi::Machine with one controller, and a fake storvsc connected to it as Linux connects:
// for the machine's unit tests (tests/capi/test_machine.cc) and the reset benchmark
// (tests/bench/reset.cc).
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <optional>

#include "fake_guest.h"
#include "fake_host.h"
#include "fake_storvsc.h"
#include "machine.h"

namespace hvstor::test {

using namespace hvstor::storvsp;

constexpr uint64_t kRings = 0x400000;
constexpr uint64_t kBuf = 0x500000;

inline VmscsiRequest rw10(bool write, uint32_t lba, uint16_t blocks) {
    VmscsiRequest s{};
    s.cdb_length = 10;
    s.cdb_or_sense[0] = write ? 0x2A : 0x28;
    s.data_in = write ? kDataWrite : kDataRead;
    s.sense_info_length = kSenseBytes;
    s.cdb_or_sense[2] = uint8_t(lba >> 24);
    s.cdb_or_sense[3] = uint8_t(lba >> 16);
    s.cdb_or_sense[4] = uint8_t(lba >> 8);
    s.cdb_or_sense[5] = uint8_t(lba);
    s.cdb_or_sense[7] = uint8_t(blocks >> 8);
    s.cdb_or_sense[8] = uint8_t(blocks);
    return s;
}

struct MachineRig {
    // As Linux does at every boot: hyperv_init() (a machine reset cleared the guest OS id
    // and the hypercall page), the SynIC, then the VMBus handshake.
    void connect() { connect(g, guest); }
    // The same for a guest of another machine (one that loaded a saved state, say).
    static void connect(FakeGuest& g, FakeStorvsc& guest) {
        g.enable_hypercalls();
        for (uint32_t vp = 0; vp < 2; vp++) g.enable_synic(vp);
        vmbus::InitiateContact c{};
        c.hdr.msgtype = uint32_t(vmbus::MsgType::InitiateContact);
        c.version_requested = vmbus::version::kV5_3;
        c.v5.msg_sint = 2;
        g.post(0, 4, c);
        guest.wait_message<vmbus::VersionResponse>(vmbus::MsgType::VersionResponse);
        vmbus::MsgHeader h{uint32_t(vmbus::MsgType::RequestOffers), 0};
        g.post(0, 1, h);
        guest.wait_message<vmbus::MsgHeader>(vmbus::MsgType::AllOffersDelivered);
    }

    // A controller with a disk built from `spec`, and the guest connected to it through
    // the open primary channel `ch`.
    void serve(const capi::DiskSpec& spec) {
        capi::ScsiController& c =
            machine->add_controller(*vmbus::Guid::parse("f8b3781b-1e82-4818-a1c3-63d806ec1500"), {});
        controller = &c;
        disk = &c.add_disk(spec);
        connect();
        ch = guest.open(c.controller().primary_relid(), kRings, 0x100);
        ASSERT_TRUE(ch);
        ASSERT_TRUE(guest.handshake(*ch));
    }

    // One READ(10) or WRITE(10) of 4 KiB at `buf`; the completion.
    FakeStorvsc::Completion rw(bool write, uint32_t lba, uint64_t buf) {
        guest.send_srb(*ch, rw10(write, lba, 8), buf, 4096);
        return guest.wait(*ch);
    }

    static capi::DiskSpec ram(bool read_only) {
        capi::DiskSpec spec;
        spec.backend = "ram";
        spec.size = 1 << 20;
        spec.read_only = read_only;
        return spec;
    }

    FakeHost host;
    std::unique_ptr<capi::Machine> machine =
        std::make_unique<capi::Machine>(host, capi::MachineConfig{2, 0x5A58});
    FakeGuest g{host, machine->partition()};
    FakeStorvsc guest{host, machine->partition(), g};
    // The next completion on `c` that is not a rescan notice; `rescans` counts the notices.
    static FakeStorvsc::Completion answer(FakeStorvsc& guest, FakeStorvsc::Chan& c, int* rescans = nullptr) {
        for (;;) {
            auto r = guest.wait(c);
            if (r.pkt.operation != uint32_t(Operation::EnumerateBus)) return r;
            if (rescans) ++*rescans;
        }
    }
    // The same on the rig's channel; counts the notices.
    FakeStorvsc::Completion completion() { return answer(guest, *ch, &rescans); }

    capi::ScsiController* controller = nullptr;
    capi::AttachedDisk* disk = nullptr;
    std::optional<FakeStorvsc::Chan> ch;
    int rescans = 0;
};

} // namespace hvstor::test
