//===- CudaDriver.cpp - the CUDA driver API, loaded at run time -----------===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
// Entry points are bound with dlsym under their exported names (the `_v2`
// names where cuda.h maps the API name to one), so the runtime calls the
// same functions a program compiled against cuda.h would.
//
//===----------------------------------------------------------------------===//

#include "spin/Runtime/CudaDriver.h"

#include <cstring>
#include <dlfcn.h>
#include <utility>

namespace spin::runtime::cuda {

//===----------------------------------------------------------------------===//
// Driver
//===----------------------------------------------------------------------===//

namespace {

/// Binds `fn` to `symbol` of `library`; false if the library lacks it.
template <typename Fn> bool bind(void *library, Fn &fn, const char *symbol) {
  void *address = dlsym(library, symbol);
  if (!address)
    return false;
  static_assert(sizeof(fn) == sizeof(address), "function pointer size");
  std::memcpy(&fn, &address, sizeof(fn));
  return true;
}

} // namespace

StatusOr<std::unique_ptr<Driver>> Driver::open(const std::string &library) {
  dlerror(); // Clear any earlier error.
  void *handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char *why = dlerror();
    return Status::error("no CUDA driver: " + library + " not found" +
                         (why ? std::string(" (") + why + ")" : ""));
  }
  std::unique_ptr<Driver> driver(new Driver());
  driver->library = handle;
  driver->owned = true;

  Driver &d = *driver;
  struct Missing {
    const char *symbol = nullptr;
  } missing;
  auto need = [&](auto &fn, const char *symbol) {
    if (!missing.symbol && !bind(handle, fn, symbol))
      missing.symbol = symbol;
  };
  need(d.getErrorName, "cuGetErrorName");
  need(d.getErrorString, "cuGetErrorString");
  need(d.init, "cuInit");
  need(d.deviceGet, "cuDeviceGet");
  need(d.deviceGetCount, "cuDeviceGetCount");
  need(d.deviceGetAttribute, "cuDeviceGetAttribute");
  need(d.devicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
  need(d.devicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2");
  need(d.ctxGetCurrent, "cuCtxGetCurrent");
  need(d.ctxSetCurrent, "cuCtxSetCurrent");
  need(d.ctxGetDevice, "cuCtxGetDevice");
  need(d.moduleLoadDataEx, "cuModuleLoadDataEx");
  need(d.moduleUnload, "cuModuleUnload");
  need(d.moduleGetFunction, "cuModuleGetFunction");
  need(d.funcSetAttribute, "cuFuncSetAttribute");
  need(d.launchKernel, "cuLaunchKernel");
  // Optional: programmatic dependent launches need it (CUDA 12.0).
  bind(handle, d.launchKernelEx, "cuLaunchKernelEx");
  // Optional: only kernels that copy through tensor maps need it.
  bind(handle, d.tensorMapEncodeTiled, "cuTensorMapEncodeTiled");
  need(d.memAlloc, "cuMemAlloc_v2");
  need(d.memFree, "cuMemFree_v2");
  need(d.memAllocHost, "cuMemAllocHost_v2");
  need(d.memFreeHost, "cuMemFreeHost");
  need(d.memcpyHtoDAsync, "cuMemcpyHtoDAsync_v2");
  need(d.memcpyDtoHAsync, "cuMemcpyDtoHAsync_v2");
  need(d.memsetD8Async, "cuMemsetD8Async");
  need(d.streamCreate, "cuStreamCreate");
  need(d.streamDestroy, "cuStreamDestroy_v2");
  need(d.streamSynchronize, "cuStreamSynchronize");
  need(d.streamWaitEvent, "cuStreamWaitEvent");
  need(d.streamIsCapturing, "cuStreamIsCapturing");
  need(d.streamBeginCapture, "cuStreamBeginCapture_v2");
  need(d.streamEndCapture, "cuStreamEndCapture");
  need(d.threadExchangeStreamCaptureMode, "cuThreadExchangeStreamCaptureMode");
  need(d.eventCreate, "cuEventCreate");
  need(d.eventDestroy, "cuEventDestroy_v2");
  need(d.eventRecord, "cuEventRecord");
  need(d.eventQuery, "cuEventQuery");
  need(d.eventSynchronize, "cuEventSynchronize");
  need(d.graphInstantiateWithFlags, "cuGraphInstantiateWithFlags");
  need(d.graphLaunch, "cuGraphLaunch");
  need(d.graphExecDestroy, "cuGraphExecDestroy");
  need(d.graphDestroy, "cuGraphDestroy");
  if (missing.symbol)
    return Status::error("the CUDA driver " + library + " has no entry point " +
                         missing.symbol +
                         ": it is not a CUDA driver, or one older than CUDA "
                         "11.4");

  if (Status s = d.check(d.init(0), "cuInit"); !s.ok())
    return Status::error("no usable CUDA device: " + s.message());
  return StatusOr<std::unique_ptr<Driver>>(std::move(driver));
}

StatusOr<const Driver *> Driver::get() {
  // Opened once and never closed: objects destroyed at process exit may
  // still call into the driver.
  static const StatusOr<const Driver *> instance =
      []() -> StatusOr<const Driver *> {
    StatusOr<std::unique_ptr<Driver>> driver = open("libcuda.so.1");
    if (!driver.ok())
      return driver.status();
    return static_cast<const Driver *>(std::move(driver).value().release());
  }();
  return instance;
}

Driver::~Driver() {
  if (owned && library)
    dlclose(library);
}

std::string Driver::describe(CUresult result) const {
  const char *name = nullptr, *text = nullptr;
  if (getErrorName && getErrorName(result, &name) != CUDA_SUCCESS)
    name = nullptr;
  if (getErrorString && getErrorString(result, &text) != CUDA_SUCCESS)
    text = nullptr;
  // The errors of a machine without a working driver, for drivers that
  // cannot name them (the toolkit's stub library names nothing).
  if (!name && result == CUDA_ERROR_STUB_LIBRARY) {
    name = "CUDA_ERROR_STUB_LIBRARY";
    text = "libcuda is the toolkit's stub, not a real driver";
  } else if (!name && result == CUDA_ERROR_NO_DEVICE) {
    name = "CUDA_ERROR_NO_DEVICE";
    text = "no CUDA-capable device is detected";
  }
  std::string out =
      name ? std::string(name) : "CUDA error " + std::to_string(result);
  if (text)
    out += std::string(" (") + text + ")";
  return out;
}

Status Driver::check(CUresult result, const std::string &call) const {
  if (result == CUDA_SUCCESS)
    return Status::success();
  return Status::error(call + ": " + describe(result));
}

//===----------------------------------------------------------------------===//
// Context
//===----------------------------------------------------------------------===//

StatusOr<std::shared_ptr<Context>> Context::get(int device) {
  StatusOr<const Driver *> driver = Driver::get();
  if (!driver.ok())
    return driver.status();
  return get(**driver, device);
}

StatusOr<std::shared_ptr<Context>> Context::get(const Driver &d, int device) {
  std::shared_ptr<Context> context(new Context());
  context->driverPtr = &d;
  if (device < 0) {
    CUcontext current = nullptr;
    if (Status s = d.check(d.ctxGetCurrent(&current), "cuCtxGetCurrent");
        !s.ok())
      return s;
    if (current) {
      CUdevice owner = 0;
      if (Status s = d.check(d.ctxGetDevice(&owner), "cuCtxGetDevice"); !s.ok())
        return s;
      // Retain the primary context if that is what is current, so that it
      // outlives its other users as long as the runtime needs it.
      CUcontext primary = nullptr;
      if (Status s = d.check(d.devicePrimaryCtxRetain(&primary, owner),
                             "cuDevicePrimaryCtxRetain");
          !s.ok())
        return s;
      if (primary == current)
        context->retainedPrimary = true;
      else
        d.devicePrimaryCtxRelease(owner);
      context->ctx = current;
      context->dev = owner;
    } else {
      device = 0;
    }
  }
  if (device >= 0) {
    int count = 0;
    if (Status s = d.check(d.deviceGetCount(&count), "cuDeviceGetCount");
        !s.ok())
      return s;
    if (device >= count)
      return Status::error("CUDA device " + std::to_string(device) +
                           " does not exist: the machine has " +
                           std::to_string(count) + " CUDA devices");
    if (Status s = d.check(d.deviceGet(&context->dev, device), "cuDeviceGet");
        !s.ok())
      return s;
    if (Status s =
            d.check(d.devicePrimaryCtxRetain(&context->ctx, context->dev),
                    "cuDevicePrimaryCtxRetain");
        !s.ok())
      return s;
    context->retainedPrimary = true;
  }
  if (Status s = d.check(
          d.deviceGetAttribute(&context->major,
                               CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                               context->dev),
          "cuDeviceGetAttribute(COMPUTE_CAPABILITY_MAJOR)");
      !s.ok())
    return s;
  if (Status s = d.check(
          d.deviceGetAttribute(&context->minor,
                               CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                               context->dev),
          "cuDeviceGetAttribute(COMPUTE_CAPABILITY_MINOR)");
      !s.ok())
    return s;
  return StatusOr<std::shared_ptr<Context>>(std::move(context));
}

Context::~Context() {
  if (retainedPrimary)
    driverPtr->devicePrimaryCtxRelease(dev);
}

ContextScope::ContextScope(const Context &context) : driver(context.driver()) {
  state = driver.check(driver.ctxGetCurrent(&previous), "cuCtxGetCurrent");
  if (!state.ok() || previous == context.handle())
    return;
  state =
      driver.check(driver.ctxSetCurrent(context.handle()), "cuCtxSetCurrent");
  switched = state.ok();
}

ContextScope::~ContextScope() {
  if (switched)
    driver.ctxSetCurrent(previous);
}

//===----------------------------------------------------------------------===//
// Owned memory
//===----------------------------------------------------------------------===//

StatusOr<DeviceMemory> DeviceMemory::allocate(std::shared_ptr<Context> context,
                                              size_t bytes,
                                              const std::string &what) {
  DeviceMemory memory;
  memory.context = std::move(context);
  if (bytes == 0)
    return StatusOr<DeviceMemory>(std::move(memory));
  ContextScope scope(*memory.context);
  if (!scope.status().ok())
    return scope.status();
  const Driver &d = memory.context->driver();
  if (Status s = d.check(d.memAlloc(&memory.ptr, bytes), "cuMemAlloc"); !s.ok())
    return Status::error("cannot allocate " + std::to_string(bytes) +
                         " bytes of device memory for " + what + ": " +
                         s.message());
  memory.bytes = bytes;
  return StatusOr<DeviceMemory>(std::move(memory));
}

DeviceMemory::DeviceMemory(DeviceMemory &&other) noexcept
    : context(std::move(other.context)), ptr(other.ptr), bytes(other.bytes) {
  other.ptr = 0;
  other.bytes = 0;
}

DeviceMemory &DeviceMemory::operator=(DeviceMemory &&other) noexcept {
  if (this != &other) {
    reset();
    context = std::move(other.context);
    ptr = other.ptr;
    bytes = other.bytes;
    other.ptr = 0;
    other.bytes = 0;
  }
  return *this;
}

DeviceMemory::~DeviceMemory() { reset(); }

void DeviceMemory::reset() {
  if (ptr) {
    ContextScope scope(*context);
    if (scope.status().ok())
      context->driver().memFree(ptr);
  }
  ptr = 0;
  bytes = 0;
}

StatusOr<PinnedMemory> PinnedMemory::allocate(std::shared_ptr<Context> context,
                                              size_t bytes,
                                              const std::string &what) {
  PinnedMemory memory;
  memory.context = std::move(context);
  if (bytes == 0)
    return StatusOr<PinnedMemory>(std::move(memory));
  ContextScope scope(*memory.context);
  if (!scope.status().ok())
    return scope.status();
  const Driver &d = memory.context->driver();
  if (Status s = d.check(d.memAllocHost(&memory.ptr, bytes), "cuMemAllocHost");
      !s.ok())
    return Status::error("cannot allocate " + std::to_string(bytes) +
                         " bytes of page-locked host memory for " + what +
                         ": " + s.message());
  memory.bytes = bytes;
  return StatusOr<PinnedMemory>(std::move(memory));
}

PinnedMemory::PinnedMemory(PinnedMemory &&other) noexcept
    : context(std::move(other.context)), ptr(other.ptr), bytes(other.bytes) {
  other.ptr = nullptr;
  other.bytes = 0;
}

PinnedMemory &PinnedMemory::operator=(PinnedMemory &&other) noexcept {
  if (this != &other) {
    reset();
    context = std::move(other.context);
    ptr = other.ptr;
    bytes = other.bytes;
    other.ptr = nullptr;
    other.bytes = 0;
  }
  return *this;
}

PinnedMemory::~PinnedMemory() { reset(); }

void PinnedMemory::reset() {
  if (ptr) {
    ContextScope scope(*context);
    if (scope.status().ok())
      context->driver().memFreeHost(ptr);
  }
  ptr = nullptr;
  bytes = 0;
}

} // namespace spin::runtime::cuda
