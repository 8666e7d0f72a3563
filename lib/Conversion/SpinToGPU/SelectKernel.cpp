//===- SelectKernel.cpp - SPIN's prediction and block selection -----------===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
// One CTA per request. Per row: predicted block scores
// S[j] = pool_{i in block j} max(V[i], D[p - i]) into shared memory (a warp
// per block), then SPIN_SPEC §3.4-3.7: warm-up selects everything; else the
// budget, the forced first and last blocks, the exploit set (radix select
// of the largest S, ties to the lower block) and the exploration set (the
// smallest splitmix64 ranks among the rest). Rows are OR-ed into the
// request's mask, which is also written as an ascending list of blocks.
//
//===----------------------------------------------------------------------===//

#include "KernelLibrary.h"
#include "Kernels.h"

#include <algorithm>
#include <cmath>

using namespace mlir;
using namespace mlir::spin;
using namespace mlir::spin::gpu_codegen;
using arith::CmpFPredicate;
using arith::CmpIPredicate;

namespace {
uint64_t splitmix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

/// Max pooling of the predictions max(V[i], D[p - i]) of slots
/// [firstSlot, endSlot) into the order-preserving u32 keys
/// `keys[i / bs - firstBlock]` (atomic max; the keys start at -inf): each
/// warp streams slots with four loads in flight, the lanes of one block
/// reduce by shuffles and one lane per block folds the result in. Each lane
/// has `unroll` slots' loads in flight per iteration.
void maxPoolSlots(KernelBuilder &kb, Value vState, Value dState,
                  Value stateBase, Value p, Value firstSlot, Value endSlot,
                  Value firstBlock, Value keys, int64_t bs, int64_t warps,
                  Value warp, Value lane, int64_t unroll = 4) {
  OpBuilder &b = kb.builder();
  Location loc = kb.location();
  Type i32 = kb.i32T(), f32 = kb.f32T();
  Value last = kb.sub(endSlot, kb.i32(1));
  const int64_t segment = std::min<int64_t>(bs, 32);
  kb.forLoop(
      kb.add(firstSlot, kb.mul(warp, kb.i32(32 * unroll))), endSlot,
      kb.i32(warps * 32 * unroll), [&](Value base) {
        SmallVector<Value> slotsIn, values;
        for (int64_t u = 0; u < unroll; ++u) {
          Value i = kb.add(base, kb.add(lane, kb.i32(u * 32)));
          Value in = kb.cmp(CmpIPredicate::slt, i, endSlot);
          Value at = kb.minS(i, last);
          Value vi = kb.loadAt(f32, vState, kb.add(stateBase, kb.extS64(at)));
          Value di = kb.loadAt(f32, dState,
                               kb.add(stateBase, kb.extS64(kb.sub(p, at))));
          slotsIn.push_back(in);
          values.push_back(kb.select(in, kb.maxF(vi, di), kb.f32(-INFINITY)));
        }
        for (int64_t u = 0; u < unroll; ++u) {
          Value z = values[u];
          for (int64_t off = segment / 2; off >= 1; off /= 2)
            z = kb.maxF(z, kb.shflXor(z, off));
          Value i = kb.add(base, kb.add(lane, kb.i32(u * 32)));
          Value leader = kb.cmp(CmpIPredicate::eq,
                                kb.remU(lane, kb.i32(segment)), kb.i32(0));
          kb.ifThen(kb.andI(leader, slotsIn[u]), [&] {
            Value j = kb.sub(kb.divU(i, kb.i32(bs)), firstBlock);
            LLVM::AtomicRMWOp::create(b, loc, LLVM::AtomicBinOp::umax,
                                      kb.gep(keys, i32, j), kb.orderedKey(z),
                                      LLVM::AtomicOrdering::monotonic);
          });
        }
      });
}
} // namespace

bool mlir::spin::gpu_codegen::canPredictByMax(const SelectKernelSpec &spec) {
  return spec.pooling == PoolingKind::max &&
         (spec.blockSize % 32 == 0 || 32 % spec.blockSize == 0);
}

/// Whether the record's fields {p, N, it, 1} (`field(f)`, f = 0..3) are
/// those of the step at position `p` with `n` visible slots and iteration
/// `iteration`.
static Value recordMatches(KernelBuilder &kb,
                           function_ref<Value(int64_t)> field, Value p, Value n,
                           Value iteration) {
  Value want[] = {p, n, kb.trunc32(iteration), kb.i32(1)};
  Value same = kb.i1(true);
  for (int64_t f = 0; f < 4; ++f)
    same = kb.andI(same, kb.cmp(CmpIPredicate::eq, field(f), want[f]));
  return same;
}
/// The prediction cache's record of `slot` (written by
/// `<name>_predict_next`).
static Value recordField(KernelBuilder &kb, Value predAt, Value slot,
                         int64_t f) {
  return kb.loadAt(kb.i32T(), predAt,
                   kb.add(kb.mul(slot, kb.i32(4)), kb.i32(f)));
}
/// Whether the prediction cache's record of `slot` says that its block
/// scores are those of the step at position `p` with `n` visible slots and
/// iteration `iteration`.
static Value predictedFor(KernelBuilder &kb, Value predAt, Value slot, Value p,
                          Value n, Value iteration) {
  return recordMatches(
      kb, [&](int64_t f) { return recordField(kb, predAt, slot, f); }, p, n,
      iteration);
}

/// `prefetch.global.L2` of every line of `array[first, first + count)`
/// (f32 elements, `first` i64, `count` i32 > 0) by the CTA's threads.
static void prefetchF32Range(KernelBuilder &kb, Value array, Value first,
                             Value count, int64_t threads) {
  Value start = kb.gep(array, kb.f32T(), first);
  Value lastByte = kb.sub(kb.mul(count, kb.i32(4)), kb.i32(4));
  // One address per 128 bytes from the start, and the last element: every
  // line of the range, aligned or not.
  Value points = kb.add(kb.divU(lastByte, kb.i32(128)), kb.i32(2));
  forEachThreadStrided(kb, points, threads, [&](Value k) {
    Value offset = kb.minS(kb.mul(k, kb.i32(128)), lastByte);
    kb.prefetchL2(kb.gep(start, kb.i8T(), offset));
  });
}

LaunchShape mlir::spin::gpu_codegen::buildPredictKernel(
    OpBuilder &b, Location loc, gpu::GPUModuleOp module,
    const SelectKernelSpec &spec, bool next) {
  KernelBuilder kb(b, loc, module);
  Type ptr = kb.ptrT(Global), i32 = kb.i32T(), i64 = kb.i64T();
  const int64_t threads = 256, warps = threads / 32;
  const int64_t MB = spec.maxBlocks, bs = spec.blockSize;
  const int64_t range = spec.predictBlocksPerCta;
  const bool cache = spec.predictionCache;
  assert((cache || !next) && "a next-step prediction needs the cache");
  OpBuilder::InsertionGuard guard(b);
  // The step's prediction (a cache miss) takes a hint: whether the batch
  // row's previous step computed its prediction too.
  const bool hinted = cache && !next && spec.prefetchOnMiss;
  gpu::GPUFuncOp func = beginKernel(
      b, loc, module, spec.name + (next ? "_predict_next" : "_predict"),
      SmallVector<Type>(hinted  ? 9
                        : cache ? 8
                                : 7,
                        ptr),
      threads);
  Value positions = func.getArgument(0), lengths = func.getArgument(1);
  Value slots = func.getArgument(2), vState = func.getArgument(3);
  Value dState = func.getArgument(4), itState = func.getArgument(5);
  Value predAt = cache ? func.getArgument(6) : Value();
  Value keysOut = func.getArgument(cache ? 7 : 6);
  Value hints = hinted ? func.getArgument(8) : Value();

  Value lane = kb.laneId(), warp = kb.warpId();
  Value rowId = kb.blockIdY();
  Value request = kb.divU(rowId, kb.i32(spec.rows));
  Value missedBefore =
      hinted ? kb.cmp(CmpIPredicate::ne, kb.loadVolatileAt(i32, hints, rowId),
                      kb.i32(0))
             : Value();
  Value slot = kb.loadAt(i32, slots, request, true);
  Value iteration = kb.loadAt(i64, itState, slot);
  Value warmup = kb.cmp(arith::CmpIPredicate::eq, iteration, kb.i64(0));
  Value p = kb.loadAt(i32, positions, rowId, true);
  Value n = kb.loadAt(i32, lengths, rowId, true);
  // With the hint the record is loaded before the prefetch, and compared
  // after it.
  SmallVector<Value, 4> cached;
  for (int64_t f = 0; hinted && f < 4; ++f)
    cached.push_back(recordField(kb, predAt, slot, f));
  if (next) {
    // The next step of a decoding request: one more token, one further.
    p = kb.add(p, kb.i32(1));
    n = kb.add(n, kb.i32(1));
  }
  // Rows the select kernel rejects (it reports them) are skipped here.
  RowChecks checks = checkRow(kb, p, n, spec.capacity, MB * bs);
  Value ok = kb.andI(checks.lengthOk, checks.positionOk);
  // The row's blocks, and the CTA's first one.
  auto rowBlocksOf = [&] {
    return kb.minS(kb.divU(kb.add(n, kb.i32(bs - 1)), kb.i32(bs)), kb.i32(MB));
  };
  auto firstBlockOf = [&] { return kb.mul(kb.blockIdX(), kb.i32(range)); };
  // The CTA's slots [firstSlot, endSlot) of its blocks [firstBlock,
  // endBlock), and the row's offset in V and D.
  struct Slots {
    Value endBlock, first, end, stateBase;
  };
  auto slotsOf = [&](Value firstBlock, Value rowBlocks) {
    Value endBlock = kb.minS(kb.add(firstBlock, kb.i32(range)), rowBlocks);
    Value stateBase = kb.mul(kb.extS64(slot), kb.i64(spec.capacity));
    Value first = kb.mul(firstBlock, kb.i32(bs));
    Value end = kb.minS(kb.mul(endBlock, kb.i32(bs)), n);
    return Slots{endBlock, first, end, stateBase};
  };
  if (hinted) {
    // A row that missed the cache last step will likely miss again (a
    // repeated position, the end of the capacity): its V and D lines go to
    // L2 while `it` and the record load, which cuts a DRAM round trip from
    // the miss. Rows that hit skip it, so a hit reads nothing more.
    Value rowBlocks = rowBlocksOf(), firstBlock = firstBlockOf();
    Value mine = kb.andI(kb.andI(missedBefore, ok),
                         kb.cmp(CmpIPredicate::slt, firstBlock, rowBlocks));
    kb.ifThen(mine, [&] {
      Slots mineSlots = slotsOf(firstBlock, rowBlocks);
      Value count = kb.sub(mineSlots.end, mineSlots.first);
      prefetchF32Range(kb, vState,
                       kb.add(mineSlots.stateBase, kb.extS64(mineSlots.first)),
                       count, threads);
      Value lowestD = kb.sub(p, kb.sub(mineSlots.end, kb.i32(1)));
      prefetchF32Range(kb, dState,
                       kb.add(mineSlots.stateBase, kb.extS64(lowestD)), count,
                       threads);
    });
  }
  ok = kb.andI(ok, kb.not1(warmup));
  Value record = kb.trunc32(iteration);
  Value atBase = kb.mul(slot, kb.i32(4));
  if (cache && !next) {
    // The previous step predicted this one: nothing to do.
    ok = kb.andI(
        ok, kb.not1(hinted ? recordMatches(
                                 kb, [&](int64_t f) { return cached[f]; }, p, n,
                                 iteration)
                           : predictedFor(kb, predAt, slot, p, n, iteration)));
    if (hinted)
      kb.ifThen(kb.andI(kb.cmp(CmpIPredicate::eq, kb.blockIdX(), kb.i32(0)),
                        kb.cmp(CmpIPredicate::eq, kb.threadIdX(), kb.i32(0))),
                [&] {
                  kb.storeVolatileAt(kb.select(ok, kb.i32(1), kb.i32(0)), hints,
                                     rowId);
                });
  }
  if (next) {
    // The record says for which step the cache holds scores (or none).
    kb.ifThen(kb.andI(kb.cmp(CmpIPredicate::eq, kb.blockIdX(), kb.i32(0)),
                      kb.cmp(CmpIPredicate::eq, kb.threadIdX(), kb.i32(0))),
              [&] {
                Value fields[] = {p, n, record, kb.i32(1)};
                for (int64_t f = 0; f < 4; ++f)
                  kb.storeAt(kb.select(ok, fields[f], kb.i32(0)), predAt,
                             kb.add(atBase, kb.i32(f)));
              });
  }
  Value rowBlocks = rowBlocksOf(), firstBlock = firstBlockOf();
  Value active = kb.andI(ok, kb.cmp(CmpIPredicate::slt, firstBlock, rowBlocks));
  kb.ifThen(active, [&] {
    Value endBlock = kb.minS(kb.add(firstBlock, kb.i32(range)), rowBlocks);
    Value local = kb.sharedArray(spec.name + "_predict_S", i32, range);
    forEachThreadStrided(kb, kb.sub(endBlock, firstBlock), threads, [&](Value j) {
      kb.storeAt(kb.orderedKey(kb.f32(-INFINITY)), local, j);
    });
    kb.barrier();
    Slots mine = slotsOf(firstBlock, rowBlocks);
    Value stateBase = mine.stateBase, firstSlot = mine.first;
    Value endSlot = mine.end;
    // Eight slots' loads in flight per lane (H200, fp8 16 x 128K: 6.8 us
    // with 4, 6.5 with 8, 7.1 with 16: all of a CTA's slots at once).
    const int64_t unroll =
        std::clamp<int64_t>(llvm::divideCeil(range * bs, threads), 4, 8);
    maxPoolSlots(kb, vState, dState, stateBase, p, firstSlot, endSlot,
                 firstBlock, local, bs, warps, warp, lane, unroll);
    kb.barrier();
    Value outBase =
        cache ? kb.add(kb.mul(slot, kb.i32(spec.stateBlocks())), firstBlock)
              : kb.add(kb.mul(rowId, kb.i32(MB)), firstBlock);
    forEachThreadStrided(kb, kb.sub(endBlock, firstBlock), threads, [&](Value j) {
      kb.storeAt(kb.loadAt(i32, local, j), keysOut, kb.add(outBase, j));
    });
  });
  LaunchShape shape;
  shape.grid = {(MB + range - 1) / range, spec.batch * spec.rows, 1};
  shape.blockThreads = threads;
  return shape;
}

LaunchShape mlir::spin::gpu_codegen::buildSelectKernel(
    OpBuilder &b, Location loc, gpu::GPUModuleOp module,
    const SelectKernelSpec &spec) {
  KernelBuilder kb(b, loc, module);
  Type ptr = kb.ptrT(Global), i32 = kb.i32T(), i64 = kb.i64T(), f32 = kb.f32T();
  Type i8 = kb.i8T();
  SmallVector<Type> params(11, ptr);
  if (spec.precomputed)
    params.push_back(ptr);
  if (spec.predictionCache)
    params.push_back(ptr);
  if (spec.reportSparsity)
    params.push_back(ptr);
  params.push_back(ptr);
  const int64_t threads = spec.threads, warps = threads / 32;
  const int64_t MB = spec.maxBlocks, bs = spec.blockSize;
  OpBuilder::InsertionGuard guard(b);
  gpu::GPUFuncOp func = beginKernel(b, loc, module, spec.name, params, threads);
  // The sparse scoring kernel after this one reads only step inputs before
  // its wait (the row's length, queries, head weights and block-table row),
  // so its CTAs may start staging them while this kernel still waits for
  // the predict kernel. That pays where the predict grid fills the GPU
  // (H200, fp8 16 x 128K, rho = 0.5, 512 predict CTAs, side by side:
  // decoding 80.9 -> 80.1 us, fixed position 82.3 -> 82.2); with a smaller
  // one, whose SMs the early CTAs then share, a miss got slower (1 x 256K,
  // 64 CTAs: fixed 39.9 -> 41.1 us, decoding 39.6 -> 38.8), so not there
  // (the same `sm-count` test as the prediction's prefetch).
  if (spec.triggersEarly())
    triggerDependentsBeforeWait(func);
  unsigned a = 0;
  Value positions = func.getArgument(a++), lengths = func.getArgument(a++);
  Value requestIds = func.getArgument(a++), slots = func.getArgument(a++);
  Value vState = func.getArgument(a++), dState = func.getArgument(a++);
  Value itState = func.getArgument(a++);
  Value blocksOut = func.getArgument(a++), countsOut = func.getArgument(a++);
  Value maskOut = func.getArgument(a++), skipOut = func.getArgument(a++);
  Value precomputed = spec.precomputed ? func.getArgument(a++) : Value();
  Value predAt = spec.predictionCache ? func.getArgument(a++) : Value();
  Value sparsityOut = spec.reportSparsity ? func.getArgument(a++) : Value();
  Value errors = func.getArgument(a++);

  Value tid = kb.threadIdX(), lane = kb.laneId(), warp = kb.warpId();
  // The step's inputs are read while the kernel before ends; so is `it`
  // when that kernel is the predict kernel (which writes only block
  // scores). Otherwise it may be an MTP commit or a reset, which write `it`.
  Value request, slot, iteration, requestId, firstP, firstN;
  {
    OpBuilder::InsertionGuard beforeWait(b);
    setInsertionBeforeGridWait(b, func);
    request = kb.blockIdX();
    slot = kb.loadAt(i32, slots, request, true);
    requestId = kb.loadAt(i64, requestIds, request, true);
    if (spec.rows == 1) {
      firstP = kb.loadAt(i32, positions, request, true);
      firstN = kb.loadAt(i32, lengths, request, true);
    }
    if (spec.precomputed)
      iteration = kb.loadAt(i64, itState, slot);
    if (spec.predictionCache) {
      // A request whose block scores the previous step predicted (the
      // predict kernel's test, on the same record) needs nothing of the
      // predict kernel, which skips it: its CTA does not wait for it.
      skipGridWaitIf(b, func,
                     predictedFor(kb, predAt, slot, firstP, firstN, iteration));
    }
    // The request's mask starts empty (shared memory only: nothing to wait
    // for).
    Value mask = kb.sharedArray(spec.name + "_mask", i8, MB);
    forEachThreadStrided(kb, kb.i32(MB), threads, [&](Value j) {
      kb.storeAt(kb.constant(i8, 0), mask, j);
    });
    kb.barrier();
  }
  if (!spec.precomputed)
    iteration = kb.loadAt(i64, itState, slot);
  Value warmup = kb.cmp(CmpIPredicate::eq, iteration, kb.i64(0));
  Value stateBase = kb.mul(kb.extS64(slot), kb.i64(spec.capacity));
  // mix(mix(mix(mix(seed) ^ request) ^ layer) ^ it); the block comes last.
  Value base = kb.i64(static_cast<int64_t>(splitmix(spec.seed)));
  base = kb.mix(kb.xorI(base, requestId));
  base = kb.mix(kb.xorI(base, kb.i64(spec.layer)));
  base = kb.mix(kb.xorI(base, iteration));

  Value scoreKeys = kb.sharedArray(spec.name + "_S", i32, MB);
  const bool fastMax = canPredictByMax(spec);
  Value mask = kb.sharedArray(spec.name + "_mask", i8, MB);
  // A single row selects into the request's mask directly (no union).
  Value rowMask =
      spec.rows == 1 ? mask : kb.sharedArray(spec.name + "_row_mask", i8, MB);
  Value pool = kb.sharedArray(spec.name + "_pool", f32, warps * bs);

  Value requestOk = kb.forLoopWith(
      kb.i32(0), kb.i32(spec.rows), kb.i32(1), {kb.i1(true)},
      [&](Value r, ValueRange okIn) -> SmallVector<Value> {
        Value rowId = kb.add(kb.mul(request, kb.i32(spec.rows)), r);
        Value p = firstP ? firstP : kb.loadAt(i32, positions, rowId, true);
        Value n = firstN ? firstN : kb.loadAt(i32, lengths, rowId, true);
        // SPIN_SPEC §2: N <= p + 1 <= C; and N within the block table.
        RowChecks checks = checkRow(kb, p, n, spec.capacity, MB * bs);
        Value lengthOk = checks.lengthOk, positionOk = checks.positionOk;
        kb.ifThen(kb.cmp(CmpIPredicate::eq, tid, kb.i32(0)), [&] {
          kb.ifThen(kb.not1(lengthOk),
                    [&] {
                      recordError(kb, errors, ErrorBadLength, n, request, r);
                    });
          kb.ifThen(kb.andI(lengthOk, kb.not1(positionOk)),
                    [&] {
                      recordError(kb, errors, ErrorBadPosition, p, request, r);
                    });
        });
        Value ok = kb.andI(lengthOk, positionOk);
        Value used = ok;
        if (spec.rowZeroOnly)
          used = kb.andI(used, kb.orI(warmup, kb.cmp(CmpIPredicate::eq, r,
                                                     kb.i32(0))));
        kb.ifThen(used, [&] {
          Value rowBlocks =
              kb.minS(kb.divU(kb.add(n, kb.i32(bs - 1)), kb.i32(bs)),
                      kb.i32(MB));
          forEachThreadStrided(kb, rowBlocks, threads, [&](Value j) {
            kb.storeAt(kb.select(warmup, kb.constant(i8, 1),
                                 kb.constant(i8, 0)),
                       rowMask, j);
          });
          kb.ifThen(kb.andI(kb.not1(warmup),
                            kb.cmp(CmpIPredicate::sgt, rowBlocks, kb.i32(0))),
                    [&] {
            //===--- predicted block scores (§3.2-3.3) --------------------===//
            // S is kept as order-preserving u32 keys (what the exploit
            // select ranks by).
            if (precomputed) {
              // From the predict kernel (same keys, many CTAs per row).
              Value base = spec.predictionCache
                               ? kb.mul(slot, kb.i32(spec.stateBlocks()))
                               : kb.mul(rowId, kb.i32(MB));
              forEachThreadStrided(kb, rowBlocks, threads, [&](Value j) {
                kb.storeAt(kb.loadAt(i32, precomputed, kb.add(base, j)),
                           scoreKeys, j);
              });
            } else if (fastMax) {
              // Max pooling by all warps (maxPoolSlots).
              forEachThreadStrided(kb, rowBlocks, threads, [&](Value j) {
                kb.storeAt(kb.orderedKey(kb.f32(-INFINITY)), scoreKeys, j);
              });
              kb.barrier();
              maxPoolSlots(kb, vState, dState, stateBase, p, kb.i32(0), n,
                           kb.i32(0), scoreKeys, bs, warps, warp, lane);
            } else {
              Value buffer = kb.gep(pool, f32, kb.mul(warp, kb.i32(bs)));
              kb.forLoop(warp, rowBlocks, kb.i32(warps), [&](Value j) {
                Value first = kb.mul(j, kb.i32(bs));
                Value count = kb.minS(kb.i32(bs), kb.sub(n, first));
                Value local = kb.f32(-INFINITY);
                for (int64_t q = 0; q < (bs + 31) / 32; ++q) {
                  Value k = kb.add(lane, kb.i32(q * 32));
                  Value inBlock = kb.cmp(CmpIPredicate::slt, k, count);
                  Value zhat = kb.ifThenElse(
                      {f32}, inBlock,
                      [&]() -> SmallVector<Value> {
                        Value i = kb.add(first, k);
                        Value vi = kb.loadAt(
                            f32, vState, kb.add(stateBase, kb.extS64(i)));
                        Value di = kb.loadAt(
                            f32, dState,
                            kb.add(stateBase, kb.extS64(kb.sub(p, i))));
                        return {kb.maxF(vi, di)};
                      },
                      [&]() -> SmallVector<Value> { return {kb.f32(-INFINITY)}; })[0];
                  local = kb.maxF(local, zhat);
                  if (spec.pooling != PoolingKind::max)
                    kb.ifThen(inBlock, [&] { kb.storeAt(zhat, buffer, k); });
                }
                Value pooled;
                if (spec.pooling == PoolingKind::max) {
                  for (int64_t d = 16; d >= 1; d /= 2)
                    local = kb.maxF(local, kb.shflXor(local, d));
                  pooled = local;
                } else {
                  // Mean and top4 in slot order, as the CPU path sums them.
                  pooled = kb.ifThenElse(
                      {f32}, kb.cmp(CmpIPredicate::eq, lane, kb.i32(0)),
                      [&]() -> SmallVector<Value> {
                        Value ninf = kb.f32(-INFINITY);
                        SmallVector<Value> init = {kb.f32(0.0), ninf, ninf, ninf,
                                                   ninf};
                        SmallVector<Value> acc = kb.forLoopWith(
                            kb.i32(0), count, kb.i32(1), init,
                            [&](Value k, ValueRange it) -> SmallVector<Value> {
                              Value x = kb.loadAt(f32, buffer, k);
                              SmallVector<Value> next = {kb.add(it[0], x)};
                              Value carry = x;
                              for (int64_t s = 1; s < 5; ++s) {
                                Value bigger =
                                    kb.cmpF(CmpFPredicate::OGT, carry, it[s]);
                                next.push_back(kb.select(bigger, carry, it[s]));
                                carry = kb.select(bigger, it[s], carry);
                              }
                              return next;
                            });
                        if (spec.pooling == PoolingKind::mean)
                          return {arith::DivFOp::create(b, loc, acc[0],
                                                        kb.sitofp(count))};
                        Value used = kb.minS(count, kb.i32(4));
                        Value sum = acc[1];
                        for (int64_t s = 1; s < 4; ++s)
                          sum = kb.select(
                              kb.cmp(CmpIPredicate::sgt, used, kb.i32(s)),
                              kb.add(sum, acc[1 + s]), sum);
                        return {arith::DivFOp::create(b, loc, sum,
                                                      kb.sitofp(used))};
                      },
                      [&]() -> SmallVector<Value> { return {kb.f32(0.0)}; })[0];
                }
                kb.ifThen(kb.cmp(CmpIPredicate::eq, lane, kb.i32(0)), [&] {
                  kb.storeAt(kb.orderedKey(pooled), scoreKeys, j);
                });
              });
            }
            kb.barrier();

            //===--- budget (§3.4-3.6) ------------------------------------===//
            Value rowBlocks64 = kb.extS64(rowBlocks);
            Value byK = kb.i64((spec.topk + bs - 1) / bs);
            Value keepBlocks = arith::SubFOp::create(
                b, loc,
                arith::MulFOp::create(
                    b, loc,
                    arith::ConstantFloatOp::create(
                        b, loc, b.getF64Type(), APFloat(1.0 - spec.sparsity)),
                    arith::SIToFPOp::create(b, loc, b.getF64Type(),
                                            rowBlocks64)),
                arith::ConstantFloatOp::create(b, loc, b.getF64Type(),
                                               APFloat(1e-9)));
            // ceil without libdevice: truncate, then step up if below.
            Value truncated = arith::FPToSIOp::create(b, loc, i64, keepBlocks);
            Value below = arith::CmpFOp::create(
                b, loc, CmpFPredicate::OLT,
                arith::SIToFPOp::create(b, loc, b.getF64Type(), truncated),
                keepBlocks);
            Value bySparsity =
                kb.select(below, kb.add(truncated, kb.i64(1)), truncated);
            Value budget64 = kb.minS(
                rowBlocks64,
                arith::MaxSIOp::create(b, loc, byK,
                                       kb.maxS(bySparsity, kb.i64(0))));
            Value budget = kb.trunc32(budget64);
            Value forced = kb.select(
                kb.cmp(CmpIPredicate::eq, rowBlocks, kb.i32(1)), kb.i32(1),
                kb.i32(2));
            // floor of a non-negative product: truncation.
            Value wanted = kb.trunc32(arith::FPToSIOp::create(
                b, loc, i64,
                arith::MulFOp::create(
                    b, loc,
                    arith::ConstantFloatOp::create(b, loc, b.getF64Type(),
                                                   APFloat(spec.explore)),
                    arith::SIToFPOp::create(b, loc, b.getF64Type(),
                                            budget64))));
            Value room = kb.select(kb.cmp(CmpIPredicate::sgt, budget, forced),
                                   kb.sub(budget, forced), kb.i32(0));
            Value explored = kb.minS(wanted, room);
            Value exploit = kb.sub(room, explored);
            Value last = kb.sub(rowBlocks, kb.i32(1));
            kb.ifThen(kb.cmp(CmpIPredicate::eq, tid, kb.i32(0)), [&] {
              kb.storeAt(kb.constant(i8, 1), rowMask, kb.i32(0));
              kb.storeAt(kb.constant(i8, 1), rowMask, last);
            });
            kb.barrier();

            //===--- exploit: the largest S among non-forced blocks ---------===//
            kb.ifThen(kb.cmp(CmpIPredicate::sgt, exploit, kb.i32(0)), [&] {
              auto keyOf = [&](Value j) -> std::pair<Value, Value> {
                Value key = kb.loadAt(i32, scoreKeys, j);
                Value eligible =
                    kb.andI(kb.cmp(CmpIPredicate::sge, j, kb.i32(1)),
                            kb.cmp(CmpIPredicate::slt, j, last));
                return {eligible, key};
              };
              RadixSelection chosen =
                  selectLargest(kb, spec.name + "_exploit", i32, rowBlocks,
                                exploit, threads, keyOf);
              forEachThreadStrided(kb, rowBlocks, threads, [&](Value j) {
                auto [eligible, key] = keyOf(j);
                kb.ifThen(isSelected(kb, chosen, eligible, key, j), [&] {
                  kb.storeAt(kb.constant(i8, 1), rowMask, j);
                });
              });
              kb.barrier();
            });

            //===--- explore: the smallest ranks among the rest (§3.7) ------===//
            kb.ifThen(kb.cmp(CmpIPredicate::sgt, explored, kb.i32(0)), [&] {
              auto keyOf = [&](Value j) -> std::pair<Value, Value> {
                Value taken = kb.cmp(CmpIPredicate::ne,
                                     kb.loadAt(i8, rowMask, j),
                                     kb.constant(i8, 0));
                Value rank = kb.mix(kb.xorI(base, kb.extS64(j)));
                return {kb.not1(taken), kb.xorI(rank, kb.i64(-1))};
              };
              RadixSelection chosen =
                  selectLargest(kb, spec.name + "_explore", i64, rowBlocks,
                                explored, threads, keyOf);
              // Decide for every block before marking any.
              SmallVector<Value> picks;
              int64_t perThread = (MB + threads - 1) / threads;
              for (int64_t q = 0; q < perThread; ++q) {
                Value j = kb.add(tid, kb.i32(q * threads));
                Value inRange = kb.cmp(CmpIPredicate::slt, j, rowBlocks);
                picks.push_back(kb.ifThenElse(
                    {kb.i1T()}, inRange,
                    [&]() -> SmallVector<Value> {
                      auto [eligible, key] = keyOf(j);
                      return {isSelected(kb, chosen, eligible, key, j)};
                    },
                    [&]() -> SmallVector<Value> { return {kb.i1(false)}; })[0]);
              }
              kb.barrier();
              for (int64_t q = 0; q < perThread; ++q) {
                Value j = kb.add(tid, kb.i32(q * threads));
                kb.ifThen(picks[q], [&] {
                  kb.storeAt(kb.constant(i8, 1), rowMask, j);
                });
              }
              kb.barrier();
            });
          });
          kb.barrier();
          if (spec.rows > 1) {
            // Union into the request's mask.
            forEachThreadStrided(kb, rowBlocks, threads, [&](Value j) {
              Value bit =
                  kb.orI(kb.loadAt(i8, mask, j), kb.loadAt(i8, rowMask, j));
              kb.storeAt(bit, mask, j);
            });
            kb.barrier();
          }
        });
        return {kb.andI(okIn[0], ok)};
      })[0];

  //===--- the mask, the ascending list of selected blocks ----------------===//
  // Each thread owns a contiguous run of blocks, so an exclusive scan of
  // the per-thread counts gives every selected block its list position.
  // A request with a bad row selects nothing (and its state is untouched).
  int64_t run = (MB + threads - 1) / threads;
  Value first = kb.mul(tid, kb.i32(run));
  Value own = kb.i32(0);
  SmallVector<Value> bits;
  for (int64_t q = 0; q < run; ++q) {
    Value j = kb.add(first, kb.i32(q));
    Value inRange = kb.andI(requestOk, kb.cmp(CmpIPredicate::slt, j, kb.i32(MB)));
    Value bit = kb.ifThenElse(
        {i8}, inRange,
        [&]() -> SmallVector<Value> { return {kb.loadAt(i8, mask, j)}; },
        [&]() -> SmallVector<Value> { return {kb.constant(i8, 0)}; })[0];
    bits.push_back(bit);
    own = kb.add(own, kb.zext(bit, i32));
  }
  auto [offset, total] =
      blockExclusiveScan(kb, spec.name + "_scan", own, threads);
  Value at = offset;
  for (int64_t q = 0; q < run; ++q) {
    Value j = kb.add(first, kb.i32(q));
    Value inRange = kb.cmp(CmpIPredicate::slt, j, kb.i32(MB));
    kb.ifThen(inRange, [&] {
      kb.storeAt(bits[q], maskOut, kb.add(kb.mul(request, kb.i32(MB)), j));
    });
    Value selected = kb.cmp(CmpIPredicate::ne, bits[q], kb.constant(i8, 0));
    kb.ifThen(selected, [&] {
      kb.storeAt(j, blocksOut, kb.add(kb.mul(request, kb.i32(MB)), at));
    });
    at = kb.add(at, kb.zext(bits[q], i32));
  }
  kb.ifThen(kb.cmp(CmpIPredicate::eq, tid, kb.i32(0)), [&] {
    kb.storeAt(total, countsOut, request);
    kb.storeAt(kb.i32(0), skipOut, request);
  });

  //===--- realized block sparsity per row (on the union) -----------------===//
  if (spec.reportSparsity) {
    for (int64_t r = 0; r < spec.rows; ++r) {
      Value rowId = kb.add(kb.mul(request, kb.i32(spec.rows)), kb.i32(r));
      Value n = firstN ? firstN : kb.loadAt(i32, lengths, rowId, true);
      Value rowBlocks = kb.minS(
          kb.divU(kb.add(kb.maxS(n, kb.i32(0)), kb.i32(bs - 1)), kb.i32(bs)),
          kb.i32(MB));
      // One row marks no block past its own, so its count is the mask's.
      Value selected = total;
      if (spec.rows > 1) {
        Value mine = kb.i32(0);
        for (int64_t q = 0; q < run; ++q) {
          Value j = kb.add(first, kb.i32(q));
          Value counted = kb.cmp(CmpIPredicate::slt, j, rowBlocks);
          mine = kb.add(mine, kb.select(counted, kb.zext(bits[q], i32),
                                        kb.i32(0)));
        }
        selected = blockExclusiveScan(kb, spec.name + "_scan", mine, threads)
                       .second;
      }
      kb.ifThen(kb.cmp(CmpIPredicate::eq, tid, kb.i32(0)), [&] {
        FloatType f64 = b.getF64Type();
        Value fraction = arith::DivFOp::create(
            b, loc, arith::SIToFPOp::create(b, loc, f64, selected),
            arith::SIToFPOp::create(b, loc, f64, rowBlocks));
        Value one = arith::ConstantFloatOp::create(b, loc, f64, APFloat(1.0));
        Value zero = arith::ConstantFloatOp::create(b, loc, f64, APFloat(0.0));
        Value value = kb.select(kb.cmp(CmpIPredicate::sgt, rowBlocks, kb.i32(0)),
                                arith::SubFOp::create(b, loc, one, fraction),
                                zero);
        kb.storeAt(arith::TruncFOp::create(b, loc, f32, value), sparsityOut,
                   rowId);
      });
    }
  }

  LaunchShape shape;
  shape.grid = {spec.batch, 1, 1};
  shape.blockThreads = threads;
  return shape;
}
