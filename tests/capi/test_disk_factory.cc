// DiskFactory: a disk's settings become the right backend, model and SCSI disk on the
// right LUN, and bad settings are refused with a message that names them.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "controller_fixture.h"
#include "disk_factory.h"
#include "fake_host.h"
#include "hvstor/perf/clock.h"
#include "machine.h"

using namespace hvstor;
using hvstor::capi::DiskError;
using hvstor::capi::DiskFactory;
using hvstor::capi::DiskSpec;

namespace {

// Counts completions and keeps each request's result.
class Sink : public backend::CompletionSink {
public:
    void complete(backend::Request* r) override {
        results.push_back(r->result);
    }
    std::vector<int> results;
};

// A file of `size` bytes that is removed with the object.
class TempFile {
public:
    explicit TempFile(off_t size) {
        const char* dir = std::getenv("TMPDIR");
        path_ = std::string(dir && *dir ? dir : "/tmp") + "/capi-test-XXXXXX";
        const int fd = mkstemp(path_.data());
        EXPECT_GE(fd, 0) << std::strerror(errno);
        if (fd >= 0) {
            EXPECT_EQ(ftruncate(fd, size), 0);
            close(fd);
        }
    }
    ~TempFile() { unlink(path_.c_str()); }
    const std::string& path() const { return path_; }

private:
    std::string path_;
};

DiskSpec ram(uint64_t size, uint8_t lun = 0) {
    DiskSpec s;
    s.backend = "ram";
    s.size = size;
    s.lun = lun;
    return s;
}

using DiskFactoryTest = capi::test::ControllerTest;

TEST_F(DiskFactoryTest, RamAndNullDisksHaveTheSizeAskedFor) {
    auto r = DiskFactory().attach(ctl(), ram(1 << 20));
    EXPECT_EQ(r->backend().size(), 1u << 20);
    EXPECT_EQ(r->scsi().blocks(), 2048u);
    EXPECT_FALSE(r->backend().read_only());
    EXPECT_EQ(r->model(), nullptr);

    DiskSpec n;
    n.backend = "null";
    n.size = 64ull << 30;  // nothing is allocated for a null disk
    n.lun = 1;
    auto d = DiskFactory().attach(ctl(), n);
    EXPECT_EQ(d->backend().size(), 64ull << 30);
    EXPECT_EQ(d->scsi().blocks(), (64ull << 30) / 512);
}

TEST_F(DiskFactoryTest, SizesMustBeNonZeroMultiplesOf512) {
    EXPECT_EQ(refusal(ram(0)), "backend=ram needs size= a non-zero multiple of 512, not 0");
    EXPECT_EQ(refusal(ram(1000)), "backend=ram needs size= a non-zero multiple of 512, not 1000");
    DiskSpec n = ram(511);
    n.backend = "null";
    EXPECT_EQ(refusal(n), "backend=null needs size= a non-zero multiple of 512, not 511");
}

TEST_F(DiskFactoryTest, BackendIsNamedInTheError) {
    DiskSpec s = ram(4096);
    s.backend = "disk";
    EXPECT_EQ(refusal(s), "backend must be file, ram, null or drive, not 'disk'");
    s.backend = "";
    EXPECT_EQ(refusal(s), "no backend: give file=PATH, drive=ID, or backend=ram|null with size=");
    s.backend = "file";
    EXPECT_EQ(refusal(s), "backend=file needs file=PATH");
    s.path = "/nonexistent/capi-test.img";
    const std::string e = refusal(s);
    EXPECT_NE(e.find("/nonexistent/capi-test.img"), std::string::npos) << e;
}

TEST_F(DiskFactoryTest, FileDiskHasTheFileSize) {
    TempFile f(3 << 20);
    DiskSpec s;
    s.backend = "file";
    s.path = f.path();
    s.direct = false;
    auto d = DiskFactory().attach(ctl(), s);
    EXPECT_EQ(d->backend().size(), 3u << 20);
    EXPECT_FALSE(d->backend().read_only());
}

TEST_F(DiskFactoryTest, ReadOnlyFileDisk) {
    TempFile f(1 << 20);
    DiskSpec s;
    s.backend = "file";
    s.path = f.path();
    s.direct = false;
    s.read_only = true;
    auto d = DiskFactory().attach(ctl(), s);
    EXPECT_TRUE(d->backend().read_only());
}

// RAM and null backends have no read-only mode of their own: the factory adds it.
TEST_F(DiskFactoryTest, ReadOnlyRamDiskRefusesWritesAndServesReads) {
    DiskSpec s = ram(1 << 20);
    s.read_only = true;
    auto d = DiskFactory().attach(ctl(), s);
    EXPECT_TRUE(d->backend().read_only());
    EXPECT_NE(d->backend().describe().find("read-only"), std::string::npos);

    std::vector<uint8_t> buf(512, 0xAA);
    iovec iov{buf.data(), buf.size()};
    Sink sink;
    backend::Request rd, wr, zero, rd2, fl;
    for (auto* r : {&rd, &wr, &zero, &rd2, &fl}) {
        r->length = 512;
        r->iov = &iov;
        r->iovcnt = 1;
        r->done = &sink;
    }
    rd.op = rd2.op = backend::Op::Read;
    wr.op = backend::Op::Write;
    zero.op = backend::Op::WriteZeroes;
    fl.op = backend::Op::Flush;
    fl.length = 0;
    fl.iov = nullptr;
    fl.iovcnt = 0;
    backend::Request* batch[] = {&rd, &wr, &zero, &rd2, &fl};
    d->backend().submit(batch);
    d->backend().drain();
    ASSERT_EQ(sink.results.size(), 5u);  // each exactly once
    EXPECT_EQ(rd.result, 0);
    EXPECT_EQ(wr.result, -EROFS);
    EXPECT_EQ(zero.result, -EROFS);
    EXPECT_EQ(rd2.result, 0);
    EXPECT_EQ(fl.result, 0);
    EXPECT_EQ(buf[0], 0);  // read the RAM disk's zeros
}

TEST_F(DiskFactoryTest, LunInUseIsRefusedAndLeftAttached) {
    auto first = DiskFactory().attach(ctl(), ram(4096, 3));
    EXPECT_EQ(refusal(ram(4096, 3)), "lun 3 is already in use");
    // The refused disk's teardown did not detach the first one.
    EXPECT_EQ(refusal(ram(4096, 3)), "lun 3 is already in use");
    first.reset();
    EXPECT_EQ(refusal(ram(4096, 3)), "");
}

TEST_F(DiskFactoryTest, LunOutOfRange) {
    EXPECT_EQ(refusal(ram(4096, 64)), "lun must be below 64");
    EXPECT_EQ(refusal(ram(4096, 63)), "");
}

TEST_F(DiskFactoryTest, NameDefaultsToTheLun) {
    auto d = DiskFactory().attach(ctl(), ram(4096, 5));
    EXPECT_EQ(d->name(), "lun5");
    DiskSpec s = ram(4096, 6);
    s.name = "data";
    EXPECT_EQ(DiskFactory().attach(ctl(), s)->name(), "data");
}

TEST_F(DiskFactoryTest, PlainDiskStatsAreTheScsiCounters) {
    auto d = DiskFactory().attach(ctl(), ram(4096, 0));
    EXPECT_EQ(d->stats_json(),
              R"({"disk":"lun0","model":false,"reads":0,"writes":0,"bytes_read":0,"bytes_written":0,"errors":0,"faults":0,"stalled":0,"unit_attentions":0})");
}

TEST_F(DiskFactoryTest, StatsEscapeTheDiskName) {
    DiskSpec s = ram(4096);
    s.name = "a\"b\\c";
    auto d = DiskFactory().attach(ctl(), s);
    EXPECT_EQ(d->stats_json(),
              R"({"disk":"a\"b\\c","model":false,"reads":0,"writes":0,"bytes_read":0,"bytes_written":0,"errors":0,"faults":0,"stalled":0,"unit_attentions":0})");
}

// A modelled disk's statistics come from the model's own formatter: the name is escaped
// there too.
TEST_F(DiskFactoryTest, ModelStatsEscapeTheDiskName) {
    perf::VirtualClock clock;
    DiskSpec s = ram(4096);
    s.perf = "profile=premium-p10";
    s.name = "a\"b\\c";
    auto d = DiskFactory(nullptr, &clock).attach(ctl(), s);
    const std::string json = d->stats_json();
    EXPECT_NE(json.find(R"("disk":"a\"b\\c",)"), std::string::npos) << json;
}

TEST_F(DiskFactoryTest, PerfDiskReportsModelStats) {
    perf::VirtualClock clock;  // drain() moves it on: no waiting on the host's time
    DiskSpec s = ram(1 << 20);
    s.perf = "profile=premium-p10";
    s.name = "data";
    auto d = DiskFactory(nullptr, &clock).attach(ctl(), s);
    ASSERT_NE(d->model(), nullptr);
    EXPECT_EQ(&d->backend(), d->model());
    EXPECT_EQ(d->model()->config().name, "data");
    EXPECT_EQ(d->model()->inner().size(), 1u << 20);

    std::vector<uint8_t> buf(4096);
    iovec iov{buf.data(), buf.size()};
    Sink sink;
    std::vector<backend::Request> reqs(4);
    std::vector<backend::Request*> batch;
    for (auto& r : reqs) {
        r.op = backend::Op::Read;
        r.length = 4096;
        r.iov = &iov;
        r.iovcnt = 1;
        r.done = &sink;
        batch.push_back(&r);
    }
    d->backend().submit(batch);
    d->backend().drain();
    EXPECT_EQ(sink.results, std::vector<int>(4, 0));
    const perf::Stats st = d->model()->stats();
    EXPECT_EQ(st.ios, 4u);
    EXPECT_EQ(st.reads, 4u);
    EXPECT_EQ(st.bytes_read, 4u * 4096);

    const std::string json = d->stats_json();
    EXPECT_EQ(json.rfind(R"({"t":)", 0), 0u) << json;  // the model's format, not the plain one
    EXPECT_NE(json.find(R"("disk":"data")"), std::string::npos) << json;
    EXPECT_EQ(json.find(R"("model":false)"), std::string::npos) << json;
}

// Each disk gets a trace id of its own (hvstor/trace_events.h), the same in every layer: the
// model and the storage under it, behind a read-only view, trace a request with it.
TEST_F(DiskFactoryTest, EachDiskHasOneTraceIdInEveryLayer) {
    perf::VirtualClock clock;
    auto plain = DiskFactory().attach(ctl(), ram(1 << 20));
    DiskSpec s = ram(1 << 20, 1);
    s.perf = "iops=1000";
    s.read_only = true;
    auto modelled = DiskFactory(nullptr, &clock).attach(ctl(), s);
    ASSERT_NE(modelled->model(), nullptr);
    const uint64_t id = modelled->backend().trace_id();
    EXPECT_NE(plain->backend().trace_id(), 0u);
    EXPECT_NE(id, 0u);
    EXPECT_NE(id, plain->backend().trace_id());
    EXPECT_EQ(modelled->model()->inner().trace_id(), id);

    hvstor::test::TraceCapture trace;
    std::vector<uint8_t> buf(4096);
    iovec iov{buf.data(), buf.size()};
    Sink sink;
    backend::Request r;
    r.length = 4096;
    r.iov = &iov;
    r.iovcnt = 1;
    r.done = &sink;
    backend::Request* one[] = {&r};
    modelled->backend().submit(one);
    modelled->backend().drain();
    EXPECT_EQ(sink.results, std::vector<int>{0});
    EXPECT_EQ(trace.traced(HVSTOR_TRACE_perf_queued), (std::vector<std::vector<uint64_t>>{{id, 0}}));
    EXPECT_EQ(trace.traced(HVSTOR_TRACE_backend_submit), (std::vector<std::vector<uint64_t>>{{id, 0, 0, 4096}}));
    EXPECT_EQ(trace.traced(HVSTOR_TRACE_backend_complete), (std::vector<std::vector<uint64_t>>{{id, 0, 0}}));
}

TEST_F(DiskFactoryTest, BadPerfSettingsAreNamed) {
    DiskSpec s = ram(4096);
    s.perf = "iops=lots";
    const std::string e = refusal(s);
    EXPECT_EQ(e.rfind("perf: ", 0), 0u) << e;
    EXPECT_NE(e.find("iops"), std::string::npos) << e;
    s.perf = "profile=no-such-disk";
    EXPECT_NE(refusal(s).find("no-such-disk"), std::string::npos) << refusal(s);
}

// The VM's caps reach the disks built after they were set, and only those.
TEST_F(DiskFactoryTest, ModelledDisksShareTheMachinesVmCaps) {
    DiskSpec s = ram(4096, 0);
    s.perf = "profile=premium-p10";
    capi::AttachedDisk& before = controller.add_disk(s);
    machine.set_vm_perf("profile=Standard_F32s_v2");
    s.lun = 1;
    capi::AttachedDisk& after = controller.add_disk(s);
    s.lun = 2;
    capi::AttachedDisk& after2 = controller.add_disk(s);
    EXPECT_FALSE(before.model()->stats().vm_credits.enabled);
    EXPECT_TRUE(after.model()->stats().vm_credits.enabled);
    EXPECT_TRUE(after2.model()->stats().vm_credits.enabled);
}

TEST_F(DiskFactoryTest, BadVmPerfSettingsAreRefused) {
    EXPECT_THROW(machine.set_vm_perf("profile=no-such-vm"), capi::ConfigError);
}

// Hot removal through the controller: the LUN is free again at once, and a disk that is
// not the controller's (any more) is refused without a change.
TEST_F(DiskFactoryTest, RemovedDiskFreesItsLun) {
    capi::AttachedDisk& a = controller.add_disk(ram(4096, 0));
    controller.add_disk(ram(4096, 1));
    EXPECT_EQ(controller.disk_count(), 2u);
    controller.remove_disk(&a);
    EXPECT_EQ(controller.disk_count(), 1u);
    EXPECT_THROW(controller.remove_disk(&a), std::invalid_argument);
    EXPECT_THROW(controller.remove_disk(nullptr), std::invalid_argument);
    EXPECT_EQ(controller.disk_count(), 1u);
    capi::AttachedDisk& again = controller.add_disk(ram(4096, 0));
    EXPECT_EQ(again.lun(), 0);
    EXPECT_EQ(controller.disk_count(), 2u);
}

} // namespace
