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

/// Options of `spin-sparsify-pipeline`: those of spin-raise-indexer and
/// spin-sparsify-indexer under the same names, plus switches for the last
/// two stages.
struct SparsifyPipelineOptions
    : public PassPipelineOptions<SparsifyPipelineOptions> {
  // spin-raise-indexer
  PassOptions::Option<std::string> topkCallee{
      *this, "topk-callee",
      llvm::cl::desc("Name of the external top-K function the frontend calls"),
      llvm::cl::init("topk")};
  PassOptions::Option<int64_t> pageSize{
      *this, "page-size",
      llvm::cl::desc("Slots per page when viewing contiguous keys as pages"),
      llvm::cl::init(64)};
  // spin-sparsify-indexer
  PassOptions::Option<double> sparsity{
      *this, "sparsity", llvm::cl::desc("Target block sparsity rho in [0, 1]"),
      llvm::cl::init(0.4)};
  PassOptions::Option<int64_t> blockSize{
      *this, "block-size",
      llvm::cl::desc("SPIN block size in slots; must divide the page size"),
      llvm::cl::init(64)};
  PassOptions::Option<double> emaDecay{
      *this, "ema-decay", llvm::cl::desc("EMA decay alpha in [0, 1]"),
      llvm::cl::init(0.5)};
  PassOptions::Option<double> explore{
      *this, "explore",
      llvm::cl::desc("Fraction of the block budget explored, in [0, 1]"),
      llvm::cl::init(0.0)};
  PassOptions::Option<uint64_t> seed{
      *this, "seed", llvm::cl::desc("Exploration seed"), llvm::cl::init(0)};
  PassOptions::Option<ExplorePolicy> explorePolicy{
      *this, "explore-policy",
      llvm::cl::desc("Which blocks exploration picks (SPIN_SPEC §3.7, §7.1)"),
      llvm::cl::init(ExplorePolicy::random),
      llvm::cl::values(
          clEnumValN(ExplorePolicy::random, "random",
                     "deterministic splitmix64 ranks (default)"),
          clEnumValN(ExplorePolicy::staleness_score, "staleness-score",
                     "largest block age times positive predicted score"),
          clEnumValN(ExplorePolicy::block_age, "block-age",
                     "least recently observed blocks"))};
  PassOptions::Option<PoolingKind> pooling{
      *this, "pooling", llvm::cl::desc("Block pooling of predictions"),
      llvm::cl::init(PoolingKind::max),
      llvm::cl::values(clEnumValN(PoolingKind::max, "max", "maximum"),
                       clEnumValN(PoolingKind::mean, "mean", "mean"),
                       clEnumValN(PoolingKind::top4, "top4",
                                  "mean of the 4 largest"))};
  PassOptions::Option<Reduction> reduction{
      *this, "reduction", llvm::cl::desc("Block reduction variant"),
      llvm::cl::init(Reduction::a1),
      llvm::cl::values(
          clEnumValN(Reduction::a0, "A0",
                     "blocks holding the predicted top-K slots"),
          clEnumValN(Reduction::a1, "A1", "pooled slot predictions (default)"),
          clEnumValN(Reduction::a2, "A2", "block-level EMA state"))};
  PassOptions::Option<MtpMask> mtpMask{
      *this, "mtp-mask", llvm::cl::desc("Blocks an MTP step scores"),
      llvm::cl::init(MtpMask::union_),
      llvm::cl::values(
          clEnumValN(MtpMask::union_, "union", "union of the rows' selections"),
          clEnumValN(MtpMask::row0, "row0", "row 0's selection for every row"))};
  PassOptions::Option<MtpUpdate> mtpUpdate{
      *this, "mtp-update", llvm::cl::desc("Rows an MTP commit replays"),
      llvm::cl::init(MtpUpdate::prefix),
      llvm::cl::values(
          clEnumValN(MtpUpdate::prefix, "prefix", "rows 0..accepted in order"),
          clEnumValN(MtpUpdate::row0, "row0", "row 0 only"))};
  PassOptions::Option<bool> resetInput{
      *this, "reset-input",
      llvm::cl::desc("Add a {spin.reset} [B] i1 argument that resets requests"),
      llvm::cl::init(false)};
  PassOptions::Option<bool> reportSparsity{
      *this, "report-sparsity",
      llvm::cl::desc("Return each layer's realized block sparsity per row"),
      llvm::cl::init(false)};
  // Stages.
  PassOptions::Option<bool> fuse{
      *this, "fuse", llvm::cl::desc("Run spin-fuse"), llvm::cl::init(true)};
  PassOptions::Option<bool> scheduleAsync{
      *this, "schedule-async", llvm::cl::desc("Run spin-schedule-async"),
      llvm::cl::init(true)};
};

/// spin-sparsify-pipeline: raise (linalg -> spin.dense_indexer), sparsify
/// (dense -> SPIN), fuse (one op per kernel), schedule (async updates and
/// predictions), each followed by canonicalize + cse.
void buildSparsifyPipeline(OpPassManager &pm,
                           const SparsifyPipelineOptions &options);

/// Options of `spin-lower-to-cpu`.
struct LowerToCPUOptions : public PassPipelineOptions<LowerToCPUOptions> {
  PassOptions::Option<std::string> stateStorage{
      *this, "state-storage",
      llvm::cl::desc("Where SPIN state lives: 'arguments' (the runtime's "
                     "state pool, the default) or 'globals' (module-level "
                     "buffers, for self-contained programs and tests)"),
      llvm::cl::init("arguments")};
  PassOptions::Option<int64_t> numSlots{
      *this, "num-slots",
      llvm::cl::desc("globals: requests the state buffers hold"),
      llvm::cl::init(8)};
  PassOptions::Option<int64_t> capacity{
      *this, "capacity",
      llvm::cl::desc("globals: slots of state per request"),
      llvm::cl::init(4096)};
  PassOptions::Option<int64_t> maxRows{
      *this, "max-rows",
      llvm::cl::desc("globals: query rows per step (MTP buffers)"),
      llvm::cl::init(4)};
};

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

/// Registers the spin pipelines for textual pass pipelines (spin-opt).
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

void registerSpinPipelines();

} // namespace spin
} // namespace mlir

#endif // SPIN_PIPELINES_PIPELINES_H
