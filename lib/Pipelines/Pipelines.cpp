//===- Pipelines.cpp - spin pass pipelines --------------------------------===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
//===----------------------------------------------------------------------===//

#include "spin/Pipelines/Pipelines.h"
#include "spin/Conversion/Passes.h"
#include "spin/Dialect/Spin/Transforms/Passes.h"

#include "mlir/Conversion/Passes.h"
#include "mlir/Dialect/Bufferization/Transforms/Passes.h"
#include "mlir/Dialect/Linalg/Passes.h"
#include "mlir/Dialect/MemRef/Transforms/Passes.h"

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

void mlir::spin::buildLowerToCPUPipeline(OpPassManager &pm,
                                         const LowerToCPUOptions &options) {
  buildLowerSpinToBuffersPipeline(pm, options);
  buildLowerBuffersToLLVMPipeline(pm);
}

void mlir::spin::buildLowerSpinToBuffersPipeline(
    OpPassManager &pm, const LowerToCPUOptions &options) {
  // Post-condition: no spin op is left; spin values are tensors produced by
  // loops over memrefs; state lives in arguments or globals.
  ConvertSpinToSCFOptions convert;
  convert.stateStorage = options.stateStorage;
  convert.numSlots = options.numSlots;
  convert.capacity = options.capacity;
  convert.maxRows = options.maxRows;
  pm.addPass(createConvertSpinToSCF(convert));
  // Elementwise arith on tensors (e.g. widening top-K indices) -> linalg.
  pm.addNestedPass<func::FuncOp>(createConvertElementwiseToLinalgPass());
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());

  // Post-condition: memrefs only, identity layouts at function boundaries
  // (the runtime passes contiguous buffers), results written into
  // caller-provided out-parameters, every temporary freed.
  bufferization::OneShotBufferizePassOptions bufferize;
  bufferize.bufferizeFunctionBoundaries = true;
  bufferize.functionBoundaryTypeConversion =
      bufferization::LayoutMapOption::IdentityLayoutMap;
  pm.addPass(bufferization::createOneShotBufferizePass(bufferize));
  bufferization::BufferResultsToOutParamsPassOptions outParams;
  outParams.addResultAttribute = true;
  outParams.modifyPublicFunctions = true;
  pm.addPass(bufferization::createBufferResultsToOutParamsPass(outParams));
  pm.addPass(createConvertLinalgToLoopsPass());
  pm.addNestedPass<func::FuncOp>(
      bufferization::createOwnershipBasedBufferDeallocationPass());
  pm.addPass(createCanonicalizerPass());
  pm.addPass(bufferization::createBufferDeallocationSimplificationPass());
  pm.addPass(bufferization::createLowerDeallocationsPass());
  pm.addPass(createCSEPass());
  pm.addPass(createCanonicalizerPass());
}

void mlir::spin::buildLowerBuffersToLLVMPipeline(OpPassManager &pm) {
  // Post-condition: the LLVM dialect only.
  pm.addPass(memref::createExpandStridedMetadataPass());
  pm.addPass(createLowerAffinePass());
  pm.addPass(createSCFToControlFlowPass());
  pm.addPass(createConvertMathToLLVMPass());
  pm.addPass(createArithToLLVMConversionPass());
  pm.addPass(createConvertControlFlowToLLVMPass());
  pm.addPass(createFinalizeMemRefToLLVMConversionPass());
  pm.addPass(createConvertFuncToLLVMPass());
  pm.addPass(createConvertIndexToLLVMPass());
  pm.addPass(createReconcileUnrealizedCastsPass());
}

void mlir::spin::registerSpinPipelines() {
  PassPipelineRegistration<LowerToCPUOptions>(
      "spin-lower-to-cpu",
      "Lower spin programs to the LLVM dialect for CPU execution",
      buildLowerToCPUPipeline);
  PassPipelineRegistration<SparsifyPipelineOptions>(
      "spin-sparsify-pipeline",
      "Raise dense indexers, rewrite them into SPIN pipelines, fuse, and "
      "schedule state work asynchronously",
      buildSparsifyPipeline);
}
