//===- Semantics.h - SPIN's integer rules, shared by every backend -*- C++ -*-===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
// The few integer rules of SPIN_SPEC §3 whose results must be bit-identical
// on the CPU, on the GPU and in host-side checks: the block budget and the
// deterministic exploration ranking. No MLIR, no CUDA.
//
//===----------------------------------------------------------------------===//

#ifndef SPIN_RUNTIME_SEMANTICS_H
#define SPIN_RUNTIME_SEMANTICS_H

#include <cstdint>

namespace spin::runtime {

/// The splitmix64 finalizer (SPIN_SPEC §3.7).
constexpr uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

/// Exploration rank of `block`: the `e` candidates with the smallest rank
/// are explored (ties to the lower block index). Every row of an MTP step
/// passes the same `iteration`, so rows prefer the same blocks.
constexpr uint64_t explorationRank(uint64_t seed, uint64_t requestId,
                                   uint64_t layer, uint64_t iteration,
                                   uint64_t block) {
  return mix(mix(mix(mix(mix(seed) ^ requestId) ^ layer) ^ iteration) ^ block);
}

/// Number of blocks `ceil(numSlots / blockSize)` covering `numSlots` slots.
constexpr int64_t blockCount(int64_t numSlots, int64_t blockSize) {
  return (numSlots + blockSize - 1) / blockSize;
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
