//===- SpinTypes.h - spin types ---*- C++ -*-===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
//===----------------------------------------------------------------------===//

#ifndef SPIN_DIALECT_SPIN_IR_SPINTYPES_H
#define SPIN_DIALECT_SPIN_IR_SPINTYPES_H

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Types.h"
#include "spin/Dialect/Spin/IR/SpinAttrs.h"

#include <cstdint>
#include <limits>

namespace mlir::spin {
/// The largest layer id: the runtime holds a program's layer count in an
/// int32 (the manifest's `layers`), and ids are below it.
inline constexpr int64_t kMaxLayerId = std::numeric_limits<int32_t>::max() - 1;
} // namespace mlir::spin

#define GET_TYPEDEF_CLASSES
#include "spin/Dialect/Spin/IR/SpinOpsTypes.h.inc"

#endif // SPIN_DIALECT_SPIN_IR_SPINTYPES_H
