//===- GraphInputs.h - name a graph's inputs by their use --------*- C++ -*-===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
//===----------------------------------------------------------------------===//

#ifndef SPIN_DIALECT_SPIN_TRANSFORMS_GRAPHINPUTS_H
#define SPIN_DIALECT_SPIN_TRANSFORMS_GRAPHINPUTS_H

#include <string>
#include <vector>

namespace mlir::func {
class FuncOp;
} // namespace mlir::func

namespace mlir::spin {

/// Marks the unmarked arguments an indexer op reads with their input names
/// (`{spin.input = "q"}`, ...; the k-th indexer's as `q_k`, ...): the names
/// the runtime binds inputs by, on the CPU and the GPU path alike.
void nameGraphInputs(func::FuncOp func);

/// The names the runtime gives a graph's results, in order: top-K indices
/// are "topk", "topk_1", ...; results marked `spin.sparsity` are
/// "sparsity", ...; f32 score tensors (a dense indexer's scores) are
/// "scores", "scores_1", ... (the k-th of a kind gets the suffix `_k`).
std::vector<std::string> graphResultNames(func::FuncOp func);

} // namespace mlir::spin

#endif // SPIN_DIALECT_SPIN_TRANSFORMS_GRAPHINPUTS_H
