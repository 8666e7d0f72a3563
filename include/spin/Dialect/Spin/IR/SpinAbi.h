//===- SpinAbi.h - the compiler side of the runtime contract ------*- C++ -*-===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
// The compiler-runtime contract (runtime/include/spin/Runtime/Abi.def) as
// the compiler uses it: MLIR element types of the contract's DTypes, the
// argument attributes of each role, and the memref types of state fields.
// Every lowering and the artifact writer take names and layouts from here
// (or from Abi.h directly), never from string literals of their own.
//
//===----------------------------------------------------------------------===//

#ifndef SPIN_DIALECT_SPIN_IR_SPINABI_H
#define SPIN_DIALECT_SPIN_IR_SPINABI_H

#include "spin/Dialect/Spin/IR/SpinDialect.h"
#include "spin/Runtime/Abi.h"

#include "mlir/IR/BuiltinTypes.h"

#include <optional>

namespace mlir::spin {

namespace abi = ::spin::runtime;

/// The contract's element type of `type` (f32, f16, bf16, f8E4M3FN, i1, i8,
/// i32, i64), if the runtime can pass it.
std::optional<abi::DType> runtimeDType(Type type);

/// The MLIR element type of `dtype`.
Type mlirElementType(MLIRContext *context, abi::DType dtype);

/// The argument attribute that marks `role` ("spin.positions"); empty for
/// outputs, which carry none.
StringRef roleAttrName(abi::ArgRole role);

/// The names of the dialect's discardable attributes (SpinDialect.td), for
/// code that reads or writes them on arguments and results.
namespace attr {
#define SPIN_ATTR_NAME(NAME, HELPER)                                           \
  inline constexpr StringLiteral NAME = SpinDialect::HELPER::getNameStr();
SPIN_ATTR_NAME(kLayer, LayerAttrHelper)
SPIN_ATTR_NAME(kSparsity, SparsityAttrHelper)
SPIN_ATTR_NAME(kLaunchPlan, LaunchPlanAttrHelper)
SPIN_ATTR_NAME(kEvents, EventsAttrHelper)
SPIN_ATTR_NAME(kLayers, LayersAttrHelper)
SPIN_ATTR_NAME(kCapacity, CapacityAttrHelper)
SPIN_ATTR_NAME(kBlockSize, BlockSizeAttrHelper)
SPIN_ATTR_NAME(kPageSize, PageSizeAttrHelper)
SPIN_ATTR_NAME(kRole, RoleAttrHelper)
SPIN_ATTR_NAME(kName, NameAttrHelper)
SPIN_ATTR_NAME(kDtype, DtypeAttrHelper)
SPIN_ATTR_NAME(kShape, ShapeAttrHelper)
SPIN_ATTR_NAME(kBytes, BytesAttrHelper)
SPIN_ATTR_NAME(kArgument, ArgumentAttrHelper)
SPIN_ATTR_NAME(kDim, DimAttrHelper)
SPIN_ATTR_NAME(kStream, StreamAttrHelper)
SPIN_ATTR_NAME(kWait, WaitAttrHelper)
SPIN_ATTR_NAME(kRecord, RecordAttrHelper)
#undef SPIN_ATTR_NAME
} // namespace attr

/// The name of the attribute that gives a state argument's layer.
inline constexpr StringLiteral kLayerAttrName = attr::kLayer;

/// The memref type of `field` with every size dynamic except the prediction
/// record's fixed width when `fixedRecord` (the GPU plan's form).
MemRefType stateFieldMemRefType(MLIRContext *context, abi::StateField field,
                                bool fixedRecord = false);

/// The shape of `field` with -1 for run-time sizes (the GPU plan's form).
SmallVector<int64_t> stateFieldPlanShape(abi::StateField field);

} // namespace mlir::spin

#endif // SPIN_DIALECT_SPIN_IR_SPINABI_H
