// The C ABI as the QEMU glue uses it: results, messages, ownership, and that an exception
// inside the model comes back as the function's failure value instead of terminating.
#include <gtest/gtest.h>

#include <unistd.h>

#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include "fake_host.h"
#include "guard.h"
#include "hvstor/capi.h"
#include "hvstor/hyperv/msr.h"
#include "hvstor/vmbus/messages.h"

namespace {

using hvstor::test::FakeHost;

// The glue's host operations over a fake RAM; a test can make every access throw, as a
// C++ failure deep in a callback would.
struct TestHost {
    enum class Throw { Nothing, Runtime, BadAlloc, System, NotAnException };
    FakeHost ram;
    Throw fault = Throw::Nothing;

    void maybe_throw() const {
        switch (fault) {
        case Throw::Nothing: return;
        case Throw::Runtime: throw std::runtime_error("host exploded");
        case Throw::BadAlloc: throw std::bad_alloc();
        case Throw::System: throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again));
        case Throw::NotAnException: throw 42;
        }
    }
    static TestHost& of(void* opaque) { return *static_cast<TestHost*>(opaque); }

    HvstorHostOps ops() {
        HvstorHostOps o{};
        o.opaque = this;
        o.read_gpa = [](void* p, uint64_t gpa, void* dst, size_t len) {
            of(p).maybe_throw();
            return of(p).ram.read_gpa(gpa, dst, len);
        };
        o.write_gpa = [](void* p, uint64_t gpa, const void* src, size_t len) {
            of(p).maybe_throw();
            return of(p).ram.write_gpa(gpa, src, len);
        };
        o.atomic_or_u32 = [](void* p, uint64_t gpa, uint32_t mask) {
            of(p).maybe_throw();
            return of(p).ram.atomic_or_u32(gpa, mask);
        };
        o.map = [](void* p, uint64_t gpa, size_t len, bool w) {
            of(p).maybe_throw();
            return of(p).ram.map(gpa, len, w);
        };
        o.unmap = [](void* p, void* ptr, size_t len, bool written) { of(p).ram.unmap(ptr, len, written); };
        o.raise_vector = [](void* p, uint32_t vp, uint8_t vector) { of(p).ram.raise_vector(vp, vector); };
        o.guest_error = [](void* p, const char* line) { of(p).ram.guest_error(line); };
        return o;
    }
};

// A trace hook as the glue sets one (hvstor_set_trace_hook): the offers it was handed.
std::mutex hooked_mu;
std::vector<std::vector<uint64_t>> hooked_offers;
void hook_offers(uint32_t event, const uint64_t* args) {
    if (event != HVSTOR_TRACE_vmbus_offer) return;
    std::lock_guard lock(hooked_mu);
    hooked_offers.push_back({args[0], args[1]});
}
std::vector<std::vector<uint64_t>> offers_hooked() {
    std::lock_guard lock(hooked_mu);
    return hooked_offers;
}

// What a block of code writes to stderr (fd 2), for the one-line reports of the barrier.
class StderrCapture {
public:
    StderrCapture() : file_(std::tmpfile()) {
        std::fflush(stderr);
        saved_ = dup(2);
        dup2(fileno(file_), 2);
    }
    ~StderrCapture() {
        restore();
        std::fclose(file_);
    }
    std::string text() {
        restore();
        std::string s;
        std::rewind(file_);
        char buf[256];
        size_t n;
        while ((n = std::fread(buf, 1, sizeof buf, file_)) > 0) s.append(buf, n);
        return s;
    }

private:
    void restore() {
        if (saved_ < 0) return;
        std::fflush(stderr);
        dup2(saved_, 2);
        close(saved_);
        saved_ = -1;
    }
    std::FILE* file_;
    int saved_ = -1;
};

// A message from *err, freed.
std::string take(char*& err) {
    std::string s = err ? err : "(no message)";
    std::free(err);
    err = nullptr;
    return s;
}

// The disk's fault in effect, as hvstor_disk_fault gives it.
std::string fault_of(HvstorDisk* d) {
    char* text = hvstor_disk_fault(d);
    return take(text);
}

constexpr uint16_t kPort = 0x5A58;
constexpr uint8_t kInstance[16] = {0x1b, 0x78, 0xb3, 0xf8, 0x82, 0x1e, 0x18, 0x48,
                                   0xa1, 0xc3, 0x63, 0xd8, 0x06, 0xec, 0x15, 0x00};
constexpr HvstorControllerConfig kController{4,       256 * 1024, 256,     "hv-storvsc scsi0", 0, nullptr, 0,
                                             nullptr, nullptr,    nullptr, nullptr};

class CAbiTest : public ::testing::Test {
protected:
    void SetUp() override {
        char* err = nullptr;
        ops = host.ops();
        vb = hvstor_vmbus_new(&ops, 2, kPort, hvstor::vmbus::version::kV5_3, &err);
        ASSERT_NE(vb, nullptr) << take(err);
    }
    void TearDown() override { hvstor_vmbus_free(vb); }

    HvstorController* controller() {
        char* err = nullptr;
        HvstorController* c = hvstor_controller_new(vb, kInstance, &kController, &err);
        EXPECT_NE(c, nullptr) << take(err);
        return c;
    }
    static HvstorDiskConfig ram(uint8_t lun, const char* name = nullptr) {
        HvstorDiskConfig d{};
        d.backend = "ram";
        d.size = 1 << 20;
        d.lun = lun;
        d.name = name;
        return d;
    }

    TestHost host;
    HvstorHostOps ops{};
    HvstorVmbus* vb = nullptr;
};

TEST(CAbi, ParsesVmbusVersions) {
    uint32_t v = 0;
    EXPECT_TRUE(hvstor_parse_vmbus_version("5.3", &v));
    EXPECT_EQ(v, 0x00050003u);
    EXPECT_TRUE(hvstor_parse_vmbus_version("4.0", &v));
    EXPECT_EQ(v, 0x00040000u);
    EXPECT_FALSE(hvstor_parse_vmbus_version("5.4", &v));
    EXPECT_FALSE(hvstor_parse_vmbus_version("5.3x", &v));
    EXPECT_FALSE(hvstor_parse_vmbus_version(nullptr, &v));
}

// The glue names the versions in its error message from this list, not from a copy.
TEST(CAbi, VersionListIsTheServersAndParsesBack) {
    char* list = hvstor_vmbus_versions();
    ASSERT_NE(list, nullptr);
    const std::string text = list;
    std::free(list);
    EXPECT_EQ(text, "5.3 5.2 5.1 5.0 4.1 4.0 3.0 2.4");
    // Each word is one of kAll, in kAll's order (newest first), and parses back to it.
    size_t i = 0, at = 0;
    while (at <= text.size()) {
        size_t end = text.find(' ', at);
        if (end == std::string::npos) end = text.size();
        const std::string word = text.substr(at, end - at);
        uint32_t v = 0;
        ASSERT_LT(i, std::size(hvstor::vmbus::version::kAll)) << word;
        EXPECT_TRUE(hvstor_parse_vmbus_version(word.c_str(), &v)) << word;
        EXPECT_EQ(v, hvstor::vmbus::version::kAll[i]) << word;
        i++;
        at = end + 1;
    }
    EXPECT_EQ(i, std::size(hvstor::vmbus::version::kAll));
}

TEST(CAbi, VmbusSettingsAreChecked) {
    TestHost host;
    HvstorHostOps ops = host.ops();
    char* err = nullptr;
    EXPECT_EQ(hvstor_vmbus_new(&ops, 0, kPort, hvstor::vmbus::version::kV5_3, &err), nullptr);
    EXPECT_EQ(take(err), "vCPU count must be 1..4096");
    EXPECT_EQ(hvstor_vmbus_new(&ops, 1, kPort, 0x00050004, &err), nullptr);
    EXPECT_EQ(take(err), "VMBus version 5.4 is not one this server speaks");
    ops.map = nullptr;
    EXPECT_EQ(hvstor_vmbus_new(&ops, 1, kPort, hvstor::vmbus::version::kV5_3, &err), nullptr);
    EXPECT_EQ(take(err), "incomplete host operations");
    EXPECT_EQ(hvstor_vmbus_new(nullptr, 1, kPort, hvstor::vmbus::version::kV5_3, &err), nullptr);
    EXPECT_EQ(take(err), "incomplete host operations");
}

TEST_F(CAbiTest, CpuidAnswersAsHyperV) {
    uint32_t a = 0, b = 0, c = 0, d = 0;
    hvstor_cpuid(vb, 0x40000000, 0, &a, &b, &c, &d);
    char vendor[13] = {};
    std::memcpy(vendor, &b, 4);
    std::memcpy(vendor + 4, &c, 4);
    std::memcpy(vendor + 8, &d, 4);
    EXPECT_STREQ(vendor, "Microsoft Hv");
}

TEST_F(CAbiTest, ControllerSettingsAreChecked) {
    char* err = nullptr;
    HvstorControllerConfig cfg = kController;
    cfg.max_transfer_bytes = 1000;
    EXPECT_EQ(hvstor_controller_new(vb, kInstance, &cfg, &err), nullptr);
    EXPECT_EQ(take(err), "max-transfer must be a multiple of 4096 between 4 KiB and 8 MiB, not 1000");
    cfg = kController;
    cfg.max_outstanding = 0;
    EXPECT_EQ(hvstor_controller_new(vb, kInstance, &cfg, &err), nullptr);
    EXPECT_EQ(take(err), "outstanding must be 1..4096, not 0");
    cfg = kController;
    cfg.max_subchannels = 300;
    EXPECT_EQ(hvstor_controller_new(vb, kInstance, &cfg, &err), nullptr);
    EXPECT_EQ(take(err), "max-subchannels must be at most 256, not 300");
    // Each value within its range, the product not: refused before anything is allocated.
    cfg = kController;
    cfg.max_subchannels = 64;
    cfg.max_outstanding = 4096;
    cfg.max_transfer_bytes = 8 << 20;
    EXPECT_EQ(hvstor_controller_new(vb, kInstance, &cfg, &err), nullptr);
    EXPECT_NE(take(err).find("would preallocate"), std::string::npos);
    EXPECT_EQ(hvstor_controller_new(vb, kInstance, nullptr, &err), nullptr);
    EXPECT_EQ(take(err), "no VMBus, instance or settings");

    // Event loops: a count that matches, each with both calls.
    HvstorEventLoop loops[2] = {{nullptr, [](void*, int, void (*)(void*), void*) -> void* { return nullptr; },
                                 [](void*, void*) {}},
                                {nullptr, nullptr, [](void*, void*) {}}};
    cfg = kController;
    cfg.loops = loops;
    cfg.nr_loops = 0;
    EXPECT_EQ(hvstor_controller_new(vb, kInstance, &cfg, &err), nullptr);
    EXPECT_EQ(take(err), "event loops: 1 to 257 of them, not 0");
    cfg.nr_loops = 258;
    EXPECT_EQ(hvstor_controller_new(vb, kInstance, &cfg, &err), nullptr);
    EXPECT_EQ(take(err), "event loops: 1 to 257 of them, not 258");
    cfg.loops = nullptr;
    cfg.nr_loops = 1;
    EXPECT_EQ(hvstor_controller_new(vb, kInstance, &cfg, &err), nullptr);
    EXPECT_EQ(take(err), "event loops: 1 to 257 of them, not 0");
    cfg.loops = loops;
    cfg.nr_loops = 2;
    EXPECT_EQ(hvstor_controller_new(vb, kInstance, &cfg, &err), nullptr);
    EXPECT_EQ(take(err), "event loop 1 has no watch or unwatch");
    cfg.nr_loops = 1;
    HvstorController* c = hvstor_controller_new(vb, kInstance, &cfg, &err);
    EXPECT_NE(c, nullptr) << take(err);
}

TEST_F(CAbiTest, DiskErrorsComeBackAsMessages) {
    HvstorController* c = controller();
    char* err = nullptr;
    HvstorDiskConfig d = ram(0);
    d.backend = "tape";
    EXPECT_EQ(hvstor_disk_new(c, &d, &err), nullptr);
    EXPECT_EQ(take(err), "backend must be file, ram, null or drive, not 'tape'");
    d = ram(0);
    d.size = 100;
    EXPECT_EQ(hvstor_disk_new(c, &d, &err), nullptr);
    EXPECT_EQ(take(err), "backend=ram needs size= a non-zero multiple of 512, not 100");
    d = ram(0);
    d.perf = "queue=sideways";
    EXPECT_EQ(hvstor_disk_new(c, &d, &err), nullptr);
    EXPECT_EQ(take(err).rfind("perf: ", 0), 0u);

    d = ram(2);
    ASSERT_NE(hvstor_disk_new(c, &d, &err), nullptr) << take(err);
    EXPECT_EQ(hvstor_disk_new(c, &d, &err), nullptr);
    EXPECT_EQ(take(err), "lun 2 is already in use");
    EXPECT_EQ(hvstor_disk_new(nullptr, &d, &err), nullptr);
    EXPECT_EQ(take(err), "no controller or settings");
}

// hv-disk's drive=: the glue's storage behind HvstorBlockOps. This glue completes at once,
// from inside submit, which the contract allows; freeing the disk drains it.
TEST_F(CAbiTest, DiskOnStorageTheGlueProvides) {
    struct Glue {
        int submits = 0, drains = 0;
    } glue;
    HvstorBlockOps block{};
    block.opaque = &glue;
    block.size = 1 << 20;
    block.name = "drive:d0 (raw)";
    block.submit = [](void* g, const HvstorBlockIo*, void* token) {
        static_cast<Glue*>(g)->submits++;
        hvstor_block_complete(token, 0);
    };
    block.drain = [](void* g) { static_cast<Glue*>(g)->drains++; };
    block.length = [](void*) -> uint64_t { return 1 << 20; };
    HvstorController* c = controller();
    char* err = nullptr;
    HvstorDiskConfig d{};
    d.backend = "drive";
    EXPECT_EQ(hvstor_disk_new(c, &d, &err), nullptr);
    EXPECT_EQ(take(err), "backend=drive needs drive=ID");
    d.block = &block;
    HvstorDisk* disk = hvstor_disk_new(c, &d, &err);
    ASSERT_NE(disk, nullptr) << take(err);
    EXPECT_TRUE(hvstor_disk_free(c, disk, &err)) << take(err);
    EXPECT_GE(glue.drains, 1);
    EXPECT_EQ(glue.submits, 0);  // the disk sends nothing of its own
}

// hv-disk's fault property, at creation and while the guest runs; a bad one is refused with
// its reason and the old fault stays.
TEST_F(CAbiTest, FaultsAtCreationAndAtRunTime) {
    HvstorController* c = controller();
    char* err = nullptr;
    HvstorDiskConfig d = ram(0);
    d.fault = "error=fire";
    EXPECT_EQ(hvstor_disk_new(c, &d, &err), nullptr);
    EXPECT_EQ(take(err), "fault: error=fire is not one of medium, not-ready, unit-attention, busy");
    d.fault = "stall=hold";
    HvstorDisk* disk = hvstor_disk_new(c, &d, &err);
    ASSERT_NE(disk, nullptr) << take(err);
    EXPECT_EQ(fault_of(disk), "stall=hold");
    EXPECT_FALSE(hvstor_disk_set_fault(disk, "stall=-1", &err));
    EXPECT_EQ(take(err), "fault: stall=-1 is not a number in 1..3600000");
    EXPECT_EQ(fault_of(disk), "stall=hold") << "a refused fault changed the one in effect";
    EXPECT_TRUE(hvstor_disk_set_fault(disk, "none", &err)) << take(err);
    EXPECT_EQ(fault_of(disk), "none");
    EXPECT_TRUE(hvstor_disk_set_fault(disk, "error=busy,every=2", &err)) << take(err);
    EXPECT_EQ(fault_of(disk), "error=busy,every=2");
    // Longer than any state carries (repeated keys parse: the last one counts).
    std::string lengthy = "error=busy";
    while (lengthy.size() <= 4096) lengthy += ",every=2";
    EXPECT_FALSE(hvstor_disk_set_fault(disk, lengthy.c_str(), &err));
    EXPECT_EQ(take(err), "fault: a text of " + std::to_string(lengthy.size()) + " bytes (at most 4096)");
    EXPECT_FALSE(hvstor_disk_set_fault(nullptr, "none", &err));
    EXPECT_EQ(take(err), "no disk");
    EXPECT_EQ(hvstor_disk_fault(nullptr), nullptr);
}

// hv-disk's srb= and opstatus= faults, accepted or refused with the value named.
TEST_F(CAbiTest, TransportFaultsAreCheckedAtTheBoundary) {
    HvstorController* c = controller();
    char* err = nullptr;
    HvstorDiskConfig d = ram(0);
    d.fault = "srb=aborted,scsi=check-condition,sense=6/2a/09,count=1";
    HvstorDisk* disk = hvstor_disk_new(c, &d, &err);
    ASSERT_NE(disk, nullptr) << take(err);
    EXPECT_FALSE(hvstor_disk_set_fault(disk, "srb=error,sense=6/2a", &err));
    EXPECT_EQ(take(err), "fault: sense=6/2a is not KEY/ASC/ASCQ in hex (KEY 0..f, ASC and ASCQ 00..ff, e.g. 3/11/00)");
    EXPECT_FALSE(hvstor_disk_set_fault(disk, "opstatus=1", &err));
    EXPECT_EQ(take(err), "fault: opstatus=1 is not a 32-bit hex number 0x0..0xffffffff");
    EXPECT_TRUE(hvstor_disk_set_fault(disk, "srb=0x81,opstatus=0xc0000001", &err)) << take(err);
    EXPECT_TRUE(hvstor_disk_set_fault(disk, "opstatus=0x1", &err)) << take(err);
}

// hv-storvsc's class, port-wwn and node-wwn: each value checked, with a message naming it.
TEST_F(CAbiTest, DeviceClassAndWwnsAreChecked) {
    char* err = nullptr;
    HvstorControllerConfig cfg = kController;
    cfg.device_class = "foo";
    EXPECT_EQ(hvstor_controller_new(vb, kInstance, &cfg, &err), nullptr);
    EXPECT_EQ(take(err), "class=foo is not one of scsi, ide, fc");
    cfg.device_class = "SCSI";
    EXPECT_EQ(hvstor_controller_new(vb, kInstance, &cfg, &err), nullptr);
    EXPECT_EQ(take(err), "class=SCSI is not one of scsi, ide, fc");

    cfg = kController;
    cfg.device_class = "fc";
    cfg.node_wwn = "c003ff0000ff0000";
    for (const char* bad : {"c003ff0000ff000", "c003ff0000ff00011", "c003ff0000ff000g", "0x03ff0000ff0001", ""}) {
        cfg.port_wwn = bad;
        EXPECT_EQ(hvstor_controller_new(vb, kInstance, &cfg, &err), nullptr) << bad;
        EXPECT_EQ(take(err), "port-wwn=" + std::string(bad) + " is not 16 hex digits (e.g. c003ff0000ff0001)");
    }
    cfg.port_wwn = "0000000000000000";
    EXPECT_EQ(hvstor_controller_new(vb, kInstance, &cfg, &err), nullptr);
    EXPECT_EQ(take(err), "port-wwn=0000000000000000: 0 is no world wide name");
    cfg.port_wwn = "C003FF0000FF0001";
    cfg.node_wwn = "c003ff0000ff000";
    EXPECT_EQ(hvstor_controller_new(vb, kInstance, &cfg, &err), nullptr);
    EXPECT_EQ(take(err), "node-wwn=c003ff0000ff000 is not 16 hex digits (e.g. c003ff0000ff0001)");
    cfg.node_wwn = nullptr;
    EXPECT_EQ(hvstor_controller_new(vb, kInstance, &cfg, &err), nullptr);
    EXPECT_EQ(take(err), "class=fc needs a port-wwn and a node-wwn other than 0");
    cfg.node_wwn = "c003ff0000ff0000";
    EXPECT_NE(hvstor_controller_new(vb, kInstance, &cfg, &err), nullptr) << take(err);

    for (const char* other : {"scsi", "ide"}) {
        cfg = kController;
        cfg.device_class = other;
        cfg.max_subchannels = 0;
        cfg.port_wwn = "c003ff0000ff0001";
        EXPECT_EQ(hvstor_controller_new(vb, kInstance, &cfg, &err), nullptr) << other;
        EXPECT_EQ(take(err), "port-wwn and node-wwn belong to class=fc, not class=" + std::string(other));
        cfg.port_wwn = nullptr;
        cfg.node_wwn = "c003ff0000ff0000";
        EXPECT_EQ(hvstor_controller_new(vb, kInstance, &cfg, &err), nullptr) << other;
        EXPECT_EQ(take(err), "port-wwn and node-wwn belong to class=fc, not class=" + std::string(other));
    }
}

// class=ide: no subchannels, a target of an IDE channel in the instance, one disk at LUN 0.
TEST_F(CAbiTest, IdeControllerTakesOneDiskAtLunZero) {
    char* err = nullptr;
    HvstorControllerConfig cfg = kController;
    cfg.device_class = "ide";
    EXPECT_EQ(hvstor_controller_new(vb, kInstance, &cfg, &err), nullptr);
    EXPECT_EQ(take(err), "class=ide has no subchannels (Hyper-V's IDE accelerator offers none), not max-subchannels=4");
    cfg.max_subchannels = 0;
    // kInstance's second group, 1e82, is the IDE target storvsc would add the disk at.
    EXPECT_EQ(hvstor_controller_new(vb, kInstance, &cfg, &err), nullptr);
    EXPECT_EQ(take(err), "class=ide: instance f8b3781b-1e82-4818-a1c3-63d806ec1500 names IDE target 7810 in its "
                         "second group (storvsc adds the disk there); it must be 0000 or 0001");
    constexpr uint8_t kIde[16] = {0x01, 0, 0, 0, 0x01, 0x00, 0x99, 0x88}; // 00000001-0001-8899-0000-...
    HvstorController* c = hvstor_controller_new(vb, kIde, &cfg, &err);
    ASSERT_NE(c, nullptr) << take(err);
    HvstorDiskConfig d = ram(1);
    EXPECT_EQ(hvstor_disk_new(c, &d, &err), nullptr);
    EXPECT_EQ(take(err), "class=ide takes one disk, at lun 0, not lun 1");
    d = ram(0);
    EXPECT_NE(hvstor_disk_new(c, &d, &err), nullptr) << take(err);
    EXPECT_EQ(hvstor_disk_new(c, &d, &err), nullptr);
    EXPECT_EQ(take(err), "lun 0 is already in use");
}

// hv-storvsc's reset and notify: checked values, a refusal without a session, the setting
// read back; an hv-disk without notices.
TEST_F(CAbiTest, ControllerResetAndNotify) {
    char* err = nullptr;
    HvstorControllerConfig cfg = kController;
    cfg.reset = "sometimes";
    EXPECT_EQ(hvstor_controller_new(vb, kInstance, &cfg, &err), nullptr);
    EXPECT_EQ(take(err), "reset=sometimes is not one of answer, ignore, fail");
    cfg.reset = "ignore";
    HvstorController* c = hvstor_controller_new(vb, kInstance, &cfg, &err);
    ASSERT_NE(c, nullptr) << take(err);
    char* now = hvstor_controller_reset(c);
    EXPECT_STREQ(now, "ignore");
    std::free(now);
    EXPECT_FALSE(hvstor_controller_set_reset(c, "never", &err));
    EXPECT_EQ(take(err), "reset=never is not one of answer, ignore, fail");
    EXPECT_TRUE(hvstor_controller_set_reset(c, "fail", &err)) << take(err);
    now = hvstor_controller_reset(c);
    EXPECT_STREQ(now, "fail");
    std::free(now);
    EXPECT_FALSE(hvstor_controller_set_reset(nullptr, "fail", &err));
    EXPECT_EQ(take(err), "no controller");
    EXPECT_EQ(hvstor_controller_reset(nullptr), nullptr);
    EXPECT_FALSE(hvstor_controller_notify(c, "hello", &err));
    EXPECT_EQ(take(err), "notify=hello is not one of enumerate-bus, remove-device");
    EXPECT_FALSE(hvstor_controller_notify(c, "enumerate-bus", &err));
    EXPECT_EQ(take(err), "notify=enumerate-bus: no storvsc session: the guest has not opened the controller's channel");
    EXPECT_FALSE(hvstor_controller_notify(nullptr, "enumerate-bus", &err));
    EXPECT_EQ(take(err), "no controller");
    HvstorDiskConfig d = ram(0);
    d.without_notices = true;
    HvstorDisk* disk = hvstor_disk_new(c, &d, &err);
    ASSERT_NE(disk, nullptr) << take(err);
    EXPECT_TRUE(hvstor_disk_resize(disk, 512 << 10, &err)) << take(err);
    EXPECT_TRUE(hvstor_disk_free(c, disk, &err)) << take(err);
}

TEST_F(CAbiTest, ResizeAtRunTimeAndItsErrors) {
    HvstorController* c = controller();
    char* err = nullptr;
    HvstorDiskConfig d = ram(0);
    d.size = 4 << 20;
    HvstorDisk* disk = hvstor_disk_new(c, &d, &err);
    ASSERT_NE(disk, nullptr) << take(err);
    EXPECT_EQ(hvstor_disk_size(disk), 4u << 20);
    EXPECT_TRUE(hvstor_disk_resize(disk, 1 << 20, &err)) << take(err);
    EXPECT_EQ(hvstor_disk_size(disk), 1u << 20);
    EXPECT_FALSE(hvstor_disk_resize(disk, 0, &err));
    EXPECT_EQ(take(err), "ram backend: size 0 is not a positive multiple of 512");
    EXPECT_FALSE(hvstor_disk_resize(disk, 1000, &err));
    EXPECT_EQ(take(err), "ram backend: size 1000 is not a positive multiple of 512");
    EXPECT_FALSE(hvstor_disk_resize(disk, 8 << 20, &err));
    EXPECT_EQ(take(err), "ram backend: cannot grow to 8388608 bytes: its memory was mapped once, for the 4194304 "
                         "bytes it was made with");
    EXPECT_EQ(hvstor_disk_size(disk), 1u << 20) << "refusals change nothing";
    EXPECT_FALSE(hvstor_disk_resize(nullptr, 1 << 20, &err));
    EXPECT_EQ(take(err), "no disk");
    EXPECT_EQ(hvstor_disk_size(nullptr), 0u);
    // Read-only RAM and modelled disks pass the change on to their storage.
    HvstorDiskConfig ro = ram(1);
    ro.read_only = true;
    HvstorDisk* rod = hvstor_disk_new(c, &ro, &err);
    ASSERT_NE(rod, nullptr) << take(err);
    EXPECT_TRUE(hvstor_disk_resize(rod, 512 << 10, &err)) << take(err);
    EXPECT_EQ(hvstor_disk_size(rod), 512u << 10);
    HvstorDiskConfig m{};
    m.backend = "null";
    m.size = 1 << 20;
    m.lun = 2;
    m.perf = "profile=premium-p10";
    HvstorDisk* md = hvstor_disk_new(c, &m, &err);
    ASSERT_NE(md, nullptr) << take(err);
    EXPECT_TRUE(hvstor_disk_resize(md, 1ull << 30, &err)) << take(err);
    EXPECT_EQ(hvstor_disk_size(md), 1ull << 30);
}

TEST_F(CAbiTest, StatsJsonEscapesTheName) {
    HvstorController* c = controller();
    char* err = nullptr;
    HvstorDiskConfig d = ram(0, "q\"uote\\slash");
    HvstorDisk* disk = hvstor_disk_new(c, &d, &err);
    ASSERT_NE(disk, nullptr) << take(err);
    char* json = hvstor_disk_stats_json(disk);
    ASSERT_NE(json, nullptr);
    EXPECT_STREQ(json, R"({"disk":"q\"uote\\slash","model":false,"reads":0,"writes":0,)"
                       R"("bytes_read":0,"bytes_written":0,"errors":0,"faults":0,"stalled":0,"unit_attentions":0})");
    std::free(json);
}

// What qom-get of hv-storvsc's and the bridge's "stats" returns, before the guest connects;
// the offer reached the glue's trace hook, and none after the hook was taken away.
TEST_F(CAbiTest, ControllerAndBusStatsAsJson) {
    hvstor_set_trace_hook(hook_offers);
    HvstorController* c = controller();
    hvstor_set_trace_hook(nullptr);
    char* json = hvstor_controller_stats_json(c);
    ASSERT_NE(json, nullptr);
    EXPECT_STREQ(json, R"({"srbs":0,"completions":0,"srb_errors":0,"bad_packets":0,"subchannels_offered":0,)"
                       R"("open_channels":0,"reset_lun":0,"reset_bus":0,"reset_adapter":0,"resets_held":0,)"
                       R"("enumerate_bus_sent":0,"remove_device_sent":0,)"
                       R"("channels":[{"index":0,"relid":1,"open":false,"packets_in":0,)"
                       R"("packets_out":0,"srbs":0,"completions":0,"srb_errors":0,"bad_packets":0,)"
                       R"("guest_signals":0,"interrupts":0,"wakeups":0,"inline_rounds":0,"ring_full_waits":0,"busy":0,)"
                       R"("outstanding":0,"max_outstanding":0}]})");
    std::free(json);
    json = hvstor_vmbus_stats_json(vb);
    ASSERT_NE(json, nullptr);
    EXPECT_STREQ(json, R"({"version":"","messages_in":0,"messages_out":0,"bad_messages":0,"send_failures":0,)"
                       R"("offers":1,"open_channels":0,"gpadls":0,"hypercalls":0,"hypercall_errors":0,)"
                       R"("msr_faults":0,"synic_messages":0,"synic_messages_deferred":0,"synic_events":0})");
    std::free(json);
    EXPECT_EQ(hvstor_controller_stats_json(nullptr), nullptr);
    EXPECT_EQ(hvstor_vmbus_stats_json(nullptr), nullptr);
    EXPECT_EQ(offers_hooked(), (std::vector<std::vector<uint64_t>>{{1, 0}}));
    // Off: a second controller's offer reaches no hook.
    char* err = nullptr;
    const uint8_t other[16] = {1};
    ASSERT_NE(hvstor_controller_new(vb, other, &kController, &err), nullptr) << take(err);
    EXPECT_EQ(offers_hooked().size(), 1u);
}

TEST_F(CAbiTest, ModelledDiskStatsComeFromTheModel) {
    char* err = nullptr;
    ASSERT_TRUE(hvstor_vmbus_set_vm_perf(vb, "profile=Standard_F32s_v2,time-scale=8", &err)) << take(err);
    EXPECT_FALSE(hvstor_vmbus_set_vm_perf(vb, "iops=-1", &err));
    EXPECT_NE(take(err), "(no message)");
    HvstorController* c = controller();
    HvstorDiskConfig d = ram(0, "m");
    d.perf = "profile=premium-p10";
    HvstorDisk* disk = hvstor_disk_new(c, &d, &err);
    ASSERT_NE(disk, nullptr) << take(err);
    char* json = hvstor_disk_stats_json(disk);
    ASSERT_NE(json, nullptr);
    const std::string s = json;
    std::free(json);
    EXPECT_NE(s.find(R"("disk":"m")"), std::string::npos) << s;
    EXPECT_NE(s.find(R"("iops":)"), std::string::npos) << s;
}

// Hot removal: the LUN is free again, and a disk cannot be freed twice or through another
// controller; every refusal comes back as a message.
TEST_F(CAbiTest, DiskFreeDetachesTheLunAndRefusesBadHandles) {
    HvstorController* c = controller();
    uint8_t other_instance[16];
    std::memcpy(other_instance, kInstance, 16);
    other_instance[15] = 1;
    char* err = nullptr;
    HvstorController* other = hvstor_controller_new(vb, other_instance, &kController, &err);
    ASSERT_NE(other, nullptr) << take(err);
    HvstorDiskConfig d = ram(0);
    HvstorDisk* disk = hvstor_disk_new(c, &d, &err);
    ASSERT_NE(disk, nullptr) << take(err);

    EXPECT_FALSE(hvstor_disk_free(other, disk, &err));
    EXPECT_EQ(take(err), "the disk is not on this controller (removed already?)");
    EXPECT_FALSE(hvstor_disk_free(nullptr, disk, &err));
    EXPECT_EQ(take(err), "no controller");
    EXPECT_EQ(hvstor_disk_new(c, &d, &err), nullptr) << "still attached after the refusals";
    EXPECT_EQ(take(err), "lun 0 is already in use");

    EXPECT_TRUE(hvstor_disk_free(c, disk, &err));
    EXPECT_EQ(err, nullptr);
    EXPECT_FALSE(hvstor_disk_free(c, disk, &err));
    EXPECT_EQ(take(err), "the disk is not on this controller (removed already?)");
    EXPECT_TRUE(hvstor_disk_free(c, nullptr, &err));

    HvstorDisk* again = hvstor_disk_new(c, &d, &err);
    ASSERT_NE(again, nullptr) << take(err);
    char* json = hvstor_disk_stats_json(again);
    ASSERT_NE(json, nullptr);
    std::free(json);
    EXPECT_TRUE(hvstor_disk_free(c, again, nullptr));
    EXPECT_EQ(hvstor_disk_stats_json(nullptr), nullptr);
}

// The removal that does not block: refusals come back as messages without a call of done;
// an accepted one calls done once, from the model's thread (here the backend is RAM: at once).
TEST_F(CAbiTest, DiskRemoveCallsDoneOnceOrRefusesWithAMessage) {
    HvstorController* c = controller();
    char* err = nullptr;
    HvstorDiskConfig d = ram(2);
    HvstorDisk* disk = hvstor_disk_new(c, &d, &err);
    ASSERT_NE(disk, nullptr) << take(err);
    struct Done {
        std::mutex mu;
        std::condition_variable cv;
        int calls = 0;
    } done;
    auto on_done = [](void* p) {
        auto* dn = static_cast<Done*>(p);
        std::lock_guard lock(dn->mu);
        dn->calls++;
        dn->cv.notify_all();
    };
    EXPECT_FALSE(hvstor_disk_remove(c, disk, nullptr, &done, &err));
    EXPECT_EQ(take(err), "no controller, disk or callback");
    EXPECT_FALSE(hvstor_disk_remove(nullptr, disk, on_done, &done, &err));
    EXPECT_EQ(take(err), "no controller, disk or callback");

    EXPECT_TRUE(hvstor_disk_remove(c, disk, on_done, &done, &err)) << take(err);
    {
        std::unique_lock lock(done.mu);
        done.cv.wait(lock, [&] { return done.calls > 0; });
    }
    EXPECT_FALSE(hvstor_disk_remove(c, disk, on_done, &done, &err));
    EXPECT_EQ(take(err), "the disk is not on this controller (removed already?)");
    HvstorDisk* again = hvstor_disk_new(c, &d, &err);
    EXPECT_NE(again, nullptr) << take(err);
    hvstor_vmbus_free(vb); // joins the removal thread
    vb = nullptr;
    EXPECT_EQ(done.calls, 1);
}

// A modelled disk's model goes with it too (LeakSanitizer checks).
TEST_F(CAbiTest, ModelledDiskCanBeFreed) {
    HvstorController* c = controller();
    char* err = nullptr;
    HvstorDiskConfig d = ram(3, "m");
    d.perf = "profile=premium-p10";
    HvstorDisk* disk = hvstor_disk_new(c, &d, &err);
    ASSERT_NE(disk, nullptr) << take(err);
    EXPECT_TRUE(hvstor_disk_free(c, disk, &err)) << take(err);
}

// Without hvstor_disk_free the VMBus frees its controllers and disks (LeakSanitizer checks).
TEST(CAbi, FreeingTheVmbusFreesItsControllersAndDisks) {
    TestHost host;
    HvstorHostOps ops = host.ops();
    char* err = nullptr;
    HvstorVmbus* vb = hvstor_vmbus_new(&ops, 1, kPort, hvstor::vmbus::version::kV5_3, &err);
    ASSERT_NE(vb, nullptr) << take(err);
    uint8_t instance[16];
    std::memcpy(instance, kInstance, 16);
    for (uint8_t i = 0; i < 2; i++) {
        instance[15] = i;
        HvstorController* c = hvstor_controller_new(vb, instance, &kController, &err);
        ASSERT_NE(c, nullptr) << take(err);
        for (uint8_t lun = 0; lun < 3; lun++) {
            HvstorDiskConfig d{};
            d.backend = lun == 2 ? "null" : "ram";
            d.size = 1 << 20;
            d.lun = lun;
            d.perf = lun == 1 ? "profile=premium-p10" : nullptr;
            ASSERT_NE(hvstor_disk_new(c, &d, &err), nullptr) << take(err);
        }
    }
    hvstor_vmbus_free(vb);
    hvstor_vmbus_free(nullptr);
}

// POST_MESSAGE reads its input through the host; a throw there must not unwind into C.
TEST_F(CAbiTest, HypercallReturnsAnErrorStatusOnAnException) {
    constexpr uint64_t kInput = 0x200000;
    constexpr uint64_t kPostMessage = 0x5C, kSignalEvent = 0x5D;
    constexpr uint64_t kInsufficientMemory = 0x000B;
    // As Linux does before its first hypercall: without both the partition refuses the call
    // before it touches the host.
    ASSERT_EQ(hvstor_wrmsr(vb, 0, hvstor::hv::msr::kGuestOsId, 1), HVSTOR_MSR_HANDLED);
    ASSERT_EQ(hvstor_wrmsr(vb, 0, hvstor::hv::msr::kHypercall, 0x300000 | 1), HVSTOR_MSR_HANDLED);
    StderrCapture cap;
    host.fault = TestHost::Throw::Runtime;
    EXPECT_EQ(hvstor_hypercall(vb, 0, kPostMessage, kInput, 0), kInsufficientMemory);
    host.fault = TestHost::Throw::BadAlloc;
    EXPECT_EQ(hvstor_hypercall(vb, 0, kPostMessage, kInput, 0), kInsufficientMemory);
    host.fault = TestHost::Throw::System;
    EXPECT_EQ(hvstor_hypercall(vb, 1, kSignalEvent, kInput, 0), kInsufficientMemory);
    host.fault = TestHost::Throw::NotAnException;
    EXPECT_EQ(hvstor_hypercall(vb, 1, kSignalEvent, kInput, 0), kInsufficientMemory);
    // Only the first is logged: the guest may retry a failing call many times.
    EXPECT_EQ(cap.text(),
              "hvstor: hvstor_hypercall: host exploded (later exceptions of this VMBus are not logged)\n");

    // And the partition still works.
    host.fault = TestHost::Throw::Nothing;
    EXPECT_EQ(hvstor_hypercall(vb, 0, 0xFFFF, 0, 0), 0x0002u);  // invalid hypercall code
}

// Hyper-V raises #UD for a hypercall with the page disabled; through the port the glue traps
// the model answers HV_STATUS_OPERATION_DENIED instead (and never reaches the host).
TEST_F(CAbiTest, HypercallWithoutTheHypercallPageIsDenied) {
    constexpr uint64_t kOperationDenied = 0x0008, kSignalEventFast = 0x5D | (1u << 16);
    host.fault = TestHost::Throw::Runtime; // would turn any host access into another status
    EXPECT_EQ(hvstor_hypercall(vb, 0, kSignalEventFast, 1, 0), kOperationDenied);
    host.fault = TestHost::Throw::Nothing;
    ASSERT_EQ(hvstor_wrmsr(vb, 0, hvstor::hv::msr::kGuestOsId, 1), HVSTOR_MSR_HANDLED);
    EXPECT_EQ(hvstor_hypercall(vb, 1, kSignalEventFast, 1, 0), kOperationDenied);
    ASSERT_EQ(hvstor_wrmsr(vb, 0, hvstor::hv::msr::kHypercall, 0x300000 | 1), HVSTOR_MSR_HANDLED);
    EXPECT_NE(hvstor_hypercall(vb, 1, kSignalEventFast, 1, 0), kOperationDenied);
}

// Enabling the hypercall page writes the stub into guest RAM through the host.
TEST_F(CAbiTest, WrmsrFaultsOnAnException) {
    using namespace hvstor::hv;
    StderrCapture cap;
    ASSERT_EQ(hvstor_wrmsr(vb, 0, msr::kGuestOsId, 1), HVSTOR_MSR_HANDLED);
    host.fault = TestHost::Throw::System;
    EXPECT_EQ(hvstor_wrmsr(vb, 0, msr::kHypercall, 0x300000 | 1), HVSTOR_MSR_FAULT);
    EXPECT_NE(cap.text().find("hvstor: hvstor_wrmsr: "), std::string::npos);
    host.fault = TestHost::Throw::Nothing;
    EXPECT_EQ(hvstor_wrmsr(vb, 0, msr::kHypercall, 0x300000 | 1), HVSTOR_MSR_HANDLED);
    uint64_t val = 0;
    EXPECT_EQ(hvstor_rdmsr(vb, 0, msr::kHypercall, &val), HVSTOR_MSR_HANDLED);
    EXPECT_EQ(val, 0x300000u | 1);
}

// The barrier itself, for every shape of entry point, including those no test can make
// throw through the model (CPUID, RDMSR and reset touch nothing that throws today).
TEST(Guard, PassesResultsThrough) {
    EXPECT_EQ(hvstor::capi::guarded([] { return 7; }, [](const char*) { return -1; }), 7);
}

TEST(Guard, TurnsExceptionsIntoTheFailureValue) {
    using hvstor::capi::guarded;
    char* err = nullptr;
    auto* p = guarded([]() -> int* { throw std::invalid_argument("bad thing"); },
                      hvstor::capi::fail_with(&err, nullptr));
    EXPECT_EQ(p, nullptr);
    EXPECT_EQ(take(err), "bad thing");
    EXPECT_FALSE(guarded([]() -> bool { throw 1; }, hvstor::capi::fail_with(&err, false)));
    EXPECT_EQ(take(err), "unknown exception");
    // A null err is allowed: the failure value alone.
    EXPECT_FALSE(guarded([]() -> bool { throw std::bad_alloc(); }, hvstor::capi::fail_with<bool>(nullptr, false)));
}

TEST(Guard, LogsTheFirstExceptionOnly) {
    using hvstor::capi::guarded;
    using hvstor::capi::log_once;
    std::atomic_flag logged;
    StderrCapture cap;
    EXPECT_EQ(guarded([]() -> HvstorMsrResult { throw std::runtime_error("first"); },
                      log_once(logged, "hvstor_rdmsr", HVSTOR_MSR_FAULT)),
              HVSTOR_MSR_FAULT);
    guarded([] { throw std::runtime_error("second"); }, log_once(logged, "hvstor_cpuid"));
    guarded([] {}, log_once(logged, "hvstor_cpuid"));
    EXPECT_EQ(cap.text(), "hvstor: hvstor_rdmsr: first (later exceptions of this VMBus are not logged)\n");
}

} // namespace

// The VMM's run-state handler: a paused bus still resets, runs again, and is freed while
// paused (TearDown) without waiting for a resume.
TEST_F(CAbiTest, PausedBusResetsRunsAgainAndIsFreed) {
    HvstorController* c = controller();
    ASSERT_NE(c, nullptr);
    char* err = nullptr;
    HvstorDiskConfig d = ram(0);
    ASSERT_NE(hvstor_disk_new(c, &d, &err), nullptr) << take(err);
    hvstor_vmbus_set_running(vb, false);
    hvstor_vmbus_set_running(vb, false); // a second stop changes nothing
    hvstor_vmbus_reset(vb);
    hvstor_vmbus_set_running(vb, true);
    hvstor_vmbus_set_running(vb, false);
}
