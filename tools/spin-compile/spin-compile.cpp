//===- spin-compile.cpp - indexer graphs to GPU artifacts -----------------===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
//   spin-compile model.mlir --target=sm_90a,sm_100a,sm_103a
//                [--ptx-version=88] [--sparsify="sparsity=0.5 ..."]
//                [--function=NAME] -o DIR
//
// writes DIR/manifest.json and DIR/<chip>.ptx (docs/GPU-ABI.md). Without
// --sparsify the graph is compiled as written (a dense indexer stays dense).
// No GPU is needed.
//
//===----------------------------------------------------------------------===//

#include "spin/ExecutionEngine/GpuCompiler.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Regex.h"
#include "llvm/Support/raw_ostream.h"

using namespace llvm;

static cl::opt<std::string> inputFile(cl::Positional, cl::desc("<model.mlir>"),
                                      cl::Required);
static cl::opt<std::string> outputDir("o", cl::desc("Output directory"),
                                      cl::value_desc("dir"), cl::Required);
static cl::opt<std::string>
    targets("target", cl::desc("Comma-separated chips: sm_90a, sm_100a, sm_103a"),
            cl::init("sm_90a"));
static cl::opt<std::string>
    ptxVersion("ptx-version",
               cl::desc("PTX ISA version, e.g. 88 or 8.8 (default: the lowest "
                        "every target accepts)"),
               cl::init(""));
static cl::opt<int> optLevel("opt-level", cl::desc("LLVM optimisation level"),
                             cl::init(3));
static cl::opt<int64_t>
    capacity("capacity",
             cl::desc("Slots of state per request (default: the block "
                      "table's reach)"),
             cl::init(0));
static cl::opt<int64_t> tilesPerWarp(
    "tiles-per-warp",
    cl::desc("Scoring: warp tiles per warp (default: by the wave cost model "
             "for --sm-count SMs)"),
    cl::init(0));
static cl::opt<int64_t>
    smCount("sm-count",
            cl::desc("SMs of the GPU: the scoring grids are sized for two "
                     "CTAs each, a prediction of at most this many CTAs "
                     "prefetches on a cache miss, and after a larger one the "
                     "selection lets the scoring start before its wait "
                     "(default: 132, an H100 SXM or H200; 148 for a B200 or "
                     "B300)"),
            cl::init(132));
static cl::opt<int64_t>
    mTiles("m-tiles",
           cl::desc("Scoring: 16-slot MMA tiles per warp tile, 1 or 2 "
                    "(default: 1)"),
           cl::init(0));
static cl::opt<bool> copyWarpgroup(
    "copy-warpgroup",
    cl::desc("sm_90a: fp8 scoring (dense, and SPIN's sparse scoring of "
             "blocks of a multiple of 64 slots) by one warpgroup that copies "
             "key tiles into shared memory through tensor maps and two to "
             "four that multiply them, wherever it applies (default: where "
             "it measured faster, when every target is sm_90a)"),
    cl::init(false));
static cl::opt<bool> noCopyWarpgroup(
    "no-copy-warpgroup",
    cl::desc("Never score with the copying warpgroup (default: where it "
             "measured faster, when every target is sm_90a)"),
    cl::init(false));
static cl::opt<bool>
    noWgmma("no-wgmma",
            cl::desc("Score with mma.sync on sm_90a too (default: wgmma "
                     "there)"),
            cl::init(false));
static cl::opt<bool> layerArgument(
    "layer-argument",
    cl::desc("The step takes its layer at run time: the graph's state layers "
             "are offsets from it, so one program serves every layer "
             "(docs/GPU-ABI.md, \"The layer at run time\")"),
    cl::init(false));
static cl::opt<bool> pagedState(
    "paged-state",
    cl::desc("The state follows the KV pages: V, D and the MTP scores live in "
             "pages addressed through a state_block_table input "
             "(docs/GPU-ABI.md, \"Paged state\")"),
    cl::init(false));
static cl::opt<bool> fusedFp8Pages(
    "fused-fp8-pages",
    cl::desc("fp8 keys and their scales come in one i8 kv_cache input of the "
             "serving engines' page layout: each page holds its key rows, then "
             "their f32 scales (docs/GPU-ABI.md, \"Fused fp8 key pages\")"),
    cl::init(false));
static cl::opt<std::string>
    sparsify("sparsify",
             cl::desc("Run spin-sparsify-pipeline with these options first "
                      "(e.g. \"sparsity=0.5 explore=0.05\")"),
             cl::init(""));
static cl::opt<bool> dense("dense",
                           cl::desc("Compile the graph as written (default "
                                    "unless --sparsify is given)"),
                           cl::init(false));
static cl::opt<std::string>
    functionName("function",
                 cl::desc("Function to compile (default: the module's only "
                          "function)"),
                 cl::init(""));
static cl::opt<bool> printPlan("print-plan",
                               cl::desc("Print the launch plan IR to stdout"),
                               cl::init(false));

static int fail(const Twine &message) {
  errs() << "spin-compile: error: " << message << "\n";
  return 1;
}

int main(int argc, char **argv) {
  InitLLVM init(argc, argv);
  cl::ParseCommandLineOptions(argc, argv,
                              "spin GPU compiler: PTX + manifest per graph\n");
  if (dense && !sparsify.empty())
    return fail("--dense and --sparsify exclude each other");

  mlir::spin::GpuCompileOptions options;
  options.chips.clear();
  SmallVector<StringRef> chips;
  StringRef(targets).split(chips, ',', -1, false);
  for (StringRef chip : chips)
    options.chips.push_back(chip.trim().str());
  if (!ptxVersion.empty()) {
    std::string digits = ptxVersion;
    digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
    if (digits.empty() || !llvm::all_of(digits, llvm::isDigit) ||
        digits.size() > 3)
      return fail("--ptx-version must look like 88 or 8.8 (got '" +
                  ptxVersion + "')");
    options.ptxVersion = std::stoll(digits);
  }
  options.optLevel = optLevel;
  for (auto [flag, value] :
       {std::pair<const char *, int64_t>{"--capacity", capacity},
        {"--tiles-per-warp", tilesPerWarp}, {"--m-tiles", mTiles}})
    if (value < 0)
      return fail(std::string(flag) + " must be >= 0 (0: chosen by the "
                  "compiler; got " + std::to_string(value) + ")");
  options.capacity = capacity;
  options.tilesPerWarp = tilesPerWarp;
  if (smCount <= 0)
    return fail("--sm-count must be positive (got " + std::to_string(smCount) +
                ")");
  options.smCount = smCount;
  options.mTiles = mTiles;
  options.wgmma = !noWgmma;
  if (copyWarpgroup && noCopyWarpgroup)
    return fail("--copy-warpgroup and --no-copy-warpgroup exclude each other");
  using CopyWarpgroup = mlir::spin::GpuCompileOptions::CopyWarpgroup;
  options.copyWarpgroup = copyWarpgroup     ? CopyWarpgroup::Always
                          : noCopyWarpgroup ? CopyWarpgroup::Never
                                            : CopyWarpgroup::Auto;
  options.layerArgument = layerArgument;
  options.pagedState = pagedState;
  options.fusedFp8Pages = fusedFp8Pages;

  auto file = MemoryBuffer::getFile(inputFile);
  if (!file)
    return fail("cannot read " + inputFile + ": " + file.getError().message());
  std::string source = (*file)->getBuffer().str();

  std::string function = functionName;
  if (function.empty()) {
    // The only func.func of the file.
    Regex funcRe("func\\.func[ \t]+(public |private )?@([A-Za-z0-9_$.]+)");
    StringRef rest = source;
    SmallVector<StringRef> groups;
    std::vector<std::string> names;
    while (funcRe.match(rest, &groups)) {
      names.push_back(groups[2].str());
      rest = rest.substr(rest.find(groups[0]) + groups[0].size());
    }
    if (names.size() != 1)
      return fail("the input has " + Twine(names.size()) +
                  " functions: name one with --function");
    function = names.front();
  }

  std::unique_ptr<mlir::spin::SparsifyPipelineOptions> sparsifyOptions;
  if (!sparsify.empty()) {
    sparsifyOptions =
        mlir::spin::SparsifyPipelineOptions::createFromString(sparsify);
    if (!sparsifyOptions)
      return fail("bad --sparsify options '" + sparsify + "'");
  }
  auto artifact = mlir::spin::compileGpuArtifact(
      source, function, sparsifyOptions.get(), options);
  if (!artifact.ok())
    return fail(artifact.status().message());
  if (printPlan)
    outs() << artifact->planIR;
  if (auto status = mlir::spin::writeGpuArtifact(*artifact, outputDir);
      !status.ok())
    return fail(status.message());
  errs() << "spin-compile: wrote " << outputDir << "/manifest.json and "
         << artifact->ptx.size() << " PTX module(s)\n";
  return 0;
}
