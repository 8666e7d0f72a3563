//===- SpinAbi.cpp - the compiler side of the runtime contract ------------===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
//===----------------------------------------------------------------------===//

#include "spin/Dialect/Spin/IR/SpinAbi.h"

#include "mlir/IR/MLIRContext.h"

using namespace mlir;
using namespace mlir::spin;

std::optional<abi::DType> mlir::spin::runtimeDType(Type type) {
  if (type.isF32())
    return abi::DType::f32;
  if (type.isF16())
    return abi::DType::f16;
  if (type.isBF16())
    return abi::DType::bf16;
  if (isa<Float8E4M3FNType>(type))
    return abi::DType::fp8e4m3;
  if (type.isInteger(1))
    return abi::DType::i1;
  if (type.isInteger(8))
    return abi::DType::i8;
  if (type.isInteger(32))
    return abi::DType::i32;
  if (type.isInteger(64))
    return abi::DType::i64;
  return std::nullopt;
}

Type mlir::spin::mlirElementType(MLIRContext *context, abi::DType dtype) {
  switch (dtype) {
  case abi::DType::f32:
    return Float32Type::get(context);
  case abi::DType::f16:
    return Float16Type::get(context);
  case abi::DType::bf16:
    return BFloat16Type::get(context);
  case abi::DType::fp8e4m3:
    return Float8E4M3FNType::get(context);
  case abi::DType::i1:
    return IntegerType::get(context, 1);
  case abi::DType::i8:
    return IntegerType::get(context, 8);
  case abi::DType::i32:
    return IntegerType::get(context, 32);
  case abi::DType::i64:
    return IntegerType::get(context, 64);
  }
  return Type();
}

SmallVector<int64_t> mlir::spin::stateFieldPlanShape(abi::StateField field) {
  const abi::StateFieldInfo &info = abi::stateFieldInfo(field);
  SmallVector<int64_t> shape;
  for (size_t d = 0; d < info.rank(); ++d)
    shape.push_back(info.dims[d] == abi::StateDim::Prediction
                        ? abi::kPredictionRecordSize
                        : -1);
  return shape;
}

MemRefType mlir::spin::stateFieldMemRefType(MLIRContext *context,
                                            abi::StateField field,
                                            bool fixedRecord) {
  const abi::StateFieldInfo &info = abi::stateFieldInfo(field);
  SmallVector<int64_t> shape(info.rank(), ShapedType::kDynamic);
  if (fixedRecord)
    for (auto [d, size] : llvm::enumerate(stateFieldPlanShape(field)))
      if (size >= 0)
        shape[d] = size;
  return MemRefType::get(shape, mlirElementType(context, info.dtype));
}

StringRef mlir::spin::roleAttrName(abi::ArgRole role) {
  switch (role) {
  case abi::ArgRole::Input:
    return SpinDialect::InputAttrHelper::getNameStr();
  case abi::ArgRole::Positions:
    return SpinDialect::PositionsAttrHelper::getNameStr();
  case abi::ArgRole::RequestIds:
    return SpinDialect::RequestIdsAttrHelper::getNameStr();
  case abi::ArgRole::Accepted:
    return SpinDialect::AcceptedAttrHelper::getNameStr();
  case abi::ArgRole::Reset:
    return SpinDialect::ResetAttrHelper::getNameStr();
  case abi::ArgRole::Slots:
    return SpinDialect::SlotsAttrHelper::getNameStr();
  case abi::ArgRole::State:
    return SpinDialect::StateAttrHelper::getNameStr();
  case abi::ArgRole::Output:
    return StringRef();
  }
  return StringRef();
}
