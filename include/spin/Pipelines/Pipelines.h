//===- Pipelines.h - spin pass pipelines -------------------------*- C++ -*-===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
// Pipelines are C++ builders with typed options, registered once for
// spin-opt and called directly by the other entry points (tools, Python).
//
//===----------------------------------------------------------------------===//

#ifndef SPIN_PIPELINES_PIPELINES_H
#define SPIN_PIPELINES_PIPELINES_H

#include "spin/Dialect/Spin/IR/SpinAttrs.h"

#include "mlir/Pass/PassOptions.h"
#include "mlir/Support/LLVM.h"

#include <string>

namespace mlir {
class OpPassManager;

namespace spin {

// SparsifyPipelineOptions (spin-sparsify-pipeline) and LowerToCPUOptions
// (spin-lower-to-cpu), generated from Pipelines.td: the options of the passes
// each pipeline forwards to, declared once in their Passes.td, plus the
// pipeline's own. Each struct converts to the passes' options structs
// (toSpinSparsifyIndexerOptions(), ...) and visits its options by flag with
// their real types (forEachOption).
#define GEN_PIPELINE_OPTIONS_DECL
#include "spin/Pipelines/Pipelines.h.inc"

/// spin-sparsify-pipeline: raise (linalg -> spin.dense_indexer), sparsify
/// (dense -> SPIN), fuse (one op per kernel), schedule (async updates and
/// predictions), each followed by canonicalize + cse.
void buildSparsifyPipeline(OpPassManager &pm,
                           const SparsifyPipelineOptions &options);

/// spin-lower-to-cpu: spin ops to loops (convert-spin-to-scf), one-shot
/// bufferization with results turned into out-parameters, deallocation of
/// every temporary buffer, then the LLVM dialect. The result is callable
/// through the C interface described in docs/Runtime-ABI.md.
void buildLowerToCPUPipeline(OpPassManager &pm, const LowerToCPUOptions &options);

/// The two halves of spin-lower-to-cpu, for drivers that read the function
/// signature in between (the argument layout of docs/Runtime-ABI.md is
/// final after the first half; the LLVM lowering drops argument attributes).
void buildLowerSpinToBuffersPipeline(OpPassManager &pm,
                                     const LowerToCPUOptions &options);
void buildLowerBuffersToLLVMPipeline(OpPassManager &pm);

/// Options of `spin-lower-to-nvvm`: the kernels of convert-spin-to-gpu to
/// PTX for each chip.
struct LowerToNVVMOptions : public PassPipelineOptions<LowerToNVVMOptions> {
  PassOptions::ListOption<std::string> chips{
      *this, "chips",
      llvm::cl::desc("Target chips: sm_90a (H100/H200), sm_100a (B200), "
                     "sm_103a (B300)")};
  PassOptions::Option<int64_t> ptxVersion{
      *this, "ptx-version",
      llvm::cl::desc("PTX ISA version times 10 (0: the lowest every chip "
                     "accepts: 86, or 88 with sm_103a)"),
      llvm::cl::init(0)};
  PassOptions::Option<int64_t> optLevel{
      *this, "opt-level", llvm::cl::desc("LLVM optimisation level 0-3"),
      llvm::cl::init(3)};
  PassOptions::Option<int64_t> capacity{
      *this, "capacity",
      llvm::cl::desc("Slots of state per request (0: the block table's reach)"),
      llvm::cl::init(0)};
  PassOptions::Option<int64_t> smCount{
      *this, "sm-count",
      llvm::cl::desc("SMs of the GPU the scoring grids are sized for, "
                     "the most CTAs of a prediction that prefetches on a "
                     "cache miss, and after a larger one the selection lets "
                     "the scoring start before its wait (132: H100 SXM / "
                     "H200; 148: B200 / B300)"),
      llvm::cl::init(132)};
};

/// The chips spin generates PTX for, and the lowest PTX version of each.
int64_t minimumPtxVersion(llvm::StringRef chip);

/// Whether the scoring kernels for `chip` use wgmma (sm_90a only; the other
/// chips use mma.sync).
bool chipHasWgmma(llvm::StringRef chip);

/// Checks `options` (known chips, a PTX version every chip accepts, an
/// optimisation level 0-3); the message names the offending value.
LogicalResult verifyLowerToNVVMOptions(const LowerToNVVMOptions &options,
                                       std::string &message);

/// convert-spin-to-gpu, then per gpu.module: one #nvvm.target per chip, the
/// kernels to the NVVM/LLVM dialects, and gpu-module-to-binary producing
/// PTX text (`#gpu.object<#nvvm.target<chip = ...>, assembly = "...">`).
/// Options must have been verified (verifyLowerToNVVMOptions): an unknown
/// chip or a PTX version a chip rejects aborts inside LLVM.
void buildLowerToNVVMPipeline(OpPassManager &pm,
                              const LowerToNVVMOptions &options);

/// The stages of spin-lower-to-nvvm after convert-spin-to-gpu (for callers
/// that inspect the launch plan first).
void buildLowerToNVVMPipelineAfterPlan(OpPassManager &pm,
                                       const LowerToNVVMOptions &options);

/// Registers the spin pipelines for textual pass pipelines (spin-opt).
void registerSpinPipelines();

} // namespace spin
} // namespace mlir

#endif // SPIN_PIPELINES_PIPELINES_H
