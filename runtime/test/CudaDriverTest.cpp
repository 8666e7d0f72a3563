//===- CudaDriverTest.cpp - tests of the run-time loaded CUDA driver ------===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
// These run on any machine: without a driver or a device every entry point
// must return a Status, never crash. They do not assume either way whether
// this machine has a GPU.
//
//===----------------------------------------------------------------------===//

#include "GpuTestUtils.h"

#include "spin/Runtime/CudaDriver.h"
#include "spin/Runtime/GpuProgram.h"
#include "spin/Runtime/GpuStatePool.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <sys/stat.h>

using namespace spin::runtime;
using namespace spin::runtime::cuda;
using spin::runtime::testing::inputsDir;

namespace {

bool startsWith(const std::string &text, const std::string &prefix) {
  return text.rfind(prefix, 0) == 0;
}

TEST(CudaDriver, MissingLibraryIsAStatus) {
  StatusOr<std::unique_ptr<Driver>> driver =
      Driver::open("libspin-no-such-cuda-driver.so.1");
  ASSERT_FALSE(driver.ok());
  EXPECT_TRUE(startsWith(driver.message(),
                         "no CUDA driver: libspin-no-such-cuda-driver.so.1 "
                         "not found ("))
      << driver.message();
}

TEST(CudaDriver, LibraryThatIsNotADriverIsAStatus) {
  StatusOr<std::unique_ptr<Driver>> driver = Driver::open("libm.so.6");
  ASSERT_FALSE(driver.ok());
  EXPECT_EQ(driver.message(),
            "the CUDA driver libm.so.6 has no entry point cuGetErrorName: it "
            "is not a CUDA driver, or one older than CUDA 11.4");
}

/// The toolkit's stub libcuda (every call fails with
/// CUDA_ERROR_STUB_LIBRARY) exercises the whole symbol table and the
/// translation of a failing cuInit, where a toolkit is installed.
TEST(CudaDriver, StubDriverFailsInitialisationCleanly) {
  std::string stub = "/usr/local/cuda/lib64/stubs/libcuda.so";
  if (const char *env = std::getenv("SPIN_CUDA_STUB"))
    stub = env;
  struct stat info;
  if (::stat(stub.c_str(), &info) != 0)
    GTEST_SKIP() << "no stub driver at " << stub;
  StatusOr<std::unique_ptr<Driver>> driver = Driver::open(stub);
  ASSERT_FALSE(driver.ok());
  EXPECT_EQ(driver.message(),
            "no usable CUDA device: cuInit: CUDA_ERROR_STUB_LIBRARY (libcuda "
            "is the toolkit's stub, not a real driver)");
}

/// The process-wide driver: either usable or a clear error, and the same
/// answer every time.
TEST(CudaDriver, ProcessDriverIsUsableOrAClearError) {
  StatusOr<const Driver *> first = Driver::get();
  StatusOr<const Driver *> second = Driver::get();
  ASSERT_EQ(first.ok(), second.ok());
  if (!first.ok()) {
    EXPECT_EQ(first.message(), second.message());
    EXPECT_TRUE(startsWith(first.message(), "no CUDA driver: libcuda.so.1 "
                                            "not found") ||
                startsWith(first.message(), "no usable CUDA device: ") ||
                startsWith(first.message(), "the CUDA driver libcuda.so.1"))
        << first.message();
    // Everything that needs the device reports the same error.
    EXPECT_EQ(Context::get().message(), first.message());
    StatePoolOptions options;
    EXPECT_EQ(GpuStatePool::create(options, nullptr).message(),
              first.message());
    EXPECT_EQ(GpuProgram::load(inputsDir() + "/toy_step").message(),
              first.message());
    return;
  }
  EXPECT_EQ(*first, *second);
  const Driver &d = **first;
  EXPECT_EQ(d.check(CUDA_SUCCESS, "cuInit").ok(), true);
  EXPECT_EQ(d.check(CUDA_ERROR_INVALID_VALUE, "cuMemAlloc").message(),
            "cuMemAlloc: CUDA_ERROR_INVALID_VALUE (invalid argument)");
  EXPECT_EQ(d.describe(CUDA_ERROR_INVALID_PTX),
            "CUDA_ERROR_INVALID_PTX (a PTX JIT compilation failed)");
  EXPECT_EQ(d.describe(987654), "CUDA error 987654");
}

TEST(CudaDriver, ManifestErrorsComeBeforeTheDriver) {
  // Loading reads the manifest first, so a broken artifact is reported the
  // same way on machines with and without a GPU.
  EXPECT_EQ(GpuProgram::load("/nonexistent/artifact").message(),
            "GPU artifact /nonexistent/artifact is not a directory");
}

} // namespace
