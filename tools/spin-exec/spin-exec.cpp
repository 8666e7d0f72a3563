//===- spin-exec.cpp - run an indexer trace through the compiled CPU path -===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
// Generates one indexer layer's graph from the command-line configuration,
// compiles it through spin-sparsify-pipeline (unless --dense) and
// spin-lower-to-cpu, and runs the decode steps of a trace directory with a
// persistent state pool:
//
//   DIR/keys.npy [P, S, D] (bf16 bits as <u2, <f2, <f4, or fp8 bits as |u1),
//   DIR/scales.npy [P, S] <f4 (fp8 only), and per step DIR/step_NNNN/ with
//   q.npy [B, R, H, D], w.npy [B, R, H] <f4, block_table.npy [B, MB] <i4,
//   lengths.npy and positions.npy [B, R] <i4, request_ids.npy [B] <i8,
//   optional accepted.npy [B] <i4 (MTP: the previous step's accepted count,
//   -1 for none) and reset.npy [B] |u1. Writes out_topk.npy [B, R, K] <i4
//   and out_sparsity.npy [B, R] <f4 into each step directory.
//
//===----------------------------------------------------------------------===//

#include "spin/ExecutionEngine/CpuExecutable.h"
#include "spin/Runtime/Npy.h"
#include "spin/Runtime/StatePool.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <cstdio>
#include <map>
#include <string>

using namespace mlir::spin;
namespace rt = ::spin::runtime;
namespace cl = llvm::cl;

static cl::opt<std::string> traceDir("trace", cl::desc("Trace directory"),
                                     cl::value_desc("dir"), cl::Required);
static cl::opt<bool> dense("dense", cl::desc("Run the dense indexer (no SPIN)"));
static cl::opt<bool> printIR("print-ir",
                             cl::desc("Print the graph after the graph passes"));
static cl::opt<int64_t> heads("heads", cl::desc("Indexer heads H"), cl::init(64));
static cl::opt<int64_t> headDim("head-dim", cl::desc("Head dimension D"),
                                cl::init(128));
static cl::opt<int64_t> rows("rows", cl::desc("Query rows per request R"),
                             cl::init(1));
static cl::opt<int64_t> topk("topk", cl::desc("Top-K size"), cl::init(512));
static cl::opt<int64_t> pageSize("page-size", cl::desc("Slots per page S"),
                                 cl::init(64));
static cl::opt<int64_t> maxPages("max-pages",
                                 cl::desc("Block-table width MB (capacity MB*S)"),
                                 cl::init(64));
static cl::opt<std::string> keyFormat("key-format",
                                      cl::desc("bf16 | f16 | f32 | fp8"),
                                      cl::init("bf16"));
static cl::opt<int64_t> numSlots("num-slots",
                                 cl::desc("Concurrent requests in the state pool"),
                                 cl::init(64));
// spin-sparsify-indexer options, passed through as the pipeline's options.
static cl::opt<int64_t> blockSize("block-size", cl::init(64),
                                  cl::desc("SPIN block size"));
static cl::opt<double> sparsity("sparsity", cl::init(0.4),
                                cl::desc("Target block sparsity"));
static cl::opt<double> emaDecay("ema-decay", cl::init(0.5), cl::desc("EMA decay"));
static cl::opt<double> explore("explore", cl::init(0.0),
                               cl::desc("Explored fraction of the budget"));
static cl::opt<uint64_t> seed("seed", cl::init(0), cl::desc("Exploration seed"));
static cl::opt<std::string>
    explorePolicy("explore-policy", cl::init("random"),
                  cl::desc("random | staleness-score | block-age"));
static cl::opt<std::string> pooling("pooling", cl::init("max"),
                                    cl::desc("max | mean | top4"));
static cl::opt<std::string> reduction("reduction", cl::init("A1"),
                                      cl::desc("A0 | A1 | A2"));
static cl::opt<std::string> mtpMask("mtp-mask", cl::init("union"),
                                    cl::desc("union | row0"));
static cl::opt<std::string> mtpUpdate("mtp-update", cl::init("prefix"),
                                      cl::desc("prefix | row0"));

namespace {

int fail(const std::string &message) {
  llvm::errs() << "spin-exec: error: " << message << "\n";
  return 1;
}

/// The dtype a trace stores for each runtime element type.
const char *npyDtype(rt::DType dtype) {
  switch (dtype) {
  case rt::DType::f32:
    return "<f4";
  case rt::DType::f16:
    return "<f2";
  case rt::DType::bf16:
    return "<u2";
  case rt::DType::fp8e4m3:
  case rt::DType::i1:
  case rt::DType::i8:
    return "|u1";
  case rt::DType::i32:
    return "<i4";
  case rt::DType::i64:
    return "<i8";
  }
  return "?";
}

/// Loads `dir/name.npy` as a tensor of `dtype`.
rt::StatusOr<rt::TensorRef> load(const std::string &dir, const std::string &name,
                                 rt::DType dtype,
                                 std::map<std::string, rt::NpyArray> &storage) {
  std::string path = dir + "/" + name + ".npy";
  rt::StatusOr<rt::NpyArray> array = rt::readNpy(path);
  if (!array.ok())
    return array.status();
  std::string want = npyDtype(dtype);
  std::string got = array->dtype == "|b1" || array->dtype == "|i1" ? "|u1" : array->dtype;
  if (got != want)
    return rt::Status::error(path + ": dtype " + array->dtype + ", expected " +
                             want + " for " + rt::dtypeName(dtype));
  rt::NpyArray &kept = storage[name] = std::move(*array);
  rt::TensorRef ref;
  ref.data = kept.data.data();
  ref.shape = kept.shape;
  ref.dtype = dtype;
  return ref;
}

} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  cl::ParseCommandLineOptions(
      argc, argv, "spin-exec: run an indexer trace on the compiled CPU path\n");

  IndexerConfig config;
  config.heads = heads;
  config.headDim = headDim;
  config.rows = rows;
  config.topk = topk;
  config.pageSize = pageSize;
  config.maxPages = maxPages;
  config.keyFormat = keyFormat;
  rt::StatusOr<std::string> graph = buildIndexerGraph(config);
  if (!graph.ok())
    return fail(graph.message());

  SparsifyPipelineOptions options;
  std::string pipeline =
      "sparsity=" + std::to_string(sparsity) + " block-size=" +
      std::to_string(blockSize) + " ema-decay=" + std::to_string(emaDecay) +
      " explore=" + std::to_string(explore) + " seed=" + std::to_string(seed) +
      " explore-policy=" + explorePolicy + " pooling=" + pooling + " reduction=" + reduction + " mtp-mask=" + mtpMask +
      " mtp-update=" + mtpUpdate;
  if (mlir::failed(options.parseFromString(pipeline)))
    return fail("invalid pipeline options: " + pipeline);

  auto start = std::chrono::steady_clock::now();
  auto exe = CpuExecutable::compile(*graph, "indexer_layer",
                                    dense ? nullptr : &options);
  if (!exe.ok())
    return fail(exe.message());
  double compileSeconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (printIR)
    llvm::outs() << (*exe)->graphIR();
  const rt::StepProgram &program = (*exe)->program();

  rt::StatePoolOptions poolOptions;
  poolOptions.numLayers = 1;
  poolOptions.numSlots = numSlots;
  poolOptions.capacity = maxPages * pageSize;
  poolOptions.maxRows = rows;
  poolOptions.blockSize = blockSize;
  // Programs that explore by block age read and write last_observed.
  for (const rt::ArgSpec &arg : program.signature())
    if (arg.role == rt::ArgSpec::Role::State &&
        arg.name == rt::stateFieldName(rt::StateField::LastObserved))
      poolOptions.lastObserved = true;
  auto pool = rt::StatePool::create(poolOptions);
  if (!pool.ok())
    return fail(pool.message());

  // Inputs and their types, from the compiled signature.
  std::map<std::string, rt::DType> inputTypes;
  for (const rt::ArgSpec &arg : program.signature())
    if (arg.role != rt::ArgSpec::Role::Output && arg.role != rt::ArgSpec::Role::State &&
        arg.role != rt::ArgSpec::Role::Slots && arg.role != rt::ArgSpec::Role::Accepted)
      inputTypes[arg.name] = arg.dtype;

  std::map<std::string, rt::NpyArray> shared;
  std::map<std::string, rt::TensorRef> cache;
  for (const char *name : {"keys", "scales"}) {
    if (!inputTypes.count(name))
      continue;
    auto tensor = load(traceDir, name, inputTypes[name], shared);
    if (!tensor.ok())
      return fail(tensor.message());
    cache[name] = *tensor;
  }

  double stepSeconds = 0;
  int64_t steps = 0;
  for (;; ++steps) {
    char name[32];
    std::snprintf(name, sizeof(name), "/step_%04lld", static_cast<long long>(steps));
    std::string dir = traceDir + name;
    if (!llvm::sys::fs::is_directory(dir))
      break;
    std::map<std::string, rt::NpyArray> storage;
    std::map<std::string, rt::TensorRef> inputs = cache;
    for (auto &[input, dtype] : inputTypes) {
      if (input == "keys" || input == "scales" || input == "reset")
        continue;
      auto tensor = load(dir, input, dtype, storage);
      if (!tensor.ok())
        return fail(tensor.message());
      inputs[input] = *tensor;
    }
    int64_t batch = inputs["lengths"].shape.empty() ? 0 : inputs["lengths"].shape[0];
    // Per-request files must have one entry per request of the batch.
    auto perRequest = [&](const rt::TensorRef &t, const char *file) {
      return t.shape.size() == 1 && t.shape[0] == batch
                 ? rt::Status::success()
                 : rt::Status::error(dir + "/" + file + " has shape [" +
                                     (t.shape.empty() ? std::string()
                                                      : std::to_string(t.shape[0])) +
                                     "], expected [" + std::to_string(batch) + "]");
    };
    // Dense programs have no state: request ids, resets and commits do not
    // apply and their files are not read.
    const int64_t *id = nullptr;
    if (!dense) {
      if (rt::Status s = perRequest(inputs["request_ids"], "request_ids.npy"); !s.ok())
        return fail(s.message());
      id = static_cast<const int64_t *>(inputs["request_ids"].data);
    }
    // New requests join the pool; resets and commits come before the step.
    for (int64_t b = 0; b < batch && !dense; ++b)
      if (!(*pool)->contains(id[b]))
        if (auto slot = (*pool)->acquire(id[b]); !slot.ok())
          return fail(dir + ": " + slot.message());
    // Dense programs keep no state: resets and commits do not apply.
    if (!dense && llvm::sys::fs::exists(dir + "/reset.npy")) {
      auto reset = load(dir, "reset", rt::DType::i8, storage);
      if (!reset.ok())
        return fail(reset.message());
      if (rt::Status s = perRequest(*reset, "reset.npy"); !s.ok())
        return fail(s.message());
      for (int64_t b = 0; b < batch; ++b)
        if (static_cast<const uint8_t *>(reset->data)[b])
          if (rt::Status s = (*pool)->reset(id[b]); !s.ok())
            return fail(dir + ": " + s.message());
    }
    if (!dense && llvm::sys::fs::exists(dir + "/accepted.npy")) {
      auto accepted = load(dir, "accepted", rt::DType::i32, storage);
      if (!accepted.ok())
        return fail(accepted.message());
      if (rt::Status s = perRequest(*accepted, "accepted.npy"); !s.ok())
        return fail(s.message());
      for (int64_t b = 0; b < batch; ++b) {
        int32_t count = static_cast<const int32_t *>(accepted->data)[b];
        if (count == -1) // nothing to commit for this request
          continue;
        if (rt::Status s = (*pool)->commit(id[b], count); !s.ok())
          return fail(dir + ": " + s.message());
      }
    }
    std::map<std::string, rt::NpyArray> results;
    std::map<std::string, rt::TensorRef> outputs;
    for (const rt::ArgSpec &arg : program.signature()) {
      if (arg.role != rt::ArgSpec::Role::Output)
        continue;
      rt::NpyArray &array = results[arg.name];
      array.dtype = npyDtype(arg.dtype);
      array.shape = arg.shape;
      array.shape[0] = batch;
      array.data.assign(array.numElements() * rt::dtypeSize(arg.dtype), 0);
      outputs[arg.name] = {array.data.data(), array.shape, arg.dtype};
    }
    auto begin = std::chrono::steady_clock::now();
    if (rt::Status s = program.run(**pool, inputs, outputs); !s.ok())
      return fail(dir + ": " + s.message());
    stepSeconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
    if (!results.count("sparsity")) {
      rt::NpyArray &zeros = results["sparsity"];
      zeros.dtype = "<f4";
      zeros.shape = {batch, rows};
      zeros.data.assign(batch * rows * 4, 0);
    }
    for (auto &[output, array] : results)
      if (rt::Status s = rt::writeNpy(dir + "/out_" + output + ".npy", array); !s.ok())
        return fail(s.message());
  }
  llvm::errs() << "spin-exec: " << steps << " steps, compile "
               << llvm::format("%.2f", compileSeconds) << " s, "
               << llvm::format("%.3f", steps ? 1e3 * stepSeconds / steps : 0.0)
               << " ms/step\n";
  return 0;
}
