//===- Json.cpp - a minimal JSON reader for artifact manifests ------------===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
// A recursive-descent parser over the grammar of RFC 8259. Numbers with a
// fraction or an exponent are read through the classic "C" locale, so that
// a host process that changed LC_NUMERIC still reads "0.5" as one half.
//
//===----------------------------------------------------------------------===//

#include "spin/Runtime/Json.h"

#include <cmath>
#include <limits>
#include <locale>
#include <sstream>

namespace spin::runtime {

double JsonValue::asDouble() const {
  if (kind_ == Kind::Int)
    return static_cast<double>(intValue);
  return kind_ == Kind::Double ? doubleValue : 0.0;
}

const JsonValue *JsonValue::find(const std::string &key) const {
  for (const auto &[name, value] : members)
    if (name == key)
      return &value;
  return nullptr;
}

const char *JsonValue::describe(Kind kind) {
  switch (kind) {
  case Kind::Null:
    return "null";
  case Kind::Bool:
    return "a boolean";
  case Kind::Int:
    return "an integer";
  case Kind::Double:
    return "a number";
  case Kind::String:
    return "a string";
  case Kind::Array:
    return "an array";
  case Kind::Object:
    return "an object";
  }
  return "a value";
}

/// The parser; a friend of JsonValue so that it fills values in place.
class JsonParser {
public:
  explicit JsonParser(const std::string &text) : s(text) {}

  StatusOr<JsonValue> document() {
    JsonValue value;
    skipSpace();
    if (Status st = parseValue(value, 0); !st.ok())
      return st;
    skipSpace();
    if (pos != s.size())
      return error("unexpected '" + printable(s[pos]) +
                   "' after the end of the document");
    return value;
  }

private:
  static constexpr int kMaxDepth = 256;

  static std::string printable(char c) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      static const char hex[] = "0123456789abcdef";
      unsigned char u = static_cast<unsigned char>(c);
      return std::string("\\x") + hex[u >> 4] + hex[u & 15];
    }
    return std::string(1, c);
  }

  Status error(const std::string &what) const {
    return Status::error("JSON error at byte " + std::to_string(pos) + ": " +
                         what);
  }

  Status unexpected(const char *expected) const {
    if (pos >= s.size())
      return error(std::string("unexpected end of input, expected ") +
                   expected);
    return error("unexpected '" + printable(s[pos]) + "', expected " +
                 expected);
  }

  void skipSpace() {
    while (pos < s.size() && (s[pos] == ' ' || s[pos] == '\t' ||
                              s[pos] == '\n' || s[pos] == '\r'))
      ++pos;
  }

  bool consumeWord(const char *word) {
    size_t n = std::char_traits<char>::length(word);
    if (s.compare(pos, n, word) != 0)
      return false;
    pos += n;
    return true;
  }

  Status parseValue(JsonValue &value, int depth) {
    value.offset_ = pos;
    if (pos >= s.size())
      return unexpected("a value");
    switch (s[pos]) {
    case '{':
      return parseObject(value, depth);
    case '[':
      return parseArray(value, depth);
    case '"':
      value.kind_ = JsonValue::Kind::String;
      return parseString(value.text);
    case 't':
      if (!consumeWord("true"))
        return unexpected("a value");
      value.kind_ = JsonValue::Kind::Bool;
      value.boolValue = true;
      return Status::success();
    case 'f':
      if (!consumeWord("false"))
        return unexpected("a value");
      value.kind_ = JsonValue::Kind::Bool;
      value.boolValue = false;
      return Status::success();
    case 'n':
      if (!consumeWord("null"))
        return unexpected("a value");
      value.kind_ = JsonValue::Kind::Null;
      return Status::success();
    default:
      if (s[pos] == '-' || (s[pos] >= '0' && s[pos] <= '9'))
        return parseNumber(value);
      return unexpected("a value");
    }
  }

  Status parseObject(JsonValue &value, int depth) {
    if (depth >= kMaxDepth)
      return error("nesting deeper than " + std::to_string(kMaxDepth) +
                   " levels");
    value.kind_ = JsonValue::Kind::Object;
    ++pos; // '{'
    skipSpace();
    if (pos < s.size() && s[pos] == '}') {
      ++pos;
      return Status::success();
    }
    while (true) {
      skipSpace();
      if (pos >= s.size() || s[pos] != '"')
        return unexpected("a member name (a string)");
      size_t keyOffset = pos;
      std::string key;
      if (Status st = parseString(key); !st.ok())
        return st;
      if (value.find(key)) {
        pos = keyOffset;
        return error("duplicate member \"" + key + "\" in an object");
      }
      skipSpace();
      if (pos >= s.size() || s[pos] != ':')
        return unexpected("':' after a member name");
      ++pos;
      skipSpace();
      value.members.emplace_back(std::move(key), JsonValue());
      if (Status st = parseValue(value.members.back().second, depth + 1);
          !st.ok())
        return st;
      skipSpace();
      if (pos < s.size() && s[pos] == ',') {
        ++pos;
        continue;
      }
      if (pos < s.size() && s[pos] == '}') {
        ++pos;
        return Status::success();
      }
      return unexpected("',' or '}' in an object");
    }
  }

  Status parseArray(JsonValue &value, int depth) {
    if (depth >= kMaxDepth)
      return error("nesting deeper than " + std::to_string(kMaxDepth) +
                   " levels");
    value.kind_ = JsonValue::Kind::Array;
    ++pos; // '['
    skipSpace();
    if (pos < s.size() && s[pos] == ']') {
      ++pos;
      return Status::success();
    }
    while (true) {
      skipSpace();
      value.elements.emplace_back();
      if (Status st = parseValue(value.elements.back(), depth + 1); !st.ok())
        return st;
      skipSpace();
      if (pos < s.size() && s[pos] == ',') {
        ++pos;
        continue;
      }
      if (pos < s.size() && s[pos] == ']') {
        ++pos;
        return Status::success();
      }
      return unexpected("',' or ']' in an array");
    }
  }

  /// Four hex digits at `pos` (after "\u").
  Status parseHex4(uint32_t &code) {
    code = 0;
    for (int i = 0; i < 4; ++i, ++pos) {
      if (pos >= s.size())
        return unexpected("four hex digits after \\u");
      char c = s[pos];
      uint32_t digit;
      if (c >= '0' && c <= '9')
        digit = c - '0';
      else if (c >= 'a' && c <= 'f')
        digit = c - 'a' + 10;
      else if (c >= 'A' && c <= 'F')
        digit = c - 'A' + 10;
      else
        return unexpected("four hex digits after \\u");
      code = code * 16 + digit;
    }
    return Status::success();
  }

  static void appendUtf8(std::string &out, uint32_t code) {
    if (code < 0x80) {
      out += static_cast<char>(code);
    } else if (code < 0x800) {
      out += static_cast<char>(0xC0 | (code >> 6));
      out += static_cast<char>(0x80 | (code & 0x3F));
    } else if (code < 0x10000) {
      out += static_cast<char>(0xE0 | (code >> 12));
      out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (code & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (code >> 18));
      out += static_cast<char>(0x80 | ((code >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (code & 0x3F));
    }
  }

  Status parseString(std::string &out) {
    ++pos; // '"'
    while (true) {
      if (pos >= s.size())
        return error("unterminated string");
      char c = s[pos];
      if (c == '"') {
        ++pos;
        return Status::success();
      }
      if (static_cast<unsigned char>(c) < 0x20)
        return error("control character " + printable(c) +
                     " in a string (escape it)");
      if (c != '\\') {
        out += c;
        ++pos;
        continue;
      }
      ++pos;
      if (pos >= s.size())
        return error("unterminated string");
      char e = s[pos++];
      switch (e) {
      case '"':
      case '\\':
      case '/':
        out += e;
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      case 'u': {
        uint32_t code;
        if (Status st = parseHex4(code); !st.ok())
          return st;
        if (code >= 0xDC00 && code <= 0xDFFF) {
          pos -= 6;
          return error("unpaired low surrogate in a \\u escape");
        }
        if (code >= 0xD800 && code <= 0xDBFF) {
          if (s.compare(pos, 2, "\\u") != 0)
            return error("high surrogate without a following \\u low "
                         "surrogate");
          pos += 2;
          uint32_t low;
          if (Status st = parseHex4(low); !st.ok())
            return st;
          if (low < 0xDC00 || low > 0xDFFF) {
            pos -= 6;
            return error("high surrogate followed by a non-low surrogate");
          }
          code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
        }
        appendUtf8(out, code);
        break;
      }
      default:
        pos -= 2;
        return error("invalid escape '\\" + printable(e) + "' in a string");
      }
    }
  }

  Status parseNumber(JsonValue &value) {
    size_t start = pos;
    bool negative = false;
    if (s[pos] == '-') {
      negative = true;
      ++pos;
    }
    auto digit = [&](size_t at) {
      return at < s.size() && s[at] >= '0' && s[at] <= '9';
    };
    if (!digit(pos))
      return unexpected("a digit");
    if (s[pos] == '0') {
      ++pos;
      if (digit(pos))
        return error("leading zero in a number");
    } else {
      while (digit(pos))
        ++pos;
    }
    bool integral = true;
    if (pos < s.size() && s[pos] == '.') {
      integral = false;
      ++pos;
      if (!digit(pos))
        return unexpected("a digit after the decimal point");
      while (digit(pos))
        ++pos;
    }
    if (pos < s.size() && (s[pos] == 'e' || s[pos] == 'E')) {
      integral = false;
      ++pos;
      if (pos < s.size() && (s[pos] == '+' || s[pos] == '-'))
        ++pos;
      if (!digit(pos))
        return unexpected("a digit in the exponent");
      while (digit(pos))
        ++pos;
    }
    std::string literal = s.substr(start, pos - start);
    if (integral) {
      // Accumulate negatively so that INT64_MIN is representable.
      int64_t result = 0;
      bool overflow = false;
      constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
      for (size_t i = negative ? 1 : 0; i < literal.size(); ++i) {
        int d = literal[i] - '0';
        if (result < (kMin + d) / 10) {
          overflow = true;
          break;
        }
        result = result * 10 - d;
      }
      if (!overflow && !negative &&
          result == std::numeric_limits<int64_t>::min())
        overflow = true;
      if (!overflow) {
        value.kind_ = JsonValue::Kind::Int;
        value.intValue = negative ? result : -result;
        return Status::success();
      }
      // Too large for int64: keep it as a double.
    }
    std::istringstream in(literal);
    in.imbue(std::locale::classic());
    double d = 0.0;
    in >> d;
    if (in.fail() || !std::isfinite(d)) {
      pos = start;
      return error("number " + literal + " is out of range");
    }
    value.kind_ = JsonValue::Kind::Double;
    value.doubleValue = d;
    return Status::success();
  }

  const std::string &s;
  size_t pos = 0;
};

StatusOr<JsonValue> parseJson(const std::string &text) {
  return JsonParser(text).document();
}

//===----------------------------------------------------------------------===//
// Writing
//===----------------------------------------------------------------------===//

void JsonWriter::newline(size_t depth) {
  out += '\n';
  out.append(2 * depth, ' ');
}

void JsonWriter::next(bool scalar) {
  if (afterKey) {
    afterKey = false;
    return;
  }
  if (open.empty())
    return;
  Level &level = open.back();
  if (!level.empty)
    out += level.inline_ ? ", " : ",";
  // An array stays on one line while it holds scalars only.
  if (level.array && level.empty)
    level.inline_ = scalar;
  if (!level.inline_)
    newline(open.size());
  level.empty = false;
}

JsonWriter &JsonWriter::beginObject() {
  next(false);
  out += '{';
  open.push_back({false});
  return *this;
}

JsonWriter &JsonWriter::beginArray() {
  next(false);
  out += '[';
  open.push_back({true});
  return *this;
}

JsonWriter &JsonWriter::end() {
  Level level = open.back();
  open.pop_back();
  if (!level.empty && !level.inline_)
    newline(open.size());
  out += level.array ? ']' : '}';
  return *this;
}

JsonWriter &JsonWriter::key(const std::string &name) {
  next(false);
  quote(name);
  out += ": ";
  afterKey = true;
  return *this;
}

JsonWriter &JsonWriter::value(int64_t v) {
  next(true);
  out += std::to_string(v);
  return *this;
}

JsonWriter &JsonWriter::value(const std::string &v) {
  next(true);
  quote(v);
  return *this;
}

void JsonWriter::quote(const std::string &v) {
  out += '"';
  for (char c : v) {
    auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20) {
      static const char hex[] = "0123456789abcdef";
      out += "\\u00";
      out += hex[u >> 4];
      out += hex[u & 15];
    } else {
      out += c;
    }
  }
  out += '"';
}

} // namespace spin::runtime
