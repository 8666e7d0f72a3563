//===- JsonTest.cpp - tests of the manifest JSON reader -------------------===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
//===----------------------------------------------------------------------===//

#include "spin/Runtime/Json.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>

using namespace spin::runtime;

namespace {

JsonValue parseOk(const std::string &text) {
  StatusOr<JsonValue> value = parseJson(text);
  EXPECT_TRUE(value.ok()) << text << ": " << value.message();
  return value.ok() ? *value : JsonValue();
}

std::string parseError(const std::string &text) {
  StatusOr<JsonValue> value = parseJson(text);
  EXPECT_FALSE(value.ok()) << text;
  return value.message();
}

TEST(Json, ParsesScalars) {
  EXPECT_TRUE(parseOk("null").isNull());
  EXPECT_TRUE(parseOk(" true ").asBool());
  JsonValue f = parseOk("false");
  EXPECT_TRUE(f.isBool());
  EXPECT_FALSE(f.asBool());
  EXPECT_EQ(parseOk("\"spin\"").asString(), "spin");
}

TEST(Json, KeepsIntegersExactAndReadsDoubles) {
  JsonValue big = parseOk("9223372036854775807");
  ASSERT_TRUE(big.isInt());
  EXPECT_EQ(big.asInt(), std::numeric_limits<int64_t>::max());
  JsonValue small = parseOk("-9223372036854775808");
  ASSERT_TRUE(small.isInt());
  EXPECT_EQ(small.asInt(), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(parseOk("0").asInt(), 0);
  EXPECT_EQ(parseOk("-17").asInt(), -17);

  JsonValue half = parseOk("0.5");
  EXPECT_TRUE(half.isNumber());
  EXPECT_FALSE(half.isInt());
  EXPECT_DOUBLE_EQ(half.asDouble(), 0.5);
  EXPECT_DOUBLE_EQ(parseOk("-1.25e2").asDouble(), -125.0);
  EXPECT_DOUBLE_EQ(parseOk("1E-2").asDouble(), 0.01);
  // An integer that is an exponent form stays a double; one beyond int64
  // becomes a double rather than wrapping.
  EXPECT_FALSE(parseOk("1e3").isInt());
  JsonValue huge = parseOk("9223372036854775808");
  EXPECT_FALSE(huge.isInt());
  EXPECT_DOUBLE_EQ(huge.asDouble(), 9223372036854775808.0);
  EXPECT_DOUBLE_EQ(parseOk("3").asDouble(), 3.0);
}

TEST(Json, DecodesEscapes) {
  EXPECT_EQ(parseOk(R"("a\"b\\c\/d\b\f\n\r\t")").asString(),
            "a\"b\\c/d\b\f\n\r\t");
  EXPECT_EQ(parseOk(R"("\u0041\u00e9\u20AC")").asString(),
            "A\xc3\xa9\xe2\x82\xac");
  // U+1F600 as a surrogate pair.
  EXPECT_EQ(parseOk(R"("\ud83d\ude00")").asString(), "\xf0\x9f\x98\x80");
  // UTF-8 passes through unchanged.
  EXPECT_EQ(parseOk("\"\xc3\xa9\"").asString(), "\xc3\xa9");
}

TEST(Json, ParsesNestedContainersInOrder) {
  JsonValue v = parseOk(R"({"b": [1, 2.5, "x", [], {}], "a": {"k": null}})");
  ASSERT_TRUE(v.isObject());
  ASSERT_EQ(v.asObject().size(), 2u);
  EXPECT_EQ(v.asObject()[0].first, "b");
  EXPECT_EQ(v.asObject()[1].first, "a");
  const JsonValue *b = v.find("b");
  ASSERT_NE(b, nullptr);
  ASSERT_EQ(b->asArray().size(), 5u);
  EXPECT_EQ(b->asArray()[0].asInt(), 1);
  EXPECT_TRUE(b->asArray()[3].isArray());
  EXPECT_TRUE(b->asArray()[4].isObject());
  EXPECT_TRUE(v.find("a")->find("k")->isNull());
  EXPECT_EQ(v.find("missing"), nullptr);
  EXPECT_EQ(b->find("k"), nullptr); // not an object
}

TEST(Json, RemembersOffsets) {
  JsonValue v = parseOk(R"({"x": [10, 20]})");
  const JsonValue &x = *v.find("x");
  EXPECT_EQ(v.offset(), 0u);
  EXPECT_EQ(x.offset(), 6u);
  EXPECT_EQ(x.asArray()[1].offset(), 11u);
}

TEST(Json, ReportsErrorsWithByteOffsets) {
  EXPECT_EQ(parseError(""), "JSON error at byte 0: unexpected end of input, "
                            "expected a value");
  EXPECT_EQ(parseError("{\"a\": 1,}"),
            "JSON error at byte 8: unexpected '}', expected a member name (a "
            "string)");
  EXPECT_EQ(parseError("[1 2]"),
            "JSON error at byte 3: unexpected '2', expected ',' or ']' in an "
            "array");
  EXPECT_EQ(parseError("{\"a\" 1}"),
            "JSON error at byte 5: unexpected '1', expected ':' after a member "
            "name");
  EXPECT_EQ(parseError("{\"a\": 1, \"a\": 2}"),
            "JSON error at byte 9: duplicate member \"a\" in an object");
  EXPECT_EQ(parseError("[1] x"),
            "JSON error at byte 4: unexpected 'x' after the end of the "
            "document");
  EXPECT_EQ(parseError("\"abc"), "JSON error at byte 4: unterminated string");
  EXPECT_EQ(parseError("\"a\\qb\""),
            "JSON error at byte 2: invalid escape '\\q' in a string");
  EXPECT_EQ(parseError("\"a\nb\""),
            "JSON error at byte 2: control character \\x0a in a string "
            "(escape it)");
  EXPECT_EQ(parseError("\"\\u12g4\""),
            "JSON error at byte 5: unexpected 'g', expected four hex digits "
            "after \\u");
  EXPECT_EQ(parseError("\"\\udc00\""),
            "JSON error at byte 1: unpaired low surrogate in a \\u escape");
  EXPECT_EQ(parseError("\"\\ud800x\""),
            "JSON error at byte 7: high surrogate without a following \\u low "
            "surrogate");
  EXPECT_EQ(parseError("012"),
            "JSON error at byte 1: leading zero in a number");
  EXPECT_EQ(parseError("-"), "JSON error at byte 1: unexpected end of input, "
                             "expected a digit");
  EXPECT_EQ(parseError("1."), "JSON error at byte 2: unexpected end of input, "
                              "expected a digit after the decimal point");
  EXPECT_EQ(parseError("1e+"), "JSON error at byte 3: unexpected end of input, "
                               "expected a digit in the exponent");
  EXPECT_EQ(parseError("1e400"), "JSON error at byte 0: number 1e400 is out "
                                 "of range");
  EXPECT_EQ(parseError("tru"), "JSON error at byte 0: unexpected 't', "
                               "expected a value");
  EXPECT_EQ(parseError("[nul]"), "JSON error at byte 1: unexpected 'n', "
                                 "expected a value");
  EXPECT_EQ(parseError("// comment\n{}"),
            "JSON error at byte 0: unexpected '/', expected a value");
}

TEST(Json, LimitsNesting) {
  std::string deep(300, '[');
  deep += std::string(300, ']');
  EXPECT_EQ(parseError(deep),
            "JSON error at byte 256: nesting deeper than 256 levels");
  std::string fine(200, '[');
  fine += std::string(200, ']');
  EXPECT_TRUE(parseOk(fine).isArray());
}

} // namespace

TEST(JsonWriter, IndentsContainersAndKeepsScalarArraysOnOneLine) {
  JsonWriter w;
  w.beginObject()
      .member("name", "x")
      .member("n", int64_t(-3))
      .key("sizes")
      .beginArray()
      .value(int64_t(1))
      .value(int64_t(2))
      .end()
      .key("empty")
      .beginArray()
      .end()
      .key("nested")
      .beginArray()
      .beginObject()
      .member("k", int64_t(0))
      .end()
      .end()
      .end();
  EXPECT_EQ(w.text(), "{\n"
                      "  \"name\": \"x\",\n"
                      "  \"n\": -3,\n"
                      "  \"sizes\": [1, 2],\n"
                      "  \"empty\": [],\n"
                      "  \"nested\": [\n"
                      "    {\n"
                      "      \"k\": 0\n"
                      "    }\n"
                      "  ]\n"
                      "}\n");
}

TEST(JsonWriter, WritesWhatTheParserReadsBack) {
  const std::string awkward = std::string("q\"b\\s\t\n") + char(1) + "\xc3\xa9";
  JsonWriter w;
  w.beginObject().member(awkward, awkward).end();
  StatusOr<JsonValue> back = parseJson(w.text());
  ASSERT_TRUE(back.ok()) << back.message() << "\n" << w.text();
  ASSERT_EQ(back->asObject().size(), 1u);
  EXPECT_EQ(back->asObject()[0].first, awkward);
  EXPECT_EQ(back->asObject()[0].second.asString(), awkward);
}
