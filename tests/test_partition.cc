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

namespace {

// The partition's saved state written field by field, as another build (or a hostile
// migration source) would: the tests below change one field at a time.
struct PartitionImage {
    uint32_t tag = 0x48565054;
    uint32_t version = 1;
    uint64_t guest_os_id = 0, hypercall = 0, tsc_invariant = 0, reference_tsc = 0;
    std::vector<uint64_t> vp_assist = std::vector<uint64_t>(4);
    std::vector<uint8_t> synic; // the SynIC's section, as Synic::save writes it

    std::vector<uint8_t> bytes() const {
        state::Writer w;
        w.begin(tag, version);
        w.u64(guest_os_id);
        w.u64(hypercall);
        w.u64(tsc_invariant);
        w.u64(reference_tsc);
        w.u32(uint32_t(vp_assist.size()));
        for (uint64_t a : vp_assist) w.u64(a);
        auto out = w.take();
        out.insert(out.end(), synic.begin(), synic.end());
        return out;
    }
};

template <typename T> std::vector<uint8_t> saved(const T& obj) {
    state::Writer w;
    obj.save(w);
    return w.take();
}

// Every MSR a guest can read on every VP, for comparing two partitions.
std::vector<uint64_t> all_msrs(Partition& part) {
    std::vector<uint32_t> msrs = {msr::kGuestOsId,    msr::kHypercall, msr::kVpIndex,  msr::kVpAssistPage,
                                  msr::kReferenceTsc, msr::kScontrol,  msr::kSversion, msr::kSiefp,
                                  msr::kSimp,         msr::kTscInvariantControl};
    for (uint32_t m = msr::kSint0; m <= msr::kSint15; m++) msrs.push_back(m);
    std::vector<uint64_t> out;
    for (uint32_t vp = 0; vp < part.nr_vps(); vp++)
        for (uint32_t m : msrs) {
            uint64_t v = 0xDEAD;
            EXPECT_EQ(part.rdmsr(vp, m, v), MsrResult::Handled) << std::hex << m;
            out.push_back(v);
        }
    return out;
}

// The source and destination of a migration: each its own host (guest RAM) and partition.
class PartitionSaveTest : public PartitionTest {
protected:
    FakeHost host2;
    Partition p2{host2, PartitionConfig{4, kPort}};
    // A 4-VP SynIC at power-on, for images that need a valid SynIC section.
    Partition blank{host2, PartitionConfig{4, kPort}};

    PartitionImage image() {
        PartitionImage img;
        img.synic = saved(blank.synic());
        return img;
    }
    bool load(const std::vector<uint8_t>& b) {
        state::Reader r(b);
        const bool ok = p2.load(r);
        error = r.error();
        EXPECT_EQ(ok, r.ok());
        return ok;
    }
    // Gives p2 a state of its own, so a refused load that changed it shows.
    void give_target_state() {
        ASSERT_EQ(p2.wrmsr(0, msr::kGuestOsId, 0x1234), MsrResult::Handled);
        ASSERT_EQ(p2.wrmsr(0, msr::kHypercall, 0x3FF001), MsrResult::Handled);
        ASSERT_EQ(p2.wrmsr(3, msr::kVpAssistPage, 0x3FE001), MsrResult::Handled);
        ASSERT_EQ(p2.wrmsr(2, msr::kSint0 + 1, 0x42), MsrResult::Handled);
        std::vector<uint8_t> m(5, 0x55);
        ASSERT_TRUE(p2.synic().post_message(2, 1, 9, m));
    }
    // Expects a refusal naming `why`, with p2 unchanged.
    void expect_refused(const std::vector<uint8_t>& b, const std::string& why) {
        give_target_state();
        const auto before = saved(p2);
        EXPECT_FALSE(load(b));
        EXPECT_NE(error.find(why), std::string::npos) << error;
        EXPECT_EQ(saved(p2), before) << "a refused load changed the partition";
        EXPECT_TRUE(p2.hypercall_page_enabled());
    }

    std::string error;
};

} // namespace

// What the stream holds, field by field: a change to it without a new version fails here.
TEST_F(PartitionSaveTest, SavedStreamHasTheDocumentedLayout) {
    enable_hypercalls();
    p.wrmsr(0, msr::kTscInvariantControl, 1);
    p.wrmsr(1, msr::kReferenceTsc, 0x7000);
    p.wrmsr(2, msr::kVpAssistPage, 0x400001);
    p.wrmsr(3, msr::kSimp, 0x500001);
    PartitionImage img;
    img.guest_os_id = FakeGuest::kLinuxGuestOsId;
    img.hypercall = FakeGuest::kHypercallPage | 1;
    img.tsc_invariant = 1;
    img.reference_tsc = 0x7000;
    img.vp_assist[2] = 0x400001;
    img.synic = saved(p.synic());
    EXPECT_EQ(saved(p), img.bytes());
}

// A migration: the destination reads back every MSR the source had, makes hypercalls, and
// delivers the queued message as the source does; the load itself wrote no guest memory
// (the hypercall page comes with guest RAM) and raised nothing.
TEST_F(PartitionSaveTest, RoundTripGivesTheGuestTheSamePartition) {
    FakeGuest g(host, p);
    g.enable_synic(1);
    p.wrmsr(0, msr::kTscInvariantControl, 1);
    p.wrmsr(1, msr::kReferenceTsc, 0x7000);
    p.wrmsr(2, msr::kVpAssistPage, 0x400001);
    p.wrmsr(3, msr::kVpAssistPage, 0x401000);
    host.run_gate().pause();
    ASSERT_TRUE(p.synic().post_message(1, 2, 4, std::vector<uint8_t>(40, 0xA5)));
    const auto stream = saved(p);

    host2.run_gate().pause();
    ASSERT_TRUE(load(stream)) << error;
    EXPECT_EQ(all_msrs(p2), all_msrs(p));
    EXPECT_TRUE(p2.hypercall_page_enabled());
    EXPECT_EQ(p2.synic().queued_messages(1, 2), 1u);
    EXPECT_EQ(host2.load<uint32_t>(FakeGuest::kHypercallPage), 0u) << "load wrote the hypercall page";
    EXPECT_EQ(host2.load<uint32_t>(g.simp(1) + 2 * 256), 0u) << "load wrote a message slot";
    EXPECT_TRUE(host2.irqs.empty());
    EXPECT_EQ(p2.stats().hypercalls, 0u);
    EXPECT_EQ(saved(p2), stream);

    RecordingHandler h;
    p2.set_message_handler(&h);
    EXPECT_EQ(status(p2.hypercall(3, 0x5D | (1u << 16), 77, 0)), uint16_t(Status::Success));
    host.run_gate().resume();
    host2.run_gate().resume();
    EXPECT_EQ(std::memcmp(host2.ram(g.simp(1)), host.ram(g.simp(1)), 4096), 0);
    EXPECT_EQ(host2.load<uint32_t>(g.simp(1) + 2 * 256), 4u);
    ASSERT_EQ(host2.irqs.size(), 1u);
    EXPECT_EQ(host2.irqs[0].vp, 1u);
    EXPECT_EQ(host2.irqs[0].vector, FakeGuest::kVector);
}

// Every prefix of a valid stream is refused and leaves the partition as it was, a cut in
// the SynIC's section included: the partition's MSRs wait for the SynIC's to parse.
TEST_F(PartitionSaveTest, EveryTruncationIsRefused) {
    FakeGuest g(host, p);
    g.enable_synic(0);
    p.wrmsr(1, msr::kVpAssistPage, 0x400001);
    host.run_gate().pause();
    ASSERT_TRUE(p.synic().post_message(0, 2, 1, std::vector<uint8_t>(12, 1)));
    ASSERT_TRUE(p.synic().signal_event(0, 2, 3));
    const auto stream = saved(p);
    host.run_gate().resume();
    give_target_state();
    const auto before = saved(p2);
    for (size_t len = 0; len < stream.size(); len++) {
        const std::vector<uint8_t> cut(stream.begin(), stream.begin() + len);
        ASSERT_FALSE(load(cut)) << "a stream cut at " << len << " of " << stream.size() << " bytes was loaded";
        ASSERT_EQ(saved(p2), before) << "cut at " << len;
        ASSERT_TRUE(p2.hypercall_page_enabled());
    }
    EXPECT_TRUE(load(stream)) << error;
    EXPECT_EQ(saved(p2), stream);
}

TEST_F(PartitionSaveTest, RefusesAnotherVpCount) {
    FakeHost other_host;
    Partition two{other_host, PartitionConfig{2, kPort}};
    expect_refused(saved(two), "the VP assist page count differs from this partition's VP count (2)");
    // The partition's part fits; the SynIC's does not: neither is applied.
    auto img = image();
    img.guest_os_id = 0x99;
    img.synic = saved(two.synic());
    expect_refused(img.bytes(), "the SynIC's VP count differs from this partition's (2)");
}

TEST_F(PartitionSaveTest, RefusesAnotherSectionOrANewerVersion) {
    auto img = image();
    img.tag = 0x53594E43;
    expect_refused(img.bytes(), "the partition state has the wrong section tag");
    img = image();
    img.version = 2;
    expect_refused(img.bytes(), "the partition state has a version this build cannot load (2)");
}

// A bad SynIC section (a SINT wrmsr would refuse) keeps the partition's MSRs from being
// applied too.
TEST_F(PartitionSaveTest, ABadSynicSectionLeavesThePartitionAsItWas) {
    auto img = image();
    img.guest_os_id = 0x99;
    img.tsc_invariant = 1;
    // The SynIC's section: tag, version, VP count, then VP 0's SCONTROL, SIEFP, SIMP, SINT0.
    const uint64_t bad_sint = 0x05;
    std::memcpy(img.synic.data() + 12 + 3 * 8, &bad_sint, 8);
    expect_refused(img.bytes(), "a SINT is unmasked with a vector below 16 (5)");
}

TEST_F(PartitionSaveTest, RefusesAnEnabledReferenceTscPage) {
    auto img = image();
    img.reference_tsc = 0x7001;
    expect_refused(img.bytes(), "REFERENCE_TSC enables the page, which is not offered (28673)");
}

// What wrmsr would mask is masked; the hypercall page is not enabled without a guest OS id,
// and whether hypercalls are accepted follows what was loaded.
TEST_F(PartitionSaveTest, MsrsAreMaskedAsWrmsrDoes) {
    auto img = image();
    img.hypercall = 0x300FFF;
    img.tsc_invariant = 0xFF;
    img.reference_tsc = 0x7FFE;
    img.vp_assist = {0x400FFF, 0, 0, ~0ull};
    give_target_state();
    ASSERT_TRUE(load(img.bytes())) << error;
    uint64_t v = 0;
    p2.rdmsr(0, msr::kHypercall, v);
    EXPECT_EQ(v, 0x300002u) << "reserved bits dropped; not enabled without a guest OS id";
    EXPECT_FALSE(p2.hypercall_page_enabled());
    EXPECT_EQ(status(p2.hypercall(0, 0x5D | (1u << 16), 77, 0)), uint16_t(Status::OperationDenied));
    p2.rdmsr(1, msr::kTscInvariantControl, v);
    EXPECT_EQ(v, 1u);
    p2.rdmsr(1, msr::kReferenceTsc, v);
    EXPECT_EQ(v, 0x7000u);
    p2.rdmsr(0, msr::kVpAssistPage, v);
    EXPECT_EQ(v, 0x400001u);
    p2.rdmsr(3, msr::kVpAssistPage, v);
    EXPECT_EQ(v, ~0xFFEull);
    EXPECT_EQ(p2.synic().queued_messages(2, 1), 0u) << "the SynIC's state was replaced too";

    img.guest_os_id = 1;
    ASSERT_TRUE(load(img.bytes())) << error;
    EXPECT_TRUE(p2.hypercall_page_enabled());
    RecordingHandler h;
    p2.set_message_handler(&h);
    EXPECT_EQ(status(p2.hypercall(0, 0x5D | (1u << 16), 77, 0)), uint16_t(Status::Success));
}

// load() reads its section only: bytes after it are for the caller's done() to refuse.
TEST_F(PartitionSaveTest, TrailingBytesAreLeftForDone) {
    auto b = image().bytes();
    b.push_back(0);
    state::Reader r(b);
    EXPECT_TRUE(p2.load(r));
    EXPECT_FALSE(r.done());
    EXPECT_EQ(r.error(), "the state has bytes left over (1)");
}
