//===- SparsifyIndexer.cpp - dense indexers into SPIN pipelines -----------===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
// Rewrites every spin.dense_indexer + spin.topk into SPIN's predict -> pool
// -> select -> sparse score -> top-K -> update pipeline (SPIN_SPEC §3, §4).
//
// This pass walks the module in program order instead of using the greedy
// pattern driver: layer ids must be stable (the same graph always gives the
// same ids, in the order the layers appear), and the rewrite adds function
// arguments, which is not a local rewrite.
//
//===----------------------------------------------------------------------===//

#include "spin/Dialect/Spin/IR/SpinAbi.h"
#include "spin/Dialect/Spin/IR/SpinOps.h"
#include "spin/Dialect/Spin/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/Support/Debug.h"

#include <cstdio>
#include <string>

#define DEBUG_TYPE "spin-sparsify-indexer"

namespace mlir::spin {
#define GEN_PASS_DEF_SPINSPARSIFYINDEXER
#include "spin/Dialect/Spin/Transforms/Passes.h.inc"
} // namespace mlir::spin

using namespace mlir;
using namespace mlir::spin;

/// Argument attributes that mark the SPIN inputs of a function.
static constexpr StringLiteral kPositionsAttr =
    SpinDialect::PositionsAttrHelper::getNameStr();
static constexpr StringLiteral kRequestIdsAttr =
    SpinDialect::RequestIdsAttrHelper::getNameStr();
static constexpr StringLiteral kAcceptedAttr =
    SpinDialect::AcceptedAttrHelper::getNameStr();
static constexpr StringLiteral kResetAttr =
    SpinDialect::ResetAttrHelper::getNameStr();
/// Discardable attribute that pins an indexer's layer id.
static constexpr StringLiteral kLayerAttr = attr::kLayer;

/// Formats an option value the way the user wrote it (1.5, not 1.5e+00).
static std::string formatOption(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%g", value);
  return buffer;
}

namespace {

/// A dense indexer that will be rewritten, with its top-K and layer id.
struct Candidate {
  DenseIndexerOp indexer;
  TopKOp topk;
  int64_t layer = -1;
};

/// One candidate while it is rewritten: its function, sizes and SPIN
/// inputs, the attributes its new ops share, and its layer's state type.
struct LayerRewrite {
  DenseIndexerOp indexer;
  TopKOp topk;
  int64_t layer = -1;
  func::FuncOp func;
  int64_t batch = 0, rows = 0, slots = 0, blocks = 0;
  bool mtp = false, blockLevel = false;
  Value positions, requestIds, accepted, reset, lengths;
  IntegerAttr blockSizeAttr, topkAttr;
  FloatAttr decayAttr;
  PoolingKindAttr poolingAttr;
  StateType stateType;
};

/// Finds the function argument marked `attrName` with type `type`, or
/// appends one. Fails (with a diagnostic on `user`) when the function has
/// callers, whose call sites would no longer match.
static FailureOr<Value> getOrAddInput(func::FuncOp func, Operation *user,
                                      StringRef attrName, Type type) {
  for (BlockArgument arg : func.getArguments())
    if (func.getArgAttr(arg.getArgNumber(), attrName) && arg.getType() == type)
      return Value(arg);
  auto module = func->getParentOfType<ModuleOp>();
  if (module && !SymbolTable::symbolKnownUseEmpty(func, module)) {
    user->emitError() << "cannot add the SPIN input '" << attrName << "' ("
                      << type << ") to @" << func.getSymName()
                      << ": the function has callers; give it an argument "
                         "marked {"
                      << attrName << "}";
    return failure();
  }
  MLIRContext *ctx = func.getContext();
  auto attrs = DictionaryAttr::get(
      ctx, {NamedAttribute(StringAttr::get(ctx, attrName), UnitAttr::get(ctx))});
  unsigned index = func.getNumArguments();
  if (failed(func.insertArgument(index, type, attrs, func.getLoc()))) {
    user->emitError() << "cannot add an argument to @" << func.getSymName();
    return failure();
  }
  return Value(func.getArgument(index));
}

struct SpinSparsifyIndexerPass
    : public mlir::spin::impl::SpinSparsifyIndexerBase<SpinSparsifyIndexerPass> {
  using Base::Base;

  void runOnOperation() override;

private:
  LogicalResult verifyOptions();
  /// Says why `indexer` cannot be rewritten, or returns its top-K.
  FailureOr<TopKOp> matchIndexer(DenseIndexerOp indexer, std::string &why);
  LogicalResult assignLayers(MutableArrayRef<Candidate> candidates);
  LogicalResult rewrite(const Candidate &candidate);
  LogicalResult checkPageSize(DenseIndexerOp indexer);
  LogicalResult addSpinInputs(LayerRewrite &r);
  Value buildLayerState(LayerRewrite &r);
  Value buildMask(OpBuilder &b, LayerRewrite &r, Value state);
  TopKOp buildSparseTopK(OpBuilder &b, LayerRewrite &r, Value state,
                         Value mask);

  /// Appends the `report-sparsity` results to their functions.
  LogicalResult addSparsityResults();

  /// Per function, the last state op placed at its start.
  llvm::DenseMap<Operation *, Operation *> lastStateOp;
  /// Per function, the realized sparsity of each rewritten layer.
  llvm::MapVector<Operation *, SmallVector<Value>> sparsityResults;
};

} // namespace

LogicalResult SpinSparsifyIndexerPass::verifyOptions() {
  auto inUnitInterval = [&](StringRef name, double value) -> LogicalResult {
    if (value >= 0.0 && value <= 1.0)
      return success();
    return emitError(getOperation().getLoc())
           << "spin-sparsify-indexer: option '" << name
           << "' must be in [0, 1], got " << formatOption(value);
  };
  if (failed(inUnitInterval("sparsity", sparsity.getValue())) ||
      failed(inUnitInterval("ema-decay", emaDecay.getValue())) ||
      failed(inUnitInterval("explore", explore.getValue())))
    return failure();
  if (blockSize <= 0)
    return emitError(getOperation().getLoc())
           << "spin-sparsify-indexer: option 'block-size' must be positive, got "
           << blockSize.getValue();
  if (reduction == Reduction::a0 && explore != 0.0)
    return emitError(getOperation().getLoc())
           << "spin-sparsify-indexer: reduction A0 has no block budget to "
              "explore with; 'explore' must be 0, got "
           << formatOption(explore.getValue());
  if (reduction == Reduction::a0 && explorePolicy != ExplorePolicy::random)
    return emitError(getOperation().getLoc())
           << "spin-sparsify-indexer: reduction A0 has no block budget to "
              "explore with; 'explore-policy' must be random";
  return success();
}

FailureOr<TopKOp> SpinSparsifyIndexerPass::matchIndexer(DenseIndexerOp indexer,
                                                        std::string &why) {
  Value scores = indexer.getScores();
  if (!scores.hasOneUse()) {
    why = "its scores have other users than one spin.topk, which need every "
          "slot scored";
    return failure();
  }
  auto topk = dyn_cast<TopKOp>(*scores.getUsers().begin());
  if (!topk) {
    why = "its scores feed " +
          (*scores.getUsers().begin())->getName().getStringRef().str() +
          ", not spin.topk";
    return failure();
  }
  if (topk.getMask()) {
    why = "its spin.topk already has a block mask";
    return failure();
  }
  if (topk.getLengths() != indexer.getLengths()) {
    why = "its spin.topk takes other lengths than the indexer";
    return failure();
  }
  if (!indexer->getParentOfType<func::FuncOp>()) {
    why = "it is not inside a func.func";
    return failure();
  }
  return topk;
}

LogicalResult
SpinSparsifyIndexerPass::assignLayers(MutableArrayRef<Candidate> candidates) {
  // Ids already in the module (earlier runs, hand-written states) stay taken.
  llvm::DenseSet<int64_t> taken;
  int64_t next = 0;
  auto note = [&](Type type) {
    if (auto state = dyn_cast<StateType>(type)) {
      taken.insert(state.getLayer());
      next = std::max(next, state.getLayer() + 1);
    }
  };
  getOperation().walk([&](Operation *op) {
    for (Type type : op->getResultTypes())
      note(type);
    for (Region &region : op->getRegions())
      for (Block &block : region)
        for (BlockArgument arg : block.getArguments())
          note(arg.getType());
  });
  // Pinned ids first, so that numbering the others never collides with them.
  for (Candidate &candidate : candidates) {
    auto pinned = candidate.indexer->getAttrOfType<IntegerAttr>(kLayerAttr);
    if (!pinned)
      continue;
    int64_t layer = pinned.getInt();
    if (layer < 0)
      return candidate.indexer.emitError()
             << "'" << kLayerAttr << "' must be non-negative, got " << layer;
    if (!taken.insert(layer).second)
      return candidate.indexer.emitError()
             << "layer id " << layer << " is already used by another indexer";
    candidate.layer = layer;
    next = std::max(next, layer + 1);
  }
  for (Candidate &candidate : candidates) {
    if (candidate.layer >= 0)
      continue;
    if (next > kMaxLayerId)
      return candidate.indexer.emitError()
             << "no layer id is left for this indexer: layer " << kMaxLayerId
             << ", the largest, is in use";
    candidate.layer = next++;
    taken.insert(candidate.layer);
  }
  return success();
}

/// Fails, with a diagnostic, unless the indexer's pages have a static size
/// that `block-size` divides: SPIN blocks must tile known pages.
LogicalResult SpinSparsifyIndexerPass::checkPageSize(DenseIndexerOp indexer) {
  auto keysType = indexer.getKeys().getType();
  int64_t pageSize = keysType.getDimSize(1);
  if (ShapedType::isDynamic(pageSize))
    return indexer.emitError("cannot sparsify an indexer whose page size is "
                             "dynamic: SPIN blocks must tile known pages");
  if (pageSize % blockSize != 0)
    return indexer.emitError()
           << "block-size " << blockSize.getValue() << " does not divide the page size "
           << pageSize << " of this indexer's key cache";
  return success();
}

/// The SPIN inputs of the enclosing function (positions, request ids, and
/// the accepted counts for MTP and the reset flags when asked for), found
/// or appended.
LogicalResult SpinSparsifyIndexerPass::addSpinInputs(LayerRewrite &r) {
  MLIRContext *ctx = &getContext();
  Type i64 = IntegerType::get(ctx, 64), i32 = IntegerType::get(ctx, 32),
       i1 = IntegerType::get(ctx, 1);
  auto lengthsType = r.indexer.getLengths().getType();
  FailureOr<Value> positions =
      getOrAddInput(r.func, r.indexer, kPositionsAttr, lengthsType);
  if (failed(positions))
    return failure();
  FailureOr<Value> requestIds = getOrAddInput(
      r.func, r.indexer, kRequestIdsAttr, RankedTensorType::get({r.batch}, i64));
  if (failed(requestIds))
    return failure();
  FailureOr<Value> accepted = Value();
  if (r.mtp &&
      failed(accepted = getOrAddInput(r.func, r.indexer, kAcceptedAttr,
                                      RankedTensorType::get({r.batch}, i32))))
    return failure();
  FailureOr<Value> reset = Value();
  if (resetInput &&
      failed(reset = getOrAddInput(r.func, r.indexer, kResetAttr,
                                   RankedTensorType::get({r.batch}, i1))))
    return failure();
  r.positions = *positions;
  r.requestIds = *requestIds;
  r.accepted = *accepted;
  r.reset = *reset;
  return success();
}

/// The layer's state handle, then its reset and commit, so that prediction
/// sees both. They depend only on function arguments: at the top level they
/// go to the start of the function, in layer order, so that
/// spin-schedule-async can start every layer's prediction there. Nested
/// indexers keep them next to the layer.
Value SpinSparsifyIndexerPass::buildLayerState(LayerRewrite &r) {
  MLIRContext *ctx = &getContext();
  Location loc = r.indexer.getLoc();
  OpBuilder stateBuilder(r.topk);
  bool topLevel = r.indexer->getBlock() == &r.func.front();
  if (topLevel) {
    Operation *&last = lastStateOp[r.func];
    stateBuilder.setInsertionPointToStart(&r.func.front());
    if (last)
      stateBuilder.setInsertionPointAfter(last);
  }
  // The age-based exploration policies read when each block was last scored.
  bool agePolicy = explorePolicy != ExplorePolicy::random;
  r.stateType = StateType::get(
      ctx, r.layer, r.blockLevel ? StateLevel::block : StateLevel::slot,
      agePolicy);
  Value state =
      LayerStateOp::create(stateBuilder, loc, r.stateType, r.requestIds);
  if (r.reset)
    state = ResetOp::create(stateBuilder, loc, r.stateType, state, r.reset);
  if (r.mtp)
    state = CommitOp::create(stateBuilder, loc, r.stateType, state, r.accepted,
                             r.blockSizeAttr, r.decayAttr,
                             MtpUpdateAttr::get(ctx, mtpUpdate));
  if (topLevel)
    lastStateOp[r.func] = state.getDefiningOp();
  return state;
}

/// The block mask of Algorithm 1: predict (line 3) and, for A1, pool; then
/// select with exploration (lines 4-5).
Value SpinSparsifyIndexerPass::buildMask(OpBuilder &b, LayerRewrite &r,
                                         Value state) {
  MLIRContext *ctx = &getContext();
  Location loc = r.indexer.getLoc();
  Type i1 = IntegerType::get(ctx, 1), f32 = Float32Type::get(ctx);
  int64_t predicted = r.blockLevel ? r.blocks : r.slots;
  Value scores = PredictOp::create(
      b, loc, RankedTensorType::get({r.batch, r.rows, predicted}, f32), state,
      r.positions, r.lengths, r.blockLevel ? r.blockSizeAttr : IntegerAttr());
  if (reduction == Reduction::a1)
    scores = PoolOp::create(b, loc,
                            RankedTensorType::get({r.batch, r.rows, r.blocks}, f32),
                            scores, r.lengths, r.poolingAttr, r.blockSizeAttr);
  return SelectBlocksOp::create(
      b, loc, RankedTensorType::get({r.batch, r.blocks}, i1), state, scores,
      r.lengths, r.topkAttr, r.blockSizeAttr, b.getF64FloatAttr(sparsity),
      b.getF64FloatAttr(explore), b.getI64IntegerAttr(static_cast<int64_t>(seed)),
      ReductionAttr::get(ctx, reduction), MtpMaskAttr::get(ctx, mtpMask),
      ExplorePolicyAttr::get(ctx, explorePolicy));
}

/// Scoring of the selected blocks (line 6), their top-K (7), and the state
/// update (lines 8-10) now, or the MTP rows buffered for the next commit;
/// plus the realized sparsity when reported. Returns the new top-K.
TopKOp SpinSparsifyIndexerPass::buildSparseTopK(OpBuilder &b, LayerRewrite &r,
                                                Value state, Value mask) {
  Location loc = r.indexer.getLoc();
  DenseIndexerOp indexer = r.indexer;
  Value sparseScores = SparseIndexerOp::create(
      b, loc, indexer.getScores().getType(), indexer.getQ(), indexer.getW(),
      indexer.getKeys(), indexer.getScales(), indexer.getBlockTable(),
      r.lengths, mask, r.blockSizeAttr);
  auto newTopk =
      TopKOp::create(b, loc, r.topk.getIndices().getType(), sparseScores,
                     r.lengths, mask, r.topkAttr, r.blockSizeAttr);

  PoolingKindAttr updatePooling =
      r.blockLevel ? r.poolingAttr : PoolingKindAttr();
  if (r.mtp)
    ObserveOp::create(b, loc, r.stateType, state, sparseScores, r.positions,
                      r.lengths, mask, r.blockSizeAttr, updatePooling,
                      r.decayAttr);
  else
    EmaUpdateOp::create(b, loc, r.stateType, state, sparseScores, r.positions,
                        r.lengths, mask, r.blockSizeAttr, updatePooling,
                        r.decayAttr);

  if (reportSparsity) {
    auto sparsityType =
        RankedTensorType::get({r.batch, r.rows}, Float32Type::get(&getContext()));
    sparsityResults[r.func].push_back(BlockSparsityOp::create(
        b, loc, sparsityType, mask, r.lengths, r.blockSizeAttr));
  }
  return newTopk;
}

/// Replaces one dense indexer and its top-K with the SPIN layer: state,
/// mask, sparse scoring, top-K and update.
LogicalResult SpinSparsifyIndexerPass::rewrite(const Candidate &candidate) {
  DenseIndexerOp indexer = candidate.indexer;
  TopKOp topk = candidate.topk;
  if (failed(checkPageSize(indexer)))
    return failure();

  LayerRewrite r;
  r.indexer = indexer;
  r.topk = topk;
  r.layer = candidate.layer;
  r.func = indexer->getParentOfType<func::FuncOp>();
  auto lengthsType = indexer.getLengths().getType();
  r.batch = lengthsType.getDimSize(0);
  r.rows = lengthsType.getDimSize(1);
  r.slots = indexer.getScores().getType().getDimSize(2);
  r.blocks = ShapedType::isDynamic(r.slots) ? ShapedType::kDynamic
                                            : r.slots / blockSize;
  r.mtp = r.rows != 1;
  r.blockLevel = reduction == Reduction::a2;
  if (failed(addSpinInputs(r)))
    return failure();

  OpBuilder b(topk);
  r.lengths = indexer.getLengths();
  r.blockSizeAttr = b.getI64IntegerAttr(blockSize);
  r.topkAttr = b.getI64IntegerAttr(topk.getK());
  r.decayAttr = b.getF64FloatAttr(emaDecay);
  r.poolingAttr = PoolingKindAttr::get(&getContext(), pooling);

  Value state = buildLayerState(r);
  Value mask = buildMask(b, r, state);
  TopKOp newTopk = buildSparseTopK(b, r, state, mask);

  LLVM_DEBUG(llvm::dbgs() << "sparsified layer " << candidate.layer << " at "
                          << indexer.getLoc() << "\n");
  topk.getIndices().replaceAllUsesWith(newTopk.getIndices());
  topk.erase();
  indexer.erase();
  return success();
}

LogicalResult SpinSparsifyIndexerPass::addSparsityResults() {
  for (auto &[op, values] : sparsityResults) {
    auto func = cast<func::FuncOp>(op);
    auto module = func->getParentOfType<ModuleOp>();
    if (module && !SymbolTable::symbolKnownUseEmpty(func, module))
      return func.emitError() << "cannot add realized-sparsity results to @"
                              << func.getSymName()
                              << ": the function has callers";
    if (!func.getBody().hasOneBlock())
      return func.emitError("report-sparsity needs a single-block function");
    auto ret = cast<func::ReturnOp>(func.getBody().front().getTerminator());
    MLIRContext *ctx = func.getContext();
    auto marker = DictionaryAttr::get(
        ctx, {NamedAttribute(StringAttr::get(ctx, attr::kSparsity),
                             UnitAttr::get(ctx))});
    for (Value value : values) {
      unsigned index = func.getNumResults();
      if (failed(func.insertResult(index, value.getType(), marker)))
        return func.emitError("cannot add a result");
      ret.getOperandsMutable().append(value);
    }
  }
  return success();
}

void SpinSparsifyIndexerPass::runOnOperation() {
  if (failed(verifyOptions()))
    return signalPassFailure();

  SmallVector<Candidate> candidates;
  getOperation().walk([&](DenseIndexerOp indexer) {
    std::string why;
    FailureOr<TopKOp> topk = matchIndexer(indexer, why);
    if (failed(topk)) {
      indexer.emitRemark() << "not sparsified: " << why;
      return;
    }
    candidates.push_back({indexer, *topk});
  });
  if (failed(assignLayers(candidates)))
    return signalPassFailure();
  for (const Candidate &candidate : candidates)
    if (failed(rewrite(candidate)))
      return signalPassFailure();
  if (failed(addSparsityResults()))
    return signalPassFailure();
}
