//===- TopKKernel.cpp - top-K of scored rows ------------------------------===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
// Scores become order-preserving u32 keys (NaN is never eligible). A
// histogram of their top 12 bits, built by many CTAs per row, gives the bin
// of the K-th largest; the entries at or above it are the candidates, which
// one CTA per row radix-selects (ties to the lower entry: entries are in slot
// order) and sorts by (score desc, entry asc) with a bitonic sort.
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

/// Calls `body(i, eligible, key)` for every entry `i` of `[first, last)`
/// (a chunk of at most 16 * `threads` entries): each thread loads its 16
/// entries as four 16-byte vectors (`rowsAligned`: rows start at a multiple
/// of 4 entries) before it looks at any, so the loads
/// overlap. All threads call `body` 16 times (`eligible` is false outside
/// the range), so warp-wide operations inside it are safe.
void forEachChunkEntry(KernelBuilder &kb, Value scores, const RowView &row,
                       bool rowsAligned, Value first, Value last,
                       int64_t threads,
                       function_ref<void(Value, Value, Value)> body) {
  Type f32 = kb.f32T(), vec = kb.vecT(f32, 4);
  SmallVector<Value> vectors, starts;
  for (int64_t v = 0; v < 4; ++v) {
    Value start = kb.add(first, kb.add(kb.mul(kb.threadIdX(), kb.i32(4)),
                                       kb.i32(v * threads * 4)));
    starts.push_back(start);
    vectors.push_back(kb.ifThenElse(
        {vec}, kb.cmp(CmpIPredicate::slt, start, last),
        [&]() -> SmallVector<Value> {
          Value at = kb.gep(scores, f32, kb.add(row.rowBase, start));
          if (rowsAligned)
            return {kb.load(vec, at, 16, true)};
          // Rows of a width that is not a multiple of 4: scalar loads that
          // stay inside the row.
          Value out = LLVM::UndefOp::create(kb.builder(), kb.location(), vec);
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
            out = LLVM::InsertElementOp::create(kb.builder(), kb.location(),
                                                out, z, kb.i32(e));
          }
          return {out};
        },
        [&]() -> SmallVector<Value> {
          // Past the chunk: NaN, never eligible.
          return {arith::ConstantOp::create(
              kb.builder(), kb.location(),
              DenseElementsAttr::get(
                  cast<ShapedType>(vec),
                  llvm::APFloat::getQNaN(llvm::APFloat::IEEEsingle())))};
        })[0]);
  }
  for (int64_t v = 0; v < 4; ++v)
    for (int64_t e = 0; e < 4; ++e) {
      Value i = kb.add(starts[v], kb.i32(e));
      Value z = kb.extract(vectors[v], e);
      Value eligible = kb.andI(kb.cmp(CmpIPredicate::slt, i, last),
                               kb.cmpF(CmpFPredicate::ORD, z, z));
      body(i, eligible, kb.orderedKey(z));
    }
}

/// The histogram bin holding the k-th largest key (counting from the top),
/// or 0 when the row has at most k eligible entries. `countsAt(word)` gives
/// the counts of bins [word, word + 4) as a vector of four i32. `bins` /
/// `threads` must be a multiple of 4. All threads of the CTA must call it;
/// every thread gets the same value.
Value thresholdBin(KernelBuilder &kb, StringRef prefix,
                   function_ref<Value(Value)> countsAt, int64_t bins,
                   int64_t threads, Value k) {
  Type i32 = kb.i32T();
  int64_t per = bins / threads;
  Value tid = kb.threadIdX();
  Value cell = kb.sharedArray((prefix + "_bin").str(), i32, 1);
  kb.ifThen(kb.cmp(CmpIPredicate::eq, tid, kb.i32(0)),
            [&] { kb.storeAt(kb.i32(0), cell, kb.i32(0)); });
  // Thread t owns the bins top, top-1, ..., top-per+1 (top = bins-1-per*t),
  // contiguous: read as vectors of four.
  Value top = kb.sub(kb.i32(bins - 1), kb.mul(tid, kb.i32(per)));
  Value lowest = kb.sub(top, kb.i32(per - 1));
  SmallVector<Value> ascending;
  for (int64_t v = 0; v < per / 4; ++v) {
    Value vec = countsAt(kb.add(lowest, kb.i32(4 * v)));
    for (int64_t e = 0; e < 4; ++e)
      ascending.push_back(kb.extract(vec, e));
  }
  SmallVector<Value> counts;
  Value own = kb.i32(0);
  for (int64_t q = 0; q < per; ++q) {
    counts.push_back(ascending[per - 1 - q]);
    own = kb.add(own, counts.back());
  }
  auto [before, total] = blockExclusiveScan(kb, prefix, own, threads);
  (void)total;
  Value reach = before, found = kb.i1(false), bin = kb.i32(0);
  for (int64_t q = 0; q < per; ++q) {
    reach = kb.add(reach, counts[q]);
    Value hit = kb.andI(kb.not1(found), kb.cmp(CmpIPredicate::sge, reach, k));
    bin = kb.select(hit, kb.sub(top, kb.i32(q)), bin);
    found = kb.orI(found, hit);
  }
  Value crossing = kb.andI(found, kb.cmp(CmpIPredicate::slt, before, k));
  kb.ifThen(crossing, [&] { kb.storeAt(bin, cell, kb.i32(0)); });
  kb.barrier();
  Value result = kb.loadAt(i32, cell, kb.i32(0));
  kb.barrier();
  return result;
}

/// Calls `body(i, eligible, key)` for every entry of `[first, last)` in
/// chunks of 16 * `threads` (see forEachChunkEntry); `chunkDone` runs after
/// each chunk's entries.
void forEachEntry(KernelBuilder &kb, Value scores, const RowView &row,
                  bool rowsAligned, Value first, Value last, int64_t threads,
                  function_ref<void(Value, Value, Value)> body) {
  kb.forLoop(first, kb.maxS(first, last), kb.i32(16 * threads), [&](Value s) {
    Value end = kb.minS(kb.add(s, kb.i32(16 * threads)), last);
    forEachChunkEntry(kb, scores, row, rowsAligned, s, end, threads, body);
  });
}

} // namespace

LaunchShape
mlir::spin::gpu_codegen::buildTopKKernel(OpBuilder &b, Location loc,
                                         gpu::GPUModuleOp module,
                                         const TopKKernelSpec &spec) {
  OpBuilder::InsertionGuard guard(b);
  KernelBuilder kb(b, loc, module);
  Type ptr = kb.ptrT(Global), i32 = kb.i32T(), i64 = kb.i64T();
  assert(spec.cluster >= 1 && spec.cluster <= 8 &&
         "a portable cluster holds at most 8 CTAs");
  assert(kHistBins % (4 * spec.threads) == 0 &&
         "each thread owns a multiple of four histogram bins");
  const int64_t threads = spec.threads;

  SmallVector<Type> params = {ptr, ptr};
  if (spec.sparse)
    params.append({ptr, ptr});
  params.append({ptr, ptr});
  gpu::GPUFuncOp f = beginKernel(b, loc, module, spec.name, params, threads);
  // One CTA per SM is all a row's cluster needs: let ptxas use the
  // registers that leaves (it would otherwise aim at two CTAs and spill in
  // the sort).
  f->setAttr(NVVM::NVVMDialect::getMaxnregAttrName(),
             b.getI32IntegerAttr(static_cast<int32_t>(
                 std::min<int64_t>(255, 65536 / threads))));
  f->setAttr(
      NVVM::NVVMDialect::getClusterDimAttrName(),
      b.getDenseI32ArrayAttr({static_cast<int32_t>(spec.cluster), 1, 1}));
  unsigned a = 0;
  Value scores = f.getArgument(a++), lengths = f.getArgument(a++);
  Value blocks = spec.sparse ? f.getArgument(a++) : Value();
  Value counts = spec.sparse ? f.getArgument(a++) : Value();
  Value candidates = f.getArgument(a++), out = f.getArgument(a++);
  RowView row = rowView(kb, spec, kb.blockIdY(), lengths, counts);
  Value rank = kb.blockIdX();
  Value tid = kb.threadIdX();
  Value isLeader = kb.cmp(CmpIPredicate::eq, rank, kb.i32(0));
  const bool aligned = spec.width % 4 == 0;

  // Shared memory: the CTA's histogram, which the leader (rank 0) reuses
  // for its staged candidates once every CTA has read it, and the leader's
  // candidate counter.
  const int64_t listBytes =
      8 * static_cast<int64_t>(llvm::PowerOf2Ceil(spec.k));
  const int64_t staged =
      std::min<int64_t>(spec.candidates, (kStaticSharedBudget - listBytes) / 8 /
                                             threads * threads);
  const int64_t arenaWords = std::max<int64_t>(kHistBins, 2 * staged);
  Value arena = kb.sharedArray(spec.name + "_arena", i32, arenaWords);
  Value foundCell = kb.sharedArray(spec.name + "_found", i32, 1);

  //===--- 1. each CTA's histogram of the top 12 bits of its share
  //---------===//
  Type vec4 = kb.vecT(i32, 4);
  Value zeros = arith::ConstantOp::create(
      b, loc,
      DenseElementsAttr::get(cast<ShapedType>(vec4), b.getI32IntegerAttr(0)));
  forEachThreadStrided(kb, kb.i32(kHistBins / 4), threads, [&](Value i) {
    kb.store(zeros, kb.gep(arena, vec4, i), 16);
  });
  kb.ifThen(kb.cmp(CmpIPredicate::eq, tid, kb.i32(0)),
            [&] { kb.storeAt(kb.i32(0), foundCell, kb.i32(0)); });
  kb.barrier();
  // The row's entries split evenly over the cluster (in multiples of 4).
  Value share = kb.andI(kb.add(kb.divU(kb.add(row.n, kb.i32(spec.cluster - 1)),
                                       kb.i32(spec.cluster)),
                               kb.i32(3)),
                        kb.i32(~3));
  Value first = kb.mul(rank, share);
  Value last = kb.minS(kb.add(first, share), row.n);
  forEachEntry(kb, scores, row, aligned, first, last, threads,
               [&](Value, Value eligible, Value key) {
                 kb.ifThen(eligible, [&] {
                   kb.atomicAdd(
                       kb.gep(arena, i32, kb.shrU(key, kb.i32(kBinShift))),
                       kb.i32(1));
                 });
               });
  kb.clusterSync();

  //===--- 2. the row's threshold bin, in every CTA
  //------------------------===//
  SmallVector<Value> peers;
  for (int64_t r = 0; r < spec.cluster; ++r)
    peers.push_back(kb.clusterPeer(arena, kb.i32(r)));
  Value bin = thresholdBin(
      kb, spec.name + "_threshold",
      [&](Value word) {
        Value sum = kb.load(vec4, kb.gep(peers[0], i32, word), 16);
        for (int64_t r = 1; r < spec.cluster; ++r)
          sum = kb.add(sum, kb.load(vec4, kb.gep(peers[r], i32, word), 16));
        return sum;
      },
      kHistBins, threads, kb.i32(spec.k));

  //===--- 3. candidates at or above it, counted in the leader
  //--------------===//
  Value leaderFound = kb.clusterPeer(foundCell, kb.i32(0));
  Value candBase = kb.mul(kb.extS64(row.rowId), kb.i64(spec.candidates));
  Value baseCell = kb.sharedArray(spec.name + "_base", i32, 1);
  kb.forLoop(first, kb.maxS(first, last), kb.i32(16 * threads), [&](Value s) {
    Value end = kb.minS(kb.add(s, kb.i32(16 * threads)), last);
    // One counter atomic per chunk: each thread counts its candidates, a
    // block scan places them, thread 0 reserves the chunk's range.
    SmallVector<Value> wanted, keys, entries;
    forEachChunkEntry(
        kb, scores, row, aligned, s, end, threads,
        [&](Value i, Value eligible, Value key) {
          wanted.push_back(
              kb.andI(eligible, kb.cmp(CmpIPredicate::uge,
                                       kb.shrU(key, kb.i32(kBinShift)), bin)));
          keys.push_back(key);
          entries.push_back(i);
        });
    Value own = kb.i32(0);
    for (Value w : wanted)
      own = kb.add(own, kb.zext(w, i32));
    auto [before, total] =
        blockExclusiveScan(kb, spec.name + "_collect", own, threads);
    kb.ifThen(kb.andI(kb.cmp(CmpIPredicate::eq, tid, kb.i32(0)),
                      kb.cmp(CmpIPredicate::sgt, total, kb.i32(0))),
              [&] {
                kb.storeAt(kb.atomicAdd(leaderFound, total), baseCell,
                           kb.i32(0));
              });
    kb.barrier();
    Value at = kb.add(kb.loadAt(i32, baseCell, kb.i32(0)), before);
    kb.barrier();
    for (auto [w, key, i] : llvm::zip(wanted, keys, entries)) {
      Value here = at;
      kb.ifThen(
          kb.andI(w, kb.cmp(CmpIPredicate::slt, here, kb.i32(spec.candidates))),
          [&] {
            Value packed =
                kb.orI(kb.shl(kb.extU64(key), kb.i64(32)), kb.extU64(i));
            kb.storeAt(packed, candidates, kb.add(candBase, kb.extS64(here)));
          });
      at = kb.add(at, kb.zext(w, i32));
    }
  });
  // After this no CTA reads another's shared memory, and the leader sees
  // every candidate and the final count.
  kb.clusterSync();

  //===--- 4. the leader selects, sorts and writes
  //--------------------------===//
  kb.ifThen(isLeader, [&] {
    Value found = kb.loadAt(i32, foundCell, kb.i32(0));
    // Candidates when they all fit, else the whole row.
    Value fromList = kb.cmp(CmpIPredicate::sle, found, kb.i32(spec.candidates));
    Value n = kb.select(fromList, found, row.n);
    // A list that fits is copied to shared memory (the histogram's, free
    // now) first: the radix passes and the gather then read it without a
    // trip to L2 each.
    Value inShared = kb.i1(false);
    if (staged > 0) {
      inShared =
          kb.andI(fromList, kb.cmp(CmpIPredicate::sle, found, kb.i32(staged)));
      kb.ifThen(inShared, [&] {
        forEachThreadStrided(kb, found, threads, [&](Value i) {
          kb.storeAt(kb.loadAt(i64, candidates, kb.add(candBase, kb.extS64(i))),
                     arena, i);
        });
      });
      kb.barrier();
    }
    auto candidate = [&](Value i) {
      if (staged == 0)
        return kb.loadAt(i64, candidates, kb.add(candBase, kb.extS64(i)));
      return kb.ifThenElse(
          {i64}, inShared,
          [&]() -> SmallVector<Value> { return {kb.loadAt(i64, arena, i)}; },
          [&]() -> SmallVector<Value> {
            return {kb.loadAt(i64, candidates, kb.add(candBase, kb.extS64(i)))};
          })[0];
    };
    auto keyOf = [&](Value i) -> std::pair<Value, Value> {
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
    };
    auto entryOf = [&](Value i) -> Value {
      return kb.ifThenElse(
          {i32}, fromList,
          [&]() -> SmallVector<Value> { return {kb.trunc32(candidate(i))}; },
          [&]() -> SmallVector<Value> { return {i}; })[0];
    };
    RadixSelection selection =
        selectLargest(kb, spec.name + "_select", i32, n, kb.i32(spec.k),
                      spec.threads, keyOf, entryOf);

    // Gather the winners as (~key << 32 | entry); unused cells sort last.
    int64_t size = static_cast<int64_t>(llvm::PowerOf2Ceil(spec.k));
    Value list = kb.sharedArray(spec.name + "_list", i64, size);
    Value count = kb.sharedArray(spec.name + "_count", i32, 1);
    forEachThreadStrided(kb, kb.i32(size), spec.threads,
                         [&](Value i) { kb.storeAt(kb.i64(-1), list, i); });
    kb.ifThen(kb.cmp(CmpIPredicate::eq, kb.threadIdX(), kb.i32(0)),
              [&] { kb.storeAt(kb.i32(0), count, kb.i32(0)); });
    kb.barrier();
    // One counter atomic per warp places the winners.
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
    bitonicSortU64(kb, list, size, spec.threads);

    Value outBase = kb.mul(row.rowId, kb.i32(spec.k));
    forEachThreadStrided(kb, kb.i32(spec.k), spec.threads, [&](Value i) {
      Value packed = kb.loadAt(i64, list, i);
      Value used = kb.cmp(CmpIPredicate::ne, packed, kb.i64(-1));
      Value entry = kb.trunc32(packed);
      Value slot = entry;
      if (spec.sparse) {
        Value bs = kb.i32(spec.blockSize);
        slot = kb.ifThenElse(
            {i32}, used,
            [&]() -> SmallVector<Value> {
              Value block = kb.loadAt(
                  i32, blocks,
                  kb.add(kb.mul(row.request, kb.i32(spec.maxBlocks)),
                         kb.divU(entry, bs)),
                  true);
              return {kb.add(kb.mul(block, bs), kb.remU(entry, bs))};
            },
            [&]() -> SmallVector<Value> { return {kb.i32(-1)}; })[0];
      }
      kb.storeAt(kb.select(used, slot, kb.i32(-1)), out, kb.add(outBase, i));
    });
  });
  LaunchShape shape;
  shape.grid = {spec.cluster, spec.batch * spec.rows, 1};
  shape.blockThreads = threads;
  return shape;
}
