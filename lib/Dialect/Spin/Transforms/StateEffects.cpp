//===- StateEffects.cpp - which ops touch a layer's SPIN state ------------===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
//===----------------------------------------------------------------------===//

#include "spin/Dialect/Spin/Transforms/StateEffects.h"
#include "spin/Dialect/Spin/IR/SpinOps.h"

#include "mlir/Dialect/Async/IR/Async.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

using namespace mlir;
using namespace mlir::spin;

bool mlir::spin::mayAccessState(Operation *op, Type stateType, bool writesOnly) {
  if (isa<async::AwaitOp>(op))
    return false;
  auto iface = dyn_cast<MemoryEffectOpInterface>(op);
  bool recursive = op->hasTrait<OpTrait::HasRecursiveMemoryEffects>();
  if (!iface && !recursive)
    return true;
  if (iface) {
    SmallVector<MemoryEffects::EffectInstance> effects;
    iface.getEffects(effects);
    for (const MemoryEffects::EffectInstance &effect : effects) {
      if (!isa<StateResource>(effect.getResource()))
        continue;
      if (writesOnly && !isa<MemoryEffects::Write>(effect.getEffect()))
        continue;
      if (Value value = effect.getValue();
          value && value.getType() != stateType)
        continue;
      return true;
    }
  }
  if (recursive)
    for (Region &region : op->getRegions())
      for (Block &block : region)
        for (Operation &nested : block)
          if (mayAccessState(&nested, stateType, writesOnly))
            return true;
  return false;
}
