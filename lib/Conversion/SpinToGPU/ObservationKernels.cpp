//===- ObservationKernels.cpp - MTP buffering and commit replay -----------===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
// The GPU side of SPIN_SPEC §4: an MTP verification step buffers its rows'
// observations in the request's pending-observation fields
// (docs/Runtime-ABI.md) instead of updating V and D, and the request's next
// step replays the accepted rows in order. Both match the CPU path's
// spin.observe / spin.commit lowering (lib/Conversion/SpinToSCF) bit for bit.
//
//===----------------------------------------------------------------------===//

#include "KernelLibrary.h"
#include "Kernels.h"

#include <cmath>

using namespace mlir;
using namespace mlir::spin;
using namespace mlir::spin::gpu_codegen;
using arith::CmpFPredicate;
using arith::CmpIPredicate;

LaunchShape
mlir::spin::gpu_codegen::buildObserveKernel(OpBuilder &b, Location loc,
                                            gpu::GPUModuleOp module,
                                            const ObserveKernelSpec &spec) {
  KernelBuilder kb(b, loc, module);
  Type ptr = kb.ptrT(Global), i8 = kb.i8T(), i32 = kb.i32T(), f32 = kb.f32T();
  SmallVector<Type> params(13, ptr);
  OpBuilder::InsertionGuard guard(b);
  gpu::GPUFuncOp func =
      beginKernel(b, loc, module, spec.name, params, spec.threads);
  unsigned a = 0;
  Value scores = func.getArgument(a++), positions = func.getArgument(a++);
  Value lengths = func.getArgument(a++), slots = func.getArgument(a++);
  Value blocks = func.getArgument(a++), counts = func.getArgument(a++);
  Value mask = func.getArgument(a++), skip = func.getArgument(a++);
  Value obsRows = func.getArgument(a++), obsPos = func.getArgument(a++);
  Value obsLen = func.getArgument(a++), obsMask = func.getArgument(a++);
  Value obsZ = func.getArgument(a++);

  const int64_t rows = spec.rows, bs = spec.blockSize, mb = spec.maxBlocks;
  Value request = kb.blockIdY();
  Value tid = kb.threadIdX();
  Value slot64 = kb.extS64(kb.loadAt(i32, slots, request, true));
  Value requestRows = kb.mul(request, kb.i32(rows));

  // Buffered only when scoring met no bad page and every row is valid (the
  // select kernel reported the bad ones and selected nothing).
  Value ok =
      kb.cmp(CmpIPredicate::eq, kb.loadAt(i32, skip, request, true), kb.i32(0));
  ok = kb.forLoopWith(
      kb.i32(0), kb.i32(rows), kb.i32(1), {ok},
      [&](Value r, ValueRange in) -> SmallVector<Value> {
        Value rowId = kb.add(requestRows, r);
        RowChecks checks = checkRow(kb, kb.loadAt(i32, positions, rowId, true),
                                    kb.loadAt(i32, lengths, rowId, true),
                                    spec.capacity, mb * bs);
        return {kb.andI(in[0], kb.andI(checks.lengthOk, checks.positionOk))};
      })[0];

  Value firstCta = kb.cmp(CmpIPredicate::eq, kb.blockIdX(), kb.i32(0));
  kb.ifThen(kb.andI(firstCta, kb.cmp(CmpIPredicate::eq, tid, kb.i32(0))), [&] {
    kb.storeAt(kb.select(ok, kb.i32(rows), kb.i32(0)), obsRows, slot64);
  });
  kb.ifThen(ok, [&] {
    // Positions, lengths and the union mask: by the first CTA.
    kb.ifThen(firstCta, [&] {
      forEachThreadStrided(kb, kb.i32(rows), spec.threads, [&](Value r) {
        Value rowId = kb.add(requestRows, r);
        Value at = kb.add(kb.mul(slot64, kb.i64(rows)), kb.extS64(r));
        kb.storeAt(kb.loadAt(i32, positions, rowId, true), obsPos, at);
        kb.storeAt(kb.loadAt(i32, lengths, rowId, true), obsLen, at);
      });
      forEachThreadStrided(
          kb, kb.i32(std::min(mb, spec.stateBlocks)), spec.threads,
          [&](Value j) {
            Value bit =
                kb.loadAt(i8, mask, kb.add(kb.mul(request, kb.i32(mb)), j));
            kb.storeAt(
                bit, obsMask,
                kb.add(kb.mul(slot64, kb.i64(spec.stateBlocks)), kb.extS64(j)));
          });
    });
    // Every row's scores of the scored slots it sees (i < N_r), by slot.
    Value total = kb.mul(kb.loadAt(i32, counts, request, true), kb.i32(bs));
    Value start = kb.add(kb.mul(kb.blockIdX(), kb.i32(spec.threads)), tid);
    Value stride = kb.i32(spec.threads * spec.ctasPerRequest);
    kb.forLoop(kb.i32(0), kb.i32(rows), kb.i32(1), [&](Value r) {
      Value rowId = kb.add(requestRows, r);
      Value n = kb.loadAt(i32, lengths, rowId, true);
      Value zRow = kb.mul(kb.add(kb.mul(slot64, kb.i64(rows)), kb.extS64(r)),
                          kb.i64(spec.capacity));
      Value scoreRow = kb.mul(kb.extS64(rowId), kb.i64(mb * bs));
      kb.forLoop(start, total, stride, [&](Value e) {
        Value bsV = kb.i32(bs);
        Value block = kb.loadAt(
            i32, blocks, kb.add(kb.mul(request, kb.i32(mb)), kb.divU(e, bsV)),
            true);
        Value i = kb.add(kb.mul(block, bsV), kb.remU(e, bsV));
        kb.ifThen(kb.cmp(CmpIPredicate::slt, i, n), [&] {
          Value z =
              kb.loadAt(f32, scores, kb.add(scoreRow, kb.extS64(e)), true);
          kb.storeAt(z, obsZ, kb.add(zRow, kb.extS64(i)));
        });
      });
    });
  });

  LaunchShape shape;
  shape.grid = {spec.ctasPerRequest, spec.batch, 1};
  shape.blockThreads = spec.threads;
  return shape;
}

/// The replay (SPIN_SPEC §4): rows 0..last of the buffer, each with the
/// §3.10 rule `x = a*x + c*z` (a = f32(decay), c = f32(1 - decay), two
/// roundings, no FMA) for every scored slot with a finite score. Thread `x`
/// owns V[x] and D[x]; row r touches V[x] if it scored slot x and D[x] if it
/// scored slot p_r - x. A first pass over the rows reads only mask bits, so
/// that entries no replayed row touches are neither read nor written; a
/// touched entry is carried through the rows in a register.
CommitLaunches
mlir::spin::gpu_codegen::buildCommitKernels(OpBuilder &b, Location loc,
                                            gpu::GPUModuleOp module,
                                            const CommitKernelSpec &spec) {
  KernelBuilder kb(b, loc, module);
  Type ptr = kb.ptrT(Global), i8 = kb.i8T(), i32 = kb.i32T(), i64 = kb.i64T(),
       f32 = kb.f32T();
  const int64_t rows = spec.rows, bs = spec.blockSize;
  CommitLaunches shapes;
  {
    SmallVector<Type> params(9, ptr);
    OpBuilder::InsertionGuard guard(b);
    gpu::GPUFuncOp func =
        beginKernel(b, loc, module, spec.name, params, spec.threads);
    unsigned a = 0;
    Value accepted = func.getArgument(a++), slots = func.getArgument(a++);
    Value vState = func.getArgument(a++), dState = func.getArgument(a++);
    Value obsRows = func.getArgument(a++), obsPos = func.getArgument(a++);
    Value obsLen = func.getArgument(a++), obsMask = func.getArgument(a++);
    Value obsZ = func.getArgument(a++);

    Value request = kb.blockIdY();
    Value slot = kb.loadAt(i32, slots, request, true);
    Value slot64 = kb.extS64(slot);
    Value buffered = kb.minS(kb.loadAt(i32, obsRows, slot), kb.i32(rows));
    kb.ifThen(kb.cmp(CmpIPredicate::sgt, buffered, kb.i32(0)), [&] {
      // The runtime checked 0 <= accepted < buffered; clamp regardless so
      // that a bad value never reads outside the buffer.
      Value last = kb.i32(0);
      if (!spec.rowZeroOnly)
        last =
            kb.minS(kb.maxS(kb.loadAt(i32, accepted, request, true), kb.i32(0)),
                    kb.sub(buffered, kb.i32(1)));
      Value count = kb.add(last, kb.i32(1));
      Value rowBase = kb.mul(slot64, kb.i64(rows));
      // A replayed row (position, length, valid); rows were checked when
      // buffered, but a bad one could address outside V and D: skip it.
      auto rowOf = [&](Value r) {
        Value at = kb.add(rowBase, kb.extS64(r));
        Value p = kb.loadAt(i32, obsPos, at);
        Value n = kb.loadAt(i32, obsLen, at);
        RowChecks checks = checkRow(kb, p, n, spec.capacity, spec.capacity);
        return std::make_tuple(p, n,
                               kb.andI(checks.lengthOk, checks.positionOk));
      };
      // Entries 0 .. max(p_r) of V and D are the only ones touched.
      Value reach = kb.forLoopWith(
          kb.i32(0), count, kb.i32(1), {kb.i32(0)},
          [&](Value r, ValueRange in) -> SmallVector<Value> {
            auto [p, n, valid] = rowOf(r);
            (void)n;
            return {kb.maxS(in[0],
                            kb.select(valid, kb.add(p, kb.i32(1)), kb.i32(0)))};
          })[0];
      Value decay = kb.f32(static_cast<float>(spec.decay));
      Value keep = kb.f32(static_cast<float>(1.0 - spec.decay));
      Value stateBase = kb.mul(slot64, kb.i64(spec.capacity));
      Value maskBase = kb.mul(slot64, kb.i64(spec.stateBlocks));
      Value bsV = kb.i32(bs);
      // Whether row r (position p, length n, valid) scored slot i.
      auto scored = [&](Value i, Value n, Value valid) {
        Value inRow =
            kb.andI(valid, kb.andI(kb.cmp(CmpIPredicate::sge, i, kb.i32(0)),
                                   kb.cmp(CmpIPredicate::slt, i, n)));
        return kb.ifThenElse(
            {kb.i1T()}, inRow,
            [&]() -> SmallVector<Value> {
              Value bit = kb.loadAt(
                  i8, obsMask, kb.add(maskBase, kb.extS64(kb.divU(i, bsV))));
              return {kb.cmp(CmpIPredicate::ne, bit, kb.constant(i8, 0))};
            },
            [&]() -> SmallVector<Value> { return {kb.i1(false)}; })[0];
      };
      Value start =
          kb.add(kb.mul(kb.blockIdX(), kb.i32(spec.threads)), kb.threadIdX());
      kb.forLoop(
          start, reach, kb.i32(spec.threads * spec.ctasPerRequest),
          [&](Value x) {
            // V[x] is touched by rows that scored slot x, D[x] by rows that
            // scored slot p_r - x; the others keep their value unread.
            SmallVector<Value> touched = kb.forLoopWith(
                kb.i32(0), count, kb.i32(1), {kb.i1(false), kb.i1(false)},
                [&](Value r, ValueRange in) -> SmallVector<Value> {
                  auto [p, n, valid] = rowOf(r);
                  return {kb.orI(in[0], scored(x, n, valid)),
                          kb.orI(in[1], scored(kb.sub(p, x), n, valid))};
                });
            for (bool diagonal : {false, true}) {
              kb.ifThen(touched[diagonal], [&] {
                Value at = kb.gep(diagonal ? dState : vState, f32,
                                  kb.add(stateBase, kb.extS64(x)));
                Value folded = kb.forLoopWith(
                    kb.i32(0), count, kb.i32(1), {kb.load(f32, at, 4)},
                    [&](Value r, ValueRange in) -> SmallVector<Value> {
                      auto [p, n, valid] = rowOf(r);
                      Value i = diagonal ? kb.sub(p, x) : x;
                      Value zRow = kb.mul(kb.add(rowBase, kb.extS64(r)),
                                          kb.i64(spec.capacity));
                      return kb.ifThenElse(
                          {f32}, scored(i, n, valid),
                          [&]() -> SmallVector<Value> {
                            Value z = kb.loadAt(f32, obsZ,
                                                kb.add(zRow, kb.extS64(i)));
                            Value finite =
                                kb.cmpF(CmpFPredicate::OLT, kb.absF(z),
                                        kb.f32(INFINITY));
                            Value ema =
                                kb.add(kb.mul(decay, in[0]), kb.mul(keep, z));
                            return {kb.select(finite, ema, in[0])};
                          },
                          [&]() -> SmallVector<Value> { return {in[0]}; });
                    })[0];
                kb.store(folded, at, 4);
              });
            }
          });
    });
    shapes.replay.grid = {spec.ctasPerRequest, spec.batch, 1};
    shapes.replay.blockThreads = spec.threads;
  }
  {
    // After every replay CTA has read obs_rows: one more iteration, and
    // the buffer is dropped.
    const int64_t threads = 128;
    SmallVector<Type> params(3, ptr);
    OpBuilder::InsertionGuard guard(b);
    gpu::GPUFuncOp func =
        beginKernel(b, loc, module, spec.name + "_finish", params, threads);
    Value slots = func.getArgument(0), itState = func.getArgument(1);
    Value obsRows = func.getArgument(2);
    Value request =
        kb.add(kb.mul(kb.blockIdX(), kb.i32(threads)), kb.threadIdX());
    kb.ifThen(kb.cmp(CmpIPredicate::slt, request, kb.i32(spec.batch)), [&] {
      Value slot = kb.loadAt(i32, slots, request, true);
      kb.ifThen(
          kb.cmp(CmpIPredicate::sgt, kb.loadAt(i32, obsRows, slot), kb.i32(0)),
          [&] {
            Value at = kb.gep(itState, i64, slot);
            kb.store(kb.add(kb.load(i64, at, 8), kb.i64(1)), at, 8);
            kb.storeAt(kb.i32(0), obsRows, slot);
          });
    });
    shapes.finish.grid = {(spec.batch + threads - 1) / threads, 1, 1};
    shapes.finish.blockThreads = threads;
  }
  return shapes;
}
