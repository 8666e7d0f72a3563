//===- Pipelines.cpp - spin pass pipelines --------------------------------===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
//===----------------------------------------------------------------------===//

#include "spin/Dialect/Spin/Transforms/Pipelines.h"
#include "spin/Dialect/Spin/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;
using namespace mlir::spin;

void mlir::spin::buildSparsifyPipeline(OpPassManager &pm,
                                       const SparsifyPipelineOptions &options) {
  // Post-condition: dense indexers written in linalg are spin.dense_indexer
  // (+ spin.topk); everything else is unchanged.
  SpinRaiseIndexerOptions raise;
  raise.topkCallee = options.topkCallee;
  raise.pageSize = options.pageSize;
  pm.addPass(createSpinRaiseIndexer(raise));
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());

  // Post-condition: no spin.dense_indexer feeding a maskless spin.topk is
  // left; every indexer layer has a state with a stable layer id.
  SpinSparsifyIndexerOptions sparsify;
  sparsify.sparsity = options.sparsity;
  sparsify.blockSize = options.blockSize;
  sparsify.emaDecay = options.emaDecay;
  sparsify.explore = options.explore;
  sparsify.seed = options.seed;
  sparsify.pooling = options.pooling;
  sparsify.reduction = options.reduction;
  sparsify.mtpMask = options.mtpMask;
  sparsify.mtpUpdate = options.mtpUpdate;
  sparsify.resetInput = options.resetInput;
  sparsify.reportSparsity = options.reportSparsity;
  pm.addPass(createSpinSparsifyIndexer(sparsify));

  // Post-condition: one spin.fused_select and one spin.fused_score per layer.
  if (options.fuse)
    pm.addPass(createSpinFuse());

  // Post-condition: state updates and block predictions run in async.execute
  // regions; top-K results do not depend on them.
  if (options.scheduleAsync)
    pm.addNestedPass<func::FuncOp>(createSpinScheduleAsync());
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
}

void mlir::spin::registerSpinPipelines() {
  PassPipelineRegistration<SparsifyPipelineOptions>(
      "spin-sparsify-pipeline",
      "Raise dense indexers, rewrite them into SPIN pipelines, fuse, and "
      "schedule state work asynchronously",
      buildSparsifyPipeline);
}
