//===- StateKernels.cpp - EMA update and reset of SPIN's state ------------===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
//===----------------------------------------------------------------------===//

#include "KernelLibrary.h"
#include "Kernels.h"

using namespace mlir;
using namespace mlir::spin;
using namespace mlir::spin::gpu_codegen;
using arith::CmpFPredicate;
using arith::CmpIPredicate;

namespace {

/// The update kernel (SPIN_SPEC §3.10 for a single-row step) while it is
/// built: the spec, the kernel's parameters and the request's values its
/// phases share. `build` runs the phases in the order of the generated
/// code.
class UpdateKernel : KernelPhases<UpdateKernelSpec> {
public:
  UpdateKernel(OpBuilder &b, Location loc, gpu::GPUModuleOp module,
               const UpdateKernelSpec &spec)
      : KernelPhases(b, loc, module, spec) {}

  /// Emits the kernel and returns its launch shape.
  LaunchShape build();

private:
  /// Each thread takes kUnroll entries at a time (see `foldRound`).
  static constexpr int64_t kUnroll = 8;

  void declareKernel();
  void keepBlockList();
  void updateState();
  void foldRound(Value first);

  // Parameters.
  Value scores, positions, lengths, slots, blocks, counts, skip, vState, dState,
      itState, previous;
  StatePaging paging;
  // The request's values.
  Value request, slot, p, decay, keep, total, width, bs, lastEntry;
  std::optional<StateRows> rows;
};

} // namespace

LaunchShape UpdateKernel::build() {
  Type i32 = kb.i32T();
  OpBuilder::InsertionGuard guard(b);
  declareKernel();
  request = kb.blockIdY();
  if (previous)
    keepBlockList();
  slot = kb.loadAt(i32, slots, request, true);
  p = kb.loadAt(i32, positions, request, true);
  Value n = kb.loadAt(i32, lengths, request, true);
  RowChecks checks =
      checkRow(kb, p, n, spec.capacity, spec.maxBlocks * spec.blockSize);
  Value ok = kb.andI(checks.lengthOk, checks.positionOk);
  ok = kb.andI(ok, kb.cmp(CmpIPredicate::eq,
                          kb.loadAt(i32, skip, request, true), kb.i32(0)));
  kb.ifThen(ok, [&] { updateState(); });

  LaunchShape shape;
  shape.grid = {spec.ctasPerRequest, spec.batch, 1};
  shape.blockThreads = spec.threads;
  return shape;
}

/// The kernel `spec.name` with its ten buffer parameters, and the kept
/// block list with `keepList`.
void UpdateKernel::declareKernel() {
  SmallVector<Type> params(spec.keepList ? 11 : 10, kb.ptrT(Global));
  if (spec.paged.enabled())
    params.append({kb.ptrT(Global), kb.i32T()});
  gpu::GPUFuncOp func =
      beginKernel(b, loc, module, spec.name, params, spec.threads);
  unsigned a = 0;
  scores = func.getArgument(a++), positions = func.getArgument(a++);
  lengths = func.getArgument(a++), slots = func.getArgument(a++);
  blocks = func.getArgument(a++), counts = func.getArgument(a++);
  skip = func.getArgument(a++);
  vState = func.getArgument(a++), dState = func.getArgument(a++);
  itState = func.getArgument(a++);
  previous = spec.keepList ? func.getArgument(a++) : Value();
  if (spec.paged.enabled()) {
    paging = {spec.paged.page, spec.paged.width, func.getArgument(a),
              func.getArgument(a + 1), Value()};
    a += 2;
  }
}

/// Copies the request's slot, block count and list to `previous` for the
/// next step's scoring kernel, whatever the row's checks (a rejected
/// request's count is 0).
void UpdateKernel::keepBlockList() {
  Type i32 = kb.i32T();
  Value count = kb.loadAt(i32, counts, request, true);
  Value from = kb.mul(request, kb.i32(spec.maxBlocks));
  Value to = kb.add(kb.i32(spec.batch),
                    kb.mul(request, kb.i32(1 + spec.maxBlocks)));
  Value start =
      kb.add(kb.mul(kb.blockIdX(), kb.i32(spec.threads)), kb.threadIdX());
  // The slot the list belongs to: the next step finds it by slot.
  kb.ifThen(kb.cmp(CmpIPredicate::eq, start, kb.i32(0)), [&] {
    kb.storeAt(kb.loadAt(i32, slots, request, true), previous, request);
  });
  kb.forLoop(
      start, kb.add(count, kb.i32(1)),
      kb.i32(spec.threads * spec.ctasPerRequest), [&](Value e) {
        Value isCount = kb.cmp(CmpIPredicate::eq, e, kb.i32(0));
        Value at = kb.add(from, kb.maxS(kb.sub(e, kb.i32(1)), kb.i32(0)));
        Value entry = kb.ifThenElse(
            {i32}, isCount, [&]() -> SmallVector<Value> { return {count}; },
            [&]() -> SmallVector<Value> {
              return {kb.loadAt(i32, blocks, at, true)};
            })[0];
        kb.storeAt(entry, previous, kb.add(to, e));
      });
}

/// Folds every scored entry of a valid row into V and D, spread over the
/// request's CTAs, then one more iteration (by one thread).
void UpdateKernel::updateState() {
  Type i64 = kb.i64T();
  std::tie(decay, keep) = kb.emaWeights(spec.decay);
  total = kb.mul(kb.loadAt(kb.i32T(), counts, request, true),
                 kb.i32(spec.blockSize));
  rows.emplace(kb, paging, slot, request, spec.capacity);
  width = kb.i32(spec.maxBlocks * spec.blockSize);
  Value start =
      kb.add(kb.mul(kb.blockIdX(), kb.i32(spec.threads)), kb.threadIdX());
  const int64_t stride = spec.threads * spec.ctasPerRequest;
  bs = kb.i32(spec.blockSize);
  lastEntry = kb.sub(total, kb.i32(1));
  kb.forLoop(start, total, kb.i32(stride * kUnroll),
             [&](Value first) { foldRound(first); });
  kb.ifThen(kb.andI(kb.cmp(CmpIPredicate::eq, kb.blockIdX(), kb.i32(0)),
                    kb.cmp(CmpIPredicate::eq, kb.threadIdX(), kb.i32(0))),
            [&] {
              Value at = kb.gep(itState, i64, slot);
              kb.store(kb.add(kb.load(i64, at, 8), kb.i64(1)), at, 8);
            });
}

/// The kUnroll entries `first + u * stride` of one thread. All their loads
/// are issued before any is used: the scores and block-list entries
/// together, then V and D (the kernel is bound by the latency of these
/// dependent rounds, not by bandwidth). Loads of entries past the end or
/// with a non-finite score read a valid cell (entry total - 1, slot p) and
/// store nothing. Distinct entries are distinct slots, so the entries of
/// one round never touch the same V or D cell.
void UpdateKernel::foldRound(Value first) {
  Type i32 = kb.i32T(), f32 = kb.f32T();
  const int64_t stride = spec.threads * spec.ctasPerRequest;
  SmallVector<Value> zs, blockOf, inRange, entries;
  for (int64_t u = 0; u < kUnroll; ++u) {
    Value e = kb.add(first, kb.i32(u * stride));
    inRange.push_back(kb.cmp(CmpIPredicate::slt, e, total));
    Value at = kb.minS(e, lastEntry);
    entries.push_back(at);
    zs.push_back(
        kb.loadAt(f32, scores, kb.add(kb.mul(request, width), at), true));
    blockOf.push_back(kb.loadAt(
        i32, blocks,
        kb.add(kb.mul(request, kb.i32(spec.maxBlocks)), kb.divU(at, bs)),
        true));
  }
  SmallVector<Value> vAts, dAts, olds, used;
  for (int64_t u = 0; u < kUnroll; ++u) {
    Value e = entries[u];
    Value finite =
        kb.cmpF(CmpFPredicate::OLT, kb.absF(zs[u]), kb.f32(INFINITY));
    used.push_back(kb.andI(inRange[u], finite));
    Value i = kb.select(used.back(),
                        kb.add(kb.mul(blockOf[u], bs), kb.remU(e, bs)), p);
    vAts.push_back(kb.gep(vState, f32, rows->index(i)));
    dAts.push_back(kb.gep(dState, f32, rows->index(kb.sub(p, i))));
    olds.push_back(kb.load(f32, vAts.back(), 4));
    olds.push_back(kb.load(f32, dAts.back(), 4));
  }
  for (int64_t u = 0; u < kUnroll; ++u) {
    kb.ifThen(used[u], [&] {
      Value cz = kb.mul(keep, zs[u]);
      kb.store(kb.emaFold(olds[2 * u], decay, cz), vAts[u], 4);
      kb.store(kb.emaFold(olds[2 * u + 1], decay, cz), dAts[u], 4);
    });
  }
}

/// SPIN_SPEC §3.10 for every scored slot i of a single-row step:
/// V[i] = a*V[i] + c*z[i], D[p-i] = a*D[p-i] + c*z[i] with a = f32(decay),
/// c = f32(1 - decay), two roundings and no FMA (as the CPU path). Entries
/// with a non-finite score (NaN past the visible length included) are not
/// folded in. Rows with a bad length or position were reported by the
/// select kernel and leave the state untouched, `it` included.
LaunchShape mlir::spin::gpu_codegen::buildUpdateKernel(
    OpBuilder &b, Location loc, gpu::GPUModuleOp module,
    const UpdateKernelSpec &spec) {
  return UpdateKernel(b, loc, module, spec).build();
}

LaunchShape mlir::spin::gpu_codegen::buildResetKernel(
    OpBuilder &b, Location loc, gpu::GPUModuleOp module,
    const ResetKernelSpec &spec) {
  KernelBuilder kb(b, loc, module);
  Type ptr = kb.ptrT(Global);
  SmallVector<Type> params(spec.observations ? 7 : 6, ptr);
  params.push_back(kb.i32T());
  if (spec.paged.enabled())
    params.push_back(ptr);
  OpBuilder::InsertionGuard guard(b);
  gpu::GPUFuncOp func =
      beginKernel(b, loc, module, spec.name, params, spec.threads);
  Value reset = func.getArgument(0), slots = func.getArgument(1);
  Value vState = func.getArgument(2), dState = func.getArgument(3);
  Value itState = func.getArgument(4), predAt = func.getArgument(5);
  Value obsRows = spec.observations ? func.getArgument(6) : Value();
  Value numSlots = func.getArgument(spec.observations ? 7 : 6);
  Value valid = spec.paged.enabled() ? func.getArguments().back() : Value();
  Value request = kb.blockIdY();
  Value flag = kb.loadAt(kb.i8T(), reset, request, true);
  BatchSlot batchSlot = loadBatchSlotBeforeWait(
      kb, b, func, slots, [&] { return kb.blockIdY(); }, numSlots, spec.batch);
  Value slot = batchSlot.slot;
  kb.ifThen(kb.andI(batchSlot.live,
                    kb.cmp(CmpIPredicate::ne, flag, kb.constant(kb.i8T(), 0))),
            [&] {
              resetSlotState(kb,
                             {vState, dState, itState, predAt, obsRows, valid},
                             slot, spec.capacity, spec.threads,
                             spec.ctasPerRequest);
            });
  LaunchShape shape;
  shape.grid = {spec.ctasPerRequest, spec.batch, 1};
  shape.blockThreads = spec.threads;
  return shape;
}
