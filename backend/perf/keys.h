// The settings keys, in one table: the parser takes each key's syntax, range and destination
// from it, the "unknown key" message its list of keys, and docs/perf-model.md its table of
// settings (a unit test checks that the document holds the table rendered here).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "hvstor/perf/clock.h"
#include "hvstor/perf/config.h"

namespace hvstor::perf::detail {

enum class Kind : uint8_t {
    Profile,       // a preset's name; applied before the other keys
    Text,          // taken as written
    Rate,          // a number of `unit`s per second; 0: no cap
    Duration,      // "1.8ms"
    Size,          // bytes: "256K", "1M", "4096"
    Whole,         // a whole number
    Probability,   // 0 to 1
    Level,         // full, empty or a fraction
    Choice,        // one of the key's words
    Distribution,  // of durations: 2ms, fixed:2ms, uniform:1ms:3ms, lognormal:1.8ms:6ms
    Scale,         // the time scale; applied after the other keys
};

// Where a value goes: a disk's settings, or a VM's, which are caps only.
struct Target {
    Caps& caps;
    ModelConfig* disk;  // null for a VM
};

// A parsed value, in the model's units: per second, nanoseconds, bytes.
struct Value {
    double num = 0;      // Rate (scaled), Probability, Level, Scale
    Nanos ns = 0;        // Duration
    uint64_t whole = 0;  // Size, Whole
    size_t choice = 0;   // Choice: the index of the word
    Distribution dist;
    std::string_view text;  // Text
};

struct Key {
    std::string_view name = {};
    Kind kind = Kind::Text;
    bool vm = false;         // a VM setting too (parse_vm_config)
    std::string_view unit = {};  // Rate: what a written unit is; Text: what the text is
    double scale = 1;        // Rate: the rate in IOs or bytes per second per written unit
    double min = 0, max = 0; // Rate, Probability, Level, Scale: as written; Duration and
                             // Distribution: ns; Size: bytes; Whole: as written
    std::string_view choices = {};  // Choice: the words, '|'-separated, in the enum's order
    std::string_view def = {};      // the default as written; "" for none
    std::string_view meaning = {};
    void (*apply)(Target&, const Value&) = nullptr;  // null for Profile and Scale
};

std::span<const Key> keys();
// Among a disk's settings, or a VM's; null when there is no such key.
const Key* find_key(std::string_view name, bool vm);
// "profile, name, iops, ...".
std::string key_names(bool vm);

// `text` as a value of `k`, within its range. On error `why` says what was expected.
bool parse_value(const Key& k, std::string_view text, Value& v, std::string& why);
// What a value of `k` must be: "a duration from 1ms to 1h".
std::string expected(const Key& k);

// The settings the time scale leaves alone, in a ModelConfig made without the parser, against
// the same ranges. On error a message naming the key, the value and the range.
bool check_unscaled(const ModelConfig& cfg, std::string& err);

// The table of settings in docs/perf-model.md, in Markdown, ending with a newline.
std::string settings_table();

} // namespace hvstor::perf::detail
