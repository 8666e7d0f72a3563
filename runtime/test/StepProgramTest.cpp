//===- StepProgramTest.cpp - tests of the step API ------------------------===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
// The compiled function is replaced by a fake that records the descriptors
// it receives, so these tests check the argument binding and every input
// check of docs/Runtime-ABI.md without a compiler.
//
//===----------------------------------------------------------------------===//

#include "spin/Runtime/StepProgram.h"

#include "spin/Runtime/Span.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <map>
#include <thread>

using namespace spin::runtime;

namespace {

/// What the fake compiled function saw: per argument, the aligned pointer
/// and the sizes of its descriptor.
struct Call {
  std::vector<void *> data;
  std::vector<std::vector<int64_t>> sizes;
  /// Copies of rank-1 i32 arguments (slots, accepted): the runtime owns
  /// them only for the duration of the call.
  std::map<size_t, std::vector<int32_t>> ints;
};
thread_local Call lastCall;
std::atomic<int> calls{0};
std::vector<int> ranks;      // of the signature under test, set per test
std::vector<bool> int32Args; // which arguments are i32 (copied by fakeStep)

void fakeStep(void **args) {
  lastCall = {};
  for (size_t i = 0; i < ranks.size(); ++i) {
    auto *words = *static_cast<int64_t **>(args[i]);
    void *aligned;
    std::memcpy(&aligned, &words[1], sizeof(void *));
    lastCall.data.push_back(aligned);
    lastCall.sizes.emplace_back(words + 3, words + 3 + ranks[i]);
    if (ranks[i] == 1 && i < int32Args.size() && int32Args[i]) {
      auto *values = static_cast<int32_t *>(aligned);
      lastCall.ints[i].assign(values, values + words[3]);
    }
  }
  ++calls;
}

ArgSpec arg(ArgSpec::Role role, std::string name, DType dtype,
            std::vector<int64_t> shape, int64_t layer = -1) {
  ArgSpec spec;
  spec.role = role;
  spec.name = std::move(name);
  spec.dtype = dtype;
  spec.shape = std::move(shape);
  spec.layer = layer;
  return spec;
}

/// The signature of a sparsified MTP layer with R = 2, H = 2, D = 4, pages
/// of 4 slots, block table width 3, K = 2.
std::vector<ArgSpec> mtpSignature() {
  using R = ArgSpec::Role;
  return {arg(R::Input, "q", DType::bf16, {-1, 2, 2, 4}),
          arg(R::Input, "w", DType::f32, {-1, 2, 2}),
          arg(R::Input, "keys", DType::bf16, {-1, 4, 4}),
          arg(R::Input, "block_table", DType::i32, {-1, 3}),
          arg(R::Input, "lengths", DType::i32, {-1, 2}),
          arg(R::Positions, "positions", DType::i32, {-1, 2}),
          arg(R::RequestIds, "request_ids", DType::i64, {-1}),
          arg(R::Accepted, "accepted", DType::i32, {-1}),
          arg(R::Slots, "slots", DType::i32, {-1}),
          arg(R::State, "v", DType::f32, {-1, -1}, 0),
          arg(R::State, "d", DType::f32, {-1, -1}, 0),
          arg(R::State, "it", DType::i64, {-1}, 0),
          arg(R::State, "obs_rows", DType::i32, {-1}, 0),
          arg(R::State, "obs_mask", DType::i8, {-1, -1}, 0),
          arg(R::State, "obs_z", DType::f32, {-1, -1, -1}, 0),
          arg(R::Output, "topk", DType::i32, {-1, 2, 2})};
}

/// A pool of `slots` requests for mtpSignature's state.
std::unique_ptr<StatePool> mtpPool(int64_t slots) {
  StatePoolOptions options;
  options.numLayers = 1;
  options.numSlots = slots;
  options.capacity = 12;
  options.maxRows = 2;
  options.blockSize = 4;
  auto created = StatePool::create(options);
  EXPECT_TRUE(created.ok()) << created.message();
  return created.ok() ? std::move(*created) : nullptr;
}

class StepProgramTest : public ::testing::Test {
protected:
  void SetUp() override {
    pool = mtpPool(4);
    ASSERT_TRUE(pool);
    signature = mtpSignature();
    ranks.clear();
    int32Args.clear();
    for (const ArgSpec &a : signature) {
      ranks.push_back(static_cast<int>(a.shape.size()));
      int32Args.push_back(a.dtype == DType::i32);
    }
    ASSERT_TRUE(pool->acquire(7).ok());
    ASSERT_TRUE(pool->acquire(9).ok());
  }

  /// Inputs for requests 7 and 9, lengths 5/6 and 9/10 (positions = N - 1).
  std::map<std::string, TensorRef> inputs() {
    return {{"q", {q.data(), {2, 2, 2, 4}, DType::bf16}},
            {"w", {w.data(), {2, 2, 2}, DType::f32}},
            {"keys", {keys.data(), {5, 4, 4}, DType::bf16}},
            {"block_table", {table.data(), {2, 3}, DType::i32}},
            {"lengths", {lengths.data(), {2, 2}, DType::i32}},
            {"positions", {positions.data(), {2, 2}, DType::i32}},
            {"request_ids", {ids.data(), {2}, DType::i64}}};
  }
  std::map<std::string, TensorRef> outputs() {
    return {{"topk", {topk.data(), {2, 2, 2}, DType::i32}}};
  }

  std::unique_ptr<StatePool> pool;
  std::vector<ArgSpec> signature;
  std::vector<uint16_t> q = std::vector<uint16_t>(32);
  std::vector<float> w = std::vector<float>(8);
  std::vector<uint16_t> keys = std::vector<uint16_t>(80);
  std::vector<int32_t> table = {0, 1, 2, 3, 4, 0};
  std::vector<int32_t> lengths = {5, 6, 9, 10};
  std::vector<int32_t> positions = {4, 5, 8, 9};
  std::vector<int64_t> ids = {7, 9};
  std::vector<int32_t> topk = std::vector<int32_t>(8);
};

TEST_F(StepProgramTest, BindsInputsStateAndOutputsInSignatureOrder) {
  StepProgram program(fakeStep, signature);
  EXPECT_EQ(program.rows(), 2);
  EXPECT_TRUE(program.commits());
  ASSERT_TRUE(program.run(*pool, inputs(), outputs()).ok());
  ASSERT_EQ(lastCall.data.size(), signature.size());
  EXPECT_EQ(lastCall.data[0], q.data());
  EXPECT_EQ(lastCall.sizes[0], (std::vector<int64_t>{2, 2, 2, 4}));
  EXPECT_EQ(lastCall.data[6], ids.data());
  // Slots of requests 7 and 9, in batch order.
  EXPECT_EQ(lastCall.ints[8],
            (std::vector<int32_t>{*pool->slotOf(7), *pool->slotOf(9)}));
  // State fields are the pool's arrays with the ABI's shapes.
  LayerBuffers layer = pool->layer(0);
  EXPECT_EQ(lastCall.data[9], layer.v);
  EXPECT_EQ(lastCall.sizes[9], (std::vector<int64_t>{4, 12}));
  EXPECT_EQ(lastCall.data[13], layer.obsMask);
  EXPECT_EQ(lastCall.sizes[13], (std::vector<int64_t>{4, 3}));
  EXPECT_EQ(lastCall.sizes[14], (std::vector<int64_t>{4, 1, 12})); // draft rows
  EXPECT_EQ(lastCall.data[15], topk.data());
}

TEST_F(StepProgramTest, PassesRecordedCommitsAndClearsThem) {
  StepProgram program(fakeStep, signature);
  // Pretend the previous step buffered 2 rows for request 9.
  pool->layer(0).obsRows[*pool->slotOf(9)] = 2;
  Status refused = program.run(*pool, inputs(), outputs());
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("request 9"), std::string::npos)
      << refused.message();
  ASSERT_TRUE(pool->commit(9, 1).ok());
  ASSERT_TRUE(program.run(*pool, inputs(), outputs()).ok());
  EXPECT_EQ(lastCall.ints[7], (std::vector<int32_t>{0, 1}));
  EXPECT_FALSE(pool->recordedCommit(9).has_value());
}

TEST_F(StepProgramTest, RejectsBadInputsNamingTheValue) {
  StepProgram program(fakeStep, signature);
  auto expectError = [&](std::map<std::string, TensorRef> in,
                         const std::string &needle) {
    int before = calls;
    Status s = program.run(*pool, in, outputs());
    EXPECT_FALSE(s.ok()) << needle;
    EXPECT_NE(s.message().find(needle), std::string::npos)
        << "message: " << s.message() << "\nexpected: " << needle;
    EXPECT_EQ(calls, before) << "the compiled code ran on bad input";
  };
  auto in = inputs();
  in.erase("w");
  expectError(in, "missing input 'w'");

  in = inputs();
  in["w"].dtype = DType::f16;
  expectError(in, "'w' has element type f16, expected f32");

  in = inputs();
  in["q"].shape = {2, 2, 3, 4};
  expectError(in, "'q' has shape [2, 2, 3, 4], expected [?, 2, 2, 4]");

  in = inputs();
  in["w"].shape = {3, 2, 2};
  expectError(in, "'w' has batch size 3 but other inputs have 2");

  lengths[1] = 13;
  positions[1] = 12;
  expectError(inputs(), "lengths[0][1] = 13 is outside [0, 12]");
  lengths[1] = 6;
  positions[1] = 5;

  positions[2] = 7;
  expectError(inputs(), "positions[1][0] = 7 must be at least lengths[1][0] - 1 = 8");
  // A row with no visible slot (length 0) and position -1: the position is
  // what is wrong, and the message says so (found by spin-fuzz-step, whose
  // first message read "-1 must be at least lengths[0][0] - 1 = -1").
  lengths[0] = 0;
  positions[0] = -1;
  expectError(inputs(), "positions[0][0] = -1 must be >= 0");
  lengths[0] = 5;
  positions[0] = 4;
  positions[2] = 8;

  positions[3] = 12;
  expectError(inputs(), "positions[1][1] = 12 exceeds the state capacity of 12 slots");
  positions[3] = 9;

  table[4] = 5;
  expectError(inputs(), "block_table[1][1] = 5 is not a page of the key cache [0, 5)");
  table[4] = 4;

  ids[1] = 8;
  expectError(inputs(), "request 8");
  ids[1] = 7;
  expectError(inputs(), "7");
  ids[1] = 9;

  in = inputs();
  in["bogus"] = in["w"];
  expectError(in, "unknown input 'bogus'");

  // Nothing was left marked busy by the refused steps.
  EXPECT_TRUE(program.run(*pool, inputs(), outputs()).ok());
}

TEST_F(StepProgramTest, DenseProgramsNeedNoState) {
  using R = ArgSpec::Role;
  std::vector<ArgSpec> dense = {
      arg(R::Input, "q", DType::bf16, {-1, 2, 2, 4}),
      arg(R::Input, "w", DType::f32, {-1, 2, 2}),
      arg(R::Input, "keys", DType::bf16, {-1, 4, 4}),
      arg(R::Input, "block_table", DType::i32, {-1, 3}),
      arg(R::Input, "lengths", DType::i32, {-1, 2}),
      arg(R::Output, "topk", DType::i32, {-1, 2, 2})};
  ranks = {4, 3, 3, 2, 2, 3};
  StepProgram program(fakeStep, dense);
  EXPECT_FALSE(program.commits());
  auto in = inputs();
  in.erase("positions");
  in.erase("request_ids");
  ASSERT_TRUE(program.run(*pool, in, outputs()).ok());
  EXPECT_EQ(lastCall.data.size(), dense.size());
}

TEST_F(StepProgramTest, DisjointRequestsStepConcurrently) {
  StepProgram program(fakeStep, signature);
  for (int64_t id : {100, 101})
    ASSERT_TRUE(pool->acquire(id).ok());
  std::atomic<int> failures{0};
  int before = calls;
  auto worker = [&](std::vector<int64_t> mine) {
    for (int i = 0; i < 200; ++i) {
      auto in = inputs();
      in["request_ids"].data = mine.data();
      std::vector<int32_t> out(8);
      std::map<std::string, TensorRef> o = {
          {"topk", {out.data(), {2, 2, 2}, DType::i32}}};
      if (!program.run(*pool, in, o).ok())
        ++failures;
    }
  };
  std::thread a(worker, std::vector<int64_t>{7, 9});
  std::thread b(worker, std::vector<int64_t>{100, 101});
  a.join();
  b.join();
  EXPECT_EQ(failures, 0);
  EXPECT_EQ(calls - before, 400);
}

/// A compiled step that advances every batch row's state: `it += 1` and
/// `v[slot][0] += 1` (mtpSignature's slots, v and it arguments).
void countingStep(void **args) {
  auto aligned = [&](size_t i) {
    auto *words = *static_cast<int64_t **>(args[i]);
    void *p;
    std::memcpy(&p, &words[1], sizeof(void *));
    return std::make_pair(p, words);
  };
  auto [slotsPtr, slotsDesc] = aligned(8);
  auto [vPtr, vDesc] = aligned(9);
  auto [itPtr, itDesc] = aligned(11);
  const auto *slots = static_cast<const int32_t *>(slotsPtr);
  for (int64_t b = 0; b < slotsDesc[3]; ++b) {
    static_cast<float *>(vPtr)[slots[b] * vDesc[4]] += 1.0f;
    static_cast<int64_t *>(itPtr)[slots[b]] += 1;
  }
  ++calls;
}

TEST_F(StepProgramTest, StepsRaceReleasesAndReadmissions) {
  // Two threads step their own pairs of requests while a third admits,
  // steps and releases requests over and over, so slots are freed and
  // handed out again while the others' steps run. Each request must end
  // with exactly its own steps applied, as in a sequential run: nothing
  // lost, nothing applied to another request's slot.
  std::unique_ptr<StatePool> six = mtpPool(6);
  ASSERT_TRUE(six);
  StatePool &shared = *six;
  StepProgram program(countingStep, signature);
  constexpr int kSteps = 300, kChurn = 150;
  std::atomic<int> failures{0};
  auto fail = [&](const std::string &what) {
    ADD_FAILURE() << what;
    failures.fetch_add(1);
  };
  auto stepAll = [&](std::vector<int64_t> &mine) {
    auto in = inputs();
    in["request_ids"].data = mine.data();
    std::vector<int32_t> out(8);
    std::map<std::string, TensorRef> o = {
        {"topk", {out.data(), {2, 2, 2}, DType::i32}}};
    return program.run(shared, in, o);
  };
  auto stepper = [&](std::vector<int64_t> mine) {
    for (int64_t id : mine)
      if (!shared.acquire(id).ok())
        return fail("acquire " + std::to_string(id));
    for (int i = 0; i < kSteps; ++i)
      if (Status s = stepAll(mine); !s.ok())
        return fail("step: " + s.message());
  };
  auto churn = [&] {
    for (int round = 0; round < kChurn; ++round) {
      std::vector<int64_t> mine = {500 + 2 * round, 501 + 2 * round};
      for (int64_t id : mine)
        if (!shared.acquire(id).ok())
          return fail("acquire " + std::to_string(id));
      for (int64_t id : mine)
        if (*shared.iteration(id, 0) != 0 || (*shared.v(id, 0))[0] != 0.0f)
          return fail("re-admitted request " + std::to_string(id) +
                      " does not start from a zero state");
      for (int i = 0; i < 3; ++i)
        if (Status s = stepAll(mine); !s.ok())
          return fail("step: " + s.message());
      for (int64_t id : mine) {
        if (*shared.iteration(id, 0) != 3 || (*shared.v(id, 0))[0] != 3.0f)
          return fail("request " + std::to_string(id) +
                      " does not hold exactly its own 3 steps");
        if (!shared.release(id).ok())
          return fail("release " + std::to_string(id));
      }
    }
  };
  std::thread a(stepper, std::vector<int64_t>{1, 2});
  std::thread b(stepper, std::vector<int64_t>{3, 4});
  std::thread c(churn);
  a.join();
  b.join();
  c.join();
  ASSERT_EQ(failures, 0);
  for (int64_t id : {1, 2, 3, 4}) {
    EXPECT_EQ(*shared.iteration(id, 0), kSteps) << "request " << id;
    EXPECT_EQ((*shared.v(id, 0))[0], float(kSteps)) << "request " << id;
  }
  EXPECT_EQ(shared.liveRequests(), 4);
}

TEST_F(StepProgramTest, ChecksEveryIndexersPagesAndScales) {
  // A second indexer with its own cache, scales, block table and lengths
  // (the names a multi-layer graph gives them): all of them are checked.
  using R = ArgSpec::Role;
  std::vector<ArgSpec> two = signature;
  two.insert(two.begin() + 5,
             {arg(R::Input, "keys_1", DType::fp8e4m3, {-1, 4, 4}),
              arg(R::Input, "scales_1", DType::f32, {-1, 4}),
              arg(R::Input, "block_table_1", DType::i32, {-1, 3}),
              arg(R::Input, "lengths_1", DType::i32, {-1, 2})});
  ranks.clear();
  int32Args.clear();
  for (const ArgSpec &a : two) {
    ranks.push_back(static_cast<int>(a.shape.size()));
    int32Args.push_back(a.dtype == DType::i32);
  }
  StepProgram program(fakeStep, two);
  std::vector<uint8_t> keys1(3 * 16);
  std::vector<float> scales1(3 * 4);
  std::vector<int32_t> table1 = {0, 1, 2, 2, 1, 0};
  std::vector<int32_t> lengths1 = {5, 6, 9, 10};
  auto in = [&] {
    auto i = inputs();
    i["keys_1"] = {keys1.data(), {3, 4, 4}, DType::fp8e4m3};
    i["scales_1"] = {scales1.data(), {3, 4}, DType::f32};
    i["block_table_1"] = {table1.data(), {2, 3}, DType::i32};
    i["lengths_1"] = {lengths1.data(), {2, 2}, DType::i32};
    return i;
  };
  ASSERT_TRUE(program.run(*pool, in(), outputs()).ok());
  int before = calls;
  table1[4] = 3; // page 3 exists in `keys` (5 pages) but not in `keys_1` (3)
  Status s = program.run(*pool, in(), outputs());
  EXPECT_EQ(s.message(),
            "block_table_1[1][1] = 3 is not a page of the key cache [0, 3)");
  table1[4] = 1;
  lengths1[2] = 10; // row 0 of request 9: N = 10 > p + 1 = 9
  s = program.run(*pool, in(), outputs());
  EXPECT_EQ(s.message(),
            "positions[1][0] = 8 must be at least lengths_1[1][0] - 1 = 9");
  lengths1[2] = 9;
  auto shortScales = in();
  shortScales["scales_1"].shape = {1, 4};
  s = program.run(*pool, shortScales, outputs());
  EXPECT_EQ(s.message(), "input 'scales_1' has shape [1, 4] but 'keys_1' "
                         "holds 3 pages of 4 slots");
  EXPECT_EQ(calls, before) << "the compiled code ran on bad input";
}

TEST_F(StepProgramTest, HandWrittenGraphsWithoutAKeyCacheAreChecked) {
  // A graph that takes scores directly (no paged keys): lengths are checked
  // against the scores' width, positions against lengths and capacity.
  using R = ArgSpec::Role;
  std::vector<ArgSpec> scoresOnly = {
      arg(R::Input, "scores", DType::f32, {-1, 1, 16}),
      arg(R::Input, "lengths", DType::i32, {-1, 1}),
      arg(R::Positions, "positions", DType::i32, {-1, 1}),
      arg(R::RequestIds, "request_ids", DType::i64, {-1}),
      arg(R::Slots, "slots", DType::i32, {-1}),
      arg(R::State, "v", DType::f32, {-1, -1}, 0),
      arg(R::Output, "topk", DType::i32, {-1, 1, 2})};
  ranks = {3, 2, 2, 1, 1, 2, 3};
  int32Args = {false, true, true, false, true, false, true};
  StepProgram program(fakeStep, scoresOnly);
  std::vector<float> scores(2 * 16);
  std::vector<int32_t> n = {10, 20}, p = {9, 19}, out(4);
  std::map<std::string, TensorRef> in = {
      {"scores", {scores.data(), {2, 1, 16}, DType::f32}},
      {"lengths", {n.data(), {2, 1}, DType::i32}},
      {"positions", {p.data(), {2, 1}, DType::i32}},
      {"request_ids", {ids.data(), {2}, DType::i64}}};
  std::map<std::string, TensorRef> o = {{"topk", {out.data(), {2, 1, 2}, DType::i32}}};
  EXPECT_EQ(program.run(*pool, in, o).message(),
            "lengths[1][0] = 20 is outside [0, 16], the slots of the scores");
  n[1] = 12;
  p[1] = 12;
  EXPECT_EQ(program.run(*pool, in, o).message(),
            "positions[1][0] = 12 exceeds the state capacity of 12 slots");
  p[1] = 11;
  EXPECT_TRUE(program.run(*pool, in, o).ok());
}

TEST_F(StepProgramTest, RefusesAPoolWithCoarserBlocks) {
  // The pool's per-block buffers (obs_mask) are sized by its block size: a
  // program with finer blocks would overrun them.
  for (ArgSpec &a : signature)
    if (a.role == ArgSpec::Role::State)
      a.blockSize = 2;
  StepProgram program(fakeStep, signature);
  Status s = program.run(*pool, inputs(), outputs());
  EXPECT_EQ(s.message(),
            "the state pool's block size (4) is larger than layer 0's SPIN "
            "block size (2): its per-block buffers cannot hold the program's "
            "blocks");
}

TEST_F(StepProgramTest, BindsLastObservedOnlyFromAPoolThatKeepsIt) {
  // A program that explores by block age takes last_observed last.
  signature.insert(signature.end() - 1,
                   arg(ArgSpec::Role::State, "last_observed", DType::i32,
                       {-1, -1}, 0));
  ranks.insert(ranks.end() - 1, 2);
  int32Args.insert(int32Args.end() - 1, false);
  StepProgram program(fakeStep, signature);
  int before = calls.load();
  Status refused = program.run(*pool, inputs(), outputs());
  EXPECT_EQ(refused.message(),
            "the program explores by block age (staleness-score or block-age) "
            "and needs per-block last_observed state on layer 0, but the "
            "state pool was created without it (set "
            "StatePoolOptions::lastObserved)");
  EXPECT_EQ(calls.load(), before);
  EXPECT_TRUE(pool->beginStep({7, 9}, true).ok()) << "refused step left "
                                                     "requests busy";
  pool->endStep({7, 9});

  StatePoolOptions options = pool->options();
  options.lastObserved = true;
  auto aged = StatePool::create(options);
  ASSERT_TRUE(aged.ok()) << aged.message();
  ASSERT_TRUE((*aged)->acquire(7).ok());
  ASSERT_TRUE((*aged)->acquire(9).ok());
  ASSERT_TRUE(program.run(**aged, inputs(), outputs()).ok());
  EXPECT_EQ(lastCall.data[15], (*aged)->layer(0).lastObserved);
  EXPECT_EQ(lastCall.sizes[15], (std::vector<int64_t>{4, 3}));
  EXPECT_EQ(lastCall.data[16], topk.data());
}

TEST_F(StepProgramTest, OverlappingStepsOfOneRequestAreRefused) {
  // A request inside a step cannot enter a second one.
  std::vector<int64_t> busy = {7};
  ASSERT_TRUE(pool->beginStep(Span<int64_t>(busy), true).ok());
  StepProgram program(fakeStep, signature);
  Status s = program.run(*pool, inputs(), outputs());
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("7"), std::string::npos) << s.message();
  pool->endStep(Span<int64_t>(busy));
  EXPECT_TRUE(program.run(*pool, inputs(), outputs()).ok());
}

TEST_F(StepProgramTest, RefusesAKeyCacheOfEmptyPages) {
  // A dynamic page dimension of 0 with every length 0 reached a division by
  // the page size in the page check.
  signature[2].shape = {-1, -1, 4};
  StepProgram program(fakeStep, signature);
  auto in = inputs();
  in["keys"].shape = {5, 0, 4};
  std::fill(lengths.begin(), lengths.end(), 0);
  int before = calls;
  Status s = program.run(*pool, in, outputs());
  EXPECT_EQ(s.message(), "input 'keys' has shape [5, 0, 4]: its pages (dim 1) "
                         "must hold at least one slot");
  EXPECT_EQ(calls, before);
}

TEST_F(StepProgramTest, ScalarInputsAreNotBatched) {
  // A rank-0 input has no batch dimension: it neither sets nor must match
  // the batch size (it was read as shape[0] of an empty shape).
  using R = ArgSpec::Role;
  signature.insert(signature.begin(), arg(R::Input, "scale", DType::f32, {}));
  ranks.insert(ranks.begin(), 0);
  int32Args.insert(int32Args.begin(), false);
  StepProgram program(fakeStep, signature);
  float scale = 0.5f;
  auto in = inputs();
  in["scale"] = {&scale, {}, DType::f32};
  ASSERT_TRUE(program.run(*pool, in, outputs()).ok());
  EXPECT_EQ(lastCall.data[0], &scale);
  EXPECT_EQ(lastCall.ints[9],
            (std::vector<int32_t>{*pool->slotOf(7), *pool->slotOf(9)}));

  // A rank-0 tensor given for a batched input is a rank error.
  in = inputs();
  in["scale"] = {&scale, {}, DType::f32};
  in["w"] = {w.data(), {}, DType::f32};
  EXPECT_EQ(program.run(*pool, in, outputs()).message(),
            "input 'w' has shape [], expected rank 3 [?, 2, 2]");
}

TEST_F(StepProgramTest, StatefulProgramsNeedRequestIds) {
  // Without request ids every row would step on slot 0's state.
  signature.erase(signature.begin() + 6);
  ranks.erase(ranks.begin() + 6);
  int32Args.erase(int32Args.begin() + 6);
  StepProgram program(fakeStep, signature);
  auto in = inputs();
  in.erase("request_ids");
  int before = calls;
  Status s = program.run(*pool, in, outputs());
  EXPECT_EQ(s.message(),
            "the program binds per-request state ('accepted') but takes no "
            "request_ids argument: it cannot tell the requests' state apart");
  EXPECT_EQ(calls, before);
  EXPECT_EQ(*pool->iteration(7, 0), 0);
}

TEST_F(StepProgramTest, RefusesPagedInputsOfTooLowRank) {
  // Hand-written signatures may give the page inputs any rank: the checks
  // index dims 0 and 1 of keys, scales, block tables, lengths and positions.
  using R = ArgSpec::Role;
  std::vector<ArgSpec> flat = {
      arg(R::Input, "keys", DType::bf16, {-1}),
      arg(R::Input, "block_table", DType::i32, {-1, 3}),
      arg(R::Input, "lengths", DType::i32, {-1, 2}),
      arg(R::Output, "topk", DType::i32, {-1, 2, 2})};
  ranks = {1, 2, 2, 3};
  int32Args = {false, true, true, true};
  StepProgram program(fakeStep, flat);
  std::map<std::string, TensorRef> in = {
      {"keys", {keys.data(), {80}, DType::bf16}},
      {"block_table", {table.data(), {2, 3}, DType::i32}},
      {"lengths", {lengths.data(), {2, 2}, DType::i32}}};
  int before = calls;
  EXPECT_EQ(program.run(*pool, in, outputs()).message(),
            "input 'keys' has shape [80]: a paged cache needs rank 2 or more "
            "[pages, page size, ...]");

  flat[0] = arg(R::Input, "keys", DType::bf16, {-1, 4, 4});
  flat[2] = arg(R::Input, "lengths", DType::i32, {-1});
  ranks = {3, 2, 1, 3};
  StepProgram oneRow(fakeStep, flat);
  in["keys"].shape = {5, 4, 4};
  in["lengths"].shape = {2};
  EXPECT_EQ(oneRow.run(*pool, in, outputs()).message(),
            "input 'lengths' has shape [2]: expected rank 2 [batch, rows]");
  EXPECT_EQ(calls, before);
}

TEST_F(StepProgramTest, OutputsMustHoldEveryRow) {
  // A run-time row dim of an output is written R times per request: an
  // output sized by anything else would be written past.
  signature.back().shape = {-1, -1, 2};
  StepProgram program(fakeStep, signature);
  std::map<std::string, TensorRef> small = {
      {"topk", {topk.data(), {2, 1, 2}, DType::i32}}};
  int before = calls;
  EXPECT_EQ(program.run(*pool, inputs(), small).message(),
            "output 'topk' has shape [2, 1, 2] but 'lengths' has 2 rows per "
            "request");
  EXPECT_EQ(calls, before);
  EXPECT_TRUE(program.run(*pool, inputs(), outputs()).ok());
}

} // namespace
