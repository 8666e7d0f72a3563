//===- CodeBuilder.cpp - scalar code shared by the lowerings --------------===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
//===----------------------------------------------------------------------===//

#include "spin/Conversion/Utils/CodeBuilder.h"

#include "spin/Runtime/Semantics.h"

#include <cassert>
#include <cmath>

using namespace mlir;
using namespace mlir::spin;

//===----------------------------------------------------------------------===//
// Constants
//===----------------------------------------------------------------------===//

Value CodeBuilder::index(int64_t v) {
  return arith::ConstantIndexOp::create(b, loc, v);
}

Value CodeBuilder::i1(bool v) { return constant(i1T(), v); }

Value CodeBuilder::i8(int64_t v) { return constant(i8T(), v); }

Value CodeBuilder::i32(int64_t v) { return constant(i32T(), v); }

Value CodeBuilder::i64(int64_t v) { return constant(i64T(), v); }

Value CodeBuilder::f32(double v) {
  return arith::ConstantFloatOp::create(b, loc, b.getF32Type(),
                                        APFloat(static_cast<float>(v)));
}

Value CodeBuilder::f64(double v) {
  return arith::ConstantFloatOp::create(b, loc, b.getF64Type(), APFloat(v));
}

Value CodeBuilder::constant(Type type, int64_t v) {
  return arith::ConstantIntOp::create(b, loc, type, v);
}

Value CodeBuilder::constantLike(Value like, int64_t v) {
  if (like.getType().isIndex())
    return index(v);
  return constant(like.getType(), v);
}

//===----------------------------------------------------------------------===//
// Arithmetic
//===----------------------------------------------------------------------===//

Value CodeBuilder::add(Value a, Value c) {
  if (isa<FloatType>(a.getType()))
    return arith::AddFOp::create(b, loc, a, c);
  return arith::AddIOp::create(b, loc, a, c);
}

Value CodeBuilder::sub(Value a, Value c) {
  if (isa<FloatType>(a.getType()))
    return arith::SubFOp::create(b, loc, a, c);
  return arith::SubIOp::create(b, loc, a, c);
}

Value CodeBuilder::mul(Value a, Value c) {
  if (isa<FloatType>(a.getType()))
    return arith::MulFOp::create(b, loc, a, c);
  return arith::MulIOp::create(b, loc, a, c);
}

Value CodeBuilder::divU(Value a, Value c) {
  return arith::DivUIOp::create(b, loc, a, c);
}

Value CodeBuilder::remU(Value a, Value c) {
  return arith::RemUIOp::create(b, loc, a, c);
}

Value CodeBuilder::ceilDivU(Value a, Value c) {
  return arith::CeilDivUIOp::create(b, loc, a, c);
}

Value CodeBuilder::andI(Value a, Value c) {
  return arith::AndIOp::create(b, loc, a, c);
}

Value CodeBuilder::orI(Value a, Value c) {
  return arith::OrIOp::create(b, loc, a, c);
}

Value CodeBuilder::xorI(Value a, Value c) {
  return arith::XOrIOp::create(b, loc, a, c);
}

Value CodeBuilder::shl(Value a, Value c) {
  return arith::ShLIOp::create(b, loc, a, c);
}

Value CodeBuilder::shrU(Value a, Value c) {
  return arith::ShRUIOp::create(b, loc, a, c);
}

Value CodeBuilder::minS(Value a, Value c) {
  return arith::MinSIOp::create(b, loc, a, c);
}

Value CodeBuilder::maxS(Value a, Value c) {
  return arith::MaxSIOp::create(b, loc, a, c);
}

Value CodeBuilder::minU(Value a, Value c) {
  return arith::MinUIOp::create(b, loc, a, c);
}

Value CodeBuilder::cmp(arith::CmpIPredicate pred, Value a, Value c) {
  return arith::CmpIOp::create(b, loc, pred, a, c);
}

Value CodeBuilder::cmpF(arith::CmpFPredicate pred, Value a, Value c) {
  return arith::CmpFOp::create(b, loc, pred, a, c);
}

Value CodeBuilder::select(Value cond, Value a, Value c) {
  return arith::SelectOp::create(b, loc, cond, a, c);
}

Value CodeBuilder::maxF(Value a, Value c) {
  return arith::MaximumFOp::create(b, loc, a, c);
}

Value CodeBuilder::extU64(Value v) {
  return arith::ExtUIOp::create(b, loc, i64T(), v);
}

Value CodeBuilder::extS64(Value v) {
  return arith::ExtSIOp::create(b, loc, i64T(), v);
}

Value CodeBuilder::trunc32(Value v) {
  return arith::TruncIOp::create(b, loc, i32T(), v);
}

Value CodeBuilder::toF64(Value v) {
  if (v.getType().isIndex())
    v = arith::IndexCastOp::create(b, loc, i64T(), v);
  return arith::SIToFPOp::create(b, loc, f64T(), v);
}

Value CodeBuilder::truncToI64(Value x) {
  return arith::FPToSIOp::create(b, loc, i64T(), x);
}

Value CodeBuilder::narrowLike(Value v, Value like) {
  Type type = like.getType();
  if (type == v.getType())
    return v;
  if (type.isIndex())
    return arith::IndexCastOp::create(b, loc, type, v);
  return arith::TruncIOp::create(b, loc, type, v);
}

Value CodeBuilder::ceilToI64(Value x) {
  Value truncated = truncToI64(x);
  Value below = cmpF(arith::CmpFPredicate::OLT, toF64(truncated), x);
  return select(below, add(truncated, i64(1)), truncated);
}

//===----------------------------------------------------------------------===//
// Control flow
//===----------------------------------------------------------------------===//

void CodeBuilder::forLoop(Value lb, Value ub, Value step,
                          function_ref<void(Value)> body) {
  scf::ForOp::create(b, loc, lb, ub, step, ValueRange{},
                     [&](OpBuilder &nested, Location, Value iv, ValueRange) {
                       OpBuilder::InsertionGuard guard(b);
                       b.setInsertionPoint(nested.getInsertionBlock(),
                                           nested.getInsertionPoint());
                       body(iv);
                       scf::YieldOp::create(b, loc);
                     });
}

SmallVector<Value> CodeBuilder::forLoopWith(
    Value lb, Value ub, Value step, ValueRange init,
    function_ref<SmallVector<Value>(Value, ValueRange)> body) {
  auto loop = scf::ForOp::create(
      b, loc, lb, ub, step, init,
      [&](OpBuilder &nested, Location, Value iv, ValueRange args) {
        OpBuilder::InsertionGuard guard(b);
        b.setInsertionPoint(nested.getInsertionBlock(),
                            nested.getInsertionPoint());
        SmallVector<Value> next = body(iv, args);
        scf::YieldOp::create(b, loc, next);
      });
  return SmallVector<Value>(loop.getResults());
}

void CodeBuilder::ifThen(Value cond, function_ref<void()> thenBody) {
  auto op = scf::IfOp::create(b, loc, cond, /*withElseRegion=*/false);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPoint(op.thenBlock()->getTerminator());
  thenBody();
}

SmallVector<Value>
CodeBuilder::ifThenElse(TypeRange types, Value cond,
                        function_ref<SmallVector<Value>()> thenBody,
                        function_ref<SmallVector<Value>()> elseBody) {
  auto op = scf::IfOp::create(
      b, loc, cond,
      [&](OpBuilder &nested, Location) {
        OpBuilder::InsertionGuard guard(b);
        b.setInsertionPoint(nested.getInsertionBlock(),
                            nested.getInsertionPoint());
        scf::YieldOp::create(b, loc, thenBody());
      },
      [&](OpBuilder &nested, Location) {
        OpBuilder::InsertionGuard guard(b);
        b.setInsertionPoint(nested.getInsertionBlock(),
                            nested.getInsertionPoint());
        scf::YieldOp::create(b, loc, elseBody());
      });
  (void)types;
  return SmallVector<Value>(op.getResults());
}

//===----------------------------------------------------------------------===//
// SPIN rules
//===----------------------------------------------------------------------===//

Value CodeBuilder::mix(Value x) { return ::spin::runtime::splitmix64(*this, x); }

std::pair<Value, Value> CodeBuilder::emaWeights(double decay) {
  return {f32(static_cast<float>(decay)), f32(static_cast<float>(1.0 - decay))};
}

SmallVector<Value> CodeBuilder::poolSumsStart() {
  Value ninf = f32(-INFINITY);
  return {f32(0.0), ninf, ninf, ninf, ninf};
}

SmallVector<Value> CodeBuilder::poolSumsTake(ValueRange sums, Value x) {
  SmallVector<Value> next = {add(sums[0], x)};
  // Insert x into the sorted four: it passes the kept values it exceeds.
  Value carry = x;
  for (Value kept : sums.drop_front()) {
    Value bigger = cmpF(arith::CmpFPredicate::OGT, carry, kept);
    next.push_back(select(bigger, carry, kept));
    carry = select(bigger, kept, carry);
  }
  return next;
}

Value CodeBuilder::poolSumsFinish(PoolingKind kind, ValueRange sums,
                                  Value count) {
  // Counts are at most a block's size: converting them signed is exact.
  auto toF32 = [&](Value n) -> Value {
    if (n.getType().isIndex())
      n = arith::IndexCastOp::create(b, loc, i64T(), n);
    return arith::SIToFPOp::create(b, loc, f32T(), n);
  };
  assert(kind != PoolingKind::max && "max pooling is maxF over the slots");
  if (kind == PoolingKind::mean)
    return arith::DivFOp::create(b, loc, sums[0], toF32(count));
  Value used = minS(count, constantLike(count, 4));
  Value sum = sums[1];
  for (int64_t s = 1; s < 4; ++s)
    sum = select(gtS(used, constantLike(count, s)), add(sum, sums[1 + s]), sum);
  return arith::DivFOp::create(b, loc, sum, toF32(used));
}
