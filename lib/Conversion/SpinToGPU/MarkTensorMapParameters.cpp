//===- MarkTensorMapParameters.cpp - tensor maps by value -----------------===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
//===----------------------------------------------------------------------===//
//
// spin-mark-tensor-map-parameters: a kernel's tensor-map parameters become
// 128-byte by-value parameters in the PTX parameter space.
//
//===----------------------------------------------------------------------===//

#include "NVVM/Kernels.h"

#include "spin/Conversion/Passes.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"

namespace mlir::spin {
#define GEN_PASS_DEF_SPINMARKTENSORMAPPARAMETERS
#include "spin/Conversion/Passes.h.inc"
} // namespace mlir::spin

using namespace mlir;
using namespace mlir::spin;

namespace {
struct MarkTensorMapParameters
    : public mlir::spin::impl::SpinMarkTensorMapParametersBase<
          MarkTensorMapParameters> {
  void runOnOperation() override {
    Builder b(&getContext());
    // A CUtensorMap: 128 bytes, 64-byte aligned.
    Type map = LLVM::LLVMArrayType::get(b.getI8Type(), 128);
    getOperation().walk([&](LLVM::LLVMFuncOp func) {
      auto params = func->getAttrOfType<DenseI32ArrayAttr>(
          gpu_codegen::kTensorMapParametersAttrName);
      if (!params)
        return;
      for (int32_t index : params.asArrayRef()) {
        const auto count = static_cast<int32_t>(func.getNumArguments());
        if (index < 0 || index >= count ||
            !isa<LLVM::LLVMPointerType>(func.getArgument(index).getType())) {
          func.emitOpError("tensor-map parameter ")
              << index << " is not a pointer argument";
          return signalPassFailure();
        }
        func.setArgAttr(index, LLVM::LLVMDialect::getByValAttrName(),
                        TypeAttr::get(map));
        func.setArgAttr(index, LLVM::LLVMDialect::getAlignAttrName(),
                        b.getI64IntegerAttr(64));
        func.setArgAttr(index, NVVM::NVVMDialect::getGridConstantAttrName(),
                        b.getUnitAttr());
      }
      func->removeAttr(gpu_codegen::kTensorMapParametersAttrName);
    });
  }
};
} // namespace
