//===- InitAllSpin.cpp - register spin and what it uses -------------------===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
//===----------------------------------------------------------------------===//

#include "spin/InitAllSpin.h"

#include "spin/Dialect/Spin/IR/SpinDialect.h"
#include "spin/Dialect/Spin/Transforms/Passes.h"
#include "spin/Dialect/Spin/Transforms/Pipelines.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Async/IR/Async.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Transforms/Passes.h"

void mlir::spin::registerSpinDialects(DialectRegistry &registry) {
  registry.insert<spin::SpinDialect, arith::ArithDialect, async::AsyncDialect, func::FuncDialect,
                  linalg::LinalgDialect, math::MathDialect,
                  memref::MemRefDialect, scf::SCFDialect,
                  tensor::TensorDialect>();
}

void mlir::spin::registerSpinPasses() {
  registerSpinTransformsPasses();
  registerSpinPipelines();
  // Upstream cleanups the spin pipelines run between stages.
  registerCanonicalizerPass();
  registerCSEPass();
  registerSymbolDCEPass();
}
