//===- CudaDriver.h - the CUDA driver API, loaded at run time ---*- C++ -*-===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
// The runtime launches compiled PTX through the CUDA driver API, but must
// build without the CUDA toolkit and load on machines without a GPU: so
// libcuda.so.1 is opened with dlopen on first use, and the few driver types,
// constants and entry points the runtime needs are declared here (values
// and signatures as in the public cuda.h of CUDA 12/13). Every call is
// checked; a failure becomes a Status naming the call and the driver's
// error ("cuModuleLoadDataEx: CUDA_ERROR_INVALID_PTX (a PTX JIT compilation
// failed)"). A machine without the driver or without a device gets a
// Status, never a crash.
//
// The handle types are the same types as cuda.h's (pointers to the same
// opaque structs, CUdeviceptr = unsigned long long), so a program that also
// includes cuda.h can pass its handles in. Everything else lives in
// namespace spin::runtime::cuda, and the entry points are members with
// lower-case names (`memAlloc` binds cuMemAlloc_v2), so cuda.h's macros and
// enumerators do not collide with them.
//
//===----------------------------------------------------------------------===//

#ifndef SPIN_RUNTIME_CUDADRIVER_H
#define SPIN_RUNTIME_CUDADRIVER_H

#include "spin/Runtime/Status.h"

#include <cstddef>
#include <memory>
#include <string>

// The opaque structs behind the driver's handles, declared as cuda.h
// declares them.
struct CUctx_st;
struct CUmod_st;
struct CUfunc_st;
struct CUstream_st;
struct CUevent_st;
struct CUgraph_st;
struct CUgraphExec_st;

namespace spin::runtime::cuda {

//===----------------------------------------------------------------------===//
// Driver types and constants (values from cuda.h)
//===----------------------------------------------------------------------===//

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = ::CUctx_st *;
using CUmodule = ::CUmod_st *;
using CUfunction = ::CUfunc_st *;
using CUstream = ::CUstream_st *;
using CUevent = ::CUevent_st *;
using CUgraph = ::CUgraph_st *;
using CUgraphExec = ::CUgraphExec_st *;

constexpr CUresult CUDA_SUCCESS = 0;
constexpr CUresult CUDA_ERROR_INVALID_VALUE = 1;
constexpr CUresult CUDA_ERROR_NOT_INITIALIZED = 3;
constexpr CUresult CUDA_ERROR_STUB_LIBRARY = 34;
constexpr CUresult CUDA_ERROR_NO_DEVICE = 100;
constexpr CUresult CUDA_ERROR_INVALID_CONTEXT = 201;
constexpr CUresult CUDA_ERROR_INVALID_PTX = 218;
constexpr CUresult CUDA_ERROR_NOT_READY = 600;

/// CUdevice_attribute values.
constexpr int CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75;
constexpr int CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76;
constexpr int CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97;
/// CUfunction_attribute values.
constexpr int CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8;
/// CUjit_option values.
constexpr int CU_JIT_INFO_LOG_BUFFER = 3;
constexpr int CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES = 4;
constexpr int CU_JIT_ERROR_LOG_BUFFER = 5;
constexpr int CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6;
/// CUstream_flags and CUevent_flags.
constexpr unsigned CU_STREAM_NON_BLOCKING = 0x1;
constexpr unsigned CU_EVENT_DISABLE_TIMING = 0x2;
/// CUstreamCaptureMode and CUstreamCaptureStatus values.
constexpr int CU_STREAM_CAPTURE_MODE_GLOBAL = 0;
constexpr int CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1;
constexpr int CU_STREAM_CAPTURE_MODE_RELAXED = 2;
constexpr int CU_STREAM_CAPTURE_STATUS_NONE = 0;
constexpr int CU_STREAM_CAPTURE_STATUS_ACTIVE = 1;
constexpr int CU_STREAM_CAPTURE_STATUS_INVALIDATED = 2;

/// cuTensorMapEncodeTiled's CUtensorMap (128 bytes, 64-byte aligned) and
/// the enum values the runtime passes it.
struct alignas(64) TensorMap {
  uint64_t words[16] = {};
};
constexpr int CU_TENSOR_MAP_DATA_TYPE_UINT8 = 0;
constexpr int CU_TENSOR_MAP_INTERLEAVE_NONE = 0;
constexpr int CU_TENSOR_MAP_SWIZZLE_NONE = 0;
constexpr int CU_TENSOR_MAP_SWIZZLE_128B = 3;
constexpr int CU_TENSOR_MAP_L2_PROMOTION_L2_256B = 3;
constexpr int CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE = 0;

/// CUlaunchAttributeID value and the layouts of cuda.h's CUlaunchAttribute
/// (an id padded to 8 bytes, then a 64-byte value union) and CUlaunchConfig,
/// for cuLaunchKernelEx.
constexpr int CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6;
struct LaunchAttribute {
  int id = 0;
  char pad[4] = {};
  union {
    char bytes[64];
    int programmaticStreamSerializationAllowed;
  } value = {};
};
static_assert(sizeof(LaunchAttribute) == 72, "CUlaunchAttribute's layout");
struct LaunchConfig {
  unsigned gridX = 1, gridY = 1, gridZ = 1;
  unsigned blockX = 1, blockY = 1, blockZ = 1;
  unsigned sharedBytes = 0;
  CUstream stream = nullptr;
  LaunchAttribute *attributes = nullptr;
  unsigned numAttributes = 0;
};

//===----------------------------------------------------------------------===//
// The driver library
//===----------------------------------------------------------------------===//

/// The loaded driver: one function pointer per entry point the runtime
/// uses, each with the driver's signature (enums as int). Obtain it through
/// `get()`; it stays loaded for the life of the process.
class Driver {
public:
  /// The process-wide driver: loads libcuda.so.1 and calls cuInit(0) on the
  /// first call; every later call returns the same driver or the same
  /// error. Errors: "no CUDA driver: libcuda.so.1 not found (...)", a
  /// driver too old for a needed entry point, or "no usable CUDA device:
  /// cuInit: CUDA_ERROR_NO_DEVICE (...)".
  static StatusOr<const Driver *> get();

  /// Loads the driver from `library` (a name for dlopen or a path) and
  /// initialises it, for tests (a stub driver, a library that is not a
  /// driver). The library is closed when the result is destroyed.
  static StatusOr<std::unique_ptr<Driver>> open(const std::string &library);

  Driver(const Driver &) = delete;
  Driver &operator=(const Driver &) = delete;
  ~Driver();

  /// Success if `result` is CUDA_SUCCESS; otherwise an error
  /// "<call>: <name> (<description>)".
  Status check(CUresult result, const std::string &call) const;
  /// "CUDA_ERROR_X (description)" for `result`, or "CUDA error N" where the
  /// driver cannot name it.
  std::string describe(CUresult result) const;

  // The entry points. Each member is named after its driver function
  // without the `cu` prefix and binds the symbol cuda.h maps that function
  // to: the `_v2` symbol for devicePrimaryCtxRelease, memAlloc, memFree,
  // memAllocHost, memcpyHtoDAsync, memcpyDtoHAsync, streamDestroy,
  // streamBeginCapture and eventDestroy, the plain name otherwise. Enum
  // parameters are declared as int.

  // Initialisation, devices, contexts.
  CUresult (*init)(unsigned flags) = nullptr;
  CUresult (*deviceGet)(CUdevice *device, int ordinal) = nullptr;
  CUresult (*deviceGetCount)(int *count) = nullptr;
  CUresult (*deviceGetAttribute)(int *value, int attribute,
                                 CUdevice device) = nullptr;
  CUresult (*devicePrimaryCtxRetain)(CUcontext *context,
                                     CUdevice device) = nullptr;
  CUresult (*devicePrimaryCtxRelease)(CUdevice device) = nullptr;
  CUresult (*ctxGetCurrent)(CUcontext *context) = nullptr;
  CUresult (*ctxSetCurrent)(CUcontext context) = nullptr;
  CUresult (*ctxGetDevice)(CUdevice *device) = nullptr;

  // Modules and launches.
  CUresult (*moduleLoadDataEx)(CUmodule *module, const void *image,
                               unsigned numOptions, int *options,
                               void **optionValues) = nullptr;
  CUresult (*moduleUnload)(CUmodule module) = nullptr;
  CUresult (*moduleGetFunction)(CUfunction *function, CUmodule module,
                                const char *name) = nullptr;
  CUresult (*funcSetAttribute)(CUfunction function, int attribute,
                               int value) = nullptr;
  CUresult (*launchKernel)(CUfunction function, unsigned gridX, unsigned gridY,
                           unsigned gridZ, unsigned blockX, unsigned blockY,
                           unsigned blockZ, unsigned sharedBytes,
                           CUstream stream, void **params,
                           void **extra) = nullptr;
  /// cuLaunchKernelEx (CUDA 12.0); null with an older driver, where
  /// launches fall back to launchKernel without attributes.
  CUresult (*launchKernelEx)(const LaunchConfig *config, CUfunction function,
                             void **params, void **extra) = nullptr;

  /// cuTensorMapEncodeTiled (CUDA 12.0); null with an older driver, where
  /// kernels that read through tensor maps cannot be launched.
  CUresult (*tensorMapEncodeTiled)(
      void *tensorMap, int dataType, unsigned rank, void *globalAddress,
      const uint64_t *globalDim, const uint64_t *globalStrides,
      const unsigned *boxDim, const unsigned *elementStrides, int interleave,
      int swizzle, int l2Promotion, int oobFill) = nullptr;

  // Memory.
  CUresult (*memAlloc)(CUdeviceptr *address, size_t bytes) = nullptr;
  CUresult (*memFree)(CUdeviceptr address) = nullptr;
  CUresult (*memAllocHost)(void **address, size_t bytes) = nullptr;
  CUresult (*memFreeHost)(void *address) = nullptr;
  CUresult (*memcpyHtoDAsync)(CUdeviceptr destination, const void *source,
                              size_t bytes, CUstream stream) = nullptr;
  CUresult (*memcpyDtoHAsync)(void *destination, CUdeviceptr source,
                              size_t bytes, CUstream stream) = nullptr;
  CUresult (*memsetD8Async)(CUdeviceptr destination, unsigned char value,
                            size_t bytes, CUstream stream) = nullptr;

  // Streams and events.
  CUresult (*streamCreate)(CUstream *stream, unsigned flags) = nullptr;
  CUresult (*streamDestroy)(CUstream stream) = nullptr;
  CUresult (*streamSynchronize)(CUstream stream) = nullptr;
  CUresult (*streamWaitEvent)(CUstream stream, CUevent event,
                              unsigned flags) = nullptr;
  CUresult (*streamIsCapturing)(CUstream stream, int *status) = nullptr;
  CUresult (*streamBeginCapture)(CUstream stream, int mode) = nullptr;
  CUresult (*streamEndCapture)(CUstream stream, CUgraph *graph) = nullptr;
  /// Swaps the calling thread's capture mode with `*mode`.
  CUresult (*threadExchangeStreamCaptureMode)(int *mode) = nullptr;
  CUresult (*eventCreate)(CUevent *event, unsigned flags) = nullptr;
  CUresult (*eventDestroy)(CUevent event) = nullptr;
  CUresult (*eventRecord)(CUevent event, CUstream stream) = nullptr;
  CUresult (*eventQuery)(CUevent event) = nullptr;
  CUresult (*eventSynchronize)(CUevent event) = nullptr;

  // Graphs.
  CUresult (*graphInstantiateWithFlags)(CUgraphExec *exec, CUgraph graph,
                                        unsigned long long flags) = nullptr;
  CUresult (*graphLaunch)(CUgraphExec exec, CUstream stream) = nullptr;
  CUresult (*graphExecDestroy)(CUgraphExec exec) = nullptr;
  CUresult (*graphDestroy)(CUgraph graph) = nullptr;

  // Errors.
  CUresult (*getErrorName)(CUresult error, const char **name) = nullptr;
  CUresult (*getErrorString)(CUresult error, const char **text) = nullptr;

private:
  Driver() = default;

  void *library = nullptr;
  bool owned = false;
};

//===----------------------------------------------------------------------===//
// Contexts
//===----------------------------------------------------------------------===//

/// The CUDA context that the runtime's device objects (state pools,
/// programs) live in, and its device's compute capability.
///
/// `get(device)` with `device >= 0` takes that device's primary context
/// (the one the CUDA runtime and torch use); with `device < 0` the context
/// current on the calling thread (torch makes its device's primary context
/// current), or else device 0's primary context. A primary context is
/// retained until the last holder of the Context is gone. A current context
/// that is not a primary context is used as it is: its creator must keep it
/// alive while the runtime's objects live.
class Context {
public:
  static StatusOr<std::shared_ptr<Context>> get(int device = -1);

  /// As `get`, through an explicitly opened driver (tests).
  static StatusOr<std::shared_ptr<Context>> get(const Driver &driver,
                                                int device = -1);

  Context(const Context &) = delete;
  Context &operator=(const Context &) = delete;
  ~Context();

  const Driver &driver() const { return *driverPtr; }
  CUcontext handle() const { return ctx; }
  CUdevice device() const { return dev; }
  /// Compute capability, e.g. 9.0 for H100/H200.
  int computeMajor() const { return major; }
  int computeMinor() const { return minor; }

private:
  Context() = default;

  const Driver *driverPtr = nullptr;
  CUcontext ctx = nullptr;
  CUdevice dev = 0;
  bool retainedPrimary = false;
  int major = 0, minor = 0;
};

/// Makes a context current on the calling thread for the scope's lifetime
/// and restores the previous one afterwards. Every runtime entry point that
/// calls the driver opens one, so the runtime can be used from threads on
/// which its context is not current.
class ContextScope {
public:
  explicit ContextScope(const Context &context);
  ContextScope(const ContextScope &) = delete;
  ContextScope &operator=(const ContextScope &) = delete;
  ~ContextScope();

  /// Whether the context could be made current; check before calling the
  /// driver.
  const Status &status() const { return state; }

private:
  const Driver &driver;
  CUcontext previous = nullptr;
  bool switched = false;
  Status state;
};

//===----------------------------------------------------------------------===//
// Owned device objects
//===----------------------------------------------------------------------===//

/// Device memory from cuMemAlloc, freed (in its context) on destruction.
class DeviceMemory {
public:
  DeviceMemory() = default;
  static StatusOr<DeviceMemory> allocate(std::shared_ptr<Context> context,
                                         size_t bytes, const std::string &what);
  DeviceMemory(DeviceMemory &&other) noexcept;
  DeviceMemory &operator=(DeviceMemory &&other) noexcept;
  ~DeviceMemory();

  CUdeviceptr get() const { return ptr; }
  size_t size() const { return bytes; }

private:
  void reset();

  std::shared_ptr<Context> context;
  CUdeviceptr ptr = 0;
  size_t bytes = 0;
};

/// Page-locked host memory from cuMemAllocHost (the source of asynchronous
/// host-to-device copies), freed on destruction.
class PinnedMemory {
public:
  PinnedMemory() = default;
  static StatusOr<PinnedMemory> allocate(std::shared_ptr<Context> context,
                                         size_t bytes, const std::string &what);
  PinnedMemory(PinnedMemory &&other) noexcept;
  PinnedMemory &operator=(PinnedMemory &&other) noexcept;
  ~PinnedMemory();

  void *get() const { return ptr; }
  size_t size() const { return bytes; }

private:
  void reset();

  std::shared_ptr<Context> context;
  void *ptr = nullptr;
  size_t bytes = 0;
};

} // namespace spin::runtime::cuda

#endif // SPIN_RUNTIME_CUDADRIVER_H
