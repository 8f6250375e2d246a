#include "disk_factory.h"

#include "drive_backend.h"
#include "storage_gate.h"

#include <atomic>
#include <cerrno>
#include <utility>

#include "hvstor/json.h"
#include "hvstor/perf/timeline.h"

namespace hvstor::capi {

namespace {

// RAM and null backends have no read-only mode of their own, and readonly=on must not be
// ignored for them. The SCSI disk already write-protects a disk whose backend says so; the
// -EROFS here keeps the backend's contract for any other submitter.
// RAM and null keep their bytes in memory or nowhere: a read-only disk may still change its
// capacity (resize passes on), as a host resizing a read-only volume would.
class ReadOnlyBackend final : public backend::WrappingBackend {
public:
    using WrappingBackend::WrappingBackend;

    bool read_only() const override { return true; }
    std::string describe() const override { return inner_->describe() + " (read-only)"; }

    void submit(std::span<backend::Request* const> reqs) override {
        // A batch of reads and flushes passes whole, so the inner backend still sees batches.
        size_t from = 0;
        for (size_t i = 0; i < reqs.size(); i++) {
            if (allowed(reqs[i]->op)) continue;
            if (i > from) inner_->submit(reqs.subspan(from, i - from));
            reqs[i]->result = -EROFS;
            reqs[i]->done->complete(reqs[i]);
            from = i + 1;
        }
        if (from < reqs.size()) inner_->submit(reqs.subspan(from));
    }

private:
    static bool allowed(backend::Op op) { return op == backend::Op::Read || op == backend::Op::Flush; }
};

// The disk id of trace events (hvstor/trace_events.h): 1 for the first disk this process
// builds, then counting, never reused.
uint32_t next_trace_id() {
    static std::atomic<uint32_t> last{0};
    return last.fetch_add(1, std::memory_order_relaxed) + 1;
}

std::string disk_name(const DiskSpec& spec) {
    return spec.name.empty() ? "lun" + std::to_string(spec.lun) : spec.name;
}

} // namespace

AttachedDisk::AttachedDisk(storvsp::Controller& ctl, uint8_t lun, std::string name, bool notices)
    : ctl_(ctl), lun_(lun), notices_(notices), name_(std::move(name)) {}

void AttachedDisk::detach() {
    if (attached_) ctl_.detach(lun_, notices_);
    attached_ = false;
    // Commands a stall fault holds go to the backend, to be drained with the rest.
    if (disk_) disk_->stop_faults();
}

AttachedDisk::~AttachedDisk() {
    detach();
    // No command reaches the disk any more: what its model still holds back is cancelled,
    // not waited for (an unplug's DEVICE_DELETED comes once the storage is done).
    abandon_io(true);
    // The SCSI disk completes through the controller, so its I/O must be over before either
    // goes; the backend's destructor then has nothing left to wait for.
    if (backend_) backend_->drain();
}

void AttachedDisk::abandon_io(bool on) {
    if (model_) model_->abandon(on);
    if (gate_) gate_->abandon(on);
}

std::string AttachedDisk::stats_json() {
    if (model_) return perf::TimelineWriter::format(name_, model_->stats());
    const scsi::DiskStats& s = disk_->stats();
    return JsonWriter()
        .str("disk", name_)
        .boolean("model", false)
        .num("reads", s.reads.load())
        .num("writes", s.writes.load())
        .num("bytes_read", s.bytes_read.load())
        .num("bytes_written", s.bytes_written.load())
        .num("errors", s.errors.load())
        .num("faults", s.faults.load())
        .num("stalled", s.stalled.load())
        .num("unit_attentions", s.unit_attentions.load())
        .done();
}

namespace {

// Far above any fault's text; a saved state holds no longer one.
constexpr size_t kFaultTextMax = 4096;

} // namespace

void AttachedDisk::set_fault(std::string_view text) {
    scsi::FaultSpec f;
    std::string err;
    if (text.size() > kFaultTextMax)
        throw DiskError("fault: a text of " + std::to_string(text.size()) + " bytes (at most " +
                        std::to_string(kFaultTextMax) + ")");
    if (!scsi::parse_fault(text, f, err)) throw DiskError(err);
    apply_fault(f, text, nullptr);
}

void AttachedDisk::apply_fault(const scsi::FaultSpec& f, std::string_view text, const scsi::FaultCounts* counts) {
    std::lock_guard lock(fault_mu_);
    if (counts) disk_->set_fault(f, *counts);
    else disk_->set_fault(f);
    fault_ = f.action == scsi::FaultSpec::Action::None ? "none" : std::string(text);
}

std::string AttachedDisk::fault() const {
    std::lock_guard lock(fault_mu_);
    return fault_;
}

void AttachedDisk::save(state::Writer& w) {
    {
        std::lock_guard lock(fault_mu_);
        const scsi::FaultCounts c = disk_->fault_counts();
        w.str(fault_);
        w.u64(c.matched);
        w.u64(c.injected);
        w.u64(c.rng);
    }
    if (model_) model_->save(w);
}

void AttachedDisk::load(state::Reader& r) {
    const std::string text = r.str("a disk's fault", kFaultTextMax);
    scsi::FaultCounts c;
    c.matched = r.u64("a fault's matched commands");
    c.injected = r.u64("a fault's injections");
    c.rng = r.u64("a fault's generator");
    if (!r.ok()) return;
    scsi::FaultSpec f;
    std::string err;
    if (!scsi::parse_fault(text, f, err)) return r.fail("a disk's fault", "is not a fault; its length is", text.size());
    if (c.rng == 0) return r.fail("a fault's generator", "is zero, which no generator reaches:", 0);
    apply_fault(f, text, &c);
    if (model_) model_->load(r);
}

void AttachedDisk::resize(uint64_t bytes) {
    std::string err;
    if (!disk_->resize(bytes, err)) throw DiskError(err);
}

std::unique_ptr<backend::Backend> DiskFactory::open_storage(const DiskSpec& spec) {
    std::string err;
    std::unique_ptr<backend::Backend> be;
    if (spec.block && spec.backend != "drive")
        throw DiskError("drive= takes the place of a backend; backend=" + spec.backend + " goes without it");
    if (spec.backend == "file") {
        if (spec.path.empty()) throw DiskError("backend=file needs file=PATH");
        be = backend::open_file(spec.path, backend::FileOptions{spec.read_only, spec.direct}, err);
    } else if (spec.backend == "ram" || spec.backend == "null") {
        if (spec.size == 0 || spec.size % 512)
            throw DiskError("backend=" + spec.backend + " needs size= a non-zero multiple of 512, not " +
                            std::to_string(spec.size));
        be = spec.backend == "ram" ? backend::make_ram(spec.size, err) : backend::make_null(spec.size, err);
        if (be && spec.read_only) be = std::make_unique<ReadOnlyBackend>(std::move(be));
    } else if (spec.backend == "drive") {
        if (!spec.block) throw DiskError("backend=drive needs drive=ID");
        be = make_drive_backend(*spec.block);
        // QEMU opened the drive read-only, or the user asked for it on the disk only.
        if (spec.read_only && !be->read_only()) be = std::make_unique<ReadOnlyBackend>(std::move(be));
    } else if (spec.backend.empty()) {
        throw DiskError("no backend: give file=PATH, drive=ID, or backend=ram|null with size=");
    } else {
        throw DiskError("backend must be file, ram, null or drive, not '" + spec.backend + "'");
    }
    if (!be) throw DiskError(err);
    return be;
}

std::unique_ptr<perf::ModelBackend> DiskFactory::wrap_in_model(std::unique_ptr<backend::Backend> storage,
                                                               const DiskSpec& spec,
                                                               const std::string& name) const {
    perf::ModelConfig mc;
    std::string err;
    if (!perf::parse_model_config(spec.perf, mc, err)) throw DiskError("perf: " + err);
    if (mc.name.empty()) mc.name = name;
    auto model = perf::make_model(std::move(storage), mc, clock_, perf::VmLimits::chain(spec.group, vm_), err);
    if (!model) throw DiskError("perf: " + err);
    return model;
}

std::unique_ptr<AttachedDisk> DiskFactory::attach(storvsp::Controller& ctl, const DiskSpec& spec) const {
    std::unique_ptr<AttachedDisk> d(new AttachedDisk(ctl, spec.lun, disk_name(spec), spec.notices));
    d->backend_ = open_storage(spec);
    StorageGate* gated = nullptr;
    if (gate_) {
        auto g = std::make_unique<StorageGate>(std::move(d->backend_), *gate_);
        gated = g.get();
        d->backend_ = std::move(g);
    }
    if (!spec.perf.empty()) {
        auto model = wrap_in_model(std::move(d->backend_), spec, d->name_);
        d->model_ = model.get();
        d->backend_ = std::move(model);
    }
    d->gate_ = gated;  // only now: a model refused above took the storage with it
    scsi::DiskConfig dc;
    dc.serial = spec.serial;
    // The disk advertises what the controller accepts, so the guest never sends more.
    dc.max_transfer_bytes = ctl.config().max_transfer_bytes;
    dc.capacity_notice = spec.notices;
    // One trace id for every layer of the disk: the SCSI disk, the model, the storage.
    dc.trace_id = next_trace_id();
    dc.lun = spec.lun;
    d->backend_->set_trace_id(dc.trace_id);
    d->disk_ = std::make_unique<scsi::Disk>(*d->backend_, dc, ctl);
    if (!spec.fault.empty()) d->set_fault(spec.fault);
    std::string err;
    if (!ctl.attach(spec.lun, d->disk_.get(), err, spec.notices)) throw DiskError(err);
    d->attached_ = true;
    return d;
}

} // namespace hvstor::capi
