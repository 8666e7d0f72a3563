//===- SpinDialect.h - the spin dialect ---*- C++ -*-===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
//===----------------------------------------------------------------------===//

#ifndef SPIN_DIALECT_SPIN_IR_SPINDIALECT_H
#define SPIN_DIALECT_SPIN_IR_SPINDIALECT_H

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/Operation.h"

#include "spin/Dialect/Spin/IR/SpinAttrs.h"

#include "spin/Dialect/Spin/IR/SpinOpsDialect.h.inc"

#endif // SPIN_DIALECT_SPIN_IR_SPINDIALECT_H
