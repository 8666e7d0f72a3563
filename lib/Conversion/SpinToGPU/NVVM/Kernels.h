//===- Kernels.h - the generated GPU kernels of SPIN -------------*- C++ -*-===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
// One builder per kernel. Each spec holds the static shapes and options the
// kernel is specialised for; each builder adds a `gpu.func` to the kernel
// module and documents its parameters, grid and block shape, which the
// launch plan of convert-spin-to-gpu must follow.
//
//===----------------------------------------------------------------------===//

#ifndef SPIN_LIB_CONVERSION_SPINTOGPU_KERNELS_H
#define SPIN_LIB_CONVERSION_SPINTOGPU_KERNELS_H

#include "spin/Runtime/Abi.h"

#include "spin/Dialect/Spin/IR/SpinOps.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"

#include <array>
#include <optional>
#include <string>

namespace mlir::spin::gpu_codegen {

/// The kernel attribute that lists the pointer parameters holding a
/// 128-byte tensor map by value (spin-mark-tensor-map-parameters).
inline constexpr StringLiteral kTensorMapParametersAttrName =
    "spin_tensor_map_parameters";

/// The most CTAs a portable thread-block cluster holds (sm_90 and later).
inline constexpr int64_t kMaxPortableCluster = 8;

/// Element formats of keys and queries on the GPU path.
enum class ElementFormat { bf16, f16, fp8e4m3 };

/// The launch geometry of a generated kernel.
struct LaunchShape {
  std::array<int64_t, 3> grid{1, 1, 1};
  int64_t blockThreads = 128;
  int64_t sharedBytes = 0; ///< dynamic shared memory (0: static only)
};

/// Error codes written to the error record: the contract's
/// (spin/Runtime/Abi.def), which the runtime reports.
enum ErrorCode : int32_t {
  ErrorBadPage = static_cast<int32_t>(::spin::runtime::DeviceError::BadPage),
  ErrorBadLength =
      static_cast<int32_t>(::spin::runtime::DeviceError::BadLength),
  ErrorBadPosition =
      static_cast<int32_t>(::spin::runtime::DeviceError::BadPosition),
  ErrorBadSlot = static_cast<int32_t>(::spin::runtime::DeviceError::BadSlot),
  ErrorBadAccepted =
      static_cast<int32_t>(::spin::runtime::DeviceError::BadAccepted),
  ErrorDuplicateSlot =
      static_cast<int32_t>(::spin::runtime::DeviceError::DuplicateSlot),
  ErrorBadStatePage =
      static_cast<int32_t>(::spin::runtime::DeviceError::BadStatePage),
};

//===----------------------------------------------------------------------===//
// Scoring (SPIN_SPEC §1, §3.8)
//===----------------------------------------------------------------------===//

/// Scores every visible slot (dense) or every slot of the selected blocks
/// (sparse) of each row with tensor-core MMAs: 16 slots per warp tile in M,
/// 8 heads per MMA in N, keys gathered through the block table with 16-byte
/// loads straight into A fragments (the K dimension is permuted identically
/// in keys and queries, which leaves every dot product unchanged).
///
/// A CTA scores `scoreRowsPerCta` query rows of one request (all R rows of
/// an MTP step where their staged queries fit): each key tile is loaded
/// once and multiplied by the queries of all of them (MMA N = rows x
/// heads), with each row's epilogue, length and prescale. fp8 e4m3 queries
/// (with fp8 keys) multiply on e4m3 MMAs (mma.sync.m16n8k32, wgmma k32);
/// others on f16/bf16 ones, fp8 keys converted exactly.
///
/// Parameters: q, w, keys, [scales], block_table, lengths, [blocks, counts,
/// skip], [status], [previous, slots], out (ptrs), pages (i32), errors
/// (ptr). A bad page sets the request's `skip` flag and row status (sparse)
/// and records an error.
/// Grid: (ctasPerRow, batch * R / rowsPerCta); sparse: x and y swapped. `out` is f32 [batch * rows, outWidth]:
/// dense rows by slot (entries >= N unwritten, or -inf with
/// `fillPastLength`); sparse rows in selected-block
/// order (entry e = slot blocks[e / blockSize] * blockSize + e % blockSize),
/// NaN for entries past the row's visible length.
/// Bytes of a fused fp8 key page (ScoreKernelSpec::fusedPages): `pageSize`
/// rows of `headDim` e4m3 bytes, then their f32 scales.
inline int64_t fusedPageBytes(int64_t pageSize, int64_t headDim) {
  return pageSize * (headDim + 4);
}

struct ScoreKernelSpec {
  std::string name;
  int64_t batch = 1, rows = 1, heads = 64, headDim = 128;
  int64_t pageSize = 64, tablePages = 1;
  ElementFormat keyFormat = ElementFormat::bf16;
  ElementFormat queryFormat = ElementFormat::bf16;
  bool scales = false;
  /// fp8 keys in the serving engines' fused pages (docs/GPU-ABI.md, "Fused
  /// fp8 key pages"): page p holds its `pageSize` key rows (`headDim` bytes
  /// each) and then their f32 scales, in `pageBytes()` bytes; `keys` and
  /// `scales` are the same pointer.
  bool fusedPages = false;
  bool sparse = false;
  int64_t blockSize = 64, maxBlocks = 1; ///< sparse only
  int64_t warps = 8, tilesPerWarp = 8;
  /// 16-entry M tiles per warp tile (they share the B fragments).
  int64_t mTiles = 1;
  /// sm_90a: the four warps of a warpgroup issue wgmma.m64nHk16 with their
  /// keys as A from registers and the queries as B from shared memory,
  /// instead of mma.sync per warp (one M tile only).
  bool wgmma = false;
  /// With wgmma, fp8 keys and queries, Dh = 128, the compact key cache
  /// (sparse: blocks of a multiple of 64 slots): warpgroup 0 copies the
  /// CTA's 64-slot key tiles and their scales through tensor maps (kernel
  /// parameters) into rings in dynamic shared memory, one ring of each
  /// multiplying warpgroup (two to four), each stage completing on its
  /// "full" mbarrier; the multipliers take both wgmma operands from shared
  /// memory (keys M = 64, the rows' queries N = rows x heads <= 256) and
  /// release each stage on its "empty" mbarrier; setmaxnreg moves
  /// registers from the copier to them.
  bool copyWarpgroup = false;
  /// With copyWarpgroup: the copier's key and scale loads carry an L2
  /// evict-first cache policy (#spin.score_config evict_first), so that
  /// the scores written meanwhile stay in the L2 for the kernels after.
  bool evictFirst = false;
  /// Dense: write -inf to the entries at and after each row's length (the
  /// op's semantics, for scores the graph returns; the top-K reads only
  /// entries below the length and needs no fill).
  bool fillPastLength = false;
  /// Sparse: take `previous` (i32 [batch] slots, then [batch, 1 +
  /// maxBlocks]: each batch row's state slot, block count and list at the
  /// previous step, written by the update kernel with `keepList`) and the
  /// step's `slots` after `status`, and before the wait have every warp
  /// prefetch to L2 the key lines (and scales) of its first `prefetchTiles`
  /// tiles at the places the list of the row's slot gives them (found by
  /// slot: a request may have moved to another batch row). Only a hint:
  /// every address is clamped to the request's own visible pages, and
  /// nothing reads the prefetched lines unless this step selects the same
  /// blocks. One tile a warp measured best (docs/benchmarks-kernels.md).
  bool prefetchPreviousTiles = false;
  int64_t prefetchTiles = 1;
  /// With `prefetchPreviousTiles`: the CTAs, in launch order, that
  /// prefetch (#spin.select_config's scoring_prefetch_ctas).
  int64_t prefetchCtas = 0;
  /// Sparse: take the selection's row status (i32 [batch], docs/GPU-ABI.md
  /// "Row status") after `skip`, and write the bad-page code into the row
  /// of a request that meets a bad block-table entry.
  bool rowStatus = false;

  int64_t outWidth() const { return tablePages * pageSize; }
  int64_t pageBytes() const { return fusedPageBytes(pageSize, headDim); }
};
/// The query rows (of `rows`, a divisor) one scoring CTA scores: as many as
/// fit the shared-memory staging budget.
int64_t scoreRowsPerCta(int64_t rows, int64_t heads, int64_t headDim,
                        int64_t queryBytes, bool wgmma);
int64_t scoreRowsPerCta(const ScoreKernelSpec &spec);

/// Whether the copying warpgroup's kernel (ScoreKernelSpec::copyWarpgroup)
/// can score an indexer: fp8 keys and queries, Dh = 128, pages of a
/// multiple of 64 slots (a 64-slot tile lies in one page), for sparse
/// scoring blocks of a multiple of 64 slots too (a tile lies in one
/// selected block; `blockSize` 0 for dense), and the CTA's rows' heads one
/// wgmma N (at most 256).
inline bool copyWarpgroupApplies(bool fp8Keys, bool fp8Queries,
                                 int64_t headDim, int64_t pageSize,
                                 int64_t ctaHeads, int64_t blockSize = 0) {
  return fp8Keys && fp8Queries && headDim == 128 && pageSize > 0 &&
         pageSize % 64 == 0 && ctaHeads <= 256 && blockSize >= 0 &&
         blockSize % 64 == 0;
}
LaunchShape buildScoreKernel(OpBuilder &b, Location loc,
                             gpu::GPUModuleOp module,
                             const ScoreKernelSpec &spec);

//===----------------------------------------------------------------------===//
// Top-K (SPIN_SPEC §1, §3.9)
//===----------------------------------------------------------------------===//

/// Top-K of every row in one launch: a cluster of `cluster` CTAs per row
/// (thread-block clusters, sm_90 and later), so that a long row is read by
/// several SMs and only a short candidate list by one.
///  1. Each CTA histograms the top 12 bits of the order-preserving keys of
///     the eligible (non-NaN) scores of its share of the row in its shared
///     memory.
///  2. After a cluster barrier every CTA reads its peers' group sums (32
///     bins each), then the bins of the group holding the K-th largest,
///     through distributed shared memory, and finds that bin.
///  3. Each CTA appends its entries at or above that bin as (key, entry) to
///     the row's candidate buffer, after those of the lower ranks (the
///     peers' counts at or above the bin give its offset). A share of one
///     chunk (16 entries a thread) is still in registers from step 1; a
///     longer one is read again.
///  4. After a second cluster barrier the leader radix-selects the K
///     largest candidates (ties to the lower entry, so to the lower slot),
///     sorts them by (score desc, entry asc) with a bitonic sort and writes
///     slots, -1 for missing ones. When the candidates overflow their buffer
///     (a bin holding more than `candidates` entries, e.g. many equal
///     scores) it selects from the whole row instead.
///     With `mergeRanks`, where the candidates number at most
///     `cluster * topKMergeSlice(k, cluster)`, every CTA instead sorts an
///     even slice of the candidate list, copies its peers' sorted slices,
///     and writes each of its candidates at its place in the merged order
///     (its count of predecessors in every slice, by binary search) when
///     that place is below K.
/// Nothing persists between launches. Dense rows hold entries [0, N);
/// sparse rows [0, count * blockSize), mapped back to slots through the
/// block list.
///
/// Parameters: scores, lengths, [blocks, counts], candidates, out (ptrs).
/// Grid: (cluster, batch * rows), cluster (cluster, 1, 1) fixed in the
/// kernel (`.reqnctapercluster`).
struct TopKKernelSpec {
  std::string name;
  int64_t batch = 1, rows = 1, width = 1, k = 1;
  bool sparse = false;
  int64_t blockSize = 64, maxBlocks = 1;
  int64_t threads = 1024;     ///< per CTA (plan: 512 if K <= 512 or merge)
  int64_t cluster = 8;        ///< CTAs per row, 1 to 8 (a portable cluster)
  int64_t candidates = 16384; ///< candidate buffer per row
  /// Step 4 by merge ranks where the candidates fit (see above); needs
  /// 2 <= cluster, topKMergeSlice(k, cluster) <= threads.
  bool mergeRanks = false;
};
/// The candidates each CTA sorts by merge ranks (a power of two): room for
/// twice K over the cluster.
int64_t topKMergeSlice(int64_t k, int64_t cluster);
LaunchShape buildTopKKernel(OpBuilder &b, Location loc, gpu::GPUModuleOp module,
                            const TopKKernelSpec &spec);

//===----------------------------------------------------------------------===//
// Prediction and block selection (SPIN_SPEC §3.1-3.7, §4)
//===----------------------------------------------------------------------===//

/// The paged state layout (docs/GPU-ABI.md, "Paged state"; StatePaging in
/// KernelLibrary.h): `page` KV slots per state page (0: the compact layout)
/// and `width` entries per state block-table row. A kernel of a spec with
/// it takes, after all its other parameters (the select kernel: before its
/// layer), the state block table (ptr), `valid` (ptr; the kernels that read
/// or reset it: predict, select, reset) and the state's page count (i32),
/// in that order; the reset kernel takes `valid` alone, and the MTP commit
/// (CommitKernelSpec) a scratch flag per request besides.
struct PagedState {
  int64_t page = 0, width = 0;
  bool enabled() const { return page > 0; }
};

/// Whether every run of `n` consecutive KV slots from a multiple of `n` lies
/// in one selection block and one state page, so that a state field's
/// cells of the run form one aligned `n`-element vector in every layout
/// (the state tensors start at multiples of 16 bytes: docs/GPU-ABI.md,
/// "State tensors").
inline bool slotRunsAreVectors(int64_t n, int64_t capacity, int64_t blockSize,
                               const PagedState &paged) {
  return capacity % n == 0 && blockSize % n == 0 &&
         (!paged.enabled() || paged.page % n == 0);
}

/// One CTA (or one cluster, rowCtas) per request: predicted block scores
/// from V and D (pooled per block in shared memory), then per row warm-up /
/// budget / forced blocks / exploit / explore, the union over rows, and the
/// compacted ascending list of selected blocks. Optionally the realized
/// block sparsity per row.
///
/// Parameters: positions, lengths, request_ids, slots, v, d, it, blocks,
/// counts, mask, skip (ptrs; `skip` is set for the requests the step
/// rejects and cleared for the others), [keys], [pred_at], [sparsity],
/// [obs_rows], [reset] (ptrs), errors (ptr), slots in the pool (i32),
/// [layer (i32)].
/// Every kernel that reads `slots` takes the pool's slot count and skips
/// the batch rows whose slot is not live (loadBatchSlot: padding rows,
/// slots outside the pool, repeated slots); the select kernel reports the
/// bad ones.
/// Grid: (batch), or (rowCtas, batch) with a cluster of rowCtas.
struct SelectKernelSpec {
  std::string name;
  int64_t batch = 1, rows = 1, capacity = 1, blockSize = 64, maxBlocks = 1;
  int64_t topk = 1, layer = 0;
  /// The layer (of the exploration hash) is the last parameter instead of
  /// the constant `layer`, so that one kernel serves every layer.
  bool layerParameter = false;
  double sparsity = 0.5, explore = 0.0;
  uint64_t seed = 0;
  PoolingKind pooling = PoolingKind::max;
  bool rowZeroOnly = false;
  bool reportSparsity = false;
  /// CTAs a request: 1, or one per row (at most kMaxPortableCluster) in
  /// one thread-block cluster, each selecting its row into its own mask;
  /// CTA 0 then ORs its peers' masks in through distributed shared memory
  /// and does the rest (the paged state, the list, the report), so that the
  /// rows' latency chains run side by side. Grid (rowCtas, batch) when
  /// above 1.
  int64_t rowCtas = 1;
  /// The layer's MTP rows are committed by the step: the kernel takes
  /// `obs_rows` (before `errors`) and skips a request whose rows are still
  /// buffered (its commit was refused).
  bool committed = false;
  /// The step's per-row reset flags are applied by `<name>_predict`
  /// instead of a reset kernel (docs/GPU-ABI.md, "Device batches"): it
  /// takes reset (i8), pred_at and, with `resetObservations`, obs_rows
  /// (ptrs) before the slot count, zeroes a flagged row's V and D across
  /// its CTAs, its `it`, record and buffered rows, and predicts nothing for
  /// it (a warm-up). The select kernel then takes the flags too (before
  /// `errors`) and counts such a row's iteration as 0.
  bool fusedReset = false;
  bool resetObservations = false;
  int64_t threads = 1024;
  /// Block scores come from buildPredictKernel (an extra parameter, the
  /// keys [batch * rows, maxBlocks], before `sparsity`).
  bool precomputed = false;
  int64_t predictBlocksPerCta = 64;
  /// Single-row steps: the block scores live in the state's prediction
  /// cache (`pred_at` [slots, 4], `pred_keys` [slots, numBlocks]) instead
  /// of a scratch buffer. After a step's EMA update, `<name>_predict_next`
  /// computes them for the request's next step at (p + 1, N + 1) and
  /// records {p + 1, N + 1, it, 1} in `pred_at`; the next step's
  /// `<name>_predict` skips a request whose record matches its (p, N, it)
  /// and computes the scores otherwise. Both kernels take `pred_at` and
  /// `pred_keys` after `it`; the select kernel reads `pred_keys` by slot.
  bool predictionCache = false;
  /// With the cache: `<name>_predict` takes a hint (i32 [batch], scratch:
  /// whether the batch row's previous step missed the cache) and a row
  /// that missed prefetches its V and D lines to L2 before its record is
  /// read. Set when the predict grid is at most one CTA per SM, where the
  /// miss is a latency chain; in larger grids the prefetches delay the
  /// other CTAs' record loads (docs/benchmarks-kernels.md). Without it (a
  /// larger grid) the select kernel triggers its dependents before its
  /// wait (buildSelectKernel).
  bool prefetchOnMiss = false;
  /// The paged layout: the predict kernels read V and D entries at or past
  /// a slot's `valid` as zero; the select kernel rejects a request with a
  /// state page outside the pool, zeroes its entries from `valid` up to the
  /// step's longest row and advances `valid` there.
  PagedState paged;
  /// `ceil(capacity / blockSize)`: the row length of `pred_keys`.
  int64_t stateBlocks() const { return (capacity + blockSize - 1) / blockSize; }
  /// Whether the select kernel lets its dependent (the sparse scoring
  /// kernel) start before its own grid wait (buildSelectKernel).
  bool triggersEarly() const { return predictionCache && !prefetchOnMiss; }
};
/// True when max pooling can be computed by many CTAs per row
/// (buildPredictKernel).
bool canPredictByMax(const SelectKernelSpec &spec);
/// Predicted block scores S[j] = max_{i in block j} max(V[i], D[p - i]) as
/// order-preserving u32 keys, `predictBlocksPerCta` blocks per CTA.
/// Parameters: positions, lengths, slots, v, d, it, keys (ptrs); with
/// `predictionCache` pred_at, pred_keys instead of keys, and for
/// `<name>_predict` with `prefetchOnMiss` the hint; last the pool's slot
/// count (i32). Grid:
/// (ceil(maxBlocks / predictBlocksPerCta), batch * rows). Warm-up rows and
/// rows the select kernel rejects are skipped. `next` builds
/// `<name>_predict_next` (predictionCache only).
LaunchShape buildPredictKernel(OpBuilder &b, Location loc,
                               gpu::GPUModuleOp module,
                               const SelectKernelSpec &spec, bool next = false);
LaunchShape buildSelectKernel(OpBuilder &b, Location loc,
                              gpu::GPUModuleOp module,
                              const SelectKernelSpec &spec);

//===----------------------------------------------------------------------===//
// State updates (SPIN_SPEC §2, §3.10, §4)
//===----------------------------------------------------------------------===//

/// EMA update of V and D from one row's scores of the selected blocks (the
/// sparse score layout above), then `it += 1`.
///
/// Parameters: scores, positions, lengths, slots, blocks, counts, skip, v,
/// d, it, [previous] (ptrs); requests whose `skip` flag is set are left
/// untouched. With `keepList` the kernel also copies every request's slot,
/// count and block list into `previous` (i32 [batch] slots, then [batch, 1
/// + maxBlocks]: the count, then the list), which the next step's scoring
/// kernel reads before its wait (ScoreKernelSpec::prefetchPreviousTiles).
/// Grid: (ctasPerRequest, batch).
struct UpdateKernelSpec {
  std::string name;
  int64_t batch = 1, capacity = 1, blockSize = 64, maxBlocks = 1;
  double decay = 0.5;
  int64_t threads = 256, ctasPerRequest = 1;
  bool keepList = false;
  PagedState paged;
};
LaunchShape buildUpdateKernel(OpBuilder &b, Location loc,
                              gpu::GPUModuleOp module,
                              const UpdateKernelSpec &spec);

/// Zeroes V and D, sets `it = 0` and clears the prediction cache's record
/// (`pred_at`) for the requests whose reset flag is set (and drops their
/// buffered MTP rows: `obs_rows = 0`). Only where the selection has no
/// predict kernel, which applies the flags otherwise
/// (SelectKernelSpec::fusedReset). Parameters: reset (i8), slots, v, d,
/// it, pred_at, [obs_rows] (ptrs), the pool's slot count (i32). Grid:
/// (ctasPerRequest, batch).
struct ResetKernelSpec {
  std::string name;
  int64_t batch = 1, capacity = 1;
  int64_t threads = 256, ctasPerRequest = 1;
  /// The layer buffers MTP rows: take `obs_rows` as a last parameter.
  bool observations = false;
  /// The paged layout: `valid = 0` instead of zeroing V and D (its only
  /// extra parameter is `valid`).
  PagedState paged;
};
LaunchShape buildResetKernel(OpBuilder &b, Location loc,
                             gpu::GPUModuleOp module,
                             const ResetKernelSpec &spec);

//===----------------------------------------------------------------------===//
// MTP: buffered observations and their commit (SPIN_SPEC §4)
//===----------------------------------------------------------------------===//

/// Folds row 0 of an MTP verification step into V and D (the update rule of
/// buildUpdateKernel with `decay`, `it` unchanged: docs/SPIN_SPEC.md §7.2)
/// and buffers the step in the request's pending-observation fields
/// (docs/Runtime-ABI.md), as spin.observe does on the CPU: `obs_rows =
/// rows`, `obs_pos[r]`, `obs_len[r]`, the step's union mask in `obs_mask`
/// (0/1, the first min(maxBlocks, stateBlocks) entries) and, for every
/// scored slot `i < N_r` of row `r >= 1`, its score in draft row `r - 1`
/// of `obs_z` (read from the sparse score layout above; other entries keep
/// stale values no commit reads). A request whose `skip` flag is set
/// (the select kernel rejected it, or scoring met a bad page) is not
/// touched; one of whose rows has a bad length or position folds and
/// buffers nothing: `obs_rows = 0`.
///
/// Parameters: scores, positions, lengths, slots, blocks, counts, mask,
/// skip, obs_rows, obs_pos, obs_len, obs_mask, obs_z, v, d (ptrs).
/// Grid: (ctasPerRequest, batch).
struct ObserveKernelSpec {
  std::string name;
  /// `rows` is also the pool's `maxRows` (the row stride of the obs fields).
  int64_t batch = 1, rows = 1, capacity = 1, blockSize = 64, maxBlocks = 1;
  int64_t stateBlocks = 1; ///< entries of an obs_mask row: ceil(C / block)
  int64_t threads = 256, ctasPerRequest = 1;
  double decay = 0.5; ///< the EMA weight row 0 is folded with
  PagedState paged;
};
LaunchShape buildObserveKernel(OpBuilder &b, Location loc,
                               gpu::GPUModuleOp module,
                               const ObserveKernelSpec &spec);

/// Replays the buffered rows `1..a` (`a = accepted[b]` clamped to
/// `[0, obs_rows - 1]`; none with `rowZeroOnly`: the observe kernel folded
/// row 0) into V and D in row order, with the update rule of
/// buildUpdateKernel, then `it += 1` and `obs_rows = 0`; requests with
/// nothing buffered are untouched. Two launches (the finish alone with
/// `rowZeroOnly`, which replays nothing):
///  1. `<name>` (ctasPerRequest x batch CTAs): thread `x` owns `V[x]` and
///     `D[x]` and folds in, row after row, row r's score of slot `x` and of
///     slot `p_r - x` (when scored and finite): no two threads write the
///     same entry, and each entry sees the rows in order, exactly as the
///     CPU path's sequential replay; entries no replayed row touches are
///     not accessed;
///  2. `<name>_finish` (one thread per request; paged, one CTA) advances
///     `it` and drops the buffer, after every CTA of the first launch has
///     read `obs_rows`.
///
/// A request whose accepted count is outside `[0, obs_rows)` is reported
/// (the error record, by the replay) and left untouched by both; the
/// select kernel then skips it (SelectKernelSpec::committed).
///
/// Parameters: replay(accepted, slots, v, d, obs_rows, obs_pos, obs_len,
/// obs_mask, obs_z, errors (ptrs), slot count (i32)); finish(slots, it,
/// obs_rows, accepted (ptrs), slot count (i32)); paged, then (state table
/// (ptr), page count (i32)) for the replay, (obs_pos, obs_len, state table
/// (ptrs), page count (i32)) for the finish.
struct CommitKernelSpec {
  std::string name;
  /// `rows` is the pool's `maxRows` (the row stride of the obs fields).
  int64_t batch = 1, rows = 1, capacity = 1, blockSize = 64;
  int64_t stateBlocks = 1; ///< entries of an obs_mask row: ceil(C / block)
  double decay = 0.5;
  bool rowZeroOnly = false; ///< `mtp_update = row0`
  /// The reset flags are applied after the commit (by the predict kernel,
  /// SelectKernelSpec::fusedReset): both launches take them (a ptr before
  /// the slot count) and leave a flagged row alone.
  bool resetAfter = false;
  int64_t threads = 256, ctasPerRequest = 1;
  /// The paged layout: the replay finds entries through the step's state
  /// block table; a request with a page outside the pool among those its
  /// committed rows 0..a reach is refused by both launches, each checking
  /// the table itself: nothing replayed, the buffer and `it` left alone.
  PagedState paged;
};
struct CommitLaunches {
  std::optional<LaunchShape> replay; ///< none with `rowZeroOnly`
  LaunchShape finish;
};
CommitLaunches buildCommitKernels(OpBuilder &b, Location loc,
                                  gpu::GPUModuleOp module,
                                  const CommitKernelSpec &spec);

} // namespace mlir::spin::gpu_codegen

#endif // SPIN_LIB_CONVERSION_SPINTOGPU_KERNELS_H
