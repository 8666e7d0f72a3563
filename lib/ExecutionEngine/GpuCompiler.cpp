//===- GpuCompiler.cpp - graphs to GPU artifacts (PTX + manifest) ---------===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
//===----------------------------------------------------------------------===//

#include "spin/ExecutionEngine/GpuCompiler.h"

#include "spin/Conversion/Passes.h"
#include "spin/Dialect/Spin/IR/SpinAbi.h"
#include "spin/Dialect/Spin/IR/SpinOps.h"
#include "spin/ExecutionEngine/CpuExecutable.h"
#include "spin/InitAllSpin.h"
#include "spin/Runtime/GpuProgram.h"

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
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <set>

using namespace mlir;
using namespace mlir::spin;
using ::spin::runtime::ArgSpec;
using ::spin::runtime::GpuKernelSpec;
using ::spin::runtime::GpuLaunchArg;
using ::spin::runtime::GpuLaunchSpec;
using ::spin::runtime::GpuManifest;
using ::spin::runtime::GpuStateSpec;
using ::spin::runtime::Status;
using ::spin::runtime::StatusOr;

namespace {

int64_t constantIndex(Value v) {
  if (auto c = v.getDefiningOp<arith::ConstantIndexOp>())
    return c.value();
  return -1;
}

/// The plan's argument `i` as the manifest's step argument.
ArgSpec stepArgument(func::FuncOp plan, unsigned i, abi::ArgRole role) {
  ArgSpec arg;
  arg.role = role;
  arg.name = plan.getArgAttrOfType<StringAttr>(i, attr::kName).str();
  arg.dtype = *abi::dtypeFromName(
      plan.getArgAttrOfType<StringAttr>(i, attr::kDtype).getValue().str());
  for (Attribute size : plan.getArgAttrOfType<ArrayAttr>(i, attr::kShape))
    arg.shape.push_back(cast<IntegerAttr>(size).getInt());
  if (auto layer = plan.getArgAttrOfType<IntegerAttr>(i, kLayerAttrName)) {
    arg.layer = layer.getInt();
    arg.blockSize =
        plan->getAttrOfType<IntegerAttr>(attr::kBlockSize).getInt();
  }
  return arg;
}

/// The plan's arguments as the manifest's step arguments and scratch
/// buffers, and how a launch refers to each plan argument.
std::vector<GpuLaunchArg> readPlanArguments(func::FuncOp plan, GpuManifest &m) {
  std::vector<GpuLaunchArg> refs(plan.getNumArguments());
  for (BlockArgument value : plan.getArguments()) {
    unsigned i = value.getArgNumber();
    StringRef role = plan.getArgAttrOfType<StringAttr>(i, attr::kRole).getValue();
    GpuLaunchArg &ref = refs[i];
    std::optional<abi::LaunchArgKind> kind =
        abi::launchArgKindFromName(role.str());
    if (kind == abi::LaunchArgKind::Scratch) {
      ref.kind = *kind;
      ref.index = static_cast<int64_t>(m.scratch.size());
      m.scratch.push_back(
          {plan.getArgAttrOfType<StringAttr>(i, attr::kName).str(),
           plan.getArgAttrOfType<IntegerAttr>(i, attr::kBytes).getInt()});
      continue;
    }
    if (kind == abi::LaunchArgKind::Errors) {
      ref.kind = *kind;
      continue;
    }
    if (kind == abi::LaunchArgKind::Layer) {
      ref.kind = *kind;
      ref.value = static_cast<int32_t>(
          plan.getArgAttrOfType<IntegerAttr>(i, kLayerAttrName).getInt());
      continue;
    }
    // Status outputs are numbered in plan order, as the compiler named them.
    if (kind == abi::LaunchArgKind::Status) {
      ref.kind = *kind;
      ref.index = m.statusOutputs++;
      continue;
    }
    // Both name a step argument; the plan's `dim` is a tensor map's box
    // rows.
    if (kind == abi::LaunchArgKind::Dim ||
        kind == abi::LaunchArgKind::TensorMap) {
      ref.kind = *kind;
      ref.index =
          plan.getArgAttrOfType<IntegerAttr>(i, attr::kArgument).getInt();
      int64_t dim = plan.getArgAttrOfType<IntegerAttr>(i, attr::kDim).getInt();
      if (kind == abi::LaunchArgKind::Dim)
        ref.dim = dim;
      else
        ref.value = static_cast<int32_t>(dim);
      continue;
    }
    ref.kind = abi::LaunchArgKind::Argument;
    ref.index = static_cast<int64_t>(m.arguments.size());
    ArgSpec arg = stepArgument(plan, i, *abi::argRoleFromName(role.str()));
    // The step's batch and rows are those of its lengths input.
    if (arg.role == abi::ArgRole::Input && arg.name == "lengths" &&
        arg.shape.size() == 2) {
      m.batch = arg.shape[0];
      m.rows = arg.shape[1];
    }
    m.arguments.push_back(std::move(arg));
  }
  return refs;
}

/// The plan's launches (and the kernels they launch) in issue order.
void readPlanLaunches(func::FuncOp plan, ArrayRef<GpuLaunchArg> refs,
                      GpuManifest &m) {
  std::map<std::string, size_t> kernelIndex;
  for (auto launch : plan.getBody().getOps<gpu::LaunchFuncOp>()) {
    std::string kernel = launch.getKernelName().str();
    auto [entry, inserted] = kernelIndex.emplace(kernel, m.kernels.size());
    if (inserted) {
      GpuKernelSpec spec;
      spec.name = kernel;
      spec.block = {static_cast<uint32_t>(constantIndex(launch.getBlockSizeX())),
                    1, 1};
      if (Value dyn = launch.getDynamicSharedMemorySize())
        if (auto c = dyn.getDefiningOp<arith::ConstantIntOp>())
          spec.sharedBytes = c.value();
      m.kernels.push_back(spec);
    }
    GpuLaunchSpec spec;
    spec.kernel = entry->second;
    spec.grid = {static_cast<uint32_t>(constantIndex(launch.getGridSizeX())),
                 static_cast<uint32_t>(constantIndex(launch.getGridSizeY())),
                 static_cast<uint32_t>(constantIndex(launch.getGridSizeZ()))};
    spec.stream = static_cast<int>(
        launch->getAttrOfType<IntegerAttr>(attr::kStream).getInt());
    for (Attribute e : launch->getAttrOfType<ArrayAttr>(attr::kWait))
      spec.wait.push_back(cast<IntegerAttr>(e).getInt());
    spec.record = launch->getAttrOfType<IntegerAttr>(attr::kRecord).getInt();
    for (Value operand : launch.getKernelOperands()) {
      if (auto c = operand.getDefiningOp<arith::ConstantIntOp>()) {
        GpuLaunchArg value;
        value.kind = abi::LaunchArgKind::I32;
        value.value = static_cast<int32_t>(c.value());
        spec.args.push_back(value);
        continue;
      }
      spec.args.push_back(refs[cast<BlockArgument>(operand).getArgNumber()]);
    }
    m.launches.push_back(std::move(spec));
  }
}

/// The manifest (docs/GPU-ABI.md) of the launch plan `plan` and its PTX
/// objects, as the runtime's GpuManifest writes it.
StatusOr<std::string> buildManifest(func::FuncOp plan,
                                    const std::map<std::string, std::string> &ptx,
                                    int64_t ptxVersion,
                                    const std::map<std::string, std::string>
                                        &optionText) {
  GpuManifest m;
  m.function = plan.getSymName().str();
  m.compilerVersion = SPIN_COMPILER_SOURCE_HASH;
  m.options.assign(optionText.begin(), optionText.end());
  for (const auto &[chip, text] : ptx)
    m.ptx.emplace_back(chip, chip + ".ptx");
  m.ptxVersion = ptxVersion;
  // Every kernel waits for its predecessors (griddepcontrol.wait) before it
  // touches memory: the runtime may launch them programmatically.
  m.programmaticLaunch = 1;
  m.batch = -1;
  std::vector<GpuLaunchArg> refs = readPlanArguments(plan, m);
  if (int64_t layers =
          plan->getAttrOfType<IntegerAttr>(attr::kLayers).getInt()) {
    GpuStateSpec state;
    state.layers = layers;
    state.capacity = plan->getAttrOfType<IntegerAttr>(attr::kCapacity).getInt();
    state.blockSize =
        plan->getAttrOfType<IntegerAttr>(attr::kBlockSize).getInt();
    state.maxRows = m.rows;
    if (auto page = plan->getAttrOfType<IntegerAttr>(attr::kPageSize))
      state.pageSize = page.getInt();
    m.state = state;
  }
  m.streams = 2;
  m.events = plan->getAttrOfType<IntegerAttr>(attr::kEvents).getInt();
  readPlanLaunches(plan, refs, m);
  return m.toJson();
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
  // The copying warpgroup changes the scoring kernel's block and shared
  // memory, which the other group's plan would not share.
  using CopyWarpgroup = GpuCompileOptions::CopyWarpgroup;
  if (options.copyWarpgroup == CopyWarpgroup::Always && groups.count(false))
    return fail("the copying warpgroup (copy-warpgroup) scores with wgmma: "
                "every target chip must be sm_90a, without --no-wgmma or "
                "m-tiles > 1 (got " +
                llvm::join(groups[false], ", ") + ")");
  GpuArtifact artifact;
  OwningOpRef<ModuleOp> firstPlan;
  std::vector<OwningOpRef<ModuleOp>> otherPlans;
  for (const auto &[wgmma, chips] : groups) {
    OwningOpRef<ModuleOp> plan(module->clone());
    PassManager toGpu(&context);
    SpinConfigureGpuKernelsOptions tuning;
    tuning.tilesPerWarp = options.tilesPerWarp;
    tuning.smCount = options.smCount;
    tuning.mTiles = options.mTiles;
    tuning.wgmma = wgmma;
    tuning.copyWarpgroup = options.copyWarpgroup == CopyWarpgroup::Always;
    tuning.autoCopyWarpgroup = options.copyWarpgroup == CopyWarpgroup::Auto &&
                               !groups.count(false) && !options.fusedFp8Pages;
    toGpu.addPass(createSpinConfigureGpuKernels(tuning));
    ConvertSpinToGPUOptions gpu;
    gpu.capacity = options.capacity;
    gpu.layerArgument = options.layerArgument;
    gpu.pagedState = options.pagedState;
    gpu.fusedFp8Pages = options.fusedFp8Pages;
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
