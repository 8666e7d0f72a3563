//===- GraphFrontEnd.cpp - parse and sparsify a graph for a target --------===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
//===----------------------------------------------------------------------===//

#include "GraphFrontEnd.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"

#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace mlir::spin;
using ::spin::runtime::Status;
using ::spin::runtime::StatusOr;

DiagnosticCollector::DiagnosticCollector(MLIRContext &context)
    : handler(&context, [this](Diagnostic &diag) {
        llvm::raw_string_ostream os(text);
        os << diag.getLocation() << ": " << diag << "\n";
        return success();
      }) {}

Status DiagnosticCollector::fail(const std::string &what) const {
  return Status::error(what + (text.empty() ? "" : ":\n" + text));
}

StatusOr<OwningOpRef<ModuleOp>>
mlir::spin::loadGraph(MLIRContext &context,
                      const DiagnosticCollector &diagnostics,
                      const std::string &source, const std::string &function,
                      const SparsifyPipelineOptions *sparsify,
                      std::string *optionText) {
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(source, &context);
  if (!module)
    return diagnostics.fail("cannot parse the graph");
  if (!module->lookupSymbol<func::FuncOp>(function))
    return diagnostics.fail("the graph has no function @" + function);
  if (sparsify) {
    PassManager pm(&context);
    SparsifyPipelineOptions options;
    options.copyOptionValuesFrom(*sparsify);
    options.reportSparsity = true;
    buildSparsifyPipeline(pm, options);
    if (failed(pm.run(*module)))
      return diagnostics.fail("spin-sparsify-pipeline failed");
    if (optionText) {
      llvm::raw_string_ostream os(*optionText);
      options.print(os);
    }
  }
  return module;
}
