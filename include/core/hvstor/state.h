// Saved device state (savevm, migration): a flat little-endian byte stream each layer writes
// and reads for itself. The QEMU glue carries one such blob per device in its VMState.
//
// A stream being loaded is untrusted input: it may come from another build, a corrupted file
// or a hostile migration source. The Reader checks every length against what is left,
// remembers the first failure with the field it was reading, and after a failure returns
// zeros, so a load can read on and check ok() once; the loader validates every value it
// takes (ranges, counts against configured limits) before acting on any of it.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

namespace hvstor::state {

class Writer {
public:
    void u8(uint8_t v) { put(&v, 1); }
    void u16(uint16_t v) { put(&v, 2); }
    void u32(uint32_t v) { put(&v, 4); }
    void u64(uint64_t v) { put(&v, 8); }
    void boolean(bool v) { u8(v ? 1 : 0); }
    // Length (u32) then the bytes.
    void bytes(std::span<const uint8_t> b) {
        u32(static_cast<uint32_t>(b.size()));
        put(b.data(), b.size());
    }
    void str(const std::string& s) { bytes({reinterpret_cast<const uint8_t*>(s.data()), s.size()}); }
    // Bytes of a size both sides know (a GUID, a protocol structure): no length.
    void fixed(std::span<const uint8_t> b) { put(b.data(), b.size()); }
    // A section: a tag the reader checks, and the writer's version of it.
    void begin(uint32_t tag, uint32_t version) {
        u32(tag);
        u32(version);
    }

    const std::vector<uint8_t>& data() const { return buf_; }
    std::vector<uint8_t> take() { return std::move(buf_); }

private:
    void put(const void* p, size_t n) {
        static_assert(std::endian::native == std::endian::little, "the stream is little-endian");
        if (n == 0) return;
        const size_t at = buf_.size();
        buf_.resize(at + n);
        std::memcpy(buf_.data() + at, p, n);
    }
    std::vector<uint8_t> buf_;
};

class Reader {
public:
    explicit Reader(std::span<const uint8_t> data) : data_(data) {}

    uint8_t u8(const char* what) { return get<uint8_t>(what); }
    uint16_t u16(const char* what) { return get<uint16_t>(what); }
    uint32_t u32(const char* what) { return get<uint32_t>(what); }
    uint64_t u64(const char* what) { return get<uint64_t>(what); }
    bool boolean(const char* what) {
        const uint8_t v = u8(what);
        if (v > 1) fail(what, "is not 0 or 1", v);
        return v == 1;
    }
    // At most `max` bytes; longer is a failure.
    std::vector<uint8_t> bytes(const char* what, size_t max) {
        const uint32_t n = u32(what);
        if (!ok()) return {};
        if (n > max) {
            fail(what, "is longer than allowed", n);
            return {};
        }
        if (n > data_.size() - pos_) {
            fail(what, "runs past the end of the state", n);
            return {};
        }
        std::vector<uint8_t> out(data_.begin() + pos_, data_.begin() + pos_ + n);
        pos_ += n;
        return out;
    }
    // Exactly out.size() bytes (zeros after a failure).
    void fixed(const char* what, std::span<uint8_t> out) {
        if (!ok() || out.size() > data_.size() - pos_) {
            fail(what, "runs past the end of the state at byte", pos_);
            std::memset(out.data(), 0, out.size());
            return;
        }
        std::memcpy(out.data(), data_.data() + pos_, out.size());
        pos_ += out.size();
    }
    std::string str(const char* what, size_t max) {
        auto b = bytes(what, max);
        return std::string(b.begin(), b.end());
    }
    // Checks a section's tag; returns its version (0 after a failure). Versions above
    // `max_version` (a newer build's state) are refused.
    uint32_t begin(uint32_t tag, uint32_t max_version, const char* what) {
        const uint32_t t = u32(what);
        const uint32_t v = u32(what);
        if (!ok()) return 0;
        if (t != tag) return fail(what, "has the wrong section tag", t), 0;
        if (v == 0 || v > max_version) return fail(what, "has a version this build cannot load", v), 0;
        return v;
    }
    // A count of items that follow, each at least `min_item` bytes, and at most `max`.
    uint32_t count(const char* what, uint32_t max, size_t min_item = 1) {
        const uint32_t n = u32(what);
        if (!ok()) return 0;
        if (n > max) return fail(what, "is above the limit", n), 0;
        if (uint64_t(n) * min_item > data_.size() - pos_) return fail(what, "runs past the end of the state", n), 0;
        return n;
    }

    // The loader found a value it cannot take. Only the first failure is kept.
    void fail(const char* what, const char* why, uint64_t value) {
        if (!error_.empty()) return;
        error_ = std::string(what) + " " + why + " (" + std::to_string(value) + ")";
    }
    bool ok() const { return error_.empty(); }
    // Everything was read, and nothing failed.
    bool done() {
        if (ok() && pos_ != data_.size()) fail("the state", "has bytes left over", data_.size() - pos_);
        return ok();
    }
    const std::string& error() const { return error_; }

private:
    template <typename T> T get(const char* what) {
        T v{};
        if (!ok()) return v;
        if (sizeof v > data_.size() - pos_) {
            fail(what, "runs past the end of the state at byte", pos_);
            return v;
        }
        std::memcpy(&v, data_.data() + pos_, sizeof v);
        pos_ += sizeof v;
        return v;
    }

    std::span<const uint8_t> data_;
    size_t pos_ = 0;
    std::string error_;
};

} // namespace hvstor::state
