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
// spin-sparsify-pipeline's options are flags of the same names, types and
// defaults (--sparsity=0.5 --explore-policy=block-age ...), declared from
// the pipeline's options struct.
//
//===----------------------------------------------------------------------===//

#include "spin/ExecutionEngine/CpuExecutable.h"
#include "spin/Runtime/Npy.h"
#include "spin/Runtime/StatePool.h"
#include "spin/Runtime/StepProgram.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

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
static cl::opt<std::string>
    queryFormat("query-format",
                cl::desc("Query format: empty for the key format's own "
                         "(bf16 with fp8 keys), or fp8 (with fp8 keys)"),
                cl::init(""));
static cl::opt<int64_t> numSlots("num-slots",
                                 cl::desc("Concurrent requests in the state pool"),
                                 cl::init(64));
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

//===----------------------------------------------------------------------===//
// Parse arguments
//===----------------------------------------------------------------------===//

/// The indexer layer the command line describes.
IndexerConfig indexerConfig() {
  IndexerConfig config;
  config.heads = heads;
  config.headDim = headDim;
  config.rows = rows;
  config.topk = topk;
  config.pageSize = pageSize;
  config.maxPages = maxPages;
  config.keyFormat = keyFormat;
  config.queryFormat = queryFormat;
  return config;
}

//===----------------------------------------------------------------------===//
// spin-sparsify-pipeline's options as flags
//===----------------------------------------------------------------------===//

/// The top-level flag type mirroring the pipeline option type `OptionT`:
/// same value type, same parser.
template <typename OptionT>
using FlagFor =
    cl::opt<std::decay_t<decltype(std::declval<OptionT &>().getValue())>,
            /*ExternalStorage=*/false,
            std::decay_t<decltype(std::declval<OptionT &>().getParser())>>;

/// Where --help lists the pipeline's flags.
cl::OptionCategory &pipelineCategory() {
  static cl::OptionCategory category("spin-sparsify-pipeline options");
  return category;
}

/// A flag declared like the pipeline's `option`: its description, default
/// and, for enums, its value names.
template <typename OptionT>
std::unique_ptr<cl::Option> flagLike(llvm::StringRef name, OptionT &option) {
  auto flag = std::make_unique<FlagFor<OptionT>>(
      name, cl::desc(option.HelpStr), cl::init(option.getValue()),
      cl::cat(pipelineCategory()));
  using T = std::decay_t<decltype(option.getValue())>;
  if constexpr (std::is_enum_v<T>) {
    auto &values = option.getParser();
    for (unsigned i = 0, e = values.getNumOptions(); i < e; ++i)
      flag->getParser().addLiteralOption(
          values.getOption(i),
          static_cast<const cl::OptionValue<T> &>(values.getOptionValue(i))
              .getValue(),
          values.getDescription(i));
  }
  return flag;
}

/// Declares a flag for each option of spin-sparsify-pipeline, except
/// page-size, which spin-exec declares itself for the graph (whose keys are
/// already paged, so the raising pass has nothing to do).
std::map<std::string, std::unique_ptr<cl::Option>>
declarePipelineFlags(SparsifyPipelineOptions &defaults) {
  std::map<std::string, std::unique_ptr<cl::Option>> flags;
  defaults.forEachOption([&](llvm::StringRef name, auto &option) {
    if (name != pageSize.ArgStr)
      flags[name.str()] = flagLike(name, option);
  });
  return flags;
}

/// Sets `options` from the parsed flags of declarePipelineFlags.
void setPipelineOptions(
    SparsifyPipelineOptions &options,
    const std::map<std::string, std::unique_ptr<cl::Option>> &flags) {
  options.forEachOption([&](llvm::StringRef name, auto &option) {
    auto it = flags.find(name.str());
    if (it != flags.end())
      option = static_cast<FlagFor<std::decay_t<decltype(option)>> &>(
                   *it->second)
                   .getValue();
  });
}

//===----------------------------------------------------------------------===//
// Compile, and build the pool
//===----------------------------------------------------------------------===//

/// `graph`'s @indexer_layer compiled (sparsified with `options` unless
/// --dense); prints its graph after the graph passes with --print-ir.
rt::StatusOr<std::shared_ptr<CpuExecutable>>
compileIndexer(const std::string &graph, const SparsifyPipelineOptions &options,
               double &compileSeconds) {
  auto start = std::chrono::steady_clock::now();
  auto exe = CpuExecutable::compile(graph, "indexer_layer",
                                    dense ? nullptr : &options);
  if (!exe.ok())
    return exe.status();
  compileSeconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (printIR)
    llvm::outs() << (*exe)->graphIR();
  return exe;
}

/// A one-layer state pool for `program`, whose SPIN blocks are `blockSize`
/// slots.
rt::StatusOr<std::unique_ptr<rt::StatePool>>
createPool(const rt::StepProgram &program, int64_t blockSize) {
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
  return rt::StatePool::create(poolOptions);
}

//===----------------------------------------------------------------------===//
// Load the trace
//===----------------------------------------------------------------------===//

/// The trace: the inputs the program reads from files and their types (from
/// the compiled signature), and the key cache and scales all steps share.
struct Trace {
  std::map<std::string, rt::DType> inputTypes;
  std::map<std::string, rt::NpyArray> storage;
  std::map<std::string, rt::TensorRef> shared;
};

/// Reads the input types from `program`'s signature and loads the key cache
/// (and scales) of DIR.
rt::Status loadTrace(const rt::StepProgram &program, Trace &trace) {
  for (const rt::ArgSpec &arg : program.signature())
    if (arg.role != rt::ArgSpec::Role::Output && arg.role != rt::ArgSpec::Role::State &&
        arg.role != rt::ArgSpec::Role::Slots && arg.role != rt::ArgSpec::Role::Accepted)
      trace.inputTypes[arg.name] = arg.dtype;
  for (const char *name : {"keys", "scales"}) {
    if (!trace.inputTypes.count(name))
      continue;
    auto tensor = load(traceDir, name, trace.inputTypes[name], trace.storage);
    if (!tensor.ok())
      return tensor.status();
    trace.shared[name] = *tensor;
  }
  return rt::Status::success();
}

/// The inputs of the step in `dir`: the shared ones and the step's files.
rt::Status loadStepInputs(const Trace &trace, const std::string &dir,
                          std::map<std::string, rt::NpyArray> &storage,
                          std::map<std::string, rt::TensorRef> &inputs) {
  inputs = trace.shared;
  for (auto &[input, dtype] : trace.inputTypes) {
    if (input == "keys" || input == "scales" || input == "reset")
      continue;
    auto tensor = load(dir, input, dtype, storage);
    if (!tensor.ok())
      return tensor.status();
    inputs[input] = *tensor;
  }
  return rt::Status::success();
}

//===----------------------------------------------------------------------===//
// Run the steps
//===----------------------------------------------------------------------===//

/// Checks that a per-request file of the step in `dir` has one entry per
/// request of the batch.
rt::Status checkPerRequest(const rt::TensorRef &t, const std::string &dir,
                           const char *file, int64_t batch) {
  return t.shape.size() == 1 && t.shape[0] == batch
             ? rt::Status::success()
             : rt::Status::error(dir + "/" + file + " has shape " +
                                 rt::shapeString(t.shape) + ", expected [" +
                                 std::to_string(batch) + "]");
}

/// What comes before a sparse step: new requests join the pool, then the
/// step's resets (reset.npy) and commits (accepted.npy) apply. Dense
/// programs keep no state: request ids, resets and commits do not apply and
/// their files are not read.
rt::Status updatePool(rt::StatePool &pool, const std::string &dir,
                      std::map<std::string, rt::TensorRef> &inputs,
                      std::map<std::string, rt::NpyArray> &storage, int64_t batch) {
  if (dense)
    return rt::Status::success();
  const std::string requestIds = rt::argRoleName(rt::ArgSpec::Role::RequestIds);
  const rt::TensorRef &ids = inputs[requestIds];
  if (rt::Status s = checkPerRequest(ids, dir, (requestIds + ".npy").c_str(), batch);
      !s.ok())
    return s;
  const int64_t *id = static_cast<const int64_t *>(ids.data);
  for (int64_t b = 0; b < batch; ++b)
    if (!pool.contains(id[b]))
      if (auto slot = pool.acquire(id[b]); !slot.ok())
        return rt::Status::error(dir + ": " + slot.message());
  if (llvm::sys::fs::exists(dir + "/reset.npy")) {
    auto reset = load(dir, "reset", rt::DType::i8, storage);
    if (!reset.ok())
      return reset.status();
    if (rt::Status s = checkPerRequest(*reset, dir, "reset.npy", batch); !s.ok())
      return s;
    for (int64_t b = 0; b < batch; ++b)
      if (static_cast<const uint8_t *>(reset->data)[b])
        if (rt::Status s = pool.reset(id[b]); !s.ok())
          return rt::Status::error(dir + ": " + s.message());
  }
  if (llvm::sys::fs::exists(dir + "/accepted.npy")) {
    auto accepted = load(dir, "accepted", rt::DType::i32, storage);
    if (!accepted.ok())
      return accepted.status();
    if (rt::Status s = checkPerRequest(*accepted, dir, "accepted.npy", batch); !s.ok())
      return s;
    for (int64_t b = 0; b < batch; ++b) {
      int32_t count = static_cast<const int32_t *>(accepted->data)[b];
      if (count == -1) // nothing to commit for this request
        continue;
      if (rt::Status s = pool.commit(id[b], count); !s.ok())
        return rt::Status::error(dir + ": " + s.message());
    }
  }
  return rt::Status::success();
}

/// Zeroed arrays for the program's outputs at this batch, and the tensors
/// the program writes them through.
void allocateOutputs(const rt::StepProgram &program, int64_t batch,
                     std::map<std::string, rt::NpyArray> &results,
                     std::map<std::string, rt::TensorRef> &outputs) {
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
}

//===----------------------------------------------------------------------===//
// Write outputs
//===----------------------------------------------------------------------===//

/// Writes out_<name>.npy for each output into `dir`, with an all-zero
/// sparsity for programs that report none (dense ones).
rt::Status writeOutputs(const std::string &dir, int64_t batch,
                        std::map<std::string, rt::NpyArray> &results) {
  if (!results.count("sparsity")) {
    rt::NpyArray &zeros = results["sparsity"];
    zeros.dtype = "<f4";
    zeros.shape = {batch, rows};
    zeros.data.assign(batch * rows * 4, 0);
  }
  for (auto &[output, array] : results)
    if (rt::Status s = rt::writeNpy(dir + "/out_" + output + ".npy", array); !s.ok())
      return s;
  return rt::Status::success();
}

/// Runs the step in `dir` and writes its outputs; adds the time of the
/// program's run to `stepSeconds`.
rt::Status runStep(const rt::StepProgram &program, rt::StatePool &pool,
                   const Trace &trace, const std::string &dir, double &stepSeconds) {
  std::map<std::string, rt::NpyArray> storage;
  std::map<std::string, rt::TensorRef> inputs;
  if (rt::Status s = loadStepInputs(trace, dir, storage, inputs); !s.ok())
    return s;
  int64_t batch = inputs["lengths"].shape.empty() ? 0 : inputs["lengths"].shape[0];
  if (rt::Status s = updatePool(pool, dir, inputs, storage, batch); !s.ok())
    return s;
  std::map<std::string, rt::NpyArray> results;
  std::map<std::string, rt::TensorRef> outputs;
  allocateOutputs(program, batch, results, outputs);
  auto begin = std::chrono::steady_clock::now();
  if (rt::Status s = program.run(pool, inputs, outputs); !s.ok())
    return rt::Status::error(dir + ": " + s.message());
  stepSeconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  return writeOutputs(dir, batch, results);
}

/// Runs DIR/step_0000, DIR/step_0001, ... until one is missing; counts
/// them in `steps`.
rt::Status runSteps(const rt::StepProgram &program, rt::StatePool &pool,
                    const Trace &trace, int64_t &steps, double &stepSeconds) {
  for (steps = 0;; ++steps) {
    char name[32];
    std::snprintf(name, sizeof(name), "/step_%04lld", static_cast<long long>(steps));
    std::string dir = traceDir + name;
    if (!llvm::sys::fs::is_directory(dir))
      return rt::Status::success();
    if (rt::Status s = runStep(program, pool, trace, dir, stepSeconds); !s.ok())
      return s;
  }
}

} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  SparsifyPipelineOptions options;
  auto pipelineFlags = declarePipelineFlags(options);
  cl::ParseCommandLineOptions(
      argc, argv, "spin-exec: run an indexer trace on the compiled CPU path\n");
  setPipelineOptions(options, pipelineFlags);

  rt::StatusOr<std::string> graph = buildIndexerGraph(indexerConfig());
  if (!graph.ok())
    return fail(graph.message());
  double compileSeconds = 0;
  auto exe = compileIndexer(*graph, options, compileSeconds);
  if (!exe.ok())
    return fail(exe.message());
  const rt::StepProgram &program = (*exe)->program();
  auto pool = createPool(program, options.blockSize);
  if (!pool.ok())
    return fail(pool.message());

  Trace trace;
  if (rt::Status s = loadTrace(program, trace); !s.ok())
    return fail(s.message());
  double stepSeconds = 0;
  int64_t steps = 0;
  if (rt::Status s = runSteps(program, **pool, trace, steps, stepSeconds); !s.ok())
    return fail(s.message());
  llvm::errs() << "spin-exec: " << steps << " steps, compile "
               << llvm::format("%.2f", compileSeconds) << " s, "
               << llvm::format("%.3f", steps ? 1e3 * stepSeconds / steps : 0.0)
               << " ms/step\n";
  return 0;
}
