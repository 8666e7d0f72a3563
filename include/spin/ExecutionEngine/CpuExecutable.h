//===- CpuExecutable.h - JIT-compiled spin graphs on the CPU -----*- C++ -*-===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
// Compiles a spin graph (or a generated indexer layer) through the real
// pipelines (spin-sparsify-pipeline, spin-lower-to-cpu) and the MLIR JIT,
// and exposes it as a ::spin::runtime::StepProgram. Compiled programs are cached by
// a hash of source, options and compiler version.
//
//===----------------------------------------------------------------------===//

#ifndef SPIN_EXECUTIONENGINE_CPUEXECUTABLE_H
#define SPIN_EXECUTIONENGINE_CPUEXECUTABLE_H

#include "spin/Pipelines/Pipelines.h"
#include "spin/Runtime/StepProgram.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

#include <map>
#include <memory>
#include <string>

namespace mlir::spin {

/// One indexer layer, enough to generate its dense graph.
struct IndexerConfig {
  int64_t heads = 64;
  int64_t headDim = 128;
  int64_t rows = 1; ///< query rows per request: 1, or d + 1 for MTP
  int64_t topk = 512;
  int64_t pageSize = 64;
  int64_t maxPages = 64; ///< block-table width: capacity = maxPages * pageSize
  std::string keyFormat = "bf16"; ///< bf16 | f16 | f32 | fp8
  /// The queries' format: empty for the key format's own (bf16 with fp8
  /// keys), or fp8 (e4m3, with fp8 keys only; SPIN_SPEC §1).
  std::string queryFormat;
  int64_t layer = 0; ///< the state layer id (pinned with spin.layer)
  /// Requests per step, or 0 for a dynamic batch (CPU programs take any
  /// batch; GPU programs are compiled for one). The key cache and scales are
  /// indexed by page and keep a dynamic leading size either way.
  int64_t batch = 0;
};

/// The dense graph of one indexer layer, function `@indexer_layer` in a new
/// module of `context` (which must have the func and spin dialects loaded or
/// loadable): inputs marked {spin.input = "q" | "w" | "keys" | "scales" |
/// "block_table" | "lengths"}, one result (the top-K indices).
::spin::runtime::StatusOr<OwningOpRef<ModuleOp>>
buildIndexerModule(MLIRContext &context, const IndexerConfig &config);

/// buildIndexerModule() in a context of its own, printed: the source that
/// compile() and the GPU compiler take.
::spin::runtime::StatusOr<std::string> buildIndexerGraph(const IndexerConfig &config);

/// A JIT-compiled step function.
class CpuExecutable {
public:
  ~CpuExecutable();

  /// Compiles function `function` of `source`. With `sparsify` set, runs
  /// spin-sparsify-pipeline with those options (and report-sparsity) first;
  /// without, the graph runs as written (a dense indexer stays dense).
  static ::spin::runtime::StatusOr<std::shared_ptr<CpuExecutable>>
  compile(const std::string &source, const std::string &function,
          const SparsifyPipelineOptions *sparsify);

  /// As compile(), reusing an earlier compilation of the same source,
  /// function, options and compiler version: in this process, else from the
  /// on-disk cache ($SPIN_CACHE_DIR, else $XDG_CACHE_HOME/spin or
  /// ~/.cache/spin; SPIN_CACHE_DIR=off disables it). Entries carry a
  /// checksum; corrupt or stale ones are rebuilt and rewritten.
  static ::spin::runtime::StatusOr<std::shared_ptr<CpuExecutable>>
  compileCached(const std::string &source, const std::string &function,
                const SparsifyPipelineOptions *sparsify);

  /// Forgets the in-process cache (the disk cache stays).
  static void clearMemoryCache();

  const ::spin::runtime::StepProgram &program() const { return *program_; }
  /// The IR after the graph passes (before lowering), for inspection.
  const std::string &graphIR() const { return graphIR_; }
  /// True when this executable was loaded from the disk cache.
  bool fromDiskCache() const { return fromDiskCache_; }

private:
  struct Impl;
  CpuExecutable();

  ::spin::runtime::Status jit(mlir::ModuleOp module, const std::string &function,
                              std::vector<::spin::runtime::ArgSpec> signature);
  static std::shared_ptr<CpuExecutable>
  loadCacheEntry(const std::string &path, const std::string &key,
                 uint64_t keyHash, const std::string &function);
  void writeCacheEntry(const std::string &path, const std::string &key,
                       uint64_t keyHash) const;
  static std::map<uint64_t, std::pair<std::string, std::weak_ptr<CpuExecutable>>> &
  memoryCache();

  std::unique_ptr<Impl> impl_;
  std::unique_ptr<::spin::runtime::StepProgram> program_;
  std::string graphIR_;
  std::string loweredIR_;
  bool fromDiskCache_ = false;
};

} // namespace mlir::spin

#endif // SPIN_EXECUTIONENGINE_CPUEXECUTABLE_H
