//===- spin-opt.cpp - the spin optimizer driver ---------------------------===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
// mlir-opt for spin: parses, verifies, transforms and prints IR with the spin
// dialect and the upstream dialects and passes the project uses (registered
// once, in spin/InitAllSpin.h).
//
//===----------------------------------------------------------------------===//

#include "spin/InitAllSpin.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  mlir::spin::registerSpinDialects(registry);
  mlir::spin::registerSpinPasses();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "spin optimizer driver\n", registry));
}
