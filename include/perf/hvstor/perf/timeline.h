// Appends one JSON object per stats interval per disk to a file (format: docs/perf-model.md),
// from its own timer on the disks' clock.
#pragma once

#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "hvstor/perf/clock.h"
#include "hvstor/perf/stats.h"

namespace hvstor::perf {

class ModelBackend;

class TimelineWriter {
public:
    // Ticks every `interval`, which should be the disks' stats interval: a disk's line is
    // written when its last completed interval has moved on since its previous line.
    // nullptr with a message in `err` when the file cannot be opened (it is truncated).
    static std::unique_ptr<TimelineWriter> open(Clock& clock, const std::string& path, Nanos interval,
                                                std::string& err);
    ~TimelineWriter();
    TimelineWriter(const TimelineWriter&) = delete;
    TimelineWriter& operator=(const TimelineWriter&) = delete;

    // A disk must be removed (or the writer destroyed) before the disk is.
    void add(const std::string& name, ModelBackend& disk);
    void remove(ModelBackend& disk);
    // Writes whatever is due now and flushes the file.
    void poll();

    // The line for one interval of one disk, without the newline; "t" counts from `origin`.
    static std::string format(const std::string& name, const Stats& s, Nanos origin = 0);

private:
    TimelineWriter(Clock& clock, std::FILE* f, Nanos interval);
    void tick();

    struct Entry {
        std::string name;
        ModelBackend* disk;
        Nanos written_end;
    };
    Clock& clock_;
    std::FILE* file_;
    Nanos interval_;
    Nanos origin_;  // the interval boundary at or before the writer's creation
    std::mutex mu_;
    std::vector<Entry> disks_;
    std::unique_ptr<Timer> timer_;
};

} // namespace hvstor::perf
