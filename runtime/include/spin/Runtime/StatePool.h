//===- StatePool.h - per-request SPIN state of every layer ------*- C++ -*-===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
// The state pool owns the SPIN state (SPIN_SPEC §2) of up to `numSlots`
// concurrent requests for `numLayers` indexer layers, laid out exactly as
// docs/Runtime-ABI.md fixes it, so that compiled step functions can read and
// update it in place through memref descriptors. It also keeps the
// host-side bookkeeping that compiled code cannot: which request owns which
// slot, which requests are inside a step, and the accepted-draft count of a
// buffered MTP verification step (SPIN_SPEC §4) until the next step replays
// it.
//
//===----------------------------------------------------------------------===//

#ifndef SPIN_RUNTIME_STATEPOOL_H
#define SPIN_RUNTIME_STATEPOOL_H

#include "spin/Runtime/Abi.h"
#include "spin/Runtime/MemRef.h"
#include "spin/Runtime/Span.h"
#include "spin/Runtime/Status.h"

#include <cassert>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <queue>
#include <unordered_map>
#include <vector>

namespace spin::runtime {

/// The shape of a state pool. Every field must be positive.
struct StatePoolOptions {
  /// Indexer layers with SPIN state (the `spin.layer` indices 0..numLayers-1).
  int64_t numLayers = 1;
  /// Maximum number of concurrent requests; slot indices are i32 in the ABI.
  int64_t numSlots = 1;
  /// `C`: KV slots per request (the largest position a request may reach
  /// plus one); positions are i32 in the ABI.
  int64_t capacity = 1;
  /// `Rmax`: query rows per step, 1 for plain decode, `d + 1` for MTP with
  /// draft length `d`.
  int64_t maxRows = 1;
  /// SPIN block size `b` (= the KV page size), which sizes `obs_mask` and
  /// `last_observed`.
  int64_t blockSize = 64;
  /// Whether every layer keeps `last_observed`, the iteration at which each
  /// block was last scored (SPIN_SPEC §7.1): the state of programs that
  /// explore by block age (`staleness-score`, `block-age`). Off, the layout
  /// is the one of the other ten arrays alone.
  bool lastObserved = false;
  /// Where the ten state arrays live. True: in this pool's host memory,
  /// which the CPU step functions address. False: elsewhere (a
  /// GpuStatePool's device memory); the pool then holds only the request
  /// table and its own record of each slot's buffered MTP rows (the host's
  /// copy of `obs_rows`), which the device program keeps up to date through
  /// `setBufferedRows`.
  bool hostState = true;
};

/// Where each array of the state lives: byte offsets of one layer's arrays
/// (the state fields of the contract, in its order; `last_observed` only in
/// pools that keep it) from the start of that layer's part of an allocation,
/// and the layers' stride (layer `l` starts at `l * layerStride`). Every
/// offset and the stride are multiples of 64 bytes. The same layout serves
/// the host arena of a StatePool and the device allocation of a
/// GpuStatePool.
struct StateLayout {
  /// By StateField; -1 for a field the allocation does not hold.
  std::array<int64_t, kNumStateFields> offsets;
  int64_t layerStride = 0;
  /// `layerStride * numLayers`.
  int64_t bytes = 0;
  /// `NBcap = ceil(capacity / blockSize)`.
  int64_t numBlocks = 0;

  StateLayout() { offsets.fill(-1); }
  int64_t offset(StateField field) const {
    return offsets[static_cast<size_t>(field)];
  }
  bool holds(StateField field) const { return offset(field) >= 0; }
};

/// Raw pointers to the ten arrays of one layer (docs/Runtime-ABI.md), for
/// building the memref descriptors of a step call. All arrays are
/// contiguous, row-major and 64-byte aligned. A default-constructed value
/// (all null) stands for "no such layer".
struct LayerBuffers {
  float *v = nullptr;         ///< f32 [numSlots, capacity]
  float *d = nullptr;         ///< f32 [numSlots, capacity]
  int64_t *it = nullptr;      ///< i64 [numSlots]
  int32_t *obsRows = nullptr; ///< i32 [numSlots]
  int32_t *obsPos = nullptr;  ///< i32 [numSlots, maxRows]
  int32_t *obsLen = nullptr;  ///< i32 [numSlots, maxRows]
  uint8_t *obsMask = nullptr; ///< i8  [numSlots, numBlocks] (0/1)
  float *obsZ = nullptr;      ///< f32 [numSlots, maxRows - 1, capacity]: rows 1..
  /// i32 [numSlots, 4] and [numSlots, numBlocks]: the GPU path's predicted
  /// block scores for a request's next step (docs/Runtime-ABI.md).
  int32_t *predAt = nullptr;
  int32_t *predKeys = nullptr;
  /// i32 [numSlots, numBlocks]; null unless the pool keeps it.
  int32_t *lastObserved = nullptr;
  int64_t numSlots = 0;
  int64_t capacity = 0;
  int64_t maxRows = 0;
  /// `NBcap = ceil(capacity / blockSize)`.
  int64_t numBlocks = 0;

  /// False for the value returned for an out-of-range layer.
  explicit operator bool() const { return v != nullptr; }

  /// The array of `field` (null where the pool does not hold it) and the
  /// sizes its shape is made of.
  void *field(StateField field) const;
  StateSizes sizes() const { return {numSlots, capacity, maxRows, numBlocks}; }

  /// Descriptors in the argument form the step ABI expects (identity
  /// strides, offset 0).
  MemRefDescriptor<float, 2> vMemRef() const {
    return makeRowMajorMemRef(v, numSlots, capacity);
  }
  MemRefDescriptor<float, 2> dMemRef() const {
    return makeRowMajorMemRef(d, numSlots, capacity);
  }
  MemRefDescriptor<int64_t, 1> itMemRef() const {
    return makeRowMajorMemRef(it, numSlots);
  }
  MemRefDescriptor<int32_t, 1> obsRowsMemRef() const {
    return makeRowMajorMemRef(obsRows, numSlots);
  }
  MemRefDescriptor<int32_t, 2> obsPosMemRef() const {
    return makeRowMajorMemRef(obsPos, numSlots, maxRows);
  }
  MemRefDescriptor<int32_t, 2> obsLenMemRef() const {
    return makeRowMajorMemRef(obsLen, numSlots, maxRows);
  }
  MemRefDescriptor<uint8_t, 2> obsMaskMemRef() const {
    return makeRowMajorMemRef(obsMask, numSlots, numBlocks);
  }
  MemRefDescriptor<float, 3> obsZMemRef() const {
    return makeRowMajorMemRef(obsZ, numSlots, maxRows - 1, capacity);
  }
  MemRefDescriptor<int32_t, 2> lastObservedMemRef() const {
    return makeRowMajorMemRef(lastObserved, numSlots, numBlocks);
  }
};

/// The member of a layer view (LayerBuffers, GpuLayerBuffers: the same
/// member names for the same fields) that holds `field`, through
/// `convert` (to one address type).
template <typename Buffers, typename Convert>
auto stateFieldOf(const Buffers &b, StateField field, Convert convert)
    -> decltype(convert(b.v)) {
  switch (field) {
  case StateField::V:
    return convert(b.v);
  case StateField::D:
    return convert(b.d);
  case StateField::It:
    return convert(b.it);
  case StateField::ObsRows:
    return convert(b.obsRows);
  case StateField::ObsPos:
    return convert(b.obsPos);
  case StateField::ObsLen:
    return convert(b.obsLen);
  case StateField::ObsMask:
    return convert(b.obsMask);
  case StateField::ObsZ:
    return convert(b.obsZ);
  case StateField::PredAt:
    return convert(b.predAt);
  case StateField::PredKeys:
    return convert(b.predKeys);
  case StateField::LastObserved:
    return convert(b.lastObserved);
  case StateField::Valid:
    // Pools keep the compact layout, which has no `valid` (GpuProgram
    // refuses paged programs on a pool).
    assert(false && "a state pool has no paged fields");
    break;
  }
  return convert(b.v);
}

/// Per-request, per-layer SPIN state plus the request table.
///
/// Thread safety: every member function may be called from any thread. The
/// request table is guarded by one mutex; the state arrays are not locked —
/// instead a request is *busy* between `beginStep` and `endStep` (and while
/// `acquire`/`reset` zero its slot), and every call that touches a busy
/// request's state is refused. So steps on disjoint request sets run
/// concurrently, each writing only the slots of its own requests.
///
/// The arrays live in host memory, which is what the CPU step functions
/// and the tests address.
class StatePool {
public:
  /// Validates `options` (every field positive; slot counts, capacity and
  /// rows representable as the ABI's i32; the whole pool addressable in
  /// int64 bytes) and allocates the zeroed pool.
  static StatusOr<std::unique_ptr<StatePool>>
  create(const StatePoolOptions &options);

  /// The validation of `create` and the layout of the full state (all eight
  /// arrays, whatever `options.hostState` says), without allocating.
  static StatusOr<StateLayout> layoutOf(const StatePoolOptions &options);

  StatePool(const StatePool &) = delete;
  StatePool &operator=(const StatePool &) = delete;
  ~StatePool();

  /// The validated shape the pool was created with.
  const StatePoolOptions &options() const { return opts; }
  /// `NBcap = ceil(capacity / blockSize)`, the length of an `obs_mask` (and
  /// `last_observed`) row.
  int64_t numBlocks() const { return blocks; }
  /// Bytes of host memory allocated for the state arrays of all layers
  /// (only the record of buffered rows for a pool without host state).
  int64_t allocatedBytes() const { return arenaBytes; }

  //===--------------------------------------------------------------------===//
  // Request lifecycle
  //===--------------------------------------------------------------------===//

  /// Gives `requestId` the lowest free slot, with freshly reset state on
  /// every layer (`it = 0`: its first step is a warm-up). Fails if the
  /// request is already present or every slot is taken.
  StatusOr<int32_t> acquire(int64_t requestId);

  /// Frees the slot of `requestId` (finished or cancelled request). Buffered
  /// MTP rows are dropped with it. Fails for unknown ids (including a second
  /// release) and for requests inside a step.
  Status release(int64_t requestId);

  /// Starts a new turn (SPIN_SPEC §2): zeroes V and D (and `last_observed`)
  /// of every layer, sets `it = 0`, drops buffered MTP rows and any recorded
  /// commit, so the next step is a warm-up. Fails for unknown or busy
  /// requests.
  Status reset(int64_t requestId);

  /// The slot of a live request: the index into every state array and the
  /// value to pass in the step's `spin.slots` input.
  StatusOr<int32_t> slotOf(int64_t requestId) const;
  /// True while `requestId` holds a slot (from `acquire` to `release`).
  bool contains(int64_t requestId) const;
  /// The number of requests holding a slot, for admission control.
  int64_t liveRequests() const;

  //===--------------------------------------------------------------------===//
  // Inspection (tests, replay tools)
  //===--------------------------------------------------------------------===//

  /// Steps since the last reset of `requestId` on `layer` (the `it` field).
  /// Pools without host state refuse (the counter lives on the device).
  StatusOr<int64_t> iteration(int64_t requestId, int64_t layer) const;
  /// Read-only views of `V` and `D` (`capacity` floats each). The pointer
  /// stays valid while the request is live; its contents change with every
  /// step, so read it between steps only. Busy requests, and pools without
  /// host state, are refused.
  StatusOr<const float *> v(int64_t requestId, int64_t layer) const;
  StatusOr<const float *> d(int64_t requestId, int64_t layer) const;
  /// Read-only view of the request's `last_observed` row on `layer`
  /// (`numBlocks()` entries: the iteration plus one at which each block was
  /// last scored, 0 = never), under the rules of `v`; pools created without
  /// `lastObserved` refuse.
  StatusOr<const int32_t *> lastObserved(int64_t requestId,
                                         int64_t layer) const;

  /// The arrays of `layer`, to build the step call's descriptors; all null
  /// if `layer` is not in `[0, numLayers)` or the pool has no host state.
  /// Writing through them is the compiled step's business: only for
  /// requests between `beginStep` and `endStep` of the calling thread.
  LayerBuffers layer(int64_t layer) const;

  //===--------------------------------------------------------------------===//
  // MTP bookkeeping (SPIN_SPEC §4)
  //===--------------------------------------------------------------------===//

  /// True if a verification step of `requestId` left buffered rows on any
  /// layer (`obs_rows[slot] > 0`) whose EMA update still awaits the accepted
  /// count. False for unknown and busy requests.
  bool hasPendingRows(int64_t requestId) const;

  /// Records that `accepted` draft tokens (0..rows-1) of the buffered
  /// verification step of `requestId` were accepted. The replay of rows
  /// 0..accepted runs at the start of the request's next step of each layer
  /// that buffered rows, inside the compiled code, which reads this count
  /// from its `spin.accepted` input; the record lasts until every such layer
  /// has stepped. Fails if nothing is pending, if `accepted` is out of range,
  /// or if the step was already committed.
  Status commit(int64_t requestId, int32_t accepted);

  /// The count recorded by `commit`, if any, for building the next step's
  /// `spin.accepted` input.
  std::optional<int32_t> recordedCommit(int64_t requestId) const;

  /// Drops the recorded count of `requestId` (endStep does this by itself
  /// once every committed layer has replayed it).
  void clearCommit(int64_t requestId);

  //===--------------------------------------------------------------------===//
  // Steps
  //===--------------------------------------------------------------------===//

  /// Admits a batch to a step of the state layers `layers` (every layer when
  /// empty) and marks its requests busy; all-or-nothing. Refuses unknown ids,
  /// duplicates within the batch, requests busy in another step (or being
  /// reset), and requests with buffered rows on one of those layers that the
  /// step cannot replay: without `canCommit` (a graph without MTP replay) any
  /// buffered rows are an error; with it they must be covered by a recorded
  /// `commit` (rows buffered after the commit, by an earlier step of the
  /// same layer, are not).
  Status beginStep(Span<int64_t> requestIds, bool canCommit,
                   Span<int64_t> layers = {});

  /// Ends the step begun by `beginStep(requestIds, ..., layers)`: the
  /// requests are no longer busy, and their recorded commits no longer cover
  /// `layers` (they were replayed there); a commit that covers no layer any
  /// more is dropped. Ids that are unknown or not inside a step are ignored.
  void endStep(Span<int64_t> requestIds, Span<int64_t> layers = {});

  /// For a pool without host state: records that the step the requests are
  /// inside (between `beginStep` and `endStep`) leaves `rows` buffered MTP
  /// rows on each of `layers` (a verification step's `obs_rows`; 0 for
  /// none). `commit` and `beginStep` consult this record as they consult
  /// `obs_rows` of a host pool. All-or-nothing: fails, changing nothing, for
  /// pools with host state (their compiled code writes `obs_rows`), unknown
  /// layers, `rows` outside `[0, maxRows]`, and requests that are unknown
  /// or not inside a step.
  Status setBufferedRows(Span<int64_t> requestIds, Span<int64_t> layers,
                         int32_t rows);

private:
  /// One request's row of a per-slot f32 field of `layer` (V or D).
  StatusOr<const float *> row(int64_t requestId, int64_t layer,
                              float *LayerBuffers::*field) const;

  /// Why a request may not be touched right now.
  enum class Busy : uint8_t { None, Step, Zeroing };

  struct Request {
    int32_t slot = 0;
    Busy busy = Busy::None;
    /// The accepted count of the buffered verification step, once committed.
    std::optional<int32_t> commit;
    /// The layers whose buffered rows `commit` covers and that have not
    /// stepped (replayed it) since.
    std::vector<bool> commitLayers;
  };

  struct FreeArena {
    void operator()(void *p) const { std::free(p); }
  };

  /// `fields` is the layout of the host arena: the full state, or for a
  /// pool without host state only `obsRows` (the other offsets unused).
  StatePool(const StatePoolOptions &options, const StateLayout &fields,
            std::unique_ptr<void, FreeArena> arena, char *base);

  /// The arrays of `layer`, which must be in range; only `obsRows` (and the
  /// sizes) for a pool without host state.
  LayerBuffers buffers(int64_t layer) const;

  /// Zeroes V, D and `last_observed` and resets `it`, `obs_rows` of `slot`
  /// on every layer.
  /// The caller owns the slot (it is marked busy), so no lock is held.
  void zeroSlot(int32_t slot) const;

  /// First layer with buffered rows of `slot`, or -1.
  int64_t firstPendingLayer(int32_t slot) const;

  /// The entry of `requestId`, or null; the caller holds `mutex`.
  Request *find(int64_t requestId);
  const Request *find(int64_t requestId) const;

  /// Success if `request` (the entry of `requestId`, maybe null) is live and
  /// not busy; otherwise the error, whose busy message ends in `action`
  /// (e.g. "reset it after endStep").
  static Status checkIdle(const Request *request, int64_t requestId,
                          const char *action);

  Status checkLayer(int64_t layer) const;

  /// Success for a pool with host state; otherwise an error saying that
  /// `what` of `requestId` lives in device memory.
  Status checkHostState(int64_t requestId, const char *what) const;

  /// The entry of `requestId` when `what` of its `layer` can be read on the
  /// host (live and idle request, valid layer, host state); the caller
  /// holds `mutex`.
  StatusOr<const Request *> readable(int64_t requestId, int64_t layer,
                                     const char *what) const;

  StatePoolOptions opts;
  int64_t blocks;
  int64_t arenaBytes;
  StateLayout fields;
  int64_t stride;
  std::unique_ptr<void, FreeArena> arena;
  /// The arena's first 64-byte boundary.
  char *base;

  mutable std::mutex mutex;
  std::unordered_map<int64_t, Request> requests;
  /// Free slot indices, lowest first, so that live requests stay packed at
  /// the front of the pool.
  std::priority_queue<int32_t, std::vector<int32_t>, std::greater<int32_t>>
      freeSlots;
};

} // namespace spin::runtime

#endif // SPIN_RUNTIME_STATEPOOL_H
