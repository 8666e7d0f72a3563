//===- StatePoolTest.cpp - tests of the per-request SPIN state pool -------===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
//===----------------------------------------------------------------------===//

#include "spin/Runtime/StatePool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <limits>
#include <string>
#include <thread>
#include <utility>
#include <vector>

using namespace spin::runtime;

namespace {

/// Two layers, four slots, C = 100, up to 4 rows (d = 3), 16-slot blocks
/// (NBcap = 7).
StatePoolOptions smallOptions() {
  StatePoolOptions options;
  options.numLayers = 2;
  options.numSlots = 4;
  options.capacity = 100;
  options.maxRows = 4;
  options.blockSize = 16;
  return options;
}

std::unique_ptr<StatePool> makePool(const StatePoolOptions &options) {
  StatusOr<std::unique_ptr<StatePool>> pool = StatePool::create(options);
  EXPECT_TRUE(pool.ok()) << pool.message();
  return pool.ok() ? std::move(pool).value() : nullptr;
}

std::string createError(const StatePoolOptions &options) {
  StatusOr<std::unique_ptr<StatePool>> pool = StatePool::create(options);
  EXPECT_FALSE(pool.ok());
  return pool.message();
}

/// What a compiled decode step does to one request's state on `layer`:
/// writes V and D and advances `it`.
void fakeDecodeStep(const StatePool &pool, int32_t slot, int64_t layer,
                    float value) {
  LayerBuffers b = pool.layer(layer);
  for (int64_t i = 0; i < b.capacity; ++i) {
    b.v[slot * b.capacity + i] = value;
    b.d[slot * b.capacity + i] = -value;
  }
  b.it[slot] += 1;
}

/// What a compiled MTP step leaves behind: `rows` buffered observations on
/// every layer.
void fakeVerificationStep(const StatePool &pool, int32_t slot, int32_t rows) {
  for (int64_t l = 0; l < pool.options().numLayers; ++l) {
    LayerBuffers b = pool.layer(l);
    b.obsRows[slot] = rows;
    for (int32_t r = 0; r < rows; ++r) {
      b.obsPos[slot * b.maxRows + r] = 50 + r;
      b.obsLen[slot * b.maxRows + r] = 51 + r;
    }
    b.obsMask[slot * b.numBlocks] = 1;
    b.obsZ[slot * (b.maxRows - 1) * b.capacity] = 2.5f;
  }
}

//===----------------------------------------------------------------------===//
// Creation and layout
//===----------------------------------------------------------------------===//

TEST(StatePoolCreate, LaysOutEveryArrayAlignedAndZeroed) {
  auto pool = makePool(smallOptions());
  ASSERT_TRUE(pool);
  EXPECT_EQ(pool->numBlocks(), 7);
  std::vector<std::pair<uintptr_t, uintptr_t>> ranges;
  for (int64_t l = 0; l < 2; ++l) {
    LayerBuffers b = pool->layer(l);
    ASSERT_TRUE(b);
    EXPECT_EQ(b.numSlots, 4);
    EXPECT_EQ(b.capacity, 100);
    EXPECT_EQ(b.maxRows, 4);
    EXPECT_EQ(b.numBlocks, 7);
    auto add = [&](const void *p, size_t bytes, const char *what) {
      auto start = reinterpret_cast<uintptr_t>(p);
      EXPECT_EQ(start % 64, 0u) << what << " of layer " << l;
      for (size_t i = 0; i < bytes; ++i)
        ASSERT_EQ(static_cast<const uint8_t *>(p)[i], 0) << what;
      ranges.emplace_back(start, start + bytes);
    };
    add(b.v, 4 * 100 * sizeof(float), "v");
    add(b.d, 4 * 100 * sizeof(float), "d");
    add(b.it, 4 * sizeof(int64_t), "it");
    add(b.obsRows, 4 * sizeof(int32_t), "obs_rows");
    add(b.obsPos, 4 * 4 * sizeof(int32_t), "obs_pos");
    add(b.obsLen, 4 * 4 * sizeof(int32_t), "obs_len");
    add(b.obsMask, 4 * 7, "obs_mask");
    add(b.obsZ, 4 * 3 * 100 * sizeof(float), "obs_z"); // rows 1..3
  }
  // No two arrays overlap.
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i)
    EXPECT_LE(ranges[i - 1].second, ranges[i].first);
  EXPECT_GE(pool->allocatedBytes(),
            static_cast<int64_t>(ranges.back().second - ranges.front().first));

  EXPECT_FALSE(pool->layer(2));
  EXPECT_FALSE(pool->layer(-1));
}

TEST(StatePoolCreate, LayerDescriptorsMatchTheAbi) {
  auto pool = makePool(smallOptions());
  ASSERT_TRUE(pool);
  LayerBuffers b = pool->layer(1);
  auto v = b.vMemRef();
  EXPECT_EQ(v.aligned, b.v);
  EXPECT_EQ(v.sizes[0], 4);
  EXPECT_EQ(v.sizes[1], 100);
  EXPECT_EQ(v.strides[0], 100);
  EXPECT_EQ(v.strides[1], 1);
  EXPECT_EQ(b.itMemRef().sizes[0], 4);
  EXPECT_EQ(b.obsPosMemRef().strides[0], 4);
  EXPECT_EQ(b.obsMaskMemRef().sizes[1], 7);
  auto z = b.obsZMemRef();
  EXPECT_EQ(z.sizes[0], 4);
  EXPECT_EQ(z.sizes[1], 3); // the draft rows: row 0 is folded at its step
  EXPECT_EQ(z.sizes[2], 100);
  EXPECT_EQ(z.strides[0], 300);
  EXPECT_EQ(z.strides[1], 100);
  EXPECT_EQ(z.strides[2], 1);
}

TEST(StateLayout, PagedFieldsArePagesOfThePageSize) {
  // The paged layout (docs/GPU-ABI.md, "Paged state"): the per-KV-slot
  // fields (those with a capacity dim) are [pages, ..., page size]; the
  // others keep their slot rows; `valid` is a paged program's only.
  StateSizes sizes{/*slots=*/5, /*capacity=*/256, /*maxRows=*/3,
                   /*blocks=*/4, /*pages=*/40, /*pageSize=*/64};
  EXPECT_EQ(stateFieldShape(StateField::V, sizes),
            (std::vector<int64_t>{40, 64}));
  EXPECT_EQ(stateFieldShape(StateField::D, sizes),
            (std::vector<int64_t>{40, 64}));
  EXPECT_EQ(stateFieldShape(StateField::ObsZ, sizes),
            (std::vector<int64_t>{40, 2, 64})); // maxRows - 1 draft rows
  EXPECT_EQ(stateFieldShape(StateField::ObsMask, sizes),
            (std::vector<int64_t>{5, 4}));
  EXPECT_EQ(stateFieldShape(StateField::Valid, sizes),
            (std::vector<int64_t>{5}));
  EXPECT_TRUE(isPagedField(StateField::ObsZ, sizes));
  EXPECT_FALSE(isPagedField(StateField::PredKeys, sizes));
  sizes.pageSize = 0; // compact
  EXPECT_FALSE(isPagedField(StateField::V, sizes));
  EXPECT_EQ(stateFieldShape(StateField::V, sizes),
            (std::vector<int64_t>{5, 256}));
  // Pools are compact: no `valid` among their arrays.
  EXPECT_EQ(stateFieldInfo(StateField::Valid).group, StateGroup::Paged);
  StatusOr<StateLayout> layout = StatePool::layoutOf(smallOptions());
  ASSERT_TRUE(layout.ok()) << layout.message();
  EXPECT_EQ(layout->offsets[static_cast<size_t>(StateField::Valid)], -1);
  EXPECT_GE(layout->offsets[static_cast<size_t>(StateField::V)], 0);
}

TEST(StatePoolCreate, RejectsNonPositiveOptions) {
  StatePoolOptions o = smallOptions();
  o.numLayers = 0;
  EXPECT_EQ(createError(o),
            "state pool option numLayers must be positive, got 0");
  o = smallOptions();
  o.numSlots = -3;
  EXPECT_EQ(createError(o),
            "state pool option numSlots must be positive, got -3");
  o = smallOptions();
  o.capacity = 0;
  EXPECT_EQ(createError(o),
            "state pool option capacity must be positive, got 0");
  o = smallOptions();
  o.maxRows = 0;
  EXPECT_EQ(createError(o),
            "state pool option maxRows must be positive, got 0");
  o = smallOptions();
  o.blockSize = -64;
  EXPECT_EQ(createError(o),
            "state pool option blockSize must be positive, got -64");
}

TEST(StatePoolCreate, RejectsValuesTheI32AbiCannotHold) {
  StatePoolOptions o = smallOptions();
  o.capacity = int64_t{1} << 31;
  EXPECT_EQ(createError(o), "state pool option capacity = 2147483648 exceeds "
                            "2147483647: positions are i32 in the step ABI");
  o = smallOptions();
  o.numSlots = int64_t{1} << 40;
  EXPECT_EQ(createError(o),
            "state pool option numSlots = 1099511627776 exceeds 2147483647: "
            "slot indices are i32 in the step ABI");
}

TEST(StatePoolCreate, RejectsSizesThatOverflowInt64) {
  StatePoolOptions o;
  o.numLayers = 4;
  o.numSlots = std::numeric_limits<int32_t>::max();
  o.capacity = std::numeric_limits<int32_t>::max();
  o.maxRows = std::numeric_limits<int32_t>::max();
  o.blockSize = 1;
  EXPECT_EQ(createError(o),
            "a state pool of 4 layers x 2147483647 slots with capacity "
            "2147483647, 2147483647 rows and block size 1 needs more than "
            "9223372036854775807 bytes");
  // Small layers, absurdly many of them: the product overflows.
  o = smallOptions();
  o.numLayers = std::numeric_limits<int64_t>::max() / 64;
  EXPECT_NE(createError(o).find("needs more than 9223372036854775807 bytes"),
            std::string::npos);
}

TEST(StatePoolCreate, ReportsAllocationFailure) {
  // Fits int64 (about 12 PiB) but no address space has it.
  StatePoolOptions o;
  o.numLayers = 1024;
  o.numSlots = 1 << 20;
  o.capacity = 1 << 20;
  o.maxRows = 1;
  o.blockSize = 64;
  std::string message = createError(o);
  EXPECT_EQ(message.rfind("cannot allocate ", 0), 0u) << message;
}

//===----------------------------------------------------------------------===//
// Request lifecycle
//===----------------------------------------------------------------------===//

TEST(StatePool, LifecycleResetsAndReusesSlots) {
  auto pool = makePool(smallOptions());
  ASSERT_TRUE(pool);
  StatusOr<int32_t> slot = pool->acquire(42);
  ASSERT_TRUE(slot.ok()) << slot.message();
  EXPECT_EQ(*slot, 0);
  EXPECT_TRUE(pool->contains(42));
  EXPECT_EQ(pool->liveRequests(), 1);
  EXPECT_EQ(*pool->slotOf(42), 0);
  for (int64_t l = 0; l < 2; ++l)
    EXPECT_EQ(*pool->iteration(42, l), 0);

  // A step writes through the layer buffers.
  ASSERT_TRUE(pool->beginStep({42}, /*canCommit=*/false).ok());
  fakeDecodeStep(*pool, *slot, 0, 1.5f);
  fakeDecodeStep(*pool, *slot, 1, 3.0f);
  fakeDecodeStep(*pool, *slot, 1, 3.0f);
  pool->endStep({42});
  EXPECT_EQ(*pool->iteration(42, 0), 1);
  EXPECT_EQ(*pool->iteration(42, 1), 2);
  EXPECT_EQ((*pool->v(42, 0))[99], 1.5f);
  EXPECT_EQ((*pool->d(42, 1))[0], -3.0f);

  // Another request's state is separate.
  StatusOr<int32_t> other = pool->acquire(7);
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(*other, 1);
  EXPECT_EQ((*pool->v(7, 0))[0], 0.0f);

  // Reset: next step is a warm-up from zero state.
  ASSERT_TRUE(pool->reset(42).ok());
  for (int64_t l = 0; l < 2; ++l) {
    EXPECT_EQ(*pool->iteration(42, l), 0);
    const float *v = *pool->v(42, l);
    const float *d = *pool->d(42, l);
    EXPECT_TRUE(std::all_of(v, v + 100, [](float x) { return x == 0.0f; }));
    EXPECT_TRUE(std::all_of(d, d + 100, [](float x) { return x == 0.0f; }));
  }
  EXPECT_EQ(*pool->slotOf(42), 0);

  // Release, and the slot is handed out again, clean.
  fakeDecodeStep(*pool, 0, 0, 9.0f);
  ASSERT_TRUE(pool->release(42).ok());
  EXPECT_FALSE(pool->contains(42));
  EXPECT_EQ(pool->liveRequests(), 1);
  StatusOr<int32_t> reused = pool->acquire(43);
  ASSERT_TRUE(reused.ok());
  EXPECT_EQ(*reused, 0);
  EXPECT_EQ(*pool->iteration(43, 0), 0);
  EXPECT_EQ((*pool->v(43, 0))[5], 0.0f);
  // The other request was not touched by any of it.
  EXPECT_EQ(*pool->slotOf(7), 1);
}

TEST(StatePool, LowestFreeSlotFirst) {
  auto pool = makePool(smallOptions());
  ASSERT_TRUE(pool);
  for (int64_t id = 0; id < 4; ++id)
    EXPECT_EQ(*pool->acquire(100 + id), id);
  ASSERT_TRUE(pool->release(102).ok());
  ASSERT_TRUE(pool->release(101).ok());
  EXPECT_EQ(*pool->acquire(200), 1);
  EXPECT_EQ(*pool->acquire(201), 2);
}

TEST(StatePool, LifecycleErrorsNameTheRequest) {
  auto pool = makePool(smallOptions());
  ASSERT_TRUE(pool);
  ASSERT_TRUE(pool->acquire(5).ok());

  StatusOr<int32_t> twice = pool->acquire(5);
  ASSERT_FALSE(twice.ok());
  EXPECT_EQ(twice.message(), "request 5 is already in the state pool (slot 0)");

  for (int64_t id : {6, 7, 8})
    ASSERT_TRUE(pool->acquire(id).ok());
  StatusOr<int32_t> full = pool->acquire(9);
  ASSERT_FALSE(full.ok());
  EXPECT_EQ(full.message(), "state pool is full: 4 of 4 slots in use");

  EXPECT_EQ(pool->release(42).message(), "request 42 is not in the state pool");
  ASSERT_TRUE(pool->release(8).ok());
  EXPECT_EQ(pool->release(8).message(), "request 8 is not in the state pool");
  EXPECT_EQ(pool->reset(42).message(), "request 42 is not in the state pool");
  EXPECT_EQ(pool->slotOf(42).message(), "request 42 is not in the state pool");
  EXPECT_FALSE(pool->contains(42));
  EXPECT_EQ(pool->iteration(42, 0).message(),
            "request 42 is not in the state pool");
  EXPECT_EQ(pool->v(42, 0).message(), "request 42 is not in the state pool");
  EXPECT_EQ(pool->d(42, 0).message(), "request 42 is not in the state pool");
  EXPECT_EQ(pool->iteration(5, 2).message(),
            "layer 2 is out of range: the pool has 2 layers");
  EXPECT_EQ(pool->v(5, -1).message(),
            "layer -1 is out of range: the pool has 2 layers");
  EXPECT_EQ(pool->d(5, 7).message(),
            "layer 7 is out of range: the pool has 2 layers");
}

TEST(StatePool, BusyRequestsRefuseStateChanges) {
  auto pool = makePool(smallOptions());
  ASSERT_TRUE(pool);
  ASSERT_TRUE(pool->acquire(3).ok());
  ASSERT_TRUE(pool->beginStep({3}, false).ok());
  EXPECT_EQ(pool->reset(3).message(),
            "request 3 is inside a step: reset it after endStep");
  EXPECT_EQ(pool->release(3).message(),
            "request 3 is inside a step: release it after endStep");
  EXPECT_EQ(pool->iteration(3, 0).message(),
            "request 3 is inside a step: read its state after endStep");
  EXPECT_EQ(pool->v(3, 0).message(),
            "request 3 is inside a step: read its state after endStep");
  EXPECT_EQ(pool->commit(3, 0).message(),
            "request 3 is inside a step: commit after endStep");
  EXPECT_EQ(pool->beginStep({3}, false).message(),
            "request 3 is already inside another step");
  pool->endStep({3});
  EXPECT_TRUE(pool->reset(3).ok());
  EXPECT_TRUE(pool->beginStep({3}, false).ok());
  pool->endStep({3});
  EXPECT_TRUE(pool->release(3).ok());
}

//===----------------------------------------------------------------------===//
// Steps
//===----------------------------------------------------------------------===//

TEST(StatePool, BeginStepIsAllOrNothing) {
  auto pool = makePool(smallOptions());
  ASSERT_TRUE(pool);
  for (int64_t id : {1, 2, 3})
    ASSERT_TRUE(pool->acquire(id).ok());

  EXPECT_EQ(pool->beginStep({1, 2, 42}, false).message(),
            "request 42 is not in the state pool");
  EXPECT_EQ(pool->beginStep({1, 2, 3, 2}, false).message(),
            "request 2 appears twice in the batch (at 1 and 3)");
  // Neither refused batch left a request busy.
  ASSERT_TRUE(pool->beginStep({1, 2}, false).ok());
  EXPECT_EQ(pool->beginStep({3, 2}, false).message(),
            "request 2 is already inside another step");
  // ... and request 3 is still free for a disjoint step.
  EXPECT_TRUE(pool->beginStep({3}, false).ok());
  pool->endStep({1, 2});
  pool->endStep({3});
  // Unknown ids and idle requests are ignored by endStep.
  pool->endStep({1, 99});
  EXPECT_TRUE(pool->beginStep({}, false).ok());
  EXPECT_TRUE(pool->beginStep({1, 2, 3}, true).ok());
  pool->endStep({1, 2, 3});
}

//===----------------------------------------------------------------------===//
// MTP bookkeeping
//===----------------------------------------------------------------------===//

TEST(StatePoolMtp, CommitGatesTheNextStep) {
  auto pool = makePool(smallOptions());
  ASSERT_TRUE(pool);
  StatusOr<int32_t> slot = pool->acquire(7);
  ASSERT_TRUE(slot.ok());
  EXPECT_FALSE(pool->hasPendingRows(7));
  EXPECT_EQ(pool->commit(7, 0).message(),
            "request 7 has no uncommitted verification step");

  // A verification step buffers d + 1 = 4 rows.
  ASSERT_TRUE(pool->beginStep({7}, true).ok());
  fakeVerificationStep(*pool, *slot, 4);
  pool->endStep({7});
  EXPECT_TRUE(pool->hasPendingRows(7));
  EXPECT_FALSE(pool->recordedCommit(7));

  EXPECT_EQ(pool->beginStep({7}, true).message(),
            "request 7 has an uncommitted verification step on layer 0: call "
            "commit(7, accepted) before the next step");
  EXPECT_EQ(pool->beginStep({7}, false).message(),
            "request 7 has an uncommitted verification step on layer 0, which "
            "this step cannot commit: call commit(7, accepted) and run an MTP "
            "step, or reset(7)");

  EXPECT_EQ(pool->commit(7, 4).message(),
            "accepted = 4 is out of range for request 7: its verification step "
            "buffered 4 rows, so accepted must be in [0, 3]");
  EXPECT_EQ(pool->commit(7, -1).message(),
            "accepted = -1 is out of range for request 7: its verification "
            "step buffered 4 rows, so accepted must be in [0, 3]");
  EXPECT_EQ(pool->commit(42, 0).message(),
            "request 42 is not in the state pool");
  EXPECT_FALSE(pool->recordedCommit(7));

  ASSERT_TRUE(pool->commit(7, 2).ok());
  EXPECT_EQ(pool->recordedCommit(7), std::optional<int32_t>(2));
  EXPECT_EQ(pool->commit(7, 1).message(),
            "request 7 already committed its verification step (accepted = 2)");
  // A graph that cannot replay still may not step it.
  EXPECT_EQ(pool->beginStep({7}, false).message(),
            "request 7 has an uncommitted verification step on layer 0, which "
            "this step cannot commit: call commit(7, accepted) and run an MTP "
            "step, or reset(7)");

  // The next MTP step replays the commit and buffers its own rows; the
  // record is dropped once every committed layer has stepped.
  ASSERT_TRUE(pool->beginStep({7}, true).ok());
  EXPECT_EQ(pool->recordedCommit(7), std::optional<int32_t>(2));
  fakeVerificationStep(*pool, *slot, 4);
  pool->endStep({7});
  EXPECT_FALSE(pool->recordedCommit(7));
  EXPECT_EQ(pool->beginStep({7}, true).message(),
            "request 7 has an uncommitted verification step on layer 0: call "
            "commit(7, accepted) before the next step");
  ASSERT_TRUE(pool->commit(7, 0).ok());
  EXPECT_TRUE(pool->beginStep({7}, true).ok());
  pool->endStep({7});
}

TEST(StatePoolMtp, CommitCoversEachLayerOnce) {
  // Two layers buffered one verification step; each replays the commit at
  // its own next step, and new rows of a layer that already replayed it are
  // not covered.
  auto pool = makePool(smallOptions());
  ASSERT_TRUE(pool);
  StatusOr<int32_t> slot = pool->acquire(7);
  ASSERT_TRUE(slot.ok());
  fakeVerificationStep(*pool, *slot, 3);
  ASSERT_TRUE(pool->commit(7, 1).ok());

  std::vector<int64_t> layer0 = {0}, layer1 = {1};
  ASSERT_TRUE(pool->beginStep({7}, true, Span<int64_t>(layer0)).ok());
  pool->layer(0).obsRows[*slot] = 3; // the step buffered its own rows
  pool->endStep({7}, Span<int64_t>(layer0));
  EXPECT_EQ(pool->recordedCommit(7), std::optional<int32_t>(1));
  EXPECT_EQ(pool->beginStep({7}, true, Span<int64_t>(layer0)).message(),
            "request 7 has an uncommitted verification step on layer 0, "
            "buffered after its recorded commit (accepted = 1) was replayed on "
            "this layer: the other layers of the committed step must step "
            "first");
  ASSERT_TRUE(pool->beginStep({7}, true, Span<int64_t>(layer1)).ok());
  pool->endStep({7}, Span<int64_t>(layer1));
  EXPECT_FALSE(pool->recordedCommit(7));
  std::vector<int64_t> bad = {5};
  EXPECT_EQ(pool->beginStep({7}, true, Span<int64_t>(bad)).message(),
            "the step uses layer 5 but the pool has 2 layers");
}

TEST(StatePoolMtp, ResetDropsBufferedRowsAndCommit) {
  auto pool = makePool(smallOptions());
  ASSERT_TRUE(pool);
  int32_t slot = *pool->acquire(11);
  fakeDecodeStep(*pool, slot, 0, 1.0f);
  fakeVerificationStep(*pool, slot, 3);
  ASSERT_TRUE(pool->commit(11, 1).ok());
  ASSERT_TRUE(pool->reset(11).ok());
  EXPECT_FALSE(pool->hasPendingRows(11));
  EXPECT_FALSE(pool->recordedCommit(11));
  EXPECT_EQ(pool->layer(0).obsRows[slot], 0);
  EXPECT_EQ(pool->layer(1).obsRows[slot], 0);
  EXPECT_EQ(*pool->iteration(11, 0), 0);
  // Nothing left to commit, and a plain decode step is admitted.
  EXPECT_EQ(pool->commit(11, 0).message(),
            "request 11 has no uncommitted verification step");
  EXPECT_TRUE(pool->beginStep({11}, false).ok());
  pool->endStep({11});
}

TEST(StatePoolMtp, PendingRowsOnAnyLayerCount) {
  auto pool = makePool(smallOptions());
  ASSERT_TRUE(pool);
  int32_t slot = *pool->acquire(12);
  pool->layer(1).obsRows[slot] = 2;
  EXPECT_TRUE(pool->hasPendingRows(12));
  EXPECT_EQ(pool->beginStep({12}, true).message(),
            "request 12 has an uncommitted verification step on layer 1: call "
            "commit(12, accepted) before the next step");
  EXPECT_EQ(pool->commit(12, 2).message(),
            "accepted = 2 is out of range for request 12: its verification "
            "step buffered 2 rows, so accepted must be in [0, 1]");
  // Layers that disagree on the row count are corrupt state.
  pool->layer(0).obsRows[slot] = 3;
  EXPECT_EQ(pool->commit(12, 0).message(),
            "request 12 has inconsistent buffered rows: layer 0 has 3, layer 1 "
            "has 2");
  pool->layer(0).obsRows[slot] = 9;
  EXPECT_EQ(pool->commit(12, 0).message(),
            "request 12 has obs_rows = 9 on layer 0, more than the pool's "
            "maxRows = 4");
}

TEST(StatePoolMtp, UnknownRequestsHaveNothingPending) {
  auto pool = makePool(smallOptions());
  ASSERT_TRUE(pool);
  EXPECT_FALSE(pool->hasPendingRows(1));
  EXPECT_FALSE(pool->recordedCommit(1));
  pool->clearCommit(1); // Harmless.
}

//===----------------------------------------------------------------------===//
// Pools whose state lives on a device
//===----------------------------------------------------------------------===//

TEST(StatePoolLayout, MatchesTheHostArena) {
  StatusOr<StateLayout> layout = StatePool::layoutOf(smallOptions());
  ASSERT_TRUE(layout.ok()) << layout.message();
  auto pool = makePool(smallOptions());
  ASSERT_TRUE(pool);
  LayerBuffers l0 = pool->layer(0), l1 = pool->layer(1);
  auto at = [&](const void *p) {
    return static_cast<int64_t>(reinterpret_cast<const char *>(p) -
                                reinterpret_cast<const char *>(l0.v));
  };
  EXPECT_EQ(layout->offset(StateField::V), 0);
  EXPECT_EQ(at(l0.d), layout->offset(StateField::D) - layout->offset(StateField::V));
  EXPECT_EQ(at(l0.it), layout->offset(StateField::It));
  EXPECT_EQ(at(l0.obsRows), layout->offset(StateField::ObsRows));
  EXPECT_EQ(at(l0.obsPos), layout->offset(StateField::ObsPos));
  EXPECT_EQ(at(l0.obsLen), layout->offset(StateField::ObsLen));
  EXPECT_EQ(at(l0.obsMask), layout->offset(StateField::ObsMask));
  EXPECT_EQ(at(l0.obsZ), layout->offset(StateField::ObsZ));
  EXPECT_EQ(at(l1.v), layout->layerStride);
  EXPECT_EQ(layout->layerStride % 64, 0);
  EXPECT_EQ(layout->bytes, 2 * layout->layerStride);
  EXPECT_EQ(layout->numBlocks, 7);
  EXPECT_EQ(pool->allocatedBytes(), layout->bytes);

  StatePoolOptions bad = smallOptions();
  bad.maxRows = 0;
  EXPECT_EQ(StatePool::layoutOf(bad).message(),
            "state pool option maxRows must be positive, got 0");
}

TEST(StatePoolLayout, LastObservedIsOptInAndFollowsTheOtherArrays) {
  StatePoolOptions options = smallOptions();
  StatusOr<StateLayout> plain = StatePool::layoutOf(options);
  options.lastObserved = true;
  StatusOr<StateLayout> aged = StatePool::layoutOf(options);
  ASSERT_TRUE(plain.ok() && aged.ok());
  // Without it, nothing of the layout refers to it; with it, the other
  // arrays keep their offsets and it comes last: 4 slots x 7 blocks of i32.
  // Before it: obs_z, then the prediction cache (pred_at: 4 slots x 4 i32,
  // pred_keys: 4 slots x 7 blocks of i32).
  EXPECT_EQ(plain->offset(StateField::LastObserved), -1);
  EXPECT_EQ(aged->offset(StateField::V), plain->offset(StateField::V));
  EXPECT_EQ(aged->offset(StateField::ObsMask), plain->offset(StateField::ObsMask));
  EXPECT_EQ(aged->offset(StateField::ObsZ), plain->offset(StateField::ObsZ));
  EXPECT_EQ(aged->offset(StateField::PredKeys), plain->offset(StateField::PredKeys));
  int64_t obsZEnd = plain->offset(StateField::ObsZ) + 4 * 3 * 100 * int64_t(sizeof(float));
  EXPECT_EQ(plain->offset(StateField::PredAt), (obsZEnd + 63) / 64 * 64);
  EXPECT_EQ(plain->offset(StateField::PredKeys), (plain->offset(StateField::PredAt) + 4 * 4 * 4 + 63) / 64 * 64);
  int64_t predEnd = plain->offset(StateField::PredKeys) + 4 * 7 * 4;
  EXPECT_EQ(aged->offset(StateField::LastObserved), (predEnd + 63) / 64 * 64);
  EXPECT_EQ(aged->layerStride, (aged->offset(StateField::LastObserved) + 4 * 7 * 4 + 63) / 64 * 64);
  EXPECT_EQ(plain->layerStride, (predEnd + 63) / 64 * 64);

  auto pool = makePool(options);
  ASSERT_TRUE(pool);
  EXPECT_EQ(pool->allocatedBytes(), aged->bytes);
  EXPECT_EQ(pool->layer(0).lastObservedMemRef().sizes[1], 7);
  auto withoutIt = makePool(smallOptions());
  ASSERT_TRUE(withoutIt);
  EXPECT_EQ(withoutIt->layer(1).lastObserved, nullptr);
  ASSERT_TRUE(withoutIt->acquire(3).ok());
  EXPECT_EQ(withoutIt->lastObserved(3, 0).message(),
            "the state pool keeps no last_observed: create it with "
            "lastObserved (the state of the staleness-score and block-age "
            "exploration policies)");
}

TEST(StatePool, ResetAndAcquireClearLastObserved) {
  StatePoolOptions options = smallOptions();
  options.lastObserved = true;
  auto pool = makePool(options);
  ASSERT_TRUE(pool);
  ASSERT_EQ(*pool->acquire(10), 0);
  ASSERT_EQ(*pool->acquire(11), 1);
  for (int64_t l = 0; l < 2; ++l) {
    LayerBuffers b = pool->layer(l);
    for (int64_t j = 0; j < b.numBlocks; ++j) {
      b.lastObserved[0 * b.numBlocks + j] = static_cast<int32_t>(j + 1);
      b.lastObserved[1 * b.numBlocks + j] = 5;
    }
  }
  EXPECT_EQ((*pool->lastObserved(10, 1))[6], 7);
  ASSERT_TRUE(pool->reset(10).ok());
  for (int64_t l = 0; l < 2; ++l) {
    const int32_t *last = *pool->lastObserved(10, l);
    EXPECT_TRUE(std::all_of(last, last + 7, [](int32_t x) { return x == 0; }));
    const int32_t *other = *pool->lastObserved(11, l);
    EXPECT_TRUE(std::all_of(other, other + 7, [](int32_t x) { return x == 5; }));
  }
  ASSERT_TRUE(pool->release(11).ok());
  ASSERT_EQ(*pool->acquire(12), 1);
  const int32_t *fresh = *pool->lastObserved(12, 0);
  EXPECT_TRUE(std::all_of(fresh, fresh + 7, [](int32_t x) { return x == 0; }));
  EXPECT_EQ(pool->lastObserved(12, 2).message(),
            "layer 2 is out of range: the pool has 2 layers");
}

StatePoolOptions deviceOptions() {
  StatePoolOptions options = smallOptions();
  options.hostState = false;
  return options;
}

TEST(StatePoolWithoutHostState, KeepsOnlyTheRequestTable) {
  StatePoolOptions options = deviceOptions();
  // Large enough that the full state would not fit in host memory: only
  // the record of buffered rows is allocated.
  options.numSlots = 1 << 20;
  options.capacity = 1 << 20;
  auto pool = makePool(options);
  ASSERT_TRUE(pool);
  EXPECT_LE(pool->allocatedBytes(), 2 * ((4 << 20) + 64));
  EXPECT_FALSE(pool->layer(0));
  EXPECT_EQ(pool->layer(0).obsRows, nullptr);

  ASSERT_EQ(*pool->acquire(5), 0);
  ASSERT_EQ(*pool->acquire(6), 1);
  EXPECT_EQ(*pool->slotOf(6), 1);
  EXPECT_EQ(pool->iteration(5, 0).message(),
            "the iteration counter of request 5 lives in device memory: this "
            "pool keeps only the request table on the host");
  EXPECT_EQ(pool->v(5, 1).message(),
            "the EMA state of request 5 lives in device memory: this pool "
            "keeps only the request table on the host");
  EXPECT_EQ(pool->d(5, 0).message(), pool->v(5, 0).message());
  // The other errors come first.
  EXPECT_EQ(pool->iteration(9, 0).message(),
            "request 9 is not in the state pool");
  EXPECT_EQ(pool->v(5, 2).message(),
            "layer 2 is out of range: the pool has 2 layers");
  ASSERT_TRUE(pool->release(5).ok());
  ASSERT_TRUE(pool->reset(6).ok());
  EXPECT_EQ(pool->liveRequests(), 1);
}

TEST(StatePoolWithoutHostState, RecordsBufferedRowsForCommits) {
  auto pool = makePool(deviceOptions());
  ASSERT_TRUE(pool);
  ASSERT_TRUE(pool->acquire(7).ok());
  ASSERT_TRUE(pool->acquire(8).ok());
  std::vector<int64_t> both = {0, 1}, layer1 = {1};

  EXPECT_EQ(pool->setBufferedRows({7}, Span<int64_t>(both), 4).message(),
            "request 7 is not inside a step: buffered rows are recorded "
            "between beginStep and endStep");
  // A verification step of both layers buffers 4 rows for both requests.
  ASSERT_TRUE(pool->beginStep({7, 8}, true).ok());
  EXPECT_EQ(pool->setBufferedRows({7, 8}, Span<int64_t>(both), 5).message(),
            "buffered rows = 5 is outside [0, 4], the pool's maxRows");
  EXPECT_EQ(pool->setBufferedRows({7, 9}, Span<int64_t>(both), 4).message(),
            "request 9 is not in the state pool");
  std::vector<int64_t> bad = {3};
  EXPECT_EQ(pool->setBufferedRows({7}, Span<int64_t>(bad), 4).message(),
            "layer 3 is out of range: the pool has 2 layers");
  // All-or-nothing: nothing was recorded by the refused calls.
  EXPECT_FALSE(pool->setBufferedRows({7, 8}, Span<int64_t>(both), -1).ok());
  ASSERT_TRUE(pool->setBufferedRows({7, 8}, Span<int64_t>(both), 4).ok());
  pool->endStep({7, 8});

  EXPECT_TRUE(pool->hasPendingRows(7));
  EXPECT_EQ(pool->beginStep({7}, false).message(),
            "request 7 has an uncommitted verification step on layer 0, which "
            "this step cannot commit: call commit(7, accepted) and run an MTP "
            "step, or reset(7)");
  EXPECT_EQ(pool->commit(7, 4).message(),
            "accepted = 4 is out of range for request 7: its verification step "
            "buffered 4 rows, so accepted must be in [0, 3]");
  ASSERT_TRUE(pool->commit(7, 2).ok());

  // Layer 1 steps first and buffers again; layer 0 still has to replay.
  ASSERT_TRUE(pool->beginStep({7}, true, Span<int64_t>(layer1)).ok());
  ASSERT_TRUE(pool->setBufferedRows({7}, Span<int64_t>(layer1), 4).ok());
  pool->endStep({7}, Span<int64_t>(layer1));
  EXPECT_EQ(pool->recordedCommit(7), std::optional<int32_t>(2));

  // A reset drops the record.
  ASSERT_TRUE(pool->reset(8).ok());
  EXPECT_FALSE(pool->hasPendingRows(8));
  EXPECT_TRUE(pool->beginStep({8}, false).ok());
  pool->endStep({8});
}

TEST(StatePoolWithoutHostState, HostPoolsRefuseTheRecord) {
  auto pool = makePool(smallOptions());
  ASSERT_TRUE(pool);
  ASSERT_TRUE(pool->acquire(1).ok());
  ASSERT_TRUE(pool->beginStep({1}, true).ok());
  std::vector<int64_t> layer0 = {0};
  EXPECT_EQ(pool->setBufferedRows({1}, Span<int64_t>(layer0), 1).message(),
            "setBufferedRows is for pools whose state lives on a device: the "
            "compiled code of a host pool writes obs_rows itself");
  pool->endStep({1});
}

//===----------------------------------------------------------------------===//
// Concurrency
//===----------------------------------------------------------------------===//

// Eight threads, each with its own requests, acquire, step (writing their
// slots through the layer buffers), reset, commit and release concurrently.
// Checked for races under -fsanitize=thread.
TEST(StatePoolConcurrency, DisjointRequestsFromEightThreads) {
  StatePoolOptions options = smallOptions();
  options.numSlots = 16;
  options.capacity = 256;
  auto pool = makePool(options);
  ASSERT_TRUE(pool);
  constexpr int kThreads = 8;
  constexpr int kRounds = 200;
  std::atomic<int> failures{0};
  auto fail = [&](const std::string &what) {
    ADD_FAILURE() << what;
    failures.fetch_add(1);
  };

  auto worker = [&](int t) {
    for (int round = 0; round < kRounds; ++round) {
      // Two requests per thread: 16 slots are enough for all threads.
      const int64_t a = int64_t(t) * 1000000 + round * 2;
      const int64_t b = a + 1;
      StatusOr<int32_t> slotA = pool->acquire(a);
      StatusOr<int32_t> slotB = pool->acquire(b);
      if (!slotA.ok() || !slotB.ok())
        return fail("acquire: " + slotA.message() + slotB.message());
      const int64_t batch[] = {a, b};
      for (int step = 0; step < 3; ++step) {
        if (Status s = pool->beginStep(batch, /*canCommit=*/true); !s.ok())
          return fail("beginStep: " + s.message());
        for (int64_t l = 0; l < options.numLayers; ++l) {
          fakeDecodeStep(*pool, *slotA, l, float(t));
          fakeDecodeStep(*pool, *slotB, l, float(t));
        }
        if (step == 1) // An MTP step on request a.
          fakeVerificationStep(*pool, *slotA, 2);
        if (step == 2) // It replays the commit and buffers nothing new.
          for (int64_t l = 0; l < options.numLayers; ++l)
            pool->layer(l).obsRows[*slotA] = 0;
        pool->endStep(batch);
        if (step == 1 && !pool->commit(a, 1).ok())
          return fail("commit");
        if (step == 2)
          pool->clearCommit(a);
      }
      StatusOr<int64_t> it = pool->iteration(a, 1);
      if (!it.ok() || *it != 3)
        return fail("iteration of " + std::to_string(a));
      if ((*pool->v(b, 0))[17] != float(t))
        return fail("another thread wrote request " + std::to_string(b));
      if (!pool->reset(a).ok() || *pool->iteration(a, 0) != 0)
        return fail("reset");
      // Racing on another thread's request is refused, never corrupting.
      const int64_t foreign = int64_t((t + 1) % kThreads) * 1000000 + round * 2;
      (void)pool->slotOf(foreign);
      (void)pool->hasPendingRows(foreign);
      if (!pool->release(a).ok() || !pool->release(b).ok())
        return fail("release");
    }
  };

  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back(worker, t);
  for (std::thread &thread : threads)
    thread.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(pool->liveRequests(), 0);
}

// Threads contending for the same request ids: exactly one acquire wins,
// and a batch is admitted to at most one step at a time.
TEST(StatePoolConcurrency, ContendedRequestsAreAdmittedOnce) {
  auto pool = makePool(smallOptions());
  ASSERT_TRUE(pool);
  constexpr int kThreads = 8;
  std::atomic<int> acquired{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&] {
      if (pool->acquire(77).ok())
        acquired.fetch_add(1);
    });
  for (std::thread &thread : threads)
    thread.join();
  EXPECT_EQ(acquired.load(), 1);

  std::atomic<int> inside{0}, maxInside{0}, admitted{0};
  threads.clear();
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 500; ++i) {
        if (!pool->beginStep({77}, false).ok())
          continue;
        int now = inside.fetch_add(1) + 1;
        int seen = maxInside.load();
        while (now > seen && !maxInside.compare_exchange_weak(seen, now)) {
        }
        fakeDecodeStep(*pool, 0, 0, 1.0f);
        inside.fetch_sub(1);
        admitted.fetch_add(1);
        pool->endStep({77});
      }
    });
  for (std::thread &thread : threads)
    thread.join();
  EXPECT_EQ(maxInside.load(), 1);
  EXPECT_GT(admitted.load(), 0);
  EXPECT_EQ(*pool->iteration(77, 0), admitted.load());
}

} // namespace
