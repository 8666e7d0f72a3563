//===- GpuProgram.cpp - load and launch a compiled GPU artifact -----------===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
//===----------------------------------------------------------------------===//

#include "spin/Runtime/GpuProgram.h"

#include "spin/Runtime/Span.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>

namespace spin::runtime {

using namespace cuda;

namespace {

/// Staging buffers used in turn by steps issued outside a capture.
constexpr size_t kRingSize = 4;
/// Staging buffers for captured steps allocated at load time.
constexpr int64_t kInitialCapturedSteps = 16;
/// Steps whose request ids `check` remembers.
constexpr size_t kHistory = 64;
/// Bytes of each JIT log buffer.
constexpr size_t kJitLogBytes = 16384;

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

std::string str(int64_t value) { return std::to_string(value); }

int64_t roundUp(int64_t value, int64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

std::string trimLog(const std::vector<char> &log) {
  std::string text(log.data(), strnlen(log.data(), log.size()));
  while (!text.empty() && (text.back() == '\n' || text.back() == ' '))
    text.pop_back();
  return text;
}

/// Creates an event without timing, the only kind the program records.
Status createEvent(const Driver &d, CUevent &event) {
  return d.check(d.eventCreate(&event, CU_EVENT_DISABLE_TIMING),
                 "cuEventCreate");
}

} // namespace

//===----------------------------------------------------------------------===//
// Loading
//===----------------------------------------------------------------------===//

StatusOr<std::unique_ptr<GpuProgram>> GpuProgram::load(const std::string &dir,
                                                       int device) {
  // Manifest errors come first: they need no driver.
  StatusOr<GpuManifest> manifest = GpuManifest::read(dir);
  if (!manifest.ok())
    return manifest.status();
  StatusOr<std::shared_ptr<Context>> context = Context::get(device);
  if (!context.ok())
    return context.status();
  return create(std::move(manifest).value(), std::move(context).value(),
                nullptr);
}

StatusOr<std::unique_ptr<GpuProgram>>
GpuProgram::load(std::shared_ptr<Context> context, const std::string &dir) {
  StatusOr<GpuManifest> manifest = GpuManifest::read(dir);
  if (!manifest.ok())
    return manifest.status();
  return create(std::move(manifest).value(), std::move(context), nullptr);
}

StatusOr<std::unique_ptr<GpuProgram>>
GpuProgram::load(std::shared_ptr<GpuWorkspace> workspace,
                 const std::string &dir) {
  if (!workspace)
    return Status::error("no workspace (a null GpuWorkspace)");
  StatusOr<GpuManifest> manifest = GpuManifest::read(dir);
  if (!manifest.ok())
    return manifest.status();
  std::shared_ptr<Context> context = workspace->context();
  return create(std::move(manifest).value(), std::move(context),
                std::move(workspace));
}

StatusOr<std::unique_ptr<GpuProgram>>
GpuProgram::create(GpuManifest manifest, std::shared_ptr<Context> context,
                   std::shared_ptr<GpuWorkspace> workspace) {
  std::unique_ptr<GpuProgram> program(new GpuProgram());
  program->spec = std::move(manifest);
  program->ctx = std::move(context);
  program->workspace = std::move(workspace);
  if (Status s = program->loadOnDevice(); !s.ok())
    return s;
  return StatusOr<std::unique_ptr<GpuProgram>>(std::move(program));
}

StatusOr<std::shared_ptr<GpuWorkspace>> GpuWorkspace::create(int device) {
  StatusOr<std::shared_ptr<Context>> context = Context::get(device);
  if (!context.ok())
    return context.status();
  return std::make_shared<GpuWorkspace>(std::move(context).value());
}

/// A scratch buffer of `bytes` named `name` (in the error if it fails),
/// owned by a program alone or shared through a workspace.
static StatusOr<std::shared_ptr<DeviceMemory>>
allocateScratch(const std::shared_ptr<Context> &ctx, const std::string &name,
                int64_t bytes) {
  StatusOr<DeviceMemory> memory = DeviceMemory::allocate(
      ctx, static_cast<size_t>(bytes), "scratch buffer \"" + name + "\"");
  if (!memory.ok())
    return memory.status();
  return std::make_shared<DeviceMemory>(std::move(memory).value());
}

GpuWorkspace::GpuWorkspace(std::shared_ptr<Context> context)
    : ctx(std::move(context)) {}

int64_t GpuWorkspace::bytes() const {
  std::lock_guard<std::mutex> lock(mutex);
  int64_t total = 0;
  for (const auto &[name, memory] : named)
    total += static_cast<int64_t>(memory->size());
  return total;
}

int64_t GpuWorkspace::buffers() const {
  std::lock_guard<std::mutex> lock(mutex);
  return static_cast<int64_t>(named.size());
}

StatusOr<std::shared_ptr<DeviceMemory>>
GpuWorkspace::buffer(const std::string &name, int64_t bytes, bool &shared) {
  std::lock_guard<std::mutex> lock(mutex);
  auto it = named.find(name);
  if (it != named.end() && static_cast<int64_t>(it->second->size()) >= bytes) {
    shared = true;
    return it->second;
  }
  shared = false;
  StatusOr<std::shared_ptr<DeviceMemory>> owned =
      allocateScratch(ctx, name, bytes);
  if (!owned.ok())
    return owned.status();
  // Programs loaded later take this one; those that took a smaller one
  // keep it (their captured graphs hold its address).
  named[name] = owned.value();
  return owned;
}

Status GpuProgram::loadOnDevice() {
  ContextScope scope(*ctx);
  if (!scope.status().ok())
    return scope.status();
  const Driver &d = ctx->driver();

  StatusOr<std::string> path = loadModule();
  if (!path.ok())
    return path.status();
  if (Status s = getKernels(*path); !s.ok())
    return s;
  if (Status s = allocateBuffers(); !s.ok())
    return s;
  if (Status s = createStreamsAndEvents(); !s.ok())
    return s;
  if (Status s = createStaging(); !s.ok())
    return s;

  // Zero what kernels read before writing: the error record, the default
  // reset flags and the scratch, which kernels leave zeroed after each step.
  CUstream setup = nullptr;
  if (Status s = clearScratch(setup, /*shared=*/false); !s.ok())
    return s;
  if (Status s = d.check(
          d.memsetD8Async(errorRecord.get(), 0, errorRecord.size(), setup),
          "cuMemsetD8Async");
      !s.ok())
    return s;
  if (noReset.get())
    if (Status s =
            d.check(d.memsetD8Async(noReset.get(), 0, noReset.size(), setup),
                    "cuMemsetD8Async");
        !s.ok())
      return s;
  return d.check(d.streamSynchronize(setup), "cuStreamSynchronize");
}

/// Picks the PTX for this device (GpuManifest::ptxFor), reads it and
/// JIT-loads it as the program's module; returns the file's path, which
/// later errors name. A JIT failure carries the JIT's error log, the only
/// place that says what in the PTX the driver rejected.
StatusOr<std::string> GpuProgram::loadModule() {
  const Driver &d = ctx->driver();
  StatusOr<std::string> chip =
      spec.ptxFor(ctx->computeMajor(), ctx->computeMinor());
  if (!chip.ok())
    return chip.status();
  loadedChip = *chip;
  std::string fileName;
  for (const auto &[key, file] : spec.ptx)
    if (key == loadedChip)
      fileName = file;
  const std::string path = spec.directory + "/" + fileName;
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  if (!in)
    return Status::error("cannot read " + path);
  const std::string ptx = text.str(); // NUL-terminated by c_str()

  std::vector<char> errorLog(kJitLogBytes, 0), infoLog(kJitLogBytes, 0);
  int options[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
                   CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES};
  void *values[] = {
      errorLog.data(),
      reinterpret_cast<void *>(static_cast<uintptr_t>(kJitLogBytes)),
      infoLog.data(),
      reinterpret_cast<void *>(static_cast<uintptr_t>(kJitLogBytes))};
  if (Status s =
          d.check(d.moduleLoadDataEx(&module, ptx.c_str(), 4, options, values),
                  "cuModuleLoadDataEx");
      !s.ok()) {
    module = nullptr;
    std::string log = trimLog(errorLog);
    return Status::error(path + ": " + s.message() +
                         (log.empty() ? "" : "; JIT log: " + log));
  }
  return path;
}

/// Looks up every kernel of the manifest in the module loaded from `path`,
/// in manifest order (launches index them), and opts each kernel that needs
/// more dynamic shared memory than the default into its size, which the
/// driver would otherwise refuse at launch.
Status GpuProgram::getKernels(const std::string &path) {
  const Driver &d = ctx->driver();
  int sharedOptIn = -1;
  for (const GpuKernelSpec &kernel : spec.kernels) {
    CUfunction function = nullptr;
    if (Status s =
            d.check(d.moduleGetFunction(&function, module, kernel.name.c_str()),
                    "cuModuleGetFunction");
        !s.ok())
      return Status::error("kernel \"" + kernel.name + "\" of " +
                           spec.directory + "/manifest.json is not in " + path +
                           ": " + s.message());
    // Any dynamic shared memory gets the attribute: what a launch may take
    // without it (48 KiB) counts the kernel's static arrays too, which the
    // manifest does not give.
    if (kernel.sharedBytes > 0) {
      if (sharedOptIn < 0)
        if (Status s = d.check(
                d.deviceGetAttribute(
                    &sharedOptIn,
                    CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                    ctx->device()),
                "cuDeviceGetAttribute(MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)");
            !s.ok())
          return s;
      if (kernel.sharedBytes > sharedOptIn)
        return Status::error("kernel \"" + kernel.name + "\" needs " +
                             str(kernel.sharedBytes) +
                             " bytes of dynamic shared memory; the device "
                             "allows at most " +
                             str(sharedOptIn));
      if (Status s = d.check(
              d.funcSetAttribute(
                  function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                  static_cast<int>(kernel.sharedBytes)),
              "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES) of kernel \"" +
                  kernel.name + "\"");
          !s.ok())
        return s;
    }
    functions.push_back(function);
  }
  return Status::success();
}

/// Allocates the device buffers every step shares: the manifest's scratch
/// buffers, the error record with its page-locked host copy (which `check`
/// reads back), and, for programs that take a `reset` argument, the zero
/// flags passed when the caller gives none.
Status GpuProgram::allocateBuffers() {
  for (const GpuScratchSpec &buffer : spec.scratch) {
    bool shared = false;
    StatusOr<std::shared_ptr<DeviceMemory>> memory =
        workspace ? workspace->buffer(buffer.name, buffer.bytes, shared)
                  : allocateScratch(ctx, buffer.name, buffer.bytes);
    if (!memory.ok())
      return memory.status();
    scratch.push_back(std::move(memory).value());
    sharedScratch.push_back(shared);
  }
  StatusOr<DeviceMemory> record =
      DeviceMemory::allocate(ctx, 4 * sizeof(int32_t), "the error record");
  if (!record.ok())
    return record.status();
  errorRecord = std::move(record).value();
  StatusOr<PinnedMemory> recordCopy =
      PinnedMemory::allocate(ctx, 4 * sizeof(int32_t), "the error record");
  if (!recordCopy.ok())
    return recordCopy.status();
  errorHost = std::move(recordCopy).value();
  bool takesReset = std::any_of(
      spec.arguments.begin(), spec.arguments.end(),
      [](const ArgSpec &a) { return a.role == ArgSpec::Role::Reset; });
  if (takesReset) {
    StatusOr<DeviceMemory> zeros = DeviceMemory::allocate(
        ctx, static_cast<size_t>(spec.batch), "the default reset flags");
    if (!zeros.ok())
      return zeros.status();
    noReset = std::move(zeros).value();
  }
  if (spec.statusOutputs > 0) {
    StatusOr<DeviceMemory> sink = DeviceMemory::allocate(
        ctx, static_cast<size_t>(spec.batch) * sizeof(int32_t),
        "the row status nobody reads");
    if (!sink.ok())
      return sink.status();
    statusSink = std::move(sink).value();
  }
  return Status::success();
}

/// Creates the side stream of a two-stream program, the manifest's events,
/// and the fork and join events that order the side stream within the
/// caller's stream (docs/GPU-ABI.md).
Status GpuProgram::createStreamsAndEvents() {
  const Driver &d = ctx->driver();
  if (spec.streams > 1)
    if (Status s = d.check(d.streamCreate(&sideStream, CU_STREAM_NON_BLOCKING),
                           "cuStreamCreate");
        !s.ok())
      return s;
  events.assign(static_cast<size_t>(spec.events), nullptr);
  for (CUevent &event : events)
    if (Status s = createEvent(d, event); !s.ok())
      return s;
  if (sideStream) {
    if (Status s = createEvent(d, forkEvent); !s.ok())
      return s;
    if (Status s = createEvent(d, joinEvent); !s.ok())
      return s;
  }
  return Status::success();
}

/// Sizes a staging entry (slots at 0, accepted counts at `acceptedOffset`)
/// and, for stateful programs, creates the upload stream of captured steps,
/// the ring of eager steps with its events, and the first staging entries
/// of captured steps, so that the first captures need no
/// `reserveCapturedSteps`.
Status GpuProgram::createStaging() {
  const Driver &d = ctx->driver();
  acceptedOffset =
      roundUp(spec.batch * static_cast<int64_t>(sizeof(int32_t)), 256);
  stagingBytes = 2 * acceptedOffset;
  if (spec.stateful()) {
    if (Status s =
            d.check(d.streamCreate(&uploadStream, CU_STREAM_NON_BLOCKING),
                    "cuStreamCreate");
        !s.ok())
      return s;
    if (Status s = addStagingBlock(kRingSize, ring); !s.ok())
      return s;
    ringEvents.assign(kRingSize, nullptr);
    for (CUevent &event : ringEvents)
      if (Status s = createEvent(d, event); !s.ok())
        return s;
    ringUsed.assign(kRingSize, false);
    ringHeld.assign(kRingSize, RingUpload());
    if (Status s = addStagingBlock(kInitialCapturedSteps, captureFree); !s.ok())
      return s;
  }
  return Status::success();
}

Status GpuProgram::clearScratch(cuda::CUstream stream, bool shared) {
  const Driver &d = ctx->driver();
  for (size_t i = 0; i < scratch.size(); ++i) {
    if (sharedScratch[i] && !shared)
      continue;
    const DeviceMemory &buffer = *scratch[i];
    if (Status s =
            d.check(d.memsetD8Async(buffer.get(), 0, buffer.size(), stream),
                    "cuMemsetD8Async");
        !s.ok())
      return s;
  }
  return Status::success();
}

Status GpuProgram::addStagingBlock(int64_t entries, std::vector<Staging> &out) {
  size_t bytes = static_cast<size_t>(entries * stagingBytes);
  StatusOr<PinnedMemory> host =
      PinnedMemory::allocate(ctx, bytes, "the slots of steps");
  if (!host.ok())
    return host.status();
  StatusOr<DeviceMemory> device =
      DeviceMemory::allocate(ctx, bytes, "the slots of steps");
  if (!device.ok())
    return device.status();
  for (int64_t e = 0; e < entries; ++e) {
    Staging staging;
    staging.host = reinterpret_cast<int32_t *>(
        static_cast<char *>(host->get()) + e * stagingBytes);
    staging.device = device->get() + e * stagingBytes;
    out.push_back(staging);
  }
  stagingHost.push_back(std::move(host).value());
  stagingDevice.push_back(std::move(device).value());
  return Status::success();
}

GpuProgram::~GpuProgram() {
  if (!ctx)
    return;
  ContextScope scope(*ctx);
  if (!scope.status().ok())
    return;
  const Driver &d = ctx->driver();
  for (CUevent event : events)
    if (event)
      d.eventDestroy(event);
  for (CUevent event : ringEvents)
    if (event)
      d.eventDestroy(event);
  if (forkEvent)
    d.eventDestroy(forkEvent);
  if (joinEvent)
    d.eventDestroy(joinEvent);
  if (sideStream)
    d.streamDestroy(sideStream);
  if (uploadStream)
    d.streamDestroy(uploadStream);
  if (module)
    d.moduleUnload(module);
}

StatusOr<StatePoolOptions> GpuProgram::stateOptions(int64_t numSlots) const {
  if (!spec.state)
    return Status::error("the program " + spec.function + " of " +
                         spec.directory +
                         " has no state section: it needs no state pool");
  StatePoolOptions options;
  options.numLayers = spec.state->layers;
  options.numSlots = numSlots;
  options.capacity = spec.state->capacity;
  options.maxRows = spec.state->maxRows;
  options.blockSize = spec.state->blockSize;
  options.hostState = false;
  return options;
}

Status GpuProgram::reserveCapturedSteps(int64_t count) {
  if (count <= 0)
    return Status::error("reserveCapturedSteps needs a positive count, got " +
                         str(count));
  if (!spec.stateful())
    return Status::success(); // Stateless steps stage nothing.
  if (count > std::numeric_limits<int64_t>::max() / stagingBytes)
    return Status::error("reserveCapturedSteps(" + str(count) + "): " +
                         str(count) + " staging entries of " +
                         str(stagingBytes) + " bytes overflow 64 bits");
  std::lock_guard<std::mutex> lock(mutex);
  return addStagingBlock(count, captureFree);
}

int64_t GpuProgram::capturedStepsLeft() const {
  std::lock_guard<std::mutex> lock(mutex);
  return spec.stateful() ? static_cast<int64_t>(captureFree.size())
                         : std::numeric_limits<int64_t>::max();
}

//===----------------------------------------------------------------------===//
// Steps
//===----------------------------------------------------------------------===//

Status GpuProgram::run(GpuStatePool &pool,
                       const std::map<std::string, DeviceTensorRef> &inputs,
                       const std::map<std::string, DeviceTensorRef> &outputs,
                       const std::vector<int64_t> &requestIds,
                       CUstream stream, int64_t layer) {
  return issue(&pool, inputs, outputs, requestIds, stream,
               /*deviceBatch=*/false, layer);
}

/// A device batch has no request ids: the slots are the caller's tensor.
static const std::vector<int64_t> kNoRequestIds;

Status
GpuProgram::runBatch(GpuStatePool &pool,
                     const std::map<std::string, DeviceTensorRef> &inputs,
                     const std::map<std::string, DeviceTensorRef> &outputs,
                     CUstream stream, int64_t layer) {
  return issue(&pool, inputs, outputs, kNoRequestIds, stream,
               /*deviceBatch=*/true, layer);
}

Status
GpuProgram::runBatch(const std::map<std::string, DeviceTensorRef> &inputs,
                     const std::map<std::string, DeviceTensorRef> &outputs,
                     CUstream stream, int64_t layer) {
  return issue(nullptr, inputs, outputs, kNoRequestIds, stream,
               /*deviceBatch=*/true, layer);
}

Status GpuProgram::run(const std::map<std::string, DeviceTensorRef> &inputs,
                       const std::map<std::string, DeviceTensorRef> &outputs,
                       CUstream stream) {
  if (spec.stateful())
    return Status::error("the program " + spec.function +
                         " binds SPIN state: run it with a GpuStatePool and "
                         "the batch's request ids");
  return issue(nullptr, inputs, outputs, {}, stream);
}

/// One step being issued: its arguments as the kernels see them, and how far
/// the issue got, which `failStep` needs to undo it.
struct GpuProgram::Step {
  Step(GpuStatePool *pool, const std::vector<int64_t> &requestIds,
       CUstream stream, bool stateful, bool deviceBatch, size_t arguments)
      : pool(pool), requestIds(requestIds), stream(stream), stateful(stateful),
        deviceBatch(deviceBatch), address(arguments, 0), shapes(arguments) {}

  GpuStatePool *pool;
  const std::vector<int64_t> &requestIds;
  CUstream stream;
  const bool stateful;
  /// The slots and accepted counts are the caller's device tensors
  /// (runBatch): no request bookkeeping, no staging.
  const bool deviceBatch;
  /// Per step argument: its device address and its run-time shape.
  std::vector<CUdeviceptr> address;
  /// Per status output: the caller's tensor or the program's sink.
  std::vector<CUdeviceptr> status;
  /// The run-time layer (programs with a Layer launch argument).
  int64_t layer = 0;
  std::vector<std::vector<int64_t>> shapes;
  /// Requests in the step, and query rows per request.
  int64_t batch = -1;
  int64_t rows = 1;
  /// The state layers the step binds, and those of them that buffer its
  /// rows (MTP).
  std::vector<int64_t> layers, bufferingLayers;
  /// The ring entry that stages the step's slots; kRingSize for none (a
  /// stateless or captured step).
  size_t ringEntry = kRingSize;
  /// Whether device work of the step was issued.
  bool issued = false;
};

Status GpuProgram::issue(GpuStatePool *pool,
                         const std::map<std::string, DeviceTensorRef> &inputs,
                         const std::map<std::string, DeviceTensorRef> &outputs,
                         const std::vector<int64_t> &requestIds,
                         CUstream stream, bool deviceBatch, int64_t layer) {
  if (deviceBatch && !spec.stateful())
    return Status::error("the program " + spec.function +
                         " keeps no SPIN state: step it with run() and no "
                         "state (its padding rows are rows of length 0)");
  if (layer != 0 && !spec.layerArgument)
    return Status::error("the program " + spec.function + " (" +
                         spec.directory +
                         ") was compiled for fixed layers: it takes no "
                         "run-time layer (got layer " +
                         str(layer) + "; compile it with layer-argument)");
  if (layer < 0 || layer > kInt32Max)
    return Status::error("layer " + str(layer) + " is outside [0, 2^31)");
  Step step(pool, requestIds, stream, spec.stateful(), deviceBatch,
            spec.arguments.size());
  step.layer = layer;
  if (Status s = bindArguments(inputs, outputs, step); !s.ok())
    return s;
  // A device batch without a pool steps the caller's state tensors.
  if (Status s = deviceBatch && !pool ? bindStateTensors(inputs, step)
                                      : bindState(step);
      !s.ok())
    return s;
  if (Status s = checkKernelSizes(step); !s.ok())
    return s;

  ContextScope scope(*ctx);
  if (!scope.status().ok())
    return scope.status();

  // Admission: from here on a failure goes through failStep, which ends the
  // step's bookkeeping.
  std::lock_guard<std::mutex> lock(mutex);
  if (deviceBatch) {
    if (pool)
      if (Status s = pool->useDeviceBatches(); !s.ok())
        return s;
    if (Status s = launchKernels(step); !s.ok())
      return failStep(step, s);
    ++stepsSinceCheck;
    if (history.size() == kHistory)
      history.pop_front();
    history.push_back({});
    return Status::success();
  }
  const Span<int64_t> ids(requestIds);
  const Span<int64_t> stepLayers(step.layers);
  if (step.stateful)
    if (Status s =
            pool->bookkeeping().beginStep(ids, spec.commits(), stepLayers);
        !s.ok())
      return s;
  if (step.stateful)
    if (Status s = stageSlots(step); !s.ok())
      return failStep(step, s);
  if (Status s = launchKernels(step); !s.ok())
    return failStep(step, s);

  if (step.stateful) {
    // While the requests are still busy, so that no release slips between.
    pool->noteStep(ids, stream);
    // MTP layers buffered this step's rows (docs/Runtime-ABI.md).
    if (!step.bufferingLayers.empty())
      if (Status s = pool->bookkeeping().setBufferedRows(
              ids, Span<int64_t>(step.bufferingLayers),
              static_cast<int32_t>(step.rows));
          !s.ok())
        return failStep(step, s);
    pool->bookkeeping().endStep(ids, stepLayers);
  }
  ++stepsSinceCheck;
  if (history.size() == kHistory)
    history.pop_front();
  history.push_back(requestIds);
  return Status::success();
}

/// Binds the caller's inputs and outputs to the step's arguments, checking
/// names, element types and shapes against the signature (every error names
/// the tensor, before anything is issued), and sizes the step: its batch
/// (from the tensors, else the request ids or the manifest) and its rows per
/// request (from the positions).
Status
GpuProgram::bindArguments(const std::map<std::string, DeviceTensorRef> &inputs,
                          const std::map<std::string, DeviceTensorRef> &outputs,
                          Step &step) const {
  const std::vector<ArgSpec> &args = spec.arguments;
  const size_t n = args.size();
  std::vector<CUdeviceptr> &address = step.address;
  std::vector<std::vector<int64_t>> &shapes = step.shapes;
  int64_t &batch = step.batch;
  std::string batchFrom;
  auto checkTensor = [&](const ArgSpec &arg, const DeviceTensorRef &tensor,
                         const char *what) -> Status {
    std::string name = std::string(what) + " '" + arg.name + "'";
    if (tensor.dtype != arg.dtype)
      return Status::error(name + " has element type " +
                           dtypeName(tensor.dtype) + ", expected " +
                           dtypeName(arg.dtype));
    if (tensor.shape.size() != arg.shape.size())
      return Status::error(name + " has shape " + shapeString(tensor.shape) +
                           ", expected " + shapeString(arg.shape));
    for (size_t d = 0; d < arg.shape.size(); ++d) {
      if (tensor.shape[d] < 0)
        return Status::error(name + " has a negative size in " +
                             shapeString(tensor.shape));
      if (arg.shape[d] >= 0 && tensor.shape[d] != arg.shape[d])
        return Status::error(name + " has shape " + shapeString(tensor.shape) +
                             ", expected " + shapeString(arg.shape));
    }
    if (!tensor.data && tensor.numElements() > 0)
      return Status::error(name + " has no data (a null device pointer)");
    if (!isPagedCacheInput(arg.name)) {
      if (batch < 0) {
        batch = tensor.shape[0];
        batchFrom = name;
      } else if (tensor.shape[0] != batch) {
        return Status::error(name + " has batch size " + str(tensor.shape[0]) +
                             " but " + batchFrom + " has " + str(batch));
      }
    }
    return Status::success();
  };
  for (size_t i = 0; i < n; ++i) {
    const ArgSpec &arg = args[i];
    switch (arg.role) {
    case ArgSpec::Role::Slots:
    case ArgSpec::Role::Accepted:
      if (!step.deviceBatch)
        break;
      [[fallthrough]];
    case ArgSpec::Role::Input:
    case ArgSpec::Role::Positions:
    case ArgSpec::Role::RequestIds:
    case ArgSpec::Role::Reset: {
      auto it = inputs.find(arg.name);
      if (it == inputs.end()) {
        if (arg.role == ArgSpec::Role::Reset) {
          address[i] = noReset.get(); // shape set once the batch is known
          break;
        }
        return Status::error("missing input '" + arg.name + "' " +
                             shapeString(arg.shape) + " " +
                             dtypeName(arg.dtype));
      }
      if (Status s = checkTensor(arg, it->second, "input"); !s.ok())
        return s;
      address[i] = it->second.data;
      shapes[i] = it->second.shape;
      break;
    }
    case ArgSpec::Role::Output: {
      auto it = outputs.find(arg.name);
      if (it == outputs.end())
        return Status::error("missing output '" + arg.name + "' " +
                             shapeString(arg.shape) + " " +
                             dtypeName(arg.dtype));
      if (Status s = checkTensor(arg, it->second, "output"); !s.ok())
        return s;
      address[i] = it->second.data;
      shapes[i] = it->second.shape;
      break;
    }
    default:
      break;
    }
  }
  auto isStatus = [&](const std::string &name) {
    for (int64_t k = 0; k < spec.statusOutputs; ++k)
      if (name == statusOutputName(k))
        return true;
    return false;
  };
  const bool stateTensors = step.deviceBatch && !step.pool;
  auto known = [&](const std::string &name, bool output) {
    if (output && isStatus(name))
      return true;
    if (!output && stateTensors &&
        std::any_of(args.begin(), args.end(), [&](const ArgSpec &a) {
          return a.role == ArgSpec::Role::State &&
                 stateTensorName(a.layer + step.layer, a.name) == name;
        }))
      return true;
    return std::any_of(args.begin(), args.end(), [&](const ArgSpec &a) {
      bool isOutput = a.role == ArgSpec::Role::Output;
      bool staged = a.role == ArgSpec::Role::Slots ||
                    a.role == ArgSpec::Role::Accepted;
      return a.name == name && isOutput == output &&
             a.role != ArgSpec::Role::State &&
             (!staged || step.deviceBatch);
    });
  };
  for (const auto &entry : inputs)
    if (!known(entry.first, false))
      return Status::error("unknown input '" + entry.first + "'");
  for (const auto &entry : outputs)
    if (!known(entry.first, true))
      return Status::error("unknown output '" + entry.first + "'");

  if (batch < 0)
    batch = step.stateful ? static_cast<int64_t>(step.requestIds.size())
                          : spec.batch;
  if (batch > spec.batch)
    return Status::error("the step has a batch of " + str(batch) +
                         " requests but " + spec.directory +
                         " was compiled for at most " + str(spec.batch));
  step.rows = spec.rows;
  for (size_t i = 0; i < n; ++i)
    if (args[i].role == ArgSpec::Role::Positions && shapes[i].size() == 2)
      step.rows = shapes[i][1];
  // Row status outputs: optional; i32 [B] where given.
  step.status.assign(static_cast<size_t>(spec.statusOutputs), statusSink.get());
  for (int64_t k = 0; k < spec.statusOutputs; ++k) {
    auto it = outputs.find(statusOutputName(k));
    if (it == outputs.end())
      continue;
    const DeviceTensorRef &t = it->second;
    std::string name = "output '" + it->first + "'";
    if (t.dtype != DType::i32)
      return Status::error(name + " has element type " + dtypeName(t.dtype) +
                           ", expected i32");
    // The selections' grids cover the compiled batch.
    if (t.shape != std::vector<int64_t>{spec.batch})
      return Status::error(name + " has shape " + shapeString(t.shape) +
                           ", expected " + shapeString({spec.batch}) +
                           " (one status per batch row)");
    if (!t.data)
      return Status::error(name + " has no data (a null device pointer)");
    step.status[static_cast<size_t>(k)] = t.data;
  }
  return Status::success();
}

/// Checks a stateful step's pool against the program (the same CUDA
/// context, one request id per batch row, and the state shape the kernels
/// were compiled for, since they bake in its row strides) and binds the
/// pool's state fields to the step's state arguments, noting the layers the
/// step touches. A stateless step binds nothing.
Status GpuProgram::bindState(Step &step) const {
  if (!step.stateful)
    return Status::success();
  const std::vector<ArgSpec> &args = spec.arguments;
  const size_t n = args.size();
  GpuStatePool *pool = step.pool;
  const int64_t batch = step.batch, rows = step.rows;
  if (!pool)
    return Status::error("the program " + spec.function +
                         " binds SPIN state: run it with a GpuStatePool");
  if (spec.state->pageSize > 0)
    return Status::error(
        spec.directory +
        " keeps its state in pages that follow the KV pages (page_size " +
        str(spec.state->pageSize) +
        "): step it on state tensors (runBatch without a pool, "
        "docs/GPU-ABI.md, \"Paged state\")");
  if (pool->context()->handle() != ctx->handle())
    return Status::error("the state pool lives in another CUDA context "
                         "(device " +
                         str(pool->context()->device()) +
                         ") than the program (device " + str(ctx->device()) +
                         ")");
  if (!step.deviceBatch && static_cast<int64_t>(step.requestIds.size()) != batch)
    return Status::error(str(static_cast<int64_t>(step.requestIds.size())) +
                         " request ids given for a batch of " + str(batch));
  const StatePoolOptions &o = pool->options();
  if (rows > o.maxRows)
    return Status::error("the step has " + str(rows) +
                         " rows per request but the state pool buffers at "
                         "most " +
                         str(o.maxRows));
  // The kernels were compiled for the manifest's state shape: the row
  // strides of the arrays they bind must be the pool's.
  const GpuStateSpec &want = *spec.state;
  auto mismatch = [&](const char *what, int64_t pooled, int64_t compiled) {
    return Status::error("the state pool has " + std::string(what) + " " +
                         str(pooled) + " but " + spec.directory +
                         " was compiled for " + str(compiled));
  };
  if (o.capacity != want.capacity)
    return mismatch("capacity", o.capacity, want.capacity);
  // The row strides of fields with a row per query row or an entry per
  // block are the pool's in the compiled kernels.
  const int64_t compiledBlocks =
      (want.capacity + want.blockSize - 1) / want.blockSize;
  auto binds = [&](StateDim dim) -> const StateFieldInfo * {
    for (const StateFieldInfo &info : kStateFields)
      if (std::find(info.dims.begin(), info.dims.end(), dim) !=
              info.dims.end() &&
          std::any_of(args.begin(), args.end(), [&](const ArgSpec &a) {
            return a.role == ArgSpec::Role::State && a.name == info.name;
          }))
        return &info;
    return nullptr;
  };
  if (binds(StateDim::MaxRows) && o.maxRows != want.maxRows)
    return mismatch("maxRows", o.maxRows, want.maxRows);
  if (const StateFieldInfo *perBlock = binds(StateDim::Blocks);
      perBlock && pool->numBlocks() != compiledBlocks)
    return Status::error(std::string("the state pool's ") + perBlock->name +
                         " rows hold " + str(pool->numBlocks()) +
                         " blocks but " + spec.directory +
                         " was compiled for " + str(compiledBlocks));
  for (size_t i = 0; i < n; ++i) {
    const ArgSpec &arg = args[i];
    if (arg.role != ArgSpec::Role::State)
      continue;
    // The state layer: a run-time layer shifts the compiled ones.
    const int64_t layer = arg.layer + step.layer;
    if (layer >= o.numLayers)
      return Status::error("the program uses state of layer " + str(layer) +
                           " but the pool has " + str(o.numLayers) + " layers");
    if (arg.blockSize > 0 &&
        pool->numBlocks() < (o.capacity + arg.blockSize - 1) / arg.blockSize)
      return Status::error(
          "the state pool's block size (" + str(o.blockSize) +
          ") is larger than layer " + str(layer) + "'s SPIN block size (" +
          str(arg.blockSize) +
          "): its per-block buffers cannot hold the program's blocks");
    GpuLayerBuffers buffers = pool->layer(layer);
    StateField field = *stateFieldFromName(arg.name);
    step.address[i] = buffers.field(field);
    step.shapes[i] = stateFieldShape(field, buffers.sizes());
    for (size_t d = 0; d < arg.shape.size(); ++d)
      if (arg.shape[d] >= 0 && arg.shape[d] != step.shapes[i][d])
        return Status::error("state field '" + arg.name + "' of layer " +
                             str(layer) + " is " +
                             shapeString(step.shapes[i]) +
                             " in the state pool, but the program expects " +
                             shapeString(arg.shape));
    if (std::find(step.layers.begin(), step.layers.end(), layer) ==
        step.layers.end())
      step.layers.push_back(layer);
    if (field == StateField::ObsRows)
      step.bufferingLayers.push_back(layer);
  }
  return Status::success();
}

/// Binds the caller's state tensors (runBatch without a pool): each state
/// argument's tensor must exist, have the field's element type and the
/// shape the kernels were compiled for, with one slot count (size 0) for
/// all of them.
Status GpuProgram::bindStateTensors(
    const std::map<std::string, DeviceTensorRef> &inputs, Step &step) const {
  const GpuStateSpec &want = *spec.state;
  StateSizes sizes;
  sizes.capacity = want.capacity;
  sizes.maxRows = want.maxRows;
  sizes.blocks = (want.capacity + want.blockSize - 1) / want.blockSize;
  sizes.pageSize = want.pageSize;
  // Size 0 is the slot count, or the page count of a paged field; each is
  // the same for every tensor that has it.
  std::string slotsFrom, pagesFrom;
  for (size_t i = 0; i < spec.arguments.size(); ++i) {
    const ArgSpec &arg = spec.arguments[i];
    if (arg.role != ArgSpec::Role::State)
      continue;
    const int64_t layer = arg.layer + step.layer;
    const std::string name = stateTensorName(layer, arg.name);
    StateField field = *stateFieldFromName(arg.name);
    auto it = inputs.find(name);
    if (it == inputs.end())
      return Status::error("missing state tensor '" + name + "' (" +
                           dtypeName(arg.dtype) + ", size 0 the " +
                           (isPagedField(field, sizes) ? "page" : "slot") +
                           " count): the program binds "
                           "state field '" +
                           arg.name + "' of layer " + str(layer));
    const DeviceTensorRef &t = it->second;
    const std::string what = "state tensor '" + name + "'";
    if (t.dtype != arg.dtype)
      return Status::error(what + " has element type " + dtypeName(t.dtype) +
                           ", expected " + dtypeName(arg.dtype));
    const bool paged = isPagedField(field, sizes);
    const char *unit = paged ? "pages" : "slots";
    if (t.shape.empty() || t.shape[0] <= 0)
      return Status::error(what + " has shape " + shapeString(t.shape) +
                           ": size 0 is the " +
                           (paged ? "page" : "slot") + " count, at least 1");
    std::string &from = paged ? pagesFrom : slotsFrom;
    int64_t &count = paged ? sizes.pages : sizes.slots;
    if (from.empty()) {
      count = t.shape[0];
      from = name;
    } else if (t.shape[0] != count) {
      return Status::error(what + " has " + str(t.shape[0]) + " " + unit +
                           " but '" + from + "' has " + str(count));
    }
    std::vector<int64_t> shape = stateFieldShape(field, sizes);
    if (t.shape != shape)
      return Status::error(what + " has shape " + shapeString(t.shape) +
                           ", expected " + shapeString(shape) + " for " +
                           spec.directory);
    if (!t.data)
      return Status::error(what + " has no data (a null device pointer)");
    // The kernels move state cells in vectors of up to 16 bytes (the
    // prediction's V and D, the commit replay's V, D and buffered scores):
    // a view at an odd offset would fault on the device.
    if (t.data % 16 != 0)
      return Status::error(what + " starts at address " + str(t.data) +
                           ", not a multiple of 16 bytes (a view at an odd "
                           "offset); pass an aligned tensor or a copy");
    step.address[i] = t.data;
    step.shapes[i] = shape;
  }
  return Status::success();
}

/// Gives the arguments that no caller's tensor sizes (slots, accepted
/// counts, the default reset flags) the batch as their shape, and checks
/// that every size passed as a kernel parameter fits the kernels' i32,
/// which would otherwise truncate it silently.
Status GpuProgram::checkKernelSizes(Step &step) const {
  const std::vector<ArgSpec> &args = spec.arguments;
  std::vector<std::vector<int64_t>> &shapes = step.shapes;
  for (size_t i = 0; i < args.size(); ++i)
    if (((args[i].role == ArgSpec::Role::Slots ||
          args[i].role == ArgSpec::Role::Accepted) &&
         !step.deviceBatch) ||
        (args[i].role == ArgSpec::Role::Reset && shapes[i].empty()))
      shapes[i] = {step.batch};

  for (size_t l = 0; l < spec.launches.size(); ++l)
    for (const GpuLaunchArg &p : spec.launches[l].args)
      if (p.kind == GpuLaunchArg::Kind::Dim &&
          shapes[p.index][p.dim] > kInt32Max)
        return Status::error("size " + str(p.dim) + " of argument '" +
                             args[p.index].name + "' is " +
                             str(shapes[p.index][p.dim]) +
                             ", more than the i32 kernel parameter of launch " +
                             str(l) + " can hold");
  return Status::success();
}

/// Ends an admitted step that failed: its requests are no longer busy. If
/// device work was issued, the scratch is cleared (kernels leave it zeroed
/// for the next step, docs/GPU-ABI.md, and a step cut short may not have)
/// and the error tells the caller to reset the requests, whose state the
/// issued kernels may have changed.
Status GpuProgram::failStep(Step &step, const Status &error) {
  if (step.stateful && !step.deviceBatch)
    step.pool->bookkeeping().endStep(Span<int64_t>(step.requestIds),
                                     Span<int64_t>(step.layers));
  if (!step.issued)
    return error;
  clearScratch(step.stream).ignore();
  return Status::error(error.message() +
                       " (the step was partly issued: reset its requests)");
}

/// Stages a stateful step's slots and accepted counts in page-locked memory
/// and points its `slots` and `accepted` arguments at the device copy. A
/// step being captured takes a staging entry of its own for good (a replay
/// reads what the capture staged); an eager step takes the next ring entry,
/// waits for the step that used it last only if the host is that far ahead
/// of the device, and skips the upload when the entry's device copy already
/// holds these values.
Status GpuProgram::stageSlots(Step &step) {
  const Driver &d = ctx->driver();
  const std::vector<ArgSpec> &args = spec.arguments;
  const size_t n = args.size();
  GpuStatePool *pool = step.pool;
  const std::vector<int64_t> &requestIds = step.requestIds;
  const int64_t batch = step.batch;
  const CUstream stream = step.stream;
  int status = CU_STREAM_CAPTURE_STATUS_NONE;
  if (Status s =
          d.check(d.streamIsCapturing(stream, &status), "cuStreamIsCapturing");
      !s.ok())
    return s;
  if (status == CU_STREAM_CAPTURE_STATUS_INVALIDATED)
    return Status::error("the stream's capture was invalidated by an "
                         "earlier error");
  const bool captured = status == CU_STREAM_CAPTURE_STATUS_ACTIVE;
  if (captured && captureFree.empty())
    return Status::error("no staging buffer left for a captured step: call "
                         "reserveCapturedSteps outside the capture first");
  // This step's slots and accepted counts.
  std::vector<int32_t> slotsNow(static_cast<size_t>(batch)),
      acceptedNow(static_cast<size_t>(batch));
  for (int64_t b = 0; b < batch; ++b) {
    StatusOr<int32_t> slot = pool->slotOf(requestIds[b]);
    if (!slot.ok())
      return slot.status();
    slotsNow[b] = *slot;
    acceptedNow[b] = pool->recordedCommit(requestIds[b]).value_or(0);
  }
  auto acceptedOf = [&](const Staging &entry) {
    return reinterpret_cast<int32_t *>(reinterpret_cast<char *>(entry.host) +
                                       acceptedOffset);
  };
  Staging staging;
  bool upload = true;
  if (captured) {
    staging = captureFree.back();
    captureFree.pop_back();
  } else {
    size_t &ringEntry = step.ringEntry;
    ringEntry = ringNext;
    ringNext = (ringNext + 1) % kRingSize;
    staging = ring[ringEntry];
    // A ring entry whose device copy already holds this step's values
    // is used as it is when that copy precedes this step: uploaded on
    // this stream, or the entry's last step (which came after its
    // upload) has completed. A decoding loop that steps the same batch
    // uploads nothing after its first few steps.
    RingUpload &held = ringHeld[ringEntry];
    upload = !(held.valid && held.batch == batch &&
               std::equal(slotsNow.begin(), slotsNow.end(), staging.host) &&
               std::equal(acceptedNow.begin(), acceptedNow.end(),
                          acceptedOf(staging)) &&
               (held.stream == stream ||
                d.eventQuery(ringEvents[ringEntry]) == CUDA_SUCCESS));
    if (upload && ringUsed[ringEntry]) {
      // The step that used this buffer four steps ago may still be
      // pending: wait for it (the host is then far ahead of the device).
      CUresult done = d.eventQuery(ringEvents[ringEntry]);
      if (done == CUDA_ERROR_NOT_READY)
        done = d.eventSynchronize(ringEvents[ringEntry]);
      if (Status s = d.check(done, "cuEventSynchronize"); !s.ok())
        return s;
    }
    if (upload)
      held.valid = false;
  }
  for (size_t i = 0; i < n; ++i) {
    if (args[i].role == ArgSpec::Role::Slots)
      step.address[i] = staging.device;
    else if (args[i].role == ArgSpec::Role::Accepted)
      step.address[i] = staging.device + acceptedOffset;
  }
  if (upload) {
    std::copy(slotsNow.begin(), slotsNow.end(), staging.host);
    std::copy(acceptedNow.begin(), acceptedNow.end(), acceptedOf(staging));
  }
  return uploadStaging(step, staging, captured, upload);
}

/// Copies a step's staging entry to the device. A captured step's entry is
/// written once, now, and never again (captureFree gave it to this step for
/// good): it is uploaded here, outside the graph, instead of as a copy node
/// that every replay would run before its first kernel (docs/GPU-ABI.md,
/// "Slots and accepted counts"). The thread's capture mode is relaxed for
/// the upload and its wait, on a stream of the program that no capture
/// uses. An eager step's entry is copied on the caller's stream when
/// `upload` says its device copy does not already hold the values.
Status GpuProgram::uploadStaging(Step &step, const Staging &staging,
                                 bool captured, bool upload) {
  const Driver &d = ctx->driver();
  size_t bytes = static_cast<size_t>(acceptedOffset + step.batch * 4);
  if (captured) {
    int mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    if (Status s = d.check(d.threadExchangeStreamCaptureMode(&mode),
                           "cuThreadExchangeStreamCaptureMode");
        !s.ok())
      return s;
    Status copied = d.check(
        d.memcpyHtoDAsync(staging.device, staging.host, bytes, uploadStream),
        "cuMemcpyHtoDAsync");
    if (copied.ok())
      copied =
          d.check(d.streamSynchronize(uploadStream), "cuStreamSynchronize");
    Status restored = d.check(d.threadExchangeStreamCaptureMode(&mode),
                              "cuThreadExchangeStreamCaptureMode");
    if (!copied.ok())
      return copied;
    if (!restored.ok())
      return restored;
  } else if (upload) {
    if (Status s = d.check(
            d.memcpyHtoDAsync(staging.device, staging.host, bytes, step.stream),
            "cuMemcpyHtoDAsync");
        !s.ok())
      return s;
    step.issued = true;
    ringHeld[step.ringEntry] = {true, step.stream, step.batch};
  }
  return Status::success();
}

/// Issues the step's launches in manifest order within the fork/join of
/// docs/GPU-ABI.md: the side stream waits for the caller's stream before
/// its first launch, and the caller's stream for the side stream after its
/// last. When a launch or the join fails, the ring entry's event is still
/// recorded, so that the entry is not reused while kernels that were issued
/// may still read it.
Status GpuProgram::launchKernels(Step &step) {
  const Driver &d = ctx->driver();
  const CUstream stream = step.stream;
  if (sideStream) {
    if (Status s = d.check(d.eventRecord(forkEvent, stream), "cuEventRecord");
        !s.ok())
      return s;
    if (Status s = d.check(d.streamWaitEvent(sideStream, forkEvent, 0),
                           "cuStreamWaitEvent");
        !s.ok())
      return s;
  }
  LaunchParameters parameters;
  // Per stream: whether a kernel of this step was issued to it with no
  // event wait after it, so that a programmatic launch may overlap it
  // (docs/GPU-ABI.md, "Launch order").
  std::array<bool, 2> afterKernel = {false, false};
  for (size_t l = 0; l < spec.launches.size(); ++l) {
    bool &overlap = afterKernel[spec.launches[l].stream == 0 ? 0 : 1];
    if (Status s = issueLaunch(step, l, overlap, parameters); !s.ok()) {
      recordRingEvent(step).ignore();
      return s;
    }
  }
  if (sideStream) {
    if (Status s =
            d.check(d.eventRecord(joinEvent, sideStream), "cuEventRecord");
        !s.ok()) {
      recordRingEvent(step).ignore();
      return s;
    }
    if (Status s = d.check(d.streamWaitEvent(stream, joinEvent, 0),
                           "cuStreamWaitEvent");
        !s.ok()) {
      recordRingEvent(step).ignore();
      return s;
    }
  }
  return recordRingEvent(step);
}

/// Issues launch `l` of the step: its stream waits for the launch's events,
/// the kernel is launched with its parameters, programmatically when
/// `overlap` says a kernel of the step precedes it on that stream with no
/// wait in between, and the launch's event is recorded. `parameters` are
/// the parameter buffers, reused from launch to launch.
Status GpuProgram::issueLaunch(Step &step, size_t l, bool &overlap,
                               LaunchParameters &parameters) {
  const Driver &d = ctx->driver();
  const GpuLaunchSpec &launch = spec.launches[l];
  const GpuKernelSpec &kernel = spec.kernels[launch.kernel];
  CUstream on = launch.stream == 0 ? step.stream : sideStream;
  if (!launch.wait.empty())
    overlap = false;
  for (int64_t event : launch.wait)
    if (Status s = d.check(d.streamWaitEvent(on, events[event], 0),
                           "cuStreamWaitEvent");
        !s.ok())
      return s;
  if (Status s = kernelParameters(step, launch, parameters); !s.ok())
    return Status::error("launch " + str(l) + " (kernel \"" + kernel.name +
                         "\"): " + s.message());
  std::vector<void *> &params = parameters.params;
  bool programmatic = overlap && programmaticLaunches &&
                      spec.programmaticLaunch && d.launchKernelEx;
  CUresult result;
  if (programmatic) {
    cuda::LaunchAttribute attribute;
    attribute.id = cuda::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attribute.value.programmaticStreamSerializationAllowed = 1;
    cuda::LaunchConfig config;
    config.gridX = launch.grid[0];
    config.gridY = launch.grid[1];
    config.gridZ = launch.grid[2];
    config.blockX = kernel.block[0];
    config.blockY = kernel.block[1];
    config.blockZ = kernel.block[2];
    config.sharedBytes = static_cast<unsigned>(kernel.sharedBytes);
    config.stream = on;
    config.attributes = &attribute;
    config.numAttributes = 1;
    result = d.launchKernelEx(&config, functions[launch.kernel], params.data(),
                              nullptr);
  } else {
    result = d.launchKernel(
        functions[launch.kernel], launch.grid[0], launch.grid[1],
        launch.grid[2], kernel.block[0], kernel.block[1], kernel.block[2],
        static_cast<unsigned>(kernel.sharedBytes), on, params.data(), nullptr);
  }
  if (Status s =
          d.check(result, programmatic ? "cuLaunchKernelEx" : "cuLaunchKernel");
      !s.ok())
    return Status::error("launch " + str(l) + " (kernel \"" + kernel.name +
                         "\"): " + s.message());
  step.issued = true;
  // An event recorded here still completes with this kernel and the work
  // before it, so the next kernel may overlap this one's end even then
  // (docs/benchmarks-kernels.md, "Launch overlap"); only a wait in between
  // makes the next launch a plain one.
  overlap = true;
  if (launch.record >= 0)
    if (Status s =
            d.check(d.eventRecord(events[launch.record], on), "cuEventRecord");
        !s.ok())
      return s;
  return Status::success();
}

/// Fills `parameters` with the kernel parameters of `launch`
/// (docs/GPU-ABI.md, "Kernel parameters"): one 64-bit word each (an i32 in
/// its first four bytes) or, for a tensor map, 128 bytes, and their
/// addresses as cuLaunchKernel takes them.
Status GpuProgram::kernelParameters(const Step &step,
                                    const GpuLaunchSpec &launch,
                                    LaunchParameters &parameters) const {
  std::vector<uint64_t> &values = parameters.values;
  std::vector<void *> &params = parameters.params;
  values.assign(launch.args.size(), 0);
  params.assign(launch.args.size(), nullptr);
  parameters.maps.resize(launch.args.size());
  for (size_t a = 0; a < launch.args.size(); ++a) {
    const GpuLaunchArg &p = launch.args[a];
    int32_t word = 0;
    params[a] = &values[a];
    switch (p.kind) {
    case GpuLaunchArg::Kind::Argument:
      values[a] = step.address[p.index];
      break;
    case GpuLaunchArg::Kind::Scratch:
      values[a] = scratch[p.index]->get();
      break;
    case GpuLaunchArg::Kind::Errors:
      values[a] = errorRecord.get();
      break;
    case GpuLaunchArg::Kind::Dim:
      word = static_cast<int32_t>(step.shapes[p.index][p.dim]);
      std::memcpy(&values[a], &word, sizeof(word));
      break;
    case GpuLaunchArg::Kind::I32:
      word = p.value;
      std::memcpy(&values[a], &word, sizeof(word));
      break;
    case GpuLaunchArg::Kind::Status:
      values[a] = step.status[p.index];
      break;
    case GpuLaunchArg::Kind::Layer:
      word = static_cast<int32_t>(p.value + step.layer);
      std::memcpy(&values[a], &word, sizeof(word));
      break;
    case GpuLaunchArg::Kind::TensorMap:
      if (Status s = encodeTensorMap(step, p, parameters.maps[a]); !s.ok())
        return s;
      params[a] = &parameters.maps[a];
      break;
    }
  }
  return Status::success();
}

/// The tensor map of argument `arg.index` in boxes of `arg.value` rows of
/// one page, as the manifest checked it: a key cache ([pages, page, 128]
/// bytes) written to shared memory in the 128-byte swizzle wgmma reads, or
/// its scales ([pages, page] f32, as bytes) unswizzled. The copy engine
/// needs the tensor 16-byte aligned.
Status GpuProgram::encodeTensorMap(const Step &step, const GpuLaunchArg &arg,
                                cuda::TensorMap &map) const {
  const Driver &d = ctx->driver();
  const std::string &name = spec.arguments[arg.index].name;
  if (!d.tensorMapEncodeTiled)
    return Status::error("the CUDA driver has no cuTensorMapEncodeTiled "
                         "(CUDA 12.0), which the copy of '" +
                         name + "' through a tensor map needs");
  const std::vector<int64_t> &shape = step.shapes[arg.index];
  CUdeviceptr address = step.address[arg.index];
  if (address % 16 != 0)
    return Status::error("argument '" + name + "' is at " + str(address) +
                         ", not 16-byte aligned as its copy through a tensor "
                         "map needs");
  const bool keys = shape.size() == 3;
  // Innermost first: a row's bytes, the page's rows, the pages.
  const uint64_t rowBytes = keys ? shape[2] : shape[1] * 4;
  uint64_t dims[3] = {rowBytes, static_cast<uint64_t>(shape[keys ? 1 : 0]),
                      static_cast<uint64_t>(shape[0])};
  uint64_t strides[2] = {rowBytes, rowBytes * dims[1]};
  unsigned box[3] = {static_cast<unsigned>(keys ? rowBytes : arg.value * 4),
                     keys ? static_cast<unsigned>(arg.value) : 1u, 1};
  unsigned elementStrides[3] = {1, 1, 1};
  return d.check(
      d.tensorMapEncodeTiled(
          &map, cuda::CU_TENSOR_MAP_DATA_TYPE_UINT8, keys ? 3 : 2,
          reinterpret_cast<void *>(address), dims, strides, box,
          elementStrides, cuda::CU_TENSOR_MAP_INTERLEAVE_NONE,
          keys ? cuda::CU_TENSOR_MAP_SWIZZLE_128B
               : cuda::CU_TENSOR_MAP_SWIZZLE_NONE,
          cuda::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
          cuda::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
      "cuTensorMapEncodeTiled of '" + name + "'");
}

/// Records the step's ring entry's event on the caller's stream at the end
/// of the step: the entry's device buffer is not overwritten until the
/// event completes, since every kernel of the step may read it. Captured and
/// stateless steps use no ring entry.
Status GpuProgram::recordRingEvent(Step &step) {
  const Driver &d = ctx->driver();
  if (step.ringEntry < kRingSize) {
    if (Status s =
            d.check(d.eventRecord(ringEvents[step.ringEntry], step.stream),
                    "cuEventRecord");
        !s.ok())
      return s;
    ringUsed[step.ringEntry] = true;
  }
  return Status::success();
}

//===----------------------------------------------------------------------===//
// Errors found on the device
//===----------------------------------------------------------------------===//

Status GpuProgram::check(CUstream stream) {
  ContextScope scope(*ctx);
  if (!scope.status().ok())
    return scope.status();
  const Driver &d = ctx->driver();
  std::lock_guard<std::mutex> lock(mutex);
  if (Status s = d.check(d.streamSynchronize(stream), "cuStreamSynchronize");
      !s.ok())
    return Status::error("a step of " + spec.function +
                         " failed on the device: " + s.message());
  auto *record = static_cast<int32_t *>(errorHost.get());
  if (Status s = d.check(d.memcpyDtoHAsync(record, errorRecord.get(),
                                           4 * sizeof(int32_t), stream),
                         "cuMemcpyDtoHAsync");
      !s.ok())
    return s;
  if (Status s = d.check(d.streamSynchronize(stream), "cuStreamSynchronize");
      !s.ok())
    return s;
  const int32_t code = record[0], value = record[1], index = record[2],
                row = record[3];
  const int64_t steps = stepsSinceCheck;
  std::vector<int64_t> lastIds =
      history.empty() ? std::vector<int64_t>() : history.back();
  stepsSinceCheck = 0;
  history.clear();
  if (code == 0)
    return Status::success();

  if (Status s = d.check(
          d.memsetD8Async(errorRecord.get(), 0, errorRecord.size(), stream),
          "cuMemsetD8Async");
      !s.ok())
    return s;
  if (Status s = d.check(d.streamSynchronize(stream), "cuStreamSynchronize");
      !s.ok())
    return s;
  std::string who;
  if (steps == 1 && lastIds.empty())
    who = "batch index " + str(index);
  else if (steps == 1 && index >= 0 &&
           index < static_cast<int64_t>(lastIds.size()))
    who =
        "request " + str(lastIds[index]) + " (batch index " + str(index) + ")";
  else if (steps > 1)
    who = "batch index " + str(index) + " of one of the " + str(steps) +
          " steps since the last check";
  else
    who = "batch index " + str(index) +
          " (of a step replayed from a CUDA "
          "graph, or issued before the last check)";
  return Status::error(
      "a step of " + spec.function + " found bad input on the device: " + who +
      ", row " + str(row) + ": " + describeDeviceError(code, value) +
      "; the request was skipped and its state left as it was (reset it "
      "before its next step)");
}

} // namespace spin::runtime
