// A fake Linux guest: programs the SynIC through MSRs, posts messages through the
// hypercall interface and reads what the host delivers, as hv_vmbus does.
#pragma once

#include <gtest/gtest.h>

#include <optional>
#include <vector>

#include "fake_host.h"
#include "hvstor/hyperv/msr.h"
#include "hvstor/hyperv/partition.h"
#include "hvstor/vmbus/messages.h"

namespace hvstor::test {

class FakeGuest {
public:
    static constexpr uint64_t kSimpBase = 0x100000;   // per VP: + vp * 0x2000
    static constexpr uint64_t kSiefpBase = 0x101000;
    static constexpr uint64_t kInputPage = 0x200000;  // per VP: + vp * 0x1000
    static constexpr uint8_t kVector = 0xF3;
    static constexpr uint64_t kHypercallPage = 0x1FF000;
    // What Linux writes (hv_generate_guest_id: vendor 0x8100, kernel 6.12.0 in bits 16-39).
    static constexpr uint64_t kLinuxGuestOsId = 0x810000060c000000ull;

    // A guest as Linux is once hyperv_init() ran: it has identified itself and enabled the
    // hypercall page, without which the partition refuses every hypercall.
    FakeGuest(FakeHost& host, hv::Partition& p) : host_(host), p_(p) { enable_hypercalls(); }

    // What hyperv_init() does before its first hypercall: GUEST_OS_ID, then HYPERCALL with the
    // enable bit and the page's address (partition-wide MSRs: written on VP 0).
    void enable_hypercalls() {
        EXPECT_EQ(p_.wrmsr(0, hv::msr::kGuestOsId, kLinuxGuestOsId), hv::MsrResult::Handled);
        EXPECT_EQ(p_.wrmsr(0, hv::msr::kHypercall, kHypercallPage | 1), hv::MsrResult::Handled);
        EXPECT_TRUE(p_.hypercall_page_enabled());
    }

    uint64_t simp(uint32_t vp) const { return kSimpBase + vp * 0x2000ull; }
    uint64_t siefp(uint32_t vp) const { return kSiefpBase + vp * 0x2000ull; }

    // What hv_synic_enable_regs does, for SINT `sint`.
    void enable_synic(uint32_t vp, uint8_t sint = vmbus::kVmbusSint) {
        ASSERT_EQ(p_.wrmsr(vp, hv::msr::kSimp, simp(vp) | 1), hv::MsrResult::Handled);
        ASSERT_EQ(p_.wrmsr(vp, hv::msr::kSiefp, siefp(vp) | 1), hv::MsrResult::Handled);
        ASSERT_EQ(p_.wrmsr(vp, hv::msr::kSint0 + sint, kVector), hv::MsrResult::Handled);
        ASSERT_EQ(p_.wrmsr(vp, hv::msr::kScontrol, 1), hv::MsrResult::Handled);
    }

    // HVCALL_POST_MESSAGE from `vp`; returns the status.
    uint16_t post(uint32_t vp, uint32_t conn, const void* msg, size_t len, uint32_t type = vmbus::kHvMessageTypeVmbus) {
        const uint64_t in = kInputPage + vp * 0x1000ull;
        uint32_t hdr[4] = {conn, 0, type, static_cast<uint32_t>(len)};
        host_.write_gpa(in, hdr, sizeof hdr);
        host_.write_gpa(in + 16, msg, len);
        return static_cast<uint16_t>(p_.hypercall(vp, 0x5C, in, 0));
    }
    template <typename T> uint16_t post(uint32_t vp, uint32_t conn, const T& msg) {
        return post(vp, conn, &msg, sizeof msg);
    }

    // Takes the message in vp's slot for `sint`, as the guest's message DPC does:
    // copy, clear message_type, EOM if msg_pending was set.
    std::optional<std::vector<uint8_t>> take(uint32_t vp, uint8_t sint = vmbus::kVmbusSint) {
        const uint64_t slot = simp(vp) + sint * 256ull;
        // Through the Host's copies: device threads post into this slot concurrently.
        uint8_t hdr[16];
        if (!host_.read_gpa(slot, hdr, sizeof hdr)) return std::nullopt;
        uint32_t type;
        std::memcpy(&type, hdr, 4);
        if (type == 0) return std::nullopt;
        const uint8_t size = hdr[4], flags = hdr[5];
        std::vector<uint8_t> out(size);
        host_.read_gpa(slot + 16, out.data(), size);
        const uint32_t zero = 0;
        host_.write_gpa(slot, &zero, sizeof zero);
        if (flags & 1) p_.wrmsr(vp, hv::msr::kEom, 0);
        return out;
    }

    template <typename T> T take_as(uint32_t vp, uint8_t sint = vmbus::kVmbusSint) {
        auto m = take(vp, sint);
        T out{};
        EXPECT_TRUE(m.has_value()) << "no message in the slot";
        if (!m) return out;
        EXPECT_GE(m->size(), sizeof(T));
        std::memcpy(&out, m->data(), std::min(m->size(), sizeof(T)));
        return out;
    }

private:
    FakeHost& host_;
    hv::Partition& p_;
};

} // namespace hvstor::test
