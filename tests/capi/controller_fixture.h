// The fixture of the capi tests that build disks with DiskFactory: a machine with one SCSI
// controller, and the message a disk's settings are refused with.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "disk_factory.h"
#include "fake_host.h"
#include "machine.h"

namespace hvstor::capi::test {

class ControllerTest : public ::testing::Test {
protected:
    // The message `spec` is refused with, "" if it is accepted.
    std::string refusal(const DiskSpec& spec, const DiskFactory& f = DiskFactory()) {
        try {
            f.attach(ctl(), spec);
        } catch (const DiskError& e) {
            return e.what();
        }
        return "";
    }
    storvsp::Controller& ctl() { return controller.controller(); }

    hvstor::test::FakeHost host;
    Machine machine{host, MachineConfig{1, 0x5A58}};
    ScsiController& controller =
        machine.add_controller(*vmbus::Guid::parse("f8b3781b-1e82-4818-a1c3-63d806ec1500"), {});
};

} // namespace hvstor::capi::test
