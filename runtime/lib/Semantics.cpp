//===- Semantics.cpp - SPIN's integer rules -------------------------------===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
//===----------------------------------------------------------------------===//

#include "spin/Runtime/Semantics.h"


namespace spin::runtime {

int64_t blockBudget(int64_t numBlocks, int64_t blockSize, int64_t topk,
                    double sparsity) {
  if (numBlocks <= 0)
    return 0;
  HostOps o;
  return blockBudgetOf(o, numBlocks, blockSize, topk, sparsity);
}

int64_t explorationBudget(int64_t budget, int64_t forced, double explore) {
  HostOps o;
  return budgetSplitOf(o, budget, budget, forced, explore).first;
}

} // namespace spin::runtime
