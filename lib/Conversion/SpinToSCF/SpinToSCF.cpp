//===- SpinToSCF.cpp - populate the spin-to-scf patterns ------------------===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
//===----------------------------------------------------------------------===//

#include "spin/Conversion/SpinToSCF/SpinToSCF.h"
#include "LoopBuilder.h"

using namespace mlir;
using namespace mlir::spin;

void mlir::spin::populateSpinToSCFConversionPatterns(
    RewritePatternSet &patterns, const StateBufferMap &buffers) {
  populateUnfusePatterns(patterns);
  populateIndexerLoweringPatterns(patterns);
  populateSelectLoweringPatterns(patterns, buffers);
  populateStateLoweringPatterns(patterns, buffers);
}
