// Shared by the fault injection tests (test_fault.cc, test_fault_srb.cc): the opcodes they
// match and the text form's parse, expected to succeed or to fail.
#pragma once

#include <string>

#include "scsi_test.h"
#include "hvstor/scsi/fault.h"

namespace hvstor::scsi::test {

inline constexpr uint8_t kRead10 = 0x28, kWrite10 = 0x2A, kSyncCache10 = 0x35;

inline FaultSpec parse_ok(const std::string& text) {
    FaultSpec f;
    std::string err;
    EXPECT_TRUE(parse_fault(text, f, err)) << text << ": " << err;
    return f;
}

inline std::string parse_error(const std::string& text) {
    FaultSpec f;
    std::string err;
    EXPECT_FALSE(parse_fault(text, f, err)) << text;
    return err;
}

} // namespace hvstor::scsi::test
