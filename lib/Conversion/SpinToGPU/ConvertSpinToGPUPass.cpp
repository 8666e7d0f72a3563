//===- ConvertSpinToGPUPass.cpp - spin ops to kernels + launch plan -------===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
// Walks a sparsified graph function in program order, generates one kernel
// per op (Kernels.h) and rewrites the function into its launch plan: device
// pointer arguments with their roles, and `gpu.launch_func` ops in stream
// order. The plan is what spin-compile serialises into manifest.json.
//
//===----------------------------------------------------------------------===//

#include "NVVM/KernelBuilder.h"
#include "NVVM/KernelConfig.h"
#include "NVVM/Kernels.h"
#include "SharedKernels.h"

#include "spin/Conversion/Passes.h"
#include "spin/Dialect/Spin/IR/SpinAbi.h"
#include "spin/Runtime/Semantics.h"
#include "spin/Dialect/Spin/IR/SpinOps.h"
#include "spin/Dialect/Spin/Transforms/GraphInputs.h"

#include "mlir/Dialect/Async/IR/Async.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/SymbolTable.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/ADT/TypeSwitch.h"

#include <limits>
#include <map>
#include <set>

#define DEBUG_TYPE "convert-spin-to-gpu"

namespace mlir::spin {
#define GEN_PASS_DEF_CONVERTSPINTOGPU
#include "spin/Conversion/Passes.h.inc"
} // namespace mlir::spin

using namespace mlir;
using namespace mlir::spin;
using namespace mlir::spin::gpu_codegen;

namespace {

using abi::ArgRole;
using abi::LaunchArgKind;
using abi::StateField;

/// The runtime's name of an element type (docs/Runtime-ABI.md).
std::optional<StringRef> dtypeName(Type type) {
  if (std::optional<abi::DType> dtype = runtimeDType(type))
    return StringRef(abi::dtypeName(*dtype));
  return std::nullopt;
}

std::optional<ElementFormat> elementFormat(Type type) {
  if (type.isBF16())
    return ElementFormat::bf16;
  if (type.isF16())
    return ElementFormat::f16;
  if (isa<Float8E4M3FNType>(type))
    return ElementFormat::fp8e4m3;
  return std::nullopt;
}

/// The users of `value`, looking through async.execute/yield/await (which
/// spin-schedule-async wraps around state work).
SmallVector<Operation *> usersThroughAsync(Value value) {
  SmallVector<Operation *> users;
  SmallVector<Value> work = {value};
  while (!work.empty()) {
    Value v = work.pop_back_val();
    for (OpOperand &use : v.getUses()) {
      Operation *user = use.getOwner();
      if (auto yield = dyn_cast<async::YieldOp>(user)) {
        auto exec = cast<async::ExecuteOp>(yield->getParentOp());
        work.push_back(exec.getBodyResults()[use.getOperandNumber()]);
      } else if (auto await = dyn_cast<async::AwaitOp>(user)) {
        if (await.getResult())
          work.push_back(await.getResult());
      } else {
        users.push_back(user);
      }
    }
  }
  return users;
}

/// The spin.layer_state a state value comes from (through resets and MTP
/// commits, and the async values spin-schedule-async makes of them).
LayerStateOp layerStateOf(Value state) {
  while (true) {
    if (auto reset = state.getDefiningOp<ResetOp>()) {
      state = reset.getState();
    } else if (auto commit = state.getDefiningOp<CommitOp>()) {
      state = commit.getState();
    } else if (auto await = state.getDefiningOp<async::AwaitOp>()) {
      state = await.getOperand();
    } else if (auto exec = state.getDefiningOp<async::ExecuteOp>()) {
      auto result = cast<OpResult>(state);
      // Result 0 is the token; body results follow.
      auto yield =
          cast<async::YieldOp>(exec.getBodyRegion().front().getTerminator());
      state = yield.getOperand(result.getResultNumber() - 1);
    } else {
      break;
    }
  }
  return state.getDefiningOp<LayerStateOp>();
}

/// A device buffer of the plan: a host argument of the new function.
using Buffer = unsigned;

/// What a block mask value is on the device: the mask bytes plus the
/// ascending list of selected blocks and its length per request.
struct MaskBuffers {
  Buffer mask, blocks, counts;
  /// Per request: nonzero when scoring met a bad page; the update then
  /// leaves the request's state untouched.
  Buffer skip;
  int64_t maxBlocks, blockSize;
  /// With the prediction cache: the next-step prediction to launch after
  /// the EMA update (its kernel, grid and operands).
  std::optional<std::pair<std::string, LaunchShape>> predictNext;
  SmallVector<Buffer> predictOperands;
  /// Where the select kernel triggers early and scoring CTAs prefetch: each
  /// request's slot, previous count and block list, kept by the update
  /// kernel for the next step's scoring kernel to prefetch from (Kernels.h),
  /// and how many of its CTAs do.
  std::optional<Buffer> previous;
  int64_t prefetchCtas = 0;
  /// The selection's row status output, which the scoring kernel also
  /// writes (a row that met a bad block-table entry).
  std::optional<Buffer> status;
};

/// Builds the launch plan of one function.
class PlanBuilder {
public:
  /// `counter` numbers the kernels of the shared kernel module: it runs on
  /// over the functions of a module, so their kernel names never collide.
  PlanBuilder(func::FuncOp func, gpu::GPUModuleOp kernels,
              const ConvertSpinToGPUOptions &options, unsigned &counter,
              SharedKernels &shared)
      : func(func), kernels(kernels), options(options), b(func.getContext()),
        counter(counter), shared(shared) {}

  LogicalResult run();

private:
  void collectCapacities();
  LogicalResult collectPaging();
  LogicalResult collectMtpLayers();
  LogicalResult collectFusedPages();
  LogicalResult bindGraphArguments();
  FailureOr<SmallVector<Buffer>> bindResults(ArrayRef<std::string> names);
  void bindIntermediateTopK();
  LogicalResult checkResultsWritten(ArrayRef<Buffer> outputs,
                                    ArrayRef<std::string> names);

  // Host arguments of the plan, collected before the new function exists.
  struct HostArg {
    Type type;
    NamedAttrList attrs;
  };
  Buffer addArg(Type type, NamedAttrList attrs) {
    args.push_back({type, std::move(attrs)});
    return args.size() - 1;
  }
  Buffer addPointer(ArgRole role, StringRef name, StringRef dtype,
                    ArrayRef<int64_t> shape, int64_t layer = -1) {
    NamedAttrList attrs;
    attrs.append(attr::kRole, b.getStringAttr(abi::argRoleName(role)));
    attrs.append(attr::kName, b.getStringAttr(name));
    attrs.append(attr::kDtype, b.getStringAttr(dtype));
    attrs.append(attr::kShape, b.getI64ArrayAttr(shape));
    if (layer >= 0)
      attrs.append(kLayerAttrName, b.getI64IntegerAttr(layer));
    return addArg(pointer(), attrs);
  }
  /// The state field `field` of `layer`, as the contract lays it out.
  Buffer addStateField(StateField field, int64_t layer) {
    const abi::StateFieldInfo &info = abi::stateFieldInfo(field);
    return addPointer(ArgRole::State, info.name, abi::dtypeName(info.dtype),
                      stateFieldPlanShape(field), layer);
  }
  Buffer addScratch(StringRef name, int64_t bytes) {
    NamedAttrList attrs;
    attrs.append(attr::kRole,
                 b.getStringAttr(abi::launchArgKindName(LaunchArgKind::Scratch)));
    attrs.append(attr::kName, b.getStringAttr(name));
    attrs.append(attr::kBytes, b.getI64IntegerAttr(bytes));
    return addArg(pointer(), attrs);
  }
  Type pointer() { return LLVM::LLVMPointerType::get(b.getContext(), Global); }
  /// The run-time layer plus `layer` (docs/GPU-ABI.md, "The layer at run
  /// time"), an i32 kernel parameter.
  Buffer addLayer(int64_t layer) {
    NamedAttrList attrs;
    attrs.append(attr::kRole,
                 b.getStringAttr(abi::launchArgKindName(LaunchArgKind::Layer)));
    attrs.append(kLayerAttrName, b.getI64IntegerAttr(layer));
    return addArg(b.getI32Type(), attrs);
  }
  /// The next selection's per-row status output (docs/GPU-ABI.md, "Row
  /// status"), named as the runtime binds it.
  Buffer addStatus() {
    NamedAttrList attrs;
    attrs.append(attr::kRole,
                 b.getStringAttr(abi::launchArgKindName(LaunchArgKind::Status)));
    attrs.append(attr::kName, b.getStringAttr(abi::statusOutputName(
                                  statusOutputs++)));
    return addArg(pointer(), attrs);
  }

  /// The plan buffer of a tensor value that lives in device memory.
  FailureOr<Buffer> bufferOf(Operation *user, Value value);
  /// The run-time page count of a key cache (an i32 `dim` argument).
  Buffer pagesOf(Value keys);
  Buffer tensorMapOf(Value tensor);
  /// The copying warpgroup's tensor maps of the keys (and their scales),
  /// after a scoring kernel's other operands.
  template <typename IndexerLike>
  void appendTensorMaps(IndexerLike op, const ScoreKernelSpec &spec,
                        SmallVectorImpl<Buffer> &operands) {
    if (!spec.copyWarpgroup)
      return;
    operands.push_back(tensorMapOf(op.getKeys()));
    if (op.getScales())
      operands.push_back(tensorMapOf(op.getScales()));
  }
  /// The state fields of `layer`, bound on first use.
  std::array<Buffer, 3> stateOf(Operation *user, Value state);
  /// The slot count of `state`'s layer (bound with its fields).
  Buffer slotCountOf(Operation *user, Value state) {
    stateOf(user, state);
    return slotCounts.at(cast<StateType>(state.getType()).getLayer());
  }
  /// The prediction cache of `state`'s layer (pred_at, pred_keys), bound on
  /// first use.
  std::pair<Buffer, Buffer> predictionOf(Value state) {
    int64_t layer = cast<StateType>(state.getType()).getLayer();
    auto it = predictions.find(layer);
    if (it == predictions.end()) {
      Buffer at = addStateField(StateField::PredAt, layer);
      Buffer keys = addStateField(StateField::PredKeys, layer);
      it = predictions.try_emplace(layer, at, keys).first;
    }
    return it->second;
  }
  /// The MTP pending-observation fields of a layer (docs/Runtime-ABI.md).
  struct ObservationFields {
    Buffer rows, pos, len, mask, z;
  };
  /// The observation fields of `state`'s layer, bound on first use (after
  /// its v, d and it, the CPU step function's order).
  ObservationFields observationsOf(Operation *user, Value state);
  /// With the paged state: the kernels' trailing paged-state operands of
  /// `state`'s layer (Kernels.h, PagedState): the state block table,
  /// `valid` when `withValid`, and the page count. None otherwise.
  SmallVector<Buffer> pagedOperands(Value state, bool withValid);

  /// Records one launch: kernel `name`, with arguments (buffers).
  struct Launch {
    std::string kernel;
    LaunchShape shape;
    SmallVector<Buffer> operands;
    /// i32 parameters after the pointers (the manifest's `i32` kind).
    SmallVector<int32_t> constants;
    int64_t stream = 0;
    SmallVector<int64_t> wait;
    int64_t record = -1;
  };
  Launch &launch(StringRef kernel, LaunchShape shape,
                 ArrayRef<Buffer> operands, Operation *op) {
    Launch l{shared.kernelFor(kernel), shape, SmallVector<Buffer>(operands)};
    l.stream = op->getParentOfType<async::ExecuteOp>() &&
                       isa<EmaUpdateOp>(op)
                   ? 1
                   : 0;
    launches.push_back(std::move(l));
    return launches.back();
  }
  std::string kernelName(StringRef what) {
    return ("spin_" + what + "_" + Twine(counter++)).str();
  }

  LogicalResult lower(DenseIndexerOp op);
  LogicalResult lower(TopKOp op);
  LogicalResult lower(FusedSelectOp op);
  SelectKernelSpec selectSpecOf(FusedSelectOp op);
  FailureOr<std::optional<Buffer>> selectSparsityOf(FusedSelectOp op);
  MaskBuffers selectMaskBuffers(const SelectKernelSpec &spec);
  Buffer launchPredict(FusedSelectOp op, SelectKernelSpec &spec,
                       MaskBuffers &mask, SmallVector<Buffer> predictOperands);
  LogicalResult lower(FusedScoreOp op);
  LogicalResult lower(EmaUpdateOp op);
  LogicalResult lower(ResetOp op);
  bool resetFusesIntoPredict(ResetOp op);
  LogicalResult lower(BlockSparsityOp op);
  LogicalResult lower(ObserveOp op);
  LogicalResult lower(CommitOp op);
  /// Folds an MTP step's row 0 with `decay` and buffers its rows for a
  /// later spin.commit (ObserveKernelSpec).
  LogicalResult lowerObservations(Operation *op, Value state, int64_t batch,
                                  int64_t rows, Buffer scores, Buffer positions,
                                  Buffer lengths, const MaskBuffers &mask,
                                  double decay, int64_t stream, int64_t wait);
  /// Rejects MTP state the GPU path does not keep: block-level (A2) and
  /// `last_observed` states.
  LogicalResult checkObservationState(Operation *op, Value state);
  /// What a state op after the scoring (spin.ema_update, spin.observe)
  /// reads, and where it runs: on the side stream after the scores' event
  /// when spin-schedule-async put it in an async.execute.
  struct DeferredInputs {
    Buffer scores, positions, lengths;
    const MaskBuffers *mask;
    int64_t stream, wait;
  };
  FailureOr<DeferredInputs> deferredInputs(Operation *op, Value scores,
                                           Value positions, Value lengths);
  /// Puts `l` on `stream`, after event `wait` (-1: none).
  static void placeOn(Launch &l, int64_t stream, int64_t wait) {
    l.stream = stream;
    if (wait >= 0)
      l.wait.push_back(wait);
  }
  LogicalResult lowerUpdate(Operation *op, Value state, int64_t batch,
                            Buffer scores, Buffer positions, Buffer lengths,
                            const MaskBuffers &mask, double decay,
                            int64_t stream, int64_t wait);
  LogicalResult lowerOne(Operation *op);
  /// The one-launch top-K (Kernels.h) and its candidate buffer.
  LogicalResult launchTopK(Operation *op, TopKKernelSpec spec, Buffer scores,
                  Buffer lengths, std::optional<MaskBuffers> mask, Buffer out);
  /// `to` stands for the same device data as `from` (async values).
  void alias(Value to, Value from) {
    if (auto it = buffers.find(from); it != buffers.end())
      buffers[to] = it->second;
    if (auto it = masks.find(from); it != masks.end())
      masks[to] = it->second;
    if (auto it = scoreEvents.find(from); it != scoreEvents.end())
      scoreEvents[to] = it->second;
  }
  /// Slots of state per request of `layer`: the option, else the reach of
  /// the layer's selections (blocks x block size).
  int64_t capacityOf(int64_t layer) {
    if (options.capacity > 0)
      return options.capacity;
    auto it = capacities.find(layer);
    return it == capacities.end() ? 0 : it->second;
  }
  void emit();

  func::FuncOp func;
  gpu::GPUModuleOp kernels;
  const ConvertSpinToGPUOptions &options;
  OpBuilder b;
  unsigned &counter;

  SmallVector<HostArg> args;
  DenseMap<Value, Buffer> buffers;     // tensors in device memory
  DenseMap<Value, MaskBuffers> masks;  // selections
  DenseMap<Value, Buffer> pageCounts;  // key caches -> dim arguments
  DenseMap<Value, Buffer> tensorMaps;  // keys, scales -> tensor-map arguments
  std::map<int64_t, std::array<Buffer, 3>> states;
  std::map<int64_t, ObservationFields> observations;
  /// Layers that buffer MTP rows (their resets drop the buffer too), and
  /// the rows per step of the graph's MTP layers (the pool's maxRows).
  std::set<int64_t> bufferingLayers;
  int64_t mtpRows = 0;
  std::map<int64_t, int64_t> capacities;
  SharedKernels &shared;
  int64_t stateBlockSize = 0;
  DenseMap<int64_t, std::pair<Buffer, Buffer>> predictions;
  DenseMap<Value, int64_t> scoreEvents; // scores -> the event after them
  std::optional<Buffer> slots, errors;
  /// Per layer: the pool's slot count (an i32 `dim` argument, size 0 of
  /// the layer's `v`), which every kernel that reads `slots` takes.
  std::map<int64_t, Buffer> slotCounts;
  /// The paged state (options.pagedState): the layout, the state block
  /// table input, and per layer `valid` and the page count (size 0 of `v`).
  PagedState paged;
  std::optional<Buffer> stateTable;
  std::map<int64_t, std::pair<Buffer, Buffer>> pagedFields;
  /// With fused fp8 pages (options.fusedFp8Pages): each key cache argument
  /// with its scales argument, which shares its plan argument.
  llvm::MapVector<Value, Value> fusedScalesOf;
  /// Layers whose buffered MTP rows the step commits (spin.commit).
  std::set<int64_t> committedLayers;
  /// Per layer: reset flags that the layer's predict kernel applies
  /// (SelectKernelSpec::fusedReset), set by the spin.reset, consumed by
  /// the spin.fused_select.
  std::map<int64_t, Buffer> fusedResets;
  SmallVector<Launch, 0> launches;
  int64_t events = 0;
  /// Status outputs added so far (addStatus).
  int64_t statusOutputs = 0;
};

FailureOr<Buffer> PlanBuilder::bufferOf(Operation *user, Value value) {
  auto it = buffers.find(value);
  if (it != buffers.end())
    return it->second;
  return user->emitOpError("operand is not available on the GPU path "
                           "(produced by an op convert-spin-to-gpu does not "
                           "lower)"),
         failure();
}

Buffer PlanBuilder::pagesOf(Value keys) {
  auto it = pageCounts.find(keys);
  if (it != pageCounts.end())
    return it->second;
  NamedAttrList attrs;
  attrs.append(attr::kRole,
               b.getStringAttr(abi::launchArgKindName(LaunchArgKind::Dim)));
  // The key cache's plan argument (the fused pages' one for both keys and
  // scales), whose size 0 is its page count either way.
  attrs.append(attr::kArgument, b.getI64IntegerAttr(buffers.lookup(keys)));
  attrs.append(attr::kDim, b.getI64IntegerAttr(0));
  Buffer dim = addArg(b.getI32Type(), attrs);
  pageCounts[keys] = dim;
  return dim;
}

/// The tensor map of a key cache or its scales (`tensor`) in boxes of one
/// 64-slot tile, a 128-byte kernel parameter the runtime encodes at each
/// launch (docs/GPU-ABI.md, "Kernel parameters"); its plan argument's
/// `dim` is the box's rows.
Buffer PlanBuilder::tensorMapOf(Value tensor) {
  auto it = tensorMaps.find(tensor);
  if (it != tensorMaps.end())
    return it->second;
  NamedAttrList attrs;
  attrs.append(attr::kRole, b.getStringAttr(abi::launchArgKindName(
                                LaunchArgKind::TensorMap)));
  attrs.append(attr::kArgument, b.getI64IntegerAttr(buffers.lookup(tensor)));
  attrs.append(attr::kDim, b.getI64IntegerAttr(64));
  Buffer map = addArg(LLVM::LLVMPointerType::get(b.getContext()), attrs);
  tensorMaps[tensor] = map;
  return map;
}

std::array<Buffer, 3> PlanBuilder::stateOf(Operation *user, Value state) {
  int64_t layer = cast<StateType>(state.getType()).getLayer();
  auto it = states.find(layer);
  if (it != states.end())
    return it->second;
  (void)user;
  if (!slots)
    slots = addPointer(ArgRole::Slots, abi::argRoleName(ArgRole::Slots),
                       abi::dtypeName(abi::roleLayout(ArgRole::Slots)->dtype),
                       {-1});
  std::array<Buffer, 3> fields = {addStateField(StateField::V, layer),
                                  addStateField(StateField::D, layer),
                                  addStateField(StateField::It, layer)};
  states[layer] = fields;
  auto sizeZeroOf = [&](Buffer field) {
    NamedAttrList attrs;
    attrs.append(attr::kRole,
                 b.getStringAttr(abi::launchArgKindName(LaunchArgKind::Dim)));
    attrs.append(attr::kArgument, b.getI64IntegerAttr(field));
    attrs.append(attr::kDim, b.getI64IntegerAttr(0));
    return addArg(b.getI32Type(), attrs);
  };
  // Paged, size 0 of `v` is the page count; `it` has a row per slot.
  slotCounts[layer] = sizeZeroOf(paged.enabled() ? fields[2] : fields[0]);
  if (paged.enabled()) {
    Buffer valid = addStateField(StateField::Valid, layer);
    pagedFields[layer] = {valid, sizeZeroOf(fields[0])};
  }
  return fields;
}

SmallVector<Buffer> PlanBuilder::pagedOperands(Value state, bool withValid) {
  if (!paged.enabled())
    return {};
  stateOf(nullptr, state);
  auto [valid, pages] =
      pagedFields.at(cast<StateType>(state.getType()).getLayer());
  SmallVector<Buffer> operands = {*stateTable};
  if (withValid)
    operands.push_back(valid);
  operands.push_back(pages);
  return operands;
}

PlanBuilder::ObservationFields PlanBuilder::observationsOf(Operation *user,
                                                           Value state) {
  int64_t layer = cast<StateType>(state.getType()).getLayer();
  stateOf(user, state);
  auto it = observations.find(layer);
  if (it != observations.end())
    return it->second;
  // Sizes beyond the slot count are the pool's (maxRows, blocks, capacity):
  // the runtime checks them against the manifest's state section.
  ObservationFields fields = {addStateField(StateField::ObsRows, layer),
                              addStateField(StateField::ObsPos, layer),
                              addStateField(StateField::ObsLen, layer),
                              addStateField(StateField::ObsMask, layer),
                              addStateField(StateField::ObsZ, layer)};
  observations[layer] = fields;
  return fields;
}

/// The kernels address a step's scores, B x R rows of `width` entries,
/// with 32-bit offsets (the scoring kernels' output, the top-K's rows, the
/// update's and the observation's reads).
static LogicalResult checkScoreEntries(Operation *op, int64_t batch,
                                       int64_t rows, int64_t width) {
  const int64_t limit = std::numeric_limits<int32_t>::max();
  if (width <= 0 || batch * rows <= limit / width)
    return success();
  return op->emitOpError("GPU path: the step's scores, B x R x slots = ")
         << batch << " x " << rows << " x " << width
         << ", must be at most 2^31 - 1 entries (the kernels' offsets are "
            "32-bit)";
}

/// The scoring kernel's spec for an indexer-like op, or a diagnostic for
/// what the GPU path cannot score.
template <typename IndexerLike>
static FailureOr<ScoreKernelSpec> scoreSpec(IndexerLike op) {
  auto q = cast<RankedTensorType>(op.getQ().getType());
  auto keys = cast<RankedTensorType>(op.getKeys().getType());
  auto table = cast<RankedTensorType>(op.getBlockTable().getType());
  if (!q.hasStaticShape() || !table.hasStaticShape() ||
      keys.isDynamicDim(1) || keys.isDynamicDim(2))
    return op.emitOpError("needs static query, block-table, page and "
                          "head-dim sizes on the GPU path"),
           failure();
  std::optional<ElementFormat> keyFormat = elementFormat(keys.getElementType());
  std::optional<ElementFormat> queryFormat = elementFormat(q.getElementType());
  if (!keyFormat || !queryFormat)
    return op.emitOpError("GPU path: keys must be bf16, f16 or fp8 e4m3 and "
                          "queries bf16, f16 or fp8 e4m3 (got ")
               << keys.getElementType() << " keys, " << q.getElementType()
               << " queries)",
           failure();
  if (*keyFormat == ElementFormat::bf16 && *queryFormat != ElementFormat::bf16)
    return op.emitOpError("GPU path: bf16 keys need bf16 queries"), failure();
  ScoreKernelSpec spec;
  spec.batch = q.getDimSize(0);
  spec.rows = q.getDimSize(1);
  spec.heads = q.getDimSize(2);
  spec.headDim = q.getDimSize(3);
  spec.pageSize = keys.getDimSize(1);
  spec.tablePages = table.getDimSize(1);
  if (failed(checkScoreEntries(op, spec.batch, spec.rows, spec.outWidth())))
    return failure();
  spec.keyFormat = *keyFormat;
  spec.queryFormat = *queryFormat;
  spec.scales = static_cast<bool>(op.getScales());
  auto config = SpinDialect::ScoreConfigAttrHelper(op.getContext()).getAttr(op);
  if (!config)
    return op.emitOpError("GPU path: no #spin.score_config (configured by "
                          "spin-configure-gpu-kernels)"),
           failure();
  spec.warps = config.getWarps();
  spec.mTiles = config.getMTiles();
  spec.tilesPerWarp = config.getTilesPerWarp();
  spec.copyWarpgroup = config.getCopyWarpgroup();
  spec.evictFirst = config.getEvictFirst();
  if (config.getWgmma()) {
    if (spec.heads > 256)
      return op.emitOpError("GPU path: wgmma scoring needs at most 256 heads "
                            "(got H = ")
                 << spec.heads << ")",
             failure();
    spec.wgmma = true;
  }
  int64_t chunk = *keyFormat == ElementFormat::fp8e4m3 ? 64 : 32;
  if (spec.heads % 8 != 0 || spec.headDim % chunk != 0)
    return op.emitOpError("GPU path: heads must be a multiple of 8 and the "
                          "head dim a multiple of ")
               << chunk << " (got H = " << spec.heads
               << ", Dh = " << spec.headDim << ")",
           failure();
  if (spec.copyWarpgroup &&
      !copyWarpgroupApplies(spec.keyFormat == ElementFormat::fp8e4m3,
                            spec.queryFormat == ElementFormat::fp8e4m3,
                            spec.headDim, spec.pageSize,
                            scoreRowsPerCta(spec) * spec.heads))
    return op.emitOpError("GPU path: copy_warpgroup scores fp8 keys with fp8 "
                          "queries, Dh = 128, pages of a multiple of 64 "
                          "slots and at most 256 heads x rows a CTA (got Dh "
                          "= ")
               << spec.headDim << ", pages of " << spec.pageSize << ", "
               << scoreRowsPerCta(spec) << " rows x " << spec.heads
               << " heads, fp8 keys "
               << (spec.keyFormat == ElementFormat::fp8e4m3 ? "yes" : "no")
               << ", fp8 queries "
               << (spec.queryFormat == ElementFormat::fp8e4m3 ? "yes" : "no")
               << ")",
           failure();
  return spec;
}

/// The key layout the copying warpgroup reads (the spec's layout fields
/// set): the compact key cache, which the copy engine reads through a
/// tensor map of [pages, page, 128] bytes, and for sparse scoring blocks of
/// a multiple of 64 slots, so that a 64-slot tile lies in one selected
/// block.
static LogicalResult checkCopyWarpgroupLayout(Operation *op,
                                              const ScoreKernelSpec &spec) {
  if (!spec.copyWarpgroup)
    return success();
  if (spec.sparse && spec.blockSize % 64 != 0)
    return op->emitOpError("GPU path: copy_warpgroup scores blocks of a "
                           "multiple of 64 slots (got block_size = ")
               << spec.blockSize << ")",
           failure();
  if (spec.fusedPages)
    return op->emitOpError("GPU path: copy_warpgroup reads the compact key "
                           "cache (not fused-fp8-pages)"),
           failure();
  return success();
}

/// The plan operands of an indexer's inputs, in the scoring kernel's order
/// up to (excluding) the optional block list.
template <typename IndexerLike>
static FailureOr<SmallVector<Buffer>>
indexerOperands(IndexerLike op,
                function_ref<FailureOr<Buffer>(Value)> bufferOf) {
  SmallVector<Buffer> operands;
  SmallVector<Value> values = {op.getQ(), op.getW(), op.getKeys()};
  if (op.getScales())
    values.push_back(op.getScales());
  values.append({op.getBlockTable(), op.getLengths()});
  for (Value v : values) {
    FailureOr<Buffer> buffer = bufferOf(v);
    if (failed(buffer))
      return failure();
    operands.push_back(*buffer);
  }
  return operands;
}

LogicalResult PlanBuilder::lower(DenseIndexerOp op) {
  FailureOr<ScoreKernelSpec> spec = scoreSpec(op);
  if (failed(spec))
    return failure();
  spec->fusedPages = options.fusedFp8Pages;
  if (failed(checkCopyWarpgroupLayout(op, *spec)))
    return failure();
  spec->name = kernelName("score_dense");
  auto operands = indexerOperands(
      op, [&](Value v) { return bufferOf(op, v); });
  if (failed(operands))
    return failure();
  // Scores the graph returns are written straight into its output, -inf
  // past each row's length included.
  auto returned = buffers.find(op.getScores());
  spec->fillPastLength = returned != buffers.end();
  Buffer out =
      spec->fillPastLength
          ? returned->second
          : addScratch(spec->name + "_scores",
                       spec->batch * spec->rows * spec->outWidth() * 4);
  LaunchShape shape = buildScoreKernel(b, op.getLoc(), kernels, *spec);
  operands->append({out, pagesOf(op.getKeys()), *errors});
  appendTensorMaps(op, *spec, *operands);
  launch(spec->name, shape, *operands, op);
  buffers[op.getScores()] = out;
  return success();
}

LogicalResult PlanBuilder::lower(TopKOp op) {
  if (op.getMask())
    return op.emitOpError("with a mask is not supported on the GPU path "
                          "(fuse it with spin-fuse)");
  auto scores = cast<RankedTensorType>(op.getScores().getType());
  TopKKernelSpec spec;
  spec.name = kernelName("topk");
  spec.batch = scores.getDimSize(0);
  spec.rows = scores.getDimSize(1);
  spec.width = scores.getDimSize(2);
  spec.k = op.getK();
  FailureOr<Buffer> in = bufferOf(op, op.getScores());
  FailureOr<Buffer> lengths = bufferOf(op, op.getLengths());
  FailureOr<Buffer> out = bufferOf(op, op.getIndices());
  if (failed(in) || failed(lengths) || failed(out))
    return failure();
  return launchTopK(op, spec, *in, *lengths, std::nullopt, *out);
}

/// The largest block size of the GPU path: the select kernel pools a block
/// with one warp, 32 slots a step, in code unrolled over the block, so the
/// kernel's size grows with the block (2^31 - 31 slots: gigabytes of IR).
constexpr int64_t kMaxGpuBlockSize = 4096;

/// Rejects the selections the GPU path does not implement: block
/// reductions other than A1, the age-based exploration policies and
/// blocks larger than kMaxGpuBlockSize.
static LogicalResult checkSelectSupported(FusedSelectOp op) {
  if (static_cast<int64_t>(op.getBlockSize()) > kMaxGpuBlockSize)
    return op.emitOpError("GPU path: block_size must be at most ")
           << kMaxGpuBlockSize << " (got " << op.getBlockSize() << ")";
  if (op.getReduction() != Reduction::a1)
    return op.emitOpError("GPU path: only the A1 block reduction is "
                          "supported (got ")
           << stringifyReduction(op.getReduction()) << ")";
  if (op.getExplorePolicy() != ExplorePolicy::random)
    return op.emitOpError("GPU path: only random exploration is supported "
                          "(got explore_policy ")
           << stringifyExplorePolicy(op.getExplorePolicy())
           << "; staleness_score and block_age run on the CPU path)";
  return success();
}

/// The select kernel's spec, from the op's attributes and types (a fresh
/// kernel name; the sparsity report and prediction fields are set later).
SelectKernelSpec PlanBuilder::selectSpecOf(FusedSelectOp op) {
  auto maskType = cast<RankedTensorType>(op.getMask().getType());
  auto lengthsType = cast<RankedTensorType>(op.getLengths().getType());
  SelectKernelSpec spec;
  spec.name = kernelName("select");
  spec.batch = maskType.getDimSize(0);
  spec.rows = lengthsType.getDimSize(1);
  spec.maxBlocks = maskType.getDimSize(1);
  spec.blockSize = op.getBlockSize();
  spec.topk = op.getTopk();
  spec.layer = cast<StateType>(op.getState().getType()).getLayer();
  spec.capacity = capacityOf(spec.layer);
  spec.sparsity = op.getSparsity().convertToDouble();
  spec.explore = op.getExplore().convertToDouble();
  spec.seed = static_cast<uint64_t>(op.getSeed());
  spec.pooling = op.getPooling() ? *op.getPooling() : PoolingKind::max;
  spec.rowZeroOnly = op.getMtpMask() == MtpMask::row0;
  return spec;
}

/// The output of a spin.block_sparsity of the op's mask, if any: the
/// select kernel computes it itself.
FailureOr<std::optional<Buffer>>
PlanBuilder::selectSparsityOf(FusedSelectOp op) {
  std::optional<Buffer> sparsity;
  for (Operation *user : usersThroughAsync(op.getMask()))
    if (auto report = dyn_cast<BlockSparsityOp>(user)) {
      FailureOr<Buffer> out = bufferOf(report, report.getSparsity());
      if (failed(out))
        return failure();
      sparsity = *out;
    }
  return sparsity;
}

/// The selection's scratch buffers (mask bytes, block list, counts, skip
/// flags).
MaskBuffers PlanBuilder::selectMaskBuffers(const SelectKernelSpec &spec) {
  int64_t cells = spec.batch * spec.maxBlocks;
  return MaskBuffers{addScratch(spec.name + "_mask", cells),
                     addScratch(spec.name + "_blocks", cells * 4),
                     addScratch(spec.name + "_counts", spec.batch * 4),
                     addScratch(spec.name + "_skip", spec.batch * 4),
                     spec.maxBlocks,
                     spec.blockSize};
}

/// Launches the predict kernel (block scores by max pooling) before the
/// select kernel, and returns where it leaves the block scores. Single-row
/// steps keep them in the state, where the previous step's update already
/// predicted them (Kernels.h); the mask then carries the next step's
/// predict kernel for the update to launch.
Buffer PlanBuilder::launchPredict(FusedSelectOp op, SelectKernelSpec &spec,
                                  MaskBuffers &mask,
                                  SmallVector<Buffer> predictOperands) {
  spec.precomputed = true;
  Buffer predicted;
  spec.predictionCache = spec.rows == 1;
  if (spec.predictionCache) {
    auto [at, keys] = predictionOf(op.getState());
    predicted = keys;
    predictOperands.push_back(at);
  } else {
    predicted = addScratch(spec.name + "_S",
                           spec.batch * spec.rows * spec.maxBlocks * 4);
  }
  predictOperands.push_back(predicted);
  auto config = SpinDialect::SelectConfigAttrHelper(op.getContext()).getAttr(op);
  // The miss prefetch reads a compact row.
  spec.prefetchOnMiss = spec.predictionCache && config &&
                        config.getPrefetchOnMiss() && !paged.enabled();
  LaunchShape predict = buildPredictKernel(b, op.getLoc(), kernels, spec);
  SmallVector<Buffer> operands = predictOperands;
  if (spec.prefetchOnMiss)
    operands.push_back(addScratch(spec.name + "_hint", spec.batch * 4));
  if (spec.fusedReset) {
    operands.append({fusedResets.at(spec.layer),
                     predictionOf(op.getState()).first});
    if (spec.resetObservations)
      operands.push_back(observationsOf(op, op.getState()).rows);
  }
  operands.push_back(slotCountOf(op, op.getState()));
  SmallVector<Buffer> pagedArgs = pagedOperands(op.getState(), true);
  operands.append(pagedArgs);
  launch(spec.name + "_predict", predict, operands, op);
  if (spec.predictionCache) {
    LaunchShape next = buildPredictKernel(b, op.getLoc(), kernels, spec,
                                          /*next=*/true);
    mask.predictNext.emplace(spec.name + "_predict_next", next);
    mask.predictOperands = predictOperands;
    mask.predictOperands.push_back(slotCountOf(op, op.getState()));
    mask.predictOperands.append(pagedArgs);
  }
  return predicted;
}

/// spin.fused_select: the predict kernel where max pooling allows it, then
/// the select kernel, whose mask buffers later kernels read.
LogicalResult PlanBuilder::lower(FusedSelectOp op) {
  if (failed(checkSelectSupported(op)))
    return failure();
  auto layerState = layerStateOf(op.getState());
  if (!layerState)
    return op.emitOpError("GPU path: the state must come from "
                          "spin.layer_state");
  SelectKernelSpec spec = selectSpecOf(op);
  spec.paged = paged;
  // With several layers, one select kernel serves them all.
  // A kernel shared by several layers, or a step whose layer is a run-time
  // argument, takes the layer of the exploration hash as a parameter.
  spec.layerParameter = capacities.size() > 1 || options.layerArgument;
  FailureOr<std::optional<Buffer>> sparsity = selectSparsityOf(op);
  if (failed(sparsity))
    return failure();
  spec.reportSparsity = sparsity->has_value();
  FailureOr<Buffer> positions = bufferOf(op, op.getPositions());
  FailureOr<Buffer> lengths = bufferOf(op, op.getLengths());
  FailureOr<Buffer> ids = bufferOf(op, layerState.getRequestIds());
  if (failed(positions) || failed(lengths) || failed(ids))
    return failure();
  auto [v, d, it] = stateOf(op, op.getState());
  spec.committed = committedLayers.count(spec.layer) > 0;
  if (fusedResets.count(spec.layer)) {
    assert(canPredictByMax(spec) && "lower(ResetOp) fuses only these");
    spec.fusedReset = true;
    spec.resetObservations = bufferingLayers.count(spec.layer) > 0;
  }
  MaskBuffers mask = selectMaskBuffers(spec);
  std::optional<Buffer> predicted;
  if (canPredictByMax(spec))
    predicted = launchPredict(op, spec, mask,
                              {*positions, *lengths, *slots, v, d, it});
  auto config = SpinDialect::SelectConfigAttrHelper(op.getContext()).getAttr(op);
  if (config) {
    spec.rowCtas = config.getRowCtas();
    if (spec.rowCtas != 1 && spec.rowCtas != spec.rows)
      return op.emitOpError("GPU path: #spin.select_config's row_ctas must "
                            "be 1 or the step's rows (")
             << spec.rows << "), got " << spec.rowCtas;
  }
  if (spec.triggersEarly() && config && config.getScoringPrefetchCtas() > 0) {
    mask.previous = addScratch(spec.name + "_previous",
                               spec.batch * (2 + spec.maxBlocks) * 4);
    mask.prefetchCtas = config.getScoringPrefetchCtas();
  }
  LaunchShape shape = buildSelectKernel(b, op.getLoc(), kernels, spec);
  SmallVector<Buffer> operands = {*positions, *lengths, *ids, *slots,
                                  v,          d,        it,   mask.blocks,
                                  mask.counts, mask.mask, mask.skip};
  if (predicted)
    operands.push_back(*predicted);
  if (spec.predictionCache)
    operands.push_back(predictionOf(op.getState()).first);
  if (*sparsity)
    operands.push_back(**sparsity);
  if (spec.committed)
    operands.push_back(observationsOf(op, op.getState()).rows);
  if (spec.fusedReset) {
    operands.push_back(fusedResets.at(spec.layer));
    fusedResets.erase(spec.layer);
  }
  mask.status = addStatus();
  operands.append({*mask.status, *errors, slotCountOf(op, op.getState())});
  operands.append(pagedOperands(op.getState(), true));
  if (options.layerArgument)
    operands.push_back(addLayer(spec.layer));
  Launch &select = launch(spec.name, shape, operands, op);
  if (spec.layerParameter && !options.layerArgument)
    select.constants.push_back(static_cast<int32_t>(spec.layer));
  masks[op.getMask()] = mask;
  stateBlockSize = spec.blockSize;
  return success();
}

LogicalResult PlanBuilder::lower(BlockSparsityOp op) {
  if (!masks.count(op.getMask()))
    return op.emitOpError("GPU path: the mask must come from "
                          "spin.fused_select");
  return success(); // computed by the select kernel
}

LogicalResult PlanBuilder::lower(FusedScoreOp op) {
  auto maskIt = masks.find(op.getMask());
  if (maskIt == masks.end())
    return op.emitOpError("GPU path: the mask must come from "
                          "spin.fused_select");
  const MaskBuffers &mask = maskIt->second;
  if (mask.blockSize != static_cast<int64_t>(op.getBlockSize()))
    return op.emitOpError("GPU path: block size differs from the selection's");
  FailureOr<ScoreKernelSpec> spec = scoreSpec(op);
  if (failed(spec))
    return failure();
  spec->fusedPages = options.fusedFp8Pages;
  spec->name = kernelName("score_sparse");
  spec->sparse = true;
  spec->blockSize = mask.blockSize;
  if (failed(checkCopyWarpgroupLayout(op, *spec)))
    return failure();
  spec->maxBlocks = mask.maxBlocks;
  // The scoring CTAs start while the select kernel runs: they prefetch
  // their first tiles where the previous step's list put them, which
  // decoding steps mostly select again (docs/benchmarks-kernels.md).
  spec->prefetchPreviousTiles = mask.previous.has_value();
  spec->prefetchCtas = mask.prefetchCtas;
  spec->rowStatus = mask.status.has_value();
  auto operands = indexerOperands(
      op, [&](Value v) { return bufferOf(op, v); });
  if (failed(operands))
    return failure();
  Buffer scores = addScratch(spec->name + "_scores",
                             spec->batch * spec->rows * spec->outWidth() * 4);
  LaunchShape shape = buildScoreKernel(b, op.getLoc(), kernels, *spec);
  operands->append({mask.blocks, mask.counts, mask.skip});
  if (mask.status)
    operands->push_back(*mask.status);
  if (mask.previous)
    operands->append({*mask.previous, *slots});
  operands->append({scores, pagesOf(op.getKeys()), *errors});
  appendTensorMaps(op, *spec, *operands);
  Launch &scoring = launch(spec->name, shape, *operands, op);
  buffers[op.getScores()] = scores;
  masks[op.getScores()] = mask; // the scores' entries follow the list
  for (Operation *user : usersThroughAsync(op.getScores()))
    if (isa<EmaUpdateOp, ObserveOp>(user) &&
        user->getParentOfType<async::ExecuteOp>()) {
      scoring.record = events;
      scoreEvents[op.getScores()] = events++;
      break;
    }

  TopKKernelSpec topk;
  topk.name = kernelName("topk_sparse");
  topk.batch = spec->batch;
  topk.rows = spec->rows;
  topk.width = spec->outWidth();
  topk.k = op.getK();
  topk.sparse = true;
  topk.blockSize = mask.blockSize;
  topk.maxBlocks = mask.maxBlocks;
  FailureOr<Buffer> lengths = bufferOf(op, op.getLengths());
  FailureOr<Buffer> out = bufferOf(op, op.getIndices());
  if (failed(lengths) || failed(out))
    return failure();
  if (failed(launchTopK(op, topk, scores, *lengths, mask, *out)))
    return failure();

  if (op.getState()) {
    FailureOr<Buffer> positions = bufferOf(op, op.getPositions());
    if (failed(positions))
      return failure();
    if (op.getUpdate() == UpdateKind::observe)
      return lowerObservations(op, op.getState(), spec->batch, spec->rows,
                               scores, *positions, *lengths, mask,
                               op.getDecay()->convertToDouble(),
                               /*stream=*/0, /*wait=*/-1);
    return lowerUpdate(op, op.getState(), spec->batch, scores, *positions,
                       *lengths, mask, op.getDecay()->convertToDouble(),
                       /*stream=*/0, /*wait=*/-1);
  }
  return success();
}

LogicalResult PlanBuilder::launchTopK(Operation *op, TopKKernelSpec spec,
                                      Buffer scores, Buffer lengths, std::optional<MaskBuffers> mask,
                             Buffer out) {
  if (failed(checkScoreEntries(op, spec.batch, spec.rows, spec.width)))
    return failure();
  int64_t rows = spec.batch * spec.rows;
  auto config = SpinDialect::TopkConfigAttrHelper(op->getContext()).getAttr(op);
  if (!config)
    return op->emitOpError("GPU path: no #spin.topk_config (configured by "
                           "spin-configure-gpu-kernels)");
  spec.threads = config.getThreads();
  spec.cluster = config.getCluster();
  spec.mergeRanks = config.getMergeRanks();
  if (spec.mergeRanks && topKMergeSlice(spec.k, spec.cluster) > spec.threads)
    return op->emitOpError("GPU path: merge ranks need a slice of at most ")
           << spec.threads << " candidates a CTA (K = " << spec.k
           << ", cluster = " << spec.cluster << ")";
  Buffer candidates =
      addScratch(spec.name + "_candidates", rows * spec.candidates * 8);
  LaunchShape shape = buildTopKKernel(b, op->getLoc(), kernels, spec);
  SmallVector<Buffer> args = {scores, lengths};
  if (mask)
    args.append({mask->blocks, mask->counts});
  args.append({candidates, out});
  launch(spec.name, shape, args, op);
  return success();
}

LogicalResult PlanBuilder::lowerUpdate(Operation *op, Value state,
                                       int64_t batch, Buffer scores,
                                       Buffer positions, Buffer lengths,
                                       const MaskBuffers &mask, double decay,
                                       int64_t stream, int64_t wait) {
  int64_t layer = cast<StateType>(state.getType()).getLayer();
  UpdateKernelSpec spec;
  spec.name = kernelName("update");
  spec.batch = batch;
  spec.capacity = capacityOf(layer);
  spec.blockSize = mask.blockSize;
  spec.maxBlocks = mask.maxBlocks;
  spec.decay = decay;
  spec.ctasPerRequest = std::max<int64_t>(
      1, std::min<int64_t>(32, mask.maxBlocks * mask.blockSize / 4096));
  spec.keepList = mask.previous.has_value();
  spec.paged = paged;
  auto [v, d, it] = stateOf(op, state);
  LaunchShape shape = buildUpdateKernel(b, op->getLoc(), kernels, spec);
  SmallVector<Buffer> operands = {scores,      positions,   lengths,   *slots,
                                  mask.blocks, mask.counts, mask.skip, v,
                                  d,           it};
  if (spec.keepList)
    operands.push_back(*mask.previous);
  operands.append(pagedOperands(state, false));
  Launch &l = launch(spec.name, shape, operands, op);
  placeOn(l, stream, wait);
  // The next step's block scores, from the state just updated, on the
  // same stream: off the next step's critical path.
  if (mask.predictNext) {
    placeOn(launch(mask.predictNext->first, mask.predictNext->second,
                   mask.predictOperands, op),
            stream, /*wait=*/-1);
  }
  return success();
}

FailureOr<PlanBuilder::DeferredInputs>
PlanBuilder::deferredInputs(Operation *op, Value scores, Value positions,
                            Value lengths) {
  auto maskIt = masks.find(scores);
  if (maskIt == masks.end())
    return op->emitOpError("GPU path: the scores must come from "
                           "spin.fused_score");
  FailureOr<Buffer> scoreBuffer = bufferOf(op, scores);
  FailureOr<Buffer> positionBuffer = bufferOf(op, positions);
  FailureOr<Buffer> lengthBuffer = bufferOf(op, lengths);
  if (failed(scoreBuffer) || failed(positionBuffer) || failed(lengthBuffer))
    return failure();
  bool async = static_cast<bool>(op->getParentOfType<async::ExecuteOp>());
  auto event = scoreEvents.find(scores);
  int64_t wait = async && event != scoreEvents.end() ? event->second : -1;
  return DeferredInputs{*scoreBuffer,    *positionBuffer, *lengthBuffer,
                        &maskIt->second, async ? 1 : 0,   wait};
}

LogicalResult PlanBuilder::lower(EmaUpdateOp op) {
  auto lengthsType = cast<RankedTensorType>(op.getLengths().getType());
  if (masks.count(op.getScores()) && lengthsType.getDimSize(1) != 1)
    return op.emitOpError("GPU path: needs one static row per request (MTP "
                          "steps buffer their rows with spin.observe)");
  FailureOr<DeferredInputs> in =
      deferredInputs(op, op.getScores(), op.getPositions(), op.getLengths());
  if (failed(in))
    return failure();
  return lowerUpdate(op, op.getState(), lengthsType.getDimSize(0), in->scores,
                     in->positions, in->lengths, *in->mask,
                     op.getDecay().convertToDouble(), in->stream, in->wait);
}

LogicalResult PlanBuilder::lower(ResetOp op) {
  if (!op.getRequests())
    return op.emitOpError("GPU path: needs the per-request reset flags");
  FailureOr<Buffer> flags = bufferOf(op, op.getRequests());
  if (failed(flags))
    return failure();
  int64_t layer = cast<StateType>(op.getState().getType()).getLayer();
  ResetKernelSpec spec;
  spec.name = kernelName("reset");
  spec.batch = cast<RankedTensorType>(op.getRequests().getType()).getDimSize(0);
  spec.capacity = capacityOf(layer);
  spec.ctasPerRequest =
      std::max<int64_t>(1, std::min<int64_t>(32, spec.capacity / 8192));
  auto [v, d, it] = stateOf(op, op.getState());
  // The prediction cache's record too: a program without a next-step
  // prediction (MTP) would otherwise leave one that a later single-row step
  // of the request could match.
  SmallVector<Buffer> operands = {
      *flags, *slots, v, d, it, predictionOf(op.getState()).first};
  if (bufferingLayers.count(layer)) {
    spec.observations = true;
    operands.push_back(observationsOf(op, op.getState()).rows);
  }
  operands.push_back(slotCountOf(op, op.getState()));
  spec.paged = paged;
  if (paged.enabled())
    operands.push_back(pagedFields.at(layer).first);
  // Where the layer's selection has a predict kernel, that kernel applies
  // the flags (docs/GPU-ABI.md, "Device batches"): one launch fewer a step.
  if (resetFusesIntoPredict(op)) {
    fusedResets[layer] = *flags;
    return success();
  }
  LaunchShape shape = buildResetKernel(b, op.getLoc(), kernels, spec);
  launch(spec.name, shape, operands, op);
  return success();
}

/// Whether the first spin.fused_select of `op`'s layer after it predicts
/// its block scores by max pooling (a predict kernel, which can apply the
/// reset; canPredictByMax).
bool PlanBuilder::resetFusesIntoPredict(ResetOp op) {
  int64_t layer = cast<StateType>(op.getState().getType()).getLayer();
  // The selection may sit in an async.execute (spin-schedule-async).
  FusedSelectOp select;
  for (Operation *next = op->getNextNode(); next && !select;
       next = next->getNextNode())
    next->walk([&](FusedSelectOp candidate) {
      if (!select &&
          cast<StateType>(candidate.getState().getType()).getLayer() == layer)
        select = candidate;
    });
  if (!select)
    return false;
  // (A selection the GPU path does not support fails its own lowering.)
  PoolingKind pooling =
      select.getPooling() ? *select.getPooling() : PoolingKind::max;
  int64_t bs = static_cast<int64_t>(select.getBlockSize());
  return pooling == PoolingKind::max && (bs % 32 == 0 || 32 % bs == 0);
}

//===----------------------------------------------------------------------===//
// MTP: buffered observations and their commit (SPIN_SPEC §4)
//===----------------------------------------------------------------------===//

LogicalResult PlanBuilder::checkObservationState(Operation *op, Value state) {
  auto type = cast<StateType>(state.getType());
  if (type.getLevel() == StateLevel::block)
    return op->emitOpError("GPU path: block-level state (the A2 reduction) "
                           "is not supported; MTP with A2 runs on the CPU "
                           "path");
  if (type.getLastObserved())
    return op->emitOpError("GPU path: states with last_observed (the "
                           "block-age exploration policies) are not "
                           "supported");
  if (capacityOf(type.getLayer()) <= 0)
    return op->emitOpError("GPU path: the capacity of layer ")
           << type.getLayer()
           << " is unknown (no spin.fused_select of it, and no capacity "
              "option)";
  return success();
}

LogicalResult PlanBuilder::lowerObservations(Operation *op, Value state,
                                             int64_t batch, int64_t rows,
                                             Buffer scores, Buffer positions,
                                             Buffer lengths,
                                             const MaskBuffers &mask,
                                             double decay, int64_t stream,
                                             int64_t wait) {
  if (failed(checkObservationState(op, state)))
    return failure();
  if (rows != mtpRows)
    return op->emitOpError("GPU path: MTP steps of one graph must have the "
                           "same number of rows (this one has ")
           << rows << ", another " << mtpRows
           << "): the state pool buffers one row count";
  int64_t layer = cast<StateType>(state.getType()).getLayer();
  ObserveKernelSpec spec;
  spec.name = kernelName("observe");
  spec.batch = batch;
  spec.rows = rows;
  spec.capacity = capacityOf(layer);
  spec.blockSize = mask.blockSize;
  spec.maxBlocks = mask.maxBlocks;
  spec.stateBlocks = llvm::divideCeil(spec.capacity, mask.blockSize);
  spec.ctasPerRequest = std::max<int64_t>(
      1, std::min<int64_t>(32, mask.maxBlocks * mask.blockSize / 4096));
  spec.decay = decay;
  spec.paged = paged;
  ObservationFields obs = observationsOf(op, state);
  // Row 0 folds into V and D; spin.commit advances it.
  [[maybe_unused]] auto [v, d, it] = stateOf(op, state);
  LaunchShape shape = buildObserveKernel(b, op->getLoc(), kernels, spec);
  SmallVector<Buffer> operands = {scores,      positions,   lengths,
                                  *slots,      mask.blocks, mask.counts,
                                  mask.mask,   mask.skip,   obs.rows,
                                  obs.pos,     obs.len,     obs.mask,
                                  obs.z,       v,           d};
  operands.append(pagedOperands(state, false));
  Launch &l = launch(spec.name, shape, operands, op);
  placeOn(l, stream, wait);
  return success();
}

LogicalResult PlanBuilder::lower(ObserveOp op) {
  // With spin-schedule-async the buffering runs on the side stream after
  // the scores' event, next to the top-K (as an EMA update does).
  FailureOr<DeferredInputs> in =
      deferredInputs(op, op.getScores(), op.getPositions(), op.getLengths());
  if (failed(in))
    return failure();
  auto lengthsType = cast<RankedTensorType>(op.getLengths().getType());
  return lowerObservations(op, op.getState(), lengthsType.getDimSize(0),
                           lengthsType.getDimSize(1), in->scores, in->positions,
                           in->lengths, *in->mask,
                           op.getDecay().convertToDouble(), in->stream,
                           in->wait);
}

LogicalResult PlanBuilder::lower(CommitOp op) {
  if (failed(checkObservationState(op, op.getState())))
    return failure();
  FailureOr<Buffer> accepted = bufferOf(op, op.getAccepted());
  if (failed(accepted))
    return failure();
  if (mtpRows <= 0)
    return op.emitOpError("GPU path: a commit needs the graph's MTP step "
                          "(spin.observe or spin.fused_score with "
                          "update = observe) to size the buffer");
  int64_t layer = cast<StateType>(op.getState().getType()).getLayer();
  CommitKernelSpec spec;
  spec.name = kernelName("commit");
  spec.batch = cast<RankedTensorType>(op.getAccepted().getType()).getDimSize(0);
  spec.rows = mtpRows;
  spec.capacity = capacityOf(layer);
  spec.blockSize = op.getBlockSize();
  spec.stateBlocks = llvm::divideCeil(spec.capacity, spec.blockSize);
  spec.decay = op.getDecay().convertToDouble();
  spec.rowZeroOnly = op.getMtpUpdate() == MtpUpdate::row0;
  spec.ctasPerRequest =
      std::max<int64_t>(1, std::min<int64_t>(32, spec.capacity / 4096));
  auto pendingReset = fusedResets.find(layer);
  spec.resetAfter = pendingReset != fusedResets.end();
  spec.paged = paged;
  auto [v, d, it] = stateOf(op, op.getState());
  ObservationFields obs = observationsOf(op, op.getState());
  CommitLaunches shapes = buildCommitKernels(b, op.getLoc(), kernels, spec);
  SmallVector<Buffer> replay = {*accepted, *slots,   v,        d,
                                obs.rows,  obs.pos,  obs.len,  obs.mask,
                                obs.z,     *errors};
  SmallVector<Buffer> finish = {*slots, it, obs.rows, *accepted};
  if (spec.resetAfter) {
    replay.push_back(pendingReset->second);
    finish.push_back(pendingReset->second);
  }
  replay.push_back(slotCountOf(op, op.getState()));
  finish.push_back(slotCountOf(op, op.getState()));
  if (paged.enabled()) {
    // Both check the state pages of the committed rows.
    replay.append(pagedOperands(op.getState(), false));
    finish.append({obs.pos, obs.len});
    finish.append(pagedOperands(op.getState(), false));
  }
  // The replay and the finish run in order on the commit's stream, before
  // the selection that reads the committed state. Under mtp_update = row0
  // the observe kernel folded all there is: the finish alone advances `it`.
  if (shapes.replay)
    launch(spec.name, *shapes.replay, replay, op);
  launch(spec.name + "_finish", shapes.finish, finish, op);
  committedLayers.insert(layer);
  return success();
}

LogicalResult PlanBuilder::lowerOne(Operation *op) {
  return TypeSwitch<Operation *, LogicalResult>(op)
      .Case<DenseIndexerOp, TopKOp, FusedSelectOp, FusedScoreOp, EmaUpdateOp,
            ResetOp, BlockSparsityOp, ObserveOp, CommitOp>(
          [&](auto typed) { return lower(typed); })
      .Case<LayerStateOp, async::YieldOp, func::ReturnOp>(
          [](Operation *) { return success(); })
      .Case<async::AwaitOp>([&](async::AwaitOp await) {
        if (await.getResult())
          alias(await.getResult(), await.getOperand());
        return success();
      })
      .Case<async::ExecuteOp>([&](async::ExecuteOp exec) {
        // The body runs in program order; its results are its yields'.
        for (Operation &inner : exec.getBodyRegion().front())
          if (failed(lowerOne(&inner)))
            return failure();
        auto yield =
            cast<async::YieldOp>(exec.getBodyRegion().front().getTerminator());
        for (auto [result, value] :
             llvm::zip_equal(exec.getBodyResults(), yield.getOperands()))
          alias(result, value);
        return success();
      })
      .Default([](Operation *other) {
        return other->emitOpError("is not supported by convert-spin-to-gpu");
      });
}

} // namespace

namespace {
/// The order of argument groups in the plan (docs/GPU-ABI.md): the graph's
/// own arguments, slots, state fields by layer, results, then what only the
/// runtime binds (scratch, the error record and row status, dimensions).
int64_t groupOf(const NamedAttrList &attrs) {
  std::string role =
      cast<StringAttr>(attrs.get(attr::kRole)).getValue().str();
  if (std::optional<ArgRole> arg = abi::argRoleFromName(role)) {
    switch (*arg) {
    case ArgRole::Slots:
      return 1;
    case ArgRole::State:
      return 2;
    case ArgRole::Output:
      return 3;
    default:
      return 0;
    }
  }
  switch (*abi::launchArgKindFromName(role)) {
  case LaunchArgKind::Scratch:
    return 4;
  case LaunchArgKind::Errors:
  case LaunchArgKind::Status:
    return 5;
  case LaunchArgKind::Dim:
  case LaunchArgKind::Layer:
  case LaunchArgKind::TensorMap:
    return 6;
  default:
    return 0;
  }
}
} // namespace

void PlanBuilder::emit() {
  // Stable order by group; state fields by layer within theirs.
  SmallVector<unsigned> order(args.size());
  for (unsigned i = 0; i < args.size(); ++i)
    order[i] = i;
  auto key = [&](unsigned i) {
    int64_t layer = 0;
    if (auto l = args[i].attrs.get(kLayerAttrName))
      layer = cast<IntegerAttr>(l).getInt();
    return std::make_tuple(groupOf(args[i].attrs), layer, i);
  };
  llvm::stable_sort(order, [&](unsigned x, unsigned y) { return key(x) < key(y); });
  SmallVector<unsigned> position(args.size());
  SmallVector<Type> types;
  SmallVector<DictionaryAttr> attrs;
  for (auto [pos, i] : llvm::enumerate(order)) {
    position[i] = pos;
    types.push_back(args[i].type);
    attrs.push_back(args[i].attrs.getDictionary(b.getContext()));
  }
  // Dimension arguments name their tensor by its original index; remap.
  for (DictionaryAttr &dict : attrs) {
    NamedAttrList list(dict);
    if (auto arg = list.get(attr::kArgument)) {
      list.set(attr::kArgument,
               b.getI64IntegerAttr(position[cast<IntegerAttr>(arg).getInt()]));
      dict = list.getDictionary(b.getContext());
    }
  }

  b.setInsertionPoint(func);
  auto plan = func::FuncOp::create(b, func.getLoc(), func.getSymName(),
                                   b.getFunctionType(types, {}));
  plan.setAllArgAttrs(attrs);
  plan->setAttr(attr::kLaunchPlan, b.getUnitAttr());
  plan->setAttr(attr::kEvents, b.getI64IntegerAttr(events));
  // The state the runtime's pool must be created with.
  int64_t capacity = 0;
  for (auto [layer, c] : capacities)
    capacity = std::max(capacity, capacityOf(layer));
  plan->setAttr(attr::kCapacity, b.getI64IntegerAttr(capacity));
  plan->setAttr(attr::kBlockSize, b.getI64IntegerAttr(stateBlockSize));
  if (paged.enabled())
    plan->setAttr(attr::kPageSize, b.getI64IntegerAttr(paged.page));
  // Layers are indices into the runtime's per-layer state: a graph of layer
  // 2 alone needs a pool of 3 layers.
  int64_t layers = states.empty() ? 0 : states.rbegin()->first + 1;
  plan->setAttr(attr::kLayers, b.getI64IntegerAttr(layers));
  Block *body = plan.addEntryBlock();
  b.setInsertionPointToStart(body);
  Location loc = func.getLoc();
  auto index = [&](int64_t v) -> Value {
    return arith::ConstantIndexOp::create(b, loc, v);
  };
  for (const Launch &l : launches) {
    SmallVector<Value> operands;
    for (Buffer buffer : l.operands)
      operands.push_back(body->getArgument(position[buffer]));
    for (int32_t c : l.constants)
      operands.push_back(arith::ConstantIntOp::create(b, loc, b.getI32Type(), c));
    auto kernel = SymbolRefAttr::get(
        kernels.getSymNameAttr(),
        {SymbolRefAttr::get(b.getContext(), l.kernel)});
    auto op = gpu::LaunchFuncOp::create(
        b, loc, kernel,
        gpu::KernelDim3{index(l.shape.grid[0]), index(l.shape.grid[1]),
                        index(l.shape.grid[2])},
        gpu::KernelDim3{index(l.shape.blockThreads), index(1), index(1)},
        l.shape.sharedBytes
            ? arith::ConstantIntOp::create(b, loc, b.getI32Type(),
                                           l.shape.sharedBytes)
                  .getResult()
            : Value(),
        operands);
    op->setAttr(attr::kStream, b.getI64IntegerAttr(l.stream));
    op->setAttr(attr::kWait, b.getI64ArrayAttr(l.wait));
    op->setAttr(attr::kRecord, b.getI64IntegerAttr(l.record));
  }
  func::ReturnOp::create(b, loc);
  func.erase();
}

/// The state capacity each layer's selections reach (blocks x block size),
/// for `capacityOf`. Taken first: a reset precedes the selection that fixes
/// it.
void PlanBuilder::collectCapacities() {
  func.walk([&](FusedSelectOp op) {
    int64_t layer = cast<StateType>(op.getState().getType()).getLayer();
    capacities[layer] = cast<RankedTensorType>(op.getMask().getType())
                            .getDimSize(1) *
                        static_cast<int64_t>(op.getBlockSize());
  });
}

/// The paged state layout (the `paged-state` option): the key cache's page
/// size and the block table's shape, which every scoring op of the graph
/// shares; the state block table input has that shape. Each layer's
/// capacity is then its selection's reach, the table's.
LogicalResult PlanBuilder::collectPaging() {
  if (!options.pagedState)
    return success();
  if (options.capacity > 0)
    return func.emitOpError("GPU path: paged-state takes the capacity from "
                            "the block table (drop the capacity option)"),
           failure();
  std::optional<std::pair<int64_t, RankedTensorType>> layout;
  WalkResult walk = func.walk([&](FusedScoreOp op) -> WalkResult {
    auto keys = cast<RankedTensorType>(op.getKeys().getType());
    auto table = cast<RankedTensorType>(op.getBlockTable().getType());
    if (keys.isDynamicDim(1) || !table.hasStaticShape())
      return op.emitOpError("GPU path: paged-state needs a static page size "
                            "and block-table shape"),
             WalkResult::interrupt();
    std::pair<int64_t, RankedTensorType> mine = {keys.getDimSize(1), table};
    if (layout && *layout != mine)
      return op.emitOpError("GPU path: paged-state needs one page size and "
                            "block-table shape for every layer"),
             WalkResult::interrupt();
    layout = mine;
    return WalkResult::advance();
  });
  if (walk.wasInterrupted())
    return failure();
  if (!layout)
    return success(); // no state to page
  auto [page, table] = *layout;
  paged = {page, table.getDimSize(1)};
  for (auto [layer, capacity] : capacities)
    if (capacity != page * paged.width)
      return func.emitOpError("GPU path: paged-state needs layer ")
                 << layer << "'s selection to reach the block table ("
                 << page * paged.width << " slots, got " << capacity << ")",
             failure();
  stateTable = addPointer(ArgRole::Input, abi::kStateBlockTableName, "i32",
                          table.getShape());
  return success();
}

/// MTP layers: which buffer rows (observe, an observing fused score, or a
/// commit), and how many rows a step has (the pool's maxRows), which must
/// be static.
LogicalResult PlanBuilder::collectMtpLayers() {
  WalkResult mtp = func.walk([&](Operation *op) -> WalkResult {
    Value state;
    std::optional<int64_t> rows;
    if (auto observe = dyn_cast<ObserveOp>(op)) {
      state = observe.getState();
      rows = observe.getLengths().getType().getDimSize(1);
    } else if (auto score = dyn_cast<FusedScoreOp>(op);
               score && score.getUpdate() == UpdateKind::observe) {
      state = score.getState();
      rows = score.getLengths().getType().getDimSize(1);
    } else if (auto commit = dyn_cast<CommitOp>(op)) {
      state = commit.getState();
    }
    if (!state)
      return WalkResult::advance();
    bufferingLayers.insert(cast<StateType>(state.getType()).getLayer());
    if (rows) {
      if (ShapedType::isDynamic(*rows))
        return op->emitOpError("GPU path: needs a static row count"),
               WalkResult::interrupt();
      mtpRows = std::max(mtpRows, *rows);
    }
    return WalkResult::advance();
  });
  return failure(mtp.wasInterrupted());
}

/// The graph's arguments as plan pointers, with their roles (inputs named
/// by use); each must be a tensor of a runtime element type with a spin
/// role attribute.
LogicalResult PlanBuilder::bindGraphArguments() {
  for (BlockArgument arg : func.getArguments()) {
    unsigned i = arg.getArgNumber();
    auto type = dyn_cast<RankedTensorType>(arg.getType());
    std::optional<StringRef> dtype =
        type ? dtypeName(type.getElementType()) : std::nullopt;
    if (!dtype)
      return func.emitOpError("GPU path: argument ")
             << i << " is not a tensor of a runtime element type";
    SmallVector<int64_t> shape;
    for (int64_t size : type.getShape())
      shape.push_back(ShapedType::isDynamic(size) ? -1 : size);
    std::optional<ArgRole> role;
    StringRef name;
    if (auto input =
            func.getArgAttrOfType<StringAttr>(i, roleAttrName(ArgRole::Input))) {
      role = ArgRole::Input;
      name = input.getValue();
    } else {
      for (ArgRole marker : {ArgRole::Positions, ArgRole::RequestIds,
                             ArgRole::Accepted, ArgRole::Reset})
        if (func.getArgAttr(i, roleAttrName(marker))) {
          role = marker;
          name = abi::argRoleName(marker);
          break;
        }
    }
    if (!role)
      return func.emitOpError("GPU path: argument ")
             << i << " has no spin role attribute (spin.input, ...)";
    if (llvm::is_contained(llvm::make_second_range(fusedScalesOf), arg))
      continue; // bound with its key cache below
    if (fusedScalesOf.count(arg)) {
      // The engine's page: the page's key rows, then their scales.
      std::string fused =
          ("kv_cache" + name.drop_front(StringRef("keys").size())).str();
      buffers[arg] = addPointer(*role, fused, abi::dtypeName(abi::DType::i8),
                                {shape[0], fusedPageBytes(shape[1], shape[2])});
      continue;
    }
    buffers[arg] = addPointer(*role, name, *dtype, shape);
  }
  for (auto [keys, scales] : fusedScalesOf)
    buffers[scales] = buffers.lookup(keys);
  return success();
}

/// The fused fp8 pages (the `fused-fp8-pages` option): every scoring op
/// reads fp8 keys and scales that are graph arguments named `keys...` and
/// `scales...`, each key cache always with the same scales; their plan
/// argument is one i8 `kv_cache...` of [pages, page size x (head dim + 4)].
LogicalResult PlanBuilder::collectFusedPages() {
  if (!options.fusedFp8Pages)
    return success();
  auto inputName = [&](Value v) -> StringRef {
    auto arg = dyn_cast<BlockArgument>(v);
    if (!arg || arg.getOwner() != &func.getBody().front())
      return {};
    auto name = func.getArgAttrOfType<StringAttr>(
        arg.getArgNumber(), roleAttrName(ArgRole::Input));
    return name ? name.getValue() : StringRef();
  };
  auto pair = [&](Operation *op, Value keys, Value scales) -> LogicalResult {
    if (!scales)
      return op->emitOpError("GPU path: fused-fp8-pages needs fp8 keys with "
                             "scales");
    StringRef keysName = inputName(keys), scalesName = inputName(scales);
    if (!keysName.starts_with("keys") || !scalesName.starts_with("scales"))
      return op->emitOpError("GPU path: fused-fp8-pages needs the keys and "
                             "scales to be graph inputs of their own");
    auto type = cast<RankedTensorType>(keys.getType());
    if (type.isDynamicDim(1) || type.isDynamicDim(2) ||
        fusedPageBytes(type.getDimSize(1), type.getDimSize(2)) % 16 != 0)
      return op->emitOpError("GPU path: fused-fp8-pages needs static page "
                             "and head-dim sizes whose page of keys and "
                             "scales is a multiple of 16 bytes (got ")
             << type << ")";
    auto [it, inserted] = fusedScalesOf.try_emplace(keys, scales);
    if (!inserted && it->second != scales)
      return op->emitOpError("GPU path: fused-fp8-pages needs each key cache "
                             "read with one scales tensor");
    for (auto [k, s] : fusedScalesOf)
      if ((k == keys) != (s == scales) || k == scales || s == keys)
        return op->emitOpError("GPU path: fused-fp8-pages needs each scales "
                               "tensor read with one key cache");
    return success();
  };
  WalkResult walk = func.walk([&](Operation *op) -> WalkResult {
    LogicalResult paired = success();
    if (auto dense = dyn_cast<DenseIndexerOp>(op))
      paired = pair(op, dense.getKeys(), dense.getScales());
    else if (auto fused = dyn_cast<FusedScoreOp>(op))
      paired = pair(op, fused.getKeys(), fused.getScales());
    else if (auto sparse = dyn_cast<SparseIndexerOp>(op))
      paired = pair(op, sparse.getKeys(), sparse.getScales());
    return failed(paired) ? WalkResult::interrupt() : WalkResult::advance();
  });
  return failure(walk.wasInterrupted());
}

/// An output pointer per graph result, named `names[i]`; a result that is
/// an argument or another result cannot have its own buffer.
FailureOr<SmallVector<Buffer>>
PlanBuilder::bindResults(ArrayRef<std::string> names) {
  auto ret = cast<func::ReturnOp>(func.getBody().front().getTerminator());
  SmallVector<Buffer> outputs;
  for (auto [i, value] : llvm::enumerate(ret.getOperands())) {
    auto type = cast<RankedTensorType>(value.getType());
    if (buffers.count(value))
      return func.emitOpError("GPU path: result ")
             << i << " is an argument or repeated";
    buffers[value] =
        addPointer(ArgRole::Output, names[i], *dtypeName(type.getElementType()),
                   type.getShape());
    outputs.push_back(buffers[value]);
  }
  return outputs;
}

/// Scratch for intermediate top-K results (not returned): the kernels
/// still write them.
void PlanBuilder::bindIntermediateTopK() {
  func.walk([&](Operation *op) {
    if (!isa<TopKOp, FusedScoreOp>(op))
      return;
    Value indices = op->getResult(0);
    if (!buffers.count(indices)) {
      auto type = cast<RankedTensorType>(indices.getType());
      buffers[indices] = addScratch("unused_topk", type.getNumElements() * 4);
    }
  });
}

/// Every result must be written by a kernel: a result whose value lives
/// elsewhere (a scratch buffer of an intermediate) would reach the caller
/// unwritten.
LogicalResult PlanBuilder::checkResultsWritten(ArrayRef<Buffer> outputs,
                                               ArrayRef<std::string> names) {
  for (auto [i, output] : llvm::enumerate(outputs))
    if (llvm::none_of(launches, [&](const Launch &l) {
          return llvm::is_contained(l.operands, output);
        }))
      return func.emitOpError("GPU path: result ")
             << i << " (\"" << names[i]
             << "\") is not computed by any kernel; a GPU graph may return "
                "top-K indices, block sparsity and a dense indexer's scores";
  return success();
}

/// Replaces `func` by its launch plan: the host arguments (graph inputs,
/// the error buffer, outputs, scratch), then each op's kernels in program
/// order.
LogicalResult PlanBuilder::run() {
  if (!func.getBody().hasOneBlock())
    return func.emitOpError("GPU path: needs a single-block function");
  collectCapacities();
  // The graph's arguments named by use, which the fused pages and the
  // plan's arguments both go by.
  nameGraphInputs(func);
  if (failed(collectMtpLayers()) || failed(collectFusedPages()) ||
      failed(bindGraphArguments()) || failed(collectPaging()))
    return failure();
  errors = addArg(pointer(),
                  NamedAttrList(b.getNamedAttr(
                      attr::kRole, b.getStringAttr(abi::launchArgKindName(
                                       LaunchArgKind::Errors)))));
  std::vector<std::string> names = graphResultNames(func);
  FailureOr<SmallVector<Buffer>> outputs = bindResults(names);
  if (failed(outputs))
    return failure();
  bindIntermediateTopK();
  for (Operation &op : llvm::make_early_inc_range(func.getBody().front()))
    if (failed(lowerOne(&op)))
      return failure();
  if (failed(checkResultsWritten(*outputs, names)))
    return failure();
  emit();
  return success();
}

namespace {
struct ConvertSpinToGPUPass
    : public mlir::spin::impl::ConvertSpinToGPUBase<ConvertSpinToGPUPass> {
  using ConvertSpinToGPUBase::ConvertSpinToGPUBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (capacity < 0) {
      module.emitError("convert-spin-to-gpu: capacity must be >= 0 (0: the "
                       "block table's reach; got ")
          << static_cast<int64_t>(capacity) << ")";
      return signalPassFailure();
    }
    SmallVector<func::FuncOp> graphs;
    module.walk([&](func::FuncOp func) {
      bool hasSpin = false;
      func.walk([&](Operation *op) {
        if (isa<SpinDialect>(op->getDialect()))
          hasSpin = true;
      });
      if (hasSpin)
        graphs.push_back(func);
    });
    if (graphs.empty())
      return;
    OpBuilder b(module.getContext());
    b.setInsertionPointToEnd(module.getBody());
    auto kernels = gpu::GPUModuleOp::create(b, module.getLoc(), "spin_kernels");
    module->setAttr(gpu::GPUDialect::getContainerModuleAttrName(),
                    b.getUnitAttr());
    // Ops that spin-configure-gpu-kernels did not configure get its
    // default configuration.
    if (failed(gpu_codegen::configureKernels(
            module, SpinConfigureGpuKernelsOptions())))
      return signalPassFailure();
    ConvertSpinToGPUOptions opts{capacity, layerArgument, pagedState,
                                 fusedFp8Pages};
    unsigned counter = 0;
    SharedKernels shared(kernels);
    for (func::FuncOp func : graphs) {
      if (SymbolTable::getSymbolUses(func, module) &&
          !SymbolTable::getSymbolUses(func, module)->empty()) {
        func.emitOpError("GPU path: functions with callers are not supported");
        return signalPassFailure();
      }
      PlanBuilder plan(func, kernels, opts, counter, shared);
      if (failed(plan.run()))
        return signalPassFailure();
    }
    shared.eraseUnusedArrays();
  }
};
} // namespace
