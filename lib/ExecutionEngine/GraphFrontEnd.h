//===- GraphFrontEnd.h - parse and sparsify a graph for a target -*- C++ -*-===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
// What the CPU executable and the GPU artifact compiler do first, once:
// collect the context's diagnostics into the error message, parse the
// graph, find the function, and optionally run spin-sparsify-pipeline.
//
//===----------------------------------------------------------------------===//

#ifndef SPIN_LIB_EXECUTIONENGINE_GRAPHFRONTEND_H
#define SPIN_LIB_EXECUTIONENGINE_GRAPHFRONTEND_H

#include "spin/Pipelines/Pipelines.h"
#include "spin/Runtime/Status.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/OwningOpRef.h"

#include <string>

namespace mlir::spin {

/// Diagnostics of a context, appended to the messages of failed steps.
class DiagnosticCollector {
public:
  explicit DiagnosticCollector(MLIRContext &context);
  /// An error for `what`, followed by the diagnostics seen so far.
  ::spin::runtime::Status fail(const std::string &what) const;

private:
  std::string text;
  ScopedDiagnosticHandler handler;
};

/// Parses `source`, checks that it defines `function`, drops the functions
/// it does not call (directly or not), and with `sparsify`
/// runs spin-sparsify-pipeline with those options and report-sparsity on
/// (`optionText`, when given, receives the options as the pipeline prints
/// them).
::spin::runtime::StatusOr<OwningOpRef<ModuleOp>>
loadGraph(MLIRContext &context, const DiagnosticCollector &diagnostics,
          const std::string &source, const std::string &function,
          const SparsifyPipelineOptions *sparsify,
          std::string *optionText = nullptr);

} // namespace mlir::spin

#endif // SPIN_LIB_EXECUTIONENGINE_GRAPHFRONTEND_H
