// What the storvsp-only tests share: a controller with a RAM disk at LUN 0 on a loopback
// bus (no partition, SynIC or VMBus server), a fake guest on its rings, and the primary
// channel opened as storvsc opens it.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "fake_bus.h"
#include "fake_host.h"
#include "storvsc_rings.h"
#include "hvstor/backend/backend.h"
#include "hvstor/scsi/disk.h"
#include "hvstor/storvsp/controller.h"

namespace hvstor::test {

class StorvspBusRig : public ::testing::Test {
public:
    static constexpr const char* kInstance = "f8b3781b-1e82-4818-a1c3-63d806ec1500";

protected:
    static constexpr uint64_t kRings = 0x400000;
    static constexpr uint64_t kBuf = 0x500000;
    static constexpr uint32_t kPages = 2 * StorvscRings::kRingPages;

    // The controller (`cfg`, `instance`) and a RAM disk of `bytes` at LUN 0, offered.
    void build(const storvsp::ControllerConfig& cfg = {}, const char* instance = kInstance,
               size_t bytes = 1 << 20) {
        std::string err;
        ram = backend::make_ram(bytes, err);
        ASSERT_TRUE(ram) << err;
        ctl = std::make_unique<storvsp::Controller>(host, bus, *vmbus::Guid::parse(instance), cfg);
        ASSERT_TRUE(ctl->start(err)) << err;
        disk = std::make_unique<scsi::Disk>(*ram, scsi::DiskConfig{}, *ctl);
        ASSERT_TRUE(ctl->attach(0, disk.get(), err)) << err;
    }
    void TearDown() override {
        ctl.reset();
        disk.reset();
    }
    StorvscRings::Chan open_primary() {
        auto c = guest.rings(ctl->primary_relid(), kRings);
        EXPECT_EQ(bus.open(c.relid, kRings, kPages), vmbus::kStatusSuccess);
        return c;
    }
    // CREATE_SUB_CHANNELS for `n` on the primary `c`: the operation status of the answer. The
    // offers follow it, from the channel's worker.
    uint32_t ask_subchannels(StorvscRings::Chan& c, uint16_t n) {
        storvsp::VstorPacket v{};
        v.operation = uint32_t(storvsp::Operation::CreateSubChannels);
        v.sub_channel_count = n;
        guest.send(c, v);
        return guest.wait(c).pkt.status;
    }

    FakeHost host;
    LoopbackBus bus;
    StorvscRings guest{host, [this](StorvscRings::Chan& c) { bus.signal(c.relid); }};
    std::unique_ptr<backend::Backend> ram;
    std::unique_ptr<storvsp::Controller> ctl;
    std::unique_ptr<scsi::Disk> disk;
};

} // namespace hvstor::test
