// Block backends: where a disk's bytes live. Asynchronous, batch-friendly, and each
// request completes exactly once through the backend's CompletionSink.
#pragma once

#include <sys/uio.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>

namespace hvstor::backend {

enum class Op : uint8_t {
    Read,
    Write,
    Flush,        // everything completed before it is on stable storage
    Discard,      // the range may read back as anything (zeros for RAM/null/file holes)
    WriteZeroes,  // the range reads back as zeros
};

class CompletionSink;

struct Request {
    Op op = Op::Read;
    bool fua = false;        // Write: on stable storage before completion
    uint64_t offset = 0;     // bytes, a multiple of block_size()
    uint64_t length = 0;     // bytes, a multiple of block_size()
    const iovec* iov = nullptr; // Read/Write: host buffers (guest memory), `length` bytes total
    uint32_t iovcnt = 0;
    CompletionSink* done = nullptr; // told when the request completes
    void* opaque = nullptr;  // the submitter's
    // Which of the submitter's queues this came from (a VMBus channel): lets a backend
    // that models a host queue serve queues fairly. Ignored by the others.
    uint16_t queue = 0;
    int result = 0;          // set before completion: 0 or -errno
    // The disk id of the backend that took it, for its completion's trace event: set by
    // begin_request(), whatever the submitter left there.
    uint32_t trace_id = 0;
};

class CompletionSink {
public:
    virtual ~CompletionSink() = default;
    // Called exactly once per submitted request, from any thread (possibly the submitting
    // one, before submit() returns). The request memory belongs to the submitter. The
    // backend holds none of its own locks when it calls this: the completion may submit
    // again on the same thread (a channel's round run by the completing thread).
    virtual void complete(Request* req) = 0;
};

class Backend {
public:
    virtual ~Backend() = default;
    virtual uint64_t size() const = 0;         // bytes
    virtual uint32_t block_size() const = 0;   // logical block size (512)
    virtual bool read_only() const = 0;
    virtual std::string describe() const = 0;  // "file:/path (O_DIRECT)", "ram:1G", ...

    // Starts all requests. Thread-safe: several channels submit concurrently. Requests
    // out of range or not block aligned complete with -EINVAL; writes to a read-only
    // backend with -EROFS.
    virtual void submit(std::span<Request* const> reqs) = 0;

    // Whether submit() may wait: for the disk (a buffered write), for room, for a lock held
    // long. A channel's round runs on the guest's vCPU thread (which holds QEMU's big lock)
    // only while no disk on the controller says so.
    virtual bool submit_may_block() const { return true; }

    // Returns once every submitted request has completed.
    virtual void drain() = 0;

    // Whether the VMM itself waits for this backend's requests when the VM stops (QEMU's
    // block layer: vm_stop drains every BlockBackend), so that no one else must. A wrapper
    // passes its inner backend's answer on.
    virtual bool drained_by_vmm() const { return false; }

    // Changes size() to `bytes`, a non-zero multiple of block_size(), while requests run
    // (any thread). The bytes below the smaller of the two sizes stay as they are; bytes a
    // grow exposes read back as zeros. Requests submitted afterwards are checked against the
    // new size; one in flight may finish against either. False with the reason in `err`
    // (the backend's name, the size and why) when the backend cannot take that size;
    // nothing changes then. This default refuses every change.
    virtual bool resize(uint64_t bytes, std::string& err) {
        err = describe() + ": the size cannot change (asked for " + std::to_string(bytes) + " bytes)";
        return false;
    }

    // The disk id its trace events carry (hvstor/trace_events.h): 0 until whoever assembles
    // the disk sets it, before the first submit. A backend that wraps another passes it on.
    virtual void set_trace_id(uint32_t id) { trace_id_ = id; }
    uint32_t trace_id() const { return trace_id_; }

private:
    uint32_t trace_id_ = 0;
};

// A backend over another that passes everything on to it but what the subclass overrides:
// submit() always (the reason to wrap), and whatever else the wrapper changes.
class WrappingBackend : public Backend {
public:
    explicit WrappingBackend(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {}

    uint64_t size() const override { return inner_->size(); }
    uint32_t block_size() const override { return inner_->block_size(); }
    bool read_only() const override { return inner_->read_only(); }
    std::string describe() const override { return inner_->describe(); }
    bool submit_may_block() const override { return inner_->submit_may_block(); }
    void drain() override { inner_->drain(); }
    bool drained_by_vmm() const override { return inner_->drained_by_vmm(); }
    bool resize(uint64_t bytes, std::string& err) override { return inner_->resize(bytes, err); }
    void set_trace_id(uint32_t id) override {
        Backend::set_trace_id(id);
        inner_->set_trace_id(id);
    }

protected:
    const std::unique_ptr<Backend> inner_;
};

// Where every storage backend (file, RAM, null, the glue's drive) starts and ends each
// request it is handed, its trace events with them: begin_request() as it takes `req`,
// before checking it (hvstor_backend_submit); end_request() to complete it: sets its result,
// traces it (hvstor_backend_complete, and hvstor_backend_error on a failure) and tells its
// sink. Wrappers that pass requests on (the model, a read-only view) call neither.
void begin_request(const Backend& be, Request& req);
void end_request(Request& req, int result);

// 0 when `req` is well formed for `be` (its op, range, alignment and buffers), else what
// every backend completes such a request with: -EINVAL, or -EROFS for a modifying op on a
// read-only backend. For backends and wrappers that hand requests on to storage of their own.
int check_request(const Request& req, const Backend& be);

struct FileOptions {
    bool read_only = false;
    bool direct = true;  // O_DIRECT when the file system allows it (falls back otherwise)
};

// Each returns nullptr with a message in `err` on failure.
// A file's resize() grows the file (ftruncate) when asked for more than it holds, and leaves
// it as long as it is when shrinking (nothing in flight can land past its end); a block
// device takes any size up to its own. Read-only files refuse to resize.
std::unique_ptr<Backend> open_file(const std::string& path, const FileOptions& opts, std::string& err);
// resize() takes any size up to the one it was made with (its memory is mapped once).
std::unique_ptr<Backend> make_ram(uint64_t size, std::string& err);
// Reads return zeros, writes are dropped: for performance work. Any size, also to resize().
std::unique_ptr<Backend> make_null(uint64_t size, std::string& err);

} // namespace hvstor::backend
