// The one JSON writer of the project: flat or nested objects of numbers, strings, booleans
// and null, and arrays of objects, for statistics over QMP and the disk model's timeline. Strings are escaped, so a
// user-chosen name (a QOM id, a file name) cannot break the document.
#pragma once

#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace hvstor {

class JsonWriter {
public:
    JsonWriter() { out_ += '{'; }

    JsonWriter& num(std::string_view key, uint64_t v) {
        char buf[24];
        std::snprintf(buf, sizeof buf, "%" PRIu64, v);
        return raw(key, buf);
    }
    JsonWriter& num(std::string_view key, int64_t v) {
        char buf[24];
        std::snprintf(buf, sizeof buf, "%" PRId64, v);
        return raw(key, buf);
    }
    JsonWriter& num(std::string_view key, uint32_t v) { return num(key, uint64_t(v)); }
    JsonWriter& num(std::string_view key, int v) { return num(key, int64_t(v)); }
    // A fixed number of decimals; NaN and infinities (not JSON) become null.
    JsonWriter& num(std::string_view key, double v, int decimals) {
        if (v != v || v - v != 0) return raw(key, "null");
        char buf[64];
        std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
        return raw(key, buf);
    }
    JsonWriter& boolean(std::string_view key, bool v) { return raw(key, v ? "true" : "false"); }
    JsonWriter& null(std::string_view key) { return raw(key, "null"); }
    JsonWriter& str(std::string_view key, std::string_view v) {
        field(key);
        quote(v);
        return *this;
    }
    // A nested object: begin_object(key), its fields, end_object().
    JsonWriter& begin_object(std::string_view key) {
        field(key);
        out_ += '{';
        first_ = true;
        return *this;
    }
    JsonWriter& end_object() {
        out_ += '}';
        first_ = false;
        return *this;
    }
    // An array of objects: begin_array(key), then begin_element(), its fields, end_object()
    // for each, then end_array().
    JsonWriter& begin_array(std::string_view key) {
        field(key);
        out_ += '[';
        first_ = true;
        return *this;
    }
    JsonWriter& begin_element() {
        if (!first_) out_ += ',';
        out_ += '{';
        first_ = true;
        return *this;
    }
    JsonWriter& end_array() {
        out_ += ']';
        first_ = false;
        return *this;
    }
    // The document, closed. Call once, last.
    std::string done() {
        out_ += '}';
        return std::move(out_);
    }

private:
    JsonWriter& raw(std::string_view key, std::string_view v) {
        field(key);
        out_ += v;
        return *this;
    }
    void field(std::string_view key) {
        if (!first_) out_ += ',';
        first_ = false;
        quote(key);
        out_ += ':';
    }
    void quote(std::string_view s) {
        out_ += '"';
        for (char c : s) {
            if (c == '"' || c == '\\') {
                out_ += '\\';
                out_ += c;
            } else if (static_cast<unsigned char>(c) < 0x20) {
                char buf[8];
                std::snprintf(buf, sizeof buf, "\\u%04x", unsigned(static_cast<unsigned char>(c)));
                out_ += buf;
            } else {
                out_ += c;
            }
        }
        out_ += '"';
    }

    std::string out_;
    bool first_ = true;
};

} // namespace hvstor
