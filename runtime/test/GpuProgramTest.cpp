//===- GpuProgramTest.cpp - GPU tests of programs and state pools ---------===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
// Skipped without a CUDA device. On a GPU they load the hand-written toy
// artifacts of runtime/test/Inputs (portable sm_90 PTX), run steps through
// GpuProgram::run with state bound from a GpuStatePool, check results,
// the MTP bookkeeping, the error record, and a step captured in a CUDA
// graph and replayed.
//
//===----------------------------------------------------------------------===//

#include "GpuTestUtils.h"

#include "spin/Runtime/CudaDriver.h"
#include "spin/Runtime/GpuProgram.h"
#include "spin/Runtime/GpuStatePool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <dlfcn.h>
#include <limits>
#include <map>
#include <string>
#include <thread>
#include <vector>

using namespace spin::runtime;
using namespace spin::runtime::cuda;
using spin::runtime::testing::inputsDir;
using spin::runtime::testing::readFile;
using spin::runtime::testing::TempDir;

namespace {

/// Every driver call of the tests: fails the test with the driver's message.
#define CHECK_CU(call)                                                         \
  do {                                                                         \
    Status cuStatus = driver().check((call), #call);                           \
    ASSERT_TRUE(cuStatus.ok()) << cuStatus.message();                          \
  } while (false)

class GpuProgramTest : public ::testing::Test {
protected:
  void SetUp() override {
    StatusOr<std::shared_ptr<Context>> context = Context::get();
    if (!context.ok())
      GTEST_SKIP() << "no CUDA device: " << context.message();
    ctx = *context;
    scope = std::make_unique<ContextScope>(*ctx);
    ASSERT_TRUE(scope->status().ok()) << scope->status().message();
    CHECK_CU(driver().streamCreate(&stream, CU_STREAM_NON_BLOCKING));
  }

  void TearDown() override {
    if (stream)
      driver().streamDestroy(stream);
  }

  const Driver &driver() const { return ctx->driver(); }

  /// A device buffer holding `values`, owned by the test.
  template <typename T> CUdeviceptr upload(const std::vector<T> &values) {
    StatusOr<DeviceMemory> memory =
        DeviceMemory::allocate(ctx, values.size() * sizeof(T), "a test tensor");
    EXPECT_TRUE(memory.ok()) << memory.message();
    if (!memory.ok())
      return 0;
    CUdeviceptr address = memory->get();
    EXPECT_EQ(driver().memcpyHtoDAsync(address, values.data(),
                                       values.size() * sizeof(T), stream),
              CUDA_SUCCESS);
    EXPECT_EQ(driver().streamSynchronize(stream), CUDA_SUCCESS);
    buffers.push_back(std::move(memory).value());
    return address;
  }

  template <typename T> std::vector<T> download(CUdeviceptr address, size_t n) {
    std::vector<T> values(n);
    EXPECT_EQ(driver().streamSynchronize(stream), CUDA_SUCCESS);
    EXPECT_EQ(
        driver().memcpyDtoHAsync(values.data(), address, n * sizeof(T), stream),
        CUDA_SUCCESS);
    EXPECT_EQ(driver().streamSynchronize(stream), CUDA_SUCCESS);
    return values;
  }

  std::unique_ptr<GpuProgram> load(const std::string &name) {
    StatusOr<std::unique_ptr<GpuProgram>> program =
        GpuProgram::load(ctx, inputsDir() + "/" + name);
    EXPECT_TRUE(program.ok()) << program.message();
    return program.ok() ? std::move(program).value() : nullptr;
  }

  std::unique_ptr<GpuStatePool> newPool(const GpuProgram &program,
                                        int64_t slots) {
    StatusOr<StatePoolOptions> options = program.stateOptions(slots);
    EXPECT_TRUE(options.ok()) << options.message();
    if (!options.ok())
      return nullptr;
    StatusOr<std::unique_ptr<GpuStatePool>> pool =
        GpuStatePool::create(ctx, *options, stream);
    EXPECT_TRUE(pool.ok()) << pool.message();
    return pool.ok() ? std::move(pool).value() : nullptr;
  }

  std::shared_ptr<Context> ctx;
  std::unique_ptr<ContextScope> scope;
  CUstream stream = nullptr;
  std::vector<DeviceMemory> buffers;
};

/// The toy step's tensors for a batch of `ids`, x[b, j] = 10 * (b + 1) + j.
struct ToyStep {
  std::vector<int64_t> ids;
  std::vector<float> x;
  std::map<std::string, DeviceTensorRef> inputs, outputs;
};

TEST_F(GpuProgramTest, RunsAStatefulStepWithTheSideStream) {
  auto program = load("toy_step");
  ASSERT_TRUE(program);
  EXPECT_EQ(program->chip(), "sm_90");
  auto pool = newPool(*program, 4);
  ASSERT_TRUE(pool);
  EXPECT_EQ(*pool->acquire(7, stream), 0);
  EXPECT_EQ(*pool->acquire(8, stream), 1);

  const int64_t batch = 2, n = 8;
  std::vector<float> x(batch * n);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t j = 0; j < n; ++j)
      x[b * n + j] = float(10 * (b + 1) + j);
  std::vector<int64_t> ids = {8, 7};
  std::map<std::string, DeviceTensorRef> inputs = {
      {"x", {upload(x), {batch, n}, DType::f32}},
      {"request_ids", {upload(ids), {batch}, DType::i64}}};
  CUdeviceptr y = upload(std::vector<float>(batch * n, -1.0f));
  CUdeviceptr z = upload(std::vector<float>(batch * n, -1.0f));
  std::map<std::string, DeviceTensorRef> outputs = {
      {"y", {y, {batch, n}, DType::f32}}, {"z", {z, {batch, n}, DType::f32}}};

  for (int step = 1; step <= 3; ++step) {
    Status s = program->run(*pool, inputs, outputs, ids, stream);
    ASSERT_TRUE(s.ok()) << s.message();
    std::vector<float> ys = download<float>(y, batch * n);
    std::vector<float> zs = download<float>(z, batch * n);
    for (size_t i = 0; i < x.size(); ++i) {
      EXPECT_EQ(ys[i], step * x[i]) << "step " << step << " element " << i;
      EXPECT_EQ(zs[i], 3 * step * x[i]) << "step " << step << " element " << i;
    }
    EXPECT_TRUE(program->check(stream).ok());
  }
  // The state went to the requests' slots: request 8 (batch row 0) owns
  // slot 1.
  StatusOr<std::vector<float>> v8 = pool->v(8, 0, stream);
  ASSERT_TRUE(v8.ok()) << v8.message();
  EXPECT_EQ((*v8)[3], 3 * x[3]);
  EXPECT_EQ(*pool->iteration(8, 0, stream), 3);
  EXPECT_EQ(*pool->iteration(7, 0, stream), 3);
  EXPECT_EQ(pool->iteration(9, 0, stream).message(),
            "request 9 is not in the state pool");

  // A reset zeroes one request's state, in stream order.
  ASSERT_TRUE(pool->reset(7, stream).ok());
  ASSERT_TRUE(program->run(*pool, inputs, outputs, ids, stream).ok());
  std::vector<float> ys = download<float>(y, batch * n);
  EXPECT_EQ(ys[0], 4 * x[0]); // request 8
  EXPECT_EQ(ys[n], x[n]);     // request 7, fresh
  EXPECT_EQ(*pool->iteration(7, 0, stream), 1);
  StatusOr<std::vector<float>> d7 = pool->d(7, 0, stream);
  ASSERT_TRUE(d7.ok());
  EXPECT_EQ((*d7)[0], 0.0f);

  // Release and re-acquire: the slot is zeroed again.
  ASSERT_TRUE(pool->release(8).ok());
  EXPECT_EQ(*pool->acquire(9, stream), 1);
  EXPECT_EQ(*pool->iteration(9, 0, stream), 0);
  EXPECT_EQ((*pool->v(9, 0, stream))[3], 0.0f);
}

TEST_F(GpuProgramTest, RefusesBadStepsBeforeIssuingAnything) {
  auto program = load("toy_step");
  ASSERT_TRUE(program);
  auto pool = newPool(*program, 4);
  ASSERT_TRUE(pool);
  ASSERT_TRUE(pool->acquire(1, stream).ok());
  ASSERT_TRUE(pool->acquire(2, stream).ok());
  CUdeviceptr x = upload(std::vector<float>(5 * 8, 1.0f));
  CUdeviceptr ids = upload(std::vector<int64_t>{1, 2, 3, 4, 5});
  CUdeviceptr y = upload(std::vector<float>(5 * 8));
  auto inputs = [&](int64_t batch) {
    return std::map<std::string, DeviceTensorRef>{
        {"x", {x, {batch, 8}, DType::f32}},
        {"request_ids", {ids, {batch}, DType::i64}}};
  };
  auto outputs = [&](int64_t batch) {
    return std::map<std::string, DeviceTensorRef>{
        {"y", {y, {batch, 8}, DType::f32}}, {"z", {y, {batch, 8}, DType::f32}}};
  };
  auto runError = [&](std::map<std::string, DeviceTensorRef> in,
                      std::map<std::string, DeviceTensorRef> out,
                      std::vector<int64_t> requestIds) {
    return program->run(*pool, in, out, requestIds, stream).message();
  };

  auto in = inputs(2);
  in["x"].dtype = DType::bf16;
  EXPECT_EQ(runError(in, outputs(2), {1, 2}),
            "input 'x' has element type bf16, expected f32");
  in = inputs(2);
  in["x"].shape = {2, 9};
  EXPECT_EQ(runError(in, outputs(2), {1, 2}),
            "input 'x' has shape [2, 9], expected [?, 8]");
  in = inputs(2);
  in["x"].shape = {2, 8, 1};
  EXPECT_EQ(runError(in, outputs(2), {1, 2}),
            "input 'x' has shape [2, 8, 1], expected [?, 8]");
  in = inputs(2);
  in.erase("x");
  EXPECT_EQ(runError(in, outputs(2), {1, 2}), "missing input 'x' [?, 8] f32");
  in = inputs(2);
  in["q"] = in["x"];
  EXPECT_EQ(runError(in, outputs(2), {1, 2}), "unknown input 'q'");
  auto out = outputs(2);
  out.erase("z");
  EXPECT_EQ(runError(inputs(2), out, {1, 2}), "missing output 'z' [?, 8] f32");
  out = outputs(2);
  out["y"].shape = {3, 8};
  EXPECT_EQ(runError(inputs(2), out, {1, 2}),
            "output 'y' has batch size 3 but input 'x' has 2");
  in = inputs(2);
  in["x"].data = 0;
  EXPECT_EQ(runError(in, outputs(2), {1, 2}),
            "input 'x' has no data (a null device pointer)");
  EXPECT_EQ(runError(inputs(5), outputs(5), {1, 2, 3, 4, 5}),
            "the step has a batch of 5 requests but " + inputsDir() +
                "/toy_step was compiled for at most 4");
  EXPECT_EQ(runError(inputs(2), outputs(2), {1}),
            "1 request ids given for a batch of 2");
  EXPECT_EQ(runError(inputs(2), outputs(2), {1, 42}),
            "request 42 is not in the state pool");
  EXPECT_EQ(runError(inputs(2), outputs(2), {2, 2}),
            "request 2 appears twice in the batch (at 0 and 1)");
  EXPECT_EQ(program->run(inputs(2), outputs(2), stream).message(),
            "the program toy_step binds SPIN state: run it with a "
            "GpuStatePool and the batch's request ids");

  // A pool of another shape.
  StatePoolOptions small = *program->stateOptions(2);
  small.capacity = 16;
  auto other = GpuStatePool::create(ctx, small, stream);
  ASSERT_TRUE(other.ok());
  ASSERT_TRUE((*other)->acquire(1, stream).ok());
  EXPECT_EQ(program->run(**other, inputs(1), outputs(1), {1}, stream).message(),
            "the state pool has capacity 16 but " + inputsDir() +
                "/toy_step was compiled for 8");

  // Nothing was left busy by the refusals, and a good step still runs.
  Status s = program->run(*pool, inputs(2), outputs(2), {1, 2}, stream);
  EXPECT_TRUE(s.ok()) << s.message();
  EXPECT_TRUE(program->check(stream).ok());
}

TEST_F(GpuProgramTest, CheckReportsTheErrorRecordOnce) {
  auto program = load("toy_step");
  ASSERT_TRUE(program);
  auto pool = newPool(*program, 4);
  ASSERT_TRUE(pool);
  ASSERT_TRUE(pool->acquire(41, stream).ok());
  ASSERT_TRUE(pool->acquire(42, stream).ok());
  std::vector<float> x(2 * 8, 1.0f);
  x[8 + 3] = -2.0f; // request 42 (batch index 1), element 3
  std::map<std::string, DeviceTensorRef> inputs = {
      {"x", {upload(x), {2, 8}, DType::f32}},
      {"request_ids", {upload(std::vector<int64_t>{41, 42}), {2}, DType::i64}}};
  CUdeviceptr y = upload(std::vector<float>(16));
  std::map<std::string, DeviceTensorRef> outputs = {
      {"y", {y, {2, 8}, DType::f32}}, {"z", {y, {2, 8}, DType::f32}}};
  ASSERT_TRUE(program->run(*pool, inputs, outputs, {41, 42}, stream).ok());
  EXPECT_EQ(program->check(stream).message(),
            "a step of toy_step found bad input on the device: request 42 "
            "(batch index 1), row 3: visible length -2 is outside [0, "
            "min(capacity, block-table width x page size)]; the request was "
            "skipped and its state left as it was (reset it before its next "
            "step)");
  EXPECT_TRUE(program->check(stream).ok());

  // Two steps before the check: the request cannot be named.
  ASSERT_TRUE(program->run(*pool, inputs, outputs, {41, 42}, stream).ok());
  ASSERT_TRUE(program->run(*pool, inputs, outputs, {41, 42}, stream).ok());
  EXPECT_EQ(program->check(stream).message(),
            "a step of toy_step found bad input on the device: batch index 1 "
            "of one of the 2 steps since the last check, row 3: visible length "
            "-2 is outside [0, min(capacity, block-table width x page size)]; "
            "the request was skipped and its state left as it was (reset it "
            "before its next step)");
}

TEST_F(GpuProgramTest, StepsCaptureInACudaGraph) {
  auto program = load("toy_step");
  ASSERT_TRUE(program);
  auto pool = newPool(*program, 4);
  ASSERT_TRUE(pool);
  ASSERT_TRUE(pool->acquire(5, stream).ok());
  ASSERT_TRUE(pool->acquire(6, stream).ok());
  std::vector<float> x(16);
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = float(i + 1);
  std::vector<int64_t> ids = {6, 5};
  std::map<std::string, DeviceTensorRef> inputs = {
      {"x", {upload(x), {2, 8}, DType::f32}},
      {"request_ids", {upload(ids), {2}, DType::i64}}};
  CUdeviceptr y = upload(std::vector<float>(16, 0.0f));
  CUdeviceptr z = upload(std::vector<float>(16, 0.0f));
  std::map<std::string, DeviceTensorRef> outputs = {
      {"y", {y, {2, 8}, DType::f32}}, {"z", {z, {2, 8}, DType::f32}}};
  int64_t reserved = program->capturedStepsLeft();

  CHECK_CU(driver().streamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
  Status captured = program->run(*pool, inputs, outputs, ids, stream);
  CUgraph graph = nullptr;
  CHECK_CU(driver().streamEndCapture(stream, &graph));
  ASSERT_TRUE(captured.ok()) << captured.message();
  EXPECT_EQ(program->capturedStepsLeft(), reserved - 1);
  CUgraphExec exec = nullptr;
  CHECK_CU(driver().graphInstantiateWithFlags(&exec, graph, 0));

  // Capturing ran nothing.
  EXPECT_EQ(download<float>(y, 16), std::vector<float>(16, 0.0f));
  EXPECT_EQ(*pool->iteration(5, 0, stream), 0);

  for (int replay = 1; replay <= 2; ++replay) {
    CHECK_CU(driver().graphLaunch(exec, stream));
    std::vector<float> ys = download<float>(y, 16);
    std::vector<float> zs = download<float>(z, 16);
    for (size_t i = 0; i < x.size(); ++i) {
      EXPECT_EQ(ys[i], replay * x[i]) << "replay " << replay;
      EXPECT_EQ(zs[i], 3 * replay * x[i]) << "replay " << replay;
    }
  }
  EXPECT_EQ(*pool->iteration(5, 0, stream), 2);
  EXPECT_EQ(*pool->iteration(6, 0, stream), 2);

  // An eager step after the replays continues from the same state, through
  // its own staging buffer.
  ASSERT_TRUE(program->run(*pool, inputs, outputs, ids, stream).ok());
  EXPECT_EQ(download<float>(y, 16)[5], 3 * x[5]);
  EXPECT_TRUE(program->check(stream).ok());

  CHECK_CU(driver().graphExecDestroy(exec));
  CHECK_CU(driver().graphDestroy(graph));

  // Capture buffers can be added outside a capture.
  ASSERT_TRUE(program->reserveCapturedSteps(3).ok());
  EXPECT_EQ(program->capturedStepsLeft(), reserved + 2);
}

TEST_F(GpuProgramTest, MtpStepsUploadCommitsAndKeepBufferedRows) {
  auto program = load("toy_mtp");
  ASSERT_TRUE(program);
  auto pool = newPool(*program, 3);
  ASSERT_TRUE(pool);
  ASSERT_TRUE(pool->acquire(7, stream).ok()); // slot 0
  ASSERT_TRUE(pool->acquire(8, stream).ok()); // slot 1
  std::vector<int64_t> ids = {8, 7};
  std::map<std::string, DeviceTensorRef> inputs = {
      {"positions", {upload(std::vector<int32_t>(4, 5)), {2, 2}, DType::i32}},
      {"request_ids", {upload(ids), {2}, DType::i64}}};
  CUdeviceptr seen = upload(std::vector<int32_t>(2, -1));
  std::map<std::string, DeviceTensorRef> outputs = {
      {"seen", {seen, {2}, DType::i32}}};

  // First verification step: nothing buffered, nothing committed.
  ASSERT_TRUE(program->run(*pool, inputs, outputs, ids, stream).ok());
  EXPECT_EQ(download<int32_t>(seen, 2), (std::vector<int32_t>{0, 0}));
  EXPECT_TRUE(pool->hasPendingRows(7));
  EXPECT_EQ(*pool->bufferedRows(7, 1, stream), 2);
  EXPECT_EQ(*pool->bufferedRows(7, 0, stream), 0);

  // The next step needs commits; the accepted counts reach the kernel.
  EXPECT_EQ(program->run(*pool, inputs, outputs, ids, stream).message(),
            "request 8 has an uncommitted verification step on layer 1: call "
            "commit(8, accepted) before the next step");
  EXPECT_EQ(pool->commit(7, 2).message(),
            "accepted = 2 is out of range for request 7: its verification step "
            "buffered 2 rows, so accepted must be in [0, 1]");
  ASSERT_TRUE(pool->commit(7, 1).ok());
  ASSERT_TRUE(pool->commit(8, 0).ok());
  ASSERT_TRUE(program->run(*pool, inputs, outputs, ids, stream).ok());
  EXPECT_EQ(download<int32_t>(seen, 2), (std::vector<int32_t>{2, 102}));
  EXPECT_FALSE(pool->recordedCommit(7));
  EXPECT_EQ(*pool->iteration(7, 1, stream), 2);

  // A reset drops the buffered rows on both sides.
  ASSERT_TRUE(pool->reset(8, stream).ok());
  EXPECT_FALSE(pool->hasPendingRows(8));
  EXPECT_EQ(*pool->bufferedRows(8, 1, stream), 0);
}

TEST_F(GpuProgramTest, MtpProgramsBindTheObservationFieldsOfAMatchingPool) {
  // The toy MTP kernel with every observation field bound (as compiled MTP
  // programs bind them): the pool's row count and block count must be the
  // ones the program was compiled for, since the kernels index obs_pos,
  // obs_len, obs_z and obs_mask with them.
  TempDir dir;
  dir.write("manifest.json",
            spin::runtime::testing::toyMtpManifestWithObservations());
  dir.write("sm_90.ptx", readFile(inputsDir() + "/toy_mtp/sm_90.ptx"));
  StatusOr<std::unique_ptr<GpuProgram>> loaded =
      GpuProgram::load(ctx, dir.path());
  ASSERT_TRUE(loaded.ok()) << loaded.message();
  GpuProgram &program = **loaded;
  std::vector<int64_t> ids = {8, 7};
  std::map<std::string, DeviceTensorRef> inputs = {
      {"positions", {upload(std::vector<int32_t>(4, 5)), {2, 2}, DType::i32}},
      {"request_ids", {upload(ids), {2}, DType::i64}}};
  CUdeviceptr seen = upload(std::vector<int32_t>(2, -1));
  std::map<std::string, DeviceTensorRef> outputs = {
      {"seen", {seen, {2}, DType::i32}}};

  auto poolWith = [&](int64_t maxRows, int64_t blockSize) {
    StatusOr<StatePoolOptions> options = program.stateOptions(3);
    EXPECT_TRUE(options.ok()) << options.message();
    options->maxRows = maxRows;
    options->blockSize = blockSize;
    StatusOr<std::unique_ptr<GpuStatePool>> pool =
        GpuStatePool::create(ctx, *options, stream);
    EXPECT_TRUE(pool.ok()) << pool.message();
    for (int64_t id : {7, 8})
      EXPECT_TRUE((*pool)->acquire(id, stream).ok());
    return std::move(pool).value();
  };
  auto wider = poolWith(3, 4);
  EXPECT_EQ(program.run(*wider, inputs, outputs, ids, stream).message(),
            "the state pool has maxRows 3 but " + dir.path() +
                " was compiled for 2");
  auto finer = poolWith(2, 2);
  EXPECT_EQ(program.run(*finer, inputs, outputs, ids, stream).message(),
            "the state pool's obs_mask rows hold 4 blocks but " + dir.path() +
                " was compiled for 2");
  // Refused steps leave no bookkeeping behind; a matching pool steps, and
  // the layer binding obs_rows buffers the step's rows.
  EXPECT_FALSE(wider->hasPendingRows(7));
  auto pool = poolWith(2, 4);
  ASSERT_TRUE(program.run(*pool, inputs, outputs, ids, stream).ok());
  EXPECT_EQ(download<int32_t>(seen, 2), (std::vector<int32_t>{0, 0}));
  EXPECT_TRUE(pool->hasPendingRows(8));
  EXPECT_EQ(*pool->bufferedRows(8, 1, stream), 2);
  ASSERT_TRUE(pool->commit(7, 0).ok());
  ASSERT_TRUE(pool->commit(8, 1).ok());
  ASSERT_TRUE(program.run(*pool, inputs, outputs, ids, stream).ok());
  EXPECT_EQ(download<int32_t>(seen, 2), (std::vector<int32_t>{102, 2}));
  ASSERT_TRUE(program.check(stream).ok());
}

TEST_F(GpuProgramTest, LoadErrorsNameTheFileAndTheDriverError) {
  std::string manifest = readFile(inputsDir() + "/toy_step/manifest.json");
  {
    TempDir dir;
    dir.write("manifest.json", manifest);
    dir.write("sm_90.ptx", ".version 8.0\n.target sm_90\nthis is not PTX\n");
    std::string message = GpuProgram::load(ctx, dir.path()).message();
    EXPECT_EQ(message.rfind(dir.path() + "/sm_90.ptx: cuModuleLoadDataEx: "
                                         "CUDA_ERROR_INVALID_PTX",
                            0),
              0u)
        << message;
    EXPECT_NE(message.find("; JIT log: "), std::string::npos) << message;
  }
  {
    TempDir dir;
    std::string ptx = readFile(inputsDir() + "/toy_step/sm_90.ptx");
    size_t at = ptx.find(".visible .entry spin_test_scale");
    ASSERT_NE(at, std::string::npos);
    dir.write("sm_90.ptx", ptx.substr(0, at));
    dir.write("manifest.json", manifest);
    std::string message = GpuProgram::load(ctx, dir.path()).message();
    EXPECT_EQ(message.rfind("kernel \"spin_test_scale\" of " + dir.path() +
                                "/manifest.json is not in " + dir.path() +
                                "/sm_90.ptx: cuModuleGetFunction: "
                                "CUDA_ERROR_NOT_FOUND",
                            0),
              0u)
        << message;
  }
  {
    TempDir dir;
    dir.write("sm_999a.ptx", "// never loaded");
    std::string other = manifest;
    other.replace(other.find("\"sm_90\": \"sm_90.ptx\""),
                  std::strlen("\"sm_90\": \"sm_90.ptx\""),
                  "\"sm_999a\": \"sm_999a.ptx\"");
    dir.write("manifest.json", other);
    std::string cc =
        std::to_string(ctx->computeMajor() * 10 + ctx->computeMinor());
    EXPECT_EQ(GpuProgram::load(ctx, dir.path()).message(),
              dir.path() +
                  "/manifest.json has no PTX for this device "
                  "(compute capability " +
                  std::to_string(ctx->computeMajor()) + "." +
                  std::to_string(ctx->computeMinor()) + ": sm_" + cc +
                  "a, or a portable sm_XY with XY <= " + cc +
                  "); available: sm_999a");
  }
}

TEST_F(GpuProgramTest, WorksFromAThreadWithoutTheContextCurrent) {
  auto program = load("toy_step");
  ASSERT_TRUE(program);
  auto pool = newPool(*program, 1);
  ASSERT_TRUE(pool);
  // Another thread: no context is current there, the runtime makes its own.
  std::string error = "not run";
  std::thread worker([&] {
    Status s = pool->acquire(3, stream).status();
    error = s.ok() ? program->check(stream).message() : s.message();
  });
  worker.join();
  EXPECT_EQ(error, "");
}

/// Holds a stream back until opened (or for 10 s at most): a host function
/// enqueued with cuLaunchHostFunc, which the runtime does not wrap, so the
/// tests look it up in the driver the runtime loaded.
class StreamGate {
public:
  using LaunchHostFunc = CUresult (*)(CUstream, void (*)(void *), void *);

  static LaunchHostFunc launcher() {
    void *cuda = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    return cuda ? reinterpret_cast<LaunchHostFunc>(
                      ::dlsym(cuda, "cuLaunchHostFunc"))
                : nullptr;
  }
  /// Enqueues the wait on `stream`; the gate must outlive its execution.
  CUresult close(CUstream stream) {
    open_ = false;
    return launcher()(stream, &StreamGate::wait, this);
  }
  void open() { open_ = true; }

private:
  static void wait(void *self) {
    auto *gate = static_cast<StreamGate *>(self);
    for (int i = 0; i < 10000 && !gate->open_; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::atomic<bool> open_{true};
};

TEST_F(GpuProgramTest, ZeroingWaitsForStepsInFlightOnAnotherStream) {
  // A step of request 7 is held back on `stream`; the slot is then released
  // and given to request 9 (or reset) on `other`. The zeroing must land
  // after the step, not before it, or the new request starts from the old
  // one's state.
  if (!StreamGate::launcher())
    GTEST_SKIP() << "the driver has no cuLaunchHostFunc";
  auto program = load("toy_step");
  ASSERT_TRUE(program);
  auto pool = newPool(*program, 1);
  ASSERT_TRUE(pool);
  CUstream other = nullptr;
  CHECK_CU(driver().streamCreate(&other, CU_STREAM_NON_BLOCKING));
  static StreamGate gate; // outlives any host function left waiting
  std::vector<float> x(8, 2.0f);
  // Uploaded up front: uploads synchronize `stream`, which the gate holds.
  CUdeviceptr xs = upload(x), out = upload(std::vector<float>(8));
  std::map<int64_t, CUdeviceptr> deviceIds = {
      {7, upload(std::vector<int64_t>{7})}, {9, upload(std::vector<int64_t>{9})}};
  auto step = [&](int64_t id) {
    std::vector<int64_t> ids = {id};
    std::map<std::string, DeviceTensorRef> inputs = {
        {"x", {xs, {1, 8}, DType::f32}},
        {"request_ids", {deviceIds[id], {1}, DType::i64}}};
    std::map<std::string, DeviceTensorRef> outputs = {
        {"y", {out, {1, 8}, DType::f32}}, {"z", {out, {1, 8}, DType::f32}}};
    return program->run(*pool, inputs, outputs, ids, stream);
  };

  ASSERT_EQ(*pool->acquire(7, stream), 0);
  CHECK_CU(gate.close(stream));
  Status stepped = step(7);
  Status released = pool->release(7);
  StatusOr<int32_t> slot = pool->acquire(9, other);
  gate.open();
  ASSERT_TRUE(stepped.ok()) << stepped.message();
  ASSERT_TRUE(released.ok()) << released.message();
  ASSERT_EQ(*slot, 0);
  CHECK_CU(driver().streamSynchronize(stream));
  EXPECT_EQ(*pool->iteration(9, 0, other), 0);
  EXPECT_EQ((*pool->v(9, 0, other))[3], 0.0f);

  // The same for a reset of the request on another stream than its step's.
  ASSERT_TRUE(step(9).ok());
  CHECK_CU(driver().streamSynchronize(stream));
  CHECK_CU(gate.close(stream));
  stepped = step(9);
  Status reset = pool->reset(9, other);
  gate.open();
  ASSERT_TRUE(stepped.ok()) << stepped.message();
  ASSERT_TRUE(reset.ok()) << reset.message();
  CHECK_CU(driver().streamSynchronize(stream));
  EXPECT_EQ(*pool->iteration(9, 0, other), 0);
  EXPECT_EQ((*pool->v(9, 0, other))[3], 0.0f);
  CHECK_CU(driver().streamDestroy(other));
}

TEST_F(GpuProgramTest, ReserveCapturedStepsRefusesCountsThatOverflow) {
  // 2^55 + 1 entries of 512 bytes wrapped to 512 bytes: one allocation of
  // one entry, then 2^55 entries pointing past it.
  auto program = load("toy_step");
  ASSERT_TRUE(program);
  int64_t left = program->capturedStepsLeft();
  for (int64_t count : {(int64_t(1) << 55) + 1,
                        std::numeric_limits<int64_t>::max()}) {
    Status s = program->reserveCapturedSteps(count);
    EXPECT_EQ(s.message(), "reserveCapturedSteps(" + std::to_string(count) +
                               "): " + std::to_string(count) +
                               " staging entries of 512 bytes overflow 64 "
                               "bits");
  }
  EXPECT_EQ(program->capturedStepsLeft(), left);
}

} // namespace
