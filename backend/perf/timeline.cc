#include "hvstor/perf/timeline.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string_view>

#include "hvstor/json.h"
#include "hvstor/perf/model.h"
#include "saturate.h"

namespace hvstor::perf {
namespace {

double ms(double ns) { return ns / 1e6; }

void credits(JsonWriter& j, std::string_view key, const Credits& c) {
    if (!c.enabled) {
        j.null(key);
        return;
    }
    j.begin_object(key)
        .num("iops", c.iops, 0)
        .num("iops_pct", c.iops_capacity > 0 ? 100 * c.iops / c.iops_capacity : 0, 2)
        .num("mb", c.bytes / 1e6, 1)
        .num("mb_pct", c.bytes_capacity > 0 ? 100 * c.bytes / c.bytes_capacity : 0, 2)
        .end_object();
}

} // namespace

std::unique_ptr<TimelineWriter> TimelineWriter::open(Clock& clock, const std::string& path, Nanos interval,
                                                     std::string& err) {
    if (interval < kMs) {
        err = "perf: timeline interval must be at least 1ms";
        return nullptr;
    }
    std::FILE* f = std::fopen(path.c_str(), "w");
    if (!f) {
        err = "perf: cannot open timeline " + path + ": " + std::strerror(errno);
        return nullptr;
    }
    return std::unique_ptr<TimelineWriter>(new TimelineWriter(clock, f, interval));
}

TimelineWriter::TimelineWriter(Clock& clock, std::FILE* f, Nanos interval)
    : clock_(clock), file_(f), interval_(interval), origin_(clock.now() / interval * interval) {
    timer_ = clock_.make_timer([this] { tick(); });
    timer_->arm(detail::next_boundary(clock_.now(), interval_));
}

TimelineWriter::~TimelineWriter() {
    timer_.reset();
    poll();
    std::fclose(file_);
}

void TimelineWriter::add(const std::string& name, ModelBackend& disk) {
    std::lock_guard lock(mu_);
    // Intervals that ended before the disk joined are not reported.
    disks_.push_back({name, &disk, disk.stats().last.end});
}

void TimelineWriter::remove(ModelBackend& disk) {
    std::lock_guard lock(mu_);
    disks_.erase(std::remove_if(disks_.begin(), disks_.end(), [&](const Entry& e) { return e.disk == &disk; }),
                 disks_.end());
}

void TimelineWriter::poll() {
    std::lock_guard lock(mu_);
    for (Entry& e : disks_) {
        const Stats s = e.disk->stats();
        if (s.last.end <= e.written_end) continue;
        e.written_end = s.last.end;
        const std::string line = format(e.name, s, origin_);
        std::fwrite(line.data(), 1, line.size(), file_);
        std::fputc('\n', file_);
    }
    std::fflush(file_);
}

void TimelineWriter::tick() {
    poll();
    timer_->arm(detail::next_boundary(clock_.now(), interval_));
}

std::string TimelineWriter::format(const std::string& name, const Stats& st, Nanos origin) {
    const IntervalStats& l = st.last;
    JsonWriter j;
    j.num("t", double(l.end - origin) / 1e9, 3)
        .str("disk", name)
        .num("interval", double(l.end - l.start) / 1e9, 3)
        .num("iops", l.iops, 1)
        .num("read_iops", l.read_iops, 1)
        .num("write_iops", l.write_iops, 1)
        .num("mbps", l.mbps, 3);
    j.begin_object("lat_ms")
        .num("mean", ms(l.latency.mean), 3)
        .num("p50", ms(double(l.latency.p50)), 3)
        .num("p90", ms(double(l.latency.p90)), 3)
        .num("p99", ms(double(l.latency.p99)), 3)
        .num("p999", ms(double(l.latency.p999)), 3)
        .num("max", ms(double(l.latency.max)), 3)
        .end_object();
    j.begin_object("throttle_ms")
        .num("mean", ms(l.throttle_mean), 3)
        .num("max", ms(double(l.throttle_max)), 3)
        .end_object();
    j.begin_object("late_ms")
        .num("mean", ms(l.late_mean), 3)
        .num("max", ms(double(l.late_max)), 3)
        .end_object();
    j.begin_object("model_lat_ms")
        .num("mean", ms(l.model_latency.mean), 3)
        .num("p50", ms(double(l.model_latency.p50)), 3)
        .num("p99", ms(double(l.model_latency.p99)), 3)
        .end_object();
    j.begin_object("queue").num("now", st.queued).num("avg", l.queue_avg, 2).num("max", l.queue_max).end_object();
    j.num("in_service", st.in_service);
    credits(j, "credits", st.credits);
    credits(j, "vm_credits", st.vm_credits);
    j.begin_object("total")
        .num("ios", st.ios)
        .num("bytes", st.bytes_read + st.bytes_written)
        .num("errors", st.errors)
        .num("cancelled", st.cancelled)
        .end_object();
    j.num("scale", st.time_scale, 3);
    return j.done();
}

} // namespace hvstor::perf
