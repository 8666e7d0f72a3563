//===- Json.h - a minimal JSON reader for artifact manifests ----*- C++ -*-===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
// GPU artifacts describe their kernels and launches in manifest.json
// (docs/GPU-ABI.md). The runtime reads it without a third-party library:
// this is a strict RFC 8259 reader (no comments, no trailing commas) that
// keeps integers exact (int64) and remembers where every value starts, so
// that a manifest error can point at the offending byte.
//
//===----------------------------------------------------------------------===//

#ifndef SPIN_RUNTIME_JSON_H
#define SPIN_RUNTIME_JSON_H

#include "spin/Runtime/Status.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace spin::runtime {

/// One parsed JSON value. Objects keep their members in document order
/// (duplicate keys are a parse error, so lookups are unambiguous).
class JsonValue {
public:
  enum class Kind { Null, Bool, Int, Double, String, Array, Object };

  JsonValue() = default;

  Kind kind() const { return kind_; }
  /// Byte offset of the value's first character in the parsed text.
  size_t offset() const { return offset_; }

  bool isNull() const { return kind_ == Kind::Null; }
  bool isBool() const { return kind_ == Kind::Bool; }
  /// A number written without fraction or exponent that fits in int64.
  bool isInt() const { return kind_ == Kind::Int; }
  /// Any number (an integer, or one with a fraction or an exponent).
  bool isNumber() const { return kind_ == Kind::Int || kind_ == Kind::Double; }
  bool isString() const { return kind_ == Kind::String; }
  bool isArray() const { return kind_ == Kind::Array; }
  bool isObject() const { return kind_ == Kind::Object; }

  /// The value, for a value of the matching kind (false, 0, 0.0 or empty
  /// otherwise: check the kind first). `asDouble` converts integers.
  bool asBool() const { return kind_ == Kind::Bool && boolValue; }
  int64_t asInt() const { return kind_ == Kind::Int ? intValue : 0; }
  double asDouble() const;
  const std::string &asString() const { return text; }
  const std::vector<JsonValue> &asArray() const { return elements; }
  const std::vector<std::pair<std::string, JsonValue>> &asObject() const {
    return members;
  }

  /// The member `key` of an object, or null if absent (or not an object).
  const JsonValue *find(const std::string &key) const;

  /// The kind as a phrase for error messages ("an integer", "a string").
  static const char *describe(Kind kind);
  const char *describe() const { return describe(kind_); }

private:
  friend class JsonParser;

  Kind kind_ = Kind::Null;
  size_t offset_ = 0;
  bool boolValue = false;
  int64_t intValue = 0;
  double doubleValue = 0.0;
  std::string text;
  std::vector<JsonValue> elements;
  std::vector<std::pair<std::string, JsonValue>> members;
};

/// Parses one JSON document (surrounding whitespace allowed). Errors name
/// the byte offset and what was expected there ("JSON error at byte 17:
/// expected ',' or '}' in an object"). Nesting is limited to 256 levels.
StatusOr<JsonValue> parseJson(const std::string &text);

/// Writes one JSON document, indented by two spaces per level; arrays of
/// scalars stay on one line. Calls must nest properly: `key` before every
/// member of an object, `end` for every `beginObject`/`beginArray`.
class JsonWriter {
public:
  JsonWriter &beginObject();
  JsonWriter &beginArray();
  /// Ends the innermost open object or array.
  JsonWriter &end();
  /// The name of the next member of the innermost object.
  JsonWriter &key(const std::string &name);
  JsonWriter &value(int64_t v);
  JsonWriter &value(const std::string &v);
  JsonWriter &value(const char *v) { return value(std::string(v)); }
  /// A member `name` with a scalar value.
  template <typename T> JsonWriter &member(const std::string &name, T v) {
    return key(name).value(v);
  }

  /// The document (with a final newline).
  std::string text() const { return out + "\n"; }

private:
  struct Level {
    bool array;
    bool empty = true;
    bool inline_ = false;
  };
  /// Separator and indentation before an element or member.
  void next(bool scalar);
  void newline(size_t depth);
  void quote(const std::string &v);

  std::string out;
  std::vector<Level> open;
  bool afterKey = false;
};

} // namespace spin::runtime

#endif // SPIN_RUNTIME_JSON_H
