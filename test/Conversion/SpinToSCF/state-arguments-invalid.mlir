// convert-spin-to-scf refuses what it cannot lower, with a diagnostic.
// RUN: not spin-opt %s --convert-spin-to-scf 2>&1 | FileCheck %s
// RUN: not spin-opt %s --convert-spin-to-scf=state-storage=heap 2>&1 | FileCheck %s --check-prefix=BADOPT
// RUN: spin-opt %s --convert-spin-to-scf="state-storage=globals num-slots=2 capacity=64" | FileCheck %s --check-prefix=GLOBALS

// BADOPT: error: convert-spin-to-scf: option 'state-storage' must be 'arguments' or 'globals', got 'heap'

// A function with callers cannot take new arguments; with globals it keeps
// its signature, so it can.
// CHECK: error: cannot add state-pool arguments to @callee: the function has callers
// GLOBALS-LABEL: func.func @callee
// GLOBALS-SAME:    -> tensor<2x1x64xf32>
// GLOBALS-NOT:     spin.
func.func @callee(%ids: tensor<2xi64>, %p: tensor<2x1xi32>, %n: tensor<2x1xi32>) -> tensor<2x1x64xf32> {
  %s = spin.layer_state %ids : tensor<2xi64> -> !spin.state<layer = 0>
  %z = spin.predict %s positions(%p : tensor<2x1xi32>) lengths(%n : tensor<2x1xi32>)
      : !spin.state<layer = 0> -> tensor<2x1x64xf32>
  return %z : tensor<2x1x64xf32>
}
func.func @caller(%ids: tensor<2xi64>, %p: tensor<2x1xi32>, %n: tensor<2x1xi32>) -> tensor<2x1x64xf32> {
  %z = func.call @callee(%ids, %p, %n) : (tensor<2xi64>, tensor<2x1xi32>, tensor<2x1xi32>) -> tensor<2x1x64xf32>
  return %z : tensor<2x1x64xf32>
}
