//===- UnfuseLowering.cpp - split fused ops for the CPU --------------------===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
// The fused ops exist so that GPU lowerings can emit one kernel each; the
// CPU runs the parts one after the other, so they are split back into the
// ops they fused (which the other patterns then lower).
//
//===----------------------------------------------------------------------===//

#include "LoopBuilder.h"

using namespace mlir;
using namespace mlir::spin;

namespace {

/// spin.fused_select -> spin.predict (-> spin.pool) -> spin.select_blocks.
struct UnfuseSelect : public OpConversionPattern<FusedSelectOp> {
  using OpConversionPattern::OpConversionPattern;

  LogicalResult
  matchAndRewrite(FusedSelectOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    auto maskType = cast<RankedTensorType>(op.getMask().getType());
    auto lengthsType = cast<RankedTensorType>(op.getLengths().getType());
    int64_t batch = lengthsType.getDimSize(0), rows = lengthsType.getDimSize(1);
    int64_t blocks = maskType.getDimSize(1), blockSize = op.getBlockSize();
    int64_t slots =
        ShapedType::isDynamic(blocks) ? ShapedType::kDynamic : blocks * blockSize;
    Type f32 = rewriter.getF32Type();
    bool blockLevel = op.getReduction() == Reduction::a2;
    auto predictionType = RankedTensorType::get(
        {batch, rows, blockLevel ? blocks : slots}, f32);
    Value scores = PredictOp::create(
        rewriter, loc, predictionType, adaptor.getState(), adaptor.getPositions(),
        adaptor.getLengths(),
        blockLevel ? rewriter.getI64IntegerAttr(blockSize) : IntegerAttr());
    if (op.getReduction() == Reduction::a1)
      scores = PoolOp::create(rewriter, loc,
                              RankedTensorType::get({batch, rows, blocks}, f32),
                              scores, adaptor.getLengths(), op.getPoolingAttr(),
                              op.getBlockSizeAttr());
    rewriter.replaceOpWithNewOp<SelectBlocksOp>(
        op, maskType, adaptor.getState(), scores, adaptor.getLengths(),
        op.getTopkAttr(), op.getBlockSizeAttr(), op.getSparsityAttr(),
        op.getExploreAttr(), op.getSeedAttr(), op.getReductionAttr(),
        op.getMtpMaskAttr(), op.getExplorePolicyAttr());
    return success();
  }
};

/// spin.fused_score -> spin.sparse_indexer + spin.topk (+ the state update).
struct UnfuseScore : public OpConversionPattern<FusedScoreOp> {
  using OpConversionPattern::OpConversionPattern;

  LogicalResult
  matchAndRewrite(FusedScoreOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    Value scores = SparseIndexerOp::create(
        rewriter, loc, op.getScores().getType(), adaptor.getQ(), adaptor.getW(),
        adaptor.getKeys(), adaptor.getScales(), adaptor.getBlockTable(),
        adaptor.getLengths(), adaptor.getMask(), op.getBlockSizeAttr());
    Value indices = TopKOp::create(rewriter, loc, op.getIndices().getType(),
                                   scores, adaptor.getLengths(), adaptor.getMask(),
                                   op.getKAttr(), op.getBlockSizeAttr());
    SmallVector<Value> results = {indices, scores};
    if (Value state = adaptor.getState()) {
      Type stateType = state.getType();
      if (*op.getUpdate() == UpdateKind::ema)
        results.push_back(EmaUpdateOp::create(
            rewriter, loc, stateType, state, scores, adaptor.getPositions(),
            adaptor.getLengths(), adaptor.getMask(), op.getBlockSizeAttr(),
            op.getPoolingAttr(), op.getDecayAttr()));
      else
        results.push_back(ObserveOp::create(
            rewriter, loc, stateType, state, scores, adaptor.getPositions(),
            adaptor.getLengths(), adaptor.getMask(), op.getBlockSizeAttr(),
            op.getPoolingAttr(), op.getDecayAttr()));
    }
    rewriter.replaceOp(op, results);
    return success();
  }
};

} // namespace

void mlir::spin::populateUnfusePatterns(RewritePatternSet &patterns) {
  patterns.add<UnfuseSelect, UnfuseScore>(patterns.getContext());
}
