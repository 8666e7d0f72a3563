//===- SharedKernels.cpp - one kernel per distinct configuration ----------===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
//===----------------------------------------------------------------------===//

#include "SharedKernels.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/SetVector.h"

using namespace mlir;
using namespace mlir::spin;

namespace {

/// An exact encoding of a kernel's IR in which the names of the symbols it
/// refers to (its shared-memory arrays) and its own name are replaced by
/// their order of first use, and locations are left out. Everything else
/// is compared by identity (types and attributes are uniqued), so two
/// kernels have the same encoding only if they are the same kernel.
class KernelEncoder {
public:
  /// Appends the encoding of the symbol definition `op` (the kernel, then
  /// the arrays it refers to), whose own name is left out.
  void encodeDefinition(Operation *op) {
    root = op;
    encode(op);
  }
  std::vector<const void *> take() { return std::move(code); }
  /// The symbols the kernel refers to, first use first.
  ArrayRef<StringAttr> symbols() const { return symbolOrder; }

private:
  void push(const void *p) { code.push_back(p); }
  void pushCount(size_t n) { code.push_back(reinterpret_cast<const void *>(n)); }
  void define(Value v) { ids.try_emplace(v, ids.size()); }

  void encodeAttribute(Attribute attr) {
    if (auto ref = dyn_cast<FlatSymbolRefAttr>(attr)) {
      auto [it, inserted] =
          symbolIds.try_emplace(ref.getAttr(), symbolIds.size());
      if (inserted)
        symbolOrder.push_back(ref.getAttr());
      push(nullptr);
      pushCount(it->second);
      return;
    }
    push(attr.getAsOpaquePointer());
  }

  void encodeAttributes(Operation *op) {
    // Inherent attributes (kept as properties) entry by entry, so that a
    // symbol reference among them is recognised; then discardable ones.
    Attribute inherent = op->getPropertiesAsAttribute();
    auto dict = dyn_cast_or_null<DictionaryAttr>(inherent);
    if (inherent && !dict)
      push(inherent.getAsOpaquePointer());
    SmallVector<NamedAttribute> attrs;
    if (dict)
      llvm::append_range(attrs, dict.getValue());
    llvm::append_range(attrs, op->getRawDictionaryAttrs().getValue());
    pushCount(attrs.size());
    for (NamedAttribute attr : attrs) {
      push(attr.getName().getAsOpaquePointer());
      if (op == root && attr.getName() == SymbolTable::getSymbolAttrName())
        push(nullptr); // the definition's own name
      else
        encodeAttribute(attr.getValue());
    }
  }

  void encode(Operation *op) {
    push(op->getName().getAsOpaquePointer());
    pushCount(op->getNumOperands());
    for (Value operand : op->getOperands()) {
      auto it = ids.find(operand);
      // A value defined outside the kernel (there are none in a kernel,
      // which is isolated from above) is compared by identity.
      if (it == ids.end())
        push(operand.getAsOpaquePointer());
      else
        pushCount(it->second);
    }
    pushCount(op->getNumSuccessors());
    for (Block *successor : op->getSuccessors())
      pushCount(blockIds.try_emplace(successor, blockIds.size()).first->second);
    encodeAttributes(op);
    pushCount(op->getNumRegions());
    for (Region &region : op->getRegions()) {
      pushCount(region.getBlocks().size());
      for (Block &block : region) {
        pushCount(blockIds.try_emplace(&block, blockIds.size()).first->second);
        pushCount(block.getNumArguments());
        for (BlockArgument arg : block.getArguments()) {
          push(arg.getType().getAsOpaquePointer());
          define(arg);
        }
        for (Operation &nested : block)
          encode(&nested);
      }
    }
    pushCount(op->getNumResults());
    for (Value result : op->getResults()) {
      push(result.getType().getAsOpaquePointer());
      define(result);
    }
  }

  Operation *root = nullptr;
  std::vector<const void *> code;
  llvm::DenseMap<Value, size_t> ids;
  llvm::DenseMap<Block *, size_t> blockIds;
  llvm::DenseMap<StringAttr, size_t> symbolIds;
  SmallVector<StringAttr> symbolOrder;
};

/// The names of the module symbols `kernel` refers to.
llvm::SetVector<StringRef> referencedSymbols(gpu::GPUFuncOp kernel) {
  llvm::SetVector<StringRef> names;
  if (std::optional<SymbolTable::UseRange> uses =
          SymbolTable::getSymbolUses(kernel))
    for (const SymbolTable::SymbolUse &use : *uses)
      names.insert(use.getSymbolRef().getLeafReference().getValue());
  return names;
}

} // namespace

std::vector<const void *> SharedKernels::fingerprint(gpu::GPUFuncOp kernel) {
  KernelEncoder encoder;
  encoder.encodeDefinition(kernel);
  // The arrays' declarations (types, sizes, address spaces) are part of the
  // kernel, their names are not. (Arrays refer to no other symbols.)
  for (size_t i = 0; i < encoder.symbols().size(); ++i) {
    StringAttr name = encoder.symbols()[i];
    if (Operation *symbol = SymbolTable::lookupSymbolIn(module, name))
      encoder.encodeDefinition(symbol);
  }
  return encoder.take();
}

void SharedKernels::eraseUnusedArrays() {
  llvm::StringSet<> used;
  for (auto kernel : module.getOps<gpu::GPUFuncOp>())
    for (StringRef name : referencedSymbols(kernel))
      used.insert(name);
  for (auto global : llvm::make_early_inc_range(module.getOps<LLVM::GlobalOp>()))
    if (!used.contains(global.getSymName()))
      global.erase();
}

std::string SharedKernels::kernelFor(StringRef name) {
  auto seen = launched.find(name);
  if (seen != launched.end())
    return seen->second;
  auto kernel = module.lookupSymbol<gpu::GPUFuncOp>(name);
  if (!kernel)
    return name.str();
  auto [entry, inserted] = kept.try_emplace(fingerprint(kernel), name.str());
  std::string target = entry->second;
  if (!inserted)
    kernel.erase(); // its arrays go in eraseUnusedArrays

  launched[name] = target;
  return target;
}
