//===- GpuStatePool.h - per-request SPIN state in device memory -*- C++ -*-===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
// The GPU counterpart of StatePool: the same request lifecycle and MTP
// commit bookkeeping (it is a StatePool without host state underneath),
// with the eight per-layer arrays of docs/Runtime-ABI.md in one device
// allocation laid out as StatePool::layoutOf says. Zeroing (create,
// acquire, reset) is issued asynchronously on a caller-given stream, so
// it is ordered with the steps the caller issues on that stream; the
// iteration counters and buffered rows are updated on the device by the
// compiled kernels, and the host keeps only what admission needs (which
// request owns which slot, which are inside a step, how many MTP rows a
// layer buffered, and recorded commits).
//
//===----------------------------------------------------------------------===//

#ifndef SPIN_RUNTIME_GPUSTATEPOOL_H
#define SPIN_RUNTIME_GPUSTATEPOOL_H

#include "spin/Runtime/CudaDriver.h"
#include "spin/Runtime/Span.h"
#include "spin/Runtime/StatePool.h"
#include "spin/Runtime/Status.h"

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace spin::runtime {

/// Device addresses of the ten arrays of one layer (docs/Runtime-ABI.md);
/// all zero for "no such layer".
struct GpuLayerBuffers {
  cuda::CUdeviceptr v = 0;       ///< f32 [numSlots, capacity]
  cuda::CUdeviceptr d = 0;       ///< f32 [numSlots, capacity]
  cuda::CUdeviceptr it = 0;      ///< i64 [numSlots]
  cuda::CUdeviceptr obsRows = 0; ///< i32 [numSlots]
  cuda::CUdeviceptr obsPos = 0;  ///< i32 [numSlots, maxRows]
  cuda::CUdeviceptr obsLen = 0;  ///< i32 [numSlots, maxRows]
  cuda::CUdeviceptr obsMask = 0; ///< i8  [numSlots, numBlocks]
  cuda::CUdeviceptr obsZ = 0;    ///< f32 [numSlots, maxRows, capacity]
  cuda::CUdeviceptr predAt = 0;  ///< i32 [numSlots, 4]
  cuda::CUdeviceptr predKeys = 0; ///< i32 [numSlots, numBlocks]
  /// Always 0: GPU pools keep no `last_observed` (GpuStatePool::create).
  cuda::CUdeviceptr lastObserved = 0;
  int64_t numSlots = 0;
  int64_t capacity = 0;
  int64_t maxRows = 0;
  int64_t numBlocks = 0;

  explicit operator bool() const { return v != 0; }

  /// The array of `field` (0 for `last_observed`, which GPU pools do not
  /// hold) and the sizes its shape is made of (stateFieldShape).
  cuda::CUdeviceptr field(StateField field) const;
  StateSizes sizes() const { return {numSlots, capacity, maxRows, numBlocks}; }
};

/// Per-request, per-layer SPIN state in device memory plus the request
/// table. Thread safety as StatePool's: every member may be called from any
/// thread; a request is busy while inside a step.
class GpuStatePool {
public:
  /// Validates `options` as StatePool::create does (`hostState` is
  /// ignored; `lastObserved` is refused: no GPU program reads it),
  /// allocates the state in `context` and zeroes it on `stream`.
  static StatusOr<std::unique_ptr<GpuStatePool>>
  create(std::shared_ptr<cuda::Context> context,
         const StatePoolOptions &options, cuda::CUstream stream);
  /// As above in `cuda::Context::get(device)`.
  static StatusOr<std::unique_ptr<GpuStatePool>>
  create(const StatePoolOptions &options, cuda::CUstream stream,
         int device = -1);

  GpuStatePool(const GpuStatePool &) = delete;
  GpuStatePool &operator=(const GpuStatePool &) = delete;
  /// Frees the device memory: the caller must not destroy the pool while
  /// device work that uses it may still run.
  ~GpuStatePool();

  const StatePoolOptions &options() const { return host->options(); }
  int64_t numBlocks() const { return host->numBlocks(); }
  /// Bytes of device memory holding the state of all layers.
  int64_t allocatedBytes() const { return layout.bytes; }
  const std::shared_ptr<cuda::Context> &context() const { return ctx; }

  //===--------------------------------------------------------------------===//
  // Request lifecycle
  //===--------------------------------------------------------------------===//

  /// Gives `requestId` the lowest free slot and zeroes its V, D, `it`,
  /// `obs_rows` and prediction-cache record (`pred_at`) on every layer
  /// with asynchronous memsets on `stream` (its first step, issued on
  /// `stream` or after it, is a warm-up). Fails as
  /// StatePool::acquire does, or if the driver refuses the memsets (then
  /// the slot is given back).
  StatusOr<int32_t> acquire(int64_t requestId, cuda::CUstream stream);
  /// Frees the slot of `requestId` (StatePool::release). Steps of the
  /// request may still run on the stream of its last step: the next
  /// acquire of the slot, on any stream, zeroes it only after them (an
  /// event recorded here on that stream, which must still exist).
  Status release(int64_t requestId);
  /// Starts a new turn: zeroes V, D, `it`, `obs_rows` and `pred_at` of
  /// every layer on `stream`, after the request's last step if that was
  /// issued on another stream, and drops the recorded commit
  /// (StatePool::reset).
  Status reset(int64_t requestId, cuda::CUstream stream);
  StatusOr<int32_t> slotOf(int64_t requestId) const {
    return host->slotOf(requestId);
  }
  bool contains(int64_t requestId) const { return host->contains(requestId); }
  int64_t liveRequests() const { return host->liveRequests(); }

  /// Hands the pool's slots to the caller for device batches
  /// (GpuProgram::runBatch, docs/GPU-ABI.md "Device batches"): from then
  /// on the caller picks each batch row's slot and resets slots through the
  /// step's reset flags, and `acquire` is refused, since an admitted
  /// request could share a slot with a row of the caller's. Fails while
  /// requests are admitted. Calling it again is a no-op.
  Status useDeviceBatches();
  bool servesDeviceBatches() const { return deviceBatches; }

  //===--------------------------------------------------------------------===//
  // MTP bookkeeping (StatePool's, from the host's record of buffered rows)
  //===--------------------------------------------------------------------===//

  bool hasPendingRows(int64_t requestId) const {
    return host->hasPendingRows(requestId);
  }
  Status commit(int64_t requestId, int32_t accepted) {
    return host->commit(requestId, accepted);
  }
  std::optional<int32_t> recordedCommit(int64_t requestId) const {
    return host->recordedCommit(requestId);
  }

  //===--------------------------------------------------------------------===//
  // Device buffers and inspection
  //===--------------------------------------------------------------------===//

  /// The device arrays of `layer`; all zero outside `[0, numLayers)`.
  GpuLayerBuffers layer(int64_t layer) const;

  /// Synchronous copies of one request's state on `layer` (for tests and
  /// replay tools): the copy is ordered after the work issued on `stream`,
  /// and the call returns once it is done.
  StatusOr<std::vector<float>> v(int64_t requestId, int64_t layer,
                                 cuda::CUstream stream) const;
  StatusOr<std::vector<float>> d(int64_t requestId, int64_t layer,
                                 cuda::CUstream stream) const;
  StatusOr<int64_t> iteration(int64_t requestId, int64_t layer,
                              cuda::CUstream stream) const;
  /// The device's `obs_rows` of the request on `layer`.
  StatusOr<int32_t> bufferedRows(int64_t requestId, int64_t layer,
                                 cuda::CUstream stream) const;

  /// Notes that a step of `requestIds` was issued on `stream` (GpuProgram
  /// calls it for every eager step), so that releases and resets order
  /// their zeroing after it. Steps captured in a CUDA graph are not noted:
  /// their replays run wherever the graph is launched, which the caller
  /// orders.
  void noteStep(Span<int64_t> requestIds, cuda::CUstream stream);

  /// The request table and the host's MTP record, for step programs
  /// (beginStep, setBufferedRows, endStep).
  StatePool &bookkeeping() { return *host; }
  const StatePool &bookkeeping() const { return *host; }

private:
  GpuStatePool(std::shared_ptr<cuda::Context> context,
               std::unique_ptr<StatePool> host, StateLayout layout,
               cuda::DeviceMemory memory);

  /// Zeroes V, D, `it` and `obs_rows` of `slot` on every layer.
  Status zeroSlot(int32_t slot, cuda::CUstream stream) const;
  /// Makes `stream` wait for the steps of `slot` issued on another stream:
  /// those noted since the last release (`lastStream`), else those the
  /// release recorded (`released`).
  Status orderAfterSteps(int32_t slot, cuda::CUstream stream);
  /// Records the slot's event on `on` (creating the event on first use).
  Status recordSlotEvent(int32_t slot, cuda::CUstream on);

  /// Copies the request's row (`rowBytes` at `slot * rowBytes`) of `field`
  /// on `layer` to `out`, after checking the request and the layer.
  Status read(int64_t requestId, int64_t layer,
              cuda::CUdeviceptr GpuLayerBuffers::*field, int64_t rowBytes,
              void *out, cuda::CUstream stream) const;

  std::shared_ptr<cuda::Context> ctx;
  std::unique_ptr<StatePool> host;
  StateLayout layout;
  cuda::DeviceMemory memory;
  /// Per slot: the stream of the last eager step of its request (null if
  /// none since it was acquired), an event marking the end of the steps of
  /// a released request, and whether that event is still to be waited for.
  mutable std::mutex streamsMutex;
  std::vector<cuda::CUstream> lastStream;
  std::vector<cuda::CUevent> slotEvents;
  std::vector<bool> released;
  /// Set by useDeviceBatches (under streamsMutex, as acquire's check).
  std::atomic<bool> deviceBatches{false};
};

} // namespace spin::runtime

#endif // SPIN_RUNTIME_GPUSTATEPOOL_H
