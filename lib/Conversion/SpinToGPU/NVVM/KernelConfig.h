//===- KernelConfig.h - tuning of the NVVM kernels ---------------*- C++ -*-===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
// The config step of the GPU path: how each op's kernels split their work
// on NVIDIA GPUs, recorded on the op as #spin.score_config,
// #spin.topk_config and #spin.select_config, which the plan step
// (convert-spin-to-gpu) reads.
//
//===----------------------------------------------------------------------===//

#ifndef SPIN_CONVERSION_SPINTOGPU_NVVM_KERNELCONFIG_H
#define SPIN_CONVERSION_SPINTOGPU_NVVM_KERNELCONFIG_H

#include "spin/Conversion/Passes.h"

namespace mlir::spin::gpu_codegen {

/// Configures every op under `root` whose kernels lack a configuration
/// (ops that carry one keep it). Fails with a diagnostic on the op when the
/// options give a configuration the kernels cannot run.
LogicalResult configureKernels(Operation *root,
                               const SpinConfigureGpuKernelsOptions &options);

} // namespace mlir::spin::gpu_codegen

#endif // SPIN_CONVERSION_SPINTOGPU_NVVM_KERNELCONFIG_H
