//===- GpuCompiler.cpp - graphs to GPU artifacts (PTX + manifest) ---------===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
//===----------------------------------------------------------------------===//

#include "spin/ExecutionEngine/GpuCompiler.h"

#include "spin/Conversion/Passes.h"
#include "spin/Dialect/Spin/IR/SpinOps.h"
#include "spin/ExecutionEngine/CpuExecutable.h"
#include "spin/InitAllSpin.h"

#include "GraphFrontEnd.h"
#include "SpinCompilerVersion.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <set>

using namespace mlir;
using namespace mlir::spin;
using ::spin::runtime::Status;
using ::spin::runtime::StatusOr;

namespace {

int64_t constantIndex(Value v) {
  if (auto c = v.getDefiningOp<arith::ConstantIndexOp>())
    return c.value();
  return -1;
}

/// Serialises the launch plan `plan` and the PTX objects into the manifest
/// of docs/GPU-ABI.md.
StatusOr<std::string> buildManifest(func::FuncOp plan,
                                    const std::map<std::string, std::string> &ptx,
                                    int64_t ptxVersion,
                                    const std::map<std::string, std::string>
                                        &optionText) {
  llvm::json::Array arguments, scratch, launches, kernels;
  // Host argument -> how a launch refers to it.
  std::vector<llvm::json::Object> refs(plan.getNumArguments());
  int64_t batch = -1, rows = 1;
  for (BlockArgument arg : plan.getArguments()) {
    unsigned i = arg.getArgNumber();
    auto role = plan.getArgAttrOfType<StringAttr>(i, "spin.role").getValue();
    if (role == "scratch") {
      refs[i] = llvm::json::Object{{"kind", "scratch"},
                                   {"index", int64_t(scratch.size())}};
      scratch.push_back(llvm::json::Object{
          {"name", plan.getArgAttrOfType<StringAttr>(i, "spin.name").getValue()},
          {"bytes",
           plan.getArgAttrOfType<IntegerAttr>(i, "spin.bytes").getInt()}});
      continue;
    }
    if (role == "errors") {
      refs[i] = llvm::json::Object{{"kind", "errors"}};
      continue;
    }
    if (role == "dim") {
      refs[i] = llvm::json::Object{
          {"kind", "dim"},
          {"argument",
           plan.getArgAttrOfType<IntegerAttr>(i, "spin.argument").getInt()},
          {"dim", plan.getArgAttrOfType<IntegerAttr>(i, "spin.dim").getInt()}};
      continue;
    }
    refs[i] = llvm::json::Object{{"kind", "argument"},
                                 {"index", int64_t(arguments.size())}};
    llvm::json::Array shape;
    auto shapeAttr = plan.getArgAttrOfType<ArrayAttr>(i, "spin.shape");
    for (Attribute size : shapeAttr)
      shape.push_back(cast<IntegerAttr>(size).getInt());
    StringRef name = plan.getArgAttrOfType<StringAttr>(i, "spin.name").getValue();
    if (name == "lengths" && shapeAttr.size() == 2) {
      batch = cast<IntegerAttr>(shapeAttr[0]).getInt();
      rows = cast<IntegerAttr>(shapeAttr[1]).getInt();
    }
    auto layer = plan.getArgAttrOfType<IntegerAttr>(i, "spin.layer");
    arguments.push_back(llvm::json::Object{
        {"role", role},
        {"name", name},
        {"layer", layer ? layer.getInt() : -1},
        {"dtype", plan.getArgAttrOfType<StringAttr>(i, "spin.dtype").getValue()},
        {"shape", std::move(shape)},
        {"block_size",
         layer ? plan->getAttrOfType<IntegerAttr>("spin.block_size").getInt()
               : 0}});
  }
  std::set<std::string> seenKernels;
  for (auto launch : plan.getBody().getOps<gpu::LaunchFuncOp>()) {
    std::string kernel = launch.getKernelName().str();
    int64_t block = constantIndex(launch.getBlockSizeX());
    int64_t shared = 0;
    if (Value dyn = launch.getDynamicSharedMemorySize())
      if (auto c = dyn.getDefiningOp<arith::ConstantIntOp>())
        shared = c.value();
    if (seenKernels.insert(kernel).second)
      kernels.push_back(llvm::json::Object{
          {"name", kernel},
          {"block", llvm::json::Array{block, 1, 1}},
          {"shared_bytes", shared}});
    llvm::json::Array args;
    for (Value operand : launch.getKernelOperands())
      args.push_back(llvm::json::Object(
          refs[cast<BlockArgument>(operand).getArgNumber()]));
    llvm::json::Array wait;
    for (Attribute e : launch->getAttrOfType<ArrayAttr>("spin.wait"))
      wait.push_back(cast<IntegerAttr>(e).getInt());
    launches.push_back(llvm::json::Object{
        {"kernel", kernel},
        {"grid", llvm::json::Array{constantIndex(launch.getGridSizeX()),
                                   constantIndex(launch.getGridSizeY()),
                                   constantIndex(launch.getGridSizeZ())}},
        {"stream", launch->getAttrOfType<IntegerAttr>("spin.stream").getInt()},
        {"wait", std::move(wait)},
        {"record",
         launch->getAttrOfType<IntegerAttr>("spin.record").getInt()},
        {"args", std::move(args)}});
  }
  llvm::json::Object ptxFiles, options;
  for (const auto &[chip, text] : ptx)
    ptxFiles[chip] = chip + ".ptx";
  for (const auto &[key, value] : optionText)
    options[key] = value;
  int64_t events = plan->getAttrOfType<IntegerAttr>("spin.events").getInt();
  llvm::json::Object manifest{
      {"format", "spin-gpu-artifact"},
      {"version", 1},
      {"function", plan.getSymName()},
      {"compiler_version", SPIN_COMPILER_SOURCE_HASH},
      {"options", std::move(options)},
      {"ptx", std::move(ptxFiles)},
      {"ptx_version", ptxVersion},
      // Every kernel waits for its predecessors (griddepcontrol.wait) before
      // it touches memory: the runtime may launch them programmatically.
      {"programmatic_launch", 1},
      {"batch", batch},
      {"rows", rows},
      {"state",
       llvm::json::Object{
           {"layers", plan->getAttrOfType<IntegerAttr>("spin.layers").getInt()},
           {"capacity",
            plan->getAttrOfType<IntegerAttr>("spin.capacity").getInt()},
           {"block_size",
            plan->getAttrOfType<IntegerAttr>("spin.block_size").getInt()},
           {"max_rows", rows}}},
      {"arguments", std::move(arguments)},
      {"scratch", std::move(scratch)},
      {"streams", 2},
      {"events", events},
      {"kernels", std::move(kernels)},
      {"launches", std::move(launches)}};
  std::string text;
  llvm::raw_string_ostream os(text);
  os << llvm::formatv("{0:2}", llvm::json::Value(std::move(manifest))) << "\n";
  return text;
}

} // namespace

StatusOr<GpuArtifact>
mlir::spin::compileGpuArtifact(const std::string &source,
                               const std::string &function,
                               const SparsifyPipelineOptions *sparsify,
                               const GpuCompileOptions &options) {
  LowerToNVVMOptions lowering;
  lowering.chips = options.chips;
  lowering.ptxVersion = options.ptxVersion;
  lowering.optLevel = options.optLevel;
  lowering.capacity = options.capacity;
  std::string message;
  if (failed(verifyLowerToNVVMOptions(lowering, message)))
    return Status::error(message);

  DialectRegistry registry;
  registerSpinDialects(registry);
  MLIRContext context(registry);
  context.loadAllAvailableDialects();
  DiagnosticCollector diagnostics(context);
  auto fail = [&](const std::string &what) { return diagnostics.fail(what); };
  std::map<std::string, std::string> optionText;
  std::string sparsifyText;
  StatusOr<OwningOpRef<ModuleOp>> loaded = loadGraph(
      context, diagnostics, source, function, sparsify, &sparsifyText);
  if (!loaded.ok())
    return loaded.status();
  OwningOpRef<ModuleOp> module = std::move(*loaded);
  if (sparsify)
    optionText["sparsify"] = sparsifyText;

  // One PTX version for every chip: the manifest's.
  int64_t version = options.ptxVersion;
  if (version == 0) {
    version = 86;
    for (const std::string &chip : options.chips)
      version = std::max(version, minimumPtxVersion(chip));
  }
  // One conversion per group of chips that share their kernels (wgmma
  // scoring or mma.sync); the launch plans must agree, since one manifest
  // serves every chip.
  std::map<bool, std::vector<std::string>> groups;
  for (const std::string &chip : options.chips)
    groups[options.wgmma && options.mTiles <= 1 && chipHasWgmma(chip)]
        .push_back(chip);
  GpuArtifact artifact;
  OwningOpRef<ModuleOp> firstPlan;
  std::vector<OwningOpRef<ModuleOp>> otherPlans;
  for (const auto &[wgmma, chips] : groups) {
    OwningOpRef<ModuleOp> plan(module->clone());
    PassManager toGpu(&context);
    ConvertSpinToGPUOptions gpu;
    gpu.capacity = options.capacity;
    gpu.tilesPerWarp = options.tilesPerWarp;
    gpu.smCount = options.smCount;
    gpu.mTiles = options.mTiles;
    gpu.wgmma = wgmma;
    toGpu.addPass(createConvertSpinToGPU(gpu));
    if (failed(toGpu.run(*plan)))
      return fail("convert-spin-to-gpu failed");
    if (!firstPlan) {
      llvm::raw_string_ostream os(artifact.planIR);
      plan->print(os);
    }
    // Lower the kernels for these chips (convert-spin-to-gpu already ran:
    // build the rest of spin-lower-to-nvvm on the plan).
    LowerToNVVMOptions groupLowering;
    groupLowering.chips = chips;
    groupLowering.ptxVersion = version;
    groupLowering.optLevel = lowering.optLevel;
    groupLowering.capacity = lowering.capacity;
    PassManager toPtx(&context);
    buildLowerToNVVMPipelineAfterPlan(toPtx, groupLowering);
    if (failed(toPtx.run(*plan)))
      return fail("spin-lower-to-nvvm failed");
    for (auto binary : plan->getOps<gpu::BinaryOp>())
      for (Attribute attr : binary.getObjects()) {
        auto object = cast<gpu::ObjectAttr>(attr);
        auto target = cast<NVVM::NVVMTargetAttr>(object.getTarget());
        artifact.ptx[target.getChip().str()] = object.getObject().str();
      }
    if (!firstPlan)
      firstPlan = std::move(plan);
    else
      otherPlans.push_back(std::move(plan));
  }

  StatusOr<std::string> manifest =
      buildManifest(firstPlan->lookupSymbol<func::FuncOp>(function),
                    artifact.ptx, version, optionText);
  if (!manifest.ok())
    return manifest.status();
  for (OwningOpRef<ModuleOp> &other : otherPlans) {
    StatusOr<std::string> again =
        buildManifest(other->lookupSymbol<func::FuncOp>(function),
                      artifact.ptx, version, optionText);
    if (!again.ok())
      return again.status();
    if (*again != *manifest)
      return Status::error("internal error: the launch plans of the target "
                           "chips differ");
  }
  artifact.manifest = std::move(*manifest);
  return artifact;
}

std::string mlir::spin::compilerVersion() { return SPIN_COMPILER_SOURCE_HASH; }

Status mlir::spin::writeGpuArtifact(const GpuArtifact &artifact,
                                    const std::string &dir) {
  if (std::error_code ec = llvm::sys::fs::create_directories(dir))
    return Status::error("cannot create " + dir + ": " + ec.message());
  auto write = [&](const std::string &name,
                   const std::string &text) -> Status {
    llvm::SmallString<256> path(dir);
    llvm::sys::path::append(path, name);
    std::error_code ec;
    llvm::raw_fd_ostream os(path, ec);
    if (ec)
      return Status::error("cannot write " + std::string(path) + ": " +
                           ec.message());
    os << text;
    os.close();
    if (os.has_error())
      return Status::error("cannot write " + std::string(path));
    return Status::success();
  };
  for (const auto &[chip, text] : artifact.ptx)
    if (Status s = write(chip + ".ptx", text); !s.ok())
      return s;
  return write("manifest.json", artifact.manifest);
}
