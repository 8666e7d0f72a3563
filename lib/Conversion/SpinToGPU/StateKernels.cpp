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

bool mlir::spin::gpu_codegen::updateKeepsGroupMaxima(
    const UpdateKernelSpec &spec) {
  return spec.blockSize % kGroup == 0;
}

/// SPIN_SPEC §3.10 for every scored slot i of a single-row step:
/// V[i] = a*V[i] + c*z[i], D[p-i] = a*D[p-i] + c*z[i] with a = f32(decay),
/// c = f32(1 - decay), two roundings and no FMA (as the CPU path). Entries
/// with a non-finite score (NaN past the visible length included) are not
/// folded in. Rows with a bad length or position were reported by the
/// select kernel and leave the state untouched, `it` included.
///
/// With blocks of whole groups (kGroup) the kernel also writes the group
/// maxima of what it changed: V by slot (a group's eight slots are eight
/// lanes of one round), D by group of offsets (each group is owned by the
/// lowest selected block whose offsets it holds, whose lanes fold in the
/// scores of both blocks), so that no entry is written by two threads.
/// Otherwise buildGroupMaximaKernel runs after it.
LaunchShape mlir::spin::gpu_codegen::buildUpdateKernel(
    OpBuilder &b, Location loc, gpu::GPUModuleOp module,
    const UpdateKernelSpec &spec) {
  KernelBuilder kb(b, loc, module);
  Type ptr = kb.ptrT(Global), i32 = kb.i32T(), i64 = kb.i64T(), f32 = kb.f32T();
  const bool fused = updateKeepsGroupMaxima(spec);
  SmallVector<Type> params(fused ? 12 : 10, ptr);
  OpBuilder::InsertionGuard guard(b);
  gpu::GPUFuncOp func =
      beginKernel(b, loc, module, spec.name, params, spec.threads);
  unsigned a = 0;
  Value scores = func.getArgument(a++), positions = func.getArgument(a++);
  Value lengths = func.getArgument(a++), slots = func.getArgument(a++);
  Value blocks = func.getArgument(a++), counts = func.getArgument(a++);
  Value skip = func.getArgument(a++);
  Value vState = func.getArgument(a++), dState = func.getArgument(a++);
  Value itState = func.getArgument(a++);
  Value vMax = fused ? func.getArgument(a++) : Value();
  Value dMax = fused ? func.getArgument(a++) : Value();

  Value request = kb.blockIdY();
  Value slot = kb.loadAt(i32, slots, request, true);
  Value p = kb.loadAt(i32, positions, request, true);
  Value n = kb.loadAt(i32, lengths, request, true);
  RowChecks checks = checkRow(kb, p, n, spec.capacity,
                              spec.maxBlocks * spec.blockSize);
  Value ok = kb.andI(checks.lengthOk, checks.positionOk);
  ok = kb.andI(ok, kb.cmp(CmpIPredicate::eq,
                          kb.loadAt(i32, skip, request, true), kb.i32(0)));
  kb.ifThen(ok, [&] {
    Value decay = kb.f32(static_cast<float>(spec.decay));
    Value keep = kb.f32(static_cast<float>(1.0 - spec.decay));
    auto ema = [&](Value old, Value z) {
      return kb.add(kb.mul(decay, old), kb.mul(keep, z));
    };
    auto finite = [&](Value z) {
      return kb.cmpF(CmpFPredicate::OLT, kb.absF(z), kb.f32(INFINITY));
    };
    Value count = kb.loadAt(i32, counts, request, true);
    Value total = kb.mul(count, kb.i32(spec.blockSize));
    Value stateBase = kb.mul(kb.extS64(slot), kb.i64(spec.capacity));
    Value groupBase =
        kb.mul(kb.extS64(slot), kb.i64(stateGroups(spec.capacity)));
    Value width = kb.i32(spec.maxBlocks * spec.blockSize);
    Value scoreBase = kb.mul(request, width);
    Value listBase = kb.mul(request, kb.i32(spec.maxBlocks));
    Value start = kb.add(kb.mul(kb.blockIdX(), kb.i32(spec.threads)),
                         kb.threadIdX());
    Value groupLeader = kb.cmp(
        CmpIPredicate::eq, kb.andI(kb.laneId(), kb.i32(kGroup - 1)), kb.i32(0));
    Value inCapacity = kb.i32(spec.capacity);
    auto groupOf = [&](Value x) {
      return kb.add(groupBase, kb.extS64(kb.divU(x, kb.i32(kGroup))));
    };
    // Each thread takes kUnroll entries at a time and issues all their
    // loads before it uses any: the scores and block-list entries
    // together, then V and D (the kernel is bound by the latency of these
    // dependent rounds, not by bandwidth). Loads of entries past the end or
    // with a non-finite score read a valid cell and store nothing. Distinct
    // entries are distinct slots, so the entries of one round never touch
    // the same V or D cell.
    constexpr int64_t kUnroll = 8;
    const int64_t stride = spec.threads * spec.ctasPerRequest;
    Value bs = kb.i32(spec.blockSize);
    Value lastEntry = kb.sub(total, kb.i32(1));
    // D by group of offsets (fused): block j's offsets are [p - bs j - bs
    // + 1, p - bs j]; a group holds offsets of at most two adjacent blocks
    // and is owned by the lower selected one, which folds in the scores of
    // both (block j + 1's, if selected, are list entry k + 1's). Item t is
    // lane t % 8 of group t / 8 % span of the window of list entry
    // t / (8 span); a round takes about as many items as entries.
    const int64_t span = spec.blockSize / kGroup + 1;
    const int64_t kDUnroll = std::min<int64_t>(
        16, llvm::divideCeil(kUnroll * span * kGroup, spec.blockSize));
    Value items = kb.mul(count, kb.i32(span * kGroup));
    Value lastListed = kb.sub(count, kb.i32(1));
    auto roundsFor = [&](Value work, int64_t unroll) {
      return kb.divU(kb.add(work, kb.i32(stride * unroll - 1)),
                     kb.i32(stride * unroll));
    };
    // The same number of rounds for every thread of a request (lanes
    // shuffle); each round issues all its loads before it uses any.
    Value rounds = roundsFor(total, kUnroll);
    if (fused)
      rounds = kb.maxS(rounds, roundsFor(items, kDUnroll));

    struct VEntry {
      Value inRange, entry, z, block, slot, at, old;
    };
    struct DItem {
      Value t, inRange, k, g, j, prev, next, cell, owned, hit, z, old;
    };
    kb.forLoop(kb.i32(0), rounds, kb.i32(1), [&](Value round) {
      Value vFirst = kb.add(start, kb.mul(round, kb.i32(stride * kUnroll)));
      Value dFirst = kb.add(start, kb.mul(round, kb.i32(stride * kDUnroll)));
      // 1. Scores and block-list entries.
      SmallVector<VEntry> vs(kUnroll);
      for (int64_t u = 0; u < kUnroll; ++u) {
        VEntry &x = vs[u];
        Value e = kb.add(vFirst, kb.i32(u * stride));
        x.inRange = kb.cmp(CmpIPredicate::slt, e, total);
        x.entry = kb.minS(e, lastEntry);
        x.z = kb.loadAt(f32, scores, kb.add(scoreBase, x.entry), true);
        x.block = kb.loadAt(i32, blocks, kb.add(listBase, kb.divU(x.entry, bs)),
                            true);
      }
      SmallVector<DItem> ds(fused ? kDUnroll : 0);
      for (DItem &x : ds) {
        x.t = kb.add(dFirst, kb.i32((&x - ds.data()) * stride));
        x.inRange = kb.cmp(CmpIPredicate::slt, x.t, items);
        x.k = kb.minS(kb.divU(x.t, kb.i32(span * kGroup)), lastListed);
        x.g = kb.remU(kb.divU(x.t, kb.i32(kGroup)), kb.i32(span));
        auto listed = [&](Value k) {
          return kb.loadAt(i32, blocks, kb.add(listBase, k), true);
        };
        x.j = listed(x.k);
        x.prev = listed(kb.maxS(kb.sub(x.k, kb.i32(1)), kb.i32(0)));
        x.next = listed(kb.minS(kb.add(x.k, kb.i32(1)), lastListed));
      }
      // 2. The state cells (and the scores of D's offsets).
      for (VEntry &x : vs) {
        x.slot = kb.add(kb.mul(x.block, bs), kb.remU(x.entry, bs));
        // The group maxima need every slot's V (within the capacity);
        // otherwise an unused entry reads slot p.
        Value used = kb.andI(x.inRange, finite(x.z));
        Value cell = fused ? kb.minS(x.slot, kb.i32(spec.capacity - 1))
                           : kb.select(used, x.slot, p);
        x.at = cell;
        x.old = kb.loadAt(f32, vState, kb.add(stateBase, kb.extS64(cell)));
      }
      SmallVector<Value> dOlds;
      if (!fused)
        for (VEntry &x : vs)
          dOlds.push_back(kb.loadAt(
              f32, dState, kb.add(stateBase, kb.extS64(kb.sub(p, x.at)))));
      for (DItem &x : ds) {
        Value hi = kb.sub(p, kb.mul(x.j, bs));
        Value lo = kb.maxS(kb.sub(hi, kb.i32(spec.blockSize - 1)), kb.i32(0));
        Value group = kb.add(kb.divU(lo, kb.i32(kGroup)), x.g);
        Value topGroup = kb.divU(hi, kb.i32(kGroup));
        // The top group also holds block j - 1's offsets unless it ends at
        // hi; that block owns it when selected.
        Value prevSelected =
            kb.andI(kb.cmp(CmpIPredicate::sgt, x.k, kb.i32(0)),
                    kb.cmp(CmpIPredicate::eq, x.prev, kb.sub(x.j, kb.i32(1))));
        Value sharedUp =
            kb.andI(kb.cmp(CmpIPredicate::eq, group, topGroup),
                    kb.cmp(CmpIPredicate::ne, kb.andI(hi, kb.i32(kGroup - 1)),
                           kb.i32(kGroup - 1)));
        Value o = kb.add(kb.mul(group, kb.i32(kGroup)),
                         kb.andI(x.t, kb.i32(kGroup - 1)));
        x.owned = kb.andI(
            kb.andI(x.inRange, kb.cmp(CmpIPredicate::sle, group, topGroup)),
            kb.andI(kb.not1(kb.andI(sharedUp, prevSelected)),
                    kb.cmp(CmpIPredicate::slt, o, inCapacity)));
        // Offset o's slot, and where its score is: block j (entry k) or
        // block j + 1 (entry k + 1).
        Value i = kb.sub(p, o);
        Value iAt = kb.maxS(i, kb.i32(0));
        Value jo = kb.divU(iAt, bs);
        Value nextSelected =
            kb.andI(kb.cmp(CmpIPredicate::slt, x.k, lastListed),
                    kb.cmp(CmpIPredicate::eq, x.next, kb.add(x.j, kb.i32(1))));
        Value mine = kb.cmp(CmpIPredicate::eq, jo, x.j);
        Value below =
            kb.andI(kb.cmp(CmpIPredicate::eq, jo, kb.add(x.j, kb.i32(1))),
                    nextSelected);
        Value visible = kb.andI(kb.cmp(CmpIPredicate::sge, i, kb.i32(0)),
                                kb.cmp(CmpIPredicate::slt, i, n));
        x.hit = kb.andI(x.owned, kb.andI(kb.orI(mine, below), visible));
        Value entry =
            kb.add(kb.mul(kb.select(mine, x.k, kb.add(x.k, kb.i32(1))), bs),
                   kb.remU(iAt, bs));
        x.z = kb.loadAt(f32, scores,
                        kb.add(scoreBase, kb.select(x.hit, entry, kb.i32(0))),
                        true);
        x.cell = kb.select(x.owned, o, kb.i32(0));
        x.old = kb.loadAt(f32, dState, kb.add(stateBase, kb.extS64(x.cell)));
      }
      // 3. The new values, and the group maxima.
      for (int64_t u = 0; u < kUnroll; ++u) {
        VEntry &x = vs[u];
        Value used = kb.andI(x.inRange, finite(x.z));
        Value newV = kb.select(used, ema(x.old, x.z), x.old);
        kb.ifThen(used, [&] {
          kb.storeAt(newV, vState, kb.add(stateBase, kb.extS64(x.at)));
          if (!fused)
            kb.storeAt(ema(dOlds[u], x.z), dState,
                       kb.add(stateBase, kb.extS64(kb.sub(p, x.at))));
        });
        if (!fused)
          continue;
        // A group's eight slots are eight lanes of this round (blocks of
        // whole groups; groups aligned in the entries).
        Value inState =
            kb.andI(x.inRange, kb.cmp(CmpIPredicate::slt, x.slot, inCapacity));
        Value m = laneGroupMaxF(kb, kGroup,
                                kb.select(inState, newV, kb.f32(-INFINITY)));
        kb.ifThen(kb.andI(groupLeader, inState),
                  [&] { kb.store(m, kb.gep(vMax, f32, groupOf(x.slot)), 4); });
      }
      for (DItem &x : ds) {
        Value fold = kb.andI(x.hit, finite(x.z));
        Value value = kb.select(fold, ema(x.old, x.z), x.old);
        kb.ifThen(fold, [&] {
          kb.storeAt(value, dState, kb.add(stateBase, kb.extS64(x.cell)));
        });
        // A group's lanes agree on its ownership; the first one writes.
        Value m = laneGroupMaxF(kb, kGroup,
                                kb.select(x.owned, value, kb.f32(-INFINITY)));
        kb.ifThen(kb.andI(groupLeader, x.owned),
                  [&] { kb.store(m, kb.gep(dMax, f32, groupOf(x.cell)), 4); });
      }
    });
    kb.ifThen(kb.andI(kb.cmp(CmpIPredicate::eq, kb.blockIdX(), kb.i32(0)),
                      kb.cmp(CmpIPredicate::eq, kb.threadIdX(), kb.i32(0))),
              [&] {
                Value at = kb.gep(itState, i64, slot);
                kb.store(kb.add(kb.load(i64, at, 8), kb.i64(1)), at, 8);
              });
  });

  LaunchShape shape;
  shape.grid = {spec.ctasPerRequest, spec.batch, 1};
  shape.blockThreads = spec.threads;
  return shape;
}

LaunchShape
mlir::spin::gpu_codegen::buildGroupMaximaKernel(OpBuilder &b, Location loc,
                                                gpu::GPUModuleOp module,
                                                const UpdateKernelSpec &spec) {
  KernelBuilder kb(b, loc, module);
  Type ptr = kb.ptrT(Global), i32 = kb.i32T(), f32 = kb.f32T();
  SmallVector<Type> params(10, ptr);
  OpBuilder::InsertionGuard guard(b);
  gpu::GPUFuncOp func =
      beginKernel(b, loc, module, spec.name + "_maxima", params, spec.threads);
  unsigned a = 0;
  Value positions = func.getArgument(a++), lengths = func.getArgument(a++);
  Value slots = func.getArgument(a++), blocks = func.getArgument(a++);
  Value counts = func.getArgument(a++), skip = func.getArgument(a++);
  Value vState = func.getArgument(a++), dState = func.getArgument(a++);
  Value vMax = func.getArgument(a++), dMax = func.getArgument(a++);

  // The update's own test: a request it left untouched needs nothing.
  Value request = kb.blockIdY();
  Value slot = kb.loadAt(i32, slots, request, true);
  Value p = kb.loadAt(i32, positions, request, true);
  Value n = kb.loadAt(i32, lengths, request, true);
  RowChecks checks =
      checkRow(kb, p, n, spec.capacity, spec.maxBlocks * spec.blockSize);
  Value ok = kb.andI(checks.lengthOk, checks.positionOk);
  ok = kb.andI(ok, kb.cmp(CmpIPredicate::eq,
                          kb.loadAt(i32, skip, request, true), kb.i32(0)));
  kb.ifThen(ok, [&] {
    const int64_t bs = spec.blockSize, groups = stateGroups(spec.capacity);
    // A window of bs consecutive entries spans at most this many groups.
    const int64_t span = (bs + 2 * kGroup - 2) / kGroup;
    Value count = kb.loadAt(i32, counts, request, true);
    Value stateBase = kb.mul(kb.extS64(slot), kb.i64(spec.capacity));
    Value groupBase = kb.mul(kb.extS64(slot), kb.i64(groups));
    Value start =
        kb.add(kb.mul(kb.blockIdX(), kb.i32(spec.threads)), kb.threadIdX());
    // Item t: list entry t / (2 span), V (first span) or D, its group
    // t % span after the window's first.
    kb.forLoop(
        start, kb.mul(count, kb.i32(2 * span)),
        kb.i32(spec.threads * spec.ctasPerRequest), [&](Value t) {
          Value entry = kb.divU(t, kb.i32(2 * span));
          Value within = kb.remU(t, kb.i32(2 * span));
          Value diagonal = kb.cmp(CmpIPredicate::sge, within, kb.i32(span));
          Value g = kb.remU(within, kb.i32(span));
          Value j = kb.loadAt(
              i32, blocks,
              kb.add(kb.mul(request, kb.i32(spec.maxBlocks)), entry), true);
          Value firstSlot = kb.mul(j, kb.i32(bs));
          // V: slots [bs j, bs j + bs); D: offsets p - i of those slots.
          Value lo =
              kb.select(diagonal, kb.sub(p, kb.add(firstSlot, kb.i32(bs - 1))),
                        firstSlot);
          Value hi = kb.select(diagonal, kb.sub(p, firstSlot),
                               kb.add(firstSlot, kb.i32(bs - 1)));
          lo = kb.maxS(lo, kb.i32(0));
          hi = kb.minS(hi, kb.i32(spec.capacity - 1));
          Value group = kb.add(kb.divU(lo, kb.i32(kGroup)), g);
          Value inWindow =
              kb.andI(kb.cmp(CmpIPredicate::sle, lo, hi),
                      kb.cmp(CmpIPredicate::sle, group,
                             kb.divU(kb.maxS(hi, kb.i32(0)), kb.i32(kGroup))));
          kb.ifThen(inWindow, [&] {
            Value state = kb.select(diagonal, dState, vState);
            Value first = kb.mul(group, kb.i32(kGroup));
            Value m = kb.f32(-INFINITY);
            for (int64_t u = 0; u < kGroup; ++u) {
              Value x = kb.add(first, kb.i32(u));
              Value in = kb.cmp(CmpIPredicate::slt, x, kb.i32(spec.capacity));
              Value at = kb.minS(x, kb.i32(spec.capacity - 1));
              Value value =
                  kb.loadAt(f32, state, kb.add(stateBase, kb.extS64(at)));
              m = kb.maxF(m, kb.select(in, value, kb.f32(-INFINITY)));
            }
            kb.storeAt(m, kb.select(diagonal, dMax, vMax),
                       kb.add(groupBase, kb.extS64(group)));
          });
        });
  });

  LaunchShape shape;
  shape.grid = {spec.ctasPerRequest, spec.batch, 1};
  shape.blockThreads = spec.threads;
  return shape;
}

LaunchShape mlir::spin::gpu_codegen::buildResetKernel(
    OpBuilder &b, Location loc, gpu::GPUModuleOp module,
    const ResetKernelSpec &spec) {
  KernelBuilder kb(b, loc, module);
  Type ptr = kb.ptrT(Global), i32 = kb.i32T(), f32 = kb.f32T();
  SmallVector<Type> params(spec.observations ? 8 : 7, ptr);
  OpBuilder::InsertionGuard guard(b);
  gpu::GPUFuncOp func =
      beginKernel(b, loc, module, spec.name, params, spec.threads);
  Value reset = func.getArgument(0), slots = func.getArgument(1);
  Value vState = func.getArgument(2), dState = func.getArgument(3);
  Value itState = func.getArgument(4);
  Value vMax = func.getArgument(5), dMax = func.getArgument(6);
  Value obsRows = spec.observations ? func.getArgument(7) : Value();
  Value request = kb.blockIdY();
  Value flag = kb.loadAt(kb.i8T(), reset, request, true);
  kb.ifThen(kb.cmp(CmpIPredicate::ne, flag, kb.constant(kb.i8T(), 0)), [&] {
    Value slot = kb.loadAt(i32, slots, request, true);
    Value stateBase = kb.mul(kb.extS64(slot), kb.i64(spec.capacity));
    Value start = kb.add(kb.mul(kb.blockIdX(), kb.i32(spec.threads)),
                         kb.threadIdX());
    kb.forLoop(start, kb.i32(spec.capacity),
               kb.i32(spec.threads * spec.ctasPerRequest), [&](Value i) {
                 Value at = kb.add(stateBase, kb.extS64(i));
                 kb.storeAt(kb.f32(0.0), vState, at);
                 kb.storeAt(kb.f32(0.0), dState, at);
               });
    const int64_t groups = stateGroups(spec.capacity);
    Value groupBase = kb.mul(kb.extS64(slot), kb.i64(groups));
    kb.forLoop(start, kb.i32(groups),
               kb.i32(spec.threads * spec.ctasPerRequest), [&](Value g) {
                 Value at = kb.add(groupBase, kb.extS64(g));
                 kb.storeAt(kb.f32(0.0), vMax, at);
                 kb.storeAt(kb.f32(0.0), dMax, at);
               });
    kb.ifThen(kb.andI(kb.cmp(CmpIPredicate::eq, kb.blockIdX(), kb.i32(0)),
                      kb.cmp(CmpIPredicate::eq, kb.threadIdX(), kb.i32(0))),
              [&] {
                kb.storeAt(kb.i64(0), itState, slot);
                if (obsRows)
                  kb.storeAt(kb.i32(0), obsRows, slot);
              });
  });
  (void)f32;
  LaunchShape shape;
  shape.grid = {spec.ctasPerRequest, spec.batch, 1};
  shape.blockThreads = spec.threads;
  return shape;
}
