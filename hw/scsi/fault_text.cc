// The text form of a fault (hvstor/scsi/fault.h): hv-disk's `fault` property.
#include <charconv>
#include <optional>
#include <span>

#include "hvstor/scsi/fault.h"

namespace hvstor::scsi {

namespace {

struct Name {
    std::string_view name;
    uint8_t value;
};

// SRB status codes of the Windows storport SRB, as Hyper-V reports them to storvsc.
constexpr Name kSrbStatuses[] = {
    {"success", 0x01},         {"aborted", 0x02},           {"error", 0x04},
    {"busy", 0x05},            {"invalid-request", 0x06},   {"timeout", 0x09},
    {"selection-timeout", 0x0a}, {"bus-reset", 0x0e},       {"data-overrun", 0x12},
    {"invalid-lun", 0x20},     {"internal-error", 0x30},
};
constexpr Name kScsiStatuses[] = {
    {"good", 0x00}, {"check-condition", 0x02}, {"busy", 0x08}, {"task-set-full", 0x28}};
constexpr uint8_t kAutosenseValid = 0x80;

// What the text said, before the settings that depend on each other are resolved.
struct Parsed {
    FaultSpec f;
    bool have_action = false;   // error=, stall= or srb=
    bool srb_named = false;     // srb= by name (not a raw byte)
    std::optional<uint8_t> scsi;
    std::optional<bool> autosense;
    std::string_view first_srb_only; // the first of scsi=, sense=, data=, autosense= given
};

bool number(std::string_view s, uint64_t& out) {
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    return ec == std::errc() && p == s.data() + s.size() && !s.empty();
}

// Hex digits only (no prefix, no sign), at most `digits` of them.
bool hex(std::string_view s, size_t digits, uint64_t& out) {
    if (s.empty() || s.size() > digits || s.find_first_not_of("0123456789abcdefABCDEF") != s.npos) return false;
    std::from_chars(s.data(), s.data() + s.size(), out, 16);
    return true;
}

// "0x" and one or two hex digits.
bool raw_byte(std::string_view s, uint8_t& out) {
    uint64_t v;
    if (s.size() < 3 || (s.substr(0, 2) != "0x" && s.substr(0, 2) != "0X") || !hex(s.substr(2), 2, v)) return false;
    out = uint8_t(v);
    return true;
}

std::string names(std::span<const Name> table) {
    std::string s;
    for (const Name& n : table) s += std::string(s.empty() ? "" : ", ") + std::string(n.name);
    return s;
}

// A status by name or as a raw byte; `named` tells which.
bool status(std::string_view key, std::string_view v, std::span<const Name> table, uint8_t& out, bool& named,
            std::string& err) {
    for (const Name& n : table) {
        if (n.name == v) {
            out = n.value;
            named = true;
            return true;
        }
    }
    named = false;
    if (raw_byte(v, out)) return true;
    err = "fault: " + std::string(key) + "=" + std::string(v) + " is not one of " + names(table) +
          ", or a byte 0x00..0xff";
    return false;
}

bool bounded(std::string_view key, std::string_view v, uint64_t lo, uint64_t hi, uint64_t& out, std::string& err) {
    if (number(v, out) && out >= lo && out <= hi) return true;
    err = "fault: " + std::string(key) + "=" + std::string(v) + " is not a number in " + std::to_string(lo) + ".." +
          std::to_string(hi);
    return false;
}

bool parse_error_kind(std::string_view v, FaultSpec& f, std::string& err) {
    using A = FaultSpec::Action;
    if (v == "medium") f.action = A::MediumError;
    else if (v == "not-ready") f.action = A::NotReady;
    else if (v == "unit-attention") f.action = A::UnitAttention;
    else if (v == "busy") f.action = A::Busy;
    else {
        err = "fault: error=" + std::string(v) + " is not one of medium, not-ready, unit-attention, busy";
        return false;
    }
    return true;
}

bool parse_action(std::string_view key, std::string_view v, Parsed& p, std::string& err) {
    if (p.have_action) {
        err = "fault: more than one action (error=, stall= or srb=)";
        return false;
    }
    p.have_action = true;
    FaultSpec& f = p.f;
    if (key == "error") return parse_error_kind(v, f, err);
    if (key == "srb") {
        f.action = FaultSpec::Action::Srb;
        return status(key, v, kSrbStatuses, f.srb_status, p.srb_named, err);
    }
    f.action = FaultSpec::Action::Stall;
    if (v == "hold") return true;
    uint64_t ms;
    if (!bounded(key, v, 1, 3600000, ms, err)) return false;
    f.stall_ms = uint32_t(ms);
    return true;
}

bool parse_ops(std::string_view v, FaultSpec& f, std::string& err) {
    f.reads = v == "read" || v == "any";
    f.writes = v == "write" || v == "any";
    f.flushes = v == "flush" || v == "any";
    if (f.reads || f.writes || f.flushes) return true;
    err = "fault: ops=" + std::string(v) + " is not one of read, write, flush, any";
    return false;
}

bool parse_lba(std::string_view v, FaultSpec& f, std::string& err) {
    const size_t dash = v.find('-');
    const std::string_view first = v.substr(0, dash), last = dash == v.npos ? first : v.substr(dash + 1);
    if (number(first, f.lba_first) && number(last, f.lba_last) && f.lba_first <= f.lba_last) return true;
    err = "fault: lba=" + std::string(v) + " is not FIRST or FIRST-LAST (FIRST <= LAST)";
    return false;
}

// KEY/ASC/ASCQ in hex: a sense key 0..f, then two bytes.
bool parse_sense(std::string_view v, FaultSpec& f, std::string& err) {
    const size_t a = v.find('/'), b = a == v.npos ? v.npos : v.find('/', a + 1);
    uint64_t key, asc, ascq;
    if (b != v.npos && hex(v.substr(0, a), 1, key) && hex(v.substr(a + 1, b - a - 1), 2, asc) &&
        hex(v.substr(b + 1), 2, ascq)) {
        f.has_sense = true;
        f.sense_key = uint8_t(key);
        f.asc = uint8_t(asc);
        f.ascq = uint8_t(ascq);
        return true;
    }
    err = "fault: sense=" + std::string(v) + " is not KEY/ASC/ASCQ in hex (KEY 0..f, ASC and ASCQ 00..ff, e.g. 3/11/00)";
    return false;
}

bool parse_op_status(std::string_view v, FaultSpec& f, std::string& err) {
    uint64_t n;
    if (v.size() > 2 && (v.substr(0, 2) == "0x" || v.substr(0, 2) == "0X") && hex(v.substr(2), 8, n)) {
        f.has_op_status = true;
        f.op_status = uint32_t(n);
        return true;
    }
    err = "fault: opstatus=" + std::string(v) + " is not a 32-bit hex number 0x0..0xffffffff";
    return false;
}

// scsi=, sense=, data=, autosense=: the fields of an srb= answer.
bool parse_srb_field(std::string_view key, std::string_view v, Parsed& p, std::string& err) {
    if (p.first_srb_only.empty()) p.first_srb_only = key;
    uint64_t n;
    bool named;
    if (key == "scsi") {
        uint8_t s;
        if (!status(key, v, kScsiStatuses, s, named, err)) return false;
        p.scsi = s;
        return true;
    }
    if (key == "sense") return parse_sense(v, p.f, err);
    if (key == "data") {
        if (!bounded(key, v, 0, UINT32_MAX, n, err)) return false;
        p.f.has_data = true;
        p.f.data = uint32_t(n);
        return true;
    }
    if (v != "on" && v != "off") {
        err = "fault: autosense=" + std::string(v) + " is not on or off";
        return false;
    }
    p.autosense = v == "on";
    return true;
}

bool parse_item(std::string_view key, std::string_view v, Parsed& p, std::string& err) {
    uint64_t n;
    FaultSpec& f = p.f;
    if (key == "error" || key == "stall" || key == "srb") return parse_action(key, v, p, err);
    if (key == "scsi" || key == "sense" || key == "data" || key == "autosense") return parse_srb_field(key, v, p, err);
    if (key == "opstatus") return parse_op_status(v, f, err);
    if (key == "ops") return parse_ops(v, f, err);
    if (key == "lba") return parse_lba(v, f, err);
    if (key == "every") return bounded(key, v, 1, 1000000, n, err) && (f.every = uint32_t(n), true);
    if (key == "percent") return bounded(key, v, 1, 100, n, err) && (f.percent = uint32_t(n), true);
    if (key == "seed") return bounded(key, v, 0, UINT64_MAX, f.seed, err);
    if (key == "count") return bounded(key, v, 1, UINT64_MAX, f.count, err);
    err = "fault: unknown setting '" + std::string(key) +
          "' (want error=, stall=, srb=, opstatus=, ops=, lba=, every=, percent=, seed=, count=; "
          "with srb=: scsi=, sense=, data=, autosense=)";
    return false;
}

// The settings that depend on each other, once all are read.
bool resolve(Parsed& p, std::string& err) {
    FaultSpec& f = p.f;
    if (!p.have_action && f.has_op_status) f.action = FaultSpec::Action::OpStatus;
    if (f.action == FaultSpec::Action::None) {
        err = "fault: no action (error=, stall=, srb= or opstatus=)";
        return false;
    }
    if (f.action != FaultSpec::Action::Srb) {
        if (p.first_srb_only.empty()) return true;
        err = "fault: " + std::string(p.first_srb_only) + "= goes with srb=";
        return false;
    }
    if (p.autosense && !p.srb_named) {
        err = "fault: autosense= is for a named srb= status; a byte 0xNN carries its flags as written";
        return false;
    }
    f.scsi_status = p.scsi.value_or(f.has_sense ? 0x02 : 0x00);
    if (p.srb_named && p.autosense.value_or(f.has_sense)) f.srb_status |= kAutosenseValid;
    return true;
}

} // namespace

constexpr FaultKey kFaultKeys[] = {
    {"error", "medium, not-ready, unit-attention or busy: the command fails with that status"},
    {"stall", "milliseconds (1..3600000) or hold: the command waits that long, or until the fault changes"},
    {"srb", "a completion with this SRB status: a name (success, error, busy, ...) or a byte 0xNN"},
    {"scsi", "with srb: the SCSI status, good, check-condition, busy, task-set-full or 0xNN"},
    {"sense", "with srb: fixed-format sense KEY/ASC/ASCQ in hex, e.g. 3/11/00"},
    {"data", "with srb: the bytes reported transferred"},
    {"autosense", "with a named srb status: on or off, the AUTOSENSE_VALID flag"},
    {"opstatus", "0xNNNNNNNN: the completion's VStor operation status"},
    {"ops", "read, write, flush or any (default): which commands"},
    {"lba", "FIRST[-LAST]: reads and writes touching these blocks"},
    {"every", "N: the Nth, 2Nth, ... matching command"},
    {"percent", "P: each matching command with probability P/100"},
    {"seed", "S: the generator's seed for percent (default 1)"},
    {"count", "N: at most N injections"},
};

std::span<const FaultKey> fault_keys() { return kFaultKeys; }

bool parse_fault(std::string_view text, FaultSpec& out, std::string& err) {
    Parsed p;
    if (text.empty() || text == "none") {
        out = p.f;
        return true;
    }
    while (!text.empty()) {
        const size_t comma = text.find(',');
        const std::string_view item = text.substr(0, comma);
        text = comma == text.npos ? std::string_view() : text.substr(comma + 1);
        const size_t eq = item.find('=');
        if (eq == item.npos) {
            err = "fault: '" + std::string(item) + "' is not NAME=VALUE";
            return false;
        }
        if (!parse_item(item.substr(0, eq), item.substr(eq + 1), p, err)) return false;
    }
    if (!resolve(p, err)) return false;
    out = p.f;
    return true;
}

} // namespace hvstor::scsi
