//===- SpinAttrs.h - spin enums and attributes ---*- C++ -*-===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
//===----------------------------------------------------------------------===//

#ifndef SPIN_DIALECT_SPIN_IR_SPINATTRS_H
#define SPIN_DIALECT_SPIN_IR_SPINATTRS_H

#include "mlir/IR/Attributes.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/DialectImplementation.h"

#include "spin/Dialect/Spin/IR/SpinEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "spin/Dialect/Spin/IR/SpinAttrs.h.inc"

#endif // SPIN_DIALECT_SPIN_IR_SPINATTRS_H
