//===- SelectLowering.cpp - prediction, pooling, block selection ----------===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
//===----------------------------------------------------------------------===//

#include "LoopBuilder.h"

#include "spin/Runtime/Semantics.h"

using namespace mlir;
using namespace mlir::spin;

using arith::CmpFPredicate;
using arith::CmpIPredicate;

namespace {

/// spin.predict: `max(V[i], D[p - i])` per visible slot, or per visible
/// block `max(Vb[j], Db[p / bs - j])` for a block-level state.
struct PredictLowering : public StatefulLowering<PredictOp> {
  using StatefulLowering::StatefulLowering;

  LogicalResult
  matchAndRewrite(PredictOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    const StateBuffers &state = stateOf(op);
    LoopBuilder lb(rewriter, op.getLoc());
    Value positions = lb.toBuffer(adaptor.getPositions());
    Value lengths = lb.toBuffer(adaptor.getLengths());
    Value batch = lb.dim(lengths, 0), rows = lb.dim(lengths, 1);
    auto resultType = cast<RankedTensorType>(op.getPrediction().getType());
    Value width = ShapedType::isDynamic(resultType.getDimSize(2))
                      ? Value()
                      : lb.index(resultType.getDimSize(2));
    if (!width)
      return rewriter.notifyMatchFailure(
          op, "the CPU lowering needs a static prediction width");
    Value out = lb.alloc(
        MemRefType::get(resultType.getShape(), resultType.getElementType()),
        {batch, rows, width});
    bool blockLevel = state.level == StateLevel::block;
    Value blockSize = blockLevel ? lb.index(*op.getBlockSize()) : Value();
    Value ninf = lb.negInf();

    lb.forEach(lb.index(0), batch, [&](Value b) {
      Value slot = lb.loadIndex(state.slots, {b});
      lb.forEach(lb.index(0), rows, [&](Value r) {
        Value p = lb.loadIndex(positions, {b, r});
        Value visible = lb.loadIndex(lengths, {b, r});
        if (blockLevel) {
          visible = lb.ceilDivU(visible, blockSize);
          p = lb.divU(p, blockSize);
        }
        lb.forEach(lb.index(0), width, [&](Value i) {
          Value inside = lb.cmp(CmpIPredicate::ult, i, visible);
          Value z = lb.ifThenElse(
              rewriter.getF32Type(), inside,
              [&]() -> SmallVector<Value> {
                Value vertical = lb.load(state.v, {slot, i});
                Value diagonal = lb.load(state.d, {slot, lb.sub(p, i)});
                return {arith::MaximumFOp::create(rewriter, op.getLoc(),
                                                  vertical, diagonal)};
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

/// spin.pool: one pooled score per block over its visible slots.
struct PoolLowering : public OpConversionPattern<PoolOp> {
  using OpConversionPattern::OpConversionPattern;

  LogicalResult
  matchAndRewrite(PoolOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    LoopBuilder lb(rewriter, op.getLoc());
    Value prediction = lb.toBuffer(adaptor.getPrediction());
    Value lengths = lb.toBuffer(adaptor.getLengths());
    Value blockSize = lb.index(op.getBlockSize());
    Value batch = lb.dim(lengths, 0), rows = lb.dim(lengths, 1);
    Value slots = lb.dim(prediction, 2);
    Value blocks = lb.divU(slots, blockSize);
    auto resultType = cast<RankedTensorType>(op.getBlockScores().getType());
    Value out = lb.alloc(
        MemRefType::get(resultType.getShape(), resultType.getElementType()),
        {batch, rows, blocks});
    lb.forEach(lb.index(0), batch, [&](Value b) {
      lb.forEach(lb.index(0), rows, [&](Value r) {
        Value visible = lb.minU(lb.loadIndex(lengths, {b, r}), slots);
        lb.forEach(lb.index(0), blocks, [&](Value j) {
          Value begin = lb.mul(j, blockSize);
          Value end = lb.minU(lb.add(begin, blockSize), visible);
          end = arith::MaxUIOp::create(rewriter, op.getLoc(), end, begin);
          Value pooled = lb.pool(
                               op.getPooling(), begin, end,
                               [&](Value i) {
                                 return lb.load(prediction, {b, r, i});
                               },
                               /*finiteOnly=*/false)
                             .first;
          lb.store(pooled, out, {b, r, j});
        });
      });
    });
    rewriter.replaceOp(op, lb.toTensor(out, resultType));
    return success();
  }
};

/// spin.select_blocks (SPIN_SPEC §3.4-3.7, §4, §7.1): per request and row,
/// warm-up or budget, forced blocks, exploitation and exploration (by hash
/// rank or by block age), into a row mask that is OR-ed into the request's
/// mask (union) or taken from row 0 only.
struct SelectBlocksLowering : public StatefulLowering<SelectBlocksOp> {
  using StatefulLowering::StatefulLowering;

  LogicalResult
  matchAndRewrite(SelectBlocksOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    const StateBuffers &state = stateOf(op);
    ExplorePolicy policy = op.getExplorePolicy();
    if (policy != ExplorePolicy::random && !state.lastObserved)
      return rewriter.notifyMatchFailure(
          op, "an age-based exploration policy needs the state's "
              "last_observed buffer");
    Location loc = op.getLoc();
    LoopBuilder lb(rewriter, loc);
    Value scores = lb.toBuffer(adaptor.getScores());
    Value lengths = lb.toBuffer(adaptor.getLengths());
    Value requestIds = lb.toBuffer(state.requestIds);
    Value batch = lb.dim(lengths, 0), rows = lb.dim(lengths, 1);
    auto resultType = cast<RankedTensorType>(op.getMask().getType());
    Value blocks = ShapedType::isDynamic(resultType.getDimSize(1))
                       ? lb.divU(lb.dim(scores, 2),
                                  lb.index(op.getReduction() == Reduction::a0
                                               ? op.getBlockSize()
                                               : 1))
                       : lb.index(resultType.getDimSize(1));
    Value mask = lb.alloc(
        MemRefType::get(resultType.getShape(), resultType.getElementType()),
        {batch, blocks});
    lb.fill(mask, lb.i1(false));

    Type f32 = rewriter.getF32Type(), i64 = rewriter.getI64Type(),
         i32 = rewriter.getI32Type(), indexType = rewriter.getIndexType();
    Value blockSize = lb.index(op.getBlockSize());
    bool a0 = op.getReduction() == Reduction::a0;
    // Scratch: one row's selection, and a best-n list of keys and ids.
    Value rowMask = memref::AllocOp::create(
        rewriter, loc,
        MemRefType::get({ShapedType::kDynamic}, rewriter.getI1Type()),
        ValueRange{blocks});
    Value scratchSize = a0 ? lb.index(op.getTopk()) : blocks;
    Value keysF = memref::AllocOp::create(
        rewriter, loc, MemRefType::get({ShapedType::kDynamic}, f32),
        ValueRange{scratchSize});
    Value keysH = memref::AllocOp::create(
        rewriter, loc, MemRefType::get({ShapedType::kDynamic}, i64),
        ValueRange{blocks});
    Value ids = memref::AllocOp::create(
        rewriter, loc, MemRefType::get({ShapedType::kDynamic}, i32),
        ValueRange{scratchSize});
    Value ids2 = memref::AllocOp::create(
        rewriter, loc, MemRefType::get({ShapedType::kDynamic}, i32),
        ValueRange{blocks});

    bool rowZeroOnly = op.getMtpMask() == MtpMask::row0;
    double sparsity = op.getSparsity().convertToDouble();
    Value explore = lb.f64(op.getExplore().convertToDouble());
    auto better = [&](Value x, Value y) {
      return lb.cmpF(CmpFPredicate::OGT, x, y);
    };
    auto smallerHash = [&](Value x, Value y) {
      return lb.cmp(CmpIPredicate::ult, x, y);
    };
    auto olderAge = [&](Value x, Value y) {
      return lb.cmp(CmpIPredicate::sgt, x, y);
    };

    lb.forEach(lb.index(0), batch, [&](Value b) {
      Value slot = lb.loadIndex(state.slots, {b});
      Value iteration = lb.load(state.it, {slot});
      Value warmup = lb.cmp(CmpIPredicate::eq, iteration, lb.i64(0));
      // The exploration hash of the request's step; each block's rank
      // follows from it (explorationRankOf).
      Value base = ::spin::runtime::explorationBase<CodeBuilder, Value>(
          lb, lb.u64(::spin::runtime::mix(op.getSeed())),
          lb.load(requestIds, {b}), static_cast<uint64_t>(state.layer),
          iteration);

      lb.forEach(lb.index(0), rows, [&](Value r) {
        // Row-0 sharing uses row 0's selection, except in a warm-up, which
        // selects every block of every row (SPIN_SPEC §4).
        Value used =
            rowZeroOnly
                ? lb.orI(warmup, lb.cmp(CmpIPredicate::eq, r, lb.index(0)))
                : lb.i1(true);
        lb.ifThen(used, [&] {
          Value visible = lb.loadIndex(lengths, {b, r});
          Value rowBlocks = lb.minU(lb.ceilDivU(visible, blockSize), blocks);
          lb.forEach(lb.index(0), rowBlocks,
                     [&](Value j) { lb.store(lb.i1(false), rowMask, {j}); });
          auto mark = [&](Value j) { lb.store(lb.i1(true), rowMask, {j}); };
          Value any = lb.cmp(CmpIPredicate::ugt, rowBlocks, lb.index(0));
          lb.ifThen(any, [&] {
            lb.ifThenElse(
                TypeRange{}, warmup,
                [&]() -> SmallVector<Value> {
                  lb.forEach(lb.index(0), rowBlocks, mark);
                  return {};
                },
                [&]() -> SmallVector<Value> {
                  Value last = lb.sub(rowBlocks, lb.index(1));
                  if (a0) {
                    // Blocks holding the top-K predicted slots, plus forced.
                    Value kValue = lb.index(op.getTopk());
                    Value count = lb.forEachWith(
                        lb.index(0),
                        lb.minU(visible, lb.mul(blocks, blockSize)),
                        {lb.index(0)},
                        [&](Value i, ValueRange it) -> SmallVector<Value> {
                          return {lb.offerTopN(keysF, ids, kValue, it[0],
                                               lb.load(scores, {b, r, i}),
                                               lb.toI32(i), better)};
                        })[0];
                    lb.forEach(lb.index(0), count, [&](Value t) {
                      mark(lb.divU(lb.loadIndex(ids, {t}), blockSize));
                    });
                    mark(lb.index(0));
                    mark(last);
                    return {};
                  }
                  // Budget (§3.4), forced blocks (§3.5).
                  Value budget = lb.toIndex(
                      ::spin::runtime::blockBudgetOf<CodeBuilder, Value, Value>(
                          lb, lb.toI64(rowBlocks), op.getBlockSize(),
                          op.getTopk(), sparsity));
                  Value forced = lb.select(
                      lb.cmp(CmpIPredicate::eq, rowBlocks, lb.index(1)),
                      lb.index(1), lb.index(2));
                  mark(lb.index(0));
                  mark(last);
                  // Exploration budget (§3.6), never negative.
                  Value wanted = lb.toIndex(arith::FPToSIOp::create(
                      rewriter, loc, i64,
                      math::FloorOp::create(
                          rewriter, loc,
                          lb.mul(explore, lb.indexToF64(budget)))));
                  Value room =
                      lb.select(lb.cmp(CmpIPredicate::ugt, budget, forced),
                                lb.sub(budget, forced), lb.index(0));
                  Value explored = lb.minU(wanted, room);
                  Value exploit = lb.sub(room, explored);
                  // Exploit: the best scores among non-forced blocks.
                  Value kept = lb.forEachWith(
                      lb.index(1), last, {lb.index(0)},
                      [&](Value j, ValueRange it) -> SmallVector<Value> {
                        return {lb.offerTopN(keysF, ids, exploit, it[0],
                                             lb.load(scores, {b, r, j}),
                                             lb.toI32(j), better)};
                      })[0];
                  lb.forEach(lb.index(0), kept,
                             [&](Value t) { mark(lb.loadIndex(ids, {t})); });
                  // Explore among the rest (§3.7, §7.1): the smallest hashes,
                  // the largest ages, or the largest age-weighted scores
                  // (the exploit list in keysF is consumed by now).
                  auto age = [&](Value j) {
                    Value last = arith::ExtSIOp::create(
                        rewriter, loc, i64,
                        lb.load(state.lastObserved, {slot, j}));
                    return lb.sub(lb.add(iteration, lb.i64(1)), last);
                  };
                  Value drawn = lb.forEachWith(
                      lb.index(0), rowBlocks, {lb.index(0)},
                      [&](Value j, ValueRange it) -> SmallVector<Value> {
                        Value taken = lb.load(rowMask, {j});
                        return lb.ifThenElse(
                            indexType, taken,
                            [&]() -> SmallVector<Value> { return {it[0]}; },
                            [&]() -> SmallVector<Value> {
                              Value id = lb.toI32(j);
                              switch (policy) {
                              case ExplorePolicy::random: {
                                Value hash = ::spin::runtime::
                                    explorationRankOf<CodeBuilder, Value>(
                                        lb, base, lb.toI64(j));
                                return {lb.offerTopN(keysH, ids2, explored,
                                                     it[0], hash, id,
                                                     smallerHash)};
                              }
                              case ExplorePolicy::block_age:
                                return {lb.offerTopN(keysH, ids2, explored,
                                                     it[0], age(j), id,
                                                     olderAge)};
                              case ExplorePolicy::staleness_score: {
                                // maxnumf: a NaN score counts as 0.
                                Value positive = arith::MaxNumFOp::create(
                                    rewriter, loc, lb.load(scores, {b, r, j}),
                                    lb.f32(0.0));
                                Value weight = arith::SIToFPOp::create(
                                    rewriter, loc, f32, age(j));
                                return {lb.offerTopN(keysF, ids2, explored,
                                                     it[0],
                                                     lb.mul(weight, positive),
                                                     id, better)};
                              }
                              }
                              llvm_unreachable("unknown exploration policy");
                            });
                      })[0];
                  lb.forEach(lb.index(0), drawn,
                             [&](Value t) { mark(lb.loadIndex(ids2, {t})); });
                  return {};
                });
          });
          // Union into the request's mask.
          lb.forEach(lb.index(0), rowBlocks, [&](Value j) {
            Value bit = lb.orI(lb.load(mask, {b, j}), lb.load(rowMask, {j}));
            lb.store(bit, mask, {b, j});
          });
        });
      });
    });
    rewriter.replaceOp(op, lb.toTensor(mask, resultType));
    return success();
  }
};

} // namespace

void mlir::spin::populateSelectLoweringPatterns(RewritePatternSet &patterns,
                                                const StateBufferMap &buffers) {
  patterns.add<PredictLowering, SelectBlocksLowering>(patterns.getContext(),
                                                      buffers);
  patterns.add<PoolLowering>(patterns.getContext());
}
