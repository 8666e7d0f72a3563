//===- CodeBuilder.h - scalar code shared by the lowerings --------*- C++ -*-===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
// Both lowerings write SPIN's ops as scalar code: the CPU lowering as loop
// nests over memrefs (LoopBuilder), the GPU lowering as thread-level kernel
// code (KernelBuilder). CodeBuilder is what they share: constants, integer
// and float arithmetic (arith), structured control flow (scf), and the
// operation set that the rule templates of spin/Runtime/Semantics.h are
// written against, so that every backend emits each SPIN rule from its one
// definition. Backend-specific memory, warps, MMAs and clusters live in the
// derived builders.
//
//===----------------------------------------------------------------------===//

#ifndef SPIN_CONVERSION_UTILS_CODEBUILDER_H
#define SPIN_CONVERSION_UTILS_CODEBUILDER_H

#include "spin/Dialect/Spin/IR/SpinAttrs.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Builders.h"

namespace mlir::spin {

/// Builds scalar code at one insertion point; nested regions (loops, ifs)
/// move the insertion point in and restore it on exit.
class CodeBuilder {
public:
  CodeBuilder(OpBuilder &b, Location loc) : b(b), loc(loc) {}

  OpBuilder &builder() { return b; }
  Location location() const { return loc; }

  //===--- types ---------------------------------------------------------===//
  Type i1T() { return b.getI1Type(); }
  Type i8T() { return b.getI8Type(); }
  Type i16T() { return b.getI16Type(); }
  Type i32T() { return b.getI32Type(); }
  Type i64T() { return b.getI64Type(); }
  Type f32T() { return b.getF32Type(); }
  Type f64T() { return b.getF64Type(); }

  //===--- constants -----------------------------------------------------===//
  Value index(int64_t v);
  Value i1(bool v);
  Value i8(int64_t v);
  Value i32(int64_t v);
  Value i64(int64_t v);
  /// An i64 holding the bits of `v` (hash constants).
  Value u64(uint64_t v) { return i64(static_cast<int64_t>(v)); }
  Value f32(double v);
  Value f64(double v);
  /// An integer constant of `type` (i8, i32 or i64).
  Value constant(Type type, int64_t v);

  //===--- integer and float arithmetic -----------------------------------===//
  /// add, sub and mul pick the integer or float op by the operands' type.
  Value add(Value a, Value c);
  Value sub(Value a, Value c);
  Value mul(Value a, Value c);
  Value divU(Value a, Value c);
  Value remU(Value a, Value c);
  /// `ceil(a / c)` of non-negative integers.
  Value ceilDivU(Value a, Value c);
  Value andI(Value a, Value c);
  Value orI(Value a, Value c);
  Value xorI(Value a, Value c);
  Value shl(Value a, Value c);
  Value shrU(Value a, Value c);
  Value minS(Value a, Value c);
  Value maxS(Value a, Value c);
  Value minU(Value a, Value c);
  Value cmp(arith::CmpIPredicate pred, Value a, Value c);
  Value cmpF(arith::CmpFPredicate pred, Value a, Value c);
  Value select(Value cond, Value a, Value c);
  Value not1(Value v) { return xorI(v, i1(true)); }
  Value eq(Value a, Value c) { return cmp(arith::CmpIPredicate::eq, a, c); }
  Value gtS(Value a, Value c) { return cmp(arith::CmpIPredicate::sgt, a, c); }
  /// An integer constant of `like`'s type (index, i32, i64, ...).
  Value constantLike(Value like, int64_t v);
  /// NaN-propagating maximum (arith.maximumf).
  Value maxF(Value a, Value c);
  Value extU64(Value v);
  Value extS64(Value v);
  Value trunc32(Value v);
  /// An i64 or index value as f64 (signed).
  Value toF64(Value v);
  /// An f64 truncated toward zero to i64.
  Value truncToI64(Value x);
  /// An i64 as `like`'s integer type (truncated, or cast to index).
  Value narrowLike(Value v, Value like);
  /// `ceil(x)` of an f64 as i64, without a math library call: truncate,
  /// then step up where the truncation is below `x`.
  Value ceilToI64(Value x);

  //===--- control flow ----------------------------------------------------===//
  void forLoop(Value lb, Value ub, Value step, function_ref<void(Value)> body);
  SmallVector<Value>
  forLoopWith(Value lb, Value ub, Value step, ValueRange init,
              function_ref<SmallVector<Value>(Value, ValueRange)> body);
  void ifThen(Value cond, function_ref<void()> thenBody);
  SmallVector<Value> ifThenElse(TypeRange types, Value cond,
                                function_ref<SmallVector<Value>()> thenBody,
                                function_ref<SmallVector<Value>()> elseBody);

  //===--- SPIN rules (spin/Runtime/Semantics.h) ----------------------------===//
  /// splitmix64's finalizer (SPIN_SPEC §3.7) on an i64.
  Value mix(Value x);

  /// SPIN_SPEC §3.10's EMA weights as f32: a = f32(decay), c = f32(1 - decay)
  /// (1 - decay in double, then rounded).
  std::pair<Value, Value> emaWeights(double decay);
  /// One EMA step `a*old + c*z`: both products and the sum rounded to f32,
  /// never fused, so that the CPU and the GPU agree bit for bit.
  Value ema(Value old, Value z, Value a, Value c) {
    return emaFold(old, a, mul(c, z));
  }
  /// The same step with `cz = c*z` computed once for several states.
  Value emaFold(Value old, Value a, Value cz) { return add(mul(a, old), cz); }

  /// Mean and top-4 block pooling (SPIN_SPEC §3.3) fold the block's slots
  /// in slot order into a running sum and the four largest values (largest
  /// first; a later value equal to a kept one goes after it). Max pooling
  /// is `maxF` over the slots, in any order.
  SmallVector<Value> poolSumsStart();
  SmallVector<Value> poolSumsTake(ValueRange sums, Value x);
  /// The pooled value of `count` (> 0) folded slots: the sum over the
  /// count, or the sum of the min(count, 4) largest over that number.
  Value poolSumsFinish(PoolingKind kind, ValueRange sums, Value count);

protected:
  OpBuilder &b;
  Location loc;
};

} // namespace mlir::spin

#endif // SPIN_CONVERSION_UTILS_CODEBUILDER_H
