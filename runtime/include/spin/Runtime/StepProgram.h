//===- StepProgram.h - run one compiled decode step ---------------*- C++ -*-===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
// The C++ API for one decode step of one compiled indexer graph over a
// batch: checks every input against docs/Runtime-ABI.md, binds the state
// pool's buffers, calls the compiled function and finishes the step's MTP
// bookkeeping. It knows nothing of MLIR: a compiler-side executor hands it a
// packed function pointer and the function's signature.
//
//===----------------------------------------------------------------------===//

#ifndef SPIN_RUNTIME_STEPPROGRAM_H
#define SPIN_RUNTIME_STEPPROGRAM_H

#include "spin/Runtime/Abi.h"
#include "spin/Runtime/StatePool.h"
#include "spin/Runtime/Status.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace spin::runtime {

/// True for the inputs that are not batched: the paged caches `keys` and
/// `scales` (and `keys_k`, `scales_k` of the k-th indexer of a multi-layer
/// graph), and the fused fp8 pages `kv_cache` (`kv_cache_k`) that replace
/// both on the GPU path (docs/GPU-ABI.md, "Fused fp8 key pages").
bool isPagedCacheInput(const std::string &name);

/// A shape as messages print it: "[16, ?, 64]" (-1 for a dynamic size).
std::string shapeString(const std::vector<int64_t> &shape);

/// The product of `shape` (1 for a scalar).
inline int64_t numElementsOf(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t size : shape)
    n *= size;
  return n;
}

/// A contiguous row-major tensor owned by the caller.
struct TensorRef {
  void *data = nullptr;
  std::vector<int64_t> shape;
  DType dtype = DType::f32;

  int64_t numElements() const { return numElementsOf(shape); }
};

/// One argument of a compiled step function, in call order.
struct ArgSpec {
  /// Input: a graph input, by `name` (q, w, keys, scales, ...); Accepted:
  /// filled from StatePool::commit; Reset: the optional reset input, else
  /// zeros; Slots: each request's slot in the pool; State: a state-pool
  /// field (`name`) of layer `layer`; Output: a result, by `name`.
  using Role = ArgRole;
  Role role = Role::Input;
  std::string name;
  int64_t layer = -1;
  DType dtype = DType::f32;
  std::vector<int64_t> shape; ///< -1 for a dynamic size
  /// State args: the layer's SPIN block size in the program (0 if unknown);
  /// the pool's per-block buffers must have room for its blocks.
  int64_t blockSize = 0;
};

/// The compiled code's packed entry point: `args[i]` points to a pointer to
/// the i-th memref descriptor.
using PackedFunction = void (*)(void **);

/// One compiled step function plus what its arguments mean.
class StepProgram {
public:
  StepProgram(PackedFunction function, std::vector<ArgSpec> signature);

  const std::vector<ArgSpec> &signature() const { return signature_; }
  /// Rows per request (R) the program was compiled for, -1 if dynamic.
  int64_t rows() const;
  /// True for MTP programs, which replay committed rows before the step.
  bool commits() const;

  /// Runs one step. `inputs` maps the graph input names (and "positions",
  /// "request_ids", optionally "reset") to tensors; `outputs` maps "topk"
  /// (and "sparsity" when the program reports it) to caller-allocated
  /// tensors. Fails with a message naming the offending value, before
  /// touching any state, on bad input. Steps over disjoint requests may run
  /// concurrently.
  Status run(StatePool &pool, const std::map<std::string, TensorRef> &inputs,
             const std::map<std::string, TensorRef> &outputs) const;

private:
  Status checkInputs(const StatePool &pool,
                     const std::map<std::string, TensorRef> &inputs,
                     const std::map<std::string, TensorRef> &outputs) const;

  PackedFunction function_;
  std::vector<ArgSpec> signature_;
};

} // namespace spin::runtime

#endif // SPIN_RUNTIME_STEPPROGRAM_H
