//===- Fuse.cpp - fuse SPIN steps into the kernels' shapes ----------------===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
// Merges the graph-level SPIN steps into the two shapes the GPU kernels
// implement:
//
//   spin.predict (-> spin.pool) -> spin.select_blocks   => spin.fused_select
//   spin.sparse_indexer -> spin.topk (+ spin.ema_update | spin.observe)
//                                                        => spin.fused_score
//
// Both rewrites are local patterns run by the greedy driver. A chain is fused
// only when nothing else observes its intermediate values (they are not
// materialised any more) and when moving the state accesses to the fused
// op's position cannot reorder them with another access to the same state.
//
//===----------------------------------------------------------------------===//

#include "spin/Dialect/Spin/IR/SpinOps.h"
#include "spin/Dialect/Spin/Transforms/Passes.h"
#include "spin/Dialect/Spin/Transforms/StateEffects.h"

#include "mlir/Dialect/Async/IR/Async.h"
#include "mlir/IR/Dominance.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"
#include "llvm/Support/Debug.h"

#define DEBUG_TYPE "spin-fuse"

namespace mlir::spin {
#define GEN_PASS_DEF_SPINFUSE
#include "spin/Dialect/Spin/Transforms/Passes.h.inc"
} // namespace mlir::spin

using namespace mlir;
using namespace mlir::spin;

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//


/// The first op strictly between `from` and `to` (same block, `from` before
/// `to`) that may access `stateType` (write it, with `writesOnly`), or null.
static Operation *findStateAccessBetween(Operation *from, Operation *to,
                                         Type stateType, bool writesOnly) {
  for (Operation *op = from->getNextNode(); op && op != to;
       op = op->getNextNode())
    if (mayAccessState(op, stateType, writesOnly))
      return op;
  return nullptr;
}

namespace {

//===----------------------------------------------------------------------===//
// FuseSelect
//===----------------------------------------------------------------------===//

/// predict (-> pool) -> select_blocks => fused_select.
///
/// The fused kernel computes each block's score from the state on the fly,
/// so the [B, R, NS] prediction is never written to memory; that only holds
/// when the prediction (and the pooled scores) feed nothing but this
/// selection. The variant is read off the chain: a spin.pool means A1 (and
/// its pooling kind is kept), a bare prediction means A0 (slot predictions)
/// or A2 (block predictions of a level = block state).
struct FuseSelect : OpRewritePattern<SelectBlocksOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(SelectBlocksOp select,
                                PatternRewriter &rewriter) const override {
    Value scores = select.getScores();
    auto pool = scores.getDefiningOp<PoolOp>();
    auto predict = pool ? pool.getPrediction().getDefiningOp<PredictOp>()
                        : scores.getDefiningOp<PredictOp>();
    if (!predict)
      return rewriter.notifyMatchFailure(
          select, "scores do not come from spin.predict (through at most "
                  "one spin.pool)");

    if (predict.getState() != select.getState())
      return rewriter.notifyMatchFailure(
          select, "spin.predict reads a different state value");
    if (predict.getLengths() != select.getLengths() ||
        (pool && pool.getLengths() != select.getLengths()))
      return rewriter.notifyMatchFailure(
          select, "predict, pool and select use different lengths");
    if (!predict->hasOneUse() || (pool && !pool->hasOneUse()))
      return rewriter.notifyMatchFailure(
          select, "the prediction or the pooled scores have other users");

    Block *block = select->getBlock();
    if (predict->getBlock() != block || (pool && pool->getBlock() != block))
      return rewriter.notifyMatchFailure(select,
                                         "the chain spans several blocks");

    // The fused op holds one block size and one variant for the whole chain.
    Reduction reduction = select.getReduction();
    if (pool && reduction != Reduction::a1)
      return rewriter.notifyMatchFailure(
          select, "spin.pool feeds a selection whose reduction is not a1");
    if (!pool && reduction == Reduction::a1)
      return rewriter.notifyMatchFailure(
          select,
          "reduction a1 ranks pooled scores, but there is no spin.pool");
    if (pool && pool.getBlockSize() != select.getBlockSize())
      return rewriter.notifyMatchFailure(
          select, "spin.pool and spin.select_blocks use different block sizes");
    if (std::optional<uint64_t> predictBlock = predict.getBlockSize();
        predictBlock && *predictBlock != select.getBlockSize())
      return rewriter.notifyMatchFailure(
          select,
          "spin.predict and spin.select_blocks use different block sizes");

    // The state is now read at the selection instead of at the prediction.
    Operation *writer =
        findStateAccessBetween(predict, select, select.getState().getType(),
                               /*writesOnly=*/true);
    if (writer) {
      LLVM_DEBUG(llvm::dbgs()
                 << "state written in between by " << *writer << "\n");
      return rewriter.notifyMatchFailure(
          select, "the state may be written between the prediction and the "
                  "selection");
    }

    // The positions dominate the prediction, which dominates the selection;
    // checked anyway since the fused op takes them at the selection.
    DominanceInfo dominance;
    if (!dominance.properlyDominates(predict.getPositions(), select))
      return rewriter.notifyMatchFailure(
          select, "the positions do not dominate the selection");

    SmallVector<Location> locs = {predict.getLoc()};
    if (pool)
      locs.push_back(pool.getLoc());
    locs.push_back(select.getLoc());
    auto fused = FusedSelectOp::create(
        rewriter, rewriter.getFusedLoc(locs), select.getMask().getType(),
        select.getState(), predict.getPositions(), select.getLengths(),
        select.getTopkAttr(), select.getBlockSizeAttr(),
        select.getSparsityAttr(), select.getExploreAttr(), select.getSeedAttr(),
        select.getReductionAttr(), select.getMtpMaskAttr(),
        pool ? pool.getPoolingAttr() : PoolingKindAttr(),
        select.getExplorePolicyAttr());
    rewriter.replaceOp(select, fused.getMask());
    if (pool)
      rewriter.eraseOp(pool);
    rewriter.eraseOp(predict);
    return success();
  }
};

//===----------------------------------------------------------------------===//
// FuseScore
//===----------------------------------------------------------------------===//

/// Whether `user` reads `scores` over the same selection as `indexer`: the
/// same mask and lengths values and the same block size. Only then does the
/// fused kernel's single pass over the selected keys serve it.
template <typename OpTy>
static bool sameSelection(OpTy user, SparseIndexerOp indexer) {
  return user.getScores() == indexer.getScores() &&
         user->getBlock() == indexer->getBlock() &&
         user.getMask() == indexer.getMask() &&
         user.getLengths() == indexer.getLengths() &&
         user.getBlockSize() == indexer.getBlockSize();
}

/// sparse_indexer -> topk (+ ema_update | observe) => fused_score.
///
/// The kernel scores the selected blocks once and feeds the scores straight
/// into the top-K and into the state update, so the three must agree on the
/// selection. The sparse scores stay a result for any other user (a lowering
/// skips writing them when they have none).
struct FuseScore : OpRewritePattern<SparseIndexerOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(SparseIndexerOp indexer,
                                PatternRewriter &rewriter) const override {
    Value scores = indexer.getScores();
    TopKOp topk;
    SmallVector<Operation *> updates;
    for (Operation *user : scores.getUsers()) {
      if (auto candidate = dyn_cast<TopKOp>(user)) {
        // A maskless top-K has no block size: compare the optional values.
        if (candidate.getScores() != scores ||
            candidate->getBlock() != indexer->getBlock() ||
            candidate.getMask() != indexer.getMask() ||
            candidate.getLengths() != indexer.getLengths() ||
            candidate.getBlockSize() !=
                std::optional<uint64_t>(indexer.getBlockSize()))
          continue;
        if (topk && topk != candidate)
          return rewriter.notifyMatchFailure(
              indexer, "several spin.topk over the same selection use the "
                       "scores");
        topk = candidate;
        continue;
      }
      if (auto ema = dyn_cast<EmaUpdateOp>(user);
          ema && sameSelection(ema, indexer) &&
          !llvm::is_contained(updates, ema))
        updates.push_back(ema);
      if (auto observe = dyn_cast<ObserveOp>(user);
          observe && sameSelection(observe, indexer) &&
          !llvm::is_contained(updates, observe))
        updates.push_back(observe);
    }
    if (!topk)
      return rewriter.notifyMatchFailure(
          indexer, "no spin.topk over the same mask, lengths and block_size "
                   "uses the scores");

    // Several updates of these scores (several states) cannot share the one
    // fused update; they keep reading the fused op's scores.
    Operation *update = updates.size() == 1 ? updates.front() : nullptr;
    LLVM_DEBUG(if (updates.size() > 1) llvm::dbgs()
               << "not fusing " << updates.size() << " updates of " << indexer
               << "\n");

    Value state, positions;
    UpdateKindAttr updateKind;
    FloatAttr decay;
    PoolingKindAttr pooling;
    MLIRContext *ctx = rewriter.getContext();
    if (auto ema = dyn_cast_or_null<EmaUpdateOp>(update)) {
      state = ema.getState();
      positions = ema.getPositions();
      updateKind = UpdateKindAttr::get(ctx, UpdateKind::ema);
      decay = ema.getDecayAttr();
      pooling = ema.getPoolingAttr();
    } else if (auto observe = dyn_cast_or_null<ObserveOp>(update)) {
      state = observe.getState();
      positions = observe.getPositions();
      updateKind = UpdateKindAttr::get(ctx, UpdateKind::observe);
      decay = observe.getDecayAttr();
      pooling = observe.getPoolingAttr();
    }

    // Insert before the indexer when the update's state and positions exist
    // there; otherwise before the first use of the scores, which still
    // precedes every use of the values the fused op replaces.
    DominanceInfo dominance;
    Operation *insertionPoint = indexer;
    auto operandsDominate = [&](Operation *point) {
      return llvm::all_of(ValueRange{state, positions}, [&](Value value) {
        return !value || dominance.properlyDominates(value, point);
      });
    };
    if (!operandsDominate(insertionPoint)) {
      Block *block = indexer->getBlock();
      Operation *firstUse = nullptr;
      for (Operation *user : scores.getUsers()) {
        Operation *ancestor = block->findAncestorOpInBlock(*user);
        if (!ancestor)
          return rewriter.notifyMatchFailure(
              indexer, "the scores are used outside the indexer's block");
        if (!firstUse || ancestor->isBeforeInBlock(firstUse))
          firstUse = ancestor;
      }
      insertionPoint = firstUse;
      if (!operandsDominate(insertionPoint))
        return rewriter.notifyMatchFailure(
            indexer, "the update's state or positions are defined after the "
                     "scores are first used");
    }

    // The update moves up to the insertion point: nothing in between may
    // read or write the same state.
    if (update && insertionPoint != update &&
        findStateAccessBetween(insertionPoint, update, state.getType(),
                               /*writesOnly=*/false))
      return rewriter.notifyMatchFailure(
          indexer, "the state is accessed between the scoring and its update");

    SmallVector<Location> locs = {indexer.getLoc(), topk.getLoc()};
    if (update)
      locs.push_back(update->getLoc());
    rewriter.setInsertionPoint(insertionPoint);
    auto fused = FusedScoreOp::create(
        rewriter, rewriter.getFusedLoc(locs), topk.getIndices().getType(),
        scores.getType(), state ? state.getType() : Type(), indexer.getQ(),
        indexer.getW(), indexer.getKeys(), indexer.getScales(),
        indexer.getBlockTable(), indexer.getLengths(), indexer.getMask(), state,
        positions, topk.getKAttr(), indexer.getBlockSizeAttr(), updateKind,
        decay, pooling);
    rewriter.replaceOp(topk, fused.getIndices());
    if (update)
      rewriter.replaceOp(update, fused.getNewState());
    rewriter.replaceOp(indexer, fused.getScores());
    return success();
  }
};

//===----------------------------------------------------------------------===//
// Pass
//===----------------------------------------------------------------------===//

struct SpinFusePass : mlir::spin::impl::SpinFuseBase<SpinFusePass> {
  using Base::Base;

  void runOnOperation() override {
    MLIRContext *ctx = &getContext();
    RewritePatternSet patterns(ctx);
    patterns.add<FuseSelect, FuseScore>(ctx);
    // Only the fusions: no folding or region simplification of the rest of
    // the graph (the pipelines canonicalize separately).
    GreedyRewriteConfig config;
    config.enableFolding(false)
        .enableConstantCSE(false)
        .setRegionSimplificationLevel(GreedySimplifyRegionLevel::Disabled);
    if (failed(
            applyPatternsGreedily(getOperation(), std::move(patterns), config)))
      signalPassFailure();
  }
};

} // namespace
