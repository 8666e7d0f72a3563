//===- NpyTest.cpp - tests of the .npy reader and writer ------------------===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
//===----------------------------------------------------------------------===//

#include "spin/Runtime/Npy.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <unistd.h>

using namespace spin::runtime;

namespace {

/// A path in the test temp dir, unique per test and process.
std::string tempPath(const std::string &stem) {
  const auto *info = ::testing::UnitTest::GetInstance()->current_test_info();
  return ::testing::TempDir() + "spin_npy_" + info->name() + "_" + stem + "_" +
         std::to_string(::getpid()) + ".npy";
}

std::vector<uint8_t> bytesOf(const std::string &text) {
  return std::vector<uint8_t>(text.begin(), text.end());
}

/// A .npy file with the given version and raw header dict text, padded the
/// way numpy pads, followed by `data`.
std::vector<uint8_t> npyFile(const std::string &dict,
                             const std::vector<uint8_t> &data,
                             uint8_t major = 1) {
  size_t preamble = major == 1 ? 10 : 12;
  std::string header = dict;
  size_t total = (preamble + header.size() + 1 + 63) / 64 * 64;
  header.append(total - preamble - header.size() - 1, ' ');
  header += '\n';
  std::vector<uint8_t> bytes = {0x93, 'N', 'U', 'M', 'P', 'Y', major, 0};
  size_t length = header.size();
  for (size_t i = 0; i < preamble - 8; ++i)
    bytes.push_back(static_cast<uint8_t>(length >> (8 * i)));
  bytes.insert(bytes.end(), header.begin(), header.end());
  bytes.insert(bytes.end(), data.begin(), data.end());
  return bytes;
}

std::string parseError(const std::vector<uint8_t> &bytes) {
  StatusOr<NpyArray> array = parseNpy(bytes, "x.npy");
  EXPECT_FALSE(array.ok());
  return array.message();
}

NpyArray patterned(const std::string &dtype, std::vector<int64_t> shape) {
  NpyArray array;
  array.dtype = dtype;
  array.shape = std::move(shape);
  array.data.resize(
      static_cast<size_t>(array.numElements() * npyItemSize(dtype)));
  for (size_t i = 0; i < array.data.size(); ++i)
    array.data[i] = static_cast<uint8_t>(i * 37 + 11);
  if (dtype == "|b1")
    for (uint8_t &byte : array.data)
      byte &= 1;
  return array;
}

//===----------------------------------------------------------------------===//
// Round trips
//===----------------------------------------------------------------------===//

TEST(Npy, ItemSizes) {
  EXPECT_EQ(npyItemSize("<f4"), 4);
  EXPECT_EQ(npyItemSize("<f2"), 2);
  EXPECT_EQ(npyItemSize("<i4"), 4);
  EXPECT_EQ(npyItemSize("<i8"), 8);
  EXPECT_EQ(npyItemSize("|u1"), 1);
  EXPECT_EQ(npyItemSize("|i1"), 1);
  EXPECT_EQ(npyItemSize("|b1"), 1);
  EXPECT_EQ(npyItemSize("<u2"), 2);
  EXPECT_EQ(npyItemSize("<f8"), 0);
  EXPECT_EQ(npyItemSize(">f4"), 0);
}

TEST(Npy, RoundTripsEveryDtypeThroughAFile) {
  const std::vector<std::vector<int64_t>> shapes = {
      {}, {0}, {5}, {2, 3}, {2, 3, 4}, {1, 2, 1, 3}, {3, 0, 2}};
  for (const char *dtype :
       {"<f4", "<f2", "<i4", "<i8", "|u1", "|i1", "|b1", "<u2"}) {
    for (const std::vector<int64_t> &shape : shapes) {
      NpyArray array = patterned(dtype, shape);
      std::string path = tempPath(std::string(dtype + 1));
      Status written = writeNpy(path, array);
      ASSERT_TRUE(written.ok()) << written.message();
      StatusOr<NpyArray> read = readNpy(path);
      std::remove(path.c_str());
      ASSERT_TRUE(read.ok()) << read.message();
      EXPECT_EQ(read->dtype, dtype);
      EXPECT_EQ(read->shape, shape);
      EXPECT_EQ(read->data, array.data) << dtype;
    }
  }
}

TEST(Npy, WritesWhatNumpyWrites) {
  // np.save of np.arange(3, dtype=np.float32): version 1.0, header padded so
  // that the data starts at byte 128.
  NpyArray array;
  array.dtype = "<f4";
  array.shape = {3};
  float values[3] = {0.0f, 1.0f, 2.0f};
  array.data.resize(sizeof(values));
  std::memcpy(array.data.data(), values, sizeof(values));
  StatusOr<std::vector<uint8_t>> bytes = serializeNpy(array);
  ASSERT_TRUE(bytes.ok()) << bytes.message();
  ASSERT_EQ(bytes->size(), 128u + 12u);
  std::string dict =
      "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }";
  std::vector<uint8_t> expected = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 118, 0};
  expected.insert(expected.end(), dict.begin(), dict.end());
  expected.resize(127, ' ');
  expected.push_back('\n');
  expected.insert(expected.end(), array.data.begin(), array.data.end());
  EXPECT_EQ(*bytes, expected);

  // Scalars and 2-d shapes are spelled as Python tuples.
  std::string scalar(reinterpret_cast<const char *>(
                         serializeNpy(patterned("<i8", {}))->data()),
                     128);
  EXPECT_NE(scalar.find("'shape': (), }"), std::string::npos);
  std::string matrix(reinterpret_cast<const char *>(
                         serializeNpy(patterned("|u1", {2, 3}))->data()),
                     128);
  EXPECT_NE(matrix.find("'shape': (2, 3), }"), std::string::npos);
}

TEST(Npy, ReadsHeaderVariantsNumpyMayProduce) {
  std::vector<uint8_t> data = {1, 2, 3, 4, 5, 6};
  // Double quotes, no trailing comma, keys in another order, Python 2 longs.
  StatusOr<NpyArray> a = parseNpy(
      npyFile("{\"shape\": (2L, 3L), \"fortran_order\": False, \"descr\": "
              "\"<u1\"}",
              data),
      "a.npy");
  ASSERT_TRUE(a.ok()) << a.message();
  EXPECT_EQ(a->dtype, "|u1"); // Byte order of one-byte types is irrelevant.
  EXPECT_EQ(a->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(a->data, data);

  // Format version 2.0 (u32 header length).
  StatusOr<NpyArray> b = parseNpy(
      npyFile("{'descr': '<u2', 'fortran_order': False, 'shape': (3,), }", data,
              /*major=*/2),
      "b.npy");
  ASSERT_TRUE(b.ok()) << b.message();
  EXPECT_EQ(b->dtype, "<u2");
  EXPECT_EQ(b->shape, (std::vector<int64_t>{3}));
  EXPECT_EQ(b->data, data);

  // Format version 3.0 differs only in the header's encoding.
  StatusOr<NpyArray> c = parseNpy(
      npyFile("{'descr': '|i1', 'fortran_order': False, 'shape': (6,)}", data,
              /*major=*/3),
      "c.npy");
  ASSERT_TRUE(c.ok()) << c.message();
}

//===----------------------------------------------------------------------===//
// Rejections
//===----------------------------------------------------------------------===//

TEST(Npy, RejectsEveryTruncation) {
  StatusOr<std::vector<uint8_t>> full = serializeNpy(patterned("<f4", {2, 3}));
  ASSERT_TRUE(full.ok());
  for (size_t n = 0; n < full->size(); ++n) {
    std::vector<uint8_t> prefix(full->begin(), full->begin() + n);
    std::string message = parseError(prefix);
    EXPECT_NE(message.find("is truncated"), std::string::npos)
        << n << ": " << message;
  }
  std::vector<uint8_t> header(full->begin(), full->begin() + 100);
  EXPECT_EQ(parseError(header),
            "'x.npy' is truncated: its header needs 128 bytes but the file has "
            "100");
  std::vector<uint8_t> data(full->begin(), full->begin() + 128 + 20);
  EXPECT_EQ(parseError(data),
            "'x.npy' is truncated: its header says 6 elements of <f4 (24 "
            "bytes) but only 20 data bytes follow");
  EXPECT_EQ(parseError({}),
            "'x.npy' is truncated: 0 bytes, shorter than the .npy preamble");
}

TEST(Npy, RejectsTrailingBytes) {
  StatusOr<std::vector<uint8_t>> bytes = serializeNpy(patterned("<i4", {2}));
  ASSERT_TRUE(bytes.ok());
  bytes->push_back(0);
  EXPECT_EQ(parseError(*bytes),
            "'x.npy' has 1 bytes after the 8 data bytes its header announces");
}

TEST(Npy, RejectsWhatItCannotRepresent) {
  std::vector<uint8_t> data(24);
  EXPECT_EQ(
      parseError(npyFile(
          "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", data)),
      "'x.npy' is Fortran-ordered, which is not supported: save "
      "np.ascontiguousarray(a)");
  EXPECT_EQ(
      parseError(npyFile(
          "{'descr': '>f4', 'fortran_order': False, 'shape': (2, 3), }", data)),
      "'x.npy' has big-endian dtype '>f4', which is not supported: save it "
      "little-endian (a.astype('<f4'))");
  EXPECT_EQ(
      parseError(npyFile(
          "{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }", data)),
      "'x.npy' has unsupported dtype '<f8' (supported: <f4, <f2, <i4, <i8, "
      "|u1, |i1, |b1, <u2)");
  EXPECT_EQ(parseError(npyFile("{'descr': [('a', '<f4')], 'fortran_order': "
                               "False, 'shape': (6,), }",
                               data)),
            "'x.npy' has a structured dtype, which is not supported "
            "(supported: <f4, <f2, <i4, <i8, |u1, |i1, |b1, <u2)");
}

TEST(Npy, RejectsCorruptFiles) {
  std::vector<uint8_t> data(8);
  std::vector<uint8_t> notNpy = bytesOf("PK\x03\x04 this is a zip file");
  EXPECT_EQ(parseError(notNpy), "'x.npy' is not a .npy file (bad magic)");

  std::vector<uint8_t> v4 = npyFile(
      "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", data);
  v4[6] = 4;
  EXPECT_EQ(parseError(v4), "'x.npy' has unsupported .npy format version 4.0 "
                            "(supported: 1.0, 2.0, 3.0)");

  auto corrupt = [&](const std::string &dict) {
    return parseError(npyFile(dict, data));
  };
  const std::string prefix = "'x.npy' has a corrupt .npy header: ";
  EXPECT_EQ(corrupt("{'descr': '<f4', 'shape': (2,), }"),
            prefix + "the header has no 'fortran_order'");
  EXPECT_EQ(corrupt("{'descr': '<f4', 'fortran_order': False, }"),
            prefix + "the header has no 'shape'");
  EXPECT_EQ(corrupt("{'fortran_order': False, 'shape': (2,), }"),
            prefix + "the header has no 'descr'");
  EXPECT_EQ(corrupt("{'descr': '<f4', 'fortran_order': 0, 'shape': (2,), }"),
            prefix + "'fortran_order' is not True or False");
  EXPECT_EQ(corrupt("{'descr': '<f4', 'fortran_order': False, 'shape': (-2,)}"),
            prefix +
                "'shape' holds something other than non-negative integers");
  EXPECT_EQ(corrupt("{'descr': '<f4', 'fortran_order': False, 'shape': 2}"),
            prefix + "'shape' is not a tuple");
  EXPECT_EQ(corrupt("{'descr': '<f4', 'fortran_order': False, 'shape': "
                    "(99999999999999999999,)}"),
            prefix + "a dimension of 'shape' overflows int64");
  EXPECT_EQ(corrupt("{'descr': '<f4', 'fortran_order': False, 'shape': "
                    "(4294967296, 4294967296)}"),
            "'x.npy' has a shape whose size overflows int64");
  EXPECT_EQ(corrupt("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), "
                    "'extra': 1}"),
            prefix + "unexpected key 'extra'");
  EXPECT_EQ(corrupt("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, "
                    "'shape': (2,)}"),
            prefix + "duplicate key 'descr'");
  EXPECT_EQ(corrupt("{'descr': '<f4' 'fortran_order': False, 'shape': (2,)}"),
            prefix + "expected ',' or '}' in the header dict");
  EXPECT_EQ(
      corrupt("{'descr': '<f4', 'fortran_order': False, 'shape': (2,)} x"),
      prefix + "unexpected text after the header dict");
  EXPECT_EQ(corrupt("['descr', '<f4']"), prefix + "the header is not a dict");
  EXPECT_EQ(corrupt("{'descr: '<f4'}"),
            prefix + "expected ':' after key 'descr: '");
}

// No single corrupted byte crashes the reader (run under ASan/UBSan):
// every result is either a consistent array or an error.
TEST(Npy, SurvivesEveryByteCorruption) {
  StatusOr<std::vector<uint8_t>> good = serializeNpy(patterned("<i8", {3, 2}));
  ASSERT_TRUE(good.ok());
  for (size_t i = 0; i < good->size(); ++i) {
    for (uint8_t value : {uint8_t(0), uint8_t(0xff), uint8_t('('),
                          uint8_t('\''), uint8_t('9'), uint8_t(' ')}) {
      std::vector<uint8_t> bytes = *good;
      bytes[i] = value;
      StatusOr<NpyArray> array = parseNpy(bytes, "x.npy");
      if (array.ok()) {
        EXPECT_EQ(int64_t(array->data.size()),
                  array->numElements() * npyItemSize(array->dtype));
      } else {
        EXPECT_FALSE(array.message().empty());
      }
    }
  }
}

TEST(Npy, ReportsFileErrors) {
  StatusOr<NpyArray> missing = readNpy("/nonexistent-spin-dir/x.npy");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.message(), "cannot open '/nonexistent-spin-dir/x.npy': No "
                               "such file or directory");
  Status unwritable =
      writeNpy("/nonexistent-spin-dir/x.npy", patterned("<f4", {2}));
  EXPECT_EQ(unwritable.message(),
            "cannot open '/nonexistent-spin-dir/x.npy' for writing: No such "
            "file or directory");
}

TEST(Npy, WriterRejectsInconsistentArrays) {
  NpyArray array = patterned("<f4", {2, 3});
  array.dtype = "<f8";
  EXPECT_EQ(serializeNpy(array).message(),
            "cannot write dtype '<f8' to .npy (supported: <f4, <f2, <i4, <i8, "
            "|u1, |i1, |b1, <u2)");
  array = patterned("<f4", {2, 3});
  array.data.pop_back();
  EXPECT_EQ(serializeNpy(array).message(),
            "the array's shape and dtype <f4 need 24 bytes but it holds 23");
  array.shape = {-1};
  EXPECT_EQ(serializeNpy(array).message(),
            "cannot write an array whose shape has a negative dimension or a "
            "size that overflows int64");
  std::string path = tempPath("bad");
  EXPECT_EQ(writeNpy(path, array).message(),
            "cannot write '" + path +
                "': cannot write an array whose shape has a negative "
                "dimension or a size that overflows int64");
}

} // namespace
