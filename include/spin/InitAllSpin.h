//===- InitAllSpin.h - register spin and what it uses ------------*- C++ -*-===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
// The one place that says which dialects and passes the project's tools
// load: spin-opt, the compile driver and the Python module all call these.
//
//===----------------------------------------------------------------------===//

#ifndef SPIN_INITALLSPIN_H
#define SPIN_INITALLSPIN_H

namespace mlir {
class DialectRegistry;

namespace spin {

/// Adds the spin dialect and the upstream dialects that spin programs and
/// their lowerings use (func, arith, math, tensor, linalg, scf, memref).
void registerSpinDialects(DialectRegistry &registry);

/// Registers spin's passes and pipelines and the upstream passes the
/// project's pipelines use, for textual pass pipelines (spin-opt).
void registerSpinPasses();

} // namespace spin
} // namespace mlir

#endif // SPIN_INITALLSPIN_H
