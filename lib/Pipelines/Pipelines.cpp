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
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/GPU/Transforms/Passes.h"

#include "llvm/ADT/StringSwitch.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;
using namespace mlir::spin;

namespace mlir::spin {
#define GEN_PIPELINE_OPTIONS_DEF
#include "spin/Pipelines/Pipelines.h.inc"
} // namespace mlir::spin

void mlir::spin::buildSparsifyPipeline(OpPassManager &pm,
                                       const SparsifyPipelineOptions &options) {
  // Post-condition: dense indexers written in linalg are spin.dense_indexer
  // (+ spin.topk); everything else is unchanged.
  pm.addPass(createSpinRaiseIndexer(options.toSpinRaiseIndexerOptions()));
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());

  // Post-condition: no spin.dense_indexer feeding a maskless spin.topk is
  // left; every indexer layer has a state with a stable layer id.
  pm.addPass(
      createSpinSparsifyIndexer(options.toSpinSparsifyIndexerOptions()));

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
  pm.addPass(createConvertSpinToSCF(options.toConvertSpinToSCFOptions()));
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

bool mlir::spin::chipHasWgmma(llvm::StringRef chip) { return chip == "sm_90a"; }

int64_t mlir::spin::minimumPtxVersion(llvm::StringRef chip) {
  return llvm::StringSwitch<int64_t>(chip)
      .Case("sm_90a", 78)
      .Case("sm_100a", 86)
      .Case("sm_103a", 88)
      .Default(-1);
}

/// The PTX version the options ask for, or the lowest all chips accept.
static int64_t effectivePtxVersion(const LowerToNVVMOptions &options) {
  int64_t version = options.ptxVersion;
  if (version == 0) {
    version = 86;
    for (const std::string &chip : options.chips)
      version = std::max(version, minimumPtxVersion(chip));
  }
  return version;
}

LogicalResult
mlir::spin::verifyLowerToNVVMOptions(const LowerToNVVMOptions &options,
                                     std::string &message) {
  if (options.chips.empty()) {
    message = "no target chip given (chips=sm_90a,sm_100a,sm_103a)";
    return failure();
  }
  int64_t version = effectivePtxVersion(options);
  for (const std::string &chip : options.chips) {
    int64_t minimum = minimumPtxVersion(chip);
    if (minimum < 0) {
      message = "unknown chip '" + chip +
                "' (known: sm_90a, sm_100a, sm_103a)";
      return failure();
    }
    if (version < minimum) {
      message = chip + " needs PTX version " + std::to_string(minimum / 10) +
                "." + std::to_string(minimum % 10) + " or later (got " +
                std::to_string(version / 10) + "." +
                std::to_string(version % 10) + ")";
      return failure();
    }
  }
  if (version > 90) {
    message = "PTX version " + std::to_string(version) +
              " is newer than LLVM 22 can emit (at most 90)";
    return failure();
  }
  if (options.optLevel < 0 || options.optLevel > 3) {
    message = "opt-level must be 0-3 (got " +
              std::to_string(options.optLevel) + ")";
    return failure();
  }
  return success();
}

void mlir::spin::buildLowerToNVVMPipeline(OpPassManager &pm,
                                          const LowerToNVVMOptions &options) {
  SpinConfigureGpuKernelsOptions tuning;
  tuning.smCount = options.smCount;
  // One gpu.module serves every chip here: wgmma only when every chip has
  // it (spin-compile converts per group of chips).
  tuning.wgmma = !options.chips.empty() &&
                 llvm::all_of(options.chips, [](const std::string &chip) {
                   return chipHasWgmma(chip);
                 });
  pm.addPass(createSpinConfigureGpuKernels(tuning));
  ConvertSpinToGPUOptions gpu;
  gpu.capacity = options.capacity;
  pm.addPass(createConvertSpinToGPU(gpu));
  buildLowerToNVVMPipelineAfterPlan(pm, options);
}

void mlir::spin::buildLowerToNVVMPipelineAfterPlan(
    OpPassManager &pm, const LowerToNVVMOptions &options) {
  int64_t version = effectivePtxVersion(options);
  for (const std::string &chip : options.chips) {
    GpuNVVMAttachTargetOptions target;
    target.chip = chip;
    target.features = "+ptx" + std::to_string(version);
    target.optLevel = options.optLevel;
    pm.addPass(createGpuNVVMAttachTarget(target));
  }
  OpPassManager &kernels = pm.nest<gpu::GPUModuleOp>();
  kernels.addPass(createSCFToControlFlowPass());
  ConvertGpuOpsToNVVMOpsOptions toNVVM;
  kernels.addPass(createConvertGpuOpsToNVVMOps(toNVVM));
  kernels.addPass(createSpinMarkTensorMapParameters());
  kernels.addPass(createConvertNVVMToLLVMPass());
  kernels.addPass(createCanonicalizerPass());
  kernels.addPass(createCSEPass());
  kernels.addPass(createReconcileUnrealizedCastsPass());
  GpuModuleToBinaryPassOptions binary;
  binary.compilationTarget = "isa";
  pm.addPass(createGpuModuleToBinaryPass(binary));
}

void mlir::spin::registerSpinPipelines() {
  // Registered by hand rather than with PassPipelineRegistration so that
  // bad options (an unknown chip, sm_103a below PTX 8.8) are a diagnostic
  // when the pipeline is parsed, never a fatal error inside LLVM.
  registerPassPipeline(
      "spin-lower-to-nvvm",
      "Lower spin graphs to GPU kernels and PTX for each chip (with a launch "
      "plan for the runtime)",
      [](OpPassManager &pm, StringRef text,
         function_ref<LogicalResult(const Twine &)> errorHandler) {
        std::unique_ptr<LowerToNVVMOptions> options =
            LowerToNVVMOptions::createFromString(text);
        if (!options)
          return errorHandler("spin-lower-to-nvvm: cannot parse options '" +
                              text + "'");
        std::string message;
        if (failed(verifyLowerToNVVMOptions(*options, message)))
          return errorHandler("spin-lower-to-nvvm: " + message);
        buildLowerToNVVMPipeline(pm, *options);
        return success();
      },
      [](function_ref<void(const mlir::detail::PassOptions &)> printer) {
        printer(LowerToNVVMOptions());
      });
  PassPipelineRegistration<LowerToCPUOptions>(
      LowerToCPUOptions::getPipelineArgument(),
      LowerToCPUOptions::getPipelineSummary(), buildLowerToCPUPipeline);
  PassPipelineRegistration<SparsifyPipelineOptions>(
      SparsifyPipelineOptions::getPipelineArgument(),
      SparsifyPipelineOptions::getPipelineSummary(), buildSparsifyPipeline);
}
