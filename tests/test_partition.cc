#include <gtest/gtest.h>

#include <chrono>

#include "fake_guest.h"
#include "fake_host.h"
#include "hvstor/hyperv/msr.h"
#include "hvstor/hyperv/partition.h"

using namespace hvstor;
using namespace hvstor::hv;
using hvstor::test::FakeGuest;
using hvstor::test::FakeHost;

namespace {

constexpr uint16_t kPort = 0x5A58;

class PartitionTest : public ::testing::Test {
protected:
    // What Linux's hyperv_init() does before its first hypercall (FakeGuest does it too).
    void enable_hypercalls() {
        ASSERT_EQ(p.wrmsr(0, msr::kGuestOsId, FakeGuest::kLinuxGuestOsId), MsrResult::Handled);
        ASSERT_EQ(p.wrmsr(0, msr::kHypercall, FakeGuest::kHypercallPage | 1), MsrResult::Handled);
    }

    FakeHost host;
    Partition p{host, PartitionConfig{4, kPort}};
};

// Records what the partition hands to the VMBus layer.
class RecordingHandler : public MessageHandler {
public:
    Status on_post_message(uint32_t vp, uint32_t conn, uint32_t type, std::span<const uint8_t> payload) override {
        last_vp = vp;
        last_conn = conn;
        last_type = type;
        last_payload.assign(payload.begin(), payload.end());
        posts++;
        return Status::Success;
    }
    Status on_signal_event(uint32_t vp, uint32_t conn, uint16_t flag) override {
        last_vp = vp;
        last_conn = conn;
        last_flag = flag;
        signals++;
        return conn == 77 ? Status::Success : Status::InvalidConnectionId;
    }
    uint32_t last_vp = 0, last_conn = 0, last_type = 0;
    uint16_t last_flag = 0;
    std::vector<uint8_t> last_payload;
    int posts = 0, signals = 0;
};

uint16_t status(uint64_t rax) { return static_cast<uint16_t>(rax); }

} // namespace

TEST_F(PartitionTest, NonHypervMsrsAreNotOurs) {
    uint64_t v;
    EXPECT_EQ(p.rdmsr(0, 0x10, v), MsrResult::NotOurs);
    EXPECT_EQ(p.wrmsr(0, 0xC0000080, 0), MsrResult::NotOurs);
    EXPECT_EQ(p.rdmsr(0, 0x40000200, v), MsrResult::NotOurs);
}

TEST_F(PartitionTest, UnimplementedHypervMsrFaults) {
    uint64_t v;
    EXPECT_EQ(p.rdmsr(0, 0x40000020, v), MsrResult::Fault) << "reference counter is not offered";
    EXPECT_EQ(p.wrmsr(0, 0x40000105, 1), MsrResult::Fault);
    EXPECT_GE(p.stats().msr_faults, 2u);
}

TEST_F(PartitionTest, VpIndexPerVpAndReadOnly) {
    for (uint32_t vp = 0; vp < 4; vp++) {
        uint64_t v = 99;
        ASSERT_EQ(p.rdmsr(vp, msr::kVpIndex, v), MsrResult::Handled);
        EXPECT_EQ(v, vp);
    }
    EXPECT_EQ(p.wrmsr(1, msr::kVpIndex, 3), MsrResult::Fault);
    uint64_t v;
    EXPECT_EQ(p.rdmsr(4, msr::kVpIndex, v), MsrResult::Fault) << "vp out of range";
}

TEST_F(PartitionTest, GuestOsIdAndHypercallArePartitionWide) {
    EXPECT_EQ(p.wrmsr(0, msr::kGuestOsId, 0x8100000000000000ull), MsrResult::Handled);
    uint64_t v = 0;
    EXPECT_EQ(p.rdmsr(3, msr::kGuestOsId, v), MsrResult::Handled);
    EXPECT_EQ(v, 0x8100000000000000ull);
    EXPECT_EQ(p.wrmsr(0, msr::kHypercall, 0x300000 | 1), MsrResult::Handled);
    EXPECT_EQ(p.rdmsr(2, msr::kHypercall, v), MsrResult::Handled);
    EXPECT_EQ(v & 1, 1u) << "the guest reads the enable bit back on other CPUs";
    EXPECT_EQ(v & ~0xFFFull, 0x300000u);
}

TEST_F(PartitionTest, HypercallPageNeedsGuestOsId) {
    EXPECT_EQ(p.wrmsr(0, msr::kHypercall, 0x300000 | 1), MsrResult::Handled);
    EXPECT_FALSE(p.hypercall_page_enabled());
    EXPECT_EQ(host.load<uint32_t>(0x300000), 0u) << "no stub written";
}

TEST_F(PartitionTest, HypercallPageGetsStubStartingWithEndbr64) {
    p.wrmsr(0, msr::kGuestOsId, 1);
    ASSERT_EQ(p.wrmsr(0, msr::kHypercall, 0x300000 | 1), MsrResult::Handled);
    EXPECT_TRUE(p.hypercall_page_enabled());
    const uint8_t* page = host.ram(0x300000);
    const uint8_t endbr[] = {0xF3, 0x0F, 0x1E, 0xFA};
    EXPECT_EQ(std::memcmp(page, endbr, 4), 0);
    auto stub = Partition::hypercall_stub(kPort);
    EXPECT_EQ(std::memcmp(page, stub.data(), stub.size()), 0);
    EXPECT_EQ(page[9] | page[10] << 8, kPort) << "mov dx, port";
    EXPECT_EQ(page[stub.size() - 1], 0xC3) << "ret";
}

TEST_F(PartitionTest, HypercallPageOutsideRamFaults) {
    p.wrmsr(0, msr::kGuestOsId, 1);
    EXPECT_EQ(p.wrmsr(0, msr::kHypercall, FakeHost::kHoleStart | 1), MsrResult::Fault);
    EXPECT_EQ(p.wrmsr(0, msr::kHypercall, (FakeHost::kRamSize + 0x10000) | 1), MsrResult::Fault);
    EXPECT_FALSE(p.hypercall_page_enabled());
}

TEST_F(PartitionTest, LockedHypercallMsrIgnoresWrites) {
    p.wrmsr(0, msr::kGuestOsId, 1);
    p.wrmsr(0, msr::kHypercall, 0x300000 | 3);
    p.wrmsr(0, msr::kHypercall, 0);
    EXPECT_TRUE(p.hypercall_page_enabled());
}

TEST_F(PartitionTest, VpAssistAndTscInvariantAccepted) {
    EXPECT_EQ(p.wrmsr(2, msr::kVpAssistPage, 0x400000 | 1), MsrResult::Handled);
    uint64_t v = 0;
    p.rdmsr(2, msr::kVpAssistPage, v);
    EXPECT_EQ(v, 0x400001u);
    p.rdmsr(1, msr::kVpAssistPage, v);
    EXPECT_EQ(v, 0u) << "per VP";
    EXPECT_EQ(p.wrmsr(0, msr::kTscInvariantControl, 1), MsrResult::Handled);
}

// Linux's hyperv_cleanup() (before kexec, and on the kdump path) reads the reference TSC MSR
// and writes it back with the enable bit clear, whether or not the page was offered: that
// must not fault. Enabling the page, which is not offered, does.
TEST_F(PartitionTest, ReferenceTscCanBeTurnedOffNotOn) {
    uint64_t v = 1;
    EXPECT_EQ(p.rdmsr(1, msr::kReferenceTsc, v), MsrResult::Handled);
    EXPECT_EQ(v, 0u);
    EXPECT_EQ(p.wrmsr(1, msr::kReferenceTsc, v & ~1ull), MsrResult::Handled);
    EXPECT_EQ(p.wrmsr(0, msr::kReferenceTsc, 0x7000), MsrResult::Handled);
    p.rdmsr(1, msr::kReferenceTsc, v);
    EXPECT_EQ(v, 0x7000u) << "partition-wide";
    EXPECT_TRUE(host.guest_errors.empty());
    EXPECT_EQ(p.wrmsr(0, msr::kReferenceTsc, 0x7001), MsrResult::Fault);
    EXPECT_TRUE(host.logged("wrmsr MSR 0x40000021 value 0x7001: the reference TSC page is not offered (#GP)"));
    p.rdmsr(0, msr::kReferenceTsc, v);
    EXPECT_EQ(v, 0x7000u) << "a refused write changes nothing";
    p.reset();
    p.rdmsr(0, msr::kReferenceTsc, v);
    EXPECT_EQ(v, 0u);
}

TEST_F(PartitionTest, SynicMsrs) {
    uint64_t v = 0;
    EXPECT_EQ(p.rdmsr(0, msr::kSversion, v), MsrResult::Handled);
    EXPECT_EQ(v, 1u);
    EXPECT_EQ(p.wrmsr(0, msr::kSversion, 2), MsrResult::Fault);
    p.rdmsr(1, msr::kSint0 + 2, v);
    EXPECT_TRUE(v & (1ull << 16)) << "SINTs start masked";
    EXPECT_EQ(p.wrmsr(1, msr::kSint0 + 2, 0x05), MsrResult::Fault) << "vector < 16 unmasked";
    EXPECT_EQ(p.wrmsr(1, msr::kSint0 + 2, 0xF3), MsrResult::Handled);
    p.rdmsr(1, msr::kSint0 + 2, v);
    EXPECT_EQ(v, 0xF3u);
    p.rdmsr(0, msr::kSint0 + 2, v);
    EXPECT_NE(v, 0xF3u) << "per VP";
}

TEST_F(PartitionTest, UnknownCallCode) {
    enable_hypercalls();
    EXPECT_EQ(status(p.hypercall(0, 0x0001, 0, 0)), uint16_t(Status::InvalidHypercallCode));
    EXPECT_EQ(status(p.hypercall(0, 0xFFFF, 0, 0)), uint16_t(Status::InvalidHypercallCode));
    EXPECT_EQ(p.stats().hypercall_errors, 2u);
}

TEST_F(PartitionTest, PostMessageReachesHandler) {
    RecordingHandler h;
    p.set_message_handler(&h);
    FakeGuest g(host, p);
    uint8_t msg[20] = {1, 2, 3};
    EXPECT_EQ(g.post(2, 1, msg, sizeof msg), uint16_t(Status::Success));
    EXPECT_EQ(h.posts, 1);
    EXPECT_EQ(h.last_vp, 2u);
    EXPECT_EQ(h.last_conn, 1u);
    EXPECT_EQ(h.last_type, 1u);
    EXPECT_EQ(h.last_payload.size(), 20u);
    EXPECT_EQ(h.last_payload[2], 3);
}

TEST_F(PartitionTest, PostMessageBadInputs) {
    enable_hypercalls();
    RecordingHandler h;
    p.set_message_handler(&h);
    uint32_t hdr[4] = {1, 0, 1, 241};
    host.write_gpa(0x200000, hdr, sizeof hdr);
    EXPECT_EQ(status(p.hypercall(0, 0x5C, 0x200000, 0)), uint16_t(Status::InvalidParameter)) << "payload > 240";
    hdr[3] = 0xFFFFFFFF;
    host.write_gpa(0x200000, hdr, sizeof hdr);
    EXPECT_EQ(status(p.hypercall(0, 0x5C, 0x200000, 0)), uint16_t(Status::InvalidParameter)) << "huge size";
    hdr[3] = 8;
    hdr[2] = 0;
    host.write_gpa(0x200000, hdr, sizeof hdr);
    EXPECT_EQ(status(p.hypercall(0, 0x5C, 0x200000, 0)), uint16_t(Status::InvalidParameter)) << "type 0";
    hdr[2] = 0x80000001;
    host.write_gpa(0x200000, hdr, sizeof hdr);
    EXPECT_EQ(status(p.hypercall(0, 0x5C, 0x200000, 0)), uint16_t(Status::InvalidParameter)) << "hypervisor type";
    EXPECT_EQ(status(p.hypercall(0, 0x5C, 0x200004, 0)), uint16_t(Status::InvalidAlignment));
    EXPECT_EQ(status(p.hypercall(0, 0x5C, 0x200FF8, 0)), uint16_t(Status::InvalidAlignment)) << "crosses a page";
    EXPECT_EQ(status(p.hypercall(0, 0x5C, FakeHost::kHoleStart, 0)), uint16_t(Status::InvalidParameter)) << "MMIO";
    EXPECT_EQ(status(p.hypercall(0, 0x5C, FakeHost::kRamSize + 4096, 0)), uint16_t(Status::InvalidParameter));
    EXPECT_EQ(status(p.hypercall(0, 0x5C, ~0ull & ~0xFFFull, 0)), uint16_t(Status::InvalidParameter));
    EXPECT_EQ(status(p.hypercall(0, 0x5C | (1u << 16), 0x200000, 0)), uint16_t(Status::InvalidHypercallInput)) << "fast";
    EXPECT_EQ(status(p.hypercall(0, 0x5C | (1ull << 32), 0x200000, 0)), uint16_t(Status::InvalidHypercallInput)) << "rep";
    // A payload running off the end of RAM.
    uint32_t tail[4] = {1, 0, 1, 240};
    const uint64_t at = FakeHost::kHoleStart - 16;
    host.write_gpa(at, tail, sizeof tail);
    EXPECT_NE(status(p.hypercall(0, 0x5C, at, 0)), uint16_t(Status::Success));
    EXPECT_EQ(h.posts, 0);
}

TEST_F(PartitionTest, PostMessageWithoutVmbusIsInvalidConnection) {
    FakeGuest g(host, p);
    uint8_t msg[8] = {};
    EXPECT_EQ(g.post(0, 1, msg, sizeof msg), uint16_t(Status::InvalidConnectionId));
}

TEST_F(PartitionTest, SignalEventFastAndSlow) {
    enable_hypercalls();
    RecordingHandler h;
    p.set_message_handler(&h);
    EXPECT_EQ(status(p.hypercall(1, 0x5D | (1u << 16), 77, 0)), uint16_t(Status::Success));
    EXPECT_EQ(h.last_conn, 77u);
    EXPECT_EQ(status(p.hypercall(1, 0x5D | (1u << 16), 78 | (5ull << 32), 0)), uint16_t(Status::InvalidConnectionId));
    EXPECT_EQ(h.last_flag, 5);
    EXPECT_EQ(status(p.hypercall(1, 0x5D | (1u << 16), 77 | (1ull << 48), 0)), uint16_t(Status::InvalidHypercallInput));
    host.store<uint64_t>(0x200000, 77);
    EXPECT_EQ(status(p.hypercall(1, 0x5D, 0x200000, 0)), uint16_t(Status::Success));
    EXPECT_EQ(status(p.hypercall(1, 0x5D, FakeHost::kHoleStart, 0)), uint16_t(Status::InvalidParameter));
    EXPECT_EQ(h.signals, 3);
}

// Every refused call and every #GP is counted and says why, naming the field and its value.
// A status the message handler chose is the handler's to report.
TEST_F(PartitionTest, RefusalsAreLoggedWithTheFieldAndValue) {
    enable_hypercalls();
    RecordingHandler h;
    p.set_message_handler(&h);
    uint32_t hdr[4] = {1, 0, 1, 241};
    host.write_gpa(0x200000, hdr, sizeof hdr);
    p.hypercall(0, 0x5C, 0x200000, 0);
    EXPECT_TRUE(host.logged("hyperv: VP 0 hypercall control 0x5c input 0x200000: POST_MESSAGE payload_size 241 > 240"));
    hdr[2] = 0x80000001;
    hdr[3] = 8;
    host.write_gpa(0x200000, hdr, sizeof hdr);
    p.hypercall(0, 0x5C, 0x200000, 0);
    EXPECT_TRUE(host.logged("POST_MESSAGE message_type 0x80000001 (want 1..0x7fffffff)"));
    p.hypercall(1, 0x5D | (1u << 16), 77 | (1ull << 48), 0);
    EXPECT_TRUE(host.logged("hyperv: VP 1 hypercall control 0x1005d input 0x100000000004d: SIGNAL_EVENT reserved bits "
                            "0x1 (want 0)"));
    p.hypercall(0, 0x0001, 0, 0);
    EXPECT_TRUE(host.logged("input 0x0: unknown call code"));
    p.hypercall(0, 0x5C | (3ull << 32), 0x200000, 0);
    EXPECT_TRUE(host.logged("rep count 3, rep start 0, variable header 0 (want 0, 0, 0)"));
    EXPECT_EQ(p.wrmsr(0, msr::kSversion, 2), MsrResult::Fault);
    EXPECT_TRUE(host.logged("hyperv: VP 0 wrmsr MSR 0x40000081 value 0x2: refused by the SynIC"));
    uint64_t v;
    EXPECT_EQ(p.rdmsr(2, 0x40000020, v), MsrResult::Fault);
    EXPECT_TRUE(host.logged("hyperv: VP 2 rdmsr MSR 0x40000020: not implemented (#GP)"));
    EXPECT_EQ(p.stats().msr_faults, 2u) << "the SynIC's #GP is counted too";
    const size_t lines = host.guest_errors.size();
    EXPECT_EQ(status(p.hypercall(1, 0x5D | (1u << 16), 78, 0)), uint16_t(Status::InvalidConnectionId));
    EXPECT_EQ(host.guest_errors.size(), lines) << "the handler's refusal";
}

TEST_F(PartitionTest, HypercallFromUnknownVp) {
    enable_hypercalls();
    EXPECT_EQ(status(p.hypercall(9, 0x5D | (1u << 16), 77, 0)), uint16_t(Status::InvalidParameter));
}

// Hyper-V raises #UD for a hypercall until the guest has set a guest OS id and enabled the
// hypercall page; the port the stub traps through is reachable without either, so the model
// refuses such a call with OperationDenied, counts it and says why.
TEST_F(PartitionTest, HypercallsBeforeAGuestOsIdAreRefused) {
    RecordingHandler h;
    p.set_message_handler(&h);
    EXPECT_EQ(status(p.hypercall(1, 0x5D | (1u << 16), 77, 0)), uint16_t(Status::OperationDenied));
    // The enable bit without a guest OS id does not enable the page.
    EXPECT_EQ(p.wrmsr(0, msr::kHypercall, FakeGuest::kHypercallPage | 1), MsrResult::Handled);
    uint32_t hdr[4] = {1, 0, 1, 8};
    host.write_gpa(0x200000, hdr, sizeof hdr);
    EXPECT_EQ(status(p.hypercall(0, 0x5C, 0x200000, 0)), uint16_t(Status::OperationDenied));
    EXPECT_EQ(h.signals + h.posts, 0) << "nothing reaches the VMBus server";
    EXPECT_EQ(p.stats().hypercalls, 2u);
    EXPECT_EQ(p.stats().hypercall_errors, 2u);
    EXPECT_TRUE(host.logged("hyperv: VP 1 hypercall control 0x1005d input 0x4d: call code 0x5d before a guest OS id "
                            "is set (Hyper-V raises #UD) (status 8)"));
    EXPECT_TRUE(host.logged("call code 0x5c before a guest OS id is set"));
}

TEST_F(PartitionTest, HypercallsWithThePageDisabledAreRefused) {
    RecordingHandler h;
    p.set_message_handler(&h);
    ASSERT_EQ(p.wrmsr(0, msr::kGuestOsId, FakeGuest::kLinuxGuestOsId), MsrResult::Handled);
    EXPECT_EQ(status(p.hypercall(2, 0x5D | (1u << 16), 77, 0)), uint16_t(Status::OperationDenied));
    // A page address without the enable bit.
    ASSERT_EQ(p.wrmsr(0, msr::kHypercall, FakeGuest::kHypercallPage), MsrResult::Handled);
    EXPECT_EQ(status(p.hypercall(2, 0x5D | (1u << 16), 77, 0)), uint16_t(Status::OperationDenied));
    EXPECT_EQ(h.signals, 0);
    EXPECT_EQ(p.stats().hypercall_errors, 2u);
    EXPECT_EQ(host.count_logged("call code 0x5d with the hypercall page disabled (Hyper-V raises #UD)"), 2u);
}

TEST_F(PartitionTest, HypercallsAcceptedOnceTheGuestIdentifiedItselfAndEnabledThePage) {
    RecordingHandler h;
    p.set_message_handler(&h);
    enable_hypercalls();
    EXPECT_EQ(status(p.hypercall(2, 0x5D | (1u << 16), 77, 0)), uint16_t(Status::Success));
    EXPECT_EQ(h.signals, 1);
    EXPECT_EQ(p.stats().hypercall_errors, 0u);
    EXPECT_TRUE(host.guest_errors.empty());
}

// Clearing the enable bit, or the guest OS id (which disables the page: TLFS), or a machine
// reset turns hypercalls off again: what Linux's hyperv_cleanup() does before kexec.
TEST_F(PartitionTest, HypercallsRefusedAgainOnceThePageIsDisabled) {
    RecordingHandler h;
    p.set_message_handler(&h);
    auto signal = [&] { return status(p.hypercall(0, 0x5D | (1u << 16), 77, 0)); };
    enable_hypercalls();
    ASSERT_EQ(signal(), uint16_t(Status::Success));
    ASSERT_EQ(p.wrmsr(0, msr::kHypercall, FakeGuest::kHypercallPage), MsrResult::Handled);
    EXPECT_EQ(signal(), uint16_t(Status::OperationDenied));
    EXPECT_TRUE(host.logged("with the hypercall page disabled"));
    enable_hypercalls();
    ASSERT_EQ(signal(), uint16_t(Status::Success));
    ASSERT_EQ(p.wrmsr(0, msr::kGuestOsId, 0), MsrResult::Handled);
    EXPECT_FALSE(p.hypercall_page_enabled());
    EXPECT_EQ(signal(), uint16_t(Status::OperationDenied));
    enable_hypercalls();
    ASSERT_EQ(signal(), uint16_t(Status::Success));
    p.reset();
    EXPECT_EQ(signal(), uint16_t(Status::OperationDenied));
    EXPECT_EQ(h.signals, 3);
    EXPECT_EQ(p.stats().hypercall_errors, 3u);
}

// A guest that calls in a loop without a page fills no log: a burst, then one line a second.
TEST_F(PartitionTest, RefusedHypercallsAreLoggedRateLimited) {
    host.stop_clock();
    for (int i = 0; i < 100; i++) p.hypercall(0, 0x5D | (1u << 16), 77, 0);
    EXPECT_EQ(p.stats().hypercall_errors, 100u);
    EXPECT_EQ(host.guest_errors.size(), size_t(GuestErrorLog::kBurst));
    host.advance_clock(std::chrono::seconds(1));
    p.hypercall(0, 0x5D | (1u << 16), 77, 0);
    ASSERT_EQ(host.guest_errors.size(), size_t(GuestErrorLog::kBurst) + 1);
    EXPECT_NE(host.guest_errors.back().find("(80 more held back)"), std::string::npos) << host.guest_errors.back();
}

TEST_F(PartitionTest, ResetClearsState) {
    p.wrmsr(0, msr::kGuestOsId, 1);
    p.wrmsr(0, msr::kHypercall, 0x300000 | 1);
    p.wrmsr(0, msr::kSimp, 0x100000 | 1);
    p.reset();
    uint64_t v = 1;
    p.rdmsr(0, msr::kGuestOsId, v);
    EXPECT_EQ(v, 0u);
    p.rdmsr(0, msr::kSimp, v);
    EXPECT_EQ(v, 0u);
    EXPECT_FALSE(p.hypercall_page_enabled());
}
