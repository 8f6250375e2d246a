// Trace events below the storage protocol: writes through a real SCSI disk over a real
// performance model (a low IOPS cap with a small credit bank) over a real RAM backend. Each
// layer traces with the disk's id: the SCSI disk (command in, status and sense out), the
// model (time queued, the cap that held an IO, the credit bank running dry) and the storage
// (submit, complete, error). The VMBus and storvsp events are checked where those layers are
// tested (test_vmbus.cc, test_storvsp.cc, storvsp/test_bus.cc).
#include <gtest/gtest.h>

#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <memory>
#include <string>
#include <vector>

#include "hvstor/backend/backend.h"
#include "hvstor/perf/clock.h"
#include "hvstor/perf/config.h"
#include "hvstor/perf/model.h"
#include "hvstor/scsi/disk.h"
#include "trace_capture.h"

namespace hvstor {
namespace {

using Args = std::vector<uint64_t>;
using test::TraceCapture;

constexpr uint32_t kDisk = 7;  // the id the factory would hand every layer
constexpr uint16_t kLun = 3;
constexpr uint8_t kWrite10 = 0x2A, kRead10 = 0x28;
constexpr uint64_t kOpRead = 0, kOpWrite = 1;  // backend::Op in the trace

class Sink : public scsi::CommandSink {
public:
    void command_done(scsi::Command* cmd) override { done.push_back(cmd); }
    std::vector<scsi::Command*> done;  // the RAM backend and the virtual clock complete inline
};

// A 10-byte READ or WRITE with its own buffer.
struct Rw10 {
    scsi::Command cmd;
    std::vector<uint8_t> buf;
    iovec iov{};

    Rw10(uint8_t opcode, uint32_t lba, uint16_t blocks) : buf(blocks * 512u, 0x5A) {
        cmd.cdb = {opcode, 0, uint8_t(lba >> 24), uint8_t(lba >> 16), uint8_t(lba >> 8), uint8_t(lba), 0,
                   uint8_t(blocks >> 8), uint8_t(blocks)};
        cmd.cdb_len = 10;
        cmd.dir = opcode == kWrite10 ? scsi::Dir::ToDevice : scsi::Dir::FromDevice;
        iov = {buf.data(), buf.size()};
        cmd.iov = &iov;
        cmd.iovcnt = 1;
        cmd.xfer_len = uint32_t(buf.size());
    }
};

// The three layers as the disk factory builds them, with the ids it would hand out.
struct Stack {
    perf::VirtualClock clock;
    std::unique_ptr<perf::ModelBackend> model;
    Sink sink;
    std::unique_ptr<scsi::Disk> disk;

    explicit Stack(const std::string& perf) {
        std::string err;
        auto ram = backend::make_ram(1 << 20, err);
        EXPECT_TRUE(ram) << err;
        perf::ModelConfig mc;
        EXPECT_TRUE(perf::parse_model_config(perf, mc, err)) << err;
        model = perf::make_model(std::move(ram), mc, &clock, nullptr, err);
        EXPECT_TRUE(model) << err;
        model->set_trace_id(kDisk);
        scsi::DiskConfig dc;
        dc.trace_id = kDisk;
        dc.lun = kLun;
        disk = std::make_unique<scsi::Disk>(*model, dc, sink);
    }
};

// IOPS 100, bursting to 1000 from a bank of 9 IOs (0.01 s x 900): of 20 writes sent at once
// a few go at once, the next ones at the burst rate until the bank is dry, the rest at 100/s.
constexpr const char* kLowCap = "iops=100,burst=credit,burst.iops=1000,burst.duration=10ms";
constexpr size_t kWrites = 20;

TEST(TraceLayers, WritesThroughDiskModelAndStorageAreTracedInEveryLayer) {
    TraceCapture trace;
    Stack s(kLowCap);
    ASSERT_TRUE(s.model);
    std::vector<std::unique_ptr<Rw10>> ios;
    std::vector<scsi::Command*> cmds;
    for (uint32_t i = 0; i < kWrites; i++) {
        ios.push_back(std::make_unique<Rw10>(kWrite10, 8 * i, 8));
        cmds.push_back(&ios.back()->cmd);
    }
    s.disk->submit(cmds);
    s.model->drain();  // moves the virtual clock on until every write completed
    ASSERT_EQ(s.sink.done.size(), kWrites);

    // SCSI: disk id, LUN, opcode, LBA, blocks in; disk id, opcode, GOOD, no sense out.
    const auto in = trace.traced(HVSTOR_TRACE_scsi_command);
    ASSERT_EQ(in.size(), kWrites);
    for (uint32_t i = 0; i < kWrites; i++) EXPECT_EQ(in[i], (Args{kDisk, kLun, kWrite10, 8 * i, 8}));
    const auto out = trace.traced(HVSTOR_TRACE_scsi_status);
    ASSERT_EQ(out.size(), kWrites);
    for (auto& a : out) EXPECT_EQ(a, (Args{kDisk, kWrite10, 0, 0, 0, 0}));

    // Storage: every write reaches the RAM backend with its byte range, and completes with 0.
    auto submit = trace.traced(HVSTOR_TRACE_backend_submit);
    ASSERT_EQ(submit.size(), kWrites);
    std::sort(submit.begin(), submit.end());
    for (uint64_t i = 0; i < kWrites; i++) EXPECT_EQ(submit[i], (Args{kDisk, kOpWrite, 4096 * i, 4096}));
    const auto done = trace.traced(HVSTOR_TRACE_backend_complete);
    ASSERT_EQ(done.size(), kWrites);
    for (auto& a : done) EXPECT_EQ(a, (Args{kDisk, kOpWrite, 0}));
    EXPECT_TRUE(trace.traced(HVSTOR_TRACE_backend_error).empty());

    // The model: each write's time queued, the first at once, the last behind the base rate.
    const auto queued = trace.traced(HVSTOR_TRACE_perf_queued);
    ASSERT_EQ(queued.size(), kWrites);
    for (auto& a : queued) EXPECT_EQ(a[0], kDisk);
    EXPECT_EQ(queued.front()[1], 0u);
    EXPECT_GE(queued.back()[1], uint64_t(50 * perf::kMs)) << "10 writes at 100/s after the burst";
    // Held by the disk's IOPS cap (1), each time for a while.
    const auto held = trace.traced(HVSTOR_TRACE_perf_throttled);
    ASSERT_FALSE(held.empty());
    for (auto& a : held) {
        EXPECT_EQ(a[0], kDisk);
        EXPECT_EQ(a[1], 1u) << "the disk's IOPS cap";
        EXPECT_GT(a[2], 0u);
    }
    // The bank ran dry once: no IOPS credits left, no bandwidth bank.
    const auto credits = trace.traced(HVSTOR_TRACE_perf_burst_credits);
    ASSERT_EQ(credits.size(), 1u);
    EXPECT_EQ(credits[0], (Args{kDisk, 0, 0}));
}

// A command the disk refuses answers with its sense and never reaches the storage; a
// request the storage refuses is traced as an error with its errno.
TEST(TraceLayers, RefusalsAreTracedWithSenseAndErrno) {
    TraceCapture trace;
    Stack s("iops=1000");
    ASSERT_TRUE(s.model);
    Rw10 past_end(kRead10, 2048, 1);  // the disk has 2048 blocks
    s.disk->submit(&past_end.cmd);
    ASSERT_EQ(s.sink.done.size(), 1u);
    EXPECT_EQ(trace.traced(HVSTOR_TRACE_scsi_command), (std::vector<Args>{{kDisk, kLun, kRead10, 2048, 1}}));
    // CHECK CONDITION, ILLEGAL REQUEST, LOGICAL BLOCK ADDRESS OUT OF RANGE.
    EXPECT_EQ(trace.traced(HVSTOR_TRACE_scsi_status), (std::vector<Args>{{kDisk, kRead10, 2, 5, 0x21, 0}}));
    EXPECT_TRUE(trace.traced(HVSTOR_TRACE_backend_submit).empty());

    // Straight to the storage under the model, which has the id the model passed on.
    struct Done : backend::CompletionSink {
        int result = 1;
        void complete(backend::Request* r) override { result = r->result; }
    } done;
    uint8_t byte = 0;
    iovec iov{&byte, 1};
    backend::Request r;
    r.op = backend::Op::Read;
    r.offset = 1;  // not block aligned
    r.length = 1;
    r.iov = &iov;
    r.iovcnt = 1;
    r.done = &done;
    backend::Request* one = &r;
    s.model->inner().submit(std::span<backend::Request* const>(&one, 1));
    EXPECT_EQ(done.result, -EINVAL);
    EXPECT_EQ(trace.traced(HVSTOR_TRACE_backend_submit), (std::vector<Args>{{kDisk, kOpRead, 1, 1}}));
    EXPECT_EQ(trace.traced(HVSTOR_TRACE_backend_complete),
              (std::vector<Args>{{kDisk, kOpRead, uint64_t(int64_t(-EINVAL))}}));
    EXPECT_EQ(trace.traced(HVSTOR_TRACE_backend_error), (std::vector<Args>{{kDisk, kOpRead, EINVAL}}));
}

// No capture, no sink: events go nowhere, and a capture sees only its own time.
TEST(TraceLayers, WithoutASinkNothingIsTraced) {
    EXPECT_FALSE(tracing());
    Stack s("iops=1000");
    ASSERT_TRUE(s.model);
    Rw10 w(kWrite10, 0, 1);
    s.disk->submit(&w.cmd);
    TraceCapture trace;
    EXPECT_TRUE(tracing());
    EXPECT_TRUE(trace.events().empty());
}

} // namespace
} // namespace hvstor
