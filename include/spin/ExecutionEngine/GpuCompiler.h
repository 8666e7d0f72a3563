//===- GpuCompiler.h - graphs to GPU artifacts (PTX + manifest) -*- C++ -*-===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
// The one entry point behind `spin-compile` and `spin.compile(...,
// target="cuda")`: an indexer graph in, PTX per chip and the manifest the
// runtime's GpuProgram loads out (docs/GPU-ABI.md). Compiling needs no GPU.
//
//===----------------------------------------------------------------------===//

#ifndef SPIN_EXECUTIONENGINE_GPUCOMPILER_H
#define SPIN_EXECUTIONENGINE_GPUCOMPILER_H

#include "spin/Pipelines/Pipelines.h"
#include "spin/Runtime/Status.h"

#include <map>
#include <string>
#include <vector>

namespace mlir::spin {

struct GpuCompileOptions {
  /// sm_90a, sm_100a, sm_103a.
  std::vector<std::string> chips = {"sm_90a"};
  /// PTX ISA version x 10; 0 picks the lowest every chip accepts.
  int64_t ptxVersion = 0;
  int64_t optLevel = 3;
  /// Slots of state per request; 0: the block table's reach.
  int64_t capacity = 0;
  /// Scoring kernel shape (spin-configure-gpu-kernels' options; 0: chosen
  /// by the pass).
  int64_t tilesPerWarp = 0, mTiles = 0;
  /// SMs of the GPU the scoring grids are sized for
  /// (spin-configure-gpu-kernels' `sm-count`; 132: H100 SXM / H200, 148:
  /// B200 / B300).
  int64_t smCount = 132;
  /// sm_90a's PTX scores with wgmma (the other chips use mma.sync); false:
  /// mma.sync everywhere. The launch plan is the same for every chip.
  bool wgmma = true;
  /// sm_90a's dense fp8 scoring by a copying warpgroup and two to four
  /// multiplying ones (#spin.score_config copy_warpgroup): Auto where it
  /// measured faster (spin-configure-gpu-kernels' auto-copy-warpgroup)
  /// when every chip scores with wgmma and the key cache is compact;
  /// Always wherever it applies (an error with other chips); Never.
  enum class CopyWarpgroup { Auto, Always, Never };
  CopyWarpgroup copyWarpgroup = CopyWarpgroup::Auto;
  /// The step takes its layer at run time (convert-spin-to-gpu's
  /// `layer-argument`): one program serves every layer.
  bool layerArgument = false;
  /// The state follows the KV pages (convert-spin-to-gpu's `paged-state`).
  bool pagedState = false;
  /// fp8 keys and scales in the engines' fused pages, one `kv_cache`
  /// input (convert-spin-to-gpu's `fused-fp8-pages`).
  bool fusedFp8Pages = false;
};

/// A compiled GPU program: the manifest text and the PTX of each chip.
struct GpuArtifact {
  std::string manifest;
  std::map<std::string, std::string> ptx; ///< chip -> PTX text
  std::string planIR; ///< the launch plan (for tools and tests)
};

/// Compiles function `function` of `source` (with `sparsify` set, after
/// spin-sparsify-pipeline with those options and report-sparsity).
::spin::runtime::StatusOr<GpuArtifact>
compileGpuArtifact(const std::string &source, const std::string &function,
                   const SparsifyPipelineOptions *sparsify,
                   const GpuCompileOptions &options);

/// The compiler version artifacts record (a hash of the compiler sources).
std::string compilerVersion();

/// Writes `artifact` into directory `dir` (created if missing):
/// manifest.json and <chip>.ptx.
::spin::runtime::Status writeGpuArtifact(const GpuArtifact &artifact,
                                         const std::string &dir);

} // namespace mlir::spin

#endif // SPIN_EXECUTIONENGINE_GPUCOMPILER_H
