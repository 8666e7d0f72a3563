//===- ObservationKernels.cpp - MTP buffering and commit replay -----------===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
// The GPU side of SPIN_SPEC §4 and §7.2: an MTP verification step folds
// its row 0 into V and D and buffers the other rows' observations in the
// request's pending-observation fields (docs/Runtime-ABI.md), and the
// request's next step replays the accepted draft rows in order. Both match
// the CPU path's spin.observe / spin.commit lowering (lib/Conversion/
// SpinToSCF) bit for bit.
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

namespace {
/// Entries a thread of the observe kernel takes at a time (one group of
/// four consecutive entries, or four single ones).
constexpr int64_t kObserveUnroll = 4;
/// Groups of consecutive entries (each a V and a D cell) a thread of the
/// commit replay folds at a time when a group is a single entry.
constexpr int64_t kCommitUnroll = 2;

/// The commit replay's group: the most consecutive entries (4, 2 or 1)
/// whose V, D and score cells move as one vector (slotRunsAreVectors).
int64_t commitGroup(const CommitKernelSpec &spec) {
  for (int64_t g : {4, 2})
    if (slotRunsAreVectors(g, spec.capacity, spec.blockSize, spec.paged))
      return g;
  return 1;
}

/// What a batch row's commit replays, as both commit kernels see it: its
/// buffered rows (none for a row that is not live or that the step resets
/// afterwards), its accepted count, and whether the count may be committed.
struct CommitRow {
  Value buffered, accepted, ok;
  /// The last committed row a: the accepted count clamped to
  /// [0, buffered - 1], so that no row past the buffer is read even for a
  /// count the kernels refuse.
  Value last(KernelBuilder &kb) const {
    return kb.minS(kb.maxS(accepted, kb.i32(0)),
                   kb.sub(buffered, kb.i32(1)));
  }
};
} // namespace

/// Stores the `touched` cells of a group of `values.size()` consecutive f32
/// cells at `at`: one vector when `all` of them are touched, else each
/// touched cell; nothing where `guard` (when given) does not hold.
static void storeTouchedCells(KernelBuilder &kb, ArrayRef<Value> values,
                              ArrayRef<Value> touched, Value all, Value at,
                              Value guard = Value()) {
  auto guarded = [&](Value cond) { return guard ? kb.andI(guard, cond) : cond; };
  const int64_t group = values.size();
  if (group == 1) {
    kb.ifThen(guarded(touched.front()),
              [&] { kb.store(values.front(), at, 4); });
    return;
  }
  Type f32 = kb.f32T();
  kb.ifThen(guarded(all), [&] {
    kb.store(kb.vectorOf(kb.vecT(f32, group), values), at, 4 * group);
  });
  kb.ifThen(guarded(kb.not1(all)), [&] {
    for (auto [j, value] : llvm::enumerate(values))
      kb.ifThen(touched[j], [&, j = j, value = value] {
        kb.store(value, kb.gep(at, f32, kb.i32(j)), 4);
      });
  });
}

/// The commit of batch row `request` (slot checks in `batchSlot`; reset
/// flags only with SelectKernelSpec::fusedReset). A count is good when
/// 0 <= accepted < buffered, or nothing is buffered; with mtp_update = row0
/// it is not used, hence not read or checked.
static CommitRow commitRowOf(KernelBuilder &kb, const CommitKernelSpec &spec,
                             const BatchSlot &batchSlot, Value request,
                             Value accepted, Value obsRows, Value resetFlags) {
  Type i32 = kb.i32T();
  // A row the step resets afterwards drops its buffer instead: nothing to
  // replay.
  Value replays = batchSlot.live;
  if (resetFlags)
    replays = kb.andI(replays,
                      kb.cmp(CmpIPredicate::eq,
                             kb.loadAt(kb.i8T(), resetFlags, request, true),
                             kb.constant(kb.i8T(), 0)));
  CommitRow row;
  row.buffered = kb.select(
      replays,
      kb.minS(kb.loadAt(i32, obsRows, batchSlot.slot), kb.i32(spec.rows)),
      kb.i32(0));
  if (spec.rowZeroOnly) {
    row.accepted = kb.i32(0);
    row.ok = kb.i1(true);
    return row;
  }
  row.accepted = kb.loadAt(i32, accepted, request, true);
  Value inRange =
      kb.andI(kb.cmp(CmpIPredicate::sge, row.accepted, kb.i32(0)),
              kb.cmp(CmpIPredicate::slt, row.accepted, row.buffered));
  row.ok = kb.orI(kb.cmp(CmpIPredicate::sle, row.buffered, kb.i32(0)), inRange);
  return row;
}

namespace {
/// What the observe kernel's entries need of their request's rows.
struct ObservedRows {
  SmallVector<Value> length;   ///< N_r
  SmallVector<Value> scoreRow; ///< row r's first score (i64)
  Value p0, decay, keep;
};

/// The observe kernel's buffers that its entries read or write.
struct ObservedBuffers {
  Value scores, blocks, obsZ, vState, dState;
};
} // namespace

/// The observe kernel's entries 0 .. total - 1 of a request (its selected
/// blocks' slots in list order), spread over its CTAs in groups of `group`
/// consecutive entries (slotRunsAreVectors: a group lies in one block, its
/// slots are consecutive and their V cells, scores and buffered scores
/// aligned vectors), kObserveUnroll / group groups a thread at a time.
/// Every load of a round (the block-list entry once a group, each row's
/// scores, then row 0's V and D cells) comes before any store: the kernel
/// is bound by the latency of these loads. Entries past the end load the
/// last group and store nothing. Distinct entries are distinct slots, so no
/// two threads touch the same V or D cell (row 0's offsets p_0 - i are
/// distinct too).
static void observeEntries(KernelBuilder &kb, const ObserveKernelSpec &spec,
                           const ObservedBuffers &buf,
                           const StateRows &entries, const ObservedRows &rows,
                           Value request, Value total) {
  Type i32 = kb.i32T(), f32 = kb.f32T();
  const int64_t bs = spec.blockSize, mb = spec.maxBlocks;
  const int64_t nRows = spec.rows;
  const int64_t group =
      slotRunsAreVectors(4, spec.capacity, bs, spec.paged) ? 4 : 1;
  const int64_t unroll = std::max<int64_t>(1, kObserveUnroll / group);
  Type vec = group == 1 ? f32 : kb.vecT(f32, group);
  auto loadGroup = [&](Value at) {
    Value loaded = kb.load(vec, at, 4 * group);
    SmallVector<Value> cells;
    for (int64_t j = 0; j < group; ++j)
      cells.push_back(group == 1 ? loaded : kb.extract(loaded, j));
    return cells;
  };
  // The cells where `mask` holds.
  auto storeGroup = [&](ArrayRef<Value> values, ArrayRef<Value> mask,
                        Value at) {
    Value all = mask.front();
    for (Value m : mask.drop_front())
      all = kb.andI(all, m);
    storeTouchedCells(kb, values, mask, all, at);
  };

  Value start = kb.mul(
      kb.add(kb.mul(kb.blockIdX(), kb.i32(spec.threads)), kb.threadIdX()),
      kb.i32(group));
  const int64_t stride = spec.threads * spec.ctasPerRequest * group;
  Value lastGroup = kb.sub(total, kb.i32(group));
  Value bsV = kb.i32(bs);
  // Row 0's V cells of a group no entry of which folds: those of p_0's
  // group, inside the capacity (a vector's worth below it).
  Value spareSlot = kb.mul(kb.divU(rows.p0, kb.i32(group)), kb.i32(group));
  kb.forLoop(start, total, kb.i32(stride * unroll), [&](Value first) {
    SmallVector<Value> inRange, slot0;
    SmallVector<SmallVector<Value>> slotOf(unroll), folds(unroll),
        oldV(unroll), oldD(unroll), dAts(unroll);
    SmallVector<SmallVector<SmallVector<Value>>> z(unroll);
    SmallVector<Value> vAts;
    for (int64_t u = 0; u < unroll; ++u) {
      Value e = kb.add(first, kb.i32(u * stride));
      inRange.push_back(kb.cmp(CmpIPredicate::slt, e, total));
      Value at = kb.minS(e, lastGroup);
      Value block = kb.loadAt(
          i32, buf.blocks,
          kb.add(kb.mul(request, kb.i32(mb)), kb.divU(at, bsV)), true);
      slot0.push_back(kb.add(kb.mul(block, bsV), kb.remU(at, bsV)));
      for (int64_t r = 0; r < nRows; ++r)
        z[u].push_back(loadGroup(kb.gep(
            buf.scores, f32, kb.add(rows.scoreRow[r], kb.extS64(at)))));
    }
    for (int64_t u = 0; u < unroll; ++u) {
      // Row 0's scored slots below N_0 with a finite score (§3.10), as
      // the commit replay tested them: the length test does not rely on
      // how the scoring fills the slots past a row's length.
      Value any = kb.i1(false);
      for (int64_t j = 0; j < group; ++j) {
        Value s = kb.add(slot0[u], kb.i32(j));
        slotOf[u].push_back(s);
        Value finite =
            kb.cmpF(CmpFPredicate::OLT, kb.absF(z[u][0][j]), kb.f32(INFINITY));
        Value seen = kb.cmp(CmpIPredicate::slt, s, rows.length[0]);
        folds[u].push_back(kb.andI(inRange[u], kb.andI(seen, finite)));
        any = kb.orI(any, folds[u].back());
        Value i = kb.select(folds[u].back(), s, rows.p0);
        dAts[u].push_back(
            kb.gep(buf.dState, f32, entries.index(kb.sub(rows.p0, i))));
        oldD[u].push_back(kb.load(f32, dAts[u].back(), 4));
      }
      vAts.push_back(kb.gep(
          buf.vState, f32, entries.index(kb.select(any, slot0[u], spareSlot))));
      oldV[u] = loadGroup(vAts.back());
    }
    for (int64_t u = 0; u < unroll; ++u) {
      SmallVector<Value> newV, newD;
      for (int64_t j = 0; j < group; ++j) {
        Value cz = kb.mul(rows.keep, z[u][0][j]);
        newV.push_back(kb.emaFold(oldV[u][j], rows.decay, cz));
        newD.push_back(kb.emaFold(oldD[u][j], rows.decay, cz));
      }
      storeGroup(newV, folds[u], vAts[u]);
      for (int64_t j = 0; j < group; ++j)
        kb.ifThen(folds[u][j], [&] { kb.store(newD[j], dAts[u][j], 4); });
      // The slots of a block's tail past the capacity (where the block size
      // does not divide it) are no row's, N_r <= C: clamped, their buffer
      // address stays in the request's cells.
      Value at = kb.minS(slot0[u], kb.i32(spec.capacity - group));
      for (int64_t r = 1; r < nRows; ++r) {
        SmallVector<Value> seen;
        for (int64_t j = 0; j < group; ++j)
          seen.push_back(kb.andI(
              inRange[u],
              kb.cmp(CmpIPredicate::slt, slotOf[u][j], rows.length[r])));
        storeGroup(z[u][r], seen,
                   kb.gep(buf.obsZ, f32,
                          entries.index(at, kb.i32(r - 1), nRows - 1)));
      }
    }
  });
}

LaunchShape
mlir::spin::gpu_codegen::buildObserveKernel(OpBuilder &b, Location loc,
                                            gpu::GPUModuleOp module,
                                            const ObserveKernelSpec &spec) {
  KernelBuilder kb(b, loc, module);
  Type ptr = kb.ptrT(Global), i8 = kb.i8T(), i32 = kb.i32T();
  SmallVector<Type> params(15, ptr);
  if (spec.paged.enabled())
    params.append({ptr, kb.i32T()});
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
  Value vState = func.getArgument(a++), dState = func.getArgument(a++);
  StatePaging paging;
  if (spec.paged.enabled())
    paging = {spec.paged.page, spec.paged.width, func.getArgument(a),
              func.getArgument(a + 1), Value()};

  const int64_t rows = spec.rows, bs = spec.blockSize, mb = spec.maxBlocks;
  Value request = kb.blockIdY();
  Value tid = kb.threadIdX();
  Value slot = kb.loadAt(i32, slots, request, true);
  Value slot64 = kb.extS64(slot);
  Value requestRows = kb.mul(request, kb.i32(rows));

  // Buffered only when scoring met no bad page and every row is valid (the
  // select kernel reported the bad ones and selected nothing). A request the
  // select kernel skipped (its slot, its refused commit, a bad row) is not
  // touched at all: its slot may be a padding row's -1.
  Value stepped =
      kb.cmp(CmpIPredicate::eq, kb.loadAt(i32, skip, request, true), kb.i32(0));
  Value ok = stepped;
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
  kb.ifThen(kb.andI(stepped, kb.andI(firstCta, kb.cmp(CmpIPredicate::eq, tid,
                                                       kb.i32(0)))),
            [&] {
              kb.storeAt(kb.select(ok, kb.i32(rows), kb.i32(0)), obsRows,
                         slot64);
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
    // Row 0 folded into V and D (SPIN_SPEC §3.10 with the commit's weights),
    // the other rows' scores of the scored slots they see (i < N_r) buffered,
    // by slot: observeEntries.
    Value total = kb.mul(kb.loadAt(i32, counts, request, true), kb.i32(bs));
    ObservedRows observed;
    for (int64_t r = 0; r < rows; ++r) {
      Value rowId = kb.add(requestRows, kb.i32(r));
      observed.length.push_back(kb.loadAt(i32, lengths, rowId, true));
      observed.scoreRow.push_back(kb.mul(kb.extS64(rowId), kb.i64(mb * bs)));
    }
    observed.p0 = kb.loadAt(i32, positions, requestRows, true);
    std::tie(observed.decay, observed.keep) = kb.emaWeights(spec.decay);
    StateRows entries(kb, paging, slot, request, spec.capacity);
    observeEntries(kb, spec, {scores, blocks, obsZ, vState, dState}, entries,
                   observed, request, total);
  });

  LaunchShape shape;
  shape.grid = {spec.ctasPerRequest, spec.batch, 1};
  shape.blockThreads = spec.threads;
  return shape;
}

namespace {

/// A row of the observation buffer as the replay reads it: its position,
/// length, whether it passes the row checks, and its place in the buffer.
struct ReplayRow {
  Value p, n, valid;
  int64_t index = 0;
};

/// Row `r` of the buffer whose first row is `rowBase` (obs_pos and obs_len
/// have `spec.rows` rows a slot). Rows were checked when buffered, but a bad
/// one could address outside V and D: it is marked invalid.
ReplayRow bufferedRow(KernelBuilder &kb, const CommitKernelSpec &spec,
                      Value obsPos, Value obsLen, Value rowBase, Value r) {
  Value at = kb.add(rowBase, kb.extS64(r));
  Value p = kb.loadAt(kb.i32T(), obsPos, at);
  Value n = kb.loadAt(kb.i32T(), obsLen, at);
  RowChecks checks = checkRow(kb, p, n, spec.capacity, spec.capacity);
  return {p, n, kb.andI(checks.lengthOk, checks.positionOk)};
}

/// 1 + p of a valid `row`, else 0: the entries of V and D its commit reaches.
Value reachOfRow(KernelBuilder &kb, const ReplayRow &row) {
  return kb.select(row.valid, kb.add(row.p, kb.i32(1)), kb.i32(0));
}

/// The commit replay kernel (SPIN_SPEC §4) while it is built: the spec, the
/// kernel's parameters and the request's values its phases share. `build`
/// runs the phases in the order of the generated code.
class CommitReplayKernel : KernelPhases<CommitKernelSpec> {
public:
  CommitReplayKernel(OpBuilder &b, Location loc, gpu::GPUModuleOp module,
                     const CommitKernelSpec &spec)
      : KernelPhases(b, loc, module, spec) {}

  /// Emits the kernel and returns its launch shape.
  LaunchShape build();

private:
  void declareKernel();
  void replayRequest(const CommitRow &commit);
  ReplayRow rowOf(Value r);
  Value reachOf();
  void replayGroup(Value x0, Value inRange);
  SmallVector<Value> loadGroupIf(Value cond, Value at);
  void storeGroup(ArrayRef<Value> touched, Value all, ArrayRef<Value> values,
                  Value at, Value x0);

  // Parameters.
  gpu::GPUFuncOp func;
  Value accepted, slots, vState, dState, obsRows, obsPos, obsLen, obsMask, obsZ;
  Value errors, numSlots, resetFlags;
  StatePaging paging;
  // The request's values.
  Value request, slot, slot64, count, rowBase, decay, keep, maskBase, bsV;
  Value reach, stride;
  int64_t group = 1;
  std::optional<StateRows> entries;
  /// The replayed rows, read once per thread (those at or past `count`
  /// marked invalid), so that an entry's checks load no row fields.
  SmallVector<ReplayRow> replayed;
};

} // namespace

LaunchShape CommitReplayKernel::build() {
  OpBuilder::InsertionGuard guard(b);
  declareKernel();
  request = kb.blockIdY();
  BatchSlot batchSlot = loadBatchSlotBeforeWait(
      kb, b, func, slots, [&] { return kb.blockIdY(); }, numSlots, spec.batch);
  slot = batchSlot.slot;
  slot64 = kb.extS64(slot);
  CommitRow row = commitRowOf(kb, spec, batchSlot, request, accepted, obsRows,
                              resetFlags);
  Value buffered = row.buffered, acceptedNow = row.accepted,
        acceptedOk = row.ok;
  kb.ifThen(kb.andI(kb.not1(acceptedOk),
                    kb.andI(kb.cmp(CmpIPredicate::eq, kb.blockIdX(), kb.i32(0)),
                            kb.cmp(CmpIPredicate::eq, kb.threadIdX(),
                                   kb.i32(0)))),
            [&] {
              recordError(kb, errors, ErrorBadAccepted, acceptedNow, request,
                          kb.i32(0));
            });
  // Row 0 was folded by the observe kernel: only rows 1..a of a request
  // with buffered rows are replayed, none for a = 0 (and no replay kernel
  // under mtp_update = row0: buildCommitKernels).
  assert(!spec.rowZeroOnly && "mtp_update = row0 has no replay kernel");
  if (spec.rows > 1)
    kb.ifThen(
        kb.andI(acceptedOk,
                kb.andI(kb.cmp(CmpIPredicate::sgt, buffered, kb.i32(0)),
                        kb.cmp(CmpIPredicate::sgt, acceptedNow, kb.i32(0)))),
        [&] { replayRequest(row); });
  LaunchShape shape;
  shape.grid = {spec.ctasPerRequest, spec.batch, 1};
  shape.blockThreads = spec.threads;
  return shape;
}

/// The kernel `spec.name` with its nine buffer parameters.
void CommitReplayKernel::declareKernel() {
  SmallVector<Type> params(spec.resetAfter ? 11 : 10, kb.ptrT(Global));
  params.push_back(kb.i32T());
  if (spec.paged.enabled())
    params.append({kb.ptrT(Global), kb.i32T()});
  func = beginKernel(b, loc, module, spec.name, params, spec.threads);
  unsigned a = 0;
  accepted = func.getArgument(a++), slots = func.getArgument(a++);
  vState = func.getArgument(a++), dState = func.getArgument(a++);
  obsRows = func.getArgument(a++), obsPos = func.getArgument(a++);
  obsLen = func.getArgument(a++), obsMask = func.getArgument(a++);
  obsZ = func.getArgument(a++);
  errors = func.getArgument(a++);
  resetFlags = spec.resetAfter ? func.getArgument(a++) : Value();
  numSlots = func.getArgument(a++);
  if (spec.paged.enabled())
    paging = {spec.paged.page, spec.paged.width, func.getArgument(a),
              func.getArgument(a + 1), Value()};
}

/// Replays rows 1..a of a request with buffered rows (the observe kernel
/// folded row 0): the entries below the rows' reach, spread over the
/// request's CTAs.
void CommitReplayKernel::replayRequest(const CommitRow &commit) {
  count = kb.add(commit.last(kb), kb.i32(1));
  rowBase = kb.mul(slot64, kb.i64(spec.rows));
  for (int64_t r = 1; r < spec.rows; ++r) {
    ReplayRow row = rowOf(kb.i32(r));
    row.index = r;
    row.valid = kb.andI(row.valid, kb.cmp(CmpIPredicate::slt, kb.i32(r), count));
    // A row that is not replayed takes p = n = 0: it then folds into no
    // cell (every test below needs a slot below n), and the entries' mask
    // loads stay inside the row without a test of their own.
    row.p = kb.select(row.valid, row.p, kb.i32(0));
    row.n = kb.select(row.valid, row.n, kb.i32(0));
    replayed.push_back(row);
  }
  reach = reachOf();
  std::tie(decay, keep) = kb.emaWeights(spec.decay);
  entries.emplace(kb, paging, slot, request, spec.capacity);
  maskBase = kb.mul(slot64, kb.i64(spec.stateBlocks));
  bsV = kb.i32(spec.blockSize);
  group = commitGroup(spec);
  const int64_t groups = group == 1 ? kCommitUnroll : 1;
  stride = kb.i32(spec.threads * spec.ctasPerRequest * group);
  Value start = kb.mul(
      kb.add(kb.mul(kb.blockIdX(), kb.i32(spec.threads)), kb.threadIdX()),
      kb.i32(group));
  auto replay = [&] {
    kb.forLoop(start, reach, kb.mul(stride, kb.i32(groups)), [&](Value first) {
      for (int64_t u = 0; u < groups; ++u) {
        Value x0 = kb.add(first, kb.mul(stride, kb.i32(u)));
        Value inRange = kb.cmp(CmpIPredicate::slt, x0, reach);
        replayGroup(kb.select(inRange, x0, kb.i32(0)), inRange);
      }
    });
  };
  if (!paging.paged())
    return replay();
  // Paged: every state page that the committed rows 0..a reach (row 0's
  // too, folded at its step) must be the pool's, else nothing is replayed;
  // the finish checks the same pages and leaves the buffer and `it` (the
  // select kernel then skips the request, as after a bad accepted count).
  Value scanReach =
      kb.maxS(reach, reachOfRow(kb, rowOf(kb.i32(0))));
  Value ok = statePagesInPool(kb, paging, request, scanReach, spec.threads,
                              spec.name + "_scan", errors);
  kb.ifThen(ok, replay);
}

/// Replayed row `r` (an invalid one is skipped).
ReplayRow CommitReplayKernel::rowOf(Value r) {
  return bufferedRow(kb, spec, obsPos, obsLen, rowBase, r);
}

/// 1 + max(p_r) over the valid replayed rows: entries 0 .. max(p_r) of V
/// and D are the only ones touched.
Value CommitReplayKernel::reachOf() {
  Value reach = kb.i32(0);
  for (const ReplayRow &row : replayed)
    reach = kb.maxS(reach, reachOfRow(kb, row));
  return reach;
}

/// The `group` entries x0 .. x0 + group - 1 of V and of D (`inRange`: x0 is
/// below the reach; otherwise x0 = 0 and nothing is touched). Row r folds
/// z_r[x] into V[x] if it scored slot x (x < n_r and x's block in the
/// buffered union mask), and z_r[p_r - x] into D[x] if it scored slot
/// p_r - x. The mask bytes come first (V's is the group's; D's slots
/// p_r - x0 - j span at most two blocks a row, so two bytes a row), then
/// every cell and score load of the group. The replay is bound by its
/// instructions a cell at the occupancy its registers allow
/// (docs/benchmarks-kernels.md), so the group shares what it can: each
/// row's tests are two bit masks, and V, D and V's scores move as vectors.
/// Untouched cells are neither read nor written (a vector only when every
/// cell of the group is touched).
void CommitReplayKernel::replayGroup(Value x0, Value inRange) {
  Type f32 = kb.f32T(), i8 = kb.i8T();
  const int64_t rows = replayed.size();
  // Slot `at` (0 <= at < capacity) lies in a block of the buffered mask.
  auto maskBit = [&](Value at) {
    return kb.cmp(CmpIPredicate::ne,
                  kb.loadAt(i8, obsMask,
                            kb.add(maskBase, kb.extS64(kb.divU(at, bsV)))),
                  kb.constant(i8, 0));
  };

  // Which of the group's cells row r folds, as the low `group` bits of an
  // i32 (bit j: V[x0 + j], D[x0 + j]): a few integer operations a row
  // instead of compares a cell, and no predicate a cell kept alive.
  const int64_t full = (int64_t{1} << group) - 1;
  // Bits j < k, k clamped to [0, group].
  auto below = [&](Value k) {
    k = kb.minS(kb.maxS(k, kb.i32(0)), kb.i32(group));
    return kb.sub(kb.shl(kb.i32(1), k), kb.i32(1));
  };
  auto bitOf = [&](Value mask, int64_t j) {
    return kb.cmp(CmpIPredicate::ne, kb.andI(mask, kb.i32(int64_t{1} << j)),
                  kb.i32(0));
  };
  Value vOk = kb.andI(inRange, maskBit(x0));
  SmallVector<Value> maskV, maskD;
  SmallVector<Value> diagonalTop(rows);
  Value touchedVMask = kb.i32(0), touchedDMask = kb.i32(0);
  for (auto [r, row] : llvm::enumerate(replayed)) {
    // V: the row's entries j < n - x0, in a scored block.
    Value mV = kb.select(vOk, below(kb.sub(row.n, x0)), kb.i32(0));
    // D[x0 + j]: slot top - j of the row when 0 <= top - j < n, in a
    // scored block.
    Value top = kb.sub(row.p, x0);
    diagonalTop[r] = top;
    Value inRow = kb.andI(below(kb.add(top, kb.i32(1))),
                          kb.xorI(below(kb.add(kb.sub(top, row.n), kb.i32(1))),
                                  kb.i32(full)));
    Value topAt = kb.maxS(top, kb.i32(0));
    Value topBit = maskBit(topAt);
    Value blocks = kb.select(topBit, kb.i32(full), kb.i32(0));
    if (group > 1) {
      Value lowBit =
          maskBit(kb.maxS(kb.sub(top, kb.i32(group - 1)), kb.i32(0)));
      // Slots top - j with j <= top % bs lie in topBit's block.
      Value upper = below(kb.add(kb.remU(topAt, bsV), kb.i32(1)));
      blocks = kb.orI(kb.andI(blocks, upper),
                      kb.select(lowBit, kb.xorI(upper, kb.i32(full)),
                                kb.i32(0)));
    }
    Value mD = kb.select(inRange, kb.andI(inRow, blocks), kb.i32(0));
    maskV.push_back(mV);
    maskD.push_back(mD);
    touchedVMask = kb.orI(touchedVMask, mV);
    touchedDMask = kb.orI(touchedDMask, mD);
  }
  SmallVector<SmallVector<Value>> scoredV(rows), scoredD(rows);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < group; ++j) {
      scoredV[r].push_back(bitOf(maskV[r], j));
      scoredD[r].push_back(bitOf(maskD[r], j));
    }
  SmallVector<Value> touchedV, touchedD;
  for (int64_t j = 0; j < group; ++j) {
    touchedV.push_back(bitOf(touchedVMask, j));
    touchedD.push_back(bitOf(touchedDMask, j));
  }
  Value anyV = kb.cmp(CmpIPredicate::ne, touchedVMask, kb.i32(0));
  Value allV = kb.cmp(CmpIPredicate::eq, touchedVMask, kb.i32(full));
  Value anyD = kb.cmp(CmpIPredicate::ne, touchedDMask, kb.i32(0));
  Value allD = kb.cmp(CmpIPredicate::eq, touchedDMask, kb.i32(full));

  // Loads: the cells, V's scores (a vector a row), D's (one a cell).
  Value vAt = kb.gep(vState, f32, entries->index(x0));
  Value dAt = kb.gep(dState, f32, entries->index(x0));
  SmallVector<Value> oldV = loadGroupIf(anyV, vAt);
  SmallVector<Value> oldD = loadGroupIf(anyD, dAt);
  SmallVector<SmallVector<Value>> zV, zD(rows);
  for (int64_t r = 0; r < rows; ++r) {
    // Row i of the step is draft row i - 1 of obs_z (row 0 is not buffered).
    Value bufferRow = kb.i32(replayed[r].index - 1);
    zV.push_back(loadGroupIf(
        scoredV[r].front(),
        kb.gep(obsZ, f32, entries->index(x0, bufferRow, spec.rows - 1))));
    for (int64_t j = 0; j < group; ++j)
      zD[r].push_back(kb.ifThenElse(
          {f32}, scoredD[r][j],
          [&]() -> SmallVector<Value> {
            Value i = kb.sub(diagonalTop[r], kb.i32(j));
            return {kb.load(
                f32,
                kb.gep(obsZ, f32, entries->index(i, bufferRow, spec.rows - 1)),
                4)};
          },
          [&]() -> SmallVector<Value> { return {kb.f32(0.0)}; })[0]);
  }

  // Each cell through the replayed rows in order (§3.10), then the stores.
  auto fold = [&](Value old, ArrayRef<SmallVector<Value>> scored,
                  ArrayRef<SmallVector<Value>> z, int64_t j) {
    Value folded = old;
    for (int64_t r = 0; r < rows; ++r) {
      Value finite =
          kb.andI(scored[r][j], kb.cmpF(CmpFPredicate::OLT, kb.absF(z[r][j]),
                                        kb.f32(INFINITY)));
      folded = kb.select(finite, kb.ema(folded, z[r][j], decay, keep), folded);
    }
    return folded;
  };
  SmallVector<Value> newV, newD;
  for (int64_t j = 0; j < group; ++j) {
    newV.push_back(fold(oldV[j], scoredV, zV, j));
    newD.push_back(fold(oldD[j], scoredD, zD, j));
  }
  storeGroup(touchedV, allV, newV, vAt, x0);
  storeGroup(touchedD, allD, newD, dAt, x0);
}

/// The group's cells at `at` when `cond` (one aligned vector), else zeros.
SmallVector<Value> CommitReplayKernel::loadGroupIf(Value cond, Value at) {
  Type f32 = kb.f32T();
  Type type = group == 1 ? f32 : kb.vecT(f32, group);
  Value loaded = kb.ifThenElse(
      {type}, cond,
      [&]() -> SmallVector<Value> {
        return {kb.load(type, at, 4 * group)};
      },
      [&]() -> SmallVector<Value> {
        if (group == 1)
          return {kb.f32(0.0)};
        return {kb.splat(type, FloatAttr::get(f32, 0.0))};
      })[0];
  if (group == 1)
    return {loaded};
  SmallVector<Value> cells;
  for (int64_t j = 0; j < group; ++j)
    cells.push_back(kb.extract(loaded, j));
  return cells;
}

/// Stores the group's touched cells at `at` (a page of the pool: see
/// replayRequest): one vector when `all` are touched, else each touched
/// cell.
void CommitReplayKernel::storeGroup(ArrayRef<Value> touched, Value all,
                                    ArrayRef<Value> values, Value at,
                                    Value x0) {
  // replayRequest refuses a request with a page outside the pool before
  // any entry is folded, so the pool test never skips a store; it keeps
  // the store inside the pool on its own.
  Value inPool = entries->paged() ? entries->inPool(x0) : kb.i1(true);
  storeTouchedCells(kb, values, touched, all, at, inPool);
}

/// `<name>_finish`, launched after every replay CTA has read obs_rows: one
/// more iteration for each request that had buffered rows, and its buffer
/// is dropped. The replay writes none of what the finish reads (the slots,
/// accepted counts, reset flags and the state table are step inputs;
/// obs_rows, the buffered rows and `it` were last written by kernels that
/// completed before the replay passed its grid wait), so every load comes
/// before the finish's own wait, overlapping the replay: what is left after
/// it is the stores. Paged, a CTA per request scans the state pages of the
/// committed rows 0..a as the replay does (also where it replays nothing:
/// a = 0, or no replay kernel under mtp_update = row0), and a request with
/// a page outside the pool keeps its buffer and `it`.
static LaunchShape buildCommitFinishKernel(OpBuilder &b, Location loc,
                                           gpu::GPUModuleOp module,
                                           const CommitKernelSpec &spec) {
  KernelBuilder kb(b, loc, module);
  Type i32 = kb.i32T(), i64 = kb.i64T();
  const int64_t threads = 128;
  const bool paged = spec.paged.enabled();
  SmallVector<Type> params(spec.resetAfter ? 5 : 4, kb.ptrT(Global));
  params.push_back(i32);
  if (paged)
    params.append({kb.ptrT(Global), kb.ptrT(Global), kb.ptrT(Global), i32});
  OpBuilder::InsertionGuard guard(b);
  gpu::GPUFuncOp func =
      beginKernel(b, loc, module, spec.name + "_finish", params, threads);
  Value slots = func.getArgument(0), itState = func.getArgument(1);
  Value obsRows = func.getArgument(2), accepted = func.getArgument(3);
  Value resetFlags = spec.resetAfter ? func.getArgument(4) : Value();
  unsigned a = spec.resetAfter ? 5 : 4;
  Value numSlots = func.getArgument(a++);
  Value request, inBatch, iteration, ok;
  BatchSlot batchSlot;
  CommitRow commit;
  {
    OpBuilder::InsertionGuard beforeWait(b);
    setInsertionBeforeGridWait(b, func);
    request = paged ? kb.blockIdX()
                    : kb.add(kb.mul(kb.blockIdX(), kb.i32(threads)),
                             kb.threadIdX());
    inBatch = kb.cmp(CmpIPredicate::slt, request, kb.i32(spec.batch));
    // Rows past the batch load row 0's inputs (and do nothing with them).
    Value row = kb.select(inBatch, request, kb.i32(0));
    batchSlot = loadBatchSlot(kb, slots, row, numSlots, spec.batch,
                              /*wholeWarp=*/false); // a row per thread
    commit = commitRowOf(kb, spec, batchSlot, row, accepted, obsRows,
                         resetFlags);
    iteration = kb.loadAt(i64, itState, batchSlot.slot);
    ok = kb.andI(commit.ok,
                 kb.cmp(CmpIPredicate::sgt, commit.buffered, kb.i32(0)));
    if (paged) {
      Value obsPos = func.getArgument(a), obsLen = func.getArgument(a + 1);
      StatePaging paging{spec.paged.page, spec.paged.width,
                         func.getArgument(a + 2), func.getArgument(a + 3),
                         Value()};
      // Rows 0..a, as the replay clamps a (0 under row0).
      Value last = commit.last(kb);
      Value rowBase = kb.mul(kb.extS64(batchSlot.slot), kb.i64(spec.rows));
      Value reach = kb.i32(0);
      for (int64_t r = 0; r < (spec.rowZeroOnly ? 1 : spec.rows); ++r) {
        ReplayRow buffered =
            bufferedRow(kb, spec, obsPos, obsLen, rowBase, kb.i32(r));
        Value committed = kb.andI(ok, kb.cmp(CmpIPredicate::sle, kb.i32(r), last));
        reach = kb.maxS(reach, kb.select(committed, reachOfRow(kb, buffered),
                                         kb.i32(0)));
      }
      // Reported by the select kernel, which skips the request.
      Value inPool = statePagesInPool(kb, paging, row, reach, threads,
                                      spec.name + "_finish_scan", Value());
      ok = kb.andI(ok, kb.andI(inPool, kb.cmp(CmpIPredicate::eq,
                                              kb.threadIdX(), kb.i32(0))));
    }
  }
  Value slot = batchSlot.slot;
  kb.ifThen(kb.andI(inBatch, ok), [&] {
    kb.storeAt(kb.add(iteration, kb.i64(1)), itState, slot);
    kb.storeAt(kb.i32(0), obsRows, slot);
  });
  LaunchShape shape;
  shape.grid = {paged ? spec.batch : (spec.batch + threads - 1) / threads, 1,
                1};
  shape.blockThreads = threads;
  return shape;
}

/// The replay (SPIN_SPEC §4): rows 0..last of the buffer, each with the
/// §3.10 rule `x = a*x + c*z` (a = f32(decay), c = f32(1 - decay), two
/// roundings, no FMA) for every scored slot with a finite score. A thread
/// owns groups of consecutive entries x of V and D (commitGroup); row r
/// touches V[x] if it scored slot x and D[x] if it scored slot p_r - x. The
/// mask bits are read first, so that entries no replayed row touches are
/// neither read nor written; a touched entry is carried through the rows
/// in a register.
CommitLaunches
mlir::spin::gpu_codegen::buildCommitKernels(OpBuilder &b, Location loc,
                                            gpu::GPUModuleOp module,
                                            const CommitKernelSpec &spec) {
  CommitLaunches shapes;
  if (!spec.rowZeroOnly)
    shapes.replay = CommitReplayKernel(b, loc, module, spec).build();
  shapes.finish = buildCommitFinishKernel(b, loc, module, spec);
  return shapes;
}
