//===- GraphInputs.h - name a graph's inputs by their use --------*- C++ -*-===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
//===----------------------------------------------------------------------===//

#ifndef SPIN_DIALECT_SPIN_TRANSFORMS_GRAPHINPUTS_H
#define SPIN_DIALECT_SPIN_TRANSFORMS_GRAPHINPUTS_H

namespace mlir::func {
class FuncOp;
} // namespace mlir::func

namespace mlir::spin {

/// Marks the unmarked arguments an indexer op reads with their input names
/// (`{spin.input = "q"}`, ...; the k-th indexer's as `q_k`, ...): the names
/// the runtime binds inputs by, on the CPU and the GPU path alike.
void nameGraphInputs(func::FuncOp func);

} // namespace mlir::spin

#endif // SPIN_DIALECT_SPIN_TRANSFORMS_GRAPHINPUTS_H
