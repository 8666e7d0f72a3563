//===- StatePool.cpp - per-request SPIN state of every layer --------------===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
// All state arrays live in one zero-initialised arena: calloc rather than
// malloc + memset, so that the pages of a large pool (obs_z is
// numSlots x Rmax x C floats per layer) are only committed once a step
// touches them. Each array starts on a 64-byte boundary.
//
//===----------------------------------------------------------------------===//

#include "spin/Runtime/StatePool.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <new>
#include <string>
#include <unordered_map>

namespace spin::runtime {

namespace {

constexpr int64_t kAlignment = 64;
constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

std::string str(int64_t value) { return std::to_string(value); }

/// `a * b` for non-negative operands; false on int64 overflow.
bool checkedMul(int64_t a, int64_t b, int64_t &result) {
  if (a != 0 && b > kInt64Max / a)
    return false;
  result = a * b;
  return true;
}

/// `a + b` for non-negative operands; false on int64 overflow.
bool checkedAdd(int64_t a, int64_t b, int64_t &result) {
  if (b > kInt64Max - a)
    return false;
  result = a + b;
  return true;
}

/// Hands out 64-byte aligned offsets for consecutive arrays, remembering
/// whether any size overflowed int64.
class ArenaLayout {
public:
  /// The offset of a new array of `count` elements of `elementSize` bytes;
  /// meaningless once `overflowed()`.
  int64_t add(int64_t count, int64_t elementSize) {
    int64_t bytes = 0, start = 0, end = 0;
    if (!checkedMul(count, elementSize, bytes) ||
        !checkedAdd(size, kAlignment - 1, start)) {
      failed = true;
      return 0;
    }
    start -= start % kAlignment;
    if (!checkedAdd(start, bytes, end)) {
      failed = true;
      return 0;
    }
    size = end;
    return start;
  }
  bool overflowed() const { return failed; }
  int64_t bytes() const { return size; }

private:
  int64_t size = 0;
  bool failed = false;
};

std::string describe(const StatePoolOptions &o) {
  return str(o.numLayers) + " layers x " + str(o.numSlots) +
         " slots with capacity " + str(o.capacity) + ", " + str(o.maxRows) +
         " rows and block size " + str(o.blockSize) +
         (o.lastObserved ? " (with last_observed)" : "");
}

std::string notInPool(int64_t requestId) {
  return "request " + str(requestId) + " is not in the state pool";
}

} // namespace

//===----------------------------------------------------------------------===//
// Creation
//===----------------------------------------------------------------------===//

StatusOr<StateLayout> StatePool::layoutOf(const StatePoolOptions &options) {
  struct Field {
    const char *name;
    int64_t value;
    const char *why; // null: no upper bound beyond int64
  };
  const Field checks[] = {
      {"numLayers", options.numLayers, nullptr},
      {"numSlots", options.numSlots, "slot indices are i32 in the step ABI"},
      {"capacity", options.capacity, "positions are i32 in the step ABI"},
      {"maxRows", options.maxRows, "obs_rows is i32 in the step ABI"},
      {"blockSize", options.blockSize, nullptr},
  };
  for (const Field &field : checks) {
    if (field.value <= 0)
      return Status::error(std::string("state pool option ") + field.name +
                           " must be positive, got " + str(field.value));
    if (field.why && field.value > kInt32Max)
      return Status::error(std::string("state pool option ") + field.name +
                           " = " + str(field.value) + " exceeds " +
                           str(kInt32Max) + ": " + field.why);
  }

  const int64_t numBlocks = options.capacity / options.blockSize +
                            (options.capacity % options.blockSize != 0);
  const StateSizes sizes{options.numSlots, options.capacity, options.maxRows,
                         numBlocks};

  // One layer's arrays in the contract's order, then `numLayers` copies of
  // that layout: the layer stride is a multiple of 64 bytes, so every array
  // of every layer stays aligned. `last_observed` comes last, so that pools
  // without it keep the layout of the other arrays.
  ArenaLayout layout;
  StateLayout result;
  result.numBlocks = numBlocks;
  bool fits = true;
  for (const StateFieldInfo &info : kStateFields) {
    if ((info.group == StateGroup::Staleness && !options.lastObserved) ||
        info.group == StateGroup::Paged)
      continue;
    int64_t elements = 1;
    for (int64_t size : stateFieldShape(info.field, sizes))
      fits = fits && checkedMul(elements, size, elements);
    if (!fits)
      break;
    result.offsets[static_cast<size_t>(info.field)] =
        layout.add(elements, dtypeSize(info.dtype));
  }
  layout.add(0, 1); // Round the layer up to the alignment.
  result.layerStride = layout.bytes();
  int64_t withSlack = 0;
  if (!fits || layout.overflowed() ||
      !checkedMul(result.layerStride, options.numLayers, result.bytes) ||
      !checkedAdd(result.bytes, kAlignment, withSlack) ||
      static_cast<uint64_t>(withSlack) > std::numeric_limits<size_t>::max())
    return Status::error("a state pool of " + describe(options) +
                         " needs more than " + str(kInt64Max) + " bytes");
  return result;
}

StatusOr<std::unique_ptr<StatePool>>
StatePool::create(const StatePoolOptions &options) {
  StatusOr<StateLayout> full = layoutOf(options);
  if (!full.ok())
    return full.status();
  StateLayout hostLayout = *full;
  if (!options.hostState) {
    // Only the record of buffered rows: one i32 per slot and layer, each
    // layer's row 64-byte aligned. Small, since the full layout fits.
    ArenaLayout layout;
    hostLayout = StateLayout();
    hostLayout.numBlocks = full->numBlocks;
    hostLayout.offsets[static_cast<size_t>(StateField::ObsRows)] =
        layout.add(options.numSlots, sizeof(int32_t));
    layout.add(0, 1);
    hostLayout.layerStride = layout.bytes();
    hostLayout.bytes = hostLayout.layerStride * options.numLayers;
  }

  void *raw =
      std::calloc(1, static_cast<size_t>(hostLayout.bytes + kAlignment));
  if (!raw)
    return Status::error("cannot allocate " + str(hostLayout.bytes) +
                         " bytes for a state pool of " + describe(options));
  std::unique_ptr<void, FreeArena> arena(raw);
  auto address = reinterpret_cast<uintptr_t>(raw);
  auto *base = static_cast<char *>(raw) +
               (kAlignment - address % kAlignment) % kAlignment;
  // The free list is the only host allocation that grows with the options;
  // it is far smaller than the arena, but keep a failure a Status.
  try {
    return std::unique_ptr<StatePool>(
        new StatePool(options, hostLayout, std::move(arena), base));
  } catch (const std::bad_alloc &) {
    return Status::error("cannot allocate the slot table for a state pool of " +
                         describe(options));
  }
}

StatePool::StatePool(const StatePoolOptions &options, const StateLayout &layout,
                     std::unique_ptr<void, FreeArena> arenaMemory,
                     char *arenaBase)
    : opts(options), blocks(layout.numBlocks), arenaBytes(layout.bytes),
      fields(layout), stride(layout.layerStride), arena(std::move(arenaMemory)),
      base(arenaBase) {
  std::vector<int32_t> all(static_cast<size_t>(opts.numSlots));
  for (size_t s = 0; s < all.size(); ++s)
    all[s] = static_cast<int32_t>(s);
  // Already a min-heap: ascending order.
  freeSlots = decltype(freeSlots)(std::greater<int32_t>(), std::move(all));
}

StatePool::~StatePool() = default;

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

StatePool::Request *StatePool::find(int64_t requestId) {
  auto it = requests.find(requestId);
  return it == requests.end() ? nullptr : &it->second;
}

const StatePool::Request *StatePool::find(int64_t requestId) const {
  auto it = requests.find(requestId);
  return it == requests.end() ? nullptr : &it->second;
}

Status StatePool::checkIdle(const Request *request, int64_t requestId,
                            const char *action) {
  if (!request)
    return Status::error(notInPool(requestId));
  switch (request->busy) {
  case Busy::None:
    return Status::success();
  case Busy::Step:
    return Status::error("request " + str(requestId) +
                         " is inside a step: " + action);
  case Busy::Zeroing:
    return Status::error("request " + str(requestId) +
                         " is being reset by another thread");
  }
  return Status::error("request " + str(requestId) + " is in an unknown state");
}

Status StatePool::checkLayer(int64_t layer) const {
  if (layer < 0 || layer >= opts.numLayers)
    return Status::error("layer " + str(layer) +
                         " is out of range: the pool has " +
                         str(opts.numLayers) + " layers");
  return Status::success();
}

Status StatePool::checkHostState(int64_t requestId, const char *what) const {
  if (opts.hostState)
    return Status::success();
  return Status::error(std::string(what) + " of request " + str(requestId) +
                       " lives in device memory: this pool keeps only the "
                       "request table on the host");
}

void *LayerBuffers::field(StateField field) const {
  return stateFieldOf(*this, field,
                      [](auto *array) { return static_cast<void *>(array); });
}

LayerBuffers StatePool::buffers(int64_t layer) const {
  char *start = base + layer * stride;
  LayerBuffers b;
  auto at = [&](StateField field) -> void * {
    return fields.holds(field) ? start + fields.offset(field) : nullptr;
  };
  b.obsRows = static_cast<int32_t *>(at(StateField::ObsRows));
  if (opts.hostState) {
    b.v = static_cast<float *>(at(StateField::V));
    b.d = static_cast<float *>(at(StateField::D));
    b.it = static_cast<int64_t *>(at(StateField::It));
    b.obsPos = static_cast<int32_t *>(at(StateField::ObsPos));
    b.obsLen = static_cast<int32_t *>(at(StateField::ObsLen));
    b.obsMask = static_cast<uint8_t *>(at(StateField::ObsMask));
    b.obsZ = static_cast<float *>(at(StateField::ObsZ));
    b.predAt = static_cast<int32_t *>(at(StateField::PredAt));
    b.predKeys = static_cast<int32_t *>(at(StateField::PredKeys));
    b.lastObserved = static_cast<int32_t *>(at(StateField::LastObserved));
  }
  b.numSlots = opts.numSlots;
  b.capacity = opts.capacity;
  b.maxRows = opts.maxRows;
  b.numBlocks = blocks;
  return b;
}

void StatePool::zeroSlot(int32_t slot) const {
  const size_t rowBytes = static_cast<size_t>(opts.capacity) * sizeof(float);
  const int64_t row = static_cast<int64_t>(slot) * opts.capacity;
  for (int64_t l = 0; l < opts.numLayers; ++l) {
    LayerBuffers b = buffers(l);
    b.obsRows[slot] = 0;
    if (!opts.hostState)
      continue;
    std::memset(b.v + row, 0, rowBytes);
    std::memset(b.d + row, 0, rowBytes);
    b.it[slot] = 0;
    std::memset(b.predAt + static_cast<int64_t>(slot) * 4, 0,
                4 * sizeof(int32_t));
    if (b.lastObserved)
      std::memset(b.lastObserved + static_cast<int64_t>(slot) * blocks, 0,
                  static_cast<size_t>(blocks) * sizeof(int32_t));
  }
}

int64_t StatePool::firstPendingLayer(int32_t slot) const {
  for (int64_t l = 0; l < opts.numLayers; ++l)
    if (buffers(l).obsRows[slot] > 0)
      return l;
  return -1;
}

//===----------------------------------------------------------------------===//
// Request lifecycle
//===----------------------------------------------------------------------===//

StatusOr<int32_t> StatePool::acquire(int64_t requestId) {
  int32_t slot = 0;
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (const Request *existing = find(requestId))
      return Status::error("request " + str(requestId) +
                           " is already in the state pool (slot " +
                           str(existing->slot) + ")");
    if (freeSlots.empty())
      return Status::error("state pool is full: " + str(opts.numSlots) +
                           " of " + str(opts.numSlots) + " slots in use");
    slot = freeSlots.top();
    freeSlots.pop();
    Request request;
    request.slot = slot;
    request.busy = Busy::Zeroing;
    requests.emplace(requestId, request);
  }
  // The slot is ours (busy), so it is zeroed without holding the lock: other
  // requests keep stepping meanwhile.
  zeroSlot(slot);
  std::lock_guard<std::mutex> lock(mutex);
  find(requestId)->busy = Busy::None;
  return slot;
}

Status StatePool::release(int64_t requestId) {
  std::lock_guard<std::mutex> lock(mutex);
  const Request *request = find(requestId);
  if (Status s = checkIdle(request, requestId, "release it after endStep");
      !s.ok())
    return s;
  freeSlots.push(request->slot);
  requests.erase(requestId);
  return Status::success();
}

Status StatePool::reset(int64_t requestId) {
  int32_t slot = 0;
  {
    std::lock_guard<std::mutex> lock(mutex);
    Request *request = find(requestId);
    if (Status s = checkIdle(request, requestId, "reset it after endStep");
        !s.ok())
      return s;
    request->busy = Busy::Zeroing;
    request->commit.reset();
    request->commitLayers.clear();
    slot = request->slot;
  }
  zeroSlot(slot);
  std::lock_guard<std::mutex> lock(mutex);
  find(requestId)->busy = Busy::None;
  return Status::success();
}

StatusOr<int32_t> StatePool::slotOf(int64_t requestId) const {
  std::lock_guard<std::mutex> lock(mutex);
  if (const Request *request = find(requestId))
    return request->slot;
  return Status::error(notInPool(requestId));
}

bool StatePool::contains(int64_t requestId) const {
  std::lock_guard<std::mutex> lock(mutex);
  return find(requestId) != nullptr;
}

int64_t StatePool::liveRequests() const {
  std::lock_guard<std::mutex> lock(mutex);
  return static_cast<int64_t>(requests.size());
}

//===----------------------------------------------------------------------===//
// Inspection
//===----------------------------------------------------------------------===//

StatusOr<const StatePool::Request *>
StatePool::readable(int64_t requestId, int64_t layer, const char *what) const {
  const Request *request = find(requestId);
  if (Status s = checkIdle(request, requestId, "read its state after endStep");
      !s.ok())
    return s;
  if (Status s = checkLayer(layer); !s.ok())
    return s;
  if (Status s = checkHostState(requestId, what); !s.ok())
    return s;
  return request;
}

StatusOr<int64_t> StatePool::iteration(int64_t requestId, int64_t layer) const {
  std::lock_guard<std::mutex> lock(mutex);
  StatusOr<const Request *> request =
      readable(requestId, layer, "the iteration counter");
  if (!request.ok())
    return request.status();
  return buffers(layer).it[(*request)->slot];
}

StatusOr<const float *> StatePool::row(int64_t requestId, int64_t layer,
                                       float *LayerBuffers::*field) const {
  std::lock_guard<std::mutex> lock(mutex);
  StatusOr<const Request *> request =
      readable(requestId, layer, "the EMA state");
  if (!request.ok())
    return request.status();
  return static_cast<const float *>(buffers(layer).*field +
                                    (*request)->slot * opts.capacity);
}

StatusOr<const float *> StatePool::v(int64_t requestId, int64_t layer) const {
  return row(requestId, layer, &LayerBuffers::v);
}

StatusOr<const float *> StatePool::d(int64_t requestId, int64_t layer) const {
  return row(requestId, layer, &LayerBuffers::d);
}

StatusOr<const int32_t *> StatePool::lastObserved(int64_t requestId,
                                                  int64_t layer) const {
  std::lock_guard<std::mutex> lock(mutex);
  StatusOr<const Request *> request =
      readable(requestId, layer, stateFieldName(StateField::LastObserved));
  if (!request.ok())
    return request.status();
  if (!opts.lastObserved)
    return Status::error("the state pool keeps no last_observed: create it "
                         "with lastObserved (the state of the staleness-score "
                         "and block-age exploration policies)");
  return static_cast<const int32_t *>(buffers(layer).lastObserved +
                                      (*request)->slot * blocks);
}

LayerBuffers StatePool::layer(int64_t layer) const {
  if (layer < 0 || layer >= opts.numLayers || !opts.hostState)
    return LayerBuffers();
  return buffers(layer);
}

//===----------------------------------------------------------------------===//
// MTP bookkeeping
//===----------------------------------------------------------------------===//

bool StatePool::hasPendingRows(int64_t requestId) const {
  std::lock_guard<std::mutex> lock(mutex);
  const Request *request = find(requestId);
  if (!request || request->busy != Busy::None)
    return false;
  return firstPendingLayer(request->slot) >= 0;
}

Status StatePool::commit(int64_t requestId, int32_t accepted) {
  std::lock_guard<std::mutex> lock(mutex);
  Request *request = find(requestId);
  if (Status s = checkIdle(request, requestId, "commit after endStep"); !s.ok())
    return s;
  const std::string id = str(requestId);
  if (request->commit)
    return Status::error(
        "request " + id +
        " already committed its verification step (accepted = " +
        str(*request->commit) + ")");

  // Every layer that buffered the step holds the same row count.
  int64_t rows = 0, rowsLayer = -1;
  for (int64_t l = 0; l < opts.numLayers; ++l) {
    int64_t layerRows = buffers(l).obsRows[request->slot];
    if (layerRows <= 0)
      continue;
    if (layerRows > opts.maxRows)
      return Status::error(
          "request " + id + " has obs_rows = " + str(layerRows) + " on layer " +
          str(l) + ", more than the pool's maxRows = " + str(opts.maxRows));
    if (rowsLayer >= 0 && layerRows != rows)
      return Status::error("request " + id +
                           " has inconsistent buffered rows: layer " +
                           str(rowsLayer) + " has " + str(rows) + ", layer " +
                           str(l) + " has " + str(layerRows));
    if (rowsLayer < 0) {
      rows = layerRows;
      rowsLayer = l;
    }
  }
  if (rows == 0)
    return Status::error("request " + id +
                         " has no uncommitted verification step");
  if (accepted < 0 || accepted >= rows)
    return Status::error(
        "accepted = " + str(accepted) + " is out of range for request " + id +
        ": its verification step buffered " + str(rows) +
        " rows, so accepted must be in [0, " + str(rows - 1) + "]");
  request->commit = accepted;
  request->commitLayers.assign(opts.numLayers, false);
  for (int64_t l = 0; l < opts.numLayers; ++l)
    request->commitLayers[l] = buffers(l).obsRows[request->slot] > 0;
  return Status::success();
}

std::optional<int32_t> StatePool::recordedCommit(int64_t requestId) const {
  std::lock_guard<std::mutex> lock(mutex);
  const Request *request = find(requestId);
  return request ? request->commit : std::nullopt;
}

void StatePool::clearCommit(int64_t requestId) {
  std::lock_guard<std::mutex> lock(mutex);
  if (Request *request = find(requestId)) {
    request->commit.reset();
    request->commitLayers.clear();
  }
}

//===----------------------------------------------------------------------===//
// Steps
//===----------------------------------------------------------------------===//

Status StatePool::beginStep(Span<int64_t> requestIds, bool canCommit,
                            Span<int64_t> layers) {
  std::lock_guard<std::mutex> lock(mutex);
  std::vector<int64_t> stepLayers(layers.begin(), layers.end());
  if (stepLayers.empty())
    for (int64_t l = 0; l < opts.numLayers; ++l)
      stepLayers.push_back(l);
  for (int64_t l : stepLayers)
    if (l < 0 || l >= opts.numLayers)
      return Status::error("the step uses layer " + str(l) + " but the pool has " +
                           str(opts.numLayers) + " layers");
  // Validate the whole batch before marking anything, so that a refused
  // batch leaves every request as it was.
  std::unordered_map<int64_t, size_t> positions;
  positions.reserve(requestIds.size());
  for (size_t i = 0; i < requestIds.size(); ++i) {
    const int64_t requestId = requestIds[i];
    const std::string id = str(requestId);
    auto [previous, inserted] = positions.emplace(requestId, i);
    if (!inserted)
      return Status::error("request " + id +
                           " appears twice in the batch (at " +
                           str(static_cast<int64_t>(previous->second)) +
                           " and " + str(static_cast<int64_t>(i)) + ")");
    const Request *request = find(requestId);
    if (!request)
      return Status::error(notInPool(requestId));
    if (request->busy == Busy::Step)
      return Status::error("request " + id + " is already inside another step");
    if (request->busy == Busy::Zeroing)
      return Status::error("request " + id +
                           " is being reset by another thread");

    for (int64_t l : stepLayers) {
      if (buffers(l).obsRows[request->slot] <= 0)
        continue;
      const std::string where =
          "request " + id + " has an uncommitted verification step on layer " +
          str(l);
      if (!canCommit)
        return Status::error(where +
                             ", which this step cannot commit: call "
                             "commit(" +
                             id +
                             ", accepted) and run an MTP step, "
                             "or reset(" +
                             id + ")");
      if (!request->commit)
        return Status::error(where + ": call commit(" + id +
                             ", accepted) before the next step");
      if (!request->commitLayers[l])
        return Status::error(where + ", buffered after its recorded commit "
                             "(accepted = " + str(*request->commit) +
                             ") was replayed on this layer: the other layers "
                             "of the committed step must step first");
    }
  }

  for (int64_t requestId : requestIds)
    find(requestId)->busy = Busy::Step;
  return Status::success();
}

void StatePool::endStep(Span<int64_t> requestIds, Span<int64_t> layers) {
  std::lock_guard<std::mutex> lock(mutex);
  for (int64_t requestId : requestIds) {
    Request *request = find(requestId);
    if (!request || request->busy != Busy::Step)
      continue;
    request->busy = Busy::None;
    if (!request->commit)
      continue;
    if (layers.empty())
      std::fill(request->commitLayers.begin(), request->commitLayers.end(), false);
    for (int64_t l : layers)
      if (l >= 0 && l < opts.numLayers)
        request->commitLayers[l] = false;
    if (std::none_of(request->commitLayers.begin(), request->commitLayers.end(),
                     [](bool covered) { return covered; }))
      request->commit.reset();
  }
}

Status StatePool::setBufferedRows(Span<int64_t> requestIds,
                                  Span<int64_t> layers, int32_t rows) {
  if (opts.hostState)
    return Status::error("setBufferedRows is for pools whose state lives on a "
                         "device: the compiled code of a host pool writes "
                         "obs_rows itself");
  if (rows < 0 || rows > opts.maxRows)
    return Status::error("buffered rows = " + str(rows) +
                         " is outside [0, " + str(opts.maxRows) +
                         "], the pool's maxRows");
  std::lock_guard<std::mutex> lock(mutex);
  for (int64_t l : layers)
    if (Status s = checkLayer(l); !s.ok())
      return s;
  for (int64_t requestId : requestIds) {
    const Request *request = find(requestId);
    if (!request)
      return Status::error(notInPool(requestId));
    if (request->busy != Busy::Step)
      return Status::error("request " + str(requestId) +
                           " is not inside a step: buffered rows are recorded "
                           "between beginStep and endStep");
  }
  for (int64_t requestId : requestIds)
    for (int64_t l : layers)
      buffers(l).obsRows[find(requestId)->slot] = rows;
  return Status::success();
}

} // namespace spin::runtime
