#include <gtest/gtest.h>

#include <limits>

#include "hvstor/json.h"

using hvstor::JsonWriter;

TEST(Json, FieldsInOrderWithCommas) {
    std::string s = JsonWriter().num("a", uint64_t(1)).str("b", "x").boolean("c", false).null("d").done();
    EXPECT_EQ(s, R"({"a":1,"b":"x","c":false,"d":null})");
}

TEST(Json, NamesAreEscaped) {
    std::string s = JsonWriter().str("disk", "a\"b\\c\nd").done();
    EXPECT_EQ(s, R"({"disk":"a\"b\\c\u000ad"})");
}

TEST(Json, NestedObjectsAndNumbers) {
    std::string s = JsonWriter()
                        .begin_object("ch")
                        .num("n", -3)
                        .num("x", 1.25, 2)
                        .end_object()
                        .num("inf", std::numeric_limits<double>::infinity(), 1)
                        .done();
    EXPECT_EQ(s, R"({"ch":{"n":-3,"x":1.25},"inf":null})");
}

TEST(Json, EmptyObject) { EXPECT_EQ(JsonWriter().done(), "{}"); }

TEST(Json, ArraysOfObjects) {
    JsonWriter w;
    w.num("n", 2).begin_array("channels");
    for (int i = 0; i < 2; i++) w.begin_element().num("index", i).end_object();
    w.end_array().begin_array("none").end_array().str("after", "x");
    EXPECT_EQ(w.done(), R"({"n":2,"channels":[{"index":0},{"index":1}],"none":[],"after":"x"})");
}
