//===- TopKKernel.cpp - top-K of scored rows ------------------------------===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
// Scores become order-preserving u32 keys (NaN is never eligible). One
// thread-block cluster per row: each CTA histograms the top 12 bits of its
// share of the row; the cluster's histograms, read through distributed
// shared memory (group sums first, then one group's bins), give the bin of
// the K-th largest; the entries at or above it are the candidates, which the
// leader CTA radix-selects (ties to the lower entry: entries are in slot
// order) and sorts by (score desc, entry asc) with a bitonic sort, or, for
// large K, which every CTA sorts a slice of and places by merge ranks.
//
//===----------------------------------------------------------------------===//

#include "KernelLibrary.h"
#include "Kernels.h"

#include "llvm/Support/MathExtras.h"

using namespace mlir;
using namespace mlir::spin;
using namespace mlir::spin::gpu_codegen;
using arith::CmpFPredicate;
using arith::CmpIPredicate;

namespace {

constexpr int64_t kBinShift = 20; // 32 - 12 bits
constexpr int64_t kHistBins = int64_t(1) << (32 - kBinShift);
/// Static shared memory the final kernel gives its list and staged
/// candidates (of the 48 KB a kernel may use statically; the radix
/// histogram and scans take the rest).
constexpr int64_t kStaticSharedBudget = 40 * 1024;

/// Shared pieces of the four kernels: the row's entry count and its keys.
struct RowView {
  Value rowId, request, n, rowBase;
};

RowView rowView(KernelBuilder &kb, const TopKKernelSpec &spec, Value rowId,
                Value lengths, Value counts) {
  Type i32 = kb.i32T();
  RowView r;
  r.rowId = rowId;
  r.request = kb.divU(rowId, kb.i32(spec.rows));
  if (spec.sparse) {
    r.n = kb.mul(kb.loadAt(i32, counts, r.request, true),
                 kb.i32(spec.blockSize));
  } else {
    Value visible = kb.loadAt(i32, lengths, rowId, true);
    r.n = kb.minS(kb.maxS(visible, kb.i32(0)), kb.i32(spec.width));
  }
  r.rowBase = kb.mul(rowId, kb.i32(spec.width));
  return r;
}

std::pair<Value, Value> scoreKey(KernelBuilder &kb, Value scores,
                                 const RowView &row, Value i) {
  Value z = kb.loadAt(kb.f32T(), scores, kb.add(row.rowBase, i), true);
  return {kb.cmpF(CmpFPredicate::ORD, z, z), kb.orderedKey(z)};
}

/// One entry of a thread's chunk: its index in the row, whether it is
/// eligible (inside the range and not NaN) and its key.
struct ChunkEntry {
  Value i, eligible, key;
};

/// The first entry of this thread's vector `v` (of 4) of the chunk at `first`.
Value chunkStart(KernelBuilder &kb, Value first, int64_t v, int64_t threads) {
  return kb.add(first, kb.add(kb.mul(kb.threadIdX(), kb.i32(4)),
                              kb.i32(v * threads * 4)));
}

/// loadChunk's four vectors of scores (NaN past `last`).
SmallVector<Value, 4> loadChunkVectors(KernelBuilder &kb, Value scores,
                                       const RowView &row, bool rowsAligned,
                                       Value first, Value last,
                                       int64_t threads) {
  Type f32 = kb.f32T(), vec = kb.vecT(f32, 4);
  SmallVector<Value, 4> vectors;
  for (int64_t v = 0; v < 4; ++v) {
    Value start = chunkStart(kb, first, v, threads);
    vectors.push_back(kb.ifThenElse(
        {vec}, kb.cmp(CmpIPredicate::slt, start, last),
        [&]() -> SmallVector<Value> {
          Value at = kb.gep(scores, f32, kb.add(row.rowBase, start));
          if (rowsAligned)
            return {kb.load(vec, at, 16, true)};
          // Rows of a width that is not a multiple of 4: scalar loads that
          // stay inside the row.
          SmallVector<Value, 4> elements;
          for (int64_t e = 0; e < 4; ++e) {
            Value i = kb.add(start, kb.i32(e));
            Value z = kb.ifThenElse(
                {f32}, kb.cmp(CmpIPredicate::slt, i, last),
                [&]() -> SmallVector<Value> {
                  return {kb.loadAt(f32, scores, kb.add(row.rowBase, i), true)};
                },
                [&]() -> SmallVector<Value> {
                  return {kb.f32Bits(0x7fc00000u)};
                })[0];
            elements.push_back(z);
          }
          return {kb.vectorOf(vec, elements)};
        },
        [&]() -> SmallVector<Value> {
          // Past the chunk: NaN, never eligible.
          return {
              kb.splat(vec, FloatAttr::get(kb.f32T(),
                                           llvm::APFloat::getQNaN(
                                               llvm::APFloat::IEEEsingle())))};
        })[0]);
  }
  return vectors;
}

/// The entries of the chunk at `first` whose scores loadChunkVectors
/// loaded.
SmallVector<ChunkEntry, 16> chunkEntries(KernelBuilder &kb,
                                         ArrayRef<Value> vectors, Value first,
                                         Value last, int64_t threads) {
  SmallVector<ChunkEntry, 16> entries;
  for (int64_t v = 0; v < 4; ++v)
    for (int64_t e = 0; e < 4; ++e) {
      Value i = kb.add(chunkStart(kb, first, v, threads), kb.i32(e));
      Value z = kb.extract(vectors[v], e);
      Value eligible = kb.andI(kb.cmp(CmpIPredicate::slt, i, last),
                               kb.cmpF(CmpFPredicate::ORD, z, z));
      entries.push_back({i, eligible, kb.orderedKey(z)});
    }
  return entries;
}

/// The entries of `[first, last)` (a chunk of at most 16 * `threads`) that
/// this thread looks at: it loads its 16 as four 16-byte vectors
/// (`rowsAligned`: rows start at a multiple of 4 entries) before it looks at
/// any, so the loads overlap. Every thread gets 16 (`eligible` is false
/// outside the range), so warp-wide operations over them are safe.
SmallVector<ChunkEntry, 16> loadChunk(KernelBuilder &kb, Value scores,
                                      const RowView &row, bool rowsAligned,
                                      Value first, Value last,
                                      int64_t threads) {
  return chunkEntries(
      kb, loadChunkVectors(kb, scores, row, rowsAligned, first, last, threads),
      first, last, threads);
}

/// Histogram bins per group: the cluster finds the threshold's group from
/// the group sums first, then the bin within it, so that each CTA reads
/// only the group sums and one group of its peers' histograms.
constexpr int64_t kGroupBins = 32;
constexpr int64_t kGroups = kHistBins / kGroupBins;

/// A CTA's histogram of its share of a row in shared memory, and the
/// cluster's, gathered peer by peer.
struct ClusterHistogram {
  int64_t cluster;
  Value bins;       ///< kHistBins counters
  Value groups;     ///< kGroups sums of kGroupBins bins
  Value peerGroups; ///< every peer's group sums [cluster][kGroups]
  Value peerBins; ///< every peer's bins of the threshold's group [cluster][32]
  Value peerCounts; ///< every peer's entries at or above the threshold
  /// The threshold's group, the count above it, its bin, the counts above
  /// and in the bin.
  Value cells;

  /// Zeroes the counters (all threads; ends with a barrier).
  static ClusterHistogram begin(KernelBuilder &kb, StringRef prefix, Value bins,
                                int64_t cluster, int64_t threads);
  void count(KernelBuilder &kb, Value key) const {
    kb.atomicAdd(kb.gep(bins, kb.i32T(), kb.shrU(key, kb.i32(kBinShift))),
                 kb.i32(1));
  }
  /// After the counting (all threads): the group sums. A cluster barrier
  /// must follow before any peer reads them.
  void sumGroups(KernelBuilder &kb, int64_t threads) const;
  /// The bin holding the k-th largest key of a row (counting from the
  /// top), how many eligible entries lie above it and in it; `bin` is 0
  /// when the row has fewer than k eligible entries.
  struct Threshold {
    Value bin, above, inBin;
  };
  /// After that cluster barrier (all threads of every CTA of the cluster,
  /// which keep their shared memory until a second cluster barrier): the
  /// row's threshold. Every thread gets the same values.
  Threshold threshold(KernelBuilder &kb, int64_t threads, Value k) const;
  /// After `threshold` (all threads): the entries at or above `bin` in the
  /// CTAs of ranks below `rank`, and in the whole cluster.
  std::pair<Value, Value> candidatesBefore(KernelBuilder &kb, Value bin,
                                           Value rank) const;
};

ClusterHistogram ClusterHistogram::begin(KernelBuilder &kb, StringRef prefix,
                                         Value bins, int64_t cluster,
                                         int64_t threads) {
  Type i32 = kb.i32T(), vec4 = kb.vecT(i32, 4);
  ClusterHistogram h;
  h.cluster = cluster;
  h.bins = bins;
  h.groups = kb.sharedArray((prefix + "_groups").str(), i32, kGroups);
  h.peerGroups =
      kb.sharedArray((prefix + "_peer_groups").str(), i32, cluster * kGroups);
  h.peerBins =
      kb.sharedArray((prefix + "_peer_bins").str(), i32, cluster * kGroupBins);
  h.peerCounts = kb.sharedArray((prefix + "_peer_counts").str(), i32, cluster);
  h.cells = kb.sharedArray((prefix + "_cells").str(), i32, 8);
  Value zeros = kb.splat(vec4, kb.builder().getI32IntegerAttr(0));
  forEachThreadStrided(kb, kb.i32(kHistBins / 4), threads, [&](Value i) {
    kb.store(zeros, kb.gep(bins, vec4, i), 16);
  });
  kb.ifThen(kb.cmp(CmpIPredicate::eq, kb.threadIdX(), kb.i32(0)),
            [&] { kb.storeAt(kb.i32(-1), h.cells, kb.i32(0)); });
  kb.barrier();
  return h;
}

/// The sum of one i32 over the warp.
static Value warpSum(KernelBuilder &kb, Value v) {
  for (int64_t d = 16; d >= 1; d /= 2)
    v = kb.add(v, kb.shflXor(v, d));
  return v;
}

void ClusterHistogram::sumGroups(KernelBuilder &kb, int64_t threads) const {
  kb.barrier();
  const int64_t warps = threads / 32;
  Value lane = kb.laneId(), warp = kb.warpId();
  for (int64_t j = 0; j < llvm::divideCeilSigned(kGroups, warps); ++j) {
    Value g = kb.add(warp, kb.i32(j * warps));
    Value inRange = kb.cmp(CmpIPredicate::slt, g, kb.i32(kGroups));
    Value gc = kb.minS(g, kb.i32(kGroups - 1));
    Value sum =
        warpSum(kb, kb.loadAt(kb.i32T(), bins,
                              kb.add(kb.mul(gc, kb.i32(kGroupBins)), lane)));
    kb.ifThen(kb.andI(inRange, kb.cmp(CmpIPredicate::eq, lane, kb.i32(0))),
              [&] { kb.storeAt(sum, groups, gc); });
  }
}

/// Copies `per` i32 values from `offset` of every peer's `remote` into
/// `local[peer * per + i]` (all threads; no barrier).
static void gatherFromPeers(KernelBuilder &kb, Value remote, Value offset,
                            int64_t per, int64_t cluster, Value local,
                            int64_t threads) {
  const int64_t count = per * cluster;
  Value tid = kb.threadIdX();
  for (int64_t j = 0; j < llvm::divideCeilSigned(count, threads); ++j) {
    Value idx = kb.add(tid, kb.i32(j * threads));
    kb.ifThen(kb.cmp(CmpIPredicate::slt, idx, kb.i32(count)), [&] {
      Value peer = kb.divU(idx, kb.i32(per)), at = kb.remU(idx, kb.i32(per));
      Value v = kb.load(
          kb.i32T(),
          kb.gep(kb.clusterPeer(remote, peer), kb.i32T(), kb.add(offset, at)),
          4);
      kb.storeAt(v, local, idx);
    });
  }
}

ClusterHistogram::Threshold
ClusterHistogram::threshold(KernelBuilder &kb, int64_t threads, Value k) const {
  Type i32 = kb.i32T();
  Value tid = kb.threadIdX(), lane = kb.laneId();
  Value firstWarp = kb.cmp(CmpIPredicate::slt, tid, kb.i32(32));
  auto overPeers = [&](Value perPeer, int64_t per, Value i) {
    Value sum = kb.i32(0);
    for (int64_t p = 0; p < cluster; ++p)
      sum = kb.add(sum, kb.loadAt(i32, perPeer, kb.add(kb.i32(p * per), i)));
    return sum;
  };
  // 1. The group holding the k-th largest: lane l of warp 0 owns groups
  //    top-4l .. top-4l-3 (from the top).
  gatherFromPeers(kb, groups, kb.i32(0), kGroups, cluster, peerGroups, threads);
  kb.barrier();
  constexpr int64_t perLane = kGroups / 32;
  kb.ifThen(firstWarp, [&] {
    Value top = kb.sub(kb.i32(kGroups - 1), kb.mul(lane, kb.i32(perLane)));
    SmallVector<Value> counts;
    Value own = kb.i32(0);
    for (int64_t q = 0; q < perLane; ++q) {
      counts.push_back(overPeers(peerGroups, kGroups, kb.sub(top, kb.i32(q))));
      own = kb.add(own, counts.back());
    }
    Value before = kb.sub(warpInclusiveScan(kb, own, lane), own);
    Value reach = before, found = kb.i1(false);
    Value group = kb.i32(-1), above = kb.i32(0);
    for (int64_t q = 0; q < perLane; ++q) {
      Value next = kb.add(reach, counts[q]);
      Value hit = kb.andI(kb.not1(found), kb.cmp(CmpIPredicate::sge, next, k));
      group = kb.select(hit, kb.sub(top, kb.i32(q)), group);
      above = kb.select(hit, reach, above);
      found = kb.orI(found, hit);
      reach = next;
    }
    kb.ifThen(kb.andI(found, kb.cmp(CmpIPredicate::slt, before, k)), [&] {
      kb.storeAt(group, cells, kb.i32(0));
      kb.storeAt(above, cells, kb.i32(1));
    });
  });
  kb.barrier();
  Value group = kb.loadAt(i32, cells, kb.i32(0));
  Value above = kb.loadAt(i32, cells, kb.i32(1));
  // 2. The bin within it (none when the row has at most k entries).
  Value some = kb.cmp(CmpIPredicate::sge, group, kb.i32(0));
  Value firstBin = kb.mul(kb.maxS(group, kb.i32(0)), kb.i32(kGroupBins));
  gatherFromPeers(kb, bins, firstBin, kGroupBins, cluster, peerBins, threads);
  kb.barrier();
  kb.ifThen(kb.andI(some, firstWarp), [&] {
    Value j = kb.sub(kb.i32(kGroupBins - 1), lane);
    Value count = overPeers(peerBins, kGroupBins, j);
    Value reach = kb.add(above, warpInclusiveScan(kb, count, lane));
    Value hit = kb.andI(kb.cmp(CmpIPredicate::sge, reach, k),
                        kb.cmp(CmpIPredicate::slt, kb.sub(reach, count), k));
    kb.ifThen(hit, [&] {
      kb.storeAt(kb.add(firstBin, j), cells, kb.i32(2));
      kb.storeAt(kb.sub(reach, count), cells, kb.i32(3));
      kb.storeAt(count, cells, kb.i32(4));
    });
  });
  kb.barrier();
  auto cell = [&](int64_t c) {
    return kb.select(some, kb.loadAt(i32, cells, kb.i32(c)), kb.i32(0));
  };
  return {cell(2), cell(3), cell(4)};
}

std::pair<Value, Value> ClusterHistogram::candidatesBefore(KernelBuilder &kb,
                                                           Value bin,
                                                           Value rank) const {
  Type i32 = kb.i32T();
  Value lane = kb.laneId(), warp = kb.warpId();
  // Warp q counts peer q's entries at or above the bin: whole groups above
  // the bin's group, then the bins of its group from the bin up (with no
  // threshold group, every group).
  Value group = kb.loadAt(i32, cells, kb.i32(0));
  kb.ifThen(kb.cmp(CmpIPredicate::slt, warp, kb.i32(cluster)), [&] {
    constexpr int64_t perLane = kGroups / 32;
    Value sum = kb.i32(0);
    for (int64_t q = 0; q < perLane; ++q) {
      Value g = kb.add(kb.mul(lane, kb.i32(perLane)), kb.i32(q));
      Value v =
          kb.loadAt(i32, peerGroups, kb.add(kb.mul(warp, kb.i32(kGroups)), g));
      sum = kb.add(
          sum, kb.select(kb.cmp(CmpIPredicate::sgt, g, group), v, kb.i32(0)));
    }
    Value b =
        kb.add(kb.mul(kb.maxS(group, kb.i32(0)), kb.i32(kGroupBins)), lane);
    Value inGroup = kb.andI(kb.cmp(CmpIPredicate::sge, group, kb.i32(0)),
                            kb.cmp(CmpIPredicate::sge, b, bin));
    Value v = kb.loadAt(i32, peerBins,
                        kb.add(kb.mul(warp, kb.i32(kGroupBins)), lane));
    sum = warpSum(kb, kb.add(sum, kb.select(inGroup, v, kb.i32(0))));
    kb.ifThen(kb.cmp(CmpIPredicate::eq, lane, kb.i32(0)),
              [&] { kb.storeAt(sum, peerCounts, warp); });
  });
  kb.barrier();
  Value before = kb.i32(0), total = kb.i32(0);
  for (int64_t p = 0; p < cluster; ++p) {
    Value c = kb.loadAt(i32, peerCounts, kb.i32(p));
    before =
        kb.add(before, kb.select(kb.cmp(CmpIPredicate::slt, kb.i32(p), rank), c,
                                 kb.i32(0)));
    total = kb.add(total, c);
  }
  return {before, total};
}

/// Calls `body` with this thread's entries of each chunk of `[first, last)`
/// (chunks of 16 * `threads`, see loadChunk); every thread of the CTA makes
/// the same calls.
void forEachChunk(KernelBuilder &kb, Value scores, const RowView &row,
                  bool rowsAligned, Value first, Value last, int64_t threads,
                  function_ref<void(ArrayRef<ChunkEntry>)> body) {
  kb.forLoop(first, kb.maxS(first, last), kb.i32(16 * threads), [&](Value s) {
    Value end = kb.minS(kb.add(s, kb.i32(16 * threads)), last);
    body(loadChunk(kb, scores, row, rowsAligned, s, end, threads));
  });
}

} // namespace

int64_t mlir::spin::gpu_codegen::topKMergeSlice(int64_t k, int64_t cluster) {
  return static_cast<int64_t>(
      llvm::PowerOf2Ceil(llvm::divideCeil(2 * k, cluster)));
}

namespace {

/// One top-K kernel while it is built: the spec's sizes, the kernel's
/// parameters, the row and the cluster-wide values and shared arrays its
/// phases share. `build` runs the phases in the order of the generated
/// code, numbered as in the file's and Kernels.h's description.
class TopKKernel : KernelPhases<TopKKernelSpec> {
public:
  TopKKernel(OpBuilder &b, Location loc, gpu::GPUModuleOp module,
             const TopKKernelSpec &spec)
      : KernelPhases(b, loc, module, spec),
        i32(kb.i32T()), i64(kb.i64T()), threads(spec.threads) {}
  LaunchShape build();

private:
  void declareKernel();
  void allocateShared();
  void histogramShare();
  void countEntries(ArrayRef<ChunkEntry> entries);
  void collectCandidates();
  void collectChunk(ArrayRef<ChunkEntry> entries);
  void writeResult(Value i, Value used, Value entry);
  void mergeRanks();
  Value mergeCell(Type type, int64_t bytes, Value i);
  void sortOwnSlice(Value mineFirst, Value mineCount);
  void copyPeerSlices();
  void placeByMergeRank(Value mineCount);
  void leaderSelect();
  Value stageCandidates(Value fromList);
  Value candidate(Value i);
  std::pair<Value, Value> keyOf(Value i);
  Value entryOf(Value i);
  void gatherWinners(const RadixSelection &selection, Value n);

  Type i32, i64;
  const int64_t threads;
  /// Leader-staged candidates, the words of the arena (the histogram, then
  /// staged candidates or sorted slices) and the list's size (a power of
  /// two); with merge ranks, the slice size and the arena's slice slots.
  int64_t staged = 0, arenaWords = 0, listSize = 0, slice = 0, arenaSlots = 0;
  bool aligned = false;

  gpu::GPUFuncOp f;
  Value scores, lengths, blocks, counts, candidates, out;
  RowView row;
  Value rank, tid, isLeader;
  Value arena, takenCell, list;
  ClusterHistogram hist;
  /// This CTA's share [first, last) of the row and, for a one-chunk share,
  /// its score vectors kept in registers since the histogram.
  Value first, last, oneChunk;
  SmallVector<Value> kept;
  ClusterHistogram::Threshold threshold;
  /// Candidates of the lower ranks, of the whole cluster, and the row's
  /// offset in the candidate buffer.
  Value candBefore, found, candBase;
  Value outBase, merged;
  /// The leader's selection input: candidates (`fromList`), staged in
  /// shared memory (`inShared`) or the whole row.
  Value fromList, inShared;
};

/// Builds the kernel, phase after phase; returns its launch shape.
LaunchShape TopKKernel::build() {
  OpBuilder::InsertionGuard guard(b);
  assert(spec.cluster >= 1 && spec.cluster <= kMaxPortableCluster &&
         "a portable cluster holds at most 8 CTAs");
  assert(spec.threads % 32 == 0 && spec.threads / 32 >= spec.cluster &&
         "one warp per peer counts its candidates");
  declareKernel();
  {
    // The row's length (an input) or selected-block count (the select
    // kernel's, two launches back) is read while the scoring kernel ends.
    OpBuilder::InsertionGuard beforeWait(b);
    setInsertionBeforeGridWait(b, f);
    row = rowView(kb, spec, kb.blockIdY(), lengths, counts);
  }
  rank = kb.blockIdX();
  tid = kb.threadIdX();
  isLeader = kb.cmp(CmpIPredicate::eq, rank, kb.i32(0));
  aligned = spec.width % 4 == 0;
  allocateShared();

  histogramShare();
  // 2. The row's threshold bin, in every CTA.
  threshold = hist.threshold(kb, threads, kb.i32(spec.k));
  collectCandidates();

  outBase = kb.mul(row.rowId, kb.i32(spec.k));
  // The leader's list of winners (its sort), a power of two.
  listSize = static_cast<int64_t>(llvm::PowerOf2Ceil(spec.k));
  list = kb.sharedArray(spec.name + "_list", i64, listSize);
  merged = kb.i1(false);
  if (spec.mergeRanks)
    mergeRanks();
  kb.ifThen(kb.andI(isLeader, kb.not1(merged)), [&] { leaderSelect(); });

  LaunchShape shape;
  shape.grid = {spec.cluster, spec.batch * spec.rows, 1};
  shape.blockThreads = threads;
  return shape;
}

/// The `gpu.func` (a cluster of `cluster` CTAs per row) and its
/// parameters (the block list and counts for sparse rows).
void TopKKernel::declareKernel() {
  Type ptr = kb.ptrT(Global);
  SmallVector<Type> params = {ptr, ptr};
  if (spec.sparse)
    params.append({ptr, ptr});
  params.append({ptr, ptr});
  f = beginKernel(b, loc, module, spec.name, params, threads);
  // At most 64 registers: two CTAs of 512 threads fit an SM, so that a
  // cluster of 8 finds room next to other kernels.
  f->setAttr(NVVM::NVVMDialect::getMaxnregAttrName(),
             b.getI32IntegerAttr(
                 static_cast<int32_t>(std::min<int64_t>(64, 65536 / threads))));
  f->setAttr(
      NVVM::NVVMDialect::getClusterDimAttrName(),
      b.getDenseI32ArrayAttr({static_cast<int32_t>(spec.cluster), 1, 1}));
  unsigned a = 0;
  scores = f.getArgument(a++), lengths = f.getArgument(a++);
  blocks = spec.sparse ? f.getArgument(a++) : Value();
  counts = spec.sparse ? f.getArgument(a++) : Value();
  candidates = f.getArgument(a++), out = f.getArgument(a++);
}

/// Shared memory: the CTA's histogram, which the leader (rank 0) reuses
/// for its staged candidates once every CTA has read it, and the counter
/// that places the CTA's candidates.
void TopKKernel::allocateShared() {
  const int64_t listBytes =
      8 * static_cast<int64_t>(llvm::PowerOf2Ceil(spec.k));
  staged =
      std::min<int64_t>(spec.candidates, (kStaticSharedBudget - listBytes) / 8 /
                                             threads * threads);
  arenaWords = std::max<int64_t>(kHistBins, 2 * staged);
  arena = kb.sharedArray(spec.name + "_arena", i32, arenaWords);
  takenCell = kb.sharedArray(spec.name + "_taken", i32, 1);
}

/// 1. Each CTA's histogram of the top 12 bits of its share (the row's
/// entries split evenly over the cluster, in multiples of 4), then the
/// group sums and a cluster barrier, after which peers may read them. A
/// share of one chunk (SPIN's rows after warm-up, dense rows up to 16
/// entries a thread) keeps its scores in registers for step 3 instead of
/// reading them again.
void TopKKernel::histogramShare() {
  hist = ClusterHistogram::begin(kb, spec.name + "_hist", arena, spec.cluster,
                                 threads);
  kb.ifThen(kb.cmp(CmpIPredicate::eq, tid, kb.i32(0)),
            [&] { kb.storeAt(kb.i32(0), takenCell, kb.i32(0)); });
  Value share = kb.andI(kb.add(kb.divU(kb.add(row.n, kb.i32(spec.cluster - 1)),
                                       kb.i32(spec.cluster)),
                               kb.i32(3)),
                        kb.i32(~3));
  first = kb.mul(rank, share);
  last = kb.minS(kb.add(first, share), row.n);
  oneChunk =
      kb.cmp(CmpIPredicate::sle, kb.sub(last, first), kb.i32(16 * threads));
  Type vec = kb.vecT(kb.f32T(), 4);
  kept = kb.ifThenElse(
      SmallVector<Type>(4, vec), oneChunk,
      [&]() -> SmallVector<Value> {
        SmallVector<Value, 4> vectors =
            loadChunkVectors(kb, scores, row, aligned, first, last, threads);
        countEntries(chunkEntries(kb, vectors, first, last, threads));
        return SmallVector<Value>(vectors.begin(), vectors.end());
      },
      [&]() -> SmallVector<Value> {
        forEachChunk(kb, scores, row, aligned, first, last, threads,
                     [&](ArrayRef<ChunkEntry> e) { countEntries(e); });
        return SmallVector<Value>(
            4, kb.splat(vec, FloatAttr::get(kb.f32T(), 0.0)));
      });
  hist.sumGroups(kb, threads);
  kb.clusterSync();
}

/// The eligible ones of a thread's entries into the histogram.
void TopKKernel::countEntries(ArrayRef<ChunkEntry> entries) {
  for (const ChunkEntry &e : entries)
    kb.ifThen(e.eligible, [&] { hist.count(kb, e.key); });
}

/// 3. The candidates, entries at or above the threshold bin, as (key,
/// entry) into the row's candidate buffer. Each CTA's follow those of the
/// lower ranks (their counts come from the histograms). Ends with a
/// cluster barrier: after it no CTA reads another's shared memory, and
/// the leader sees every candidate.
void TopKKernel::collectCandidates() {
  std::tie(candBefore, found) = hist.candidatesBefore(kb, threshold.bin, rank);
  candBase = kb.mul(kb.extS64(row.rowId), kb.i64(spec.candidates));
  kb.ifThenElse(
      {}, oneChunk,
      [&]() -> SmallVector<Value> {
        collectChunk(chunkEntries(kb, kept, first, last, threads));
        return {};
      },
      [&]() -> SmallVector<Value> {
        forEachChunk(kb, scores, row, aligned, first, last, threads,
                     [&](ArrayRef<ChunkEntry> e) { collectChunk(e); });
        return {};
      });
  kb.clusterSync();
}

/// A thread's candidates of one chunk: one atomic per warp and chunk
/// places them, each thread's after those of the lanes below it.
void TopKKernel::collectChunk(ArrayRef<ChunkEntry> entries) {
  SmallVector<Value, 16> wanted;
  Value mine = kb.i32(0);
  for (const ChunkEntry &e : entries) {
    wanted.push_back(kb.andI(
        e.eligible, kb.cmp(CmpIPredicate::uge,
                           kb.shrU(e.key, kb.i32(kBinShift)), threshold.bin)));
    mine = kb.add(mine, kb.zext(wanted.back(), i32));
  }
  Value at = kb.add(candBefore, warpReserveCount(kb, takenCell, mine));
  for (auto [e, w] : llvm::zip(entries, wanted)) {
    kb.ifThen(
        kb.andI(w, kb.cmp(CmpIPredicate::slt, at, kb.i32(spec.candidates))),
        [&] {
          Value packed = kb.orI(kb.shl(kb.extU64(e.key), kb.i64(32)),
                                kb.extU64(e.i));
          kb.storeAt(packed, candidates, kb.add(candBase, kb.extS64(at)));
        });
    at = kb.add(at, kb.zext(w, i32));
  }
}

/// Place `i` of the row's result: the slot of `entry` (through the block
/// list for sparse rows), or -1 when unused.
void TopKKernel::writeResult(Value i, Value used, Value entry) {
  Value slot = entry;
  if (spec.sparse) {
    Value bs = kb.i32(spec.blockSize);
    slot = kb.ifThenElse(
        {i32}, used,
        [&]() -> SmallVector<Value> {
          Value block =
              kb.loadAt(i32, blocks,
                        kb.add(kb.mul(row.request, kb.i32(spec.maxBlocks)),
                               kb.divU(entry, bs)),
                        true);
          return {kb.add(kb.mul(block, bs), kb.remU(entry, bs))};
        },
        [&]() -> SmallVector<Value> { return {kb.i32(-1)}; })[0];
  }
  kb.storeAt(kb.select(used, slot, kb.i32(-1)), out, kb.add(outBase, i));
}

/// 4a. Merge ranks. The candidate list splits into `cluster` even slices
/// of at most `slice`; each CTA sorts one in shared memory by (score desc,
/// entry asc) as (~key << 32 | entry), padded with all ones, which sort
/// last. After a cluster barrier each CTA copies every sorted slice into
/// its own shared memory (the histogram's and the list's, free now; its
/// own slice stays where its peers read it), and after a second one, which
/// also lets every CTA leave, each candidate's place in the row's order is
/// the sum over the slices of the entries before it there (its own: its
/// index). Places below K are the result. The slices split the list, not
/// the row, so candidates crowded into one CTA's share cost the same.
void TopKKernel::mergeRanks() {
  slice = topKMergeSlice(spec.k, spec.cluster);
  arenaSlots = arenaWords * 4 / (slice * 8);
  assert(spec.cluster >= 2 && slice >= 2 && slice <= threads &&
         slice * spec.cluster <= spec.candidates &&
         arenaSlots + listSize / slice >= spec.cluster + 1 &&
         "merge ranks need a slice per thread and room for every slice");
  merged = kb.cmp(CmpIPredicate::sle, found, kb.i32(slice * spec.cluster));
  kb.ifThen(merged, [&] {
    Value per = kb.divU(kb.add(found, kb.i32(spec.cluster - 1)),
                        kb.i32(spec.cluster));
    Value mineFirst = kb.mul(rank, per);
    Value mineCount =
        kb.minS(kb.maxS(kb.sub(found, mineFirst), kb.i32(0)), per);
    sortOwnSlice(mineFirst, mineCount);
    kb.clusterSync();
    copyPeerSlices();
    // No CTA reads a peer's shared memory after this.
    kb.clusterSync();
    placeByMergeRank(mineCount);
    // Places past the candidates (a row with fewer than K) are unused.
    kb.ifThen(isLeader, [&] {
      kb.forLoop(kb.add(kb.minS(found, kb.i32(spec.k)), tid), kb.i32(spec.k),
                 kb.i32(threads),
                 [&](Value i) { writeResult(i, kb.i1(false), kb.i32(0)); });
    });
  });
}

/// Slot 0 holds the CTA's own slice; slot q + 1 the copy of rank q's.
/// Slots [0, arenaSlots) lie in the arena, the others in the list: this is
/// element `i` of type `type` (of `bytes` bytes) counted over the slots.
Value TopKKernel::mergeCell(Type type, int64_t bytes, Value i) {
  const int64_t arenaCells = arenaSlots * slice * 8 / bytes;
  return kb.select(kb.cmp(CmpIPredicate::slt, i, kb.i32(arenaCells)),
                   kb.gep(arena, type, i),
                   kb.gep(list, type, kb.sub(i, kb.i32(arenaCells))));
}

/// The CTA's slice [mineFirst, mineFirst + mineCount) of the candidates,
/// as (~key << 32 | entry) padded with all ones, sorted in the arena.
void TopKKernel::sortOwnSlice(Value mineFirst, Value mineCount) {
  Value flip = kb.i64(static_cast<int64_t>(0xffffffff00000000ULL));
  forEachThreadStrided(kb, kb.i32(slice), threads, [&](Value t) {
    Value packed = kb.ifThenElse(
        {i64}, kb.cmp(CmpIPredicate::slt, t, mineCount),
        [&]() -> SmallVector<Value> {
          Value c =
              kb.loadAt(i64, candidates,
                        kb.add(candBase, kb.extS64(kb.add(mineFirst, t))));
          return {kb.xorI(c, flip)};
        },
        [&]() -> SmallVector<Value> { return {kb.i64(-1)}; })[0];
    kb.storeAt(packed, arena, t);
  });
  kb.barrier();
  bitonicSortU64(kb, arena, slice, threads);
}

/// Every peer's sorted slice into this CTA's merge slots (after a cluster
/// barrier); every thread issues all its 16-byte copies before it stores
/// any, so the remote reads overlap.
void TopKKernel::copyPeerSlices() {
  Type vec = kb.vecT(i64, 2);
  const int64_t perPeer = slice / 2, total = spec.cluster * perPeer;
  struct Copy {
    Value value, dst, inRange;
  };
  SmallVector<Copy> copies;
  for (int64_t j = 0; j < llvm::divideCeilSigned(total, threads); ++j) {
    Value v = kb.add(tid, kb.i32(j * threads));
    Value inRange = kb.cmp(CmpIPredicate::slt, v, kb.i32(total));
    Value vc = kb.minS(v, kb.i32(total - 1));
    Value q = kb.divU(vc, kb.i32(perPeer));
    Value at = kb.remU(vc, kb.i32(perPeer));
    Value value = kb.load(vec, kb.gep(kb.clusterPeer(arena, q), vec, at), 16);
    Value dst = mergeCell(
        vec, 16, kb.add(kb.mul(kb.add(q, kb.i32(1)), kb.i32(perPeer)), at));
    copies.push_back({value, dst, inRange});
  }
  for (const Copy &c : copies) {
    if (total % threads == 0)
      kb.store(c.value, c.dst, 16);
    else
      kb.ifThen(c.inRange, [&] { kb.store(c.value, c.dst, 16); });
  }
  kb.barrier();
}

/// Each of the CTA's own candidates' place in the row's order: the sum
/// over the sorted slices of their entries before it, each by a binary
/// search over the padded slice (whose padding never is before it).
void TopKKernel::placeByMergeRank(Value mineCount) {
  forEachThreadStrided(kb, mineCount, threads, [&](Value t) {
    Value x = kb.loadAt(i64, arena, t);
    Value place = kb.i32(0);
    for (int64_t q = 0; q < spec.cluster; ++q) {
      Value sorted = mergeCell(i64, 8, kb.i32((q + 1) * slice));
      Value at = kb.i32(0);
      for (int64_t step = slice / 2; step >= 1; step /= 2) {
        Value probe = kb.loadAt(i64, sorted, kb.add(at, kb.i32(step - 1)));
        at = kb.select(kb.cmp(CmpIPredicate::ult, probe, x),
                       kb.add(at, kb.i32(step)), at);
      }
      Value probe = kb.loadAt(i64, sorted, at);
      at = kb.select(kb.cmp(CmpIPredicate::ult, probe, x),
                     kb.add(at, kb.i32(1)), at);
      place = kb.add(place, at);
    }
    kb.ifThen(kb.cmp(CmpIPredicate::slt, place, kb.i32(spec.k)),
              [&] { writeResult(place, kb.i1(true), kb.trunc32(x)); });
  });
}

/// 4b. Without merge ranks (or when the candidates overflow the slices),
/// the leader radix-selects the K largest of the candidates when they all
/// fit in their buffer, else of the whole row, sorts the winners and
/// writes them.
void TopKKernel::leaderSelect() {
  fromList = kb.cmp(CmpIPredicate::sle, found, kb.i32(spec.candidates));
  Value n = kb.select(fromList, found, row.n);
  inShared = stageCandidates(fromList);
  // The radix passes start below the threshold's 12 bits.
  KnownBin known{32 - kBinShift, threshold.bin, threshold.above,
                 threshold.inBin,
                 kb.cmp(CmpIPredicate::sle, found, kb.i32(spec.k))};
  RadixSelection selection = selectLargest(
      kb, spec.name + "_select", n, kb.i32(spec.k), spec.threads,
      [&](Value i) { return keyOf(i); }, [&](Value i) { return entryOf(i); },
      known);
  gatherWinners(selection, n);
  bitonicSortU64(kb, list, listSize, spec.threads);
  forEachThreadStrided(kb, kb.i32(spec.k), spec.threads, [&](Value i) {
    Value packed = kb.loadAt(i64, list, i);
    writeResult(i, kb.cmp(CmpIPredicate::ne, packed, kb.i64(-1)),
                kb.trunc32(packed));
  });
}

/// A candidate list that fits is copied to shared memory (the histogram's,
/// free now) first: the radix passes and the gather then read it without a
/// trip to L2 each. Returns whether it was.
Value TopKKernel::stageCandidates(Value fromList) {
  Value staging = kb.i1(false);
  if (staged > 0) {
    staging =
        kb.andI(fromList, kb.cmp(CmpIPredicate::sle, found, kb.i32(staged)));
    kb.ifThen(staging, [&] {
      forEachThreadStrided(kb, found, threads, [&](Value i) {
        kb.storeAt(kb.loadAt(i64, candidates, kb.add(candBase, kb.extS64(i))),
                   arena, i);
      });
    });
    kb.barrier();
  }
  return staging;
}

/// Candidate `i` (key << 32 | entry), from shared memory when staged.
Value TopKKernel::candidate(Value i) {
  if (staged == 0)
    return kb.loadAt(i64, candidates, kb.add(candBase, kb.extS64(i)));
  return kb.ifThenElse(
      {i64}, inShared,
      [&]() -> SmallVector<Value> { return {kb.loadAt(i64, arena, i)}; },
      [&]() -> SmallVector<Value> {
        return {kb.loadAt(i64, candidates, kb.add(candBase, kb.extS64(i)))};
      })[0];
}

/// Whether element `i` of the selection input is eligible, and its key.
std::pair<Value, Value> TopKKernel::keyOf(Value i) {
  SmallVector<Value> kv = kb.ifThenElse(
      {kb.i1T(), i32, i32}, fromList,
      [&]() -> SmallVector<Value> {
        Value packed = candidate(i);
        return {kb.i1(true), kb.trunc32(kb.shrU(packed, kb.i64(32))),
                kb.trunc32(packed)};
      },
      [&]() -> SmallVector<Value> {
        auto [eligible, key] = scoreKey(kb, scores, row, i);
        return {eligible, key, i};
      });
  return {kv[0], kv[1]};
}

/// The row entry of element `i` of the selection input.
Value TopKKernel::entryOf(Value i) {
  return kb.ifThenElse(
      {i32}, fromList,
      [&]() -> SmallVector<Value> { return {kb.trunc32(candidate(i))}; },
      [&]() -> SmallVector<Value> { return {i}; })[0];
}

/// The selected winners into the list as (~key << 32 | entry), unused
/// cells all ones (they sort last); one counter atomic per warp places
/// them.
void TopKKernel::gatherWinners(const RadixSelection &selection, Value n) {
  Value count = kb.sharedArray(spec.name + "_count", i32, 1);
  forEachThreadStrided(kb, kb.i32(listSize), spec.threads,
                       [&](Value i) { kb.storeAt(kb.i64(-1), list, i); });
  kb.ifThen(kb.cmp(CmpIPredicate::eq, kb.threadIdX(), kb.i32(0)),
            [&] { kb.storeAt(kb.i32(0), count, kb.i32(0)); });
  kb.barrier();
  forEachThreadStridedInWarps(
      kb, n, spec.threads, [&](Value i, Value inRange) {
        SmallVector<Value> kv = kb.ifThenElse(
            {kb.i1T(), i32, i32}, inRange,
            [&]() -> SmallVector<Value> {
              auto [eligible, key] = keyOf(i);
              Value entry = entryOf(i);
              return {isSelected(kb, selection, eligible, key, entry), key,
                      entry};
            },
            [&]() -> SmallVector<Value> {
              return {kb.i1(false), kb.i32(0), kb.i32(0)};
            });
        Value at = warpReserve(kb, count, kv[0]);
        kb.ifThen(
            kb.andI(kv[0], kb.cmp(CmpIPredicate::slt, at, kb.i32(spec.k))),
            [&] {
              Value packed = kb.orI(
                  kb.shl(kb.extU64(kb.xorI(kv[1], kb.i32(-1))), kb.i64(32)),
                  kb.extU64(kv[2]));
              kb.storeAt(packed, list, at);
            });
      });
  kb.barrier();
}

} // namespace

LaunchShape
mlir::spin::gpu_codegen::buildTopKKernel(OpBuilder &b, Location loc,
                                         gpu::GPUModuleOp module,
                                         const TopKKernelSpec &spec) {
  return TopKKernel(b, loc, module, spec).build();
}
