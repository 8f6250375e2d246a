#include "stats_accumulator.h"

#include <algorithm>

#include "saturate.h"

namespace hvstor::perf::detail {

StatsAccumulator::StatsAccumulator(Nanos now, Nanos interval)
    : len_(interval), depth_since_(now), cur_start_(now), next_roll_(next_boundary(now, interval)) {}

// Intervals are aligned to multiples of the interval on the clock (the first one starts at
// creation) and closed lazily by the first event (or stats() call) after their end.
void StatsAccumulator::roll(Nanos now) {
    if (now < next_roll_) return;
    close_interval();
    if (now < next_roll_) return;
    // Whole intervals passed without an event: the latest of them is the last one.
    const Nanos end = next_roll_ + (now - next_roll_) / len_ * len_;
    last_ = IntervalStats{};
    last_.start = end - len_;
    last_.end = end;
    last_.queue_avg = depth_;
    last_.queue_max = depth_;
    depth_since_ = end;
    cur_start_ = end;
    next_roll_ = deadline_after(end, len_);
}

// The interval [cur_start_, next_roll_) becomes the last one.
void StatsAccumulator::close_interval() {
    const double secs = double(next_roll_ - cur_start_) / 1e9;
    cur_.queue_area += double(depth_) * double(next_roll_ - depth_since_);
    depth_since_ = next_roll_;
    IntervalStats& l = last_;
    l = IntervalStats{};
    l.start = cur_start_;
    l.end = next_roll_;
    l.ios = cur_.ios;
    l.reads = cur_.reads;
    l.writes = cur_.writes;
    l.bytes = cur_.bytes;
    l.iops = double(cur_.ios) / secs;
    l.read_iops = double(cur_.reads) / secs;
    l.write_iops = double(cur_.writes) / secs;
    l.mbps = double(cur_.bytes) / secs / 1e6;
    l.latency = cur_.latency.summary();
    l.issued = cur_.issued;
    l.throttle_mean = cur_.issued ? cur_.throttle_sum / double(cur_.issued) : 0;
    l.throttle_max = cur_.throttle_max;
    l.late_mean = cur_.ios ? cur_.late_sum / double(cur_.ios) : 0;
    l.late_max = cur_.late_max;
    l.model_latency = cur_.model_latency.summary();
    l.queue_avg = cur_.queue_area / double(next_roll_ - cur_start_);
    l.queue_max = cur_.queue_max;
    reset_interval();
    cur_start_ = next_roll_;
    next_roll_ = deadline_after(next_roll_, len_);
}

void StatsAccumulator::reset_interval() {
    cur_.ios = cur_.reads = cur_.writes = cur_.bytes = cur_.issued = 0;
    cur_.throttle_sum = 0;
    cur_.throttle_max = 0;
    cur_.late_sum = 0;
    cur_.late_max = 0;
    cur_.queue_area = 0;
    cur_.queue_max = depth_;
    cur_.latency.clear();
    cur_.model_latency.clear();
}

void StatsAccumulator::completed(backend::Op op, uint64_t length, Nanos latency, Nanos late, bool error) {
    late = std::clamp<Nanos>(late, 0, std::max<Nanos>(latency, 0));
    latency_.add(latency);
    cur_.latency.add(latency);
    cur_.model_latency.add(latency - late);
    cur_.late_sum += double(late);
    cur_.late_max = std::max(cur_.late_max, late);
    late_ = add_total(late_, late);
    late_max_ = std::max(late_max_, late);
    cur_.ios++;
    ios_++;
    if (error) errors_++;
    switch (op) {
    case backend::Op::Read:
        cur_.reads++;
        cur_.bytes += length;
        reads_++;
        bytes_read_ += length;
        break;
    case backend::Op::Write:
        cur_.writes++;
        cur_.bytes += length;
        writes_++;
        bytes_written_ += length;
        break;
    case backend::Op::Flush:
        flushes_++;
        break;
    case backend::Op::Discard:
    case backend::Op::WriteZeroes:
        others_++;
        break;
    }
}

void StatsAccumulator::fill(Stats& s) const {
    s.ios = ios_;
    s.reads = reads_;
    s.writes = writes_;
    s.flushes = flushes_;
    s.others = others_;
    s.errors = errors_ + rejected_;
    s.cancelled = cancelled_;
    s.bytes_read = bytes_read_;
    s.bytes_written = bytes_written_;
    s.issued = issued_;
    s.throttle_total = throttle_;
    s.throttle_max = throttle_max_;
    s.late_total = late_;
    s.late_max = late_max_;
    s.latency = latency_.summary();
    s.last = last_;
}

} // namespace hvstor::perf::detail
