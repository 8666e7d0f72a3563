//===- CpuExecutableTest.cpp - JIT step programs through the C++ API ------===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
//===----------------------------------------------------------------------===//

#include "spin/ExecutionEngine/CpuExecutable.h"
#include "spin/Runtime/StatePool.h"

#include <gtest/gtest.h>

#include <cstring>

using namespace mlir::spin;
namespace rt = ::spin::runtime;

namespace {

uint16_t bf16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  return static_cast<uint16_t>(bits >> 16); // exact for the small integers used
}

IndexerConfig tinyConfig() {
  IndexerConfig config;
  config.heads = 1;
  config.headDim = 2;
  config.topk = 3;
  config.pageSize = 4;
  config.maxPages = 2;
  config.keyFormat = "bf16";
  return config;
}

TEST(CpuExecutable, GeneratedGraphRejectsBadConfig) {
  IndexerConfig config = tinyConfig();
  config.keyFormat = "int4";
  auto graph = buildIndexerGraph(config);
  ASSERT_FALSE(graph.ok());
  EXPECT_NE(graph.message().find("'int4'"), std::string::npos);
  config = tinyConfig();
  config.heads = 0;
  EXPECT_FALSE(buildIndexerGraph(config).ok());
}

TEST(CpuExecutable, CompileErrorsCarryDiagnostics) {
  auto exe = CpuExecutable::compile("func.func @f() { spin.bogus }", "f", nullptr);
  ASSERT_FALSE(exe.ok());
  EXPECT_NE(exe.message().find("cannot parse"), std::string::npos) << exe.message();
  auto graph = buildIndexerGraph(tinyConfig());
  ASSERT_TRUE(graph.ok());
  SparsifyPipelineOptions options;
  options.sparsity = 1.5;
  exe = CpuExecutable::compile(*graph, "indexer_layer", &options);
  ASSERT_FALSE(exe.ok());
  EXPECT_NE(exe.message().find("'sparsity' must be in [0, 1], got 1.5"),
            std::string::npos)
      << exe.message();
}

TEST(CpuExecutable, StateArgumentsWithoutALayerAreRefused) {
  // Which layer's state to bind comes from spin.layer: without it the
  // function is refused with the argument named, never run.
  auto exe = CpuExecutable::compile(
      "func.func @f(%v: memref<?x?xf32> {spin.state = \"v\"},\n"
      "             %ids: memref<?xi64> {spin.request_ids}) {\n"
      "  return\n"
      "}\n",
      "f", nullptr);
  ASSERT_FALSE(exe.ok());
  EXPECT_NE(exe.message().find("'spin.state' needs a 'spin.layer'"),
            std::string::npos)
      << exe.message();
}

TEST(CpuExecutable, CacheReusesCompilations) {
  auto graph = buildIndexerGraph(tinyConfig());
  ASSERT_TRUE(graph.ok());
  SparsifyPipelineOptions a, b;
  a.blockSize = b.blockSize = 2;
  b.sparsity = 0.2;
  auto first = CpuExecutable::compileCached(*graph, "indexer_layer", &a);
  auto again = CpuExecutable::compileCached(*graph, "indexer_layer", &a);
  auto other = CpuExecutable::compileCached(*graph, "indexer_layer", &b);
  auto dense = CpuExecutable::compileCached(*graph, "indexer_layer", nullptr);
  ASSERT_TRUE(first.ok()) << first.message();
  ASSERT_TRUE(again.ok() && other.ok() && dense.ok());
  EXPECT_EQ(first->get(), again->get());
  EXPECT_NE(first->get(), other->get());
  EXPECT_NE(first->get(), dense->get());
}

/// Two decode steps of one request, checked by hand: z is the first key
/// component; logical slots hold [2 8 6 6 | 5 1 7 3] through the block
/// table [1, 0]. Step 1 (N = 7) is a warm-up: top-3 = 1, 6, 2. Step 2
/// (N = 8, sparsity 0.25) scores blocks 0, 1, 3 of 4 (see
/// test/Conversion/SpinToSCF/decode_runner.mlir for the arithmetic).
TEST(CpuExecutable, RunsSparsifiedStepsWithState) {
  IndexerConfig config = tinyConfig();
  auto graph = buildIndexerGraph(config);
  ASSERT_TRUE(graph.ok());
  SparsifyPipelineOptions options;
  options.sparsity = 0.25;
  options.blockSize = 2;
  auto exe = CpuExecutable::compile(*graph, "indexer_layer", &options);
  ASSERT_TRUE(exe.ok()) << exe.message();
  const rt::StepProgram &program = (*exe)->program();

  rt::StatePoolOptions poolOptions;
  poolOptions.numLayers = 1;
  poolOptions.numSlots = 2;
  poolOptions.capacity = 8;
  poolOptions.maxRows = 1;
  poolOptions.blockSize = 2;
  auto pool = rt::StatePool::create(poolOptions);
  ASSERT_TRUE(pool.ok());
  ASSERT_TRUE((*pool)->acquire(1).ok());

  float page0[] = {5, 1, 7, 3}, page1[] = {2, 8, 6, 6};
  std::vector<uint16_t> keys(2 * 4 * 2, bf16(9));
  for (int s = 0; s < 4; ++s) {
    keys[(0 * 4 + s) * 2] = bf16(page0[s]);
    keys[(1 * 4 + s) * 2] = bf16(page1[s]);
  }
  std::vector<uint16_t> q = {bf16(1), bf16(0)};
  std::vector<float> w = {1};
  std::vector<int32_t> table = {1, 0};
  std::vector<int64_t> ids = {1};
  std::vector<int32_t> topk(3);
  std::vector<float> sparsity(1);
  for (auto [n, expectedSparsity] : {std::pair{7, 0.0f}, std::pair{8, 0.25f}}) {
    std::vector<int32_t> lengths = {n}, positions = {n - 1};
    std::map<std::string, rt::TensorRef> inputs = {
        {"q", {q.data(), {1, 1, 1, 2}, rt::DType::bf16}},
        {"w", {w.data(), {1, 1, 1}, rt::DType::f32}},
        {"keys", {keys.data(), {2, 4, 2}, rt::DType::bf16}},
        {"block_table", {table.data(), {1, 2}, rt::DType::i32}},
        {"lengths", {lengths.data(), {1, 1}, rt::DType::i32}},
        {"positions", {positions.data(), {1, 1}, rt::DType::i32}},
        {"request_ids", {ids.data(), {1}, rt::DType::i64}}};
    std::map<std::string, rt::TensorRef> outputs = {
        {"topk", {topk.data(), {1, 1, 3}, rt::DType::i32}},
        {"sparsity", {sparsity.data(), {1, 1}, rt::DType::f32}}};
    rt::Status status = program.run(**pool, inputs, outputs);
    ASSERT_TRUE(status.ok()) << status.message();
    EXPECT_EQ(topk, (std::vector<int32_t>{1, 6, 2})) << "N = " << n;
    EXPECT_FLOAT_EQ(sparsity[0], expectedSparsity) << "N = " << n;
  }
  EXPECT_EQ(*(*pool)->iteration(1, 0), 2);
  // V[1] = 0.5 * 0.5 * 8 + 0.5 * 8 after two updates of slot 1 (z = 8).
  EXPECT_FLOAT_EQ((*(*pool)->v(1, 0))[1], 6.0f);
}

} // namespace
