//===- KernelConfig.cpp - tuning of the NVVM kernels ----------------------===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
// The heuristics behind each choice and the measurements they were fitted
// to are in docs/benchmarks-kernels.md, "Tuning choices of the GPU
// lowering".
//
//===----------------------------------------------------------------------===//

#include "KernelConfig.h"
#include "Kernels.h"

#include "spin/Dialect/Spin/IR/SpinDialect.h"
#include "spin/Dialect/Spin/IR/SpinOps.h"
#include "spin/Runtime/Semantics.h"

#include "mlir/Dialect/Async/IR/Async.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/MathExtras.h"

#include <algorithm>

using namespace mlir;
using namespace mlir::spin;
using namespace mlir::spin::gpu_codegen;

namespace mlir::spin {
#define GEN_PASS_DEF_SPINCONFIGUREGPUKERNELS
#include "spin/Conversion/Passes.h.inc"
} // namespace mlir::spin

namespace {

using Options = SpinConfigureGpuKernelsOptions;

/// The spin.fused_select a mask comes from, looking through the
/// async.execute / async.await pairs of spin-schedule-async; null if none.
FusedSelectOp selectionOf(Value mask) {
  while (mask) {
    if (auto select = mask.getDefiningOp<FusedSelectOp>())
      return select;
    auto await = mask.getDefiningOp<async::AwaitOp>();
    auto result = await ? dyn_cast<OpResult>(await.getOperand()) : OpResult();
    auto execute =
        result ? dyn_cast<async::ExecuteOp>(result.getOwner()) : nullptr;
    if (!execute || result.getResultNumber() == 0)
      return nullptr;
    auto yield = cast<async::YieldOp>(execute.getBody()->getTerminator());
    mask = yield.getOperand(result.getResultNumber() - 1);
  }
  return nullptr;
}

/// Warp tiles per warp by the wave cost model. Scoring CTAs run in waves of
/// `ctasPerSm` per SM, and a CTA takes about as long as its tiles plus an
/// overhead (staging the queries and its page table), so a grid of `rows`
/// rows of `entries` entries costs about ceil(CTAs / (ctasPerSm x SMs)) x
/// (tiles + overhead): the tiles in [8, maxTiles] that minimise this, the
/// fewest on a tie. A grid whose last wave is mostly empty costs a whole
/// wave.
///
/// Two CTAs an SM (the other kernels) hide one's start behind the other's
/// tiles: 2 tiles of overhead, at most 64. The copying warpgroup's CTA
/// takes the register file, so the SM idles from its last tile until the
/// next CTA's first ring stage lands (page lookups, query staging, a DRAM
/// round trip: about 8 tiles at one row); its CTAs span up to 1024 tiles,
/// so that a grid runs in as few waves as its balance allows.
int64_t tilesForWork(int64_t rows, int64_t entries, int64_t warps,
                     int64_t mTiles, int64_t smCount, bool copyWarpgroup) {
  const int64_t ctasPerSm = copyWarpgroup ? 1 : 2;
  const int64_t overheadTiles = copyWarpgroup ? 8 : 2;
  const int64_t maxTiles = copyWarpgroup ? 1024 : 64;
  const int64_t ctaSlots = ctasPerSm * smCount;
  int64_t best = 0, bestCost = 0;
  for (int64_t tiles = 8; tiles <= maxTiles; ++tiles) {
    int64_t perCta = warps * tiles * 16 * mTiles;
    int64_t ctas = rows * llvm::divideCeil(entries, perCta);
    int64_t cost =
        llvm::divideCeil(ctas, ctaSlots) * (tiles + overheadTiles);
    if (best == 0 || cost < bestCost) {
      best = tiles;
      bestCost = cost;
    }
  }
  return best;
}

/// The scoring configuration of `op`, whose rows score `entries` entries
/// each: the options' warps, M tiles and wgmma, and their tiles per warp
/// or the wave model's.
template <typename IndexerLike>
LogicalResult configureScore(IndexerLike op, int64_t entries,
                             const Options &options) {
  SpinDialect::ScoreConfigAttrHelper helper(op.getContext());
  auto q = dyn_cast<RankedTensorType>(op.getQ().getType());
  if (helper.isAttrPresent(op) || !q || !q.hasStaticShape() || entries <= 0)
    return success(); // configured already, or rejected by the plan
  auto emitError = [&] { return op.emitOpError(); };
  int64_t warps = options.warpsPerCta;
  int64_t mTiles = options.mTiles > 0 ? options.mTiles : 1;
  int64_t fixedTiles = options.tilesPerWarp;
  // Checked before the wave model divides by the warps.
  if (failed(ScoreConfigAttr::verify(emitError, warps,
                                     std::max<int64_t>(fixedTiles, 1), mTiles,
                                     options.wgmma, options.copyWarpgroup,
                                     /*evictFirst=*/false)))
    return failure();
  // A CTA scores several query rows of a request: the grid has a row of
  // CTAs per group of them.
  int64_t rows = q.getDimSize(1);
  int64_t queryBytes = isa<Float8E4M3FNType>(q.getElementType()) ? 1 : 2;
  int64_t groups =
      rows / scoreRowsPerCta(rows, q.getDimSize(2), q.getDimSize(3),
                             queryBytes, options.wgmma);
  // The copying warpgroup where its kernel applies (dense indexers, and
  // sparse scoring of blocks of a multiple of 64 slots). By default (auto)
  // where it measured faster than the other kernels
  // (docs/benchmarks-kernels.md): a CTA's rows of a power of two of heads
  // in all, at most 256 (one, two or four query rows at H = 64); other
  // counts (three rows) keep the other kernels.
  int64_t ctaHeads = rows / groups * q.getDimSize(2);
  bool wanted = options.copyWarpgroup ||
                (options.autoCopyWarpgroup && options.wgmma &&
                 llvm::isPowerOf2_64(ctaHeads));
  int64_t blockSize = 0;
  if (auto sparse = dyn_cast<FusedScoreOp>(op.getOperation()))
    blockSize = static_cast<int64_t>(sparse.getBlockSize());
  auto keys = dyn_cast<RankedTensorType>(op.getKeys().getType());
  bool copy = wanted && keys && keys.getRank() == 3 &&
              copyWarpgroupApplies(isa<Float8E4M3FNType>(keys.getElementType()),
                                   queryBytes == 1, q.getDimSize(3),
                                   keys.getDimSize(1), ctaHeads, blockSize);
  int64_t tiles = fixedTiles > 0
                      ? fixedTiles
                      : tilesForWork(q.getDimSize(0) * groups, entries, warps,
                                     mTiles, options.smCount, copy);
  // Sparse scoring's copier loads keys and scales with an L2 evict-first
  // policy: a SPIN step's top-K and (MTP) observe kernel read its scores
  // again while the keys pass through the L2 only once. Measured faster
  // there; dense steps measured the same or slower, so they keep the
  // default policy (docs/benchmarks-kernels.md, "Scoring kernels").
  bool evictFirst = copy && blockSize > 0;
  helper.setAttr(op,
                 ScoreConfigAttr::get(op.getContext(), warps, tiles, mTiles,
                                      options.wgmma, copy, evictFirst));
  return success();
}

/// The top-K of `rows` rows of `width` entries: a cluster of one CTA per 16
/// entries a thread, up to a portable cluster of 8. The leader's selection
/// and sort is a chain of CTA barriers: the fewest threads that still sort
/// K in registers. Larger K by merge ranks where a cluster of 512-thread
/// CTAs takes a slice of at most 512 candidates each: the CTAs sort their
/// slices side by side instead of the leader sorting them all, and two
/// CTAs share an SM, so that a 16-row batch's clusters run in one wave.
/// Not for K <= 512, whose leader sorts one candidate a thread and gains
/// nothing from it. When the rows' clusters of more than 2 CTAs fill more
/// than one wave (two CTAs an SM), each wave pays the clusters' barrier
/// chains again: for K > 512, pairs of 1024-thread CTAs, which scan more
/// entries a thread but run all rows in fewer waves, finish first; and a
/// row whose `candidates` (a SPIN row's selected entries; else `width`)
/// take at most 64 entries a thread of one such CTA, one CTA alone, with
/// half the waves of the pairs and no cluster barrier
/// (docs/benchmarks-kernels.md, "Other top-K changes").
void configureTopK(Operation *op, int64_t rows, int64_t width, int64_t k,
                   int64_t smCount, int64_t candidates) {
  SpinDialect::TopkConfigAttrHelper helper(op->getContext());
  if (helper.isAttrPresent(op) || width <= 0)
    return;
  auto clusterFor = [&](int64_t threads) {
    return std::clamp<int64_t>(llvm::divideCeil(width, 16 * threads), 1,
                               kMaxPortableCluster);
  };
  int64_t threads = k > 512 ? 1024 : 512;
  int64_t cluster = clusterFor(threads);
  bool mergeRanks = false;
  const int64_t mergeCluster = clusterFor(512);
  if (k > 512 && mergeCluster >= 2 && topKMergeSlice(k, mergeCluster) <= 512) {
    threads = 512;
    cluster = mergeCluster;
    mergeRanks = true;
  }
  if (k > 512 && cluster > 2 && rows * cluster > 2 * smCount) {
    threads = 1024;
    cluster = candidates <= 64 * threads ? 1 : 2;
    mergeRanks = false;
  }
  helper.setAttr(op, TopKConfigAttr::get(op->getContext(), threads, cluster,
                                         mergeRanks));
}

/// A single-row step whose prediction is cached prefetches on a miss when
/// the predict grid has at most one CTA per SM, where the miss is a latency
/// chain; in larger grids the prefetches delay the other CTAs' record
/// loads. Otherwise the scoring CTAs start while the select kernel (a CTA
/// per request) runs, and one of them per SM that kernel leaves free
/// prefetches its first tiles: on the SMs the select kernel occupies, and
/// in the later CTAs, which start after it, the prefetches only compete
/// with its loads and their own (docs/benchmarks-kernels.md).
/// A step of up to 8 rows selects them side by side, a CTA each in one
/// cluster, where those CTAs (of 1024 threads, one an SM) fit one wave;
/// otherwise the extra wave costs more than the rows' chains in series
/// (docs/benchmarks-kernels.md, "Tuning choices"). Under row-0 sharing only
/// row 0 selects after the warm-up.
void configureSelect(FusedSelectOp op, const Options &options) {
  SpinDialect::SelectConfigAttrHelper helper(op.getContext());
  auto mask = dyn_cast<RankedTensorType>(op.getMask().getType());
  auto lengths = dyn_cast<RankedTensorType>(op.getLengths().getType());
  if (helper.isAttrPresent(op) || !mask || !mask.hasStaticShape() ||
      !lengths || !lengths.hasStaticShape())
    return;
  SelectKernelSpec spec;
  spec.pooling = op.getPooling() ? *op.getPooling() : PoolingKind::max;
  spec.blockSize = op.getBlockSize();
  bool cached = lengths.getDimSize(1) == 1 && canPredictByMax(spec);
  int64_t ctas = llvm::divideCeil(mask.getDimSize(1), spec.predictBlocksPerCta) *
                 mask.getDimSize(0);
  bool prefetchOnMiss = cached && ctas <= options.smCount;
  int64_t scoringPrefetch =
      cached && !prefetchOnMiss
          ? std::max<int64_t>(0, options.smCount - mask.getDimSize(0))
          : 0;
  int64_t rows = lengths.getDimSize(1);
  int64_t rowCtas = rows;
  if (rows > kMaxPortableCluster || op.getMtpMask() == MtpMask::row0 ||
      mask.getDimSize(0) * rows > options.smCount)
    rowCtas = 1;
  helper.setAttr(op, SelectConfigAttr::get(op.getContext(), prefetchOnMiss,
                                           scoringPrefetch, rowCtas));
}

/// A sparse scoring's rows score the selection's block budget at the full
/// width (SPIN_SPEC §3.4); 0 when the mask is not a selection's.
int64_t expectedEntries(FusedScoreOp op) {
  FusedSelectOp select = selectionOf(op.getMask());
  auto mask = select ? dyn_cast<RankedTensorType>(select.getMask().getType())
                     : RankedTensorType();
  if (!mask || !mask.hasStaticShape())
    return 0;
  int64_t blockSize = select.getBlockSize();
  return ::spin::runtime::blockBudget(mask.getDimSize(1), blockSize,
                                      select.getTopk(),
                                      select.getSparsity().convertToDouble()) *
         blockSize;
}

/// The rows of a step's queries or scores (batch x rows a request); 0 when
/// dynamic.
int64_t rowsOf(Type q) {
  auto type = dyn_cast<RankedTensorType>(q);
  if (!type || type.getRank() < 2 || type.isDynamicDim(0) ||
      type.isDynamicDim(1))
    return 0;
  return type.getDimSize(0) * type.getDimSize(1);
}

/// The entries of a dense row: every slot the block table reaches.
template <typename IndexerLike>
int64_t tableEntries(IndexerLike op) {
  auto keys = dyn_cast<RankedTensorType>(op.getKeys().getType());
  auto table = dyn_cast<RankedTensorType>(op.getBlockTable().getType());
  if (!keys || !table || keys.isDynamicDim(1) || table.isDynamicDim(1))
    return 0;
  return keys.getDimSize(1) * table.getDimSize(1);
}

} // namespace

LogicalResult
mlir::spin::gpu_codegen::configureKernels(Operation *root,
                                          const Options &options) {
  if (options.smCount <= 0)
    return root->emitError("spin-configure-gpu-kernels: sm-count must be "
                           "positive (got ")
           << static_cast<int64_t>(options.smCount) << ")";
  for (auto [name, value] :
       {std::pair<const char *, int64_t>{"tiles-per-warp", options.tilesPerWarp},
        {"m-tiles", options.mTiles}})
    if (value < 0)
      return root->emitError("spin-configure-gpu-kernels: ")
             << name << " must be >= 0 (0: chosen by the pass; got " << value
             << ")";
  WalkResult result = root->walk([&](Operation *op) {
    LogicalResult configured =
        TypeSwitch<Operation *, LogicalResult>(op)
            .Case([&](DenseIndexerOp dense) {
              return configureScore(dense, tableEntries(dense), options);
            })
            .Case([&](FusedScoreOp score) {
              int64_t width = tableEntries(score);
              int64_t selected = expectedEntries(score);
              configureTopK(score, rowsOf(score.getQ().getType()), width,
                            score.getK(), options.smCount,
                            selected > 0 ? selected : width);
              return configureScore(score, selected, options);
            })
            .Case([&](TopKOp topk) {
              auto scores = dyn_cast<RankedTensorType>(topk.getScores().getType());
              if (scores && scores.hasStaticShape())
                configureTopK(topk, rowsOf(scores), scores.getDimSize(2),
                              topk.getK(), options.smCount,
                              scores.getDimSize(2));
              return success();
            })
            .Case([&](FusedSelectOp select) {
              configureSelect(select, options);
              return success();
            })
            .Default([](Operation *) { return success(); });
    return failed(configured) ? WalkResult::interrupt() : WalkResult::advance();
  });
  return failure(result.wasInterrupted());
}

namespace {
struct SpinConfigureGpuKernelsPass
    : public mlir::spin::impl::SpinConfigureGpuKernelsBase<
          SpinConfigureGpuKernelsPass> {
  using SpinConfigureGpuKernelsBase::SpinConfigureGpuKernelsBase;

  void runOnOperation() override {
    Options options{warpsPerCta,   tilesPerWarp,      mTiles, wgmma,
                    copyWarpgroup, autoCopyWarpgroup, smCount};
    if (failed(configureKernels(getOperation(), options)))
      signalPassFailure();
  }
};
} // namespace
