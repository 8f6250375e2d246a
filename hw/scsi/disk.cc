// The Disk: batches commands into backend submissions and reports each completion once.
#include <new>
#include <vector>

#include "fault_injector.h"
#include "hvstor/trace.h"
#include "target.h"

namespace hvstor::scsi {

namespace {

enum class Kind { Read, Write, Flush, Other };

Kind kind_of(uint8_t opcode) {
    switch (opcode) {
    case detail::op::kRead6:
    case detail::op::kRead10:
    case detail::op::kRead12:
    case detail::op::kRead16:
        return Kind::Read;
    case detail::op::kWrite6:
    case detail::op::kWrite10:
    case detail::op::kWrite12:
    case detail::op::kWrite16:
        return Kind::Write;
    case detail::op::kSyncCache10:
    case detail::op::kSyncCache16:
        return Kind::Flush;
    default:
        return Kind::Other;
    }
}

// hvstor_scsi_command: the LBA and length of the commands that address blocks (the length
// in blocks), the transfer length in bytes for the others.
void trace_command(const Command& cmd, const DiskConfig& cfg) {
    if (!tracing()) return;
    uint64_t lba = 0, len = cmd.xfer_len;
    detail::block_extent(cmd.cdb.data(), lba, len);
    trace<HVSTOR_TRACE_scsi_command>(cfg.trace_id, cfg.lun, cmd.cdb[0], lba, len);
}

// hvstor_scsi_status: the disk's own answer (fixed-format sense: key, ASC, ASCQ).
void trace_status(const Command& cmd, uint32_t id) {
    const bool sense = cmd.sense_len >= 14;
    trace<HVSTOR_TRACE_scsi_status>(id, cmd.cdb[0], cmd.status, sense ? cmd.sense[2] & 0xF : 0,
                                    sense ? cmd.sense[12] : 0, sense ? cmd.sense[13] : 0);
}

void deliver(Command& cmd, DiskStats& stats, CommandSink& sink, uint32_t trace_id) {
    const bool ok = cmd.status == kStatusGood;
    // A fault's answer replaces a command's own only where the command did not fail on the
    // disk: bytes reported as transferred must have been.
    if (!ok) cmd.transport.srb = false;
    switch (kind_of(cmd.cdb[0])) {
    case Kind::Read:
        stats.reads.fetch_add(1, std::memory_order_relaxed);
        if (ok) stats.bytes_read.fetch_add(cmd.data_transferred, std::memory_order_relaxed);
        break;
    case Kind::Write:
        stats.writes.fetch_add(1, std::memory_order_relaxed);
        if (ok) stats.bytes_written.fetch_add(cmd.data_transferred, std::memory_order_relaxed);
        break;
    case Kind::Flush:
        stats.flushes.fetch_add(1, std::memory_order_relaxed);
        break;
    case Kind::Other:
        stats.other.fetch_add(1, std::memory_order_relaxed);
        break;
    }
    if (cmd.status == kStatusCheckCondition) stats.errors.fetch_add(1, std::memory_order_relaxed);
    trace_status(cmd, trace_id);
    sink.command_done(&cmd);
}

} // namespace

Disk::Disk(backend::Backend& be, const DiskConfig& cfg, CommandSink& sink)
    : be_(be), cfg_(cfg), sink_(sink),
      faults_(std::make_unique<detail::FaultInjector>(stats_, [this](Command* c) { start_now(c); })) {}

Disk::~Disk() { faults_->stop(); }

detail::Target Disk::target() {
    const uint32_t bs = be_.block_size();
    return detail::Target{
        .be = be_,
        .cfg = cfg_,
        .self = *this,
        .blocks = be_.size() / bs,
        .block_size = bs,
        .read_only = be_.read_only(),
        .max_transfer_blocks = cfg_.max_transfer_bytes / bs,
        .pattern_writes = pattern_writes_,
    };
}

void Disk::set_fault(const FaultSpec& spec) { faults_->set(spec); }
void Disk::set_fault(const FaultSpec& spec, const FaultCounts& counts) { faults_->set(spec, &counts); }
FaultCounts Disk::fault_counts() const { return faults_->counts(); }
void Disk::stop_faults() { faults_->stop(); }
void Disk::suspend_faults(bool on) { faults_->suspend(on); }

uint64_t Disk::blocks() const { return be_.size() / be_.block_size(); }

bool Disk::resize(uint64_t bytes, std::string& err) {
    std::lock_guard lock(resize_mu_);
    const uint64_t before = blocks();
    if (!be_.resize(bytes, err)) return false;
    // After the backend's new size is visible: whoever takes the unit attention and asks
    // READ CAPACITY gets the new one.
    if (blocks() != before && cfg_.capacity_notice) capacity_changed_.store(true, std::memory_order_release);
    return true;
}

// The exchange hands the unit attention to one command only, however many channel workers
// race here; the others run as usual (against the new size).
bool Disk::report_capacity_change(Command& cmd) {
    if (!capacity_changed_.load(std::memory_order_relaxed)) return false;
    const uint8_t opcode = cmd.cdb[0];
    if (cmd.cdb_len == 0 || opcode == detail::op::kInquiry || opcode == detail::op::kReportLuns) return false;
    if (!capacity_changed_.exchange(false, std::memory_order_acq_rel)) return false;
    stats_.unit_attentions.fetch_add(1, std::memory_order_relaxed);
    if (opcode == detail::op::kRequestSense)
        detail::reply_sense_data(cmd, kSenseUnitAttention, detail::kCapacityDataChanged);
    else
        detail::fail(cmd, kSenseUnitAttention, detail::kCapacityDataChanged);
    return true;
}

void Disk::submit(std::span<Command* const> cmds) {
    const detail::Target t = target();
    // Batches of the usual size stay on the stack. A larger one gets a list of its own, or,
    // when memory is that short, goes to the backend in stack-sized pieces.
    constexpr size_t kLocal = 64;
    backend::Request* local[kLocal];
    std::vector<backend::Request*> big;
    backend::Request** batch = local;
    size_t cap = kLocal;
    if (cmds.size() > kLocal) {
        try {
            big.resize(cmds.size());
            batch = big.data();
            cap = big.size();
        } catch (const std::bad_alloc&) {
        }
    }
    size_t n = 0;
    for (Command* cmd : cmds) {
        cmd->transport = {};
        cmd->fault_mark = {};
        trace_command(*cmd, cfg_);
        if (report_capacity_change(*cmd)) {
            finish(*cmd);
            continue;
        }
        switch (faults_->check(*cmd)) {
        case detail::FaultInjector::Verdict::Answered:
            finish(*cmd);
            continue;
        case detail::FaultInjector::Verdict::Held:
            continue;
        case detail::FaultInjector::Verdict::Pass:
            break;
        }
        switch (detail::start_command(*cmd, t)) {
        case detail::Started::Answered:
            finish(*cmd);
            break;
        case detail::Started::Issued:
            cmd->be_req.queue = cmd->queue;
            batch[n++] = &cmd->be_req;
            if (n == cap) {
                be_.submit(std::span<backend::Request* const>(batch, n));
                n = 0;
            }
            break;
        case detail::Started::Handed:
            break;
        }
    }
    if (n != 0) be_.submit(std::span<backend::Request* const>(batch, n));
}

void Disk::start_now(Command* cmd) {
    const detail::Target t = target();
    switch (detail::start_command(*cmd, t)) {
    case detail::Started::Answered:
        finish(*cmd);
        break;
    case detail::Started::Issued: {
        cmd->be_req.queue = cmd->queue;
        backend::Request* r = &cmd->be_req;
        be_.submit(std::span<backend::Request* const>(&r, 1));
        break;
    }
    case detail::Started::Handed:
        break;
    }
}

void Disk::finish(Command& cmd) {
    if (cmd.fault_mark.matched) faults_->settled(cmd);
    deliver(cmd, stats_, sink_, cfg_.trace_id);
}

void Disk::complete(backend::Request* req) {
    auto* cmd = static_cast<Command*>(req->opaque);
    detail::finish_command(*cmd, *req);
    finish(*cmd);
}

} // namespace hvstor::scsi
