//===- IndexerLowering.cpp - indexer scoring and top-K to loops -----------===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
//===----------------------------------------------------------------------===//

#include "LoopBuilder.h"

using namespace mlir;
using namespace mlir::spin;

using arith::CmpFPredicate;
using arith::CmpIPredicate;

namespace {

/// spin.dense_indexer and spin.sparse_indexer: for every row and visible
/// (and selected) slot, gather the key through the block table, decode it
/// once to f32, and sum `w[h] * ReLU(dot(q[h], k) * scale)` over the heads.
template <typename IndexerOp>
struct IndexerLowering : public OpConversionPattern<IndexerOp> {
  using OpConversionPattern<IndexerOp>::OpConversionPattern;
  using OpAdaptor = typename IndexerOp::Adaptor;

  LogicalResult
  matchAndRewrite(IndexerOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    LoopBuilder lb(rewriter, op.getLoc());
    Value q = lb.toBuffer(adaptor.getQ()), w = lb.toBuffer(adaptor.getW());
    Value keys = lb.toBuffer(adaptor.getKeys());
    Value scales = adaptor.getScales() ? lb.toBuffer(adaptor.getScales()) : Value();
    Value table = lb.toBuffer(adaptor.getBlockTable());
    Value lengths = lb.toBuffer(adaptor.getLengths());
    Value mask;
    Value blockSize;
    if constexpr (std::is_same_v<IndexerOp, SparseIndexerOp>) {
      mask = lb.toBuffer(adaptor.getMask());
      blockSize = lb.index(op.getBlockSize());
    }

    Value batch = lb.dim(lengths, 0), rows = lb.dim(lengths, 1);
    Value heads = lb.dim(q, 2), headDim = lb.dim(q, 3);
    Value pageSize = lb.dim(keys, 1);
    Value slots = lb.mul(lb.dim(table, 1), pageSize);
    auto resultType = cast<RankedTensorType>(op.getScores().getType());
    auto bufferType =
        MemRefType::get(resultType.getShape(), resultType.getElementType());
    Value out = lb.alloc(bufferType, {batch, rows, slots});
    // One decoded key at a time, shared by every head.
    Value key = memref::AllocaOp::create(
        rewriter, op.getLoc(),
        MemRefType::get({ShapedType::kDynamic}, rewriter.getF32Type()),
        ValueRange{headDim});

    // The row's queries as f32, decoded once per row instead of once per
    // slot (an fp8 decode is a dozen integer operations).
    Value queries = memref::AllocaOp::create(
        rewriter, op.getLoc(),
        MemRefType::get({ShapedType::kDynamic, ShapedType::kDynamic},
                        rewriter.getF32Type()),
        ValueRange{heads, headDim});

    Value zero = lb.f32(0.0), ninf = lb.negInf();
    lb.forEach(lb.index(0), batch, [&](Value b) {
      lb.forEach(lb.index(0), rows, [&](Value r) {
        lb.forEach(lb.index(0), heads, [&](Value h) {
          lb.forEach(lb.index(0), headDim, [&](Value d) {
            lb.store(lb.toF32(lb.load(q, {b, r, h, d})), queries, {h, d});
          });
        });
        Value visible = lb.loadIndex(lengths, {b, r});
        lb.forEach(lb.index(0), slots, [&](Value i) {
          Value scored = lb.cmp(CmpIPredicate::ult, i, visible);
          if (mask)
            scored = lb.andI(scored, lb.load(mask, {b, lb.divU(i, blockSize)}));
          Value z = lb.ifThenElse(
              rewriter.getF32Type(), scored,
              [&]() -> SmallVector<Value> {
                Value page = lb.loadIndex(table, {b, lb.divU(i, pageSize)});
                Value slot = lb.remU(i, pageSize);
                lb.forEach(lb.index(0), headDim, [&](Value d) {
                  lb.store(lb.toF32(lb.load(keys, {page, slot, d})), key, {d});
                });
                Value scale = scales ? lb.load(scales, {page, slot}) : Value();
                Value sum = lb.forEachWith(
                    lb.index(0), heads, {zero},
                    [&](Value h, ValueRange acc) -> SmallVector<Value> {
                      Value dot = lb.forEachWith(
                          lb.index(0), headDim, {zero},
                          [&](Value d, ValueRange part) -> SmallVector<Value> {
                            Value x = lb.load(queries, {h, d});
                            return {lb.add(part[0], lb.mul(x, lb.load(key, {d})))};
                          })[0];
                      if (scale)
                        dot = lb.mul(dot, scale);
                      Value relu = arith::MaximumFOp::create(
                          rewriter, op.getLoc(), dot, zero);
                      return {lb.add(acc[0], lb.mul(lb.load(w, {b, r, h}), relu))};
                    })[0];
                return {sum};
              },
              [&]() -> SmallVector<Value> { return {ninf}; })[0];
          lb.store(z, out, {b, r, i});
        });
      });
    });
    rewriter.replaceOp(op, lb.toTensor(out, resultType));
    return success();
  }
};

/// spin.topk: one pass over each row keeping the best k in a sorted scratch
/// list. Slots arrive in increasing order, so equal scores keep the lower
/// slot first; NaN scores are never eligible.
struct TopKLowering : public OpConversionPattern<TopKOp> {
  using OpConversionPattern::OpConversionPattern;

  LogicalResult
  matchAndRewrite(TopKOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    LoopBuilder lb(rewriter, loc);
    Value scores = lb.toBuffer(adaptor.getScores());
    Value lengths = lb.toBuffer(adaptor.getLengths());
    Value mask = adaptor.getMask() ? lb.toBuffer(adaptor.getMask()) : Value();
    Value blockSize = mask ? lb.index(*op.getBlockSize()) : Value();
    int64_t k = op.getK();

    Value batch = lb.dim(lengths, 0), rows = lb.dim(lengths, 1);
    Value slots = lb.dim(scores, 2);
    auto resultType = cast<RankedTensorType>(op.getIndices().getType());
    Value out = lb.alloc(
        MemRefType::get(resultType.getShape(), resultType.getElementType()),
        {batch, rows, lb.index(k)});
    Value keys = memref::AllocOp::create(
        rewriter, loc, MemRefType::get({k}, rewriter.getF32Type()));
    Value ids = memref::AllocOp::create(
        rewriter, loc, MemRefType::get({k}, rewriter.getI32Type()));
    Value kValue = lb.index(k);

    lb.forEach(lb.index(0), batch, [&](Value b) {
      lb.forEach(lb.index(0), rows, [&](Value r) {
        Value visible = lb.loadIndex(lengths, {b, r});
        Value end = lb.minU(visible, slots);
        Value count = lb.forEachWith(
            lb.index(0), end, {lb.index(0)},
            [&](Value i, ValueRange it) -> SmallVector<Value> {
              Value z = lb.load(scores, {b, r, i});
              Value eligible = lb.cmpF(CmpFPredicate::ORD, z, z);
              if (mask)
                eligible =
                    lb.andI(eligible, lb.load(mask, {b, lb.divU(i, blockSize)}));
              return lb.ifThenElse(
                  rewriter.getIndexType(), eligible,
                  [&]() -> SmallVector<Value> {
                    return {lb.offerTopN(keys, ids, kValue, it[0], z,
                                         lb.toI32(i), [&](Value x, Value y) {
                                           return lb.cmpF(CmpFPredicate::OGT, x, y);
                                         })};
                  },
                  [&]() -> SmallVector<Value> { return {it[0]}; });
            })[0];
        lb.forEach(lb.index(0), kValue, [&](Value t) {
          Value kept = lb.cmp(CmpIPredicate::ult, t, count);
          Value id = lb.ifThenElse(
              rewriter.getI32Type(), kept,
              [&]() -> SmallVector<Value> { return {lb.load(ids, {t})}; },
              [&]() -> SmallVector<Value> { return {lb.i32(-1)}; })[0];
          lb.store(id, out, {b, r, t});
        });
      });
    });
    rewriter.replaceOp(op, lb.toTensor(out, resultType));
    return success();
  }
};

/// spin.block_sparsity: 1 - selected / visible blocks, per row.
struct BlockSparsityLowering : public OpConversionPattern<BlockSparsityOp> {
  using OpConversionPattern::OpConversionPattern;

  LogicalResult
  matchAndRewrite(BlockSparsityOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    LoopBuilder lb(rewriter, op.getLoc());
    Value mask = lb.toBuffer(adaptor.getMask());
    Value lengths = lb.toBuffer(adaptor.getLengths());
    Value blockSize = lb.index(op.getBlockSize());
    Value batch = lb.dim(lengths, 0), rows = lb.dim(lengths, 1);
    Value maskBlocks = lb.dim(mask, 1);
    auto resultType = cast<RankedTensorType>(op.getSparsity().getType());
    Value out = lb.alloc(
        MemRefType::get(resultType.getShape(), resultType.getElementType()),
        {batch, rows});
    lb.forEach(lb.index(0), batch, [&](Value b) {
      lb.forEach(lb.index(0), rows, [&](Value r) {
        Value blocks = lb.minU(
            lb.ceilDivU(lb.loadIndex(lengths, {b, r}), blockSize), maskBlocks);
        Value selected = lb.forEachWith(
            lb.index(0), blocks, {lb.index(0)},
            [&](Value j, ValueRange it) -> SmallVector<Value> {
              Value bit = lb.load(mask, {b, j});
              return {lb.select(bit, lb.add(it[0], lb.index(1)), it[0])};
            })[0];
        Value any = lb.cmp(CmpIPredicate::ugt, blocks, lb.index(0));
        Value fraction = arith::DivFOp::create(
            rewriter, op.getLoc(), lb.toF64(selected), lb.toF64(blocks));
        Value sparsity = arith::TruncFOp::create(
            rewriter, op.getLoc(), rewriter.getF32Type(),
            lb.select(any, lb.sub(lb.f64(1.0), fraction), lb.f64(0.0)));
        lb.store(sparsity, out, {b, r});
      });
    });
    rewriter.replaceOp(op, lb.toTensor(out, resultType));
    return success();
  }
};

} // namespace

void mlir::spin::populateIndexerLoweringPatterns(RewritePatternSet &patterns) {
  patterns.add<IndexerLowering<DenseIndexerOp>, IndexerLowering<SparseIndexerOp>,
               TopKLowering, BlockSparsityLowering>(patterns.getContext());
}
