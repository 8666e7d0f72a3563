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
/// or 0 when the row has at most k eligible entries. Other CTAs built the
/// histogram with atomics: the caller orders its reads after them with an
/// acquire fence. `bins` / `threads` must be a multiple of 4 and the
/// histogram 16-byte aligned. All threads of the CTA must call it; every
/// thread gets the same value.
Value thresholdBin(KernelBuilder &kb, StringRef prefix, Value hist,
                   Value histBase, int64_t bins, int64_t threads, Value k) {
  Type i32 = kb.i32T();
  int64_t per = bins / threads;
  Value tid = kb.threadIdX();
  Value cell = kb.sharedArray((prefix + "_bin").str(), i32, 1);
  kb.ifThen(kb.cmp(CmpIPredicate::eq, tid, kb.i32(0)),
            [&] { kb.storeAt(kb.i32(0), cell, kb.i32(0)); });
  // Thread t owns the bins top, top-1, ..., top-per+1 (top = bins-1-per*t).
  Value top = kb.sub(kb.i32(bins - 1), kb.mul(tid, kb.i32(per)));
  SmallVector<Value> counts;
  Value own = kb.i32(0);
  // The owned bins are contiguous: load them as 16-byte vectors (plain
  // loads: the caller's acquire fence orders them after the atomics).
  Value lowest = kb.add(histBase, kb.sub(top, kb.i32(per - 1)));
  SmallVector<Value> ascending;
  for (int64_t v = 0; v < per / 4; ++v) {
    Value vec = kb.load(kb.vecT(i32, 4),
                        kb.gep(hist, i32, kb.add(lowest, kb.i32(4 * v))), 16);
    for (int64_t e = 0; e < 4; ++e)
      ascending.push_back(kb.extract(vec, e));
  }
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

/// A CTA's share of a row's histogram: 16-bit counters packed two to a
/// word in shared memory (a CTA counts at most `chunk` < 65536 entries).
struct PackedHistogram {
  Value words;
  /// Zeroes the counters (all threads; ends with a barrier).
  static PackedHistogram begin(KernelBuilder &kb, StringRef prefix,
                               int64_t threads);
  /// Counts the order-preserving key of one eligible score.
  void count(KernelBuilder &kb, Value key) const;
  /// All threads of every CTA of the row: adds this CTA's counts into the
  /// row's `hist` (rows x kHistBins); the row's last CTA to get here
  /// (`done`, zeroed again) writes the bin holding the K-th largest to
  /// `thresholds[rowId]`.
  void finish(KernelBuilder &kb, StringRef prefix, Value hist, Value done,
              Value thresholds, Value rowId, int64_t ctasPerRow, int64_t k,
              int64_t threads) const;
};

PackedHistogram PackedHistogram::begin(KernelBuilder &kb, StringRef prefix,
                                       int64_t threads) {
  PackedHistogram h;
  h.words = kb.sharedArray((prefix + "_bins").str(), kb.i32T(), kHistBins / 2);
  forEachThreadStrided(kb, kb.i32(kHistBins / 2), threads,
                       [&](Value i) { kb.storeAt(kb.i32(0), h.words, i); });
  kb.barrier();
  return h;
}

void PackedHistogram::count(KernelBuilder &kb, Value key) const {
  Value bin = kb.shrU(key, kb.i32(kBinShift));
  Value one = kb.shl(kb.i32(1), kb.mul(kb.andI(bin, kb.i32(1)), kb.i32(16)));
  kb.atomicAdd(kb.gep(words, kb.i32T(), kb.shrU(bin, kb.i32(1))), one);
}

void PackedHistogram::finish(KernelBuilder &kb, StringRef prefix, Value hist,
                             Value done, Value thresholds, Value rowId,
                             int64_t ctasPerRow, int64_t k,
                             int64_t threads) const {
  Type i32 = kb.i32T();
  kb.barrier();
  Value histBase = kb.mul(rowId, kb.i32(kHistBins));
  forEachThreadStrided(kb, kb.i32(kHistBins / 2), threads, [&](Value w) {
    Value pair = kb.loadAt(i32, words, w);
    kb.ifThen(kb.cmp(CmpIPredicate::ne, pair, kb.i32(0)), [&] {
      Value bin = kb.add(histBase, kb.mul(w, kb.i32(2)));
      Value low = kb.andI(pair, kb.i32(0xffff));
      Value high = kb.shrU(pair, kb.i32(16));
      kb.ifThen(kb.cmp(CmpIPredicate::ne, low, kb.i32(0)),
                [&] { kb.atomicAdd(kb.gep(hist, i32, bin), low); });
      kb.ifThen(kb.cmp(CmpIPredicate::ne, high, kb.i32(0)), [&] {
        kb.atomicAdd(kb.gep(hist, i32, kb.add(bin, kb.i32(1))), high);
      });
    });
  });
  // The row's last CTA to finish finds the bin of the K-th largest (its
  // counter is zeroed again for the next step). As in a grid barrier, one
  // thread fences for the CTA: after the barrier its release fence orders
  // every thread's histogram atomics before the counter, and the last
  // CTA's acquire fence orders the counter before the reads that follow
  // the next barrier.
  kb.barrier();
  Value lastCell = kb.sharedArray((prefix + "_last").str(), i32, 1);
  kb.ifThen(kb.cmp(CmpIPredicate::eq, kb.threadIdX(), kb.i32(0)), [&] {
    kb.fenceDevice();
    Value before = kb.atomicAdd(kb.gep(done, i32, rowId), kb.i32(1));
    Value last = kb.cmp(CmpIPredicate::eq, before, kb.i32(ctasPerRow - 1));
    kb.ifThen(last, [&] { kb.fenceDevice(); });
    kb.storeAt(kb.zext(last, i32), lastCell, kb.i32(0));
  });
  kb.barrier();
  kb.ifThen(
      kb.cmp(CmpIPredicate::ne, kb.loadAt(i32, lastCell, kb.i32(0)), kb.i32(0)),
      [&] {
        Value bin = thresholdBin(kb, (prefix + "_threshold").str(), hist,
                                 histBase, kHistBins, threads, kb.i32(k));
        kb.ifThen(kb.cmp(CmpIPredicate::eq, kb.threadIdX(), kb.i32(0)), [&] {
          kb.storeAt(bin, thresholds, rowId);
          kb.storeAt(kb.i32(0), done, rowId);
        });
      });
}

} // namespace

TopKLaunches mlir::spin::gpu_codegen::buildTopKKernels(
    OpBuilder &b, Location loc, gpu::GPUModuleOp module,
    const TopKKernelSpec &spec) {
  OpBuilder::InsertionGuard guard(b);
  KernelBuilder kb(b, loc, module);
  Type ptr = kb.ptrT(Global), i32 = kb.i32T(), i64 = kb.i64T();
  const int64_t rows = spec.batch * spec.rows, bins = spec.histBins();
  assert(bins == kHistBins && "the histogram has one bin per top-12 key");
  const int64_t small = 256;
  TopKLaunches launches;

  auto rowParams = [&](SmallVector<Type> tail) {
    SmallVector<Type> params = {ptr, ptr};
    if (spec.sparse)
      params.push_back(ptr);
    params.append(tail.begin(), tail.end());
    return params;
  };

  //===--- 1. histogram of the top 12 bits
  //----------------------------------===//
  {
    gpu::GPUFuncOp f = beginKernel(b, loc, module, spec.name + "_hist",
                                   rowParams({ptr, ptr, ptr}), small);
    unsigned a = 0;
    Value scores = f.getArgument(a++), lengths = f.getArgument(a++);
    Value counts = spec.sparse ? f.getArgument(a++) : Value();
    Value hist = f.getArgument(a++), done = f.getArgument(a++);
    Value thresholds = f.getArgument(a++);
    RowView row = rowView(kb, spec, kb.blockIdY(), lengths, counts);
    PackedHistogram local =
        PackedHistogram::begin(kb, spec.name + "_hist", small);
    Value first = kb.mul(kb.blockIdX(), kb.i32(spec.chunk));
    Value last = kb.minS(kb.add(first, kb.i32(spec.chunk)), row.n);
    forEachChunkEntry(kb, scores, row, spec.width % 4 == 0, first, last, small,
                      [&](Value, Value eligible, Value key) {
                        kb.ifThen(eligible, [&] { local.count(kb, key); });
                      });
    local.finish(kb, spec.name + "_hist", hist, done, thresholds, row.rowId,
                 spec.chunksPerRow(), spec.k, small);
    launches.hist.grid = {spec.chunksPerRow(), rows, 1};
    launches.hist.blockThreads = small;
  }

  //===--- 2. collect the candidates
  //----------------------------------------===//
  {
    gpu::GPUFuncOp f = beginKernel(b, loc, module, spec.name + "_collect",
                                   rowParams({ptr, ptr, ptr, ptr}), small);
    unsigned a = 0;
    Value scores = f.getArgument(a++), lengths = f.getArgument(a++);
    Value counts = spec.sparse ? f.getArgument(a++) : Value();
    Value thresholds = f.getArgument(a++), counter = f.getArgument(a++);
    Value candidates = f.getArgument(a++), hist = f.getArgument(a++);
    RowView row = rowView(kb, spec, kb.blockIdY(), lengths, counts);
    // The histogram was read by the threshold: each CTA zeroes its share
    // of the row's bins for the next step.
    {
      const int64_t share = llvm::divideCeil(bins, spec.chunksPerRow());
      Value from = kb.mul(kb.blockIdX(), kb.i32(share));
      Value to = kb.minS(kb.add(from, kb.i32(share)), kb.i32(bins));
      Value histBase = kb.mul(row.rowId, kb.i32(bins));
      forEachThreadStrided(
          kb, kb.maxS(kb.sub(to, from), kb.i32(0)), small, [&](Value i) {
            kb.storeAt(kb.i32(0), hist, kb.add(histBase, kb.add(from, i)));
          });
    }
    Value first = kb.mul(kb.blockIdX(), kb.i32(spec.chunk));
    kb.ifThen(kb.cmp(CmpIPredicate::slt, first, row.n), [&] {
      Value bin = kb.loadAt(i32, thresholds, row.rowId, true);
      Value last = kb.minS(kb.add(first, kb.i32(spec.chunk)), row.n);
      Value candBase = kb.mul(kb.extS64(row.rowId), kb.i64(spec.candidates));
      // One counter atomic per CTA: each thread counts its candidates, a
      // block scan places them, thread 0 reserves the CTA's range.
      SmallVector<Value> wanted, keys, entries;
      forEachChunkEntry(kb, scores, row, spec.width % 4 == 0, first, last,
                        small, [&](Value i, Value eligible, Value key) {
        wanted.push_back(kb.andI(
            eligible, kb.cmp(CmpIPredicate::uge,
                             kb.shrU(key, kb.i32(kBinShift)), bin)));
        keys.push_back(key);
        entries.push_back(i);
      });
      Value own = kb.i32(0);
      for (Value w : wanted)
        own = kb.add(own, kb.zext(w, i32));
      auto [before, total] =
          blockExclusiveScan(kb, spec.name + "_collect", own, small);
      Value baseCell = kb.sharedArray(spec.name + "_collect_base", i32, 1);
      kb.ifThen(kb.andI(kb.cmp(CmpIPredicate::eq, kb.threadIdX(), kb.i32(0)),
                        kb.cmp(CmpIPredicate::sgt, total, kb.i32(0))),
                [&] {
                  kb.storeAt(kb.atomicAdd(kb.gep(counter, i32, row.rowId),
                                          total),
                             baseCell, kb.i32(0));
                });
      kb.barrier();
      Value at = kb.add(kb.loadAt(i32, baseCell, kb.i32(0)), before);
      for (auto [w, key, i] : llvm::zip(wanted, keys, entries)) {
        Value here = at;
        kb.ifThen(kb.andI(w, kb.cmp(CmpIPredicate::slt, here,
                                    kb.i32(spec.candidates))),
                  [&] {
          Value packed =
              kb.orI(kb.shl(kb.extU64(key), kb.i64(32)), kb.extU64(i));
          kb.storeAt(packed, candidates, kb.add(candBase, kb.extS64(here)));
        });
        at = kb.add(at, kb.zext(w, i32));
      }
    });
    launches.collect.grid = {spec.chunksPerRow(), rows, 1};
    launches.collect.blockThreads = small;
  }

  //===--- 3. select, sort and write
  //----------------------------------------===//
  {
    SmallVector<Type> params = {ptr, ptr};
    if (spec.sparse)
      params.append({ptr, ptr});
    params.append({ptr, ptr, ptr});
    gpu::GPUFuncOp f =
        beginKernel(b, loc, module, spec.name, params, spec.threads);
    // One CTA per SM is all a row needs: let ptxas use the registers that
    // leaves (it would otherwise aim at two CTAs and spill).
    f->setAttr("nvvm.maxnreg",
               b.getI32IntegerAttr(static_cast<int32_t>(
                   std::min<int64_t>(255, 65536 / spec.threads))));
    unsigned a = 0;
    Value scores = f.getArgument(a++), lengths = f.getArgument(a++);
    Value blocks = spec.sparse ? f.getArgument(a++) : Value();
    Value counts = spec.sparse ? f.getArgument(a++) : Value();
    Value counter = f.getArgument(a++), candidates = f.getArgument(a++);
    Value out = f.getArgument(a++);
    RowView row = rowView(kb, spec, kb.blockIdX(), lengths, counts);
    Value found = kb.loadAt(i32, counter, row.rowId);
    // Candidates when they all fit, else the whole row.
    Value fromList = kb.cmp(CmpIPredicate::sle, found, kb.i32(spec.candidates));
    Value n = kb.select(fromList, found, row.n);
    Value candBase = kb.mul(kb.extS64(row.rowId), kb.i64(spec.candidates));
    // A list that fits is copied to shared memory first: the radix passes
    // and the gather then read it without a trip to L2 each.
    const int64_t listBytes =
        8 * static_cast<int64_t>(llvm::PowerOf2Ceil(spec.k));
    const int64_t staged =
        std::min<int64_t>(spec.candidates, (kStaticSharedBudget - listBytes) /
                                               8 / spec.threads * spec.threads);
    Value inShared = kb.i1(false);
    Value local;
    if (staged > 0) {
      local = kb.sharedArray(spec.name + "_candidates", i64, staged);
      inShared =
          kb.andI(fromList, kb.cmp(CmpIPredicate::sle, found, kb.i32(staged)));
      kb.ifThen(inShared, [&] {
        forEachThreadStrided(kb, found, spec.threads, [&](Value i) {
          kb.storeAt(kb.loadAt(i64, candidates, kb.add(candBase, kb.extS64(i))),
                     local, i);
        });
      });
      kb.barrier();
    }
    auto candidate = [&](Value i) {
      if (staged == 0)
        return kb.loadAt(i64, candidates, kb.add(candBase, kb.extS64(i)));
      return kb.ifThenElse(
          {i64}, inShared,
          [&]() -> SmallVector<Value> { return {kb.loadAt(i64, local, i)}; },
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
    // Every thread read the counter before the sort's barriers: zero it
    // for the next step.
    kb.ifThen(kb.cmp(CmpIPredicate::eq, kb.threadIdX(), kb.i32(0)),
              [&] { kb.storeAt(kb.i32(0), counter, row.rowId); });
    launches.final.grid = {rows, 1, 1};
    launches.final.blockThreads = spec.threads;
  }
  return launches;
}
