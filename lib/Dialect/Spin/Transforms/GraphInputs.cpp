//===- GraphInputs.cpp - name a graph's inputs by their use ---------------===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
//===----------------------------------------------------------------------===//

#include "spin/Dialect/Spin/Transforms/GraphInputs.h"

#include "spin/Dialect/Spin/IR/SpinAbi.h"
#include "spin/Dialect/Spin/IR/SpinOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <map>

using namespace mlir;
using namespace mlir::spin;

/// Marks the function arguments an indexer op reads with their input names
/// ({spin.input = "q"}, ...), unless they already have a role.
/// The k-th indexer of a graph (k > 0) names its own inputs `q_k`, `w_k`,
/// ...; inputs shared with an earlier indexer keep the name given first.
template <typename IndexerOp>
static void markIndexerInputs(func::FuncOp func, IndexerOp op, unsigned k) {
  std::pair<Value, const char *> inputs[] = {
      {op.getQ(), "q"},         {op.getW(), "w"},
      {op.getKeys(), "keys"},   {op.getScales(), "scales"},
      {op.getBlockTable(), "block_table"}, {op.getLengths(), "lengths"}};
  for (auto [value, name] : inputs) {
    auto arg = dyn_cast_or_null<BlockArgument>(value);
    if (!arg || arg.getOwner() != &func.getBody().front())
      continue;
    unsigned i = arg.getArgNumber();
    std::string unique = k ? std::string(name) + "_" + std::to_string(k) : name;
    if (!func.getArgAttrDict(i) || func.getArgAttrDict(i).empty())
      func.setArgAttr(i, SpinDialect::InputAttrHelper::getNameStr(),
                      StringAttr::get(func.getContext(), unique));
  }
}

void mlir::spin::nameGraphInputs(func::FuncOp func) {
  // Graphs written by hand name their inputs by use: an unmarked argument
  // that an indexer op reads as q, w, keys, ... becomes that input.
  unsigned indexers = 0;
  func.walk([&](Operation *op) {
    if (auto dense = dyn_cast<DenseIndexerOp>(op))
      markIndexerInputs(func, dense, indexers++);
    else if (auto sparse = dyn_cast<SparseIndexerOp>(op))
      markIndexerInputs(func, sparse, indexers++);
    else if (auto fused = dyn_cast<FusedScoreOp>(op))
      markIndexerInputs(func, fused, indexers++);
  });
}

/// The kind of result `i` of `func`: by the op that produces it where that
/// op says (a top-K, a block sparsity, an indexer's scores), else by the
/// `{spin.sparsity}` mark and the element type (i32 indices, f32 scores).
static abi::OutputKind resultKind(func::FuncOp func, unsigned i) {
  if (func.getResultAttr(i, attr::kSparsity))
    return abi::OutputKind::Sparsity;
  OpResult def;
  if (!func.getBody().empty())
    if (auto ret = dyn_cast<func::ReturnOp>(
            func.getBody().front().getTerminator()))
      def = dyn_cast<OpResult>(ret.getOperand(i));
  if (def) {
    Operation *op = def.getOwner();
    // A fused score step returns its top-K indices, then its scores.
    if (isa<TopKOp>(op) || (isa<FusedScoreOp>(op) && def.getResultNumber() == 0))
      return abi::OutputKind::TopK;
    if (isa<BlockSparsityOp>(op))
      return abi::OutputKind::Sparsity;
    if (isa<DenseIndexerOp, SparseIndexerOp, FusedScoreOp>(op))
      return abi::OutputKind::Scores;
  }
  auto type = dyn_cast<ShapedType>(func.getResultTypes()[i]);
  return type && type.getElementType().isF32() ? abi::OutputKind::Scores
                                               : abi::OutputKind::TopK;
}

std::vector<std::string> mlir::spin::graphResultNames(func::FuncOp func) {
  std::vector<std::string> names;
  std::map<std::string, unsigned> seen;
  for (unsigned i = 0; i < func.getNumResults(); ++i) {
    std::string base = abi::outputName(resultKind(func, i));
    unsigned k = seen[base]++;
    names.push_back(k ? base + "_" + std::to_string(k) : base);
  }
  return names;
}
