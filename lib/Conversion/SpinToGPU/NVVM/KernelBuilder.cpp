//===- KernelBuilder.cpp - thread-level code for generated kernels --------===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
//===----------------------------------------------------------------------===//

#include "KernelBuilder.h"

using namespace mlir;
using namespace mlir::spin::gpu_codegen;
using arith::CmpFPredicate;
using arith::CmpIPredicate;

//===----------------------------------------------------------------------===//
// Constants and special registers
//===----------------------------------------------------------------------===//

Value KernelBuilder::f32Bits(uint32_t bits) {
  return bitcast(i32(static_cast<int32_t>(bits)), f32T());
}
Value KernelBuilder::splat(Type vectorType, Attribute element) {
  return arith::ConstantOp::create(
      b, loc, DenseElementsAttr::get(cast<ShapedType>(vectorType), element));
}

Value KernelBuilder::threadIdX() {
  return NVVM::ThreadIdXOp::create(b, loc, i32T());
}
Value KernelBuilder::blockIdX() {
  return NVVM::BlockIdXOp::create(b, loc, i32T());
}
Value KernelBuilder::blockIdY() {
  return NVVM::BlockIdYOp::create(b, loc, i32T());
}

//===----------------------------------------------------------------------===//
// Arithmetic
//===----------------------------------------------------------------------===//

Value KernelBuilder::bitcast(Value v, Type type) {
  if (v.getType() == type)
    return v;
  if (isa<VectorType>(type) != isa<VectorType>(v.getType()))
    return LLVM::BitcastOp::create(b, loc, type, v);
  return arith::BitcastOp::create(b, loc, type, v);
}
Value KernelBuilder::extract(Value vec, int64_t i) {
  return LLVM::ExtractElementOp::create(b, loc, vec, i32(i));
}
Value KernelBuilder::vectorOf(Type type, ArrayRef<Value> elements) {
  Value vec = LLVM::UndefOp::create(b, loc, type);
  for (auto [i, element] : llvm::enumerate(elements))
    vec = LLVM::InsertElementOp::create(b, loc, vec, element, i32(i));
  return vec;
}
Value KernelBuilder::absF(Value v) {
  // Clearing the sign bit (math.absf would become a libdevice call).
  return bitcast(andI(bitcast(v, i32T()), i32(0x7fffffff)), f32T());
}
Value KernelBuilder::truncF16(Value v) {
  return arith::TruncFOp::create(b, loc, b.getF16Type(), v);
}
Value KernelBuilder::zext(Value v, Type type) {
  return arith::ExtUIOp::create(b, loc, type, v);
}
Value KernelBuilder::sitofp(Value v) {
  return arith::SIToFPOp::create(b, loc, f32T(), v);
}

Value KernelBuilder::orderedKey(Value f) {
  // Positive floats: flip the sign bit; negative: flip every bit.
  Value bits = bitcast(f, i32T());
  Value negative = cmp(CmpIPredicate::slt, bits, i32(0));
  return select(negative, xorI(bits, i32(-1)),
                xorI(bits, i32(static_cast<int32_t>(0x80000000u))));
}

//===----------------------------------------------------------------------===//
// Memory
//===----------------------------------------------------------------------===//

Value KernelBuilder::gep(Value base, Type element, Value index) {
  return LLVM::GEPOp::create(b, loc, base.getType(), element, base,
                             ValueRange{index});
}
Value KernelBuilder::load(Type type, Value ptr, unsigned align,
                          bool invariant) {
  return LLVM::LoadOp::create(b, loc, type, ptr, align, /*isVolatile=*/false,
                              /*isNonTemporal=*/false, invariant);
}
void KernelBuilder::store(Value value, Value ptr, unsigned align) {
  LLVM::StoreOp::create(b, loc, value, ptr, align);
}
static unsigned naturalAlign(Type type) {
  if (auto vec = dyn_cast<VectorType>(type))
    return naturalAlign(vec.getElementType()) * vec.getNumElements();
  return std::max(1u, type.getIntOrFloatBitWidth() / 8);
}
Value KernelBuilder::loadAt(Type type, Value base, Value index,
                            bool invariant) {
  return load(type, gep(base, type, index), naturalAlign(type), invariant);
}
void KernelBuilder::storeAt(Value value, Value base, Value index) {
  store(value, gep(base, value.getType(), index),
        naturalAlign(value.getType()));
}
Value KernelBuilder::loadVolatileAt(Type type, Value base, Value index) {
  return LLVM::LoadOp::create(b, loc, type, gep(base, type, index),
                              naturalAlign(type), /*isVolatile=*/true);
}
void KernelBuilder::storeVolatileAt(Value value, Value base, Value index) {
  LLVM::StoreOp::create(b, loc, value, gep(base, value.getType(), index),
                        naturalAlign(value.getType()), /*isVolatile=*/true);
}

Value KernelBuilder::sharedArray(StringRef name, Type element, int64_t count) {
  auto arrayType = LLVM::LLVMArrayType::get(element, count);
  if (auto existing = module.lookupSymbol<LLVM::GlobalOp>(name)) {
    // Kernels of one module share their arrays by name: one size each.
    if (existing.getGlobalType() != arrayType)
      llvm::report_fatal_error(llvm::Twine("shared array ") + name +
                               " declared with two sizes");
  } else {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(module.getBody());
    LLVM::GlobalOp::create(b, loc, arrayType, /*isConstant=*/false,
                           LLVM::Linkage::Internal, name, Attribute(),
                           /*alignment=*/16, /*addrSpace=*/Shared);
  }
  return LLVM::AddressOfOp::create(b, loc, ptrT(Shared), name);
}

Value KernelBuilder::dynamicShared() {
  constexpr StringLiteral name = "spin_dynamic_shared";
  if (!module.lookupSymbol<LLVM::GlobalOp>(name)) {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(module.getBody());
    LLVM::GlobalOp::create(b, loc, LLVM::LLVMArrayType::get(i8T(), 0),
                           /*isConstant=*/false, LLVM::Linkage::External, name,
                           Attribute(), /*alignment=*/16, /*addrSpace=*/Shared);
  }
  return LLVM::AddressOfOp::create(b, loc, ptrT(Shared), name);
}

Value KernelBuilder::atomicAdd(Value ptr, Value v) {
  return LLVM::AtomicRMWOp::create(b, loc, LLVM::AtomicBinOp::add, ptr, v,
                                   LLVM::AtomicOrdering::monotonic);
}
Value KernelBuilder::atomicMax(Value ptr, Value v) {
  return LLVM::AtomicRMWOp::create(b, loc, LLVM::AtomicBinOp::max, ptr, v,
                                   LLVM::AtomicOrdering::monotonic);
}
Value KernelBuilder::atomicCAS(Value ptr, Value expected, Value desired) {
  auto pair = LLVM::AtomicCmpXchgOp::create(
      b, loc, ptr, expected, desired, LLVM::AtomicOrdering::monotonic,
      LLVM::AtomicOrdering::monotonic);
  return LLVM::ExtractValueOp::create(b, loc, pair, ArrayRef<int64_t>{0});
}

//===----------------------------------------------------------------------===//
// Synchronisation, warps and tensor cores
//===----------------------------------------------------------------------===//

void KernelBuilder::barrier() { gpu::BarrierOp::create(b, loc); }
void KernelBuilder::syncWarp() { NVVM::SyncWarpOp::create(b, loc, i32(-1)); }
void KernelBuilder::fenceDevice() {
  LLVM::InlineAsmOp::create(b, loc, TypeRange{}, ValueRange{},
                            "fence.acq_rel.gpu;", "~{memory}",
                            /*has_side_effects=*/true, /*is_align_stack=*/false,
                            LLVM::tailcallkind::TailCallKind::None,
                            LLVM::AsmDialectAttr(), ArrayAttr());
}

void KernelBuilder::prefetchL2(Value ptr) {
  LLVM::InlineAsmOp::create(b, loc, TypeRange{}, ValueRange{ptr},
                            "prefetch.global.L2 [$0];", "l",
                            /*has_side_effects=*/true, /*is_align_stack=*/false,
                            LLVM::tailcallkind::TailCallKind::None,
                            LLVM::AsmDialectAttr(), ArrayAttr());
}

void KernelBuilder::clusterSync() {
  NVVM::ClusterArriveOp::create(b, loc, b.getUnitAttr());
  NVVM::ClusterWaitOp::create(b, loc, b.getUnitAttr());
}
Value KernelBuilder::clusterPeer(Value shared, Value rank) {
  return NVVM::MapaOp::create(b, loc, ptrT(SharedCluster), shared, rank);
}

Value KernelBuilder::shflXor(Value v, int64_t laneMask) {
  return NVVM::ShflOp::create(b, loc, v.getType(), i32(-1), v, i32(laneMask),
                              i32(31), NVVM::ShflKind::bfly, UnitAttr());
}
Value KernelBuilder::shflIdx(Value v, Value lane) {
  return NVVM::ShflOp::create(b, loc, v.getType(), i32(-1), v, lane, i32(31),
                              NVVM::ShflKind::idx, UnitAttr());
}

Value KernelBuilder::shflUp(Value v, int64_t delta) {
  return NVVM::ShflOp::create(b, loc, v.getType(), i32(-1), v, i32(delta),
                              i32(0), NVVM::ShflKind::up, UnitAttr());
}
Value KernelBuilder::ballot(Value pred) {
  return NVVM::VoteSyncOp::create(b, loc, i32T(), i32(-1), pred,
                                  NVVM::VoteSyncKind::ballot);
}
Value KernelBuilder::popc(Value v) {
  return LLVM::CtPopOp::create(b, loc, i32T(), v);
}
Value KernelBuilder::cttz(Value v) {
  return LLVM::CountTrailingZerosOp::create(b, loc, i32T(), v, b.getBoolAttr(false));
}
SmallVector<Value, 4> KernelBuilder::mma16816(bool bf16, ArrayRef<Value> a,
                                              ArrayRef<Value> bv,
                                              ArrayRef<Value> acc) {
  SmallVector<Value> aOps(a), bOps(bv);
  if (!bf16) {
    // f16 operands are f16x2 vectors; bf16 ones are plain i32 registers.
    Type pair = VectorType::get({2}, b.getF16Type());
    for (Value &v : aOps)
      v = bitcast(v, pair);
    for (Value &v : bOps)
      v = bitcast(v, pair);
  }
  Type f = f32T();
  auto resultType =
      LLVM::LLVMStructType::getLiteral(b.getContext(), {f, f, f, f});
  NVVM::MMATypes type = bf16 ? NVVM::MMATypes::bf16 : NVVM::MMATypes::f16;
  auto op = NVVM::MmaOp::create(
      b, loc, resultType, aOps, bOps, acc, ArrayRef<int64_t>{16, 8, 16},
      std::nullopt, std::nullopt, std::array<NVVM::MMATypes, 2>{type, type},
      std::array<NVVM::MMALayout, 2>{NVVM::MMALayout::row,
                                     NVVM::MMALayout::col});
  SmallVector<Value, 4> out;
  for (int64_t i = 0; i < 4; ++i)
    out.push_back(LLVM::ExtractValueOp::create(b, loc, op, ArrayRef<int64_t>{i}));
  return out;
}

//===----------------------------------------------------------------------===//
// Control flow
//===----------------------------------------------------------------------===//

/// The programmatic-launch wait every kernel begins with (createKernel),
/// and the trigger that follows it.
static constexpr StringLiteral kGridWait = "griddepcontrol.wait;";
static constexpr StringLiteral kLaunchDependents =
    "griddepcontrol.launch_dependents;";

gpu::GPUFuncOp mlir::spin::gpu_codegen::createKernel(OpBuilder &b, Location loc,
                                                     gpu::GPUModuleOp module,
                                                     StringRef name,
                                                     TypeRange params,
                                                     int64_t blockThreads) {
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToEnd(module.getBody());
  auto func = gpu::GPUFuncOp::create(b, loc, name,
                                     b.getFunctionType(params, {}));
  func->setAttr(gpu::GPUDialect::getKernelFuncAttrName(), b.getUnitAttr());
  func.setKnownBlockSizeAttr(
      b.getDenseI32ArrayAttr({static_cast<int32_t>(blockThreads), 1, 1}));
  b.setInsertionPointToStart(&func.getBody().front());
  // Programmatic dependent launch (docs/GPU-ABI.md, "Launch order"): the
  // runtime may start a kernel while the kernel before it in the stream
  // still runs. Every thread first waits until the grids it depends on have
  // completed and their memory is visible, so no kernel reads or writes
  // global memory before its predecessors are done; it then lets the next
  // kernel's CTAs be scheduled, which only fills SM space this grid leaves
  // free. Without a programmatic launch both are no-ops. Both are inline
  // assembly that clobbers memory: the NVVM intrinsics access no memory as
  // far as LLVM knows, so loads could move across them (a load of what the
  // kernel before writes above the wait, or a load placed before the wait
  // below it).
  for (StringRef text : {StringRef(kGridWait), StringRef(kLaunchDependents)})
    LLVM::InlineAsmOp::create(b, loc, TypeRange{}, ValueRange{}, text,
                              "~{memory}", /*has_side_effects=*/true,
                              /*is_align_stack=*/false,
                              LLVM::tailcallkind::TailCallKind::None,
                              LLVM::AsmDialectAttr(), ArrayAttr());
  gpu::ReturnOp::create(b, loc);
  return func;
}

gpu::GPUFuncOp mlir::spin::gpu_codegen::beginKernel(OpBuilder &b, Location loc,
                                                    gpu::GPUModuleOp module,
                                                    StringRef name,
                                                    TypeRange params,
                                                    int64_t blockThreads) {
  gpu::GPUFuncOp func =
      createKernel(b, loc, module, name, params, blockThreads);
  b.setInsertionPoint(func.getBody().front().getTerminator());
  return func;
}

static LLVM::InlineAsmOp gridWaitOf(gpu::GPUFuncOp func) {
  for (auto op : func.getBody().front().getOps<LLVM::InlineAsmOp>())
    if (op.getAsmString() == kGridWait)
      return op;
  llvm_unreachable("every kernel starts with griddepcontrol.wait");
}

void mlir::spin::gpu_codegen::setInsertionBeforeGridWait(OpBuilder &b,
                                                         gpu::GPUFuncOp func) {
  b.setInsertionPoint(gridWaitOf(func));
}

void mlir::spin::gpu_codegen::triggerDependentsBeforeWait(gpu::GPUFuncOp func) {
  LLVM::InlineAsmOp wait = gridWaitOf(func);
  for (auto op : func.getBody().front().getOps<LLVM::InlineAsmOp>())
    if (op.getAsmString() == kLaunchDependents) {
      op->moveBefore(wait);
      return;
    }
  llvm_unreachable("every kernel starts with griddepcontrol.launch_dependents");
}

void mlir::spin::gpu_codegen::skipGridWaitIf(OpBuilder &b, gpu::GPUFuncOp func,
                                             Value skip) {
  LLVM::InlineAsmOp wait = gridWaitOf(func);
  b.setInsertionPoint(wait);
  Location loc = wait.getLoc();
  Value waitNeeded = arith::XOrIOp::create(
      b, loc, skip, arith::ConstantOp::create(b, loc, b.getBoolAttr(true)));
  auto branch = scf::IfOp::create(b, loc, waitNeeded, /*withElse=*/false);
  wait->moveBefore(branch.thenBlock()->getTerminator());
  b.setInsertionPoint(branch);
}
