// SCSI commands against a small disk: every opcode the target knows (READ/WRITE 6/10/12/16,
// VERIFY, WRITE SAME, UNMAP, INQUIRY and its VPD pages, MODE SENSE/SELECT, READ CAPACITY,
// SYNCHRONIZE CACHE, REQUEST SENSE, PERSISTENT RESERVE IN, ...) and any other byte, with any
// CDB length, transfer length and split of the buffer, in batches; plus the controller's
// helpers for an absent LUN and REPORT LUNS; and the disk's injected faults (hv-disk's
// fault= text, hvstor/scsi/fault.h), set between commands while earlier ones are held.
//
// Input: a mode byte (bit 0: null backend instead of RAM, bit 1: a VPD serial, bits 2-3: the
// disk's size), then records (fuzz_common.h). Type 1: the body is a fault's text, parsed and,
// when it parses, set on the disk. Any other type: one command:
//   u8 flags (bit 0: submit the batch after this one; bits 1-2: 0 the disk, 1 the absent-LUN
//   answer, 2 REPORT LUNS with a LUN list from the data), u8 direction (0 none, 1 to the
//   device, 2 from it), u32 transfer length, u8 buffer pieces, u8 CDB length, 16 CDB bytes,
//   then data for the buffer (repeated).
// Each buffer piece is a heap block of its own, so ASan sees any access past it. Checked:
// every command completes exactly once, never reports more data than its transfer length or
// more than 18 bytes of sense, and ends GOOD, CHECK CONDITION (with sense) or BUSY; a fault's
// transport answer stays on a command only when the disk did not fail it, with 0 or 18 bytes
// of sense; a fault text that is refused has a message and leaves the spec as it was, one
// that parses has every value in its range.
#include <deque>
#include <memory>
#include <string_view>
#include <vector>

#include "fuzz_common.h"
#include "hvstor/backend/backend.h"
#include "hvstor/scsi/disk.h"

using namespace hvstor;
using namespace hvstor::fuzz;

namespace {

constexpr uint32_t kMaxXfer = 512 * 1024;   // twice the disk's max transfer
constexpr size_t kMaxBytes = 4 << 20;       // all buffers of one input
constexpr size_t kMaxBatch = 16;
constexpr uint64_t kSizes[] = {1 << 20, 64 * 1024, 3 * 512, 16 << 20};

struct Item {
    scsi::Command cmd;
    std::vector<std::unique_ptr<uint8_t[]>> pieces;
    std::vector<iovec> iov;
    std::atomic<int> done{0};
    bool submitted = false;
};

class Sink : public scsi::CommandSink {
public:
    void command_done(scsi::Command* cmd) override {
        auto* it = static_cast<Item*>(cmd->opaque);
        FUZZ_CHECK(it->done.fetch_add(1) == 0); // exactly once
    }
};

void check(const Item& it) {
    const scsi::Command& c = it.cmd;
    FUZZ_CHECK(it.done.load() == 1);
    FUZZ_CHECK(c.data_transferred <= c.xfer_len);
    FUZZ_CHECK(c.sense_len <= c.sense.size());
    FUZZ_CHECK(c.status == scsi::kStatusGood || c.status == scsi::kStatusCheckCondition ||
               c.status == scsi::kStatusBusy);
    if (c.status == scsi::kStatusCheckCondition) FUZZ_CHECK(c.sense_len > 0);
    const scsi::TransportAnswer& t = c.transport;
    if (t.srb) FUZZ_CHECK(c.status == scsi::kStatusGood && (t.sense_len == 0 || t.sense_len == 18));
}

void check_spec(std::string_view text, const scsi::FaultSpec& f) {
    using A = scsi::FaultSpec::Action;
    FUZZ_CHECK(f.every >= 1 && f.every <= 1000000 && f.percent >= 1 && f.percent <= 100);
    FUZZ_CHECK(f.lba_first <= f.lba_last && f.stall_ms <= 3600000 && (f.reads || f.writes || f.flushes));
    FUZZ_CHECK((f.action == A::None) == (text.empty() || text == "none"));
    if (f.action != A::Srb) FUZZ_CHECK(!f.has_sense && !f.has_data && f.srb_status == 0 && f.scsi_status == 0);
    if (f.action == A::OpStatus) FUZZ_CHECK(f.has_op_status);
    if (f.has_sense) FUZZ_CHECK(f.sense_key <= 0xF);
}

// A record of type 1: the fault's text, set on the disk when it parses.
void set_fault(scsi::Disk& disk, std::span<const uint8_t> body) {
    const std::string_view text(reinterpret_cast<const char*>(body.data()), body.size());
    scsi::FaultSpec f;
    std::string err;
    if (!scsi::parse_fault(text, f, err)) {
        FUZZ_CHECK(!err.empty() && f == scsi::FaultSpec{});
        return;
    }
    check_spec(text, f);
    disk.set_fault(f);
}

// A write's data: the record's bytes over and over (a counting pattern without any).
// The harness's own filling of data buffers is not what is being fuzzed: without coverage
// instrumentation, whose comparison hooks in this loop took 45% of the target's time.
__attribute__((no_sanitize("coverage"))) void fill(uint8_t* p, uint32_t len, std::span<const uint8_t> data) {
    if (data.empty()) {
        for (uint32_t j = 0; j < len; j++) p[j] = uint8_t(j);
        return;
    }
    for (uint32_t at = 0; at < len; at += uint32_t(data.size()))
        std::memcpy(p + at, data.data(), std::min<size_t>(data.size(), len - at));
}

void run(Reader& in) {
    const uint8_t mode = in.u8();
    const uint64_t size = kSizes[(mode >> 2) & 3];
    std::string err;
    auto be = (mode & 1) ? backend::make_null(size, err) : backend::make_ram(size, err);
    if (!be) fail(err.c_str());
    scsi::DiskConfig cfg;
    if (mode & 2) cfg.serial = "fuzz-serial-0123456789";
    Sink sink;
    std::deque<Item> items;
    {
        scsi::Disk disk(*be, cfg, sink);
        std::vector<scsi::Command*> batch;
        auto submit = [&] {
            if (batch.empty()) return;
            disk.submit(batch);
            batch.clear();
        };
        size_t bytes = 0;
        Record r;
        for (int n = 0; n < 64 && next_record(in, r); n++) {
            if (r.type == 1) {
                set_fault(disk, r.body);
                continue;
            }
            Reader b(r.body);
            const uint8_t flags = b.u8();
            const uint8_t dir = b.u8() % 3;
            uint32_t xfer = std::min(b.u32(), kMaxXfer);
            const uint32_t npieces = 1 + b.u8() % 8;
            Item& it = items.emplace_back();
            scsi::Command& c = it.cmd;
            c.cdb_len = b.u8();
            auto cdb = b.bytes(16);
            std::memcpy(c.cdb.data(), cdb.data(), cdb.size());
            auto data = b.bytes(b.left());
            c.dir = dir == 1 ? scsi::Dir::ToDevice : dir == 2 ? scsi::Dir::FromDevice : scsi::Dir::None;
            if (c.dir == scsi::Dir::None || bytes + xfer > kMaxBytes) xfer = 0; // as storvsp hands it on
            if (xfer == 0) c.dir = scsi::Dir::None;
            bytes += xfer;
            // The buffer in pieces of (nearly) equal size, each its own allocation.
            const uint32_t pieces = std::min(npieces, std::max<uint32_t>(xfer, 1));
            uint32_t left = xfer;
            for (uint32_t i = 0; i < pieces && left; i++) {
                const uint32_t len = i + 1 == pieces ? left : xfer / pieces;
                auto p = std::make_unique_for_overwrite<uint8_t[]>(len);
                if (c.dir == scsi::Dir::ToDevice) fill(p.get(), len, data);
                it.iov.push_back({p.get(), len});
                it.pieces.push_back(std::move(p));
                left -= len;
            }
            c.iov = it.iov.empty() ? nullptr : it.iov.data();
            c.iovcnt = uint32_t(it.iov.size());
            c.xfer_len = xfer;
            c.opaque = &it;
            c.queue = uint16_t(n);
            switch ((flags >> 1) & 3) {
            case 1:
                scsi::answer_absent_lun(c);
                it.done = 1;
                break;
            case 2: {
                std::vector<uint16_t> luns;
                for (size_t i = 0; i + 1 < data.size() && luns.size() < 512; i += 2)
                    luns.push_back(uint16_t(data[i] | data[i + 1] << 8));
                scsi::answer_report_luns(c, luns);
                it.done = 1;
                break;
            }
            default:
                it.submitted = true;
                batch.push_back(&c);
                if ((flags & 1) || batch.size() == kMaxBatch) submit();
            }
        }
        submit();
        disk.stop_faults(); // what a stall holds goes to the backend, to be drained
        be->drain();
    }
    for (const Item& it : items) check(it);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    Reader in(data, size);
    run(in);
    return 0;
}
