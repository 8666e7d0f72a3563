//===- GpuProgram.h - load and launch a compiled GPU artifact ---*- C++ -*-===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
// A GPU artifact (docs/GPU-ABI.md) is a directory with manifest.json and
// one PTX module per chip. `GpuManifest` reads and validates the manifest
// (no driver needed); `GpuProgram` loads the PTX for the current device,
// owns the program's scratch buffers, side stream, events and error record,
// and issues one decode step on a caller's stream: the same arguments as
// the CPU step function (Runtime-ABI.md), on device tensors, with the state
// of a GpuStatePool.
//
// A step never synchronises with the host, so it can be captured in a CUDA
// graph; `check()` is the synchronising call that reports the errors the
// kernels found in the contents of device inputs.
//
//===----------------------------------------------------------------------===//

#ifndef SPIN_RUNTIME_GPUPROGRAM_H
#define SPIN_RUNTIME_GPUPROGRAM_H

#include "spin/Runtime/CudaDriver.h"
#include "spin/Runtime/GpuStatePool.h"
#include "spin/Runtime/Status.h"
#include "spin/Runtime/StepProgram.h"

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace spin::runtime {

/// A contiguous row-major tensor in device memory, owned by the caller.
struct DeviceTensorRef {
  cuda::CUdeviceptr data = 0;
  std::vector<int64_t> shape;
  DType dtype = DType::f32;

  int64_t numElements() const { return numElementsOf(shape); }
};

//===----------------------------------------------------------------------===//
// The manifest
//===----------------------------------------------------------------------===//

/// One kernel of the PTX module.
struct GpuKernelSpec {
  std::string name;
  std::array<uint32_t, 3> block = {1, 1, 1};
  /// Dynamic shared memory per block, in bytes.
  int64_t sharedBytes = 0;
};

/// One kernel parameter of a launch (docs/GPU-ABI.md, "Kernel parameters").
struct GpuLaunchArg {
  /// Argument: pointer, the device address of step argument `index`;
  /// Scratch: pointer, scratch buffer `index`; Errors: pointer, the error
  /// record; Dim: i32, run-time size `dim` of step argument `index`; I32:
  /// i32, the constant `value`; Status: pointer, the i32 [B] status output
  /// `index` (statusOutputName), the caller's or a buffer of the program;
  /// Layer: i32, `value` plus the step's run-time layer; TensorMap: the
  /// 128-byte tensor map of step argument `index` (a key cache [pages,
  /// page, 128] of bytes, or its f32 scales [pages, page]) in boxes of
  /// `value` rows of one page.
  using Kind = LaunchArgKind;
  Kind kind = Kind::Argument;
  int64_t index = 0;
  int64_t dim = 0;
  int32_t value = 0;
};

/// One kernel launch of the step, in issue order.
struct GpuLaunchSpec {
  /// Index into GpuManifest::kernels.
  size_t kernel = 0;
  std::array<uint32_t, 3> grid = {1, 1, 1};
  /// 0: the caller's stream; 1: the program's side stream.
  int stream = 0;
  /// Events the launch's stream waits for first.
  std::vector<int64_t> wait;
  /// The event recorded after the launch, or -1.
  int64_t record = -1;
  std::vector<GpuLaunchArg> args;
};

/// A device buffer the program allocates once.
struct GpuScratchSpec {
  std::string name;
  int64_t bytes = 0;
};

/// The manifest's `state` section: the pool shape the program was compiled
/// for.
struct GpuStateSpec {
  int64_t layers = 1;
  int64_t capacity = 1;
  int64_t blockSize = 64;
  int64_t maxRows = 1;
  /// KV slots per state page where the state follows the KV pages
  /// (docs/GPU-ABI.md, "Paged state"); 0: the compact layout.
  int64_t pageSize = 0;
};

/// A validated manifest.json. Every index in it is in range (launch kernels,
/// events, argument and scratch indices, dims), every role and element type
/// is known, and every state argument has the ABI's element type and rank.
struct GpuManifest {
  /// The artifact directory (as given to `read`).
  std::string directory;
  std::string function;
  std::string compilerVersion;
  /// Pipeline options the artifact was compiled with, as text.
  std::vector<std::pair<std::string, std::string>> options;
  /// Chip ("sm_90a") -> PTX file name in `directory`.
  std::vector<std::pair<std::string, std::string>> ptx;
  /// PTX ISA version times ten (86 for 8.6); 0 if not given.
  int64_t ptxVersion = 0;
  /// 1 when every kernel waits for the grids before it (griddepcontrol.wait)
  /// before it touches memory, so that its launch may be programmatic
  /// (docs/GPU-ABI.md, "Launch order"); 0 (absent) for other artifacts,
  /// whose kernels are always launched plainly.
  int64_t programmaticLaunch = 0;
  /// The largest batch the launch grids cover.
  int64_t batch = 0;
  /// Query rows per request.
  int64_t rows = 1;
  /// Absent for stateless programs (no section, or one with no layers).
  std::optional<GpuStateSpec> state;
  std::vector<ArgSpec> arguments;
  std::vector<GpuScratchSpec> scratch;
  int64_t streams = 1;
  int64_t events = 0;
  std::vector<GpuKernelSpec> kernels;
  std::vector<GpuLaunchSpec> launches;
  /// How many per-row status outputs the launches write (1 + the largest
  /// Status index; docs/GPU-ABI.md, "Row status").
  int64_t statusOutputs = 0;
  /// Whether the step takes its layer at run time (a Layer launch argument;
  /// docs/GPU-ABI.md, "The layer at run time"): state argument `layer`s
  /// are then offsets from it.
  bool layerArgument = false;

  /// Reads and validates `directory`/manifest.json; every listed PTX file
  /// must exist. Errors name the file and the field
  /// ("DIR/manifest.json: launches[2].args[0].index: 7 is out of range:
  /// the step has 5 arguments").
  static StatusOr<GpuManifest> read(const std::string &directory);
  /// Validates manifest text as if read from `directory`/manifest.json.
  static StatusOr<GpuManifest> parse(const std::string &json,
                                     const std::string &directory);

  /// The manifest as manifest.json text, in the form `parse` reads: the
  /// compiler writes artifacts with it, so that one piece of code defines
  /// both directions.
  std::string toJson() const;

  /// The PTX key to load on a device of compute capability `major.minor`:
  /// the arch-specific chip (9.0 -> "sm_90a", 10.0 -> "sm_100a", 10.3 ->
  /// "sm_103a") if listed; otherwise the portable target ("sm_XY", no
  /// suffix) with the largest XY not above the device's, which the driver
  /// JIT-compiles forward. An error lists what is available.
  StatusOr<std::string> ptxFor(int major, int minor) const;

  /// True if the step takes an `accepted` argument (MTP replay).
  bool commits() const;
  /// True if the step binds state-pool fields.
  bool stateful() const;
};

//===----------------------------------------------------------------------===//
// The program
//===----------------------------------------------------------------------===//

/// Scratch buffers that the programs loaded with it share (docs/GPU-ABI.md,
/// "One workspace for many programs"): a program's scratch buffer is the
/// workspace's buffer of the same name when that one is large enough, else
/// a new one (zeroed) that the programs loaded later share; earlier programs
/// keep theirs. Programs compiled from one graph for several batch sizes
/// name their buffers alike (`<kernel>_<use>`) and use each one alike, so
/// one workspace serves all of them at the size of the largest. Their steps
/// share the memory: issue them on one stream (or order them with events),
/// as the steps of one program.
class GpuWorkspace {
public:
  static StatusOr<std::shared_ptr<GpuWorkspace>> create(int device = -1);
  explicit GpuWorkspace(std::shared_ptr<cuda::Context> context);

  const std::shared_ptr<cuda::Context> &context() const { return ctx; }
  /// Bytes of the buffers the workspace holds now.
  int64_t bytes() const;
  /// Buffers the workspace holds now.
  int64_t buffers() const;

private:
  friend class GpuProgram;
  /// The buffer `name` of at least `bytes`; `shared` says whether it was
  /// there already (else it is new, and zeroed).
  StatusOr<std::shared_ptr<cuda::DeviceMemory>> buffer(const std::string &name,
                                                       int64_t bytes,
                                                       bool &shared);

  std::shared_ptr<cuda::Context> ctx;
  mutable std::mutex mutex;
  std::map<std::string, std::shared_ptr<cuda::DeviceMemory>> named;
};

/// A loaded GPU artifact.
///
/// Thread safety: `run` and `check` may be called from any thread (a mutex
/// guards the host side), but the device work of steps shares the
/// program's scratch buffers, side stream and error record: issue the steps
/// of one program on one stream at a time, or order them with events.
class GpuProgram {
public:
  /// Reads the manifest (manifest errors come first and need no GPU), then
  /// loads the PTX for the device of `cuda::Context::get(device)`.
  static StatusOr<std::unique_ptr<GpuProgram>> load(const std::string &dir,
                                                    int device = -1);
  static StatusOr<std::unique_ptr<GpuProgram>>
  load(std::shared_ptr<cuda::Context> context, const std::string &dir);
  /// On the workspace's device, with its scratch buffers from `workspace`.
  static StatusOr<std::unique_ptr<GpuProgram>>
  load(std::shared_ptr<GpuWorkspace> workspace, const std::string &dir);

  GpuProgram(const GpuProgram &) = delete;
  GpuProgram &operator=(const GpuProgram &) = delete;
  /// Releases the module, streams, events and buffers; the caller must not
  /// destroy the program while its steps (or graphs captured from them)
  /// may still run.
  ~GpuProgram();

  const GpuManifest &manifest() const { return spec; }
  const std::vector<ArgSpec> &signature() const { return spec.arguments; }
  /// The PTX key that was loaded ("sm_90a").
  const std::string &chip() const { return loadedChip; }
  const std::shared_ptr<cuda::Context> &context() const { return ctx; }

  /// The options of a state pool for this program (its `state` section)
  /// with `numSlots` slots; an error for stateless programs.
  StatusOr<StatePoolOptions> stateOptions(int64_t numSlots) const;

  /// Issues one step on `stream`. `inputs` maps the graph inputs (and
  /// "positions", "request_ids", optionally "reset") to device tensors,
  /// `outputs` the results ("topk", ...) to caller-allocated device
  /// tensors; `requestIds` is the host copy of the batch's request ids
  /// (the kernels read the device "request_ids" input, which must hold the
  /// same values: it is not read back). Checks names, element types and
  /// shapes against the manifest, and every request against `pool` (live,
  /// not twice in the batch, MTP commits as StatePool::beginStep); marks
  /// the requests busy for the call; uploads their slots (and for MTP
  /// programs the accepted counts recorded by `commit`) and launches the
  /// kernels with the fork/join of docs/GPU-ABI.md. Nothing is issued for a
  /// refused step.
  ///
  /// The slots and accepted counts are staged in page-locked host memory.
  /// Outside a stream capture, four staging buffers are used in turn, each
  /// guarded by an event recorded at the end of its step; reusing one
  /// waits for that event (cuEventSynchronize) only if the host is four
  /// steps ahead of the device. A step captured in a CUDA graph gets a
  /// staging buffer of its own for the life of the program, so replays
  /// upload the slots and accepted counts of the capture (replay a graph
  /// only for the same requests, and capture MTP steps without pending
  /// commits); `reserveCapturedSteps` adds buffers outside a capture.
  ///
  /// `layer` (here and in runBatch): the run-time layer of a program
  /// compiled with `layer-argument` (docs/GPU-ABI.md, "The layer at run
  /// time"), which steps the state of layer `layer` plus each state
  /// argument's layer; 0 for other programs.
  Status run(GpuStatePool &pool,
             const std::map<std::string, DeviceTensorRef> &inputs,
             const std::map<std::string, DeviceTensorRef> &outputs,
             const std::vector<int64_t> &requestIds, cuda::CUstream stream,
             int64_t layer = 0);

  /// A step whose batch is described by device tensors only
  /// (docs/GPU-ABI.md, "Device batches"): `inputs` holds, besides the
  /// graph inputs, "positions" and "request_ids", the i32 [B] "slots"
  /// (each row's state slot in `pool`, chosen by the caller; -1 marks a
  /// padding row, which no kernel reads state for or writes, and whose
  /// top-K row is -1), for programs that commit MTP rows the i32 [B]
  /// "accepted" (the drafts accepted at each row's previous step, replayed
  /// into the state at this one) and optionally "reset" (i1/i8 [B]: start
  /// the row's slot afresh before the step). The host reads none of them:
  /// a CUDA graph captured from such a step replays correctly for whatever
  /// they hold at each replay, with no staging and no host work. The
  /// kernels check them and skip a bad row, recording it in the error
  /// record that `check` reads: a slot outside [0, slots) other than -1,
  /// a slot an earlier row of the batch has, an accepted count outside
  /// [0, buffered rows). The first such step hands `pool` to device
  /// batches for good (GpuStatePool::useDeviceBatches), and fails if it
  /// has admitted requests.
  Status runBatch(GpuStatePool &pool,
                  const std::map<std::string, DeviceTensorRef> &inputs,
                  const std::map<std::string, DeviceTensorRef> &outputs,
                  cuda::CUstream stream, int64_t layer = 0);

  /// A device-batch step (as above) on state the caller allocated: every
  /// state field the program binds is a contiguous device tensor in
  /// `inputs`, named stateTensorName(layer, field) ("state.0.v"), of the
  /// field's element type and shape with the slot count as size 0 (the
  /// same for every field; docs/GPU-ABI.md, "State tensors"), and zeroed
  /// before its first use. No pool is involved: the tensors are the state.
  Status runBatch(const std::map<std::string, DeviceTensorRef> &inputs,
                  const std::map<std::string, DeviceTensorRef> &outputs,
                  cuda::CUstream stream, int64_t layer = 0);

  /// A step of a stateless (dense) program, which takes no state pool.
  Status run(const std::map<std::string, DeviceTensorRef> &inputs,
             const std::map<std::string, DeviceTensorRef> &outputs,
             cuda::CUstream stream);

  /// Waits for `stream` (the stream the steps were issued on), then reads
  /// and clears the error record. Returns the first error a kernel found
  /// since the last check, naming the code's meaning, the value, the
  /// request and the row; the request was skipped and its state left as it
  /// was. The record's `request` is the batch index; it is named by its
  /// request id when exactly one step was issued since the last check.
  /// Also reports a failed step (a driver error found by the
  /// synchronisation).
  Status check(cuda::CUstream stream);

  /// Whether a kernel that follows another kernel of the step on the same
  /// stream is launched as a programmatic dependent launch (on by default;
  /// only for artifacts whose manifest says `programmatic_launch`, and
  /// where the driver has cuLaunchKernelEx): it may then be scheduled while
  /// its predecessor finishes, and waits for it on the device
  /// (docs/GPU-ABI.md, "Launch order"). Off gives plain launches, for
  /// comparisons. Applies to the steps issued afterwards.
  void setProgrammaticLaunches(bool on) { programmaticLaunches = on; }
  bool programmaticLaunchesEnabled() const { return programmaticLaunches; }

  /// Allocates staging buffers for `count` more captured steps (call
  /// outside any stream capture); `capturedStepsLeft` says how many remain.
  Status reserveCapturedSteps(int64_t count);
  int64_t capturedStepsLeft() const;

private:
  GpuProgram() = default;

  /// One step's upload buffers: `host` (page-locked) is copied to `device`
  /// (slots, then accepted counts).
  struct Staging {
    int32_t *host = nullptr;
    cuda::CUdeviceptr device = 0;
  };

  /// What every `load` ends with: a program of `manifest` on `context`'s
  /// device, its scratch from `workspace` when there is one.
  static StatusOr<std::unique_ptr<GpuProgram>>
  create(GpuManifest manifest, std::shared_ptr<cuda::Context> context,
         std::shared_ptr<GpuWorkspace> workspace);

  /// `loadOnDevice` and its steps, in order (GpuProgram.cpp says what each
  /// does).
  Status loadOnDevice();
  StatusOr<std::string> loadModule();
  Status getKernels(const std::string &path);
  Status allocateBuffers();
  Status createStreamsAndEvents();
  Status createStaging();
  /// Zeroes the scratch buffers on `stream`: all of them, or only those
  /// the program does not share with programs loaded before it (which are
  /// zero already and may be in use by their steps).
  Status clearScratch(cuda::CUstream stream, bool shared = true);
  Status addStagingBlock(int64_t entries, std::vector<Staging> &out);

  /// One step being issued (defined in GpuProgram.cpp).
  struct Step;
  Status issue(GpuStatePool *pool,
               const std::map<std::string, DeviceTensorRef> &inputs,
               const std::map<std::string, DeviceTensorRef> &outputs,
               const std::vector<int64_t> &requestIds, cuda::CUstream stream,
               bool deviceBatch = false, int64_t layer = 0);
  /// The parts of `issue` (GpuProgram.cpp says what each does).
  Status bindArguments(const std::map<std::string, DeviceTensorRef> &inputs,
                       const std::map<std::string, DeviceTensorRef> &outputs,
                       Step &step) const;
  Status bindState(Step &step) const;
  Status bindStateTensors(const std::map<std::string, DeviceTensorRef> &inputs,
                          Step &step) const;
  Status checkKernelSizes(Step &step) const;
  Status stageSlots(Step &step);
  Status uploadStaging(Step &step, const Staging &staging, bool captured,
                       bool upload);
  Status launchKernels(Step &step);
  /// One launch's kernel parameters: a 64-bit word each, or a tensor map,
  /// and their addresses as cuLaunchKernel takes them; reused from launch
  /// to launch.
  struct LaunchParameters {
    std::vector<uint64_t> values;
    std::vector<cuda::TensorMap> maps;
    std::vector<void *> params;
  };
  Status issueLaunch(Step &step, size_t l, bool &overlap,
                     LaunchParameters &parameters);
  Status kernelParameters(const Step &step, const GpuLaunchSpec &launch,
                          LaunchParameters &parameters) const;
  Status encodeTensorMap(const Step &step, const GpuLaunchArg &arg,
                      cuda::TensorMap &map) const;
  Status recordRingEvent(Step &step);
  Status failStep(Step &step, const Status &error);

  GpuManifest spec;
  std::shared_ptr<cuda::Context> ctx;
  std::string loadedChip;
  cuda::CUmodule module = nullptr;
  std::vector<cuda::CUfunction> functions;
  std::vector<std::shared_ptr<cuda::DeviceMemory>> scratch;
  /// Per scratch buffer: taken from the workspace as it was (not new).
  std::vector<bool> sharedScratch;
  std::shared_ptr<GpuWorkspace> workspace;
  cuda::DeviceMemory errorRecord;
  cuda::PinnedMemory errorHost;
  /// `batch` zero bytes: the `reset` argument when the caller gives none.
  cuda::DeviceMemory noReset;
  /// `batch` i32: where the selections write the row status that the
  /// caller does not ask for.
  cuda::DeviceMemory statusSink;
  cuda::CUstream sideStream = nullptr;
  /// Stateful programs: the stream that uploads a captured step's staging
  /// at capture time (outside the graph).
  cuda::CUstream uploadStream = nullptr;
  std::vector<cuda::CUevent> events;
  cuda::CUevent forkEvent = nullptr, joinEvent = nullptr;

  /// Bytes of one staging entry: slots at 0, accepted at `acceptedOffset`.
  int64_t stagingBytes = 0, acceptedOffset = 0;
  std::vector<cuda::PinnedMemory> stagingHost;
  std::vector<cuda::DeviceMemory> stagingDevice;
  std::vector<Staging> ring;
  std::vector<cuda::CUevent> ringEvents;
  std::vector<bool> ringUsed;
  /// What each ring entry's device copy holds: valid after an upload of
  /// `batch` rows (its host copy's values) on `stream`.
  struct RingUpload {
    bool valid = false;
    cuda::CUstream stream = nullptr;
    int64_t batch = 0;
  };
  std::vector<RingUpload> ringHeld;
  size_t ringNext = 0;
  std::vector<Staging> captureFree;

  std::atomic<bool> programmaticLaunches{true};

  mutable std::mutex mutex;
  /// Request ids of the steps issued since the last check (at most
  /// `kHistory`), and how many steps that was.
  std::deque<std::vector<int64_t>> history;
  int64_t stepsSinceCheck = 0;
};

} // namespace spin::runtime

#endif // SPIN_RUNTIME_GPUPROGRAM_H
