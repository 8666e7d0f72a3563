//===- NpyFuzzer.cpp - fuzz the .npy reader -------------------------------===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
// Trace files are user input: any bytes must give an array or a Status.
// An accepted array must be self-consistent (its data holds exactly its
// elements) and must survive serializeNpy: written and read back, it is the
// same array.
//
//===----------------------------------------------------------------------===//

#include "spin/Runtime/Npy.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

using namespace spin::runtime;

namespace {

[[noreturn]] void fail(const char *what, const std::string &detail) {
  std::fprintf(stderr, "npy fuzzer: %s: %s\n", what, detail.c_str());
  std::abort();
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  StatusOr<NpyArray> array = parseNpy(Span<uint8_t>(data, size), "fuzz.npy");
  if (!array.ok()) {
    if (array.message().empty())
      fail("an error without a message", "");
    return 0;
  }
  int64_t itemSize = npyItemSize(array->dtype);
  if (itemSize == 0)
    fail("accepted an unsupported dtype", array->dtype);
  if (static_cast<uint64_t>(array->numElements()) * itemSize != array->data.size())
    fail("data size does not match the shape", std::to_string(array->data.size()));

  StatusOr<std::vector<uint8_t>> bytes = serializeNpy(*array);
  if (!bytes.ok())
    fail("serializeNpy rejects an accepted array", bytes.message());
  StatusOr<NpyArray> again =
      parseNpy(Span<uint8_t>(bytes->data(), bytes->size()), "again.npy");
  if (!again.ok())
    fail("serializeNpy output is rejected", again.message());
  if (again->dtype != array->dtype || again->shape != array->shape ||
      again->data != array->data)
    fail("serializeNpy does not round-trip", array->dtype);
  return 0;
}
