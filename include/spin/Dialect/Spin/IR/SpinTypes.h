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

#define GET_TYPEDEF_CLASSES
#include "spin/Dialect/Spin/IR/SpinOpsTypes.h.inc"

#endif // SPIN_DIALECT_SPIN_IR_SPINTYPES_H
