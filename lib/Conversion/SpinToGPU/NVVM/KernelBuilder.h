//===- KernelBuilder.h - thread-level code for generated kernels -*- C++ -*-===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
// The GPU lowering writes each kernel as thread-level code: arith for the
// arithmetic, scf for control flow, the LLVM dialect for global and shared
// memory (explicit address spaces and alignments, so that 16-byte vector
// loads stay 16-byte loads) and NVVM for special registers, warp shuffles,
// barriers and tensor-core MMAs. This builder keeps that code short; the
// CTA-wide building blocks (scans, reductions, radix select, bitonic sort)
// that several kernels share live in KernelLibrary.h on top of it.
//
//===----------------------------------------------------------------------===//

#ifndef SPIN_LIB_CONVERSION_SPINTOGPU_KERNELBUILDER_H
#define SPIN_LIB_CONVERSION_SPINTOGPU_KERNELBUILDER_H

#include "spin/Conversion/Utils/CodeBuilder.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Builders.h"

#include <string>

namespace mlir::spin::gpu_codegen {

/// LLVM address spaces of the NVPTX target.
enum AddressSpace : unsigned {
  Generic = 0,
  Global = 1,
  Shared = 3,
  SharedCluster = 7, ///< another CTA's shared memory in the cluster
};

/// Builds the body of one `gpu.func` kernel at an insertion point; nested
/// regions (loops, ifs) move the insertion point in and restore it on exit.
/// The arithmetic, control flow and SPIN rules are CodeBuilder's, shared
/// with the CPU lowering; this adds what only kernels use.
class KernelBuilder : public CodeBuilder {
public:
  KernelBuilder(OpBuilder &b, Location loc, gpu::GPUModuleOp module)
      : CodeBuilder(b, loc), module(module) {}

  //===--- types ---------------------------------------------------------===//
  Type vecT(Type element, int64_t n) { return VectorType::get({n}, element); }
  Type ptrT(unsigned space) {
    return LLVM::LLVMPointerType::get(b.getContext(), space);
  }

  //===--- constants -----------------------------------------------------===//
  Value f32Bits(uint32_t bits); ///< an f32 with exactly these bits
  /// A vector constant of `vectorType` with every element `element` (an
  /// integer or float attribute of the element type).
  Value splat(Type vectorType, Attribute element);

  //===--- special registers ---------------------------------------------===//
  Value threadIdX();
  Value blockIdX();
  Value blockIdY();
  Value laneId() { return andI(threadIdX(), i32(31)); }
  Value warpId() { return shrU(threadIdX(), i32(5)); }
  /// The warp index through a shuffle from lane 0: ptxas then knows it is
  /// the same in every lane and keeps what derives from it on the uniform
  /// datapath instead of every thread's integer pipes. Every lane of the
  /// warp must be active where it is built.
  Value uniformWarpId() { return shflIdx(warpId(), i32(0)); }

  //===--- bits and conversions -------------------------------------------===//
  Value bitcast(Value v, Type type);
  /// Element `i` (a constant) of an LLVM-compatible vector value.
  Value extract(Value vec, int64_t i);
  /// A vector of `type` whose elements are `elements`, in order.
  Value vectorOf(Type type, ArrayRef<Value> elements);
  Value absF(Value v);
  Value truncF16(Value v);
  Value zext(Value v, Type type);
  Value sitofp(Value v);
  /// A u32 key whose unsigned order is the f32 order (-0 < +0; NaN after
  /// +inf). Callers exclude NaN themselves.
  Value orderedKey(Value f);

  //===--- memory ---------------------------------------------------------===//
  /// `base + index * sizeof(element)` (index i32 or i64, sign-extended).
  Value gep(Value base, Type element, Value index);
  Value load(Type type, Value ptr, unsigned align, bool invariant = false);
  void store(Value value, Value ptr, unsigned align);
  /// Loads `ptr[index]` of an element type.
  Value loadAt(Type type, Value base, Value index, bool invariant = false);
  void storeAt(Value value, Value base, Value index);
  /// Volatile `ptr[index]` (ld/st.volatile: morally strong, so threads of
  /// different CTAs may race on the cell and read one of the values).
  Value loadVolatileAt(Type type, Value base, Value index);
  void storeVolatileAt(Value value, Value base, Value index);
  /// A shared-memory array of `count` elements, unique by `name` within the
  /// kernel module, as a pointer in address space 3. Kernels that ask for
  /// the same name share one declaration, so every request for a name must
  /// give the same element type and count (a fatal error otherwise).
  Value sharedArray(StringRef name, Type element, int64_t count);
  /// The kernel's dynamic shared memory (its launch's shared bytes, after
  /// the static arrays), as a pointer in address space 3; one declaration
  /// per module, aligned to 16 bytes.
  Value dynamicShared();
  Value atomicAdd(Value ptr, Value v);
  Value atomicMax(Value ptr, Value v); ///< signed i32
  Value atomicCAS(Value ptr, Value expected, Value desired);

  //===--- synchronisation and warps ---------------------------------------===//
  void barrier();
  /// Orders the shared-memory accesses of the lanes of a warp (all 32
  /// lanes, `bar.warp.sync`): lanes of one warp are not in lockstep.
  void syncWarp();
  /// `fence.acq_rel.gpu`: orders this thread's memory operations before and
  /// after it for every thread of the device.
  void fenceDevice();
  /// `barrier.cluster.arrive.aligned` + `barrier.cluster.wait.aligned`
  /// (release, then acquire, at cluster scope): every thread of the cluster's
  /// CTAs must call it; afterwards each sees the others' earlier writes to
  /// shared and global memory.
  void clusterSync();
  /// `prefetch.global.L2` of the line holding `ptr` (a global pointer).
  void prefetchL2(Value ptr);
  /// The address (space 7, `shared::cluster`) of the shared-memory location
  /// `shared` (address space 3) in the CTA of cluster rank `rank` (`mapa`).
  Value clusterPeer(Value shared, Value rank);
  /// `shfl.sync.bfly` / `.idx` over the full warp for i32 or f32 values.
  Value shflXor(Value v, int64_t laneMask);
  Value shflIdx(Value v, Value lane);
  Value shflUp(Value v, int64_t delta);
  /// `vote.sync.ballot` over the full warp.
  Value ballot(Value pred);
  /// Count of trailing zeros of an i32.
  Value cttz(Value v);
  /// Number of set bits of an i32.
  Value popc(Value v);

  //===--- tensor cores ----------------------------------------------------===//
  /// One `mma.sync.m16n8k16.row.col.f32.{bf16,f16}` step: `a` four i32
  /// registers (pairs), `b` two, `acc` four f32; returns the new four.
  SmallVector<Value, 4> mma16816(bool bf16, ArrayRef<Value> a, ArrayRef<Value> bv,
                                 ArrayRef<Value> acc);

private:
  gpu::GPUModuleOp module;
};

/// What every kernel class shares while it builds one kernel from `Spec`:
/// the builder and location, the kernel module, the spec and the
/// thread-level builder its phases write with.
template <typename Spec> class KernelPhases {
protected:
  KernelPhases(OpBuilder &b, Location loc, gpu::GPUModuleOp module,
               const Spec &spec)
      : b(b), loc(loc), module(module), spec(spec), kb(b, loc, module) {}

  OpBuilder &b;
  Location loc;
  gpu::GPUModuleOp module;
  const Spec &spec;
  KernelBuilder kb;
};

/// Creates an empty kernel `name` in `module` with the given parameter types
/// and a fixed block size; callers build its body before the terminator.
gpu::GPUFuncOp createKernel(OpBuilder &b, Location loc, gpu::GPUModuleOp module,
                            StringRef name, TypeRange params,
                            int64_t blockThreads);

/// `createKernel`, then moves `b`'s insertion point into the new kernel's
/// body (before its terminator); callers keep an InsertionGuard around it.
gpu::GPUFuncOp beginKernel(OpBuilder &b, Location loc, gpu::GPUModuleOp module,
                           StringRef name, TypeRange params,
                           int64_t blockThreads);

/// Moves `b`'s insertion point before `func`'s `griddepcontrol.wait`. Work
/// built there overlaps the end of the kernel before it in the stream when
/// the runtime launches this one programmatically (docs/GPU-ABI.md, "Launch
/// order"), so it may read only what that kernel does not write: the step's
/// inputs, and what kernels before that one wrote (they completed before
/// that kernel passed its own wait and let this one start), unless that
/// kernel triggers before its wait (triggerDependentsBeforeWait): then only
/// the step's inputs. Callers keep an InsertionGuard around it.
void setInsertionBeforeGridWait(OpBuilder &b, gpu::GPUFuncOp func);

/// Moves `func`'s `griddepcontrol.launch_dependents` above its wait: the
/// next kernel's CTAs may be scheduled once this kernel's have started,
/// while the kernels this one waits for still run. Sound only where the
/// next kernel reads before its own wait nothing but the step's inputs.
void triggerDependentsBeforeWait(gpu::GPUFuncOp func);

/// Makes `func`'s `griddepcontrol.wait` conditional: threads with `skip`
/// (an i1 defined before the wait, the same in every thread of a CTA) do
/// not wait for the kernel before. Sound only where that kernel writes
/// nothing the CTA reads or writes when `skip` holds. Leaves `b`'s
/// insertion point before the now conditional wait.
void skipGridWaitIf(OpBuilder &b, gpu::GPUFuncOp func, Value skip);

} // namespace mlir::spin::gpu_codegen

#endif // SPIN_LIB_CONVERSION_SPINTOGPU_KERNELBUILDER_H
