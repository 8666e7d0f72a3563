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

#include "spin/Runtime/Semantics.h"

#include <algorithm>
#include <cmath>

using namespace mlir;
using namespace mlir::spin;
using namespace mlir::spin::gpu_codegen;
using arith::CmpFPredicate;
using arith::CmpIPredicate;

namespace {

/// V[i] or D[i] of a request's state (`entries`); with the paged layout an
/// entry at or past the slot's `valid` count is read as zero (its page may
/// hold another request's old state).
Value loadStateEntry(KernelBuilder &kb, Value state, const StateRows &entries,
                     Value valid, Value i) {
  Value value = kb.loadAt(kb.f32T(), state, entries.index(i));
  if (!valid)
    return value;
  return kb.select(kb.cmp(CmpIPredicate::slt, i, valid), value, kb.f32(0.0));
}

/// The end of a pooling round: the `segment` consecutive lanes of a block
/// reduce their maxima `z` by shuffles, and the block's first lane, when
/// its first slot `slot` is in the range (`in`), folds the block's maximum
/// into `keys[slot / bs - firstBlock]` (atomic max of order-preserving
/// keys).
void foldBlockMaximum(KernelBuilder &kb, Value z, Value slot, Value in,
                      Value lane, int64_t segment, int64_t bs, Value firstBlock,
                      Value keys) {
  for (int64_t off = segment / 2; off >= 1; off /= 2)
    z = kb.maxF(z, kb.shflXor(z, off));
  Value leader =
      kb.cmp(CmpIPredicate::eq, kb.remU(lane, kb.i32(segment)), kb.i32(0));
  kb.ifThen(kb.andI(leader, in), [&] {
    Value j = kb.sub(kb.divU(slot, kb.i32(bs)), firstBlock);
    LLVM::AtomicRMWOp::create(kb.builder(), kb.location(),
                              LLVM::AtomicBinOp::umax,
                              kb.gep(keys, kb.i32T(), j), kb.orderedKey(z),
                              LLVM::AtomicOrdering::monotonic);
  });
}

/// Max pooling of the predictions max(V[i], D[p - i]) of slots
/// [firstSlot, endSlot) into the order-preserving u32 keys
/// `keys[i / bs - firstBlock]` (atomic max; the keys start at -inf): each
/// warp streams slots with four loads in flight, the lanes of one block
/// reduce by shuffles and one lane per block folds the result in. Each lane
/// has `unroll` slots' loads in flight per iteration.
void maxPoolSlots(KernelBuilder &kb, Value vState, Value dState,
                  const StateRows &entries, Value valid, Value p,
                  Value firstSlot, Value endSlot,
                  Value firstBlock, Value keys, int64_t bs, int64_t warps,
                  Value warp, Value lane, int64_t unroll = 4) {
  Value last = kb.sub(endSlot, kb.i32(1));
  const int64_t segment = std::min<int64_t>(bs, 32);
  kb.forLoop(
      kb.add(firstSlot, kb.mul(warp, kb.i32(32 * unroll))), endSlot,
      kb.i32(warps * 32 * unroll), [&](Value base) {
        SmallVector<Value> slots, slotsIn, values;
        for (int64_t u = 0; u < unroll; ++u) {
          Value i = kb.add(base, kb.add(lane, kb.i32(u * 32)));
          slots.push_back(i);
          Value in = kb.cmp(CmpIPredicate::slt, i, endSlot);
          Value at = kb.minS(i, last);
          Value vi = loadStateEntry(kb, vState, entries, valid, at);
          Value di = loadStateEntry(kb, dState, entries, valid, kb.sub(p, at));
          slotsIn.push_back(in);
          values.push_back(kb.select(in, kb.maxF(vi, di), kb.f32(-INFINITY)));
        }
        for (int64_t u = 0; u < unroll; ++u)
          foldBlockMaximum(kb, values[u], slots[u], slotsIn[u], lane, segment,
                           bs, firstBlock, keys);
      });
}
/// maxPoolSlots with four consecutive slots a lane: V's four cells in one
/// 16-byte load, D's four (p - i - 3 .. p - i, descending) from the two
/// aligned 16-byte loads around them, so that a lane issues three loads for
/// four slots instead of eight, and the lanes of a block reduce in
/// log2(bs / 4) shuffles instead of log2(min(bs, 32)). Needs `bs`, the
/// slots' start and the state rows (capacity, state pages) to be multiples
/// of four (canPoolByFour); the maxima are the scalar loop's (max is exact
/// and order-free, `arith.maximumf` ordering -0 below +0).
void maxPoolSlotsByFour(KernelBuilder &kb, Value vState, Value dState,
                        const StateRows &entries, Value valid, Value p,
                        Value firstSlot, Value endSlot, Value firstBlock,
                        Value keys, int64_t bs, int64_t capacity, int64_t warps,
                        Value warp, Value lane, int64_t unroll) {
  Type f32 = kb.f32T(), vec4 = kb.vecT(f32, 4);
  // The last group holding a slot of the range: loads past it are clamped
  // to it (their slots are out of the range).
  Value lastGroup = kb.andI(kb.sub(endSlot, kb.i32(1)), kb.i32(~3));
  const int64_t segment = std::min<int64_t>(bs / 4, 32); // lanes a block
  auto loadFour = [&](Value state, Value at) {
    Value loaded = kb.load(vec4, kb.gep(state, f32, entries.index(at)), 16);
    SmallVector<Value> cells;
    for (int64_t j = 0; j < 4; ++j) {
      Value cell = kb.extract(loaded, j);
      if (valid)
        cell = kb.select(kb.cmp(CmpIPredicate::slt, kb.add(at, kb.i32(j)), valid),
                         cell, kb.f32(0.0));
      cells.push_back(cell);
    }
    return cells;
  };
  kb.forLoop(
      kb.add(firstSlot, kb.mul(warp, kb.i32(128 * unroll))), endSlot,
      kb.i32(warps * 128 * unroll), [&](Value base) {
        SmallVector<Value> groups, maxima;
        for (int64_t u = 0; u < unroll; ++u) {
          Value g = kb.add(base, kb.add(kb.mul(lane, kb.i32(4)),
                                        kb.i32(u * 128)));
          Value at = kb.minS(g, lastGroup);
          SmallVector<Value> v = loadFour(vState, at);
          // D[p - at - j], j = 0..3: cells lo .. lo + 3 with lo = p - at - 3,
          // in the aligned cells [a, a + 8), a = lo rounded down to four.
          // Cells below 0 belong to slots past p (never in the range): their
          // loads are clamped into the row.
          Value lo = kb.sub(kb.sub(p, at), kb.i32(3));
          Value shift = kb.andI(lo, kb.i32(3));
          Value a = kb.sub(lo, shift);
          Value first = kb.maxS(a, kb.i32(0));
          Value second = kb.minS(kb.maxS(kb.add(a, kb.i32(4)), kb.i32(0)),
                                 kb.i32(capacity - 4));
          SmallVector<Value> cells = loadFour(dState, first);
          llvm::append_range(cells, loadFour(dState, second));
          Value z = kb.f32(-INFINITY);
          for (int64_t j = 0; j < 4; ++j) {
            // D[lo + 3 - j] is cells[shift + 3 - j].
            Value d = cells[3 - j];
            for (int64_t k = 1; k < 4; ++k)
              d = kb.select(kb.cmp(CmpIPredicate::eq, shift, kb.i32(k)),
                            cells[k + 3 - j], d);
            Value in = kb.cmp(CmpIPredicate::slt, kb.add(g, kb.i32(j)), endSlot);
            z = kb.maxF(z, kb.select(in, kb.maxF(v[j], d), kb.f32(-INFINITY)));
          }
          groups.push_back(g);
          maxima.push_back(z);
        }
        for (int64_t u = 0; u < unroll; ++u)
          foldBlockMaximum(kb, maxima[u], groups[u],
                           kb.cmp(CmpIPredicate::slt, groups[u], endSlot), lane,
                           segment, bs, firstBlock, keys);
      });
}
} // namespace

/// Groups of four slots a lane of maxPoolSlotsByFour has in flight: more
/// were no faster (docs/benchmarks-kernels.md).
constexpr int64_t kPoolGroupsInFlight = 1;

/// Whether maxPoolSlotsByFour applies.
static bool canPoolByFour(const SelectKernelSpec &spec) {
  return slotRunsAreVectors(4, spec.capacity, spec.blockSize, spec.paged);
}

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

namespace {

/// One predict kernel (the step's, or with `next` the next step's) while it
/// is built: the spec's sizes, the parameters and the row's values its
/// phases share. `build` runs the phases in the order of the generated
/// code.
class PredictKernel : KernelPhases<SelectKernelSpec> {
public:
  PredictKernel(OpBuilder &b, Location loc, gpu::GPUModuleOp module,
                const SelectKernelSpec &spec, bool next)
      : KernelPhases(b, loc, module, spec),
        next(next), MB(spec.maxBlocks), bs(spec.blockSize),
        range(spec.predictBlocksPerCta), cache(spec.predictionCache),
        hinted(cache && !next && spec.prefetchOnMiss) {
    assert((cache || !next) && "a next-step prediction needs the cache");
    assert(!(hinted && spec.paged.enabled()) &&
           "the miss prefetch reads compact rows");
  }
  LaunchShape build();

private:
  /// The CTA's slots [first, end) of its blocks [firstBlock, endBlock), and
  /// the row's offset in V and D.
  struct Slots {
    Value endBlock, first, end, stateBase;
  };
  void declareKernel();
  void loadRow();
  Value rowBlocksOf();
  Value firstBlockOf();
  Slots slotsOf(Value firstBlock, Value rowBlocks);
  void prefetchMissedRow();
  void skipPredicted();
  void recordNext(Value record, Value atBase);
  void resetRow();
  void poolCtaBlocks(Value firstBlock, Value rowBlocks);

  const bool next;
  const int64_t threads = 256, warps = threads / 32;
  const int64_t MB, bs, range;
  const bool cache;
  /// The step's prediction (a cache miss) takes a hint: whether the batch
  /// row's previous step computed its prediction too.
  const bool hinted;

  gpu::GPUFuncOp func;
  Value positions, lengths, slots, vState, dState, itState, predAt, keysOut;
  Value hints, numSlots, resetFlags, resetPredAt, resetObsRows;
  StatePaging paging;
  /// Whether the batch row's slot is live (loadBatchSlot), and whether the
  /// step resets it (SelectKernelSpec::fusedReset).
  Value live, resetting;
  Value lane, warp, rowId, missedBefore, slot, iteration, warmup, p, n;
  /// The cache record's fields, loaded with `it` (before the reset and the
  /// hinted prefetch).
  SmallVector<Value, 4> cached;
  /// Whether the CTA predicts: the row passes the select kernel's checks
  /// and needs a prediction.
  Value ok;
};

/// Builds the kernel, phase after phase; returns its launch shape.
LaunchShape PredictKernel::build() {
  OpBuilder::InsertionGuard guard(b);
  declareKernel();
  loadRow();
  if (hinted)
    prefetchMissedRow();
  if (resetFlags) {
    kb.ifThen(resetting, [&] { resetRow(); });
    warmup = kb.orI(warmup, resetting); // nothing to predict
  }
  ok = kb.andI(ok, kb.not1(warmup));
  Value record = kb.trunc32(iteration);
  Value atBase = kb.mul(slot, kb.i32(4));
  if (cache && !next)
    skipPredicted();
  if (next)
    kb.ifThen(live, [&] { recordNext(record, atBase); });
  Value rowBlocks = rowBlocksOf(), firstBlock = firstBlockOf();
  Value active = kb.andI(ok, kb.cmp(CmpIPredicate::slt, firstBlock, rowBlocks));
  kb.ifThen(active, [&] { poolCtaBlocks(firstBlock, rowBlocks); });
  LaunchShape shape;
  shape.grid = {(MB + range - 1) / range, spec.batch * spec.rows, 1};
  shape.blockThreads = threads;
  return shape;
}

/// The `gpu.func` and its parameters: the cache record (with the cache)
/// and the hints (when hinted) are optional.
void PredictKernel::declareKernel() {
  Type ptr = kb.ptrT(Global);
  const bool resets = spec.fusedReset && !next;
  SmallVector<Type> params(hinted  ? 9
                           : cache ? 8
                                   : 7,
                           ptr);
  if (resets)
    params.append(spec.resetObservations ? 3 : 2, ptr);
  params.push_back(kb.i32T());
  if (spec.paged.enabled())
    params.append({ptr, ptr, kb.i32T()});
  func = beginKernel(b, loc, module,
                     spec.name + (next ? "_predict_next" : "_predict"), params,
                     threads);
  positions = func.getArgument(0), lengths = func.getArgument(1);
  slots = func.getArgument(2), vState = func.getArgument(3);
  dState = func.getArgument(4), itState = func.getArgument(5);
  predAt = cache ? func.getArgument(6) : Value();
  keysOut = func.getArgument(cache ? 7 : 6);
  hints = hinted ? func.getArgument(8) : Value();
  if (resets) {
    unsigned a = hinted ? 9 : cache ? 8 : 7;
    resetFlags = func.getArgument(a++);
    resetPredAt = func.getArgument(a++);
    resetObsRows = spec.resetObservations ? func.getArgument(a++) : Value();
  }
  unsigned last = func.getNumArguments() - 1;
  if (spec.paged.enabled()) {
    paging = {spec.paged.page, spec.paged.width, func.getArgument(last - 2),
              func.getArgument(last), func.getArgument(last - 1)};
    last -= 3;
  }
  numSlots = func.getArgument(last);
}

/// The row's step (one token further for the next step), its state and
/// `ok`: the select kernel's row checks (rows it rejects, and reports, are
/// skipped here).
void PredictKernel::loadRow() {
  Type i32 = kb.i32T(), i64 = kb.i64T();
  lane = kb.laneId(), warp = kb.warpId();
  rowId = kb.blockIdY();
  missedBefore =
      hinted ? kb.cmp(CmpIPredicate::ne, kb.loadVolatileAt(i32, hints, rowId),
                      kb.i32(0))
             : Value();
  {
    // The step's inputs, which no kernel writes: read while the kernel
    // before ends.
    OpBuilder::InsertionGuard beforeWait(b);
    setInsertionBeforeGridWait(b, func);
    Value row = kb.blockIdY();
    Value request = kb.divU(row, kb.i32(spec.rows));
    BatchSlot batchSlot =
        loadBatchSlot(kb, slots, request, numSlots, spec.batch);
    slot = batchSlot.slot;
    live = batchSlot.live;
    if (resetFlags)
      resetting = rowResets(kb, live, resetFlags, request);
    p = kb.loadAt(i32, positions, row, true);
    n = kb.loadAt(i32, lengths, row, true);
  }
  iteration = kb.loadAt(i64, itState, slot);
  warmup = kb.cmp(arith::CmpIPredicate::eq, iteration, kb.i64(0));
  // The record loads with `it`, before the reset and the hinted prefetch
  // (a reset row predicts nothing: its stale record is never compared),
  // instead of one round trip after them.
  for (int64_t f = 0; cache && !next && f < 4; ++f)
    cached.push_back(recordField(kb, predAt, slot, f));
  if (next) {
    // The next step of a decoding request: one more token, one further.
    p = kb.add(p, kb.i32(1));
    n = kb.add(n, kb.i32(1));
  }
  RowChecks checks = checkRow(kb, p, n, spec.capacity, MB * bs);
  ok = kb.andI(live, kb.andI(checks.lengthOk, checks.positionOk));
}

/// The row's blocks.
Value PredictKernel::rowBlocksOf() {
  return kb.minS(kb.divU(kb.add(n, kb.i32(bs - 1)), kb.i32(bs)), kb.i32(MB));
}

/// The CTA's first block.
Value PredictKernel::firstBlockOf() {
  return kb.mul(kb.blockIdX(), kb.i32(range));
}

/// The CTA's slots of its blocks (`firstBlock` on) in a row of
/// `rowBlocks` blocks.
PredictKernel::Slots PredictKernel::slotsOf(Value firstBlock,
                                            Value rowBlocks) {
  Value endBlock = kb.minS(kb.add(firstBlock, kb.i32(range)), rowBlocks);
  Value stateBase = kb.mul(kb.extS64(slot), kb.i64(spec.capacity));
  Value first = kb.mul(firstBlock, kb.i32(bs));
  Value end = kb.minS(kb.mul(endBlock, kb.i32(bs)), n);
  return Slots{endBlock, first, end, stateBase};
}

/// A row that missed the cache last step will likely miss again (a
/// repeated position, the end of the capacity): its V and D lines go to L2
/// while `it` and the record load, which cuts a DRAM round trip from the
/// miss. Rows that hit skip it, so a hit reads nothing more.
void PredictKernel::prefetchMissedRow() {
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

/// The step's prediction with the cache: nothing to do when the previous
/// step predicted this one. With the hint, CTA 0 records whether this step
/// computes its prediction.
void PredictKernel::skipPredicted() {
  ok = kb.andI(ok, kb.not1(recordMatches(
                        kb, [&](int64_t f) { return cached[f]; }, p, n,
                        iteration)));
  if (hinted)
    kb.ifThen(kb.andI(kb.cmp(CmpIPredicate::eq, kb.blockIdX(), kb.i32(0)),
                      kb.cmp(CmpIPredicate::eq, kb.threadIdX(), kb.i32(0))),
              [&] {
                kb.storeVolatileAt(kb.select(ok, kb.i32(1), kb.i32(0)), hints,
                                   rowId);
              });
}

/// A reset (SPIN_SPEC §2) of the row's slot, before anything of the step
/// reads its state: V and D zeroed by all the row's CTAs together, then
/// `it`, the prediction-cache record and the buffered MTP rows by thread 0
/// of CTA 0. (Every CTA of a request's rows zeroes the same entries: MTP
/// rows repeat the same stores.)
void PredictKernel::resetRow() {
  resetSlotState(
      kb, {vState, dState, itState, resetPredAt, resetObsRows, paging.valid},
      slot, spec.capacity, threads, (MB + range - 1) / range);
}

/// The next step's record: for which step the cache holds scores (or
/// none), written by CTA 0.
void PredictKernel::recordNext(Value record, Value atBase) {
  kb.ifThen(kb.andI(kb.cmp(CmpIPredicate::eq, kb.blockIdX(), kb.i32(0)),
                    kb.cmp(CmpIPredicate::eq, kb.threadIdX(), kb.i32(0))),
            [&] {
              Value fields[] = {p, n, record, kb.i32(1)};
              for (int64_t f = 0; f < 4; ++f)
                kb.storeAt(kb.select(ok, fields[f], kb.i32(0)), predAt,
                           kb.add(atBase, kb.i32(f)));
            });
}

/// The pooled scores of the CTA's blocks into shared memory (maxPoolSlots),
/// then out to the cache or the row's keys.
void PredictKernel::poolCtaBlocks(Value firstBlock, Value rowBlocks) {
  Type i32 = kb.i32T();
  Value endBlock = kb.minS(kb.add(firstBlock, kb.i32(range)), rowBlocks);
  Value local = kb.sharedArray(spec.name + "_predict_S", i32, range);
  forEachThreadStrided(kb, kb.sub(endBlock, firstBlock), threads, [&](Value j) {
    kb.storeAt(kb.orderedKey(kb.f32(-INFINITY)), local, j);
  });
  kb.barrier();
  Slots mine = slotsOf(firstBlock, rowBlocks);
  Value firstSlot = mine.first, endSlot = mine.end;
  StateRows entries(kb, paging, slot, kb.divU(rowId, kb.i32(spec.rows)),
                    spec.capacity);
  Value valid = paging.paged() ? kb.loadAt(i32, paging.valid, slot) : Value();
  // Up to 8 slots' loads in flight per lane: 16, all of a CTA's slots at
  // once, measured slower (docs/benchmarks-kernels.md).
  const int64_t unroll =
      std::clamp<int64_t>(llvm::divideCeil(range * bs, threads), 4, 8);
  if (canPoolByFour(spec))
    maxPoolSlotsByFour(kb, vState, dState, entries, valid, p, firstSlot,
                       endSlot, firstBlock, local, bs, spec.capacity, warps,
                       warp, lane, kPoolGroupsInFlight);
  else
    maxPoolSlots(kb, vState, dState, entries, valid, p, firstSlot, endSlot,
                 firstBlock, local, bs, warps, warp, lane, unroll);
  kb.barrier();
  Value outBase =
      cache ? kb.add(kb.mul(slot, kb.i32(spec.stateBlocks())), firstBlock)
            : kb.add(kb.mul(rowId, kb.i32(MB)), firstBlock);
  forEachThreadStrided(kb, kb.sub(endBlock, firstBlock), threads, [&](Value j) {
    kb.storeAt(kb.loadAt(i32, local, j), keysOut, kb.add(outBase, j));
  });
}

} // namespace

LaunchShape mlir::spin::gpu_codegen::buildPredictKernel(
    OpBuilder &b, Location loc, gpu::GPUModuleOp module,
    const SelectKernelSpec &spec, bool next) {
  return PredictKernel(b, loc, module, spec, next).build();
}

namespace {

/// One select kernel while it is built: the spec's sizes, the kernel's
/// parameters and the request-wide values and shared arrays its phases
/// share. `build` runs the phases in the order of the generated code.
class SelectKernel : KernelPhases<SelectKernelSpec> {
public:
  SelectKernel(OpBuilder &b, Location loc, gpu::GPUModuleOp module,
               const SelectKernelSpec &spec)
      : KernelPhases(b, loc, module, spec),
        i32(kb.i32T()), i64(kb.i64T()), f32(kb.f32T()), i8(kb.i8T()),
        threads(spec.threads), warps(spec.threads / 32), MB(spec.maxBlocks),
        bs(spec.blockSize),
        rowsPerCta(spec.rowCtas > 1 ? 1 : spec.rows),
        maskCells(spec.rowCtas > 1 ? llvm::alignTo(MB, 4) : MB) {}
  LaunchShape build();

private:
  void declareKernel();
  void loadBeforeWait();
  void hashRequest();
  void allocateShared();
  std::pair<Value, Value> selectRow(Value r);
  Value rowIdOf(Value r);
  RowChecks rowChecks(Value r, Value &p, Value &n);
  Value rowCode(const RowChecks &checks);
  Value rowValue(ArrayRef<Value> loaded, Value input, Value rowId, Value r);
  SmallVector<Value> combineRows(
      Value live, Value firstRow, int64_t step,
      function_ref<std::pair<Value, Value>(Value)> row);
  void mergeRowMasks();
  void finishRequest(SmallVector<Value> rowsOk, Value refused);
  std::pair<Value, Value> followPages(Value ok, Value code, Value longest,
                                      Value refused);
  void markRow(Value rowId, Value p, Value n);
  void selectBlocks(Value rowId, Value p, Value n, Value rowBlocks);
  void predictScores(Value rowId, Value p, Value n, Value rowBlocks);
  void poolBlock(Value j, Value p, Value n, Value buffer);
  Value poolInSlotOrder(Value buffer, Value count);
  std::pair<Value, Value> budget(Value rowBlocks);
  void exploit(Value rowBlocks, Value last, Value count);
  void explore(Value rowBlocks, Value count);
  void writeList(Value requestOk, Value status);
  void reportSparsity();

  Type i32, i64, f32, i8;
  const int64_t threads, warps, MB, bs;
  /// The rows each CTA of a request selects (SelectKernelSpec::rowCtas).
  const int64_t rowsPerCta;
  /// The CTA's mask bytes: MB, padded to whole words (zeros) where the
  /// leader merges the masks a word at a time.
  const int64_t maskCells;

  gpu::GPUFuncOp func;
  Value positions, lengths, requestIds, slots, vState, dState, itState;
  Value blocksOut, countsOut, maskOut, skipOut, precomputed, predAt;
  Value sparsityOut, errors, layerParam, obsRows, numSlots, resetFlags;
  Value statusOut;
  StatePaging paging;
  /// The paged layout: the slot's `valid` count as the step found it.
  Value valid;
  std::optional<StateRows> entries;
  Value tid, lane, warp;
  /// The CTA's rank in the request's cluster, and whether it is rank 0,
  /// which merges the rows' masks and writes the request's results.
  Value rank, leader;
  Value request, slot, iteration, requestId, firstP, firstN;
  /// Every row's position and length, loaded before the wait (steps of 2
  /// to kMaxPortableCluster rows; longer ones load a row's at its turn).
  SmallVector<Value> rowPositions, rowLengths;
  /// The request's buffered MTP rows as the commit left them (loaded
  /// before the wait where the predict kernel precedes; 0 for a row the
  /// step resets, whose buffer that kernel drops), or null.
  Value buffered;
  /// The batch row's slot checks (loadBatchSlot).
  BatchSlot batchSlot;
  /// Whether the request is in its warm-up step, its rows' offset in V and
  /// D, and the exploration hash of its rows without the block.
  Value warmup, base;
  Value scoreKeys, mask, rowMask, pool;
  /// Each thread's run of blocks in the list, their mask bits and the
  /// request's selected-block count.
  int64_t run = 0;
  Value first, total;
  SmallVector<Value> bits;
  /// Whether the row is stepped at all (its slot, its commit).
  Value rowLive;
};

/// Builds the kernel, phase after phase (the rows one after the other,
/// then the request's list); returns its launch shape.
LaunchShape SelectKernel::build() {
  OpBuilder::InsertionGuard guard(b);
  declareKernel();
  tid = kb.threadIdX(), lane = kb.laneId(), warp = kb.warpId();
  rank = spec.rowCtas > 1 ? kb.blockIdX() : kb.i32(0);
  leader = spec.rowCtas > 1 ? kb.cmp(CmpIPredicate::eq, rank, kb.i32(0))
                            : kb.i1(true);
  loadBeforeWait();
  kb.ifThen(kb.andI(leader, kb.cmp(CmpIPredicate::eq, tid, kb.i32(0))),
            [&] { recordSlotError(kb, errors, batchSlot, request); });
  // A request whose buffered MTP rows are still there had its commit
  // refused (a bad accepted count, reported by the commit kernel): it is
  // skipped, so that its buffer and state stay as they were.
  Value live = batchSlot.live;
  Value refused = kb.i1(false);
  if (obsRows) {
    if (!buffered)
      buffered = kb.loadAt(i32, obsRows, slot);
    refused = kb.andI(live, kb.cmp(CmpIPredicate::sgt, buffered, kb.i32(0)));
    live = kb.andI(live, kb.not1(refused));
  }
  rowLive = live;
  hashRequest();
  allocateShared();
  // Whether every row passed its checks, the error code of the first that
  // did not, and the longest row's length.
  SmallVector<Value> rowsOk = combineRows(
      live, rank, spec.rowCtas, [&](Value r) { return selectRow(r); });
  if (spec.rowCtas > 1) {
    mergeRowMasks();
    // The leader's verdict on all rows (their errors were recorded by the
    // CTAs that selected them).
    rowsOk = combineRows(live, kb.i32(0), 1, [&](Value r) {
      Value p, n;
      RowChecks checks = rowChecks(r, p, n);
      return std::make_pair(rowCode(checks), n);
    });
  }
  kb.ifThen(leader, [&] { finishRequest(rowsOk, refused); });

  LaunchShape shape;
  if (spec.rowCtas > 1)
    shape.grid = {spec.rowCtas, spec.batch, 1};
  else
    shape.grid = {spec.batch, 1, 1};
  shape.blockThreads = threads;
  return shape;
}

/// Whether every row passed its checks, the error code of the first that
/// did not, and the longest length of those that passed, over rows
/// `firstRow`, `firstRow + step`, ... (`row(r)`: the row's code and length).
SmallVector<Value> SelectKernel::combineRows(
    Value live, Value firstRow, int64_t step,
    function_ref<std::pair<Value, Value>(Value)> row) {
  return kb.forLoopWith(
      firstRow, kb.i32(spec.rows), kb.i32(step), {live, kb.i32(0), kb.i32(0)},
      [&](Value r, ValueRange in) -> SmallVector<Value> {
        auto [code, n] = row(r);
        Value ok = kb.cmp(CmpIPredicate::eq, code, kb.i32(0));
        Value first = kb.cmp(CmpIPredicate::eq, in[1], kb.i32(0));
        return {kb.andI(in[0], ok), kb.select(first, code, in[1]),
                kb.select(ok, kb.maxS(in[2], n), in[2])};
      });
}

/// The union of the request's rows across its cluster: once every CTA has
/// marked its rows (a cluster barrier), the leader ORs its peers' masks
/// into its own through distributed shared memory, four bytes (0 or 1
/// each) a load; a second barrier keeps the peers' shared memory until it
/// has.
void SelectKernel::mergeRowMasks() {
  kb.clusterSync();
  kb.ifThen(leader, [&] {
    forEachThreadStrided(kb, kb.i32(maskCells / 4), threads, [&](Value w) {
      SmallVector<Value> words = {kb.loadAt(i32, mask, w)};
      for (int64_t peer = 1; peer < spec.rowCtas; ++peer)
        words.push_back(kb.load(
            i32, kb.gep(kb.clusterPeer(mask, kb.i32(peer)), i32, w), 4));
      Value merged = words.front();
      for (Value word : ArrayRef(words).drop_front())
        merged = kb.orI(merged, word);
      kb.storeAt(merged, mask, w);
    });
  });
  kb.clusterSync();
}

/// The request's results from its rows' verdict (`rowsOk`, combineRows) and
/// union mask, by the leader: the paged state, the list, the row status and
/// the sparsity report.
void SelectKernel::finishRequest(SmallVector<Value> rowsOk, Value refused) {
  Value refusedCode = kb.i32(ErrorBadAccepted);
  if (paging.paged()) {
    std::tie(rowsOk[0], rowsOk[1]) =
        followPages(rowsOk[0], rowsOk[1], rowsOk[2], refused);
    // A commit the replay refused for a state page outside the pool.
    refusedCode = kb.select(kb.cmp(CmpIPredicate::eq, rowsOk[1],
                                   kb.i32(ErrorBadStatePage)),
                            kb.i32(ErrorBadStatePage), refusedCode);
  }
  // The row status (docs/GPU-ABI.md, "Row status"): 0 stepped, -1 a
  // padding row, else the code of the error that skipped it.
  Value slotCode = kb.select(
      batchSlot.bad,
      kb.select(batchSlot.duplicate, kb.i32(ErrorDuplicateSlot),
                kb.i32(ErrorBadSlot)),
      kb.i32(-1));
  Value status = kb.select(
      batchSlot.live,
      kb.select(refused, refusedCode, rowsOk[1]), slotCode);
  writeList(rowsOk[0], status);
  if (spec.reportSparsity)
    reportSparsity();
}

/// The `gpu.func` and its parameters (those of disabled features absent),
/// in the order the launch plan passes them.
void SelectKernel::declareKernel() {
  Type ptr = kb.ptrT(Global);
  SmallVector<Type> params(11, ptr);
  if (spec.precomputed)
    params.push_back(ptr);
  if (spec.predictionCache)
    params.push_back(ptr);
  if (spec.reportSparsity)
    params.push_back(ptr);
  if (spec.committed)
    params.push_back(ptr);
  if (spec.fusedReset)
    params.push_back(ptr);
  params.push_back(ptr); // the row status
  params.push_back(ptr);
  params.push_back(kb.i32T());
  // The paged-state parameters come before the layer, which may be a
  // launch constant (an i32 after every operand).
  if (spec.paged.enabled())
    params.append({ptr, ptr, kb.i32T()});
  if (spec.layerParameter)
    params.push_back(kb.i32T());
  func = beginKernel(b, loc, module, spec.name, params, threads);
  if (spec.rowCtas > 1) {
    assert(spec.rowCtas == spec.rows && spec.rowCtas <= kMaxPortableCluster &&
           "a CTA per row, in a portable cluster");
    func->setAttr(NVVM::NVVMDialect::getClusterDimAttrName(),
                  b.getDenseI32ArrayAttr(
                      {static_cast<int32_t>(spec.rowCtas), 1, 1}));
  }
  // The sparse scoring kernel after this one reads only step inputs before
  // its wait (the row's length, queries, head weights and block-table row),
  // so its CTAs may start staging them while this kernel still waits for
  // the predict kernel. That pays where the predict grid fills the GPU;
  // with a smaller one, whose SMs the early CTAs then share, a cache miss
  // gets slower, so not there (the same `sm-count` test as the
  // prediction's prefetch).
  if (spec.triggersEarly())
    triggerDependentsBeforeWait(func);
  unsigned a = 0;
  positions = func.getArgument(a++), lengths = func.getArgument(a++);
  requestIds = func.getArgument(a++), slots = func.getArgument(a++);
  vState = func.getArgument(a++), dState = func.getArgument(a++);
  itState = func.getArgument(a++);
  blocksOut = func.getArgument(a++), countsOut = func.getArgument(a++);
  maskOut = func.getArgument(a++), skipOut = func.getArgument(a++);
  precomputed = spec.precomputed ? func.getArgument(a++) : Value();
  predAt = spec.predictionCache ? func.getArgument(a++) : Value();
  sparsityOut = spec.reportSparsity ? func.getArgument(a++) : Value();
  obsRows = spec.committed ? func.getArgument(a++) : Value();
  resetFlags = spec.fusedReset ? func.getArgument(a++) : Value();
  statusOut = func.getArgument(a++);
  errors = func.getArgument(a++);
  numSlots = func.getArgument(a++);
  if (spec.paged.enabled()) {
    paging = {spec.paged.page, spec.paged.width, func.getArgument(a),
              func.getArgument(a + 2), func.getArgument(a + 1)};
    a += 3;
  }
  layerParam = spec.layerParameter ? func.getArgument(a++) : Value();
}

/// Before the grid wait, while the kernel before ends: the step's inputs
/// (every row's position and length), `it` and the buffered MTP row count
/// when that kernel is the predict kernel (which writes block scores and
/// zeroes a resetting row's fields, whose values are then known here;
/// otherwise it may be an MTP commit or a reset, which write them), and the
/// request's empty mask (shared memory only: nothing to wait for).
void SelectKernel::loadBeforeWait() {
  OpBuilder::InsertionGuard beforeWait(b);
  setInsertionBeforeGridWait(b, func);
  request = spec.rowCtas > 1 ? kb.blockIdY() : kb.blockIdX();
  batchSlot = loadBatchSlot(kb, slots, request, numSlots, spec.batch);
  slot = batchSlot.slot;
  requestId = kb.loadAt(i64, requestIds, request, true);
  if (spec.rows == 1) {
    firstP = kb.loadAt(i32, positions, request, true);
    firstN = kb.loadAt(i32, lengths, request, true);
  } else if (spec.rows <= kMaxPortableCluster) {
    for (int64_t r = 0; r < spec.rows; ++r) {
      Value rowId = rowIdOf(kb.i32(r));
      rowPositions.push_back(kb.loadAt(i32, positions, rowId, true));
      rowLengths.push_back(kb.loadAt(i32, lengths, rowId, true));
    }
  }
  // A request the step resets (in the predict kernel, which this kernel
  // follows) starts at iteration 0, whatever `it` held before, with no
  // buffered rows.
  Value resetting =
      resetFlags ? rowResets(kb, batchSlot.live, resetFlags, request) : Value();
  if (spec.precomputed) {
    iteration = kb.loadAt(i64, itState, slot);
    if (obsRows)
      buffered = kb.loadAt(i32, obsRows, slot);
    if (resetting) {
      iteration = kb.select(resetting, kb.i64(0), iteration);
      if (buffered)
        buffered = kb.select(resetting, kb.i32(0), buffered);
    }
  }
  if (spec.predictionCache) {
    // A request whose block scores the previous step predicted (the
    // predict kernel's test, on the same record) needs nothing of the
    // predict kernel, which skips it: its CTA does not wait for it.
    Value predicted = predictedFor(kb, predAt, slot, firstP, firstN, iteration);
    if (resetting)
      predicted = kb.andI(predicted, kb.not1(resetting));
    skipGridWaitIf(b, func, predicted);
  }
  Value emptyMask = kb.sharedArray(spec.name + "_mask", i8, maskCells);
  forEachThreadStrided(kb, kb.i32(maskCells), threads, [&](Value j) {
    kb.storeAt(kb.constant(i8, 0), emptyMask, j);
  });
  kb.barrier();
}

/// The request's `it`, warm-up flag and state offset, and the exploration
/// hash of SPIN_SPEC §3.7 up to the block:
/// mix(mix(mix(mix(seed) ^ request) ^ layer) ^ it) (the seed's mix is a
/// compile-time constant).
void SelectKernel::hashRequest() {
  if (!spec.precomputed)
    iteration = kb.loadAt(i64, itState, slot);
  warmup = kb.cmp(CmpIPredicate::eq, iteration, kb.i64(0));
  entries.emplace(kb, paging, slot, request, spec.capacity);
  if (paging.paged())
    valid = kb.loadAt(i32, paging.valid, slot);
  // A kernel shared by several layers takes its layer as a parameter.
  if (layerParam)
    base = ::spin::runtime::explorationBase<CodeBuilder, Value, Value>(
        kb, kb.u64(::spin::runtime::mix(spec.seed)), requestId,
        kb.extU64(layerParam), iteration);
  else
    base = ::spin::runtime::explorationBase<CodeBuilder, Value, uint64_t>(
        kb, kb.u64(::spin::runtime::mix(spec.seed)), requestId,
        static_cast<uint64_t>(spec.layer), iteration);
}

/// The row's block scores (as order-preserving keys), the CTA's mask, the
/// row's own mask (a CTA of a single row selects into its mask directly: no
/// union) and each warp's pooling buffer.
void SelectKernel::allocateShared() {
  scoreKeys = kb.sharedArray(spec.name + "_S", i32, MB);
  mask = kb.sharedArray(spec.name + "_mask", i8, maskCells);
  rowMask = rowsPerCta == 1 ? mask
                            : kb.sharedArray(spec.name + "_row_mask", i8, MB);
  pool = kb.sharedArray(spec.name + "_pool", f32, warps * bs);
}

/// Row `r`'s entry of a step input (`rowId` its index there): from the
/// values loaded before the wait where there are (`loaded`), else loaded.
Value SelectKernel::rowValue(ArrayRef<Value> loaded, Value input, Value rowId,
                             Value r) {
  if (loaded.empty())
    return kb.loadAt(i32, input, rowId, true);
  Value value = loaded.front();
  for (auto [k, v] : llvm::enumerate(loaded.drop_front()))
    value = kb.select(
        kb.cmp(CmpIPredicate::eq, r, kb.i32(static_cast<int64_t>(k) + 1)), v,
        value);
  return value;
}

/// The index of the request's row `r` in the step's rows.
Value SelectKernel::rowIdOf(Value r) {
  return kb.add(kb.mul(request, kb.i32(spec.rows)), r);
}

/// Row `r`'s checks (SPIN_SPEC §2: N <= p + 1 <= C, and N within the block
/// table), its position `p` and length `n`.
RowChecks SelectKernel::rowChecks(Value r, Value &p, Value &n) {
  Value rowId = rowIdOf(r);
  p = firstP ? firstP : rowValue(rowPositions, positions, rowId, r);
  n = firstN ? firstN : rowValue(rowLengths, lengths, rowId, r);
  return checkRow(kb, p, n, spec.capacity, MB * bs);
}

/// 0 for a row that passed its checks, else the code of the first it
/// failed.
Value SelectKernel::rowCode(const RowChecks &checks) {
  return kb.select(checks.lengthOk,
                   kb.select(checks.positionOk, kb.i32(0),
                             kb.i32(ErrorBadPosition)),
                   kb.i32(ErrorBadLength));
}

/// Row `r` of the request: its checks (errors recorded by thread 0) and,
/// when used, its selection OR-ed into the CTA's mask. Returns 0 if it
/// passed, else the code of the check it failed, and the row's length.
std::pair<Value, Value> SelectKernel::selectRow(Value r) {
  Value rowId = rowIdOf(r);
  Value p, n;
  RowChecks checks = rowChecks(r, p, n);
  Value lengthOk = checks.lengthOk, positionOk = checks.positionOk;
  kb.ifThen(kb.andI(rowLive, kb.cmp(CmpIPredicate::eq, tid, kb.i32(0))), [&] {
    kb.ifThen(kb.not1(lengthOk), [&] {
      recordError(kb, errors, ErrorBadLength, n, request, r);
    });
    kb.ifThen(kb.andI(lengthOk, kb.not1(positionOk)), [&] {
      recordError(kb, errors, ErrorBadPosition, p, request, r);
    });
  });
  Value ok = kb.andI(lengthOk, positionOk);
  Value used = kb.andI(ok, rowLive);
  if (spec.rowZeroOnly)
    used = kb.andI(used, kb.orI(warmup, kb.cmp(CmpIPredicate::eq, r,
                                               kb.i32(0))));
  kb.ifThen(used, [&] { markRow(rowId, p, n); });
  return {rowCode(checks), n};
}

/// The paged layout (docs/GPU-ABI.md, "Paged state") for a request whose
/// rows passed their checks (`ok`; `code` the first failure otherwise):
/// every state page its longest row (`longest` slots) sees must be one of
/// the pool's, else the request is reported (ErrorBadStatePage) and
/// skipped. Then its entries from `valid` (0 after a reset) up to
/// `longest` are zeroed, since their pages may hold an earlier owner's
/// state, and `valid` moves to `longest`. The pages of a request whose
/// commit was `refused` are checked too, for its status. Returns the new
/// `ok` and code.
std::pair<Value, Value> SelectKernel::followPages(Value ok, Value code,
                                                  Value longest,
                                                  Value refused) {
  Value checked = kb.orI(ok, refused);
  Value bad = kb.not1(statePagesInPool(
      kb, paging, request, kb.select(checked, longest, kb.i32(0)), threads,
      spec.name + "_scan", errors));
  Value stepped = kb.andI(ok, kb.not1(bad));
  kb.ifThen(stepped, [&] {
    Value from = kb.minS(valid, longest);
    forEachThreadStrided(kb, kb.sub(longest, from), threads, [&](Value k) {
      Value at = entries->index(kb.add(from, k));
      kb.storeAt(kb.f32(0.0), vState, at);
      kb.storeAt(kb.f32(0.0), dState, at);
    });
    // Every thread read `valid` before the scan's barriers.
    kb.ifThen(kb.cmp(CmpIPredicate::eq, tid, kb.i32(0)),
              [&] { kb.storeAt(longest, paging.valid, slot); });
  });
  return {stepped,
          kb.select(kb.andI(checked, bad), kb.i32(ErrorBadStatePage), code)};
}

/// A used row's mask: every block in warm-up, else its selection; then the
/// union into the request's mask.
void SelectKernel::markRow(Value rowId, Value p, Value n) {
  Value rowBlocks =
      kb.minS(kb.divU(kb.add(n, kb.i32(bs - 1)), kb.i32(bs)), kb.i32(MB));
  forEachThreadStrided(kb, rowBlocks, threads, [&](Value j) {
    kb.storeAt(kb.select(warmup, kb.constant(i8, 1), kb.constant(i8, 0)),
               rowMask, j);
  });
  kb.ifThen(kb.andI(kb.not1(warmup),
                    kb.cmp(CmpIPredicate::sgt, rowBlocks, kb.i32(0))),
            [&] { selectBlocks(rowId, p, n, rowBlocks); });
  kb.barrier();
  if (rowsPerCta > 1) {
    // Union into the CTA's mask.
    forEachThreadStrided(kb, rowBlocks, threads, [&](Value j) {
      Value bit = kb.orI(kb.loadAt(i8, mask, j), kb.loadAt(i8, rowMask, j));
      kb.storeAt(bit, mask, j);
    });
    kb.barrier();
  }
}

/// SPIN_SPEC §3.2-3.7 for one row after warm-up: the predicted block
/// scores, the budget, the forced first and last blocks, the exploit set,
/// then the exploration set among the rest.
void SelectKernel::selectBlocks(Value rowId, Value p, Value n,
                                Value rowBlocks) {
  predictScores(rowId, p, n, rowBlocks);
  kb.barrier();
  auto [explored, exploitCount] = budget(rowBlocks);
  Value last = kb.sub(rowBlocks, kb.i32(1));
  kb.ifThen(kb.cmp(CmpIPredicate::eq, tid, kb.i32(0)), [&] {
    kb.storeAt(kb.constant(i8, 1), rowMask, kb.i32(0));
    kb.storeAt(kb.constant(i8, 1), rowMask, last);
  });
  kb.barrier();
  exploit(rowBlocks, last, exploitCount);
  explore(rowBlocks, explored);
}

/// The predicted block scores (SPIN_SPEC §3.2-3.3) as order-preserving u32
/// keys in `scoreKeys` (what the exploit select ranks by): from the predict
/// kernel (same keys, many CTAs per row), by max pooling with all warps,
/// or a warp per block (mean and top4 pooling, and block sizes
/// maxPoolSlots cannot split into warps).
void SelectKernel::predictScores(Value rowId, Value p, Value n,
                                 Value rowBlocks) {
  if (precomputed) {
    Value keysBase = spec.predictionCache
                         ? kb.mul(slot, kb.i32(spec.stateBlocks()))
                         : kb.mul(rowId, kb.i32(MB));
    forEachThreadStrided(kb, rowBlocks, threads, [&](Value j) {
      kb.storeAt(kb.loadAt(i32, precomputed, kb.add(keysBase, j)), scoreKeys,
                 j);
    });
  } else if (canPredictByMax(spec)) {
    forEachThreadStrided(kb, rowBlocks, threads, [&](Value j) {
      kb.storeAt(kb.orderedKey(kb.f32(-INFINITY)), scoreKeys, j);
    });
    kb.barrier();
    maxPoolSlots(kb, vState, dState, *entries, valid, p, kb.i32(0), n,
                 kb.i32(0), scoreKeys, bs, warps, warp, lane);
  } else {
    Value buffer = kb.gep(pool, f32, kb.mul(warp, kb.i32(bs)));
    kb.forLoop(warp, rowBlocks, kb.i32(warps),
               [&](Value j) { poolBlock(j, p, n, buffer); });
  }
}

/// Block `j`'s pooled prediction by one warp (all its lanes call this):
/// each lane takes every 32nd slot's max(V[i], D[p - i]); max pooling
/// reduces by shuffles, the others go through the warp's `buffer` to lane
/// 0, which pools in slot order.
void SelectKernel::poolBlock(Value j, Value p, Value n, Value buffer) {
  Value firstSlot = kb.mul(j, kb.i32(bs));
  Value count = kb.minS(kb.i32(bs), kb.sub(n, firstSlot));
  Value local = kb.f32(-INFINITY);
  for (int64_t q = 0; q < (bs + 31) / 32; ++q) {
    Value k = kb.add(lane, kb.i32(q * 32));
    Value inBlock = kb.cmp(CmpIPredicate::slt, k, count);
    Value zhat = kb.ifThenElse(
        {f32}, inBlock,
        [&]() -> SmallVector<Value> {
          Value i = kb.add(firstSlot, k);
          Value vi = loadStateEntry(kb, vState, *entries, valid, i);
          Value di = loadStateEntry(kb, dState, *entries, valid, kb.sub(p, i));
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
    // Lane 0 reads what the other lanes stored, and the next block's stores
    // must wait until it has: the warp's lanes are not in lockstep.
    kb.syncWarp();
    pooled = kb.ifThenElse(
        {f32}, kb.cmp(CmpIPredicate::eq, lane, kb.i32(0)),
        [&]() -> SmallVector<Value> {
          return {poolInSlotOrder(buffer, count)};
        },
        [&]() -> SmallVector<Value> { return {kb.f32(0.0)}; })[0];
    kb.syncWarp();
  }
  kb.ifThen(kb.cmp(CmpIPredicate::eq, lane, kb.i32(0)), [&] {
    kb.storeAt(kb.orderedKey(pooled), scoreKeys, j);
  });
}

/// Mean or top4 pooling of the `count` predictions in `buffer`, in slot
/// order, by CodeBuilder's pooling sums (as the CPU path).
Value SelectKernel::poolInSlotOrder(Value buffer, Value count) {
  SmallVector<Value> sums = kb.forLoopWith(
      kb.i32(0), count, kb.i32(1), kb.poolSumsStart(),
      [&](Value k, ValueRange it) -> SmallVector<Value> {
        return kb.poolSumsTake(it, kb.loadAt(f32, buffer, k));
      });
  return kb.poolSumsFinish(spec.pooling, sums, count);
}

/// The row's budget (SPIN_SPEC §3.4-3.6) in `rowBlocks` blocks: the
/// explored and the exploited block counts besides the forced ones. The
/// same double-precision arithmetic as the CPU path (ceil without
/// libdevice), so that both pick the same counts.
std::pair<Value, Value> SelectKernel::budget(Value rowBlocks) {
  Value rowBlocks64 = kb.extS64(rowBlocks);
  Value budget64 = ::spin::runtime::blockBudgetOf<CodeBuilder, Value, Value>(
      kb, rowBlocks64, bs, spec.topk, spec.sparsity);
  Value budget = kb.trunc32(budget64);
  Value forced =
      ::spin::runtime::forcedBlocksOf<CodeBuilder, Value>(kb, rowBlocks);
  return ::spin::runtime::budgetSplitOf<CodeBuilder, Value, Value>(
      kb, budget, budget64, forced, spec.explore);
}

/// Exploit: the `count` largest scores among the non-forced blocks (radix
/// select, ties to the lower block), marked in the row's mask.
void SelectKernel::exploit(Value rowBlocks, Value last, Value count) {
  kb.ifThen(kb.cmp(CmpIPredicate::sgt, count, kb.i32(0)), [&] {
    auto keyOf = [&](Value j) -> std::pair<Value, Value> {
      Value key = kb.loadAt(i32, scoreKeys, j);
      Value eligible = kb.andI(kb.cmp(CmpIPredicate::sge, j, kb.i32(1)),
                               kb.cmp(CmpIPredicate::slt, j, last));
      return {eligible, key};
    };
    RadixSelection chosen = selectLargest(kb, spec.name + "_exploit", i32,
                                          rowBlocks, count, threads, keyOf);
    forEachThreadStrided(kb, rowBlocks, threads, [&](Value j) {
      auto [eligible, key] = keyOf(j);
      kb.ifThen(isSelected(kb, chosen, eligible, key, j), [&] {
        kb.storeAt(kb.constant(i8, 1), rowMask, j);
      });
    });
    kb.barrier();
  });
}

/// Explore (SPIN_SPEC §3.7): the `count` blocks of smallest rank among
/// those not yet taken. The largest complement of the rank is selected;
/// every block is decided before any is marked, since marking changes
/// eligibility.
void SelectKernel::explore(Value rowBlocks, Value count) {
  kb.ifThen(kb.cmp(CmpIPredicate::sgt, count, kb.i32(0)), [&] {
    auto keyOf = [&](Value j) -> std::pair<Value, Value> {
      Value taken = kb.cmp(CmpIPredicate::ne, kb.loadAt(i8, rowMask, j),
                           kb.constant(i8, 0));
      Value rank = ::spin::runtime::explorationRankOf<CodeBuilder, Value>(
          kb, base, kb.extS64(j));
      return {kb.not1(taken), kb.xorI(rank, kb.i64(-1))};
    };
    RadixSelection chosen = selectLargest(kb, spec.name + "_explore", i64,
                                          rowBlocks, count, threads, keyOf);
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
      kb.ifThen(picks[q],
                [&] { kb.storeAt(kb.constant(i8, 1), rowMask, j); });
    }
    kb.barrier();
  });
}

/// The request's mask and the ascending list of its selected blocks. Each
/// thread owns a contiguous run of blocks, so an exclusive scan of the
/// per-thread counts gives every selected block its list position. A
/// request with a bad row selects nothing (and its state is untouched).
/// Thread 0 also writes the row's `status`.
void SelectKernel::writeList(Value requestOk, Value status) {
  run = (MB + threads - 1) / threads;
  first = kb.mul(tid, kb.i32(run));
  Value own = kb.i32(0);
  for (int64_t q = 0; q < run; ++q) {
    Value j = kb.add(first, kb.i32(q));
    Value inRange =
        kb.andI(requestOk, kb.cmp(CmpIPredicate::slt, j, kb.i32(MB)));
    Value bit = kb.ifThenElse(
        {i8}, inRange,
        [&]() -> SmallVector<Value> { return {kb.loadAt(i8, mask, j)}; },
        [&]() -> SmallVector<Value> { return {kb.constant(i8, 0)}; })[0];
    bits.push_back(bit);
    own = kb.add(own, kb.zext(bit, i32));
  }
  auto [offset, count] =
      blockExclusiveScan(kb, spec.name + "_scan", own, threads);
  total = count;
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
    // The EMA update and the MTP buffering skip a rejected request.
    kb.storeAt(kb.select(requestOk, kb.i32(0), kb.i32(1)), skipOut, request);
    kb.storeAt(status, statusOut, request);
  });
}

/// The realized block sparsity of each row, on the union of the request's
/// rows: 1 - selected / row blocks (0 for an empty row).
void SelectKernel::reportSparsity() {
  for (int64_t r = 0; r < spec.rows; ++r) {
    Value rowId = rowIdOf(kb.i32(r));
    Value n = firstN ? firstN : rowValue(rowLengths, lengths, rowId, kb.i32(r));
    n = kb.select(rowLive, n, kb.i32(0)); // a padding row reports 0
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
        mine = kb.add(mine,
                      kb.select(counted, kb.zext(bits[q], i32), kb.i32(0)));
      }
      selected =
          blockExclusiveScan(kb, spec.name + "_scan", mine, threads).second;
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

} // namespace

LaunchShape mlir::spin::gpu_codegen::buildSelectKernel(
    OpBuilder &b, Location loc, gpu::GPUModuleOp module,
    const SelectKernelSpec &spec) {
  return SelectKernel(b, loc, module, spec).build();
}
