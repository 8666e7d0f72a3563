//===- SemanticsTest.cpp - tests of SPIN's integer rules ------------------===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
//===----------------------------------------------------------------------===//

#include "spin/Runtime/Semantics.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace spin::runtime;

namespace {

// splitmix64's published first outputs for state 0 are mix(0), mix(g),
// mix(2g), ... with g the golden-ratio increment; our `mix` adds g first.
TEST(Semantics, MixMatchesSplitMix64Sequence) {
  EXPECT_EQ(mix(0), 0xe220a8397b1dcdafULL);
  EXPECT_EQ(mix(0x9e3779b97f4a7c15ULL), 0x6e789e6aa1b965f4ULL);
  EXPECT_EQ(mix(0x3c6ef372fe94f82aULL), 0x06c45d188009454fULL);
}

TEST(Semantics, ExplorationRankChainsMixInSpecOrder) {
  uint64_t expected = mix(mix(mix(mix(mix(7) ^ 11) ^ 3) ^ 5) ^ 2);
  EXPECT_EQ(explorationRank(7, 11, 3, 5, 2), expected);
  // Every input changes the rank.
  EXPECT_NE(explorationRank(8, 11, 3, 5, 2), expected);
  EXPECT_NE(explorationRank(7, 12, 3, 5, 2), expected);
  EXPECT_NE(explorationRank(7, 11, 4, 5, 2), expected);
  EXPECT_NE(explorationRank(7, 11, 3, 6, 2), expected);
  EXPECT_NE(explorationRank(7, 11, 3, 5, 3), expected);
}

TEST(Semantics, BlockCountRoundsUp) {
  EXPECT_EQ(blockCount(0, 64), 0);
  EXPECT_EQ(blockCount(1, 64), 1);
  EXPECT_EQ(blockCount(64, 64), 1);
  EXPECT_EQ(blockCount(65, 64), 2);
}

TEST(Semantics, BudgetFollowsSparsity) {
  // 100 blocks at 40 % sparsity keep 60; K = 512 needs only 8.
  EXPECT_EQ(blockBudget(100, 64, 512, 0.4), 60);
  EXPECT_EQ(blockBudget(100, 64, 512, 0.5), 50);
  EXPECT_EQ(blockBudget(100, 64, 512, 0.0), 100);
  // ceil(0.3 * 10) must be 3 although (1 - 0.7) * 10 is 3.0000000000000004.
  EXPECT_EQ(blockBudget(10, 1, 1, 0.7), 3);
  // ceil(0.9 * 7) = ceil(6.3) = 7.
  EXPECT_EQ(blockBudget(7, 1, 1, 0.1), 7);
}

TEST(Semantics, BudgetHasRoomForTopK) {
  // K = 2048 at b = 64 needs 32 blocks even at 90 % sparsity.
  EXPECT_EQ(blockBudget(100, 64, 2048, 0.9), 32);
  // ... but never more than there are.
  EXPECT_EQ(blockBudget(20, 64, 2048, 0.9), 20);
  EXPECT_EQ(blockBudget(100, 64, 2049, 1.0), 33);
  EXPECT_EQ(blockBudget(0, 64, 512, 0.5), 0);
}

TEST(Semantics, ExplorationBudgetIsCappedByFreeSlots) {
  EXPECT_EQ(explorationBudget(60, 2, 0.05), 3);
  EXPECT_EQ(explorationBudget(60, 2, 0.0), 0);
  EXPECT_EQ(explorationBudget(10, 2, 1.0), 8);
  EXPECT_EQ(explorationBudget(2, 2, 0.5), 0);
  EXPECT_EQ(explorationBudget(1, 1, 1.0), 0);
}

} // namespace
