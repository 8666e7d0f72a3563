//===- LoopBuilder.cpp - scalar loop nests for the CPU lowering -----------===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
//===----------------------------------------------------------------------===//

#include "LoopBuilder.h"

#include "mlir/Interfaces/FunctionInterfaces.h"

#include <limits>

using namespace mlir;
using namespace mlir::spin;

using arith::CmpFPredicate;
using arith::CmpIPredicate;

//===----------------------------------------------------------------------===//
// Constants and casts
//===----------------------------------------------------------------------===//

Value LoopBuilder::negInf() {
  return f32(-std::numeric_limits<double>::infinity());
}
Value LoopBuilder::nan() { return f32(std::numeric_limits<double>::quiet_NaN()); }

Value LoopBuilder::toIndex(Value integer) {
  return arith::IndexCastOp::create(b, loc, b.getIndexType(), integer);
}
Value LoopBuilder::toI32(Value index) {
  return arith::IndexCastOp::create(b, loc, b.getI32Type(), index);
}
Value LoopBuilder::toI64(Value integer) {
  if (integer.getType().isIndex())
    return arith::IndexCastOp::create(b, loc, b.getI64Type(), integer);
  if (integer.getType().getIntOrFloatBitWidth() < 64)
    return arith::ExtSIOp::create(b, loc, b.getI64Type(), integer);
  return integer;
}
//===----------------------------------------------------------------------===//
// Memory
//===----------------------------------------------------------------------===//

Value LoopBuilder::dim(Value memref, int64_t d) {
  return memref::DimOp::create(b, loc, memref, d);
}
Value LoopBuilder::load(Value memref, ValueRange indices) {
  return memref::LoadOp::create(b, loc, memref, indices);
}
void LoopBuilder::store(Value value, Value memref, ValueRange indices) {
  memref::StoreOp::create(b, loc, value, memref, indices);
}
Value LoopBuilder::loadIndex(Value memref, ValueRange indices) {
  return toIndex(load(memref, indices));
}

Value LoopBuilder::alloc(MemRefType type, ArrayRef<Value> sizes) {
  SmallVector<Value> dynamic;
  for (auto [d, size] : llvm::enumerate(type.getShape()))
    if (ShapedType::isDynamic(size))
      dynamic.push_back(sizes[d]);
  return memref::AllocOp::create(b, loc, type, dynamic);
}

Value LoopBuilder::toBuffer(Value tensor) {
  auto type = cast<RankedTensorType>(tensor.getType());
  auto memrefType = MemRefType::get(type.getShape(), type.getElementType());
  return bufferization::ToBufferOp::create(b, loc, memrefType, tensor,
                                           /*read_only=*/true);
}

Value LoopBuilder::toTensor(Value memref, Type tensorType) {
  return bufferization::ToTensorOp::create(b, loc, tensorType, memref,
                                           /*restrict=*/true,
                                           /*writable=*/true);
}

//===----------------------------------------------------------------------===//
// Arithmetic
//===----------------------------------------------------------------------===//

Value LoopBuilder::isFinite(Value f) {
  Value magnitude = math::AbsFOp::create(b, loc, f);
  Value inf = f32(std::numeric_limits<double>::infinity());
  return cmpF(CmpFPredicate::OLT, magnitude, inf);
}

//===----------------------------------------------------------------------===//
// Control flow
//===----------------------------------------------------------------------===//

void LoopBuilder::at(OpBuilder &nested, function_ref<void()> body) {
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPoint(nested.getInsertionBlock(), nested.getInsertionPoint());
  body();
}

void LoopBuilder::forEach(Value lb, Value ub, function_ref<void(Value)> body) {
  scf::ForOp::create(b, loc, lb, ub, index(1), ValueRange{},
                     [&](OpBuilder &nested, Location, Value iv, ValueRange) {
                       at(nested, [&] {
                         body(iv);
                         scf::YieldOp::create(b, loc);
                       });
                     });
}

SmallVector<Value> LoopBuilder::forEachWith(
    Value lb, Value ub, ValueRange inits,
    function_ref<SmallVector<Value>(Value, ValueRange)> body) {
  auto loop = scf::ForOp::create(
      b, loc, lb, ub, index(1), inits,
      [&](OpBuilder &nested, Location, Value iv, ValueRange iters) {
        at(nested, [&] { scf::YieldOp::create(b, loc, body(iv, iters)); });
      });
  return SmallVector<Value>(loop.getResults());
}

void LoopBuilder::fill(Value memref, Value value) {
  auto type = cast<MemRefType>(memref.getType());
  SmallVector<Value> ivs;
  std::function<void(int64_t)> nest = [&](int64_t d) {
    if (d == type.getRank()) {
      store(value, memref, ivs);
      return;
    }
    forEach(index(0), dim(memref, d), [&](Value iv) {
      ivs.push_back(iv);
      nest(d + 1);
      ivs.pop_back();
    });
  };
  nest(0);
}

//===----------------------------------------------------------------------===//
// SPIN pieces
//===----------------------------------------------------------------------===//

Value LoopBuilder::toF32(Value scalar) {
  Type type = scalar.getType();
  Type f32Type = b.getF32Type();
  if (type == f32Type)
    return scalar;
  if (!isa<Float8E4M3FNType>(type))
    return arith::ExtFOp::create(b, loc, f32Type, scalar);
  // fp8 e4m3: sign, 4 exponent bits (bias 7), 3 mantissa bits.
  Value byte = arith::BitcastOp::create(b, loc, b.getI8Type(), scalar);
  Value bits = arith::ExtUIOp::create(b, loc, b.getI32Type(), byte);
  auto shr = [&](Value v, int64_t s) {
    return arith::ShRUIOp::create(b, loc, v, i32(s)).getResult();
  };
  auto shl = [&](Value v, int64_t s) {
    return arith::ShLIOp::create(b, loc, v, i32(s)).getResult();
  };
  Value sign = andI(shr(bits, 7), i32(1));
  Value exponent = andI(shr(bits, 3), i32(15));
  Value mantissa = andI(bits, i32(7));
  // Normal: the same value as an f32 with the exponent rebased (127 - 7).
  Value normalBits = orI(orI(shl(sign, 31), shl(add(exponent, i32(120)), 23)),
                         shl(mantissa, 20));
  Value normal = arith::BitcastOp::create(b, loc, f32Type, normalBits);
  // Subnormal: mantissa * 2^-9, with the sign.
  Value magnitude = mul(arith::UIToFPOp::create(b, loc, f32Type, mantissa),
                        f32(1.0 / 512.0));
  Value subnormal =
      select(cmp(CmpIPredicate::ne, sign, i32(0)),
             arith::NegFOp::create(b, loc, magnitude), magnitude);
  Value isNaN = andI(cmp(CmpIPredicate::eq, exponent, i32(15)),
                     cmp(CmpIPredicate::eq, mantissa, i32(7)));
  Value finite = select(cmp(CmpIPredicate::eq, exponent, i32(0)), subnormal,
                        normal);
  return select(isNaN, nan(), finite);
}

Value LoopBuilder::offerTopN(Value keys, Value ids, Value n, Value count,
                             Value key, Value id,
                             function_ref<Value(Value, Value)> better) {
  Type i1Type = b.getI1Type();
  // With n == 0 nothing is admitted (and keys[n - 1] must not be read).
  Value hasRoom = cmp(CmpIPredicate::ugt, n, index(0));
  Value full = andI(hasRoom, cmp(CmpIPredicate::uge, count, n));
  // Admit when there is room, or when the key beats the current worst.
  Value admit = ifThenElse(
      i1Type, full,
      [&]() -> SmallVector<Value> {
        Value worst = load(keys, {sub(n, index(1))});
        return {better(key, worst)};
      },
      [&]() -> SmallVector<Value> { return {i1(true)}; })[0];
  admit = andI(admit, hasRoom);
  ifThen(admit, [&] {
    Value start = select(full, sub(n, index(1)), count);
    // Shift worse entries down one place; stop at an equal or better one.
    auto loop = scf::WhileOp::create(
        b, loc, TypeRange{b.getIndexType()}, ValueRange{start},
        [&](OpBuilder &nested, Location, ValueRange args) {
          at(nested, [&] {
            Value j = args[0];
            Value positive = cmp(CmpIPredicate::ugt, j, index(0));
            Value moves = ifThenElse(
                i1Type, positive,
                [&]() -> SmallVector<Value> {
                  return {better(key, load(keys, {sub(j, index(1))}))};
                },
                [&]() -> SmallVector<Value> { return {i1(false)}; })[0];
            scf::ConditionOp::create(b, loc, moves, ValueRange{j});
          });
        },
        [&](OpBuilder &nested, Location, ValueRange args) {
          at(nested, [&] {
            Value j = args[0];
            Value prev = sub(j, index(1));
            store(load(keys, {prev}), keys, {j});
            store(load(ids, {prev}), ids, {j});
            scf::YieldOp::create(b, loc, ValueRange{prev});
          });
        });
    Value slot = loop.getResult(0);
    store(key, keys, {slot});
    store(id, ids, {slot});
  });
  Value grows = andI(admit, not1(full));
  return select(grows, add(count, index(1)), count);
}

std::pair<Value, Value> LoopBuilder::pool(PoolingKind kind, Value begin,
                                          Value end,
                                          function_ref<Value(Value)> loadFn,
                                          bool finiteOnly) {
  Value ninf = negInf();
  // Running state: the maximum, CodeBuilder's pooling sums, the count.
  SmallVector<Value> inits = {ninf};
  inits.append(poolSumsStart());
  inits.push_back(index(0));
  SmallVector<Value> result = forEachWith(
      begin, end, inits, [&](Value i, ValueRange it) -> SmallVector<Value> {
        Value x = loadFn(i);
        Value take = finiteOnly ? isFinite(x) : i1(true);
        SmallVector<Value> next = {maxF(it[0], x)};
        next.append(poolSumsTake(it.slice(1, 5), x));
        next.push_back(add(it[6], index(1)));
        for (auto [n, old] : llvm::zip_equal(next, it))
          n = select(take, n, old);
        return next;
      });
  Value count = result[6];
  Value any = cmp(CmpIPredicate::ugt, count, index(0));
  Value pooled = kind == PoolingKind::max
                     ? result[0]
                     : poolSumsFinish(kind, ValueRange(result).slice(1, 5), count);
  return {select(any, pooled, ninf), count};
}

const StateBuffers *mlir::spin::lookupState(const StateBufferMap &buffers,
                                            Operation *op, Value state) {
  auto func = op->getParentOfType<FunctionOpInterface>();
  if (!func)
    return nullptr;
  int64_t layer = cast<StateType>(state.getType()).getLayer();
  auto it = buffers.find({func.getOperation(), layer});
  return it == buffers.end() ? nullptr : &it->second;
}
