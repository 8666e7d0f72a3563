//===- Passes.h - spin graph passes ------------------------------*- C++ -*-===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
//===----------------------------------------------------------------------===//

#ifndef SPIN_DIALECT_SPIN_TRANSFORMS_PASSES_H
#define SPIN_DIALECT_SPIN_TRANSFORMS_PASSES_H

#include "spin/Dialect/Spin/IR/SpinAttrs.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace mlir {
namespace spin {

#define GEN_PASS_DECL
#include "spin/Dialect/Spin/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "spin/Dialect/Spin/Transforms/Passes.h.inc"

} // namespace spin
} // namespace mlir

#endif // SPIN_DIALECT_SPIN_TRANSFORMS_PASSES_H
