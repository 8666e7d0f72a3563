//===- SharedKernels.h - one kernel per distinct configuration ---*- C++ -*-===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
//===----------------------------------------------------------------------===//

#ifndef SPIN_CONVERSION_SPINTOGPU_SHAREDKERNELS_H
#define SPIN_CONVERSION_SPINTOGPU_SHAREDKERNELS_H

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "llvm/ADT/StringMap.h"

#include <map>
#include <vector>

#include <string>

namespace mlir::spin {

/// The kernels of the plan's gpu.module, one per distinct kernel. A kernel
/// just built for an op that is identical to one built before, up to its
/// own name and the names of its shared-memory arrays, is erased and its
/// launches go to the first. Layers of the same shapes and options thus
/// share every kernel (their state arrives as parameters, the layer of the
/// exploration hash too), so that a model's PTX and compile time grow with
/// its distinct layer configurations, not with its layers.
class SharedKernels {
public:
  explicit SharedKernels(gpu::GPUModuleOp module) : module(module) {}

  /// The kernel that launches of kernel `name` (just built into the
  /// module, or already seen) use.
  std::string kernelFor(StringRef name);
  /// Erases the shared-memory arrays of the erased kernels (once, at the
  /// end: finding a symbol's uses walks the whole module).
  void eraseUnusedArrays();

private:
  /// `kernel`'s IR, exactly, except for its own and its arrays' names,
  /// and the arrays' declarations.
  std::vector<const void *> fingerprint(gpu::GPUFuncOp kernel);

  gpu::GPUModuleOp module;
  /// Fingerprint -> the kernel kept for it.
  std::map<std::vector<const void *>, std::string> kept;
  /// Every kernel name seen -> the kernel its launches use.
  llvm::StringMap<std::string> launched;
};

} // namespace mlir::spin

#endif // SPIN_CONVERSION_SPINTOGPU_SHAREDKERNELS_H
