//===- SpinToSCF.h - spin ops to loops on memrefs ----------------*- C++ -*-===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
//===----------------------------------------------------------------------===//

#ifndef SPIN_CONVERSION_SPINTOSCF_SPINTOSCF_H
#define SPIN_CONVERSION_SPINTOSCF_SPINTOSCF_H

#include "spin/Dialect/Spin/IR/SpinAttrs.h"

#include "mlir/IR/Value.h"
#include "llvm/ADT/DenseMap.h"

namespace mlir {
class RewritePatternSet;

namespace spin {

/// The memrefs behind one layer's `!spin.state` inside one function
/// (docs/Runtime-ABI.md). The `obs*` fields are null for layers that never
/// buffer MTP rows, `lastObserved` for states without `last_observed`.
struct StateBuffers {
  Value slots;      ///< [B] i32: each request's slot in the state pool.
  Value requestIds; ///< [B] i64 tensor: the ids bound by spin.layer_state.
  Value v, d;       ///< [numSlots, C] f32
  Value it;         ///< [numSlots] i64
  Value obsRows;    ///< [numSlots] i32
  Value obsPos;     ///< [numSlots, Rmax] i32
  Value obsLen;     ///< [numSlots, Rmax] i32
  Value obsMask;    ///< [numSlots, NBcap] i8
  Value obsZ;       ///< [numSlots, Rmax - 1, C] f32: rows 1.. (SPIN_SPEC §7.2)
  Value lastObserved; ///< [numSlots, NBcap] i32 (0 = never observed)
  int64_t layer = 0;
  StateLevel level = StateLevel::slot;
};

/// State buffers by (function, layer id).
using StateBufferMap = llvm::DenseMap<std::pair<Operation *, int64_t>, StateBuffers>;

/// Patterns lowering every spin op except spin.layer_state to loops on
/// memrefs; fused ops are first split into their parts. `buffers` must hold
/// the state of every (function, layer) the lowered ops use.
void populateSpinToSCFConversionPatterns(RewritePatternSet &patterns,
                                         const StateBufferMap &buffers);

} // namespace spin
} // namespace mlir

#endif // SPIN_CONVERSION_SPINTOSCF_SPINTOSCF_H
