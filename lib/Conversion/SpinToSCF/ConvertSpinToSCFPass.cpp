//===- ConvertSpinToSCFPass.cpp - the convert-spin-to-scf pass ------------===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
// Prepares each function (async regions inlined, state buffers added as
// arguments), then runs the conversion patterns.
//
//===----------------------------------------------------------------------===//

#include "spin/Conversion/Passes.h"
#include "spin/Conversion/SpinToSCF/SpinToSCF.h"
#include "spin/Dialect/Spin/IR/SpinAbi.h"
#include "spin/Dialect/Spin/IR/SpinOps.h"

#include "mlir/Dialect/Async/IR/Async.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Transforms/DialectConversion.h"
#include "llvm/ADT/MapVector.h"

namespace mlir::spin {
#define GEN_PASS_DEF_CONVERTSPINTOSCF
#include "spin/Conversion/Passes.h.inc"
} // namespace mlir::spin

using namespace mlir;
using namespace mlir::spin;

/// Runs every async.execute region of `func` in place, in program order:
/// its ops move before it and awaited values become the yielded ones. This
/// is a valid schedule of the dependencies the regions express.
static LogicalResult inlineAsyncRegions(func::FuncOp func) {
  SmallVector<async::ExecuteOp> regions;
  func.walk([&](async::ExecuteOp op) { regions.push_back(op); });
  for (async::ExecuteOp execute : regions) {
    if (!execute.getBodyOperands().empty() || !execute.getDependencies().empty())
      return execute.emitError("the CPU lowering inlines async regions that "
                               "capture their inputs; this one takes operands");
    Block &body = execute.getBodyRegion().front();
    auto yield = cast<async::YieldOp>(body.getTerminator());
    SmallVector<Value> yielded(yield.getOperands());
    yield.erase();
    execute->getBlock()->getOperations().splice(Block::iterator(execute),
                                                body.getOperations());
    for (auto [value, result] : llvm::zip_equal(yielded, execute.getBodyResults()))
      for (Operation *user : llvm::make_early_inc_range(result.getUsers())) {
        auto await = dyn_cast<async::AwaitOp>(user);
        if (!await)
          return user->emitError("the CPU lowering expects async values to be "
                                 "used by async.await only");
        await.getResult().replaceAllUsesWith(value);
        await.erase();
      }
    for (Operation *user : llvm::make_early_inc_range(execute.getToken().getUsers()))
      if (auto await = dyn_cast<async::AwaitOp>(user))
        await.erase();
    if (!execute.getToken().use_empty())
      return execute.emitError("async token has users the CPU lowering cannot "
                               "sequentialize");
    execute.erase();
  }
  return success();
}

namespace {

/// What one function needs from the state pool.
struct LayerUse {
  Value requestIds;
  StateLevel level = StateLevel::slot;
  bool buffersRows = false;
  bool lastObserved = false;
};

/// The layers of one function, by layer number.
using LayerUses = llvm::MapVector<int64_t, LayerUse>;

struct ConvertSpinToSCFPass
    : public mlir::spin::impl::ConvertSpinToSCFBase<ConvertSpinToSCFPass> {
  using Base::Base;

  void runOnOperation() override;

private:
  LogicalResult prepare(func::FuncOp func, StateBufferMap &buffers);
  StateBuffers bindLayer(OpBuilder &b, func::FuncOp func, int64_t layer,
                         const LayerUse &use, Value slots);
  Value globalField(OpBuilder &b, func::FuncOp func, int64_t layer,
                    abi::StateField field, MemRefType type);
  Value slotsFromIds(OpBuilder &b, Location loc, Value requestIds);
};

} // namespace

/// The layers whose state `func` uses, sorted by layer, and what it needs
/// from each: the patterns bind one set of buffers per layer, so every
/// handle of a layer must describe the same buffers and come from a
/// spin.layer_state (which names the request ids).
static LogicalResult collectLayerUses(func::FuncOp func, LayerUses &layers) {
  // The state type of each layer: the first seen, by a spin.layer_state
  // or by any op that takes a handle (one may come from a function
  // argument, with no spin.layer_state of its layer).
  llvm::SmallDenseMap<int64_t, StateType> types;
  Operation *mismatch = nullptr;
  StateType mismatched;
  auto bind = [&](Operation *op, StateType type) {
    auto [it, inserted] = types.try_emplace(type.getLayer(), type);
    if (!inserted && it->second != type && !mismatch) {
      mismatch = op;
      mismatched = type;
    }
  };
  func.walk([&](Operation *op) {
    if (auto layerState = dyn_cast<LayerStateOp>(op)) {
      StateType type = layerState.getState().getType();
      bind(op, type);
      LayerUse &use = layers[type.getLayer()];
      use.requestIds = layerState.getRequestIds();
      use.level = type.getLevel();
      use.lastObserved = type.getLastObserved();
    }
    bool buffers = isa<ObserveOp, CommitOp>(op);
    if (auto score = dyn_cast<FusedScoreOp>(op))
      buffers = score.getUpdate() == UpdateKind::observe;
    for (Value operand : op->getOperands())
      if (auto state = dyn_cast<StateType>(operand.getType())) {
        bind(op, state);
        layers[state.getLayer()].buffersRows |= buffers;
      }
  });
  if (mismatch)
    return mismatch->emitError()
           << "layer " << mismatched.getLayer()
           << " is bound with two different state types in @"
           << func.getSymName();
  for (auto &[layer, use] : layers)
    if (!use.requestIds)
      return func.emitError()
             << "layer " << layer << " has state ops but no spin.layer_state";
  llvm::sort(layers, [](auto &x, auto &y) { return x.first < y.first; });
  return success();
}

/// Appends an argument of `type` with `attrs` to `func` and returns it.
static Value appendArgument(func::FuncOp func, Type type,
                            ArrayRef<NamedAttribute> attrs) {
  unsigned index = func.getNumArguments();
  (void)func.insertArgument(index, type,
                            DictionaryAttr::get(func.getContext(), attrs),
                            func.getLoc());
  return func.getArgument(index);
}

/// Appends the state-pool arguments of docs/Runtime-ABI.md to `func` (or,
/// with globals, binds module buffers) and records each layer's buffers.
LogicalResult ConvertSpinToSCFPass::prepare(func::FuncOp func,
                                            StateBufferMap &buffers) {
  LayerUses layers;
  if (failed(collectLayerUses(func, layers)))
    return failure();
  if (layers.empty())
    return success();
  auto module = func->getParentOfType<ModuleOp>();
  if (stateStorage != "globals" &&
      !SymbolTable::symbolKnownUseEmpty(func, module))
    return func.emitError()
           << "cannot add state-pool arguments to @" << func.getSymName()
           << ": the function has callers";

  OpBuilder b(&getContext());
  b.setInsertionPointToStart(&func.getBody().front());
  Value slots;
  if (stateStorage != "globals")
    slots = appendArgument(
        func, MemRefType::get({ShapedType::kDynamic}, b.getI32Type()),
        {b.getNamedAttr(roleAttrName(abi::ArgRole::Slots), b.getUnitAttr())});
  for (auto &[layer, use] : layers)
    buffers[{func.getOperation(), layer}] =
        bindLayer(b, func, layer, use, slots);
  return success();
}

/// The buffers of `layer` in `func`: state-pool arguments (indexed by the
/// `slots` argument), or module globals indexed by slots computed from the
/// request ids. Row buffers and last-observed ages only where used.
StateBuffers ConvertSpinToSCFPass::bindLayer(OpBuilder &b, func::FuncOp func,
                                             int64_t layer, const LayerUse &use,
                                             Value slots) {
  bool globals = stateStorage == "globals";
  auto field = [&](abi::StateField field) -> Value {
    MemRefType type = stateFieldMemRefType(&getContext(), field);
    if (globals)
      return globalField(b, func, layer, field, type);
    return appendArgument(
        func, type,
        {b.getNamedAttr(roleAttrName(abi::ArgRole::State),
                        b.getStringAttr(abi::stateFieldName(field))),
         b.getNamedAttr(kLayerAttrName, b.getI64IntegerAttr(layer))});
  };
  StateBuffers state;
  state.slots =
      globals ? slotsFromIds(b, func.getLoc(), use.requestIds) : slots;
  state.requestIds = use.requestIds;
  state.layer = layer;
  state.level = use.level;
  state.v = field(abi::StateField::V);
  state.d = field(abi::StateField::D);
  state.it = field(abi::StateField::It);
  if (use.buffersRows) {
    state.obsRows = field(abi::StateField::ObsRows);
    state.obsPos = field(abi::StateField::ObsPos);
    state.obsLen = field(abi::StateField::ObsLen);
    state.obsMask = field(abi::StateField::ObsMask);
    state.obsZ = field(abi::StateField::ObsZ);
  }
  if (use.lastObserved)
    state.lastObserved = field(abi::StateField::LastObserved);
  return state;
}

/// globals: a zero-initialised module buffer for `field` of `layer` (made
/// once per module), viewed with the dynamic `type` the patterns expect.
/// Blocks are sized by the capacity: block sizes are not known here, and
/// NBcap <= C.
Value ConvertSpinToSCFPass::globalField(OpBuilder &b, func::FuncOp func,
                                        int64_t layer, abi::StateField field,
                                        MemRefType type) {
  auto module = func->getParentOfType<ModuleOp>();
  Location loc = func.getLoc();
  const abi::StateSizes globalSizes{numSlots, capacity, maxRows, capacity};
  StringRef name = abi::stateFieldName(field);
  std::vector<int64_t> sizes = abi::stateFieldShape(field, globalSizes);
  SmallVector<int64_t> shape(sizes.begin(), sizes.end());
  auto staticType = MemRefType::get(shape, type.getElementType());
  std::string symbol = ("__spin_state_" + Twine(layer) + "_" + name).str();
  if (!module.lookupSymbol(symbol)) {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(module.getBody());
    auto zero = b.getZeroAttr(type.getElementType());
    auto init = DenseElementsAttr::get(
        RankedTensorType::get(shape, type.getElementType()), zero);
    memref::GlobalOp::create(b, loc, symbol, b.getStringAttr("private"),
                             staticType, init, /*constant=*/false,
                             /*alignment=*/b.getI64IntegerAttr(64));
  }
  Value view = memref::GetGlobalOp::create(b, loc, staticType, symbol);
  return memref::CastOp::create(b, loc, type, view);
}

/// globals: a request's slot is its id (modulo the slot count, so that a
/// bad id cannot address outside the buffers), computed where the ids are.
Value ConvertSpinToSCFPass::slotsFromIds(OpBuilder &b, Location loc,
                                         Value requestIds) {
  OpBuilder::InsertionGuard guard(b);
  if (Operation *def = requestIds.getDefiningOp())
    b.setInsertionPointAfter(def);
  auto idsType = cast<RankedTensorType>(requestIds.getType());
  Value ids = bufferization::ToBufferOp::create(
      b, loc, MemRefType::get(idsType.getShape(), b.getI64Type()), requestIds,
      /*read_only=*/true);
  Value c0 = arith::ConstantIndexOp::create(b, loc, 0);
  Value c1 = arith::ConstantIndexOp::create(b, loc, 1);
  Value count = memref::DimOp::create(b, loc, ids, 0);
  Value slots = memref::AllocOp::create(
      b, loc, MemRefType::get({ShapedType::kDynamic}, b.getI32Type()),
      ValueRange{count});
  Value modulus =
      arith::ConstantIntOp::create(b, loc, b.getI64Type(), numSlots);
  scf::ForOp::create(b, loc, c0, count, c1, ValueRange{},
                     [&](OpBuilder &nb, Location l, Value i, ValueRange) {
                       Value id = memref::LoadOp::create(nb, l, ids, i);
                       Value slot = arith::RemUIOp::create(nb, l, id, modulus);
                       Value narrow = arith::TruncIOp::create(
                           nb, l, nb.getI32Type(), slot);
                       memref::StoreOp::create(nb, l, narrow, slots, i);
                       scf::YieldOp::create(nb, l);
                     });
  return slots;
}

void ConvertSpinToSCFPass::runOnOperation() {
  ModuleOp module = getOperation();
  if (stateStorage != "arguments" && stateStorage != "globals") {
    emitError(module.getLoc())
        << "convert-spin-to-scf: option 'state-storage' must be 'arguments' "
           "or 'globals', got '"
        << stateStorage << "'";
    return signalPassFailure();
  }
  if (stateStorage == "globals" &&
      (numSlots <= 0 || capacity <= 0 || maxRows <= 0)) {
    emitError(module.getLoc()) << "convert-spin-to-scf: 'num-slots', "
                                  "'capacity' and 'max-rows' must be positive";
    return signalPassFailure();
  }
  StateBufferMap buffers;
  for (auto func : llvm::to_vector(module.getOps<func::FuncOp>()))
    if (failed(inlineAsyncRegions(func)) || failed(prepare(func, buffers)))
      return signalPassFailure();

  ConversionTarget target(getContext());
  target.addLegalDialect<arith::ArithDialect, bufferization::BufferizationDialect,
                         math::MathDialect, memref::MemRefDialect,
                         scf::SCFDialect, tensor::TensorDialect>();
  target.addIllegalDialect<SpinDialect>();
  target.addLegalOp<LayerStateOp>();
  target.markUnknownOpDynamicallyLegal([](Operation *) { return true; });

  RewritePatternSet patterns(&getContext());
  populateSpinToSCFConversionPatterns(patterns, buffers);
  if (failed(applyPartialConversion(module, target, std::move(patterns))))
    return signalPassFailure();

  // The state handles now have no users: the buffers replaced them.
  SmallVector<LayerStateOp> handles;
  module.walk([&](LayerStateOp op) { handles.push_back(op); });
  for (LayerStateOp op : handles) {
    if (!op.getState().use_empty()) {
      op.emitError("state handle still used after lowering");
      return signalPassFailure();
    }
    op.erase();
  }
}
