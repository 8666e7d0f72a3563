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

  LogicalResult lowerBound(PredictOp op, OpAdaptor adaptor,
                           const StateBuffers &state,
                           ConversionPatternRewriter &rewriter) const override {
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

/// spin.select_blocks while it is lowered to loops: the op's buffers, one
/// row's scratch (its selection and the best-n key and id lists) and the
/// request's and row's values the phases share. `build` emits the request
/// and row loops; each row phase marks the row's blocks in `rowMask`.
class SelectBlocksBuilder {
public:
  SelectBlocksBuilder(SelectBlocksOp op, const StateBuffers &state,
                      ConversionPatternRewriter &rewriter)
      : op(op), state(state), rewriter(rewriter), loc(op.getLoc()),
        lb(rewriter, loc), policy(op.getExplorePolicy()),
        a0(op.getReduction() == Reduction::a0),
        rowZeroOnly(op.getMtpMask() == MtpMask::row0),
        sparsity(op.getSparsity().convertToDouble()) {}

  /// Emits the selection of every request and returns its mask as a tensor.
  Value build(SelectBlocksOp::Adaptor adaptor);

private:
  void allocateBuffers(SelectBlocksOp::Adaptor adaptor);
  void selectRequest(Value request);
  void selectRow(Value row);
  void warmupRow();
  void a0Row();
  void budgetRow();
  void exploit(Value count);
  void explore(Value count);
  Value offerExploration(Value j, Value count, Value n);
  Value ageOf(Value j);
  void unionIntoRequestMask();
  /// Selects block `j` of the current row.
  void mark(Value j) { lb.store(lb.i1(true), rowMask, {j}); }

  SelectBlocksOp op;
  const StateBuffers &state;
  ConversionPatternRewriter &rewriter;
  Location loc;
  LoopBuilder lb;
  ExplorePolicy policy;
  bool a0, rowZeroOnly;
  double sparsity;
  RankedTensorType resultType;
  // The op's buffers and sizes.
  Value scores, lengths, requestIds, batch, rows, blocks, mask, blockSize;
  // Scratch: one row's selection, and best-n lists of keys and ids.
  Value rowMask, keysF, keysH, ids, ids2;
  double exploreShare = 0.0;
  // The current request's values.
  Value b, slot, iteration, warmup, base;
  // The current row's values.
  Value r, visible, rowBlocks, last;
};

/// Whether score x ranks before y in a best-n list: the larger one.
Value betterScore(LoopBuilder &lb, Value x, Value y) {
  return lb.cmpF(CmpFPredicate::OGT, x, y);
}
/// Whether hash rank x ranks before y: exploration draws the smallest.
Value smallerHash(LoopBuilder &lb, Value x, Value y) {
  return lb.cmp(CmpIPredicate::ult, x, y);
}
/// Whether age x ranks before y: age-based exploration draws the oldest.
Value olderAge(LoopBuilder &lb, Value x, Value y) {
  return lb.cmp(CmpIPredicate::sgt, x, y);
}

Value SelectBlocksBuilder::build(SelectBlocksOp::Adaptor adaptor) {
  allocateBuffers(adaptor);
  lb.forEach(lb.index(0), batch,
             [&](Value request) { selectRequest(request); });
  return lb.toTensor(mask, resultType);
}

/// The operand views, the zeroed request mask and the scratch lists: the
/// a0 top-K list has K entries, the others one per block.
void SelectBlocksBuilder::allocateBuffers(SelectBlocksOp::Adaptor adaptor) {
  scores = lb.toBuffer(adaptor.getScores());
  lengths = lb.toBuffer(adaptor.getLengths());
  requestIds = lb.toBuffer(state.requestIds);
  batch = lb.dim(lengths, 0), rows = lb.dim(lengths, 1);
  resultType = cast<RankedTensorType>(op.getMask().getType());
  blocks =
      ShapedType::isDynamic(resultType.getDimSize(1))
          ? lb.divU(lb.dim(scores, 2), lb.index(a0 ? op.getBlockSize() : 1))
          : lb.index(resultType.getDimSize(1));
  mask = lb.alloc(
      MemRefType::get(resultType.getShape(), resultType.getElementType()),
      {batch, blocks});
  lb.fill(mask, lb.i1(false));

  Type f32 = rewriter.getF32Type(), i64 = rewriter.getI64Type(),
       i32 = rewriter.getI32Type();
  blockSize = lb.index(op.getBlockSize());
  auto vector = [&](Type element, Value size) -> Value {
    return memref::AllocOp::create(
        rewriter, loc, MemRefType::get({ShapedType::kDynamic}, element),
        ValueRange{size});
  };
  rowMask = vector(rewriter.getI1Type(), blocks);
  Value scratchSize = a0 ? lb.index(op.getTopk()) : blocks;
  keysF = vector(f32, scratchSize);
  keysH = vector(i64, blocks);
  ids = vector(i32, scratchSize);
  ids2 = vector(i32, blocks);
  exploreShare = op.getExplore().convertToDouble();
}

/// One request: its state slot, iteration (0 is a warm-up) and the
/// exploration hash of its step, from which each block's rank follows
/// (explorationRankOf); then each of its rows.
void SelectBlocksBuilder::selectRequest(Value request) {
  b = request;
  slot = lb.loadIndex(state.slots, {b});
  iteration = lb.load(state.it, {slot});
  warmup = lb.cmp(CmpIPredicate::eq, iteration, lb.i64(0));
  base = ::spin::runtime::explorationBase<CodeBuilder, Value, uint64_t>(
      lb, lb.u64(::spin::runtime::mix(op.getSeed())), lb.load(requestIds, {b}),
      static_cast<uint64_t>(state.layer), iteration);
  lb.forEach(lb.index(0), rows, [&](Value row) { selectRow(row); });
}

/// One row's selection over its visible blocks, OR-ed into the request's
/// mask. Row-0 sharing uses row 0's selection, except in a warm-up, which
/// selects every block of every row (SPIN_SPEC §4).
void SelectBlocksBuilder::selectRow(Value row) {
  r = row;
  Value used = rowZeroOnly
                   ? lb.orI(warmup, lb.cmp(CmpIPredicate::eq, r, lb.index(0)))
                   : lb.i1(true);
  lb.ifThen(used, [&] {
    visible = lb.loadIndex(lengths, {b, r});
    rowBlocks = lb.minU(lb.ceilDivU(visible, blockSize), blocks);
    lb.forEach(lb.index(0), rowBlocks,
               [&](Value j) { lb.store(lb.i1(false), rowMask, {j}); });
    Value any = lb.cmp(CmpIPredicate::ugt, rowBlocks, lb.index(0));
    lb.ifThen(any, [&] {
      lb.ifThenElse(
          TypeRange{}, warmup,
          [&]() -> SmallVector<Value> {
            warmupRow();
            return {};
          },
          [&]() -> SmallVector<Value> {
            last = lb.sub(rowBlocks, lb.index(1));
            if (a0)
              a0Row();
            else
              budgetRow();
            return {};
          });
    });
    unionIntoRequestMask();
  });
}

/// A warm-up selects every visible block.
void SelectBlocksBuilder::warmupRow() {
  lb.forEach(lb.index(0), rowBlocks, [&](Value j) { mark(j); });
}

/// The a0 reduction: the blocks holding the top-K predicted slots, plus the
/// forced first and last blocks.
void SelectBlocksBuilder::a0Row() {
  Value kValue = lb.index(op.getTopk());
  Value count = lb.forEachWith(
      lb.index(0), lb.minU(visible, lb.mul(blocks, blockSize)), {lb.index(0)},
      [&](Value i, ValueRange it) -> SmallVector<Value> {
        return {lb.offerTopN(
            keysF, ids, kValue, it[0], lb.load(scores, {b, r, i}), lb.toI32(i),
            [&](Value x, Value y) { return betterScore(lb, x, y); })};
      })[0];
  lb.forEach(lb.index(0), count, [&](Value t) {
    mark(lb.divU(lb.loadIndex(ids, {t}), blockSize));
  });
  mark(lb.index(0));
  mark(last);
}

/// The block reductions: the row's budget (§3.4), the forced first and last
/// blocks (§3.5), and the rest of the budget split into exploration (§3.6,
/// never negative) and exploitation.
void SelectBlocksBuilder::budgetRow() {
  Value budget =
      lb.toIndex(::spin::runtime::blockBudgetOf<CodeBuilder, Value, Value>(
          lb, lb.toI64(rowBlocks), op.getBlockSize(), op.getTopk(), sparsity));
  Value forced =
      ::spin::runtime::forcedBlocksOf<CodeBuilder, Value>(lb, rowBlocks);
  mark(lb.index(0));
  mark(last);
  auto [explored, exploited] =
      ::spin::runtime::budgetSplitOf<CodeBuilder, Value, Value>(
          lb, budget, budget, forced, exploreShare);
  exploit(exploited);
  explore(explored);
}

/// Marks the `count` best scores among the non-forced blocks.
void SelectBlocksBuilder::exploit(Value count) {
  Value kept = lb.forEachWith(
      lb.index(1), last, {lb.index(0)},
      [&](Value j, ValueRange it) -> SmallVector<Value> {
        return {lb.offerTopN(
            keysF, ids, count, it[0], lb.load(scores, {b, r, j}), lb.toI32(j),
            [&](Value x, Value y) { return betterScore(lb, x, y); })};
      })[0];
  lb.forEach(lb.index(0), kept, [&](Value t) { mark(lb.loadIndex(ids, {t})); });
}

/// Marks `count` blocks among those not yet selected (§3.7, §7.1), by the
/// op's exploration policy.
void SelectBlocksBuilder::explore(Value count) {
  Value drawn =
      lb.forEachWith(lb.index(0), rowBlocks, {lb.index(0)},
                     [&](Value j, ValueRange it) -> SmallVector<Value> {
                       Value taken = lb.load(rowMask, {j});
                       return lb.ifThenElse(
                           rewriter.getIndexType(), taken,
                           [&]() -> SmallVector<Value> { return {it[0]}; },
                           [&]() -> SmallVector<Value> {
                             return {offerExploration(j, count, it[0])};
                           });
                     })[0];
  lb.forEach(lb.index(0), drawn,
             [&](Value t) { mark(lb.loadIndex(ids2, {t})); });
}

/// Offers unselected block `j` to the exploration list (`n` entries so far,
/// `count` wanted) and returns the new length: the smallest hash ranks, the
/// largest ages, or the largest age-weighted scores (the exploit list in
/// keysF is consumed by now, so it holds these keys).
Value SelectBlocksBuilder::offerExploration(Value j, Value count, Value n) {
  Value id = lb.toI32(j);
  switch (policy) {
  case ExplorePolicy::random: {
    Value hash = ::spin::runtime::explorationRankOf<CodeBuilder, Value>(
        lb, base, lb.toI64(j));
    return lb.offerTopN(keysH, ids2, count, n, hash, id, [&](Value x, Value y) {
      return smallerHash(lb, x, y);
    });
  }
  case ExplorePolicy::block_age:
    return lb.offerTopN(keysH, ids2, count, n, ageOf(j), id,
                        [&](Value x, Value y) { return olderAge(lb, x, y); });
  case ExplorePolicy::staleness_score: {
    // maxnumf: a NaN score counts as 0.
    Value positive = arith::MaxNumFOp::create(
        rewriter, loc, lb.load(scores, {b, r, j}), lb.f32(0.0));
    Value weight =
        arith::SIToFPOp::create(rewriter, loc, rewriter.getF32Type(), ageOf(j));
    return lb.offerTopN(
        keysF, ids2, count, n, lb.mul(weight, positive), id,
        [&](Value x, Value y) { return betterScore(lb, x, y); });
  }
  }
  llvm_unreachable("unknown exploration policy");
}

/// Steps since block `j` of the request was last observed, counting this
/// one.
Value SelectBlocksBuilder::ageOf(Value j) {
  Value lastSeen =
      arith::ExtSIOp::create(rewriter, loc, rewriter.getI64Type(),
                             lb.load(state.lastObserved, {slot, j}));
  return lb.sub(lb.add(iteration, lb.i64(1)), lastSeen);
}

/// ORs the row's selection into the request's mask.
void SelectBlocksBuilder::unionIntoRequestMask() {
  lb.forEach(lb.index(0), rowBlocks, [&](Value j) {
    Value bit = lb.orI(lb.load(mask, {b, j}), lb.load(rowMask, {j}));
    lb.store(bit, mask, {b, j});
  });
}

/// spin.select_blocks (SPIN_SPEC §3.4-3.7, §4, §7.1): per request and row,
/// warm-up or budget, forced blocks, exploitation and exploration (by hash
/// rank or by block age), into a row mask that is OR-ed into the request's
/// mask (union) or taken from row 0 only.
struct SelectBlocksLowering : public StatefulLowering<SelectBlocksOp> {
  using StatefulLowering::StatefulLowering;

  LogicalResult lowerBound(SelectBlocksOp op, OpAdaptor adaptor,
                           const StateBuffers &state,
                           ConversionPatternRewriter &rewriter) const override {
    if (op.getExplorePolicy() != ExplorePolicy::random && !state.lastObserved)
      return rewriter.notifyMatchFailure(
          op, "an age-based exploration policy needs the state's "
              "last_observed buffer");
    SelectBlocksBuilder builder(op, state, rewriter);
    rewriter.replaceOp(op, builder.build(adaptor));
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
