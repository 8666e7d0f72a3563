//===- StateEffects.h - which ops touch a layer's SPIN state ----*- C++ -*-===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
// Shared by the passes that move state reads and writes (spin-fuse,
// spin-schedule-async): a move is legal only if it crosses no other access
// to the same layer's state.
//
//===----------------------------------------------------------------------===//

#ifndef SPIN_DIALECT_SPIN_TRANSFORMS_STATEEFFECTS_H
#define SPIN_DIALECT_SPIN_TRANSFORMS_STATEEFFECTS_H

#include "mlir/IR/Operation.h"

namespace mlir::spin {

/// Whether `op` (or an op nested in it) may access the state of type
/// `stateType`; with `writesOnly`, whether it may write it. The state type
/// names the layer, so accesses to other layers' states never conflict.
/// Effects on the state resource that name no value, and ops with unknown
/// effects, are assumed to touch every state. `async.await` only waits: the
/// access it orders is in the region that produced the awaited value.
bool mayAccessState(Operation *op, Type stateType, bool writesOnly);

} // namespace mlir::spin

#endif // SPIN_DIALECT_SPIN_TRANSFORMS_STATEEFFECTS_H
