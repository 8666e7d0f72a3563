//===- StateLowering.cpp - EMA update, MTP buffering and replay, reset ----===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
// Writes to the runtime-owned state buffers (docs/Runtime-ABI.md). The ops'
// `!spin.state` results are the same buffers afterwards, so each lowered op
// is replaced by its state operand.
//
//===----------------------------------------------------------------------===//

#include "LoopBuilder.h"

#include <cstdint>
#include <limits>

using namespace mlir;
using namespace mlir::spin;

using arith::CmpIPredicate;

namespace {

/// `it += 1` for the request in `slot`: one more step since the last reset.
void advanceIteration(LoopBuilder &lb, const StateBuffers &state, Value slot) {
  lb.store(lb.add(lb.load(state.it, {slot}), lb.i64(1)), state.it, {slot});
}

/// Folds one observed row into the state: for every selected visible block,
/// the finite scores of its slots (slot level) or their pool (block level).
/// `scoreAt(i)` reads the row's score of slot i (block j for `pooled`). With
/// a `last_observed` buffer, each such block is marked observed at `it + 1`
/// (SPIN_SPEC §7.1), whatever its scores; `it` is read before the caller
/// advances it.
void updateFromRow(LoopBuilder &lb, const StateBuffers &state, Value slot,
                   Value p, Value visible, Value blockSize,
                   function_ref<Value(Value)> selected, Value a, Value c,
                   function_ref<Value(Value)> scoreAt,
                   std::optional<PoolingKind> pooling, bool pooled,
                   Value maxBlocks = Value()) {
  Value rowBlocks = lb.ceilDivU(visible, blockSize);
  if (maxBlocks)
    rowBlocks = lb.minU(rowBlocks, maxBlocks);
  Value observedAt;
  if (state.lastObserved) {
    // it + 1, saturated to the i32 field.
    Value next = lb.add(lb.load(state.it, {slot}), lb.i64(1));
    next = lb.minS(next, lb.i64(std::numeric_limits<int32_t>::max()));
    observedAt = arith::TruncIOp::create(lb.builder(), lb.location(),
                                         lb.builder().getI32Type(), next);
  }
  auto fold = [&](Value index, Value offset, Value z) {
    lb.ifThen(lb.isFinite(z), [&] {
      lb.store(lb.ema(lb.load(state.v, {slot, index}), z, a, c), state.v,
               {slot, index});
      lb.store(lb.ema(lb.load(state.d, {slot, offset}), z, a, c), state.d,
               {slot, offset});
    });
  };
  lb.forEach(lb.index(0), rowBlocks, [&](Value j) {
    lb.ifThen(selected(j), [&] {
      if (observedAt)
        lb.store(observedAt, state.lastObserved, {slot, j});
      if (state.level == StateLevel::block) {
        Value z;
        if (pooled) {
          z = scoreAt(j);
        } else {
          Value begin = lb.mul(j, blockSize);
          Value end = lb.minU(lb.add(begin, blockSize), visible);
          z = lb.pool(*pooling, begin, end, scoreAt, /*finiteOnly=*/true).first;
        }
        fold(j, lb.sub(lb.divU(p, blockSize), j), z);
        return;
      }
      Value begin = lb.mul(j, blockSize);
      Value end = lb.minU(lb.add(begin, blockSize), visible);
      lb.forEach(begin, end,
                 [&](Value i) { fold(i, lb.sub(p, i), scoreAt(i)); });
    });
  });
}

/// Memref views of the operands of spin.ema_update and spin.observe, and
/// their block size as an index.
struct StepViews {
  Value scores, positions, lengths, mask, blockSize;

  template <typename OpTy, typename Adaptor>
  StepViews(LoopBuilder &lb, OpTy op, Adaptor adaptor)
      : scores(lb.toBuffer(adaptor.getScores())),
        positions(lb.toBuffer(adaptor.getPositions())),
        lengths(lb.toBuffer(adaptor.getLengths())),
        mask(lb.toBuffer(adaptor.getMask())),
        blockSize(lb.index(op.getBlockSize())) {}

  /// Folds row `r` of batch row `b` into the state of `slot` (SPIN_SPEC
  /// §3.10; A2 pools it per block with `pooling`), `it` unchanged.
  void foldRow(LoopBuilder &lb, const StateBuffers &state, Value slot, Value b,
               Value r, Value a, Value c,
               std::optional<PoolingKind> pooling) const {
    updateFromRow(
        lb, state, slot, lb.loadIndex(positions, {b, r}),
        lb.loadIndex(lengths, {b, r}), blockSize,
        [&](Value j) { return lb.load(mask, {b, j}); }, a, c,
        [&](Value i) { return lb.load(scores, {b, r, i}); }, pooling,
        /*pooled=*/false);
  }
};

/// spin.ema_update (SPIN_SPEC §3.10), then `it += 1`.
struct EmaUpdateLowering : public StatefulLowering<EmaUpdateOp> {
  using StatefulLowering::StatefulLowering;

  LogicalResult lowerBound(EmaUpdateOp op, OpAdaptor adaptor,
                           const StateBuffers &state,
                           ConversionPatternRewriter &rewriter) const override {
    LoopBuilder lb(rewriter, op.getLoc());
    StepViews step(lb, op, adaptor);
    auto [a, c] = lb.emaWeights(op.getDecay().convertToDouble());
    Value batch = lb.dim(step.lengths, 0), rows = lb.dim(step.lengths, 1);
    lb.forEach(lb.index(0), batch, [&](Value b) {
      Value slot = lb.loadIndex(state.slots, {b});
      lb.forEach(lb.index(0), rows, [&](Value r) {
        step.foldRow(lb, state, slot, b, r, a, c, op.getPooling());
      });
      advanceIteration(lb, state, slot);
    });
    rewriter.replaceOp(op, adaptor.getState());
    return success();
  }
};

/// spin.observe: fold row 0 into the state at once (every commit replays it
/// first: docs/SPIN_SPEC.md §7.2), then buffer the rows (positions, lengths,
/// mask, and the scores or their per-block pool of rows 1..) in the
/// request's pending-observation slot. Row 0's scores are not buffered: no
/// commit reads them.
struct ObserveLowering : public StatefulLowering<ObserveOp> {
  using StatefulLowering::StatefulLowering;

  LogicalResult lowerBound(ObserveOp op, OpAdaptor adaptor,
                           const StateBuffers &state,
                           ConversionPatternRewriter &rewriter) const override {
    LoopBuilder lb(rewriter, op.getLoc());
    StepViews step(lb, op, adaptor);
    auto [a, c] = lb.emaWeights(op.getDecay().convertToDouble());
    Value batch = lb.dim(step.lengths, 0), rows = lb.dim(step.lengths, 1);
    Value maskBlocks =
        lb.minU(lb.dim(step.mask, 1), lb.dim(state.obsMask, 1));
    bool blockLevel = state.level == StateLevel::block;
    lb.forEach(lb.index(0), batch, [&](Value b) {
      Value slot = lb.loadIndex(state.slots, {b});
      step.foldRow(lb, state, slot, b, lb.index(0), a, c, op.getPooling());
      lb.store(lb.toI32(rows), state.obsRows, {slot});
      lb.forEach(lb.index(0), maskBlocks, [&](Value j) {
        Value bit = arith::ExtUIOp::create(rewriter, op.getLoc(),
                                           rewriter.getI8Type(),
                                           lb.load(step.mask, {b, j}));
        lb.store(bit, state.obsMask, {slot, j});
      });
      lb.forEach(lb.index(0), rows, [&](Value r) {
        lb.store(lb.load(step.positions, {b, r}), state.obsPos, {slot, r});
        lb.store(lb.load(step.lengths, {b, r}), state.obsLen, {slot, r});
      });
      // Row r's scores are draft row r - 1 of obs_z.
      lb.forEach(lb.index(1), rows, [&](Value r) {
        Value draft = lb.sub(r, lb.index(1));
        Value visible = lb.loadIndex(step.lengths, {b, r});
        Value rowBlocks =
            lb.minU(lb.ceilDivU(visible, step.blockSize), maskBlocks);
        lb.forEach(lb.index(0), rowBlocks, [&](Value j) {
          lb.ifThen(lb.load(step.mask, {b, j}), [&] {
            Value begin = lb.mul(j, step.blockSize);
            Value end = lb.minU(lb.add(begin, step.blockSize), visible);
            auto scoreAt = [&](Value i) {
              return lb.load(step.scores, {b, r, i});
            };
            if (blockLevel) {
              Value pooled = lb.pool(*op.getPooling(), begin, end, scoreAt,
                                     /*finiteOnly=*/true)
                                 .first;
              lb.store(pooled, state.obsZ, {slot, draft, j});
              return;
            }
            lb.forEach(begin, end, [&](Value i) {
              lb.store(scoreAt(i), state.obsZ, {slot, draft, i});
            });
          });
        });
      });
    });
    rewriter.replaceOp(op, adaptor.getState());
    return success();
  }
};

/// spin.commit: replay the buffered rows 1..accepted (prefix; spin.observe
/// folded row 0) or none (row0), in order, then `it += 1` and drop the
/// buffer. Requests with nothing buffered are untouched.
struct CommitLowering : public StatefulLowering<CommitOp> {
  using StatefulLowering::StatefulLowering;

  LogicalResult lowerBound(CommitOp op, OpAdaptor adaptor,
                           const StateBuffers &state,
                           ConversionPatternRewriter &rewriter) const override {
    LoopBuilder lb(rewriter, op.getLoc());
    Value accepted = lb.toBuffer(adaptor.getAccepted());
    Value blockSize = lb.index(op.getBlockSize());
    auto [a, c] = lb.emaWeights(op.getDecay().convertToDouble());
    bool prefix = op.getMtpUpdate() == MtpUpdate::prefix;
    lb.forEach(lb.index(0), lb.dim(accepted, 0), [&](Value b) {
      Value slot = lb.loadIndex(state.slots, {b});
      Value buffered = lb.loadIndex(state.obsRows, {slot});
      lb.ifThen(lb.cmp(CmpIPredicate::ugt, buffered, lb.index(0)), [&] {
        // The runtime checked 0 <= accepted < buffered; clamp regardless so
        // that a bad value can never index outside the buffer.
        if (prefix) {
          Value wanted = lb.maxS(lb.load(accepted, {b}), lb.i32(0));
          Value last =
              lb.minU(lb.toIndex(wanted), lb.sub(buffered, lb.index(1)));
          lb.forEach(lb.index(1), lb.add(last, lb.index(1)), [&](Value r) {
            Value draft = lb.sub(r, lb.index(1));
            updateFromRow(
                lb, state, slot, lb.loadIndex(state.obsPos, {slot, r}),
                lb.loadIndex(state.obsLen, {slot, r}), blockSize,
                [&](Value j) {
                  Value bit = lb.load(state.obsMask, {slot, j});
                  return lb.cmp(CmpIPredicate::ne, bit, lb.i8(0));
                },
                a, c,
                [&](Value i) { return lb.load(state.obsZ, {slot, draft, i}); },
                std::nullopt, /*pooled=*/true,
                /*maxBlocks=*/lb.dim(state.obsMask, 1));
          });
        }
        advanceIteration(lb, state, slot);
        lb.store(lb.i32(0), state.obsRows, {slot});
      });
    });
    rewriter.replaceOp(op, adaptor.getState());
    return success();
  }
};

/// spin.reset: zero V and D, `it = 0`, drop buffered rows, forget when each
/// block was observed.
struct ResetLowering : public StatefulLowering<ResetOp> {
  using StatefulLowering::StatefulLowering;

  LogicalResult lowerBound(ResetOp op, OpAdaptor adaptor,
                           const StateBuffers &state,
                           ConversionPatternRewriter &rewriter) const override {
    LoopBuilder lb(rewriter, op.getLoc());
    Value requests =
        adaptor.getRequests() ? lb.toBuffer(adaptor.getRequests()) : Value();
    Value capacity = lb.dim(state.v, 1);
    Value zero = lb.f32(0.0);
    lb.forEach(lb.index(0), lb.dim(state.slots, 0), [&](Value b) {
      Value wanted = requests ? lb.load(requests, {b}) : lb.i1(true);
      lb.ifThen(wanted, [&] {
        Value slot = lb.loadIndex(state.slots, {b});
        lb.forEach(lb.index(0), capacity, [&](Value i) {
          lb.store(zero, state.v, {slot, i});
          lb.store(zero, state.d, {slot, i});
        });
        lb.store(lb.i64(0), state.it, {slot});
        if (state.obsRows)
          lb.store(lb.i32(0), state.obsRows, {slot});
        if (state.lastObserved)
          lb.forEach(lb.index(0), lb.dim(state.lastObserved, 1), [&](Value j) {
            lb.store(lb.i32(0), state.lastObserved, {slot, j});
          });
      });
    });
    rewriter.replaceOp(op, adaptor.getState());
    return success();
  }
};

} // namespace

void mlir::spin::populateStateLoweringPatterns(RewritePatternSet &patterns,
                                               const StateBufferMap &buffers) {
  patterns.add<EmaUpdateLowering, ObserveLowering, CommitLowering,
               ResetLowering>(patterns.getContext(), buffers);
}
