//===- Npy.cpp - minimal .npy reader and writer ---------------------------===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
// The .npy format (numpy/lib/format.py): the magic "\x93NUMPY", a major and
// a minor version byte, the header length (little-endian u16 in 1.0, u32 in
// 2.0 and 3.0), then an ASCII Python dict literal
// `{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }` padded with
// spaces and a newline so that the data starts on a 64-byte boundary, then
// the raw data.
//
//===----------------------------------------------------------------------===//

#include "spin/Runtime/Npy.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>

namespace spin::runtime {

namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicSize = 6;
constexpr size_t kAlignment = 64;
constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

struct DtypeInfo {
  const char *name;
  int64_t size;
};
constexpr DtypeInfo kDtypes[] = {
    {"<f4", 4}, {"<f2", 2}, {"<i4", 4}, {"<i8", 8},
    {"|u1", 1}, {"|i1", 1}, {"|b1", 1}, {"<u2", 2},
};
constexpr char kSupported[] = "<f4, <f2, <i4, <i8, |u1, |i1, |b1, <u2";

std::string str(int64_t value) { return std::to_string(value); }
std::string quoted(const std::string &text) { return "'" + text + "'"; }

/// The product of `shape` times `itemSize`, or -1 if a dimension is negative
/// or the product overflows int64.
int64_t byteCount(const std::vector<int64_t> &shape, int64_t itemSize) {
  int64_t bytes = itemSize;
  for (int64_t dim : shape) {
    if (dim < 0)
      return -1;
    if (dim != 0 && bytes > kInt64Max / dim)
      return -1;
    bytes *= dim;
  }
  return bytes;
}

/// Parses the header dict. numpy writes it with `repr`, so keys and the
/// dtype are quoted strings, `fortran_order` is a Python bool and `shape` a
/// tuple of ints (Python 2 wrote longs as `3L`).
class HeaderParser {
public:
  HeaderParser(const char *begin, const char *end, const std::string &name)
      : p(begin), end(end), name(name) {}

  Status parse(std::string &descr, bool &fortranOrder,
               std::vector<int64_t> &shape) {
    bool haveDescr = false, haveOrder = false, haveShape = false;
    skipSpace();
    if (!consume('{'))
      return fail("the header is not a dict");
    while (true) {
      skipSpace();
      if (consume('}'))
        break;
      std::string key;
      if (Status s = parseString(key); !s.ok())
        return s;
      skipSpace();
      if (!consume(':'))
        return fail("expected ':' after key " + quoted(key));
      skipSpace();
      if (key == "descr") {
        if (haveDescr)
          return fail("duplicate key 'descr'");
        haveDescr = true;
        if (p < end && *p == '[')
          return Status::error(
              quoted(name) +
              " has a structured dtype, which is not supported (supported: " +
              kSupported + ")");
        if (Status s = parseString(descr); !s.ok())
          return s;
      } else if (key == "fortran_order") {
        if (haveOrder)
          return fail("duplicate key 'fortran_order'");
        haveOrder = true;
        if (Status s = parseBool(fortranOrder); !s.ok())
          return s;
      } else if (key == "shape") {
        if (haveShape)
          return fail("duplicate key 'shape'");
        haveShape = true;
        if (Status s = parseShape(shape); !s.ok())
          return s;
      } else {
        return fail("unexpected key " + quoted(key));
      }
      skipSpace();
      if (consume(','))
        continue;
      skipSpace();
      if (consume('}'))
        break;
      return fail("expected ',' or '}' in the header dict");
    }
    skipSpace();
    if (p != end)
      return fail("unexpected text after the header dict");
    if (!haveDescr)
      return fail("the header has no 'descr'");
    if (!haveOrder)
      return fail("the header has no 'fortran_order'");
    if (!haveShape)
      return fail("the header has no 'shape'");
    return Status::success();
  }

private:
  Status fail(const std::string &what) const {
    return Status::error(quoted(name) + " has a corrupt .npy header: " + what);
  }

  void skipSpace() {
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
      ++p;
  }

  bool consume(char c) {
    if (p < end && *p == c) {
      ++p;
      return true;
    }
    return false;
  }

  bool consumeWord(const char *word) {
    size_t n = std::strlen(word);
    if (static_cast<size_t>(end - p) < n || std::memcmp(p, word, n) != 0)
      return false;
    p += n;
    return true;
  }

  Status parseString(std::string &out) {
    if (p >= end || (*p != '\'' && *p != '"'))
      return fail("expected a quoted string");
    char quote = *p++;
    const char *start = p;
    while (p < end && *p != quote) {
      if (*p == '\\')
        return fail("escapes in strings are not supported");
      ++p;
    }
    if (p >= end)
      return fail("unterminated string");
    out.assign(start, p);
    ++p;
    return Status::success();
  }

  Status parseBool(bool &out) {
    if (consumeWord("True"))
      out = true;
    else if (consumeWord("False"))
      out = false;
    else
      return fail("'fortran_order' is not True or False");
    return Status::success();
  }

  Status parseShape(std::vector<int64_t> &shape) {
    shape.clear();
    if (!consume('('))
      return fail("'shape' is not a tuple");
    while (true) {
      skipSpace();
      if (consume(')'))
        return Status::success();
      if (p >= end || *p < '0' || *p > '9')
        return fail("'shape' holds something other than non-negative integers");
      int64_t dim = 0;
      while (p < end && *p >= '0' && *p <= '9') {
        int digit = *p++ - '0';
        if (dim > (kInt64Max - digit) / 10)
          return fail("a dimension of 'shape' overflows int64");
        dim = dim * 10 + digit;
      }
      consume('L');
      shape.push_back(dim);
      skipSpace();
      if (consume(','))
        continue;
      skipSpace();
      if (consume(')'))
        return Status::success();
      return fail("expected ',' or ')' in 'shape'");
    }
  }

  const char *p;
  const char *end;
  const std::string &name;
};

/// Maps what numpy may write for a supported type to our spelling: byte
/// order is meaningless for one-byte types (`<u1`, `=u1`, `|u1`).
std::string normalizeDtype(const std::string &descr) {
  if (descr.size() == 3 && std::strchr("<>=|", descr[0]) &&
      (descr.compare(1, 2, "u1") == 0 || descr.compare(1, 2, "i1") == 0 ||
       descr.compare(1, 2, "b1") == 0))
    return "|" + descr.substr(1);
  return descr;
}

} // namespace

int64_t NpyArray::numElements() const {
  int64_t n = 1;
  for (int64_t dim : shape)
    n *= dim;
  return n;
}

int64_t npyItemSize(const std::string &dtype) {
  for (const DtypeInfo &info : kDtypes)
    if (dtype == info.name)
      return info.size;
  return 0;
}

//===----------------------------------------------------------------------===//
// Reading
//===----------------------------------------------------------------------===//

StatusOr<NpyArray> parseNpy(Span<uint8_t> bytes, const std::string &name) {
  const size_t size = bytes.size();
  const std::string where = quoted(name);
  // A proper prefix of the magic is a truncated file, not a foreign one.
  const size_t magicBytes = size < kMagicSize ? size : kMagicSize;
  if (magicBytes > 0 && std::memcmp(bytes.data(), kMagic, magicBytes) != 0)
    return Status::error(where + " is not a .npy file (bad magic)");
  if (size < kMagicSize + 4)
    return Status::error(where + " is truncated: " + str(int64_t(size)) +
                         " bytes, shorter than the .npy preamble");

  const uint8_t major = bytes[6], minor = bytes[7];
  size_t lengthBytes = 0;
  if (major == 1 && minor == 0)
    lengthBytes = 2;
  else if ((major == 2 || major == 3) && minor == 0)
    lengthBytes = 4;
  else
    return Status::error(where + " has unsupported .npy format version " +
                         str(major) + "." + str(minor) +
                         " (supported: 1.0, 2.0, 3.0)");
  const size_t preamble = kMagicSize + 2 + lengthBytes;
  if (size < preamble)
    return Status::error(where + " is truncated: " + str(int64_t(size)) +
                         " bytes, shorter than the .npy preamble");
  uint64_t headerLength = 0;
  for (size_t i = 0; i < lengthBytes; ++i)
    headerLength |= uint64_t(bytes[8 + i]) << (8 * i);
  if (headerLength > size - preamble)
    return Status::error(where + " is truncated: its header needs " +
                         str(int64_t(preamble + headerLength)) +
                         " bytes but the file has " + str(int64_t(size)));

  const char *header = reinterpret_cast<const char *>(bytes.data() + preamble);
  NpyArray array;
  std::string descr;
  bool fortranOrder = false;
  HeaderParser parser(header, header + headerLength, name);
  if (Status s = parser.parse(descr, fortranOrder, array.shape); !s.ok())
    return s;

  array.dtype = normalizeDtype(descr);
  const int64_t itemSize = npyItemSize(array.dtype);
  if (itemSize == 0) {
    if (!descr.empty() && descr[0] == '>')
      return Status::error(where + " has big-endian dtype " + quoted(descr) +
                           ", which is not supported: save it little-endian "
                           "(a.astype('<" +
                           descr.substr(1) + "'))");
    return Status::error(where + " has unsupported dtype " + quoted(descr) +
                         " (supported: " + kSupported + ")");
  }
  if (fortranOrder)
    return Status::error(where +
                         " is Fortran-ordered, which is not supported: save "
                         "np.ascontiguousarray(a)");

  const int64_t dataBytes = byteCount(array.shape, itemSize);
  if (dataBytes < 0)
    return Status::error(where + " has a shape whose size overflows int64");
  const uint64_t available = size - preamble - headerLength;
  if (uint64_t(dataBytes) > available)
    return Status::error(
        where + " is truncated: its header says " + str(array.numElements()) +
        " elements of " + array.dtype + " (" + str(dataBytes) +
        " bytes) but only " + str(int64_t(available)) + " data bytes follow");
  if (uint64_t(dataBytes) < available)
    return Status::error(where + " has " +
                         str(int64_t(available - uint64_t(dataBytes))) +
                         " bytes after the " + str(dataBytes) +
                         " data bytes its header announces");
  const uint8_t *data = bytes.data() + preamble + headerLength;
  array.data.assign(data, data + dataBytes);
  return array;
}

StatusOr<NpyArray> readNpy(const std::string &path) {
  std::unique_ptr<std::FILE, int (*)(std::FILE *)> file(
      std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!file)
    return Status::error("cannot open " + quoted(path) + ": " +
                         std::strerror(errno));
  std::vector<uint8_t> bytes;
  uint8_t chunk[1 << 16];
  while (true) {
    size_t n = std::fread(chunk, 1, sizeof(chunk), file.get());
    bytes.insert(bytes.end(), chunk, chunk + n);
    if (n < sizeof(chunk))
      break;
  }
  if (std::ferror(file.get()))
    return Status::error("cannot read " + quoted(path) + ": " +
                         std::strerror(errno));
  return parseNpy(bytes, path);
}

//===----------------------------------------------------------------------===//
// Writing
//===----------------------------------------------------------------------===//

StatusOr<std::vector<uint8_t>> serializeNpy(const NpyArray &array) {
  const int64_t itemSize = npyItemSize(array.dtype);
  if (itemSize == 0)
    return Status::error("cannot write dtype " + quoted(array.dtype) +
                         " to .npy (supported: " + kSupported + ")");
  const int64_t dataBytes = byteCount(array.shape, itemSize);
  if (dataBytes < 0)
    return Status::error("cannot write an array whose shape has a negative "
                         "dimension or a size that overflows int64");
  if (uint64_t(dataBytes) != array.data.size())
    return Status::error("the array's shape and dtype " + array.dtype +
                         " need " + str(dataBytes) + " bytes but it holds " +
                         str(int64_t(array.data.size())));

  std::string dict =
      "{'descr': '" + array.dtype + "', 'fortran_order': False, 'shape': (";
  for (size_t i = 0; i < array.shape.size(); ++i)
    dict += (i ? ", " : "") + str(array.shape[i]);
  dict += array.shape.size() == 1 ? ",), }" : "), }";

  // Pad with spaces so that preamble + header (ending in '\n') is a multiple
  // of 64 bytes.
  uint8_t major = 1;
  size_t preamble = kMagicSize + 2 + 2;
  size_t total =
      (preamble + dict.size() + 1 + kAlignment - 1) / kAlignment * kAlignment;
  if (total - preamble > std::numeric_limits<uint16_t>::max()) {
    major = 2;
    preamble = kMagicSize + 2 + 4;
    total =
        (preamble + dict.size() + 1 + kAlignment - 1) / kAlignment * kAlignment;
  }
  const size_t headerLength = total - preamble;
  dict.append(headerLength - dict.size() - 1, ' ');
  dict += '\n';

  std::vector<uint8_t> bytes;
  bytes.reserve(total + array.data.size());
  bytes.insert(bytes.end(), kMagic, kMagic + kMagicSize);
  bytes.push_back(major);
  bytes.push_back(0);
  for (size_t i = 0; i < preamble - kMagicSize - 2; ++i)
    bytes.push_back(static_cast<uint8_t>((headerLength >> (8 * i)) & 0xff));
  bytes.insert(bytes.end(), dict.begin(), dict.end());
  bytes.insert(bytes.end(), array.data.begin(), array.data.end());
  return bytes;
}

Status writeNpy(const std::string &path, const NpyArray &array) {
  StatusOr<std::vector<uint8_t>> bytes = serializeNpy(array);
  if (!bytes.ok())
    return Status::error("cannot write " + quoted(path) + ": " +
                         bytes.message());
  std::FILE *file = std::fopen(path.c_str(), "wb");
  if (!file)
    return Status::error("cannot open " + quoted(path) +
                         " for writing: " + std::strerror(errno));
  size_t written = std::fwrite(bytes->data(), 1, bytes->size(), file);
  bool failed = written != bytes->size();
  int savedErrno = errno;
  if (std::fclose(file) != 0 && !failed) {
    failed = true;
    savedErrno = errno;
  }
  if (failed)
    return Status::error("cannot write " + quoted(path) + ": " +
                         std::strerror(savedErrno));
  return Status::success();
}

} // namespace spin::runtime
