//===- GpuStatePool.cpp - per-request SPIN state in device memory ---------===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
//===----------------------------------------------------------------------===//

#include "spin/Runtime/GpuStatePool.h"

#include <utility>

namespace spin::runtime {

using namespace cuda;

CUdeviceptr GpuLayerBuffers::field(StateField field) const {
  return stateFieldOf(*this, field, [](CUdeviceptr array) { return array; });
}

//===----------------------------------------------------------------------===//
// Creation
//===----------------------------------------------------------------------===//

StatusOr<std::unique_ptr<GpuStatePool>>
GpuStatePool::create(const StatePoolOptions &options, CUstream stream,
                     int device) {
  StatusOr<std::shared_ptr<Context>> context = Context::get(device);
  if (!context.ok())
    return context.status();
  return create(*context, options, stream);
}

StatusOr<std::unique_ptr<GpuStatePool>>
GpuStatePool::create(std::shared_ptr<Context> context,
                     const StatePoolOptions &options, CUstream stream) {
  if (options.lastObserved)
    return Status::error("a GPU state pool cannot keep last_observed: the "
                         "GPU path explores randomly only (staleness-score "
                         "and block-age run on the CPU path)");
  StatePoolOptions hostOptions = options;
  hostOptions.hostState = false;
  StatusOr<StateLayout> layout = StatePool::layoutOf(hostOptions);
  if (!layout.ok())
    return layout.status();
  StatusOr<std::unique_ptr<StatePool>> host = StatePool::create(hostOptions);
  if (!host.ok())
    return host.status();

  StatusOr<DeviceMemory> memory = DeviceMemory::allocate(
      context, static_cast<size_t>(layout->bytes), "a state pool");
  if (!memory.ok())
    return memory.status();
  ContextScope scope(*context);
  if (!scope.status().ok())
    return scope.status();
  const Driver &d = context->driver();
  if (Status s =
          d.check(d.memsetD8Async(memory->get(), 0,
                                  static_cast<size_t>(layout->bytes), stream),
                  "cuMemsetD8Async");
      !s.ok())
    return s;
  return std::unique_ptr<GpuStatePool>(
      new GpuStatePool(std::move(context), std::move(host).value(), *layout,
                       std::move(memory).value()));
}

GpuStatePool::GpuStatePool(std::shared_ptr<Context> context,
                           std::unique_ptr<StatePool> hostPool,
                           StateLayout stateLayout, DeviceMemory deviceMemory)
    : ctx(std::move(context)), host(std::move(hostPool)), layout(stateLayout),
      memory(std::move(deviceMemory)),
      lastStream(static_cast<size_t>(host->options().numSlots), nullptr),
      slotEvents(static_cast<size_t>(host->options().numSlots), nullptr),
      released(static_cast<size_t>(host->options().numSlots), false) {}

GpuStatePool::~GpuStatePool() {
  ContextScope scope(*ctx);
  if (!scope.status().ok())
    return;
  for (CUevent event : slotEvents)
    if (event)
      ctx->driver().eventDestroy(event);
}

GpuLayerBuffers GpuStatePool::layer(int64_t layer) const {
  const StatePoolOptions &o = options();
  if (layer < 0 || layer >= o.numLayers)
    return GpuLayerBuffers();
  CUdeviceptr start = memory.get() + layer * layout.layerStride;
  GpuLayerBuffers b;
  auto at = [&](StateField field) -> CUdeviceptr {
    return layout.holds(field) ? start + layout.offset(field) : 0;
  };
  b.v = at(StateField::V);
  b.d = at(StateField::D);
  b.it = at(StateField::It);
  b.obsRows = at(StateField::ObsRows);
  b.obsPos = at(StateField::ObsPos);
  b.obsLen = at(StateField::ObsLen);
  b.obsMask = at(StateField::ObsMask);
  b.obsZ = at(StateField::ObsZ);
  b.predAt = at(StateField::PredAt);
  b.predKeys = at(StateField::PredKeys);
  b.numSlots = o.numSlots;
  b.capacity = o.capacity;
  b.maxRows = o.maxRows;
  b.numBlocks = layout.numBlocks;
  return b;
}

//===----------------------------------------------------------------------===//
// Request lifecycle
//===----------------------------------------------------------------------===//

Status GpuStatePool::zeroSlot(int32_t slot, CUstream stream) const {
  ContextScope scope(*ctx);
  if (!scope.status().ok())
    return scope.status();
  const Driver &drv = ctx->driver();
  const int64_t c = options().capacity;
  const size_t rowBytes = static_cast<size_t>(c) * sizeof(float);
  for (int64_t l = 0; l < options().numLayers; ++l) {
    GpuLayerBuffers b = layer(l);
    const std::pair<CUdeviceptr, size_t> ranges[] = {
        {b.v + slot * rowBytes, rowBytes},
        {b.d + slot * rowBytes, rowBytes},
        {b.it + slot * sizeof(int64_t), sizeof(int64_t)},
        {b.obsRows + slot * sizeof(int32_t), sizeof(int32_t)},
        {b.predAt + slot * kPredictionRecordSize * sizeof(int32_t),
         kPredictionRecordSize * sizeof(int32_t)},
    };
    for (const auto &[address, bytes] : ranges)
      if (Status s = drv.check(drv.memsetD8Async(address, 0, bytes, stream),
                               "cuMemsetD8Async");
          !s.ok())
        return s;
  }
  return Status::success();
}

void GpuStatePool::noteStep(Span<int64_t> requestIds, CUstream stream) {
  const Driver &d = ctx->driver();
  int capture = CU_STREAM_CAPTURE_STATUS_NONE;
  if (d.streamIsCapturing(stream, &capture) != CUDA_SUCCESS ||
      capture != CU_STREAM_CAPTURE_STATUS_NONE)
    return;
  std::lock_guard<std::mutex> lock(streamsMutex);
  for (int64_t id : requestIds)
    if (StatusOr<int32_t> slot = host->slotOf(id); slot.ok())
      lastStream[static_cast<size_t>(*slot)] = stream;
}

Status GpuStatePool::recordSlotEvent(int32_t slot, CUstream on) {
  const Driver &d = ctx->driver();
  CUevent &event = slotEvents[static_cast<size_t>(slot)];
  if (!event)
    if (Status s = d.check(d.eventCreate(&event, CU_EVENT_DISABLE_TIMING),
                           "cuEventCreate");
        !s.ok())
      return s;
  return d.check(d.eventRecord(event, on), "cuEventRecord");
}

Status GpuStatePool::orderAfterSteps(int32_t slot, CUstream stream) {
  const Driver &d = ctx->driver();
  const auto at = static_cast<size_t>(slot);
  CUstream last = lastStream[at];
  if (last && last != stream)
    if (Status s = recordSlotEvent(slot, last); !s.ok())
      return s;
  if ((last && last != stream) || released[at])
    if (Status s = d.check(d.streamWaitEvent(stream, slotEvents[at], 0),
                           "cuStreamWaitEvent");
        !s.ok())
      return s;
  released[at] = false;
  return Status::success();
}

Status GpuStatePool::useDeviceBatches() {
  std::lock_guard<std::mutex> lock(streamsMutex);
  if (deviceBatches)
    return Status::success();
  if (int64_t live = host->liveRequests(); live > 0)
    return Status::error(
        "the state pool has " + std::to_string(live) +
        " admitted request(s): device batches address its slots directly, "
        "so they need a pool that admits none (release them first)");
  deviceBatches = true;
  return Status::success();
}

StatusOr<int32_t> GpuStatePool::acquire(int64_t requestId, CUstream stream) {
  StatusOr<int32_t> slot = host->acquire(requestId);
  if (!slot.ok())
    return slot;
  Status ordered = Status::success();
  {
    ContextScope scope(*ctx);
    // Tested after the admission, under the lock useDeviceBatches takes to
    // count admitted requests: one of the two always sees the other.
    std::lock_guard<std::mutex> lock(streamsMutex);
    if (deviceBatches) {
      host->release(requestId).ignore();
      return Status::error(
          "cannot admit request " + std::to_string(requestId) +
          ": the state pool serves device batches, whose slots the caller "
          "assigns (GpuProgram::runBatch); use a pool of its own for "
          "requests admitted by id");
    }
    ordered = scope.status().ok() ? orderAfterSteps(*slot, stream)
                                  : scope.status();
  }
  if (!ordered.ok()) {
    host->release(requestId).ignore();
    return Status::error("cannot order the reset of request " +
                         std::to_string(requestId) + "'s slot " +
                         std::to_string(*slot) +
                         " after the steps of its previous request: " +
                         ordered.message());
  }
  if (Status s = zeroSlot(*slot, stream); !s.ok()) {
    host->release(requestId).ignore();
    return Status::error("cannot reset the state of request " +
                         std::to_string(requestId) + ": " + s.message());
  }
  return slot;
}

Status GpuStatePool::release(int64_t requestId) {
  StatusOr<int32_t> slot = host->slotOf(requestId);
  if (!slot.ok())
    return host->release(requestId); // its error names the request
  ContextScope scope(*ctx);
  if (!scope.status().ok())
    return scope.status();
  // Under the lock until `released` is set: an acquire of the freed slot
  // on another thread waits here before it orders its zeroing.
  std::lock_guard<std::mutex> lock(streamsMutex);
  const auto at = static_cast<size_t>(*slot);
  CUstream last = lastStream[at];
  if (last)
    if (Status s = recordSlotEvent(*slot, last); !s.ok())
      return Status::error("cannot release request " +
                           std::to_string(requestId) +
                           ": marking the end of its steps failed: " +
                           s.message());
  Status freed = host->release(requestId);
  if (freed.ok() && last) {
    released[at] = true;
    lastStream[at] = nullptr;
  }
  return freed;
}

Status GpuStatePool::reset(int64_t requestId, CUstream stream) {
  // The host reset validates the request and drops buffered rows and the
  // recorded commit; the device arrays follow on the stream.
  if (Status s = host->reset(requestId); !s.ok())
    return s;
  StatusOr<int32_t> slot = host->slotOf(requestId);
  if (!slot.ok())
    return slot.status();
  {
    ContextScope scope(*ctx);
    std::lock_guard<std::mutex> lock(streamsMutex);
    Status ordered =
        scope.status().ok() ? orderAfterSteps(*slot, stream) : scope.status();
    if (!ordered.ok())
      return Status::error("cannot reset the state of request " +
                           std::to_string(requestId) + ": " +
                           ordered.message());
  }
  if (Status s = zeroSlot(*slot, stream); !s.ok())
    return Status::error("cannot reset the state of request " +
                         std::to_string(requestId) + ": " + s.message());
  return Status::success();
}

//===----------------------------------------------------------------------===//
// Inspection
//===----------------------------------------------------------------------===//

Status GpuStatePool::read(int64_t requestId, int64_t layerIndex,
                          CUdeviceptr GpuLayerBuffers::*field, int64_t rowBytes,
                          void *out, CUstream stream) const {
  StatusOr<int32_t> slot = host->slotOf(requestId);
  if (!slot.ok())
    return slot.status();
  if (layerIndex < 0 || layerIndex >= options().numLayers)
    return Status::error("layer " + std::to_string(layerIndex) +
                         " is out of range: the pool has " +
                         std::to_string(options().numLayers) + " layers");
  ContextScope scope(*ctx);
  if (!scope.status().ok())
    return scope.status();
  const Driver &d = ctx->driver();
  CUdeviceptr address = layer(layerIndex).*field + *slot * rowBytes;
  if (Status s =
          d.check(d.memcpyDtoHAsync(out, address, static_cast<size_t>(rowBytes),
                                    stream),
                  "cuMemcpyDtoHAsync");
      !s.ok())
    return s;
  return d.check(d.streamSynchronize(stream), "cuStreamSynchronize");
}

StatusOr<std::vector<float>> GpuStatePool::v(int64_t requestId, int64_t layer,
                                             CUstream stream) const {
  std::vector<float> row(static_cast<size_t>(options().capacity));
  if (Status s = read(requestId, layer, &GpuLayerBuffers::v,
                      options().capacity * sizeof(float), row.data(), stream);
      !s.ok())
    return s;
  return row;
}

StatusOr<std::vector<float>> GpuStatePool::d(int64_t requestId, int64_t layer,
                                             CUstream stream) const {
  std::vector<float> row(static_cast<size_t>(options().capacity));
  if (Status s = read(requestId, layer, &GpuLayerBuffers::d,
                      options().capacity * sizeof(float), row.data(), stream);
      !s.ok())
    return s;
  return row;
}

StatusOr<int64_t> GpuStatePool::iteration(int64_t requestId, int64_t layer,
                                          CUstream stream) const {
  int64_t value = 0;
  if (Status s = read(requestId, layer, &GpuLayerBuffers::it, sizeof(int64_t),
                      &value, stream);
      !s.ok())
    return s;
  return value;
}

StatusOr<int32_t> GpuStatePool::bufferedRows(int64_t requestId, int64_t layer,
                                             CUstream stream) const {
  int32_t value = 0;
  if (Status s = read(requestId, layer, &GpuLayerBuffers::obsRows,
                      sizeof(int32_t), &value, stream);
      !s.ok())
    return s;
  return value;
}

} // namespace spin::runtime
