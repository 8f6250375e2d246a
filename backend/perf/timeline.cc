#include "hvstor/perf/timeline.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "hvstor/perf/model.h"
#include "saturate.h"

namespace hvstor::perf {
namespace {

void append_num(std::string& s, const char* key, double v, int decimals) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "\"%s\":%.*f", key, decimals, v);
    s += buf;
}

void append_str(std::string& s, const char* key, const std::string& v) {
    s += '"';
    s += key;
    s += "\":\"";
    for (char c : v) {
        if (c == '"' || c == '\\') {
            s += '\\';
            s += c;
        } else if (static_cast<unsigned char>(c) < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\u%04x", c);
            s += buf;
        } else {
            s += c;
        }
    }
    s += '"';
}

double ms(double ns) { return ns / 1e6; }

void append_credits(std::string& s, const char* key, const Credits& c) {
    s += '"';
    s += key;
    s += "\":";
    if (!c.enabled) {
        s += "null";
        return;
    }
    s += '{';
    append_num(s, "iops", c.iops, 0);
    s += ',';
    append_num(s, "iops_pct", c.iops_capacity > 0 ? 100 * c.iops / c.iops_capacity : 0, 2);
    s += ',';
    append_num(s, "mb", c.bytes / 1e6, 1);
    s += ',';
    append_num(s, "mb_pct", c.bytes_capacity > 0 ? 100 * c.bytes / c.bytes_capacity : 0, 2);
    s += '}';
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
    std::string s = "{";
    append_num(s, "t", double(l.end - origin) / 1e9, 3);
    s += ',';
    append_str(s, "disk", name);
    s += ',';
    append_num(s, "interval", double(l.end - l.start) / 1e9, 3);
    s += ',';
    append_num(s, "iops", l.iops, 1);
    s += ',';
    append_num(s, "read_iops", l.read_iops, 1);
    s += ',';
    append_num(s, "write_iops", l.write_iops, 1);
    s += ',';
    append_num(s, "mbps", l.mbps, 3);
    s += ",\"lat_ms\":{";
    append_num(s, "mean", ms(l.latency.mean), 3);
    s += ',';
    append_num(s, "p50", ms(double(l.latency.p50)), 3);
    s += ',';
    append_num(s, "p90", ms(double(l.latency.p90)), 3);
    s += ',';
    append_num(s, "p99", ms(double(l.latency.p99)), 3);
    s += ',';
    append_num(s, "p999", ms(double(l.latency.p999)), 3);
    s += ',';
    append_num(s, "max", ms(double(l.latency.max)), 3);
    s += "},\"throttle_ms\":{";
    append_num(s, "mean", ms(l.throttle_mean), 3);
    s += ',';
    append_num(s, "max", ms(double(l.throttle_max)), 3);
    s += "},\"queue\":{";
    append_num(s, "now", st.queued, 0);
    s += ',';
    append_num(s, "avg", l.queue_avg, 2);
    s += ',';
    append_num(s, "max", l.queue_max, 0);
    s += "},";
    append_num(s, "in_service", st.in_service, 0);
    s += ',';
    append_credits(s, "credits", st.credits);
    s += ',';
    append_credits(s, "vm_credits", st.vm_credits);
    s += ",\"total\":{";
    append_num(s, "ios", double(st.ios), 0);
    s += ',';
    append_num(s, "bytes", double(st.bytes_read + st.bytes_written), 0);
    s += ',';
    append_num(s, "errors", double(st.errors), 0);
    s += "},";
    append_num(s, "scale", st.time_scale, 3);
    s += '}';
    return s;
}

} // namespace hvstor::perf
