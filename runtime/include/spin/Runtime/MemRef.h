//===- MemRef.h - C-ABI memref descriptors, without MLIR --------*- C++ -*-===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
// The compiled step function takes every argument as a pointer to a strided
// memref descriptor laid out as MLIR's C interface lays it out
// (docs/Runtime-ABI.md). These are bit-compatible re-declarations, so that
// the runtime can call compiled code without including
// mlir/ExecutionEngine/CRunnerUtils.h.
//
//===----------------------------------------------------------------------===//

#ifndef SPIN_RUNTIME_MEMREF_H
#define SPIN_RUNTIME_MEMREF_H

#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <type_traits>
#include <vector>

namespace spin::runtime {

/// A ranked strided memref as the C interface of MLIR-compiled code sees it:
/// element `(i0, ..., iN)` lives at
/// `aligned[offset + i0 * strides[0] + ... + iN * strides[N]]`.
/// Rank 0 (no size/stride arrays) is not needed by the step ABI and has a
/// different layout, so it is not supported.
template <typename T, int Rank> struct MemRefDescriptor {
  static_assert(Rank >= 1, "rank-0 memrefs have a different layout");
  T *allocated;
  T *aligned;
  int64_t offset;
  int64_t sizes[Rank];
  int64_t strides[Rank];
};

static_assert(std::is_standard_layout_v<MemRefDescriptor<float, 2>> &&
                  std::is_trivially_copyable_v<MemRefDescriptor<float, 2>>,
              "descriptors are passed to compiled code by address");
static_assert(sizeof(MemRefDescriptor<float, 2>) ==
                  2 * sizeof(void *) + 5 * sizeof(int64_t),
              "descriptor layout must match MLIR's C interface");

/// A descriptor of a contiguous row-major (identity-strided) array at
/// `data` with the given `sizes`, offset 0 — the layout of every runtime
/// buffer of the step ABI. Ranks 1 to 4 are the ones the ABI uses.
template <typename T, int Rank>
MemRefDescriptor<T, Rank>
makeRowMajorMemRef(T *data, const std::array<int64_t, Rank> &sizes) {
  static_assert(Rank >= 1 && Rank <= 4, "the step ABI uses ranks 1 to 4");
  MemRefDescriptor<T, Rank> desc{};
  desc.allocated = data;
  desc.aligned = data;
  desc.offset = 0;
  int64_t stride = 1;
  for (int i = Rank - 1; i >= 0; --i) {
    desc.sizes[i] = sizes[i];
    desc.strides[i] = stride;
    stride *= sizes[i];
  }
  return desc;
}

/// Variadic form: `makeRowMajorMemRef(ptr, batch, rows, k)` gives a rank-3
/// descriptor.
template <typename T, typename... Sizes,
          typename = std::enable_if_t<(std::is_integral_v<Sizes> && ...)>>
MemRefDescriptor<T, static_cast<int>(sizeof...(Sizes))>
makeRowMajorMemRef(T *data, Sizes... sizes) {
  constexpr int rank = static_cast<int>(sizeof...(Sizes));
  return makeRowMajorMemRef<T, rank>(
      data, std::array<int64_t, rank>{static_cast<int64_t>(sizes)...});
}

/// The number of elements a descriptor spans (product of its sizes).
template <typename T, int Rank>
int64_t numElements(const MemRefDescriptor<T, Rank> &desc) {
  int64_t n = 1;
  for (int i = 0; i < Rank; ++i)
    n *= desc.sizes[i];
  return n;
}

/// The argument array of a packed wrapper `void fn(void **args)`: `args[i]`
/// points to a pointer to descriptor `i`. The class owns the intermediate
/// pointers (in a deque, so their addresses stay valid as arguments are
/// added); the descriptors themselves must outlive the call.
class PackedArguments {
public:
  PackedArguments() = default;
  // `args` points into `descriptorPointers`: a copy would point into the
  // original.
  PackedArguments(const PackedArguments &) = delete;
  PackedArguments &operator=(const PackedArguments &) = delete;

  /// Appends `desc` as the next argument.
  template <typename T, int Rank> void add(MemRefDescriptor<T, Rank> &desc) {
    descriptorPointers.push_back(static_cast<void *>(&desc));
    args.push_back(static_cast<void *>(&descriptorPointers.back()));
  }

  /// The `void **` to pass to the packed wrapper.
  void **data() { return args.data(); }
  size_t size() const { return args.size(); }

private:
  std::deque<void *> descriptorPointers;
  std::vector<void *> args;
};

} // namespace spin::runtime

#endif // SPIN_RUNTIME_MEMREF_H
