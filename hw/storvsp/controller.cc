#include "hvstor/storvsp/controller.h"

#include <algorithm>

#include "hvstor/trace.h"
#include "queue.h"

namespace hvstor::storvsp {

uint64_t preallocated_bytes(const ControllerConfig& cfg) {
    const uint64_t pages = cfg.max_transfer_bytes / kPageSize + 1;
    const uint64_t per_request = sizeof(IoContext) + pages * (2 * sizeof(iovec) + sizeof(uint64_t)) + sizeof(IoContext*);
    return max_queues(cfg) * cfg.max_outstanding_per_channel * per_request;
}

uint32_t max_request_packet(const ControllerConfig& cfg) {
    // Descriptor, reserved word and range count, then per page a range header and its pfn,
    // then the vstor packet; 8-byte aligned.
    const uint64_t pages = cfg.max_transfer_bytes / kPageSize + 1;
    const uint64_t bytes = sizeof(vmbus::PacketDescriptor) + 8 + pages * 16 + sizeof(VstorPacket);
    return uint32_t(std::max<uint64_t>((bytes + 7) & ~uint64_t{7}, vmbus::kMaxIncomingPacket));
}

uint64_t max_queues(const ControllerConfig& cfg) {
    // The primary, the subchannels open, and as many again whose close still waits for
    // their requests (a queue that is closing is not reused: see create_subchannels).
    return 2 * uint64_t{cfg.max_subchannels} + 1;
}

uint16_t queue_place(const ControllerConfig& cfg, uint16_t index) {
    const uint16_t m = cfg.max_subchannels;
    return index <= m || m == 0 ? index : uint16_t((index - 1) % m + 1);
}

bool validate(const ControllerConfig& cfg, std::string& err) {
    if (cfg.max_transfer_bytes < kPageSize || cfg.max_transfer_bytes > 8u << 20 || cfg.max_transfer_bytes % kPageSize)
        err = "max-transfer must be a multiple of 4096 between 4 KiB and 8 MiB, not " +
              std::to_string(cfg.max_transfer_bytes);
    else if (cfg.max_outstanding_per_channel < 1 || cfg.max_outstanding_per_channel > 4096)
        err = "outstanding must be 1..4096, not " + std::to_string(cfg.max_outstanding_per_channel);
    else if (cfg.max_subchannels > 256)
        err = "max-subchannels must be at most 256, not " + std::to_string(cfg.max_subchannels);
    else if (std::find(cfg.loops.begin(), cfg.loops.end(), nullptr) != cfg.loops.end())
        err = "an event loop for the channels is missing";
    else if (cfg.device_class != DeviceClass::Fc && (cfg.port_wwn || cfg.node_wwn))
        err = std::string("port-wwn and node-wwn belong to class=fc, not class=") + device_class_name(cfg.device_class);
    else if (cfg.device_class == DeviceClass::Fc && (!cfg.port_wwn || !cfg.node_wwn))
        err = "class=fc needs a port-wwn and a node-wwn other than 0";
    else if (cfg.device_class == DeviceClass::Ide && cfg.max_subchannels)
        err = "class=ide has no subchannels (Hyper-V's IDE accelerator offers none), not max-subchannels=" +
              std::to_string(cfg.max_subchannels);
    else if (const uint64_t b = preallocated_bytes(cfg); b > kMaxPreallocatedBytes)
        err = "outstanding (" + std::to_string(cfg.max_outstanding_per_channel) + ") x queues (2 x max-subchannels + 1 = " +
              std::to_string(max_queues(cfg)) + ") x max-transfer (" + std::to_string(cfg.max_transfer_bytes) +
              ") would preallocate " + std::to_string(b >> 20) + " MiB of request state; the limit is " +
              std::to_string(kMaxPreallocatedBytes >> 20) + " MiB: lower one of them";
    else
        return true;
    return false;
}

Controller::Controller(Host& host, vmbus::Bus& bus, const vmbus::Guid& instance, const ControllerConfig& cfg)
    : host_(host), bus_(bus), instance_(instance), cfg_(cfg), reset_answer_(cfg.reset_answer) {
    channels_.push_back(std::make_unique<Queue>(*this, 0));
    primary_ = channels_[0].get();
}

Controller::~Controller() {
    // The bus keeps pointers to our channels until their offers are withdrawn.
    std::vector<uint32_t> relids;
    {
        std::lock_guard lock(mu_);
        for (auto& c : channels_)
            if (c->relid()) relids.push_back(c->relid());
    }
    for (uint32_t r : relids) bus_.rescind(r);
    // The closes finish on the queues' closer threads, which call back into this
    // controller: wait for them before any member goes. The primary's first, since its
    // closer withdraws the subchannels (more closes) and its worker may still add one.
    primary_->join_closer();
    std::vector<Queue*> subs;
    {
        std::lock_guard lock(mu_);
        for (size_t i = 1; i < channels_.size(); i++) subs.push_back(channels_[i].get());
    }
    for (Queue* c : subs) c->join_closer();
}

bool Controller::start(std::string& err) {
    if (!validate(cfg_, err)) return false;
    if (cfg_.device_class == DeviceClass::Ide) {
        // Linux adds the disk at this target; an IDE channel has two, master and slave.
        target_ = ide_target(instance_);
        if (target_ > 1) {
            err = "class=ide: instance " + instance_.to_string() + " names IDE target " + std::to_string(target_) +
                  " in its second group (storvsc adds the disk there); it must be 0000 or 0001";
            return false;
        }
    }
    vmbus::OfferInfo info;
    info.type = class_guid(cfg_.device_class);
    info.instance = instance_;
    info.subchannel_index = 0;
    info.handler = primary_;
    primary_relid_ = bus_.offer(info);
    if (!primary_relid_) {
        err = "no VMBus channel id left";
        return false;
    }
    primary_->set_relid(primary_relid_);
    return true;
}

bool Controller::attach(uint8_t lun, scsi::Disk* disk, std::string& err, bool notice) {
    if (lun >= kMaxLuns) {
        err = "lun must be below " + std::to_string(kMaxLuns);
        return false;
    }
    if (cfg_.device_class == DeviceClass::Ide && lun != 0) {
        // storvsc adds LUN 0 of an IDE device and scans nothing at probe; Hyper-V gives
        // each IDE disk an accelerator channel of its own.
        err = "class=ide takes one disk, at lun 0, not lun " + std::to_string(lun);
        return false;
    }
    // Counted before the disk is visible: no round may run inline over it.
    const bool blocks = disk && disk->submit_may_block();
    if (blocks) blocking_disks_.fetch_add(1);
    scsi::Disk* none = nullptr;
    if (!luns_[lun].compare_exchange_strong(none, disk)) {
        if (blocks) blocking_disks_.fetch_sub(1);
        err = "lun " + std::to_string(lun) + " is already in use";
        return false;
    }
    if (notice) primary_->request_notice(Notice::EnumerateBus);
    return true;
}

void Controller::detach(uint8_t lun, bool notice) {
    if (lun >= kMaxLuns) return;
    // The only allocation comes before the LUN changes: a detach that throws changed nothing.
    std::vector<Queue*> queues;
    scsi::Disk* old = nullptr;
    {
        std::lock_guard lock(mu_); // queues are added under it: one added later never saw the old disk
        queues.reserve(channels_.size());
        for (auto& c : channels_) queues.push_back(c.get());
        old = luns_[lun].exchange(nullptr);
    }
    // Workers look disks up without a lock; wait until none can still hold the old one.
    for (Queue* q : queues) q->wait_batch_boundary();
    // Only once no round can still submit to it.
    if (old && old->submit_may_block()) blocking_disks_.fetch_sub(1);
    for (Queue* q : queues) q->lun_detached(lun);
    if (notice) primary_->request_notice(Notice::EnumerateBus);
}

bool Controller::notify(Notice n, std::string& err) {
    if (primary_->request_notice(n)) return true;
    err = "no storvsc session: the guest has not opened the controller's channel";
    return false;
}

void Controller::set_reset_answer(ResetAnswer a) {
    reset_answer_.store(a);
    std::vector<Queue*> queues;
    {
        std::lock_guard lock(mu_);
        for (auto& c : channels_) queues.push_back(c.get());
    }
    // Outside mu_, as every wake: a round the wake-up runs at once never waits for it.
    for (Queue* q : queues) q->wake_for_resets();
}

bool parse_reset_answer(std::string_view text, ResetAnswer& out, std::string& err) {
    for (ResetAnswer a : {ResetAnswer::Answer, ResetAnswer::Ignore, ResetAnswer::Fail}) {
        if (text == reset_answer_name(a)) {
            out = a;
            return true;
        }
    }
    err = "reset=" + std::string(text) + " is not one of answer, ignore, fail";
    return false;
}

const char* reset_answer_name(ResetAnswer a) {
    switch (a) {
    case ResetAnswer::Ignore: return "ignore";
    case ResetAnswer::Fail: return "fail";
    default: return "answer";
    }
}

bool parse_device_class(std::string_view text, DeviceClass& out, std::string& err) {
    for (DeviceClass c : {DeviceClass::Scsi, DeviceClass::Ide, DeviceClass::Fc}) {
        if (text == device_class_name(c)) {
            out = c;
            return true;
        }
    }
    err = "class=" + std::string(text) + " is not one of scsi, ide, fc";
    return false;
}

const char* device_class_name(DeviceClass c) {
    switch (c) {
    case DeviceClass::Ide: return "ide";
    case DeviceClass::Fc: return "fc";
    default: return "scsi";
    }
}

const vmbus::Guid& class_guid(DeviceClass c) {
    switch (c) {
    case DeviceClass::Ide: return vmbus::kIdeAcceleratorType;
    case DeviceClass::Fc: return vmbus::kSynthFcType;
    default: return vmbus::kScsiControllerType;
    }
}

uint16_t ide_target(const vmbus::Guid& instance) {
    return uint16_t(instance.bytes[5] << 8 | instance.bytes[4]);
}

bool parse_wwn(std::string_view text, const char* what, uint64_t& out, std::string& err) {
    uint64_t v = 0;
    bool hex = text.size() == 16;
    for (char c : text) {
        const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                    : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) hex = false;
        v = v << 4 | uint64_t(d & 15);
    }
    if (!hex) {
        err = std::string(what) + "=" + std::string(text) + " is not 16 hex digits (e.g. c003ff0000ff0001)";
        return false;
    }
    if (!v) {
        err = std::string(what) + "=" + std::string(text) + ": 0 is no world wide name";
        return false;
    }
    out = v;
    return true;
}

bool parse_notice(std::string_view text, Notice& out, std::string& err) {
    if (text == "enumerate-bus") out = Notice::EnumerateBus;
    else if (text == "remove-device") out = Notice::RemoveDevice;
    else {
        err = "notify=" + std::string(text) + " is not one of enumerate-bus, remove-device";
        return false;
    }
    return true;
}

bool Controller::addresses(uint8_t path, uint8_t target) const {
    // An IDE accelerator answers on its target whatever the path: guests do not set it
    // reliably (Linux sends its own channel 0, openvmm forces the IDE channel's).
    return target == target_ && (path == 0 || cfg_.device_class == DeviceClass::Ide);
}

scsi::Disk* Controller::lookup(uint8_t path, uint8_t target, uint8_t lun) {
    if (!addresses(path, target) || lun >= kMaxLuns) return nullptr;
    // Sequentially consistent with detach(): see Queue::wait_batch_boundary().
    return luns_[lun].load(std::memory_order_seq_cst);
}

std::vector<uint16_t> Controller::luns() {
    std::vector<uint16_t> out;
    for (size_t i = 0; i < kMaxLuns; i++)
        if (luns_[i].load()) out.push_back(static_cast<uint16_t>(i));
    return out;
}

uint32_t Controller::open_channels() const {
    std::lock_guard lock(mu_);
    uint32_t n = 0;
    for (auto& c : channels_) n += c->is_open();
    return n;
}

ControllerStats Controller::stats() const {
    ControllerStats s;
    s.subchannels_offered = subchannels_offered_.load();
    std::lock_guard lock(mu_);
    s.channels.reserve(channels_.size());
    for (auto& c : channels_) {
        const ChannelStatsSnapshot& q = s.channels.emplace_back(c->stats());
        s.srbs += q.srbs;
        s.completions += q.completions;
        s.srb_errors += q.srb_errors;
        s.bad_packets += q.bad_packets;
        s.open_channels += q.open;
        s.reset_lun += q.reset_lun;
        s.reset_bus += q.reset_bus;
        s.reset_adapter += q.reset_adapter;
        s.resets_held += q.resets_held;
        s.enumerate_bus_sent += q.enumerate_bus_sent;
        s.remove_device_sent += q.remove_device_sent;
    }
    return s;
}

uint16_t Controller::create_subchannels(uint16_t n) {
    std::vector<Queue*> fresh;
    {
        std::lock_guard lock(mu_);
        uint16_t have = 0;
        for (size_t i = 1; i < channels_.size(); i++) have += channels_[i]->relid() != 0;
        const uint16_t room = have < cfg_.max_subchannels ? uint16_t(cfg_.max_subchannels - have) : 0;
        n = std::min(n, room);
        // Channel objects are kept for the controller's life and reused: the bus may
        // still hold a pointer to one whose offer was just withdrawn.
        for (size_t i = 1; i < channels_.size() && fresh.size() < n; i++)
            if (!channels_[i]->relid() && !channels_[i]->closing()) fresh.push_back(channels_[i].get());
        // Each queue holds its request pool for the controller's life: a guest that keeps
        // closing subchannels with requests held by a slow disk and asking for new ones gets
        // no more than max_queues() of them, and fewer subchannels until the old ones drain.
        while (fresh.size() < n && channels_.size() < max_queues(cfg_)) {
            channels_.push_back(std::make_unique<Queue>(*this, uint16_t(channels_.size())));
            fresh.push_back(channels_.back().get());
        }
    }
    uint16_t offered = 0;
    for (Queue* c : fresh) {
        vmbus::OfferInfo info;
        info.type = class_guid(cfg_.device_class);
        info.instance = instance_;
        info.subchannel_index = c->index();
        info.handler = c;
        const uint32_t relid = bus_.offer(info);
        if (!relid) break;
        c->set_relid(relid);
        offered++;
        subchannels_offered_++;
    }
    trace<HVSTOR_TRACE_storvsp_subchannels>(n, offered);
    return offered;
}

// Closing the primary withdraws the subchannels, as on Hyper-V; a new probe creates them
// again.
void Controller::primary_closed() {
    std::vector<Queue*> subs;
    {
        std::lock_guard lock(mu_);
        for (size_t i = 1; i < channels_.size(); i++)
            if (channels_[i]->relid()) subs.push_back(channels_[i].get());
    }
    for (Queue* c : subs) {
        bus_.rescind(c->relid());
        c->set_relid(0);
    }
}

void Controller::command_done(scsi::Command* cmd) {
    auto* ctx = static_cast<IoContext*>(cmd->opaque);
    ctx->channel->done(ctx);
}

} // namespace hvstor::storvsp
