//===- SpinTypes.cpp - spin types -----------------------------------------===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
//===----------------------------------------------------------------------===//

#include "spin/Dialect/Spin/IR/SpinTypes.h"
#include "spin/Dialect/Spin/IR/SpinDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::spin;

#define GET_TYPEDEF_CLASSES
#include "spin/Dialect/Spin/IR/SpinOpsTypes.cpp.inc"

LogicalResult StateType::verify(function_ref<InFlightDiagnostic()> emitError,
                                int64_t layer, StateLevel level,
                                bool lastObserved) {
  if (layer < 0)
    return emitError() << "layer id must be non-negative, got " << layer;
  if (layer > kMaxLayerId)
    return emitError() << "layer id must be at most " << kMaxLayerId
                       << " (the runtime counts layers in an int32), got "
                       << layer;
  return success();
}

void SpinDialect::registerTypes() {
  addTypes<
#define GET_TYPEDEF_LIST
#include "spin/Dialect/Spin/IR/SpinOpsTypes.cpp.inc"
      >();
}
