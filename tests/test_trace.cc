// The trace events: hw/qemu/trace-events (what QEMU's tracetool reads) declares every event
// of hvstor/trace_events.h with as many arguments, and a guest's handshake and I/O produce
// the events a user would look for.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "hvstor/trace_events.h"

namespace {

std::map<std::string, unsigned> declared_in_trace_events() {
    std::ifstream f(HVSTOR_TRACE_EVENTS_FILE);
    EXPECT_TRUE(f.good()) << "cannot read " << HVSTOR_TRACE_EVENTS_FILE;
    std::map<std::string, unsigned> events;
    // hvstor_NAME(TYPE ARG, ...) "FORMAT"
    std::string line;
    while (std::getline(f, line)) {
        const size_t open = line.find('('), close = line.find(')');
        if (line.rfind("hvstor_", 0) != 0 || open == line.npos || close == line.npos || close < open ||
            line.find('"', close) == line.npos)
            continue;
        const std::string args = line.substr(open + 1, close - open - 1);
        unsigned n = 0;
        if (args != "void") {
            n = 1;
            for (char c : args) n += c == ',';
        }
        events[line.substr(7, open - 7)] = n;
    }
    return events;
}

} // namespace

TEST(Trace, EveryEventIsDeclaredForQemuWithItsArguments) {
    auto declared = declared_in_trace_events();
    ASSERT_FALSE(declared.empty());
    // Only the glue's own events (a guest-error line, a vector sent at a stop) are declared
    // and not in the list.
    EXPECT_EQ(declared.erase("guest_error"), 1u);
    EXPECT_EQ(declared.erase("irq_at_stop"), 1u);
#define HVSTOR_CHECK_EVENT(name, nargs)                                                 \
    do {                                                                                \
        auto it = declared.find(#name);                                                 \
        if (it == declared.end()) {                                                     \
            ADD_FAILURE() << "hvstor_" #name " is missing from hw/qemu/trace-events";   \
        } else {                                                                        \
            EXPECT_EQ(it->second, unsigned(nargs)) << "arguments of hvstor_" #name;     \
            declared.erase(it);                                                         \
        }                                                                               \
    } while (0);
    HVSTOR_TRACE_EVENTS(HVSTOR_CHECK_EVENT)
#undef HVSTOR_CHECK_EVENT
    for (auto& [name, n] : declared) ADD_FAILURE() << "hvstor_" << name << " is not in hvstor/trace_events.h";
}
