//===- MemRefTest.cpp - tests of the C-ABI memref descriptors -------------===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
//===----------------------------------------------------------------------===//

#include "spin/Runtime/MemRef.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <vector>

using namespace spin::runtime;

namespace {

// The C interface of MLIR: pointers first, then offset, sizes, strides.
using Desc3 = MemRefDescriptor<float, 3>;
static_assert(offsetof(Desc3, aligned) == sizeof(void *));
static_assert(offsetof(Desc3, offset) == 2 * sizeof(void *));
static_assert(offsetof(Desc3, sizes) == 2 * sizeof(void *) + 8);
static_assert(offsetof(Desc3, strides) == 2 * sizeof(void *) + 8 + 3 * 8);

TEST(MemRef, RowMajorDescriptorHasIdentityStrides) {
  std::vector<float> data(2 * 3 * 4 * 5);
  auto desc = makeRowMajorMemRef(data.data(), 2, 3, 4, 5);
  static_assert(std::is_same_v<decltype(desc), MemRefDescriptor<float, 4>>);
  EXPECT_EQ(desc.allocated, data.data());
  EXPECT_EQ(desc.aligned, data.data());
  EXPECT_EQ(desc.offset, 0);
  EXPECT_EQ(desc.sizes[0], 2);
  EXPECT_EQ(desc.sizes[3], 5);
  EXPECT_EQ(desc.strides[0], 60);
  EXPECT_EQ(desc.strides[1], 20);
  EXPECT_EQ(desc.strides[2], 5);
  EXPECT_EQ(desc.strides[3], 1);
  EXPECT_EQ(numElements(desc), 120);
}

TEST(MemRef, ArrayFormMatchesVariadicForm) {
  int32_t data[6] = {};
  auto a = makeRowMajorMemRef<int32_t, 2>(data, {2, 3});
  auto b = makeRowMajorMemRef(data, int64_t{2}, 3);
  EXPECT_EQ(a.sizes[0], b.sizes[0]);
  EXPECT_EQ(a.sizes[1], b.sizes[1]);
  EXPECT_EQ(a.strides[0], 3);
  EXPECT_EQ(b.strides[0], 3);
  auto rank1 = makeRowMajorMemRef(data, 6);
  EXPECT_EQ(rank1.sizes[0], 6);
  EXPECT_EQ(rank1.strides[0], 1);
}

// A stand-in for a packed wrapper `void fn(void **args)`: args[i] points to a
// pointer to descriptor i.
void fakePackedStep(void **args) {
  auto *in = *static_cast<MemRefDescriptor<float, 1> **>(args[0]);
  auto *out = *static_cast<MemRefDescriptor<int32_t, 2> **>(args[1]);
  for (int64_t i = 0; i < numElements(*out); ++i)
    out->aligned[out->offset + i] =
        static_cast<int32_t>(in->aligned[in->offset + i % in->sizes[0]]);
}

TEST(MemRef, PackedArgumentsPointToDescriptorPointers) {
  std::vector<float> input = {1, 2, 3};
  std::vector<int32_t> output(6, -1);
  auto in = makeRowMajorMemRef(input.data(), 3);
  auto out = makeRowMajorMemRef(output.data(), 2, 3);
  PackedArguments args;
  args.add(in);
  args.add(out);
  ASSERT_EQ(args.size(), 2u);
  fakePackedStep(args.data());
  EXPECT_EQ(output, (std::vector<int32_t>{1, 2, 3, 1, 2, 3}));
}

} // namespace
