//===- Npy.h - minimal .npy reader and writer -------------------*- C++ -*-===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
// Replay tools and tests exchange tensors (indexer traces, reference
// outputs) with numpy as .npy files. This is the subset the runtime needs,
// with no dependency: format versions 1.0, 2.0 and 3.0, C-contiguous,
// little-endian arrays of a few dtypes. bf16 has no numpy dtype; it is
// stored as `<u2` holding the raw bits, by convention.
//
//===----------------------------------------------------------------------===//

#ifndef SPIN_RUNTIME_NPY_H
#define SPIN_RUNTIME_NPY_H

#include "spin/Runtime/Span.h"
#include "spin/Runtime/Status.h"

#include <cstdint>
#include <string>
#include <vector>

namespace spin::runtime {

/// An array as a .npy file stores it: a numpy dtype string, a shape, and the
/// raw little-endian bytes in C (row-major) order.
struct NpyArray {
  /// One of `<f4`, `<f2`, `<i4`, `<i8`, `|u1`, `|i1`, `|b1`, `<u2`.
  std::string dtype;
  /// Dimensions, outermost first; empty for a 0-d (scalar) array.
  std::vector<int64_t> shape;
  /// `numElements() * npyItemSize(dtype)` bytes.
  std::vector<uint8_t> data;

  /// The product of `shape` (1 for a scalar). Assumes a shape that
  /// `readNpy` accepted or that does not overflow int64.
  int64_t numElements() const;
};

/// Bytes per element of a supported dtype string; 0 if it is not supported.
int64_t npyItemSize(const std::string &dtype);

/// Decodes the contents of a .npy file. `name` (usually the path) only
/// appears in error messages. Rejects truncated or trailing data,
/// Fortran-ordered and big-endian arrays, and unsupported dtypes.
StatusOr<NpyArray> parseNpy(Span<uint8_t> bytes, const std::string &name);

/// Encodes `array` as a .npy file (version 1.0, or 2.0 if the header does
/// not fit 1.0's 16-bit length), header padded to 64 bytes as numpy does.
StatusOr<std::vector<uint8_t>> serializeNpy(const NpyArray &array);

/// Reads and decodes the .npy file at `path`.
StatusOr<NpyArray> readNpy(const std::string &path);

/// Encodes `array` and writes it to `path`, replacing the file.
Status writeNpy(const std::string &path, const NpyArray &array);

} // namespace spin::runtime

#endif // SPIN_RUNTIME_NPY_H
