//===- GraphFrontEnd.cpp - parse and sparsify a graph for a target --------===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
//===----------------------------------------------------------------------===//

#include "GraphFrontEnd.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"

#include "llvm/ADT/SmallPtrSet.h"
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

/// Erases the functions of `module` that `root` does not reach through
/// symbol uses: a graph file may hold several functions, and only the one
/// asked for (and what it calls) is compiled, so that another one the
/// target cannot take neither fails the compile nor adds kernels.
static void keepReachableFunctions(ModuleOp module, func::FuncOp root) {
  SymbolTable table(module);
  llvm::SmallPtrSet<Operation *, 8> reached = {root};
  SmallVector<Operation *> work = {root};
  while (!work.empty()) {
    std::optional<SymbolTable::UseRange> uses =
        SymbolTable::getSymbolUses(work.pop_back_val());
    if (!uses)
      continue;
    for (const SymbolTable::SymbolUse &use : *uses)
      if (Operation *target =
              table.lookup(use.getSymbolRef().getRootReference()))
        if (reached.insert(target).second)
          work.push_back(target);
  }
  for (func::FuncOp f :
       llvm::make_early_inc_range(module.getOps<func::FuncOp>()))
    if (!reached.contains(f))
      f.erase();
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
  auto root = module->lookupSymbol<func::FuncOp>(function);
  if (!root)
    return diagnostics.fail("the graph has no function @" + function);
  keepReachableFunctions(*module, root);
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
