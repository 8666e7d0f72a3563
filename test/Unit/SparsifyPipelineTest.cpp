//===- SparsifyPipelineTest.cpp - the pipeline through its C++ API --------===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
// C++ users build spin-sparsify-pipeline with the same typed options as
// spin-opt, without pass-pipeline strings.
//
//===----------------------------------------------------------------------===//

#include "spin/Dialect/Spin/IR/SpinOps.h"
#include "spin/Pipelines/Pipelines.h"
#include "spin/InitAllSpin.h"

#include "mlir/Dialect/Async/IR/Async.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"

#include <gtest/gtest.h>

using namespace mlir;

namespace {

constexpr const char *kDenseLayer = R"mlir(
func.func @layer(%q: tensor<2x4x4x16xbf16>, %w: tensor<2x4x4xf32>,
                 %k: tensor<?x64x16xf8E4M3FN>, %sc: tensor<?x64xf32>,
                 %bt: tensor<2x4xi32>, %n: tensor<2x4xi32>) -> tensor<2x4x128xi32> {
  %z = spin.dense_indexer q(%q : tensor<2x4x4x16xbf16>) w(%w : tensor<2x4x4xf32>)
      keys(%k : tensor<?x64x16xf8E4M3FN>) scales(%sc : tensor<?x64xf32>)
      block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x4xi32>)
      -> tensor<2x4x256xf32>
  %t = spin.topk %z lengths(%n : tensor<2x4xi32>) {k = 128 : i64}
      : tensor<2x4x256xf32> -> tensor<2x4x128xi32>
  return %t : tensor<2x4x128xi32>
}
)mlir";

class SparsifyPipelineTest : public ::testing::Test {
protected:
  SparsifyPipelineTest() {
    DialectRegistry registry;
    spin::registerSpinDialects(registry);
    context.appendDialectRegistry(registry);
    context.loadAllAvailableDialects();
  }

  OwningOpRef<ModuleOp> parse() {
    return parseSourceString<ModuleOp>(kDenseLayer, &context);
  }

  template <typename OpTy>
  int count(ModuleOp module) {
    int n = 0;
    module.walk([&](OpTy) { ++n; });
    return n;
  }

  MLIRContext context;
};

TEST_F(SparsifyPipelineTest, TypedOptionsReachThePasses) {
  OwningOpRef<ModuleOp> module = parse();
  ASSERT_TRUE(module);

  spin::SparsifyPipelineOptions options;
  options.sparsity = 0.5;
  options.explore = 0.25;
  options.seed = 11;
  options.mtpMask = spin::MtpMask::row0;
  options.mtpUpdate = spin::MtpUpdate::row0;
  PassManager pm(&context);
  spin::buildSparsifyPipeline(pm, options);
  ASSERT_TRUE(succeeded(pm.run(*module)));

  EXPECT_EQ(count<spin::DenseIndexerOp>(*module), 0);
  EXPECT_EQ(count<spin::FusedScoreOp>(*module), 1);
  EXPECT_EQ(count<async::ExecuteOp>(*module), 2);

  spin::FusedSelectOp select;
  module->walk([&](spin::FusedSelectOp op) { select = op; });
  ASSERT_TRUE(select);
  EXPECT_DOUBLE_EQ(select.getSparsity().convertToDouble(), 0.5);
  EXPECT_DOUBLE_EQ(select.getExplore().convertToDouble(), 0.25);
  EXPECT_EQ(select.getSeed(), 11);
  EXPECT_EQ(select.getMtpMask(), spin::MtpMask::row0);
  // The MTP step commits the previous step first, with the chosen policy.
  auto commit = select.getState().getDefiningOp<spin::CommitOp>();
  ASSERT_TRUE(commit);
  EXPECT_EQ(commit.getMtpUpdate(), spin::MtpUpdate::row0);
}

TEST_F(SparsifyPipelineTest, StagesCanBeSwitchedOff) {
  OwningOpRef<ModuleOp> module = parse();
  ASSERT_TRUE(module);

  spin::SparsifyPipelineOptions options;
  options.fuse = false;
  options.scheduleAsync = false;
  PassManager pm(&context);
  spin::buildSparsifyPipeline(pm, options);
  ASSERT_TRUE(succeeded(pm.run(*module)));

  EXPECT_EQ(count<spin::SparseIndexerOp>(*module), 1);
  EXPECT_EQ(count<spin::ObserveOp>(*module), 1);
  EXPECT_EQ(count<spin::FusedScoreOp>(*module), 0);
  EXPECT_EQ(count<async::ExecuteOp>(*module), 0);
}

TEST_F(SparsifyPipelineTest, OutOfRangeOptionFailsThePipeline) {
  OwningOpRef<ModuleOp> module = parse();
  ASSERT_TRUE(module);

  std::string diagnostics;
  ScopedDiagnosticHandler handler(&context, [&](Diagnostic &diag) {
    diagnostics += diag.str();
    return success();
  });
  spin::SparsifyPipelineOptions options;
  options.emaDecay = 1.5;
  PassManager pm(&context);
  spin::buildSparsifyPipeline(pm, options);
  EXPECT_TRUE(failed(pm.run(*module)));
  EXPECT_NE(diagnostics.find("option 'ema-decay' must be in [0, 1], got 1.5"),
            std::string::npos)
      << diagnostics;
  // Nothing was rewritten.
  EXPECT_EQ(count<spin::DenseIndexerOp>(*module), 1);
}

} // namespace
