//===- KernelLibrary.cpp - CTA-wide building blocks of the kernels --------===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
//===----------------------------------------------------------------------===//

#include "KernelLibrary.h"
#include "Kernels.h"

#include "llvm/ADT/Twine.h"

using namespace mlir;
using namespace mlir::spin::gpu_codegen;
using arith::CmpIPredicate;

void mlir::spin::gpu_codegen::forEachThreadStrided(
    KernelBuilder &kb, Value n, int64_t blockThreads,
    function_ref<void(Value)> body) {
  kb.forLoop(kb.threadIdX(), n, kb.i32(blockThreads), body);
}

void mlir::spin::gpu_codegen::forEachThreadStridedInWarps(
    KernelBuilder &kb, Value n, int64_t blockThreads,
    function_ref<void(Value, Value)> body) {
  Value step = kb.i32(blockThreads);
  // n rounded up to a multiple of the block size (n >= 0).
  Value bound = kb.mul(
      kb.divU(kb.add(kb.maxS(n, kb.i32(0)), kb.i32(blockThreads - 1)), step),
      step);
  kb.forLoop(kb.i32(0), bound, step, [&](Value base) {
    Value i = kb.add(base, kb.threadIdX());
    body(i, kb.cmp(CmpIPredicate::slt, i, n));
  });
}

Value mlir::spin::gpu_codegen::warpReserve(KernelBuilder &kb, Value counter,
                                           Value take) {
  Value lane = kb.laneId();
  Value takers = kb.ballot(take);
  Value leader = kb.cttz(takers); // 32 when no lane takes
  Value first = kb.ifThenElse(
      {kb.i32T()}, kb.cmp(CmpIPredicate::eq, leader, lane),
      [&]() -> SmallVector<Value> {
        return {kb.atomicAdd(counter, kb.popc(takers))};
      },
      [&]() -> SmallVector<Value> { return {kb.i32(0)}; })[0];
  Value base = kb.shflIdx(first, kb.andI(leader, kb.i32(31)));
  Value below = kb.sub(kb.shl(kb.i32(1), lane), kb.i32(1));
  return kb.add(base, kb.popc(kb.andI(takers, below)));
}

Value mlir::spin::gpu_codegen::warpReserveCount(KernelBuilder &kb,
                                                Value counter, Value count) {
  Value lane = kb.laneId();
  Value upTo = warpInclusiveScan(kb, count, lane);
  Value total = kb.shflIdx(upTo, kb.i32(31));
  Value lastLane = kb.cmp(CmpIPredicate::eq, lane, kb.i32(31));
  Value base = kb.ifThenElse(
      {kb.i32T()},
      kb.andI(lastLane, kb.cmp(CmpIPredicate::sgt, total, kb.i32(0))),
      [&]() -> SmallVector<Value> { return {kb.atomicAdd(counter, total)}; },
      [&]() -> SmallVector<Value> { return {kb.i32(0)}; })[0];
  return kb.add(kb.shflIdx(base, kb.i32(31)), kb.sub(upTo, count));
}

Value mlir::spin::gpu_codegen::warpInclusiveScan(KernelBuilder &kb, Value value,
                                                 Value lane) {
  for (int64_t d = 1; d < 32; d *= 2) {
    Value up = kb.shflUp(value, d);
    value = kb.select(kb.cmp(CmpIPredicate::uge, lane, kb.i32(d)),
                      kb.add(value, up), value);
  }
  return value;
}

std::pair<Value, Value>
mlir::spin::gpu_codegen::blockExclusiveScan(KernelBuilder &kb, StringRef prefix,
                                            Value value, int64_t blockThreads) {
  int64_t warps = blockThreads / 32;
  Value sums =
      kb.sharedArray((prefix + "_warp_sums").str(), kb.i32T(), warps);
  Value lane = kb.laneId(), warp = kb.warpId();
  Value inclusive = warpInclusiveScan(kb, value, lane);
  kb.ifThen(kb.cmp(CmpIPredicate::eq, lane, kb.i32(31)),
            [&] { kb.storeAt(inclusive, sums, warp); });
  kb.barrier();
  kb.ifThen(kb.cmp(CmpIPredicate::eq, warp, kb.i32(0)), [&] {
    Value inRange = kb.cmp(CmpIPredicate::ult, lane, kb.i32(warps));
    Value mine = kb.ifThenElse(
        {kb.i32T()}, inRange,
        [&]() -> SmallVector<Value> { return {kb.loadAt(kb.i32T(), sums, lane)}; },
        [&]() -> SmallVector<Value> { return {kb.i32(0)}; })[0];
    Value scanned = warpInclusiveScan(kb, mine, lane);
    kb.ifThen(inRange, [&] { kb.storeAt(scanned, sums, lane); });
  });
  kb.barrier();
  Value before = kb.ifThenElse(
      {kb.i32T()}, kb.cmp(CmpIPredicate::ugt, warp, kb.i32(0)),
      [&]() -> SmallVector<Value> {
        return {kb.loadAt(kb.i32T(), sums, kb.sub(warp, kb.i32(1)))};
      },
      [&]() -> SmallVector<Value> { return {kb.i32(0)}; })[0];
  Value total = kb.loadAt(kb.i32T(), sums, kb.i32(warps - 1));
  kb.barrier();
  return {kb.add(kb.sub(inclusive, value), before), total};
}

Value mlir::spin::gpu_codegen::blockMaxF(KernelBuilder &kb, StringRef prefix,
                                         Value value, int64_t blockThreads) {
  int64_t warps = blockThreads / 32;
  Value cells = kb.sharedArray((prefix + "_warp_max").str(), kb.f32T(), warps);
  for (int64_t d = 16; d >= 1; d /= 2)
    value = kb.maxF(value, kb.shflXor(value, d));
  Value lane = kb.laneId(), warp = kb.warpId();
  kb.ifThen(kb.cmp(CmpIPredicate::eq, lane, kb.i32(0)),
            [&] { kb.storeAt(value, cells, warp); });
  kb.barrier();
  Value result = kb.loadAt(kb.f32T(), cells, kb.i32(0));
  for (int64_t w = 1; w < warps; ++w)
    result = kb.maxF(result, kb.loadAt(kb.f32T(), cells, kb.i32(w)));
  kb.barrier();
  return result;
}

namespace {
/// One radix pass's outcome, uniform over the CTA.
struct DigitChoice {
  Value digit;    ///< i32, the digit of the k-th largest (or -1: fewer)
  Value above;    ///< i32, matching keys with a larger digit
  Value inBin;    ///< i32, matching keys with exactly that digit
  Value matching; ///< i32, keys matching the prefix
};
} // namespace

/// Histograms the digit at `shift` of the eligible keys that match
/// `prefix` under `mask`, then picks the digit holding the `remaining`-th
/// largest.
static DigitChoice chooseDigit(KernelBuilder &kb, StringRef prefix,
                               Type keyType, Value n, int64_t blockThreads,
                               KeyFunction keyOf, Value keyPrefix,
                               Value keyMask, int64_t shift, Value remaining) {
  Value hist = kb.sharedArray((prefix + "_hist").str(), kb.i32T(), 256);
  Value cells = kb.sharedArray((prefix + "_cells").str(), kb.i32T(), 4);
  Value tid = kb.threadIdX();
  forEachThreadStrided(kb, kb.i32(256), blockThreads,
                       [&](Value i) { kb.storeAt(kb.i32(0), hist, i); });
  kb.barrier();
  forEachThreadStrided(kb, n, blockThreads, [&](Value i) {
    auto [eligible, key] = keyOf(i);
    Value match = kb.andI(eligible, kb.cmp(CmpIPredicate::eq,
                                           kb.andI(key, keyMask), keyPrefix));
    kb.ifThen(match, [&] {
      Value digit = kb.andI(kb.shrU(key, kb.constant(keyType, shift)),
                            kb.constant(keyType, 255));
      if (keyType != kb.i32T())
        digit = kb.trunc32(digit);
      kb.atomicAdd(kb.gep(hist, kb.i32T(), digit), kb.i32(1));
    });
  });
  kb.barrier();
  kb.ifThen(kb.cmp(CmpIPredicate::ult, tid, kb.i32(32)), [&] {
    // Lane l owns the digits 255-8l down to 248-8l.
    Value lane = tid;
    Value top = kb.sub(kb.i32(255), kb.mul(lane, kb.i32(8)));
    SmallVector<Value> counts;
    Value own = kb.i32(0);
    for (int64_t q = 0; q < 8; ++q) {
      counts.push_back(kb.loadAt(kb.i32T(), hist, kb.sub(top, kb.i32(q))));
      own = kb.add(own, counts.back());
    }
    Value inclusive = warpInclusiveScan(kb, own, lane);
    Value acc = kb.sub(inclusive, own);
    Value digit = kb.i32(-1), above = kb.i32(0), inBin = kb.i32(0);
    for (int64_t q = 0; q < 8; ++q) {
      Value reach = kb.add(acc, counts[q]);
      Value hit = kb.andI(kb.cmp(CmpIPredicate::slt, digit, kb.i32(0)),
                          kb.cmp(CmpIPredicate::sge, reach, remaining));
      digit = kb.select(hit, kb.sub(top, kb.i32(q)), digit);
      above = kb.select(hit, acc, above);
      inBin = kb.select(hit, counts[q], inBin);
      acc = reach;
    }
    Value found = kb.cmp(CmpIPredicate::sge, digit, kb.i32(0));
    Value votes = kb.ballot(found);
    Value any = kb.cmp(CmpIPredicate::ne, votes, kb.i32(0));
    Value owner = kb.select(any, kb.cttz(votes), kb.i32(0));
    Value total = kb.shflIdx(inclusive, kb.i32(31));
    Value chosenDigit =
        kb.select(any, kb.shflIdx(digit, owner), kb.i32(-1));
    Value chosenAbove = kb.shflIdx(above, owner);
    Value chosenInBin = kb.shflIdx(inBin, owner);
    kb.ifThen(kb.cmp(CmpIPredicate::eq, lane, kb.i32(0)), [&] {
      kb.storeAt(chosenDigit, cells, kb.i32(0));
      kb.storeAt(chosenAbove, cells, kb.i32(1));
      kb.storeAt(chosenInBin, cells, kb.i32(2));
      kb.storeAt(total, cells, kb.i32(3));
    });
  });
  kb.barrier();
  DigitChoice choice{kb.loadAt(kb.i32T(), cells, kb.i32(0)),
                     kb.loadAt(kb.i32T(), cells, kb.i32(1)),
                     kb.loadAt(kb.i32T(), cells, kb.i32(2)),
                     kb.loadAt(kb.i32T(), cells, kb.i32(3))};
  kb.barrier();
  return choice;
}

/// Where the radix passes start: the key bits already fixed (`prefix` under
/// `mask`, the top `knownBits`), the keys still needed among those that
/// match, how many match, and whether every eligible key is taken.
struct RadixStart {
  int64_t knownBits = 0;
  Value prefix, mask, remaining, inBin, takeAll;
};

/// The radix passes over the digits of `keyType` below the known bits, most
/// significant first; returns the threshold, how many keys equal to it are
/// still needed, the count of such keys and whether the eligible keys
/// number at most `k`. Without known bits the first pass decides the
/// latter. Once a digit's bin holds exactly the keys still needed, the
/// remaining passes are skipped (uniformly): the threshold keeps zero low
/// digits, so every key of that bin is `>= threshold` and all its ties are
/// needed. The last pass may overlap known bits (a digit at shift 0): the
/// keys that match the prefix agree on them.
static std::tuple<Value, Value, Value, Value>
radixPasses(KernelBuilder &kb, StringRef prefix, Type keyType, Value n, Value k,
            int64_t blockThreads, KeyFunction keyOf,
            const RadixStart *start = nullptr) {
  int64_t bits = keyType.getIntOrFloatBitWidth();
  Type i32 = kb.i32T();
  Value keyPrefix = kb.constant(keyType, 0), keyMask = kb.constant(keyType, 0);
  Value remaining = k, inBin = kb.i32(0), takeAll, settled = kb.i1(false);
  SmallVector<int64_t> shifts;
  for (int64_t top = bits - 8 - (start ? start->knownBits : 0); top > 0;
       top -= 8)
    shifts.push_back(top);
  shifts.push_back(0);
  if (start) {
    keyPrefix = start->prefix;
    keyMask = start->mask;
    remaining = start->remaining;
    inBin = start->inBin;
    takeAll = start->takeAll;
    settled = kb.orI(takeAll, kb.cmp(CmpIPredicate::eq, inBin, remaining));
  }
  for (int64_t shift : shifts) {
    auto pass = [&]() -> SmallVector<Value> {
      DigitChoice choice =
          chooseDigit(kb, prefix, keyType, n, blockThreads, keyOf, keyPrefix,
                      keyMask, shift, remaining);
      return {choice.digit, choice.above, choice.inBin, choice.matching};
    };
    SmallVector<Value> choice;
    if (!takeAll) {
      choice = pass();
      takeAll = kb.cmp(CmpIPredicate::sle, choice[3], k);
    } else {
      choice = kb.ifThenElse(
          {i32, i32, i32, i32}, settled,
          [&]() -> SmallVector<Value> {
            return {kb.i32(0), kb.i32(0), inBin, kb.i32(0)};
          },
          pass);
    }
    // A settled pass keeps the prefix: its digit is 0 and, at shift 0,
    // ORing 0 keeps the known bits.
    Value digit = kb.maxS(choice[0], kb.i32(0));
    Value wide = keyType == i32 ? digit : kb.extU64(digit);
    keyPrefix =
        kb.orI(keyPrefix, kb.shl(wide, kb.constant(keyType, shift)));
    keyMask = kb.orI(keyMask, kb.constant(keyType, int64_t(255) << shift));
    remaining = kb.sub(remaining, choice[1]);
    inBin = choice[2];
    settled = kb.orI(
        settled, kb.orI(takeAll, kb.cmp(CmpIPredicate::eq, inBin, remaining)));
  }
  return {keyPrefix, remaining, inBin, takeAll};
}

static RadixSelection selectWith(KernelBuilder &kb, StringRef prefix,
                                 Type keyType, Value n, Value k,
                                 int64_t blockThreads, KeyFunction keyOf,
                                 IndexFunction indexOf,
                                 const RadixStart *start) {
  auto [threshold, need, ties, takeAll] =
      radixPasses(kb, prefix, keyType, n, k, blockThreads, keyOf, start);
  // Ties at the threshold: the `need` lowest indices, i.e. the `need`
  // largest `~i` among the keys equal to the threshold. Skipped (uniformly)
  // when every tie is needed.
  Value resolve = kb.andI(kb.not1(takeAll),
                          kb.cmp(CmpIPredicate::slt, need, ties));
  Value limit = kb.ifThenElse(
      {kb.i32T()}, resolve,
      [&]() -> SmallVector<Value> {
        auto tieKey = [&](Value i) -> std::pair<Value, Value> {
          auto [eligible, key] = keyOf(i);
          Value tie = kb.andI(eligible,
                              kb.cmp(CmpIPredicate::eq, key, threshold));
          return {tie, kb.xorI(indexOf ? indexOf(i) : i, kb.i32(-1))};
        };
        auto [inverted, needLeft, unusedTies, unusedAll] = radixPasses(
            kb, (prefix + "_ties").str(), kb.i32T(), n, need, blockThreads,
            tieKey);
        (void)needLeft;
        (void)unusedTies;
        (void)unusedAll;
        return {kb.xorI(inverted, kb.i32(-1))};
      },
      [&]() -> SmallVector<Value> { return {kb.i32(0x7fffffff)}; })[0];
  return {takeAll, threshold, need, limit};
}

RadixSelection mlir::spin::gpu_codegen::selectLargest(
    KernelBuilder &kb, StringRef prefix, Type keyType, Value n, Value k,
    int64_t blockThreads, KeyFunction keyOf, IndexFunction indexOf) {
  return selectWith(kb, prefix, keyType, n, k, blockThreads, keyOf, indexOf,
                    nullptr);
}

RadixSelection mlir::spin::gpu_codegen::selectLargest(
    KernelBuilder &kb, StringRef prefix, Value n, Value k, int64_t blockThreads,
    KeyFunction keyOf, IndexFunction indexOf, const KnownBin &known) {
  assert(known.bits > 0 && known.bits < 32 && "some bits known, some not");
  RadixStart start;
  start.knownBits = known.bits;
  start.prefix = kb.shl(known.bin, kb.i32(32 - known.bits));
  start.mask = kb.i32(static_cast<int32_t>(~uint32_t(0) << (32 - known.bits)));
  start.remaining = kb.sub(k, known.above);
  start.inBin = known.inBin;
  start.takeAll = known.takeAll;
  return selectWith(kb, prefix, kb.i32T(), n, k, blockThreads, keyOf, indexOf,
                    &start);
}

Value mlir::spin::gpu_codegen::isSelected(KernelBuilder &kb,
                                          const RadixSelection &s,
                                          Value eligible, Value key,
                                          Value index) {
  Value above = kb.cmp(CmpIPredicate::ugt, key, s.threshold);
  Value tie = kb.andI(kb.cmp(CmpIPredicate::eq, key, s.threshold),
                      kb.andI(kb.cmp(CmpIPredicate::sgt, s.needFromTies,
                                     kb.i32(0)),
                              kb.cmp(CmpIPredicate::sle, index, s.indexLimit)));
  return kb.andI(eligible, kb.orI(s.takeAll, kb.orI(above, tie)));
}

/// One compare-exchange of a bitonic network in registers: thread `index`
/// holds `mine`, its partner `index ^ stride` holds `theirs`.
static Value bitonicStep(KernelBuilder &kb, Value index, Value mine,
                         Value theirs, int64_t width, int64_t stride) {
  Value ascending =
      kb.cmp(CmpIPredicate::eq, kb.andI(index, kb.i32(width)), kb.i32(0));
  Value lower =
      kb.cmp(CmpIPredicate::eq, kb.andI(index, kb.i32(stride)), kb.i32(0));
  Value keepSmaller = kb.cmp(CmpIPredicate::eq, kb.zext(ascending, kb.i32T()),
                             kb.zext(lower, kb.i32T()));
  Value smaller =
      kb.select(kb.cmp(CmpIPredicate::ult, mine, theirs), mine, theirs);
  Value larger =
      kb.select(kb.cmp(CmpIPredicate::ult, mine, theirs), theirs, mine);
  return kb.select(keepSmaller, smaller, larger);
}

/// `value` of lane `lane ^ mask` (an i64 as two 32-bit shuffles).
static Value shflXorU64(KernelBuilder &kb, Value value, int64_t mask) {
  Value lo = kb.shflXor(kb.trunc32(value), mask);
  Value hi = kb.shflXor(kb.trunc32(kb.shrU(value, kb.i64(32))), mask);
  return kb.orI(kb.shl(kb.extU64(hi), kb.i64(32)), kb.extU64(lo));
}

void mlir::spin::gpu_codegen::bitonicSortU64(KernelBuilder &kb, Value keys,
                                             int64_t size,
                                             int64_t blockThreads) {
  Type i64 = kb.i64T();
  if (size == 2 * blockThreads && blockThreads >= 32) {
    // Thread t keeps keys 2t and 2t + 1 in registers: the stages of
    // stride 1 compare them in the thread, strides 2..32 are shuffles with
    // lane t ^ stride / 2, and only the strides of 64 and more (15 of the
    // 66 stages at 2048 keys) go through shared memory.
    Value tid = kb.threadIdX();
    Value index[2] = {kb.mul(tid, kb.i32(2)),
                      kb.add(kb.mul(tid, kb.i32(2)), kb.i32(1))};
    Value mine[2] = {kb.loadAt(i64, keys, index[0]),
                     kb.loadAt(i64, keys, index[1])};
    for (int64_t width = 2; width <= size; width *= 2) {
      for (int64_t stride = width / 2; stride > 0; stride /= 2) {
        if (stride == 1) {
          Value ascending = kb.cmp(CmpIPredicate::eq,
                                   kb.andI(index[0], kb.i32(width)), kb.i32(0));
          Value inOrder = kb.cmp(CmpIPredicate::ule, mine[0], mine[1]);
          Value smaller = kb.select(inOrder, mine[0], mine[1]);
          Value larger = kb.select(inOrder, mine[1], mine[0]);
          mine[0] = kb.select(ascending, smaller, larger);
          mine[1] = kb.select(ascending, larger, smaller);
          continue;
        }
        Value theirs[2];
        if (stride / 2 < 32) {
          for (int e = 0; e < 2; ++e)
            theirs[e] = shflXorU64(kb, mine[e], stride / 2);
        } else {
          for (int e = 0; e < 2; ++e)
            kb.storeAt(mine[e], keys, index[e]);
          kb.barrier();
          for (int e = 0; e < 2; ++e)
            theirs[e] = kb.loadAt(i64, keys, kb.xorI(index[e], kb.i32(stride)));
          kb.barrier();
        }
        for (int e = 0; e < 2; ++e)
          mine[e] =
              bitonicStep(kb, index[e], mine[e], theirs[e], width, stride);
      }
    }
    for (int e = 0; e < 2; ++e)
      kb.storeAt(mine[e], keys, index[e]);
    kb.barrier();
    return;
  }
  if (size <= blockThreads && size >= 2) {
    Value tid = kb.threadIdX();
    Value inNetwork = kb.cmp(CmpIPredicate::slt, tid, kb.i32(size));
    Value mine = kb.ifThenElse(
        {i64}, inNetwork,
        [&]() -> SmallVector<Value> { return {kb.loadAt(i64, keys, tid)}; },
        [&]() -> SmallVector<Value> { return {kb.i64(-1)}; })[0];
    for (int64_t width = 2; width <= size; width *= 2) {
      for (int64_t stride = width / 2; stride > 0; stride /= 2) {
        Value theirs;
        if (stride < 32) {
          // Threads past the network shuffle too (full-warp shuffles);
          // their values are never used.
          theirs = shflXorU64(kb, mine, stride);
        } else {
          kb.ifThen(inNetwork, [&] { kb.storeAt(mine, keys, tid); });
          kb.barrier();
          theirs = kb.ifThenElse(
              {i64}, inNetwork,
              [&]() -> SmallVector<Value> {
                return {kb.loadAt(i64, keys, kb.xorI(tid, kb.i32(stride)))};
              },
              [&]() -> SmallVector<Value> { return {kb.i64(-1)}; })[0];
          kb.barrier();
        }
        mine = bitonicStep(kb, tid, mine, theirs, width, stride);
      }
    }
    kb.ifThen(inNetwork, [&] { kb.storeAt(mine, keys, tid); });
    kb.barrier();
    return;
  }
  for (int64_t width = 2; width <= size; width *= 2) {
    for (int64_t stride = width / 2; stride > 0; stride /= 2) {
      forEachThreadStrided(kb, kb.i32(size / 2), blockThreads, [&](Value t) {
        Value lo = kb.add(kb.mul(kb.divU(t, kb.i32(stride)), kb.i32(2 * stride)),
                          kb.remU(t, kb.i32(stride)));
        Value hi = kb.add(lo, kb.i32(stride));
        Value ascending = kb.cmp(CmpIPredicate::eq,
                                 kb.andI(lo, kb.i32(width)), kb.i32(0));
        Value a = kb.loadAt(i64, keys, lo), c = kb.loadAt(i64, keys, hi);
        Value outOfOrder = kb.select(ascending,
                                     kb.cmp(CmpIPredicate::ugt, a, c),
                                     kb.cmp(CmpIPredicate::ult, a, c));
        kb.ifThen(outOfOrder, [&] {
          kb.storeAt(c, keys, lo);
          kb.storeAt(a, keys, hi);
        });
      });
      kb.barrier();
    }
  }
}

void mlir::spin::gpu_codegen::recordError(KernelBuilder &kb, Value errors,
                                          int32_t code, Value value,
                                          Value request, Value row) {
  Value old = kb.atomicCAS(errors, kb.i32(0), kb.i32(code));
  kb.ifThen(kb.cmp(CmpIPredicate::eq, old, kb.i32(0)), [&] {
    kb.storeAt(value, errors, kb.i32(1));
    kb.storeAt(request, errors, kb.i32(2));
    kb.storeAt(row, errors, kb.i32(3));
  });
}

BatchSlot mlir::spin::gpu_codegen::loadBatchSlot(KernelBuilder &kb,
                                                Value slots, Value row,
                                                Value numSlots, int64_t batch,
                                                bool wholeWarp) {
  Type i32 = kb.i32T();
  Value value = kb.loadAt(i32, slots, row, true);
  Value inPool = kb.andI(kb.cmp(CmpIPredicate::sge, value, kb.i32(0)),
                         kb.cmp(CmpIPredicate::slt, value, numSlots));
  // Whether an earlier row has the same slot.
  auto sameAt = [&](Value j) {
    Value other =
        kb.loadAt(i32, slots, kb.minS(j, kb.i32(batch - 1)), true);
    return kb.andI(kb.cmp(CmpIPredicate::slt, j, row),
                   kb.cmp(CmpIPredicate::eq, other, value));
  };
  Value duplicate;
  if (wholeWarp) {
    // The lanes split the rows: ceil(batch / 32) loads each, all in flight
    // at once, then one vote.
    Value lane = kb.laneId(), found = kb.i1(false);
    for (int64_t first = 0; first < batch; first += 32)
      found = kb.orI(found, sameAt(kb.add(lane, kb.i32(first))));
    duplicate = kb.cmp(CmpIPredicate::ne, kb.ballot(found), kb.i32(0));
  } else {
    // One thread alone: eight loads in flight a round.
    constexpr int64_t kUnroll = 8;
    duplicate = kb.forLoopWith(
        kb.i32(0), row, kb.i32(kUnroll), {kb.i1(false)},
        [&](Value first, ValueRange in) -> SmallVector<Value> {
          SmallVector<Value> same;
          for (int64_t u = 0; u < kUnroll; ++u)
            same.push_back(sameAt(kb.add(first, kb.i32(u))));
          Value found = in[0];
          for (Value v : same)
            found = kb.orI(found, v);
          return {found};
        })[0];
  }
  duplicate = kb.andI(duplicate, inPool);
  Value live = kb.andI(inPool, kb.not1(duplicate));
  Value padding = kb.cmp(CmpIPredicate::eq, value, kb.i32(-1));
  return {kb.select(live, value, kb.i32(0)), live,
          kb.andI(kb.not1(live), kb.not1(padding)), duplicate, value};
}

BatchSlot mlir::spin::gpu_codegen::loadBatchSlotBeforeWait(
    KernelBuilder &kb, OpBuilder &b, gpu::GPUFuncOp func, Value slots,
    function_ref<Value()> row, Value numSlots, int64_t batch, bool wholeWarp) {
  OpBuilder::InsertionGuard guard(b);
  setInsertionBeforeGridWait(b, func);
  return loadBatchSlot(kb, slots, row(), numSlots, batch, wholeWarp);
}

void mlir::spin::gpu_codegen::recordSlotError(KernelBuilder &kb, Value errors,
                                              const BatchSlot &slot,
                                              Value row) {
  kb.ifThen(slot.duplicate, [&] {
    recordError(kb, errors, ErrorDuplicateSlot, slot.value, row, kb.i32(0));
  });
  kb.ifThen(kb.andI(slot.bad, kb.not1(slot.duplicate)), [&] {
    recordError(kb, errors, ErrorBadSlot, slot.value, row, kb.i32(0));
  });
}

Value mlir::spin::gpu_codegen::rowResets(KernelBuilder &kb, Value live,
                                         Value resetFlags, Value row) {
  return kb.andI(live, kb.cmp(CmpIPredicate::ne,
                              kb.loadAt(kb.i8T(), resetFlags, row, true),
                              kb.constant(kb.i8T(), 0)));
}

StateRows::StateRows(KernelBuilder &kb, const StatePaging &paging, Value slot,
                     Value batchRow, int64_t capacity)
    : kb(kb), paging(paging), slot(slot), capacity(capacity) {
  if (paging.paged())
    tableRow = kb.mul(batchRow, kb.i32(paging.width));
  else
    slotBase = kb.mul(kb.extS64(slot), kb.i64(capacity));
}

Value StateRows::pageOf(Value i) const {
  return kb.loadAt(kb.i32T(), paging.table,
                   kb.add(tableRow, kb.divU(i, kb.i32(paging.page))), true);
}

Value StateRows::inPool(Value i) const {
  if (!paged())
    return kb.i1(true);
  return kb.cmp(CmpIPredicate::ult, pageOf(i), paging.pages);
}

Value StateRows::index(Value i, Value r, int64_t rows) const {
  if (!paged() && !r)
    return kb.add(slotBase, kb.extS64(i));
  Value row = r ? kb.extS64(r) : kb.i64(0);
  if (!paged())
    return kb.add(
        kb.mul(kb.add(kb.mul(kb.extS64(slot), kb.i64(rows)), row),
               kb.i64(capacity)),
        kb.extS64(i));
  Value page = pageOf(i);
  page = kb.select(kb.cmp(CmpIPredicate::ult, page, paging.pages), page,
                   kb.i32(0));
  return kb.add(kb.mul(kb.add(kb.mul(kb.extS64(page), kb.i64(rows)), row),
                       kb.i64(paging.page)),
                kb.extS64(kb.remU(i, kb.i32(paging.page))));
}

Value mlir::spin::gpu_codegen::statePagesInPool(
    KernelBuilder &kb, const StatePaging &paging, Value row, Value reach,
    int64_t threads, StringRef scanPrefix, Value errors) {
  Type i32 = kb.i32T();
  Value pages = kb.divU(kb.add(kb.maxS(reach, kb.i32(0)), kb.i32(paging.page - 1)),
                        kb.i32(paging.page));
  Value tableRow = kb.mul(row, kb.i32(paging.width));
  Value outside = kb.forLoopWith(
      kb.threadIdX(), pages, kb.i32(threads), {kb.i32(0)},
      [&](Value j, ValueRange in) -> SmallVector<Value> {
        Value entry = kb.loadAt(i32, paging.table, kb.add(tableRow, j), true);
        Value bad = kb.cmp(CmpIPredicate::uge, entry, paging.pages);
        if (errors)
          kb.ifThen(bad, [&] {
            recordError(kb, errors, ErrorBadStatePage, entry, row, kb.i32(0));
          });
        return {kb.add(in[0], kb.zext(bad, i32))};
      })[0];
  return kb.cmp(CmpIPredicate::eq,
                blockExclusiveScan(kb, scanPrefix, outside, threads).second,
                kb.i32(0));
}

void mlir::spin::gpu_codegen::resetSlotState(KernelBuilder &kb,
                                             const SlotStateArrays &state,
                                             Value slot, int64_t capacity,
                                             int64_t threads, int64_t ctas) {
  if (!state.valid) {
    Value stateBase = kb.mul(kb.extS64(slot), kb.i64(capacity));
    Value start =
        kb.add(kb.mul(kb.blockIdX(), kb.i32(threads)), kb.threadIdX());
    kb.forLoop(start, kb.i32(capacity), kb.i32(threads * ctas), [&](Value i) {
      Value at = kb.add(stateBase, kb.extS64(i));
      kb.storeAt(kb.f32(0.0), state.v, at);
      kb.storeAt(kb.f32(0.0), state.d, at);
    });
  }
  kb.ifThen(kb.andI(kb.cmp(CmpIPredicate::eq, kb.blockIdX(), kb.i32(0)),
                    kb.cmp(CmpIPredicate::eq, kb.threadIdX(), kb.i32(0))),
            [&] {
              kb.storeAt(kb.i64(0), state.it, slot);
              if (state.valid)
                kb.storeAt(kb.i32(0), state.valid, slot);
              for (int64_t f = 0; f < 4; ++f)
                kb.storeAt(kb.i32(0), state.predAt,
                           kb.add(kb.mul(slot, kb.i32(4)), kb.i32(f)));
              if (state.obsRows)
                kb.storeAt(kb.i32(0), state.obsRows, slot);
            });
}

RowChecks mlir::spin::gpu_codegen::checkRow(KernelBuilder &kb, Value p,
                                            Value n, int64_t capacity,
                                            int64_t reach) {
  Value lengthOk =
      kb.andI(kb.cmp(CmpIPredicate::sge, n, kb.i32(0)),
              kb.cmp(CmpIPredicate::sle, n, kb.i32(std::min(capacity, reach))));
  Value positionOk =
      kb.andI(kb.cmp(CmpIPredicate::slt, p, kb.i32(capacity)),
              kb.cmp(CmpIPredicate::sle, n, kb.add(p, kb.i32(1))));
  return {lengthOk, positionOk};
}
