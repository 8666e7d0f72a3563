//===- SpinDialect.cpp - spin dialect registration ------------------------===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
//===----------------------------------------------------------------------===//

#include "spin/Dialect/Spin/IR/SpinDialect.h"
#include "spin/Dialect/Spin/IR/SpinOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::spin;

#include "spin/Dialect/Spin/IR/SpinEnums.cpp.inc"
#include "spin/Dialect/Spin/IR/SpinOpsDialect.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "spin/Dialect/Spin/IR/SpinAttrs.cpp.inc"

void SpinDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "spin/Dialect/Spin/IR/SpinOps.cpp.inc"
      >();
  registerAttributes();
  registerTypes();
}

void SpinDialect::registerAttributes() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "spin/Dialect/Spin/IR/SpinAttrs.cpp.inc"
      >();
}
