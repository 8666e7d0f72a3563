//===- TopKKernel.cpp - top-K of scored rows, one CTA per row -------------===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
// A radix select over the order-preserving u32 keys of the row's scores
// finds the K-th largest; ties at the threshold go to the lower entry (and
// entries are in slot order, so to the lower slot). The winners are then
// sorted by (score desc, entry asc) with a bitonic sort of 64-bit keys in
// shared memory and written as slots, padded with -1.
//
//===----------------------------------------------------------------------===//

#include "KernelLibrary.h"
#include "Kernels.h"

#include "llvm/Support/MathExtras.h"

using namespace mlir;
using namespace mlir::spin;
using namespace mlir::spin::gpu_codegen;
using arith::CmpFPredicate;
using arith::CmpIPredicate;

LaunchShape mlir::spin::gpu_codegen::buildTopKKernel(OpBuilder &b, Location loc,
                                                     gpu::GPUModuleOp module,
                                                     const TopKKernelSpec &spec) {
  KernelBuilder kb(b, loc, module);
  Type ptr = kb.ptrT(Global), i32 = kb.i32T(), i64 = kb.i64T(), f32 = kb.f32T();
  SmallVector<Type> params = {ptr, ptr};
  if (spec.sparse)
    params.append({ptr, ptr});
  params.push_back(ptr);
  gpu::GPUFuncOp func =
      createKernel(b, loc, module, spec.name, params, spec.threads);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPoint(func.getBody().front().getTerminator());
  unsigned a = 0;
  Value scores = func.getArgument(a++), lengths = func.getArgument(a++);
  Value blocks = spec.sparse ? func.getArgument(a++) : Value();
  Value counts = spec.sparse ? func.getArgument(a++) : Value();
  Value out = func.getArgument(a++);

  Value rowId = kb.blockIdX();
  Value request = kb.divU(rowId, kb.i32(spec.rows));
  Value n;
  if (spec.sparse) {
    n = kb.mul(kb.loadAt(i32, counts, request, true), kb.i32(spec.blockSize));
  } else {
    Value visible = kb.loadAt(i32, lengths, rowId, true);
    n = kb.minS(kb.maxS(visible, kb.i32(0)), kb.i32(spec.width));
  }
  Value rowBase = kb.mul(rowId, kb.i32(spec.width));
  auto keyOf = [&](Value i) -> std::pair<Value, Value> {
    Value z = kb.loadAt(f32, scores, kb.add(rowBase, i));
    return {kb.cmpF(CmpFPredicate::ORD, z, z), kb.orderedKey(z)};
  };
  RadixSelection selection = selectLargest(kb, spec.name + "_select", i32, n,
                                           kb.i32(spec.k), spec.threads, keyOf);

  // Gather the winners as (~key << 32 | entry); unused cells sort last.
  int64_t size = static_cast<int64_t>(llvm::PowerOf2Ceil(spec.k));
  Value list = kb.sharedArray(spec.name + "_list", i64, size);
  Value counter = kb.sharedArray(spec.name + "_count", i32, 1);
  forEachThreadStrided(kb, kb.i32(size), spec.threads,
                       [&](Value i) { kb.storeAt(kb.i64(-1), list, i); });
  kb.ifThen(kb.cmp(CmpIPredicate::eq, kb.threadIdX(), kb.i32(0)),
            [&] { kb.storeAt(kb.i32(0), counter, kb.i32(0)); });
  kb.barrier();
  forEachThreadStrided(kb, n, spec.threads, [&](Value i) {
    auto [eligible, key] = keyOf(i);
    kb.ifThen(isSelected(kb, selection, eligible, key, i), [&] {
      Value at = kb.atomicAdd(counter, kb.i32(1));
      kb.ifThen(kb.cmp(CmpIPredicate::slt, at, kb.i32(spec.k)), [&] {
        Value packed = kb.orI(
            kb.shl(kb.extU64(kb.xorI(key, kb.i32(-1))), kb.i64(32)),
            kb.extU64(i));
        kb.storeAt(packed, list, at);
      });
    });
  });
  kb.barrier();
  bitonicSortU64(kb, list, size, spec.threads);

  Value outBase = kb.mul(rowId, kb.i32(spec.k));
  forEachThreadStrided(kb, kb.i32(spec.k), spec.threads, [&](Value i) {
    Value packed = kb.loadAt(i64, list, i);
    Value used = kb.cmp(CmpIPredicate::ne, packed, kb.i64(-1));
    Value entry = kb.trunc32(packed);
    Value slot = entry;
    if (spec.sparse) {
      Value bs = kb.i32(spec.blockSize);
      slot = kb.ifThenElse(
          {i32}, used,
          [&]() -> SmallVector<Value> {
            Value block = kb.loadAt(
                i32, blocks,
                kb.add(kb.mul(request, kb.i32(spec.maxBlocks)),
                       kb.divU(entry, bs)),
                true);
            return {kb.add(kb.mul(block, bs), kb.remU(entry, bs))};
          },
          [&]() -> SmallVector<Value> { return {kb.i32(-1)}; })[0];
    }
    kb.storeAt(kb.select(used, slot, kb.i32(-1)), out, kb.add(outBase, i));
  });

  LaunchShape shape;
  shape.grid = {spec.batch * spec.rows, 1, 1};
  shape.blockThreads = spec.threads;
  return shape;
}
