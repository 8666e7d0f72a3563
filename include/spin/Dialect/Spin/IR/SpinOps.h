//===- SpinOps.h - spin operations ---*- C++ -*-===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
//===----------------------------------------------------------------------===//

#ifndef SPIN_DIALECT_SPIN_IR_SPINOPS_H
#define SPIN_DIALECT_SPIN_IR_SPINOPS_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "spin/Dialect/Spin/IR/SpinAttrs.h"
#include "spin/Dialect/Spin/IR/SpinDialect.h"
#include "spin/Dialect/Spin/IR/SpinTypes.h"

#include <cstdint>
#include <limits>

namespace mlir::spin {
/// The runtime-owned memory behind `!spin.state` handles: ops that read or
/// update SPIN state declare effects on it, so that no transformation moves
/// a state read across a state write.
struct StateResource : public SideEffects::Resource::Base<StateResource> {
  StringRef getName() final { return "spin.state"; }
};

/// The largest static size of a spin op's tensors.
inline constexpr int64_t kMaxStaticSize = std::numeric_limits<int32_t>::max();

/// Fails, naming the operand or result, if a static size of `op`'s tensors
/// is larger than kMaxStaticSize.
LogicalResult verifySizesFitInt32(Operation *op);

/// Trait of every spin op: verifySizesFitInt32.
template <typename ConcreteType>
class SizesFitInt32 : public OpTrait::TraitBase<ConcreteType, SizesFitInt32> {
public:
  static LogicalResult verifyTrait(Operation *op) {
    return verifySizesFitInt32(op);
  }
};
} // namespace mlir::spin

#define GET_OP_CLASSES
#include "spin/Dialect/Spin/IR/SpinOps.h.inc"

#endif // SPIN_DIALECT_SPIN_IR_SPINOPS_H
