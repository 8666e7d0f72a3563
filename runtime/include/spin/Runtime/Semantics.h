//===- Semantics.h - SPIN's integer rules, shared by every backend -*- C++ -*-===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
// The rules of SPIN_SPEC §3 whose results must be bit-identical on the CPU,
// on the GPU and in host-side checks: the block budget, the forced blocks,
// the split of the budget into explored and exploited blocks, and the
// deterministic exploration hash. Each is written once, as a template over
// an operation set `Ops`: `HostOps` below evaluates it on the host, and the
// compiler's CodeBuilder (spin/Conversion/Utils/CodeBuilder.h) emits it as
// IR with the same operations in the same order, so that every backend
// computes each rule from this one definition. (The numpy reference in
// test/reference stays independent on purpose.) No MLIR, no CUDA.
//
//===----------------------------------------------------------------------===//

#ifndef SPIN_RUNTIME_SEMANTICS_H
#define SPIN_RUNTIME_SEMANTICS_H

#include <cstdint>
#include <utility>
#include <type_traits>

namespace spin::runtime {

//===----------------------------------------------------------------------===//
// The rules, once
//===----------------------------------------------------------------------===//

/// The splitmix64 finalizer (SPIN_SPEC §3.7) of the 64-bit value `x`.
template <typename Ops, typename U64>
constexpr U64 splitmix64(Ops &o, U64 x) {
  x = o.add(x, o.u64(0x9e3779b97f4a7c15ULL));
  x = o.mul(o.xorI(x, o.shrU(x, o.i64(30))), o.u64(0xbf58476d1ce4e5b9ULL));
  x = o.mul(o.xorI(x, o.shrU(x, o.i64(27))), o.u64(0x94d049bb133111ebULL));
  return o.xorI(x, o.shrU(x, o.i64(31)));
}

/// The part of the exploration hash shared by every block of a request's
/// step: `mix(mix(mix(mixedSeed ^ requestId) ^ layer) ^ iteration)`, where
/// `mixedSeed = mix(seed)`. Every row of an MTP step passes the same
/// `iteration`, so rows prefer the same blocks. `layer` is a constant
/// (uint64_t) or, for code shared by several layers, a value.
template <typename Ops, typename U64, typename Layer>
constexpr U64 explorationBase(Ops &o, U64 mixedSeed, U64 requestId,
                              Layer layer, U64 iteration) {
  U64 base = o.mix(o.xorI(mixedSeed, requestId));
  if constexpr (std::is_same_v<Layer, uint64_t>)
    base = o.mix(o.xorI(base, o.u64(layer)));
  else
    base = o.mix(o.xorI(base, layer));
  return o.mix(o.xorI(base, iteration));
}

/// The exploration rank of `block` from its step's `base`: the `e`
/// candidates with the smallest rank are explored (ties to the lower block
/// index).
template <typename Ops, typename U64>
constexpr U64 explorationRankOf(Ops &o, U64 base, U64 block) {
  return o.mix(o.xorI(base, block));
}

/// The number of blocks `ceil(numSlots / blockSize)` covering `numSlots`.
constexpr int64_t blockCount(int64_t numSlots, int64_t blockSize) {
  return (numSlots + blockSize - 1) / blockSize;
}

/// The block budget `m = min(B, max(ceil(K / b), ceil((1 - rho) * B)))` of
/// SPIN_SPEC §3.4 for `numBlocks` (B, an i64, non-negative), with the last
/// ceiling taken as `ceil((1.0 - rho) * B - 1e-9)` in double precision.
template <typename Ops, typename I64, typename F64 = decltype(
                                          std::declval<Ops &>().f64(0.0))>
constexpr I64 blockBudgetOf(Ops &o, I64 numBlocks, int64_t blockSize, int64_t topk,
                            double sparsity) {
  I64 byK = o.i64(blockCount(topk, blockSize));
  F64 keep = o.sub(o.mul(o.f64(1.0 - sparsity), o.toF64(numBlocks)),
                   o.f64(1e-9));
  I64 bySparsity = o.ceilToI64(keep);
  return o.minS(numBlocks, o.maxS(byK, o.maxS(bySparsity, o.i64(0))));
}

/// The forced blocks |F| of a row of `numBlocks` blocks (SPIN_SPEC §3.5):
/// its first and last block, one block when they coincide.
template <typename Ops, typename I>
constexpr I forcedBlocksOf(Ops &o, I numBlocks) {
  return o.select(o.eq(numBlocks, o.constantLike(numBlocks, 1)),
                  o.constantLike(numBlocks, 1), o.constantLike(numBlocks, 2));
}

/// How the budget `m` left after the forced blocks splits (SPIN_SPEC §3.6):
/// `{e, m - |F| - e}`, explored and exploited blocks, with the exploration
/// budget `e = min(floor(gamma * m), m - |F|)` never negative. `budget` is
/// `m`; `budgetWide` the same value as an i64 for the product.
template <typename Ops, typename I, typename IW>
constexpr std::pair<I, I> budgetSplitOf(Ops &o, I budget, IW budgetWide,
                                        I forced, double explore) {
  // floor of a non-negative product: truncation.
  I wanted = o.narrowLike(
      o.truncToI64(o.mul(o.f64(explore), o.toF64(budgetWide))), budget);
  I room = o.select(o.gtS(budget, forced), o.sub(budget, forced),
                    o.constantLike(budget, 0));
  I explored = o.minS(wanted, room);
  return {explored, o.sub(room, explored)};
}

/// The rules' operations on host integers and doubles.
struct HostOps {
  constexpr uint64_t u64(uint64_t v) const { return v; }
  constexpr int64_t i64(int64_t v) const { return v; }
  constexpr double f64(double v) const { return v; }
  constexpr uint64_t add(uint64_t a, uint64_t b) const { return a + b; }
  constexpr uint64_t mul(uint64_t a, uint64_t b) const { return a * b; }
  constexpr uint64_t xorI(uint64_t a, uint64_t b) const { return a ^ b; }
  constexpr uint64_t shrU(uint64_t a, int64_t s) const { return a >> s; }
  constexpr double sub(double a, double b) const { return a - b; }
  constexpr double mul(double a, double b) const { return a * b; }
  constexpr int64_t minS(int64_t a, int64_t b) const { return a < b ? a : b; }
  constexpr int64_t maxS(int64_t a, int64_t b) const { return a > b ? a : b; }
  constexpr double toF64(int64_t v) const { return static_cast<double>(v); }
  constexpr int64_t sub(int64_t a, int64_t b) const { return a - b; }
  constexpr bool eq(int64_t a, int64_t b) const { return a == b; }
  constexpr bool gtS(int64_t a, int64_t b) const { return a > b; }
  constexpr int64_t select(bool c, int64_t a, int64_t b) const {
    return c ? a : b;
  }
  constexpr int64_t constantLike(int64_t, int64_t v) const { return v; }
  constexpr int64_t narrowLike(int64_t v, int64_t) const { return v; }
  constexpr int64_t truncToI64(double x) const {
    return static_cast<int64_t>(x);
  }
  constexpr int64_t ceilToI64(double x) const {
    auto truncated = static_cast<int64_t>(x);
    return static_cast<double>(truncated) < x ? truncated + 1 : truncated;
  }
  constexpr uint64_t mix(uint64_t x) const;
};

/// The splitmix64 finalizer (SPIN_SPEC §3.7).
constexpr uint64_t mix(uint64_t x) {
  HostOps o;
  return splitmix64(o, x);
}

constexpr uint64_t HostOps::mix(uint64_t x) const { return runtime::mix(x); }

/// Exploration rank of `block` (explorationBase, explorationRankOf).
constexpr uint64_t explorationRank(uint64_t seed, uint64_t requestId,
                                   uint64_t layer, uint64_t iteration,
                                   uint64_t block) {
  HostOps o;
  return explorationRankOf(
      o, explorationBase(o, mix(seed), requestId, layer, iteration), block);
}

/// The block budget `m = min(B, max(ceil(K / b), ceil((1 - rho) * B)))` of
/// SPIN_SPEC §3.4, with the last ceiling taken as
/// `ceil((1.0 - rho) * B - 1e-9)` in double precision. `numBlocks` is `B`.
int64_t blockBudget(int64_t numBlocks, int64_t blockSize, int64_t topk,
                    double sparsity);

/// The exploration budget `e = min(floor(gamma * m), m - forced)` of
/// SPIN_SPEC §3.6 (never negative).
int64_t explorationBudget(int64_t budget, int64_t forced, double explore);

} // namespace spin::runtime

#endif // SPIN_RUNTIME_SEMANTICS_H
