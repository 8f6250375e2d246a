// Closed-loop load for the model: each job keeps `qd` requests outstanding and resubmits on
// completion, like fio with a fixed iodepth. Single-threaded per Load; resubmissions made
// inside a completion are deferred to the outermost call, so a model that completes inline
// does not recurse.
#pragma once

#include <sys/uio.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "hvstor/perf/histogram.h"
#include "hvstor/perf/model.h"

namespace hvstor::perf::test {

struct JobSpec {
    backend::Op op = backend::Op::Read;
    uint64_t bs = 4096;
    uint32_t qd = 1;
    uint32_t channel = 0;
    uint64_t span = uint64_t(1) << 30;  // offsets drawn from [0, span)
};

class Load final : public backend::CompletionSink {
public:
    Load(ModelBackend& disk, std::vector<JobSpec> jobs) : disk_(disk), jobs_(jobs.size()) {
        uint64_t max_bs = 512;
        for (size_t i = 0; i < jobs.size(); i++) {
            jobs_[i].spec = jobs[i];
            max_bs = std::max(max_bs, jobs[i].bs);
        }
        buf_.resize(max_bs);
    }
    ~Load() override = default;

    // Brings the job to `qd` outstanding (extra requests already out finish and stop).
    void set_qd(size_t j, uint32_t qd) {
        Job& job = jobs_[j];
        job.target = qd;
        while (job.outstanding < job.target) {
            Slot* s = new_slot(j);
            queue(s);
        }
        flush();
    }
    void start(size_t j) { set_qd(j, jobs_[j].spec.qd); }
    void start_all() {
        for (size_t j = 0; j < jobs_.size(); j++) start(j);
    }
    void stop(size_t j) { jobs_[j].target = 0; }
    void stop_all() {
        for (auto& j : jobs_) j.target = 0;
    }

    uint64_t completed(size_t j) const { return jobs_[j].completed; }
    uint64_t errors(size_t j) const { return jobs_[j].errors; }
    uint32_t outstanding(size_t j) const { return jobs_[j].outstanding; }
    Histogram& latency(size_t j) { return jobs_[j].latency; }
    // Latencies of completions since the last call, for per-interval figures.
    Histogram& window(size_t j) { return jobs_[j].window; }

    void complete(backend::Request* req) override {
        Slot* s = static_cast<Slot*>(req->opaque);
        Job& job = jobs_[s->job];
        const Nanos lat = disk_.clock().now() - s->submitted;
        job.latency.add(lat);
        job.window.add(lat);
        job.completed++;
        if (req->result != 0) job.errors++;
        if (job.outstanding > job.target) {
            job.outstanding--;
            job.idle.push_back(s);
            return;
        }
        queue(s);
        flush();
    }

private:
    struct Slot {
        backend::Request req;
        iovec iov;
        size_t job;
        Nanos submitted;
    };
    struct Job {
        JobSpec spec;
        uint32_t target = 0;
        uint32_t outstanding = 0;
        uint64_t completed = 0, errors = 0;
        uint64_t next_off = 0;
        Histogram latency, window;
        std::deque<Slot> slots;
        std::vector<Slot*> idle;
    };

    Slot* new_slot(size_t j) {
        Job& job = jobs_[j];
        job.outstanding++;
        if (!job.idle.empty()) {
            Slot* s = job.idle.back();
            job.idle.pop_back();
            return s;
        }
        job.slots.emplace_back();
        Slot* s = &job.slots.back();
        s->job = j;
        return s;
    }

    void queue(Slot* s) {
        const JobSpec& sp = jobs_[s->job].spec;
        backend::Request& r = s->req;
        r = backend::Request{};
        r.op = sp.op;
        r.done = this;
        r.opaque = s;
        if (sp.op == backend::Op::Read || sp.op == backend::Op::Write) {
            s->iov = {buf_.data(), sp.bs};
            r.iov = &s->iov;
            r.iovcnt = 1;
            r.length = sp.bs;
            rng_ = rng_ * 6364136223846793005ULL + 1442695040888963407ULL;
            const uint64_t blocks = std::max<uint64_t>(1, sp.span / sp.bs);
            r.offset = ((rng_ >> 20) % blocks) * sp.bs;
        }
        ready_.push_back(s);
    }

    void flush() {
        if (flushing_) return;
        flushing_ = true;
        while (!ready_.empty()) {
            std::vector<Slot*> batch;
            batch.swap(ready_);
            const Nanos now = disk_.clock().now();
            // One submit per channel, in job order.
            for (size_t i = 0; i < batch.size();) {
                const uint32_t ch = jobs_[batch[i]->job].spec.channel;
                std::vector<backend::Request*> reqs;
                size_t k = i;
                for (; k < batch.size() && jobs_[batch[k]->job].spec.channel == ch; k++) {
                    batch[k]->submitted = now;
                    batch[k]->req.queue = uint16_t(ch);
                    reqs.push_back(&batch[k]->req);
                }
                disk_.submit(reqs);
                i = k;
            }
        }
        flushing_ = false;
    }

    ModelBackend& disk_;
    std::vector<Job> jobs_;
    std::vector<uint8_t> buf_;
    std::vector<Slot*> ready_;
    bool flushing_ = false;
    uint64_t rng_ = 42;
};

// A disk on a virtual clock over a null backend, for tests and the simulator.
// nullptr with the reason in *err.
inline std::unique_ptr<ModelBackend> make_disk(const std::string& settings, Clock& clock,
                                               std::shared_ptr<VmLimits> vm = nullptr,
                                               std::string* err = nullptr) {
    ModelConfig cfg;
    std::string e;
    std::unique_ptr<ModelBackend> m;
    if (parse_model_config(settings, cfg, e)) {
        auto inner = backend::make_null(uint64_t(64) << 30, e);
        if (inner) m = make_model(std::move(inner), cfg, &clock, std::move(vm), e);
    }
    if (err) *err = e;
    return m;
}

} // namespace hvstor::perf::test
