// The CPU lowering binds one set of state buffers per layer and function,
// from the layer's spin.layer_state. A handle from anywhere else (here a
// function argument) is refused with a diagnostic, as is one of another
// state type than the layer's, and a state op outside every function
// fails to legalize.
// RUN: not spin-opt %s --split-input-file --convert-spin-to-scf 2>&1 | FileCheck %s

// CHECK: error: layer 0 has state ops but no spin.layer_state
func.func @argument_handle(%s: !spin.state<layer = 0>, %p: tensor<2x1xi32>, %n: tensor<2x1xi32>) -> tensor<2x4xi1> {
  %m = spin.fused_select %s positions(%p : tensor<2x1xi32>) lengths(%n : tensor<2x1xi32>)
      {topk = 2 : i64, block_size = 4 : i64, sparsity = 0.0 : f64, pooling = #spin.pooling<max>}
      : !spin.state<layer = 0> -> tensor<2x4xi1>
  return %m : tensor<2x4xi1>
}

// -----

// CHECK: error: layer 0 is bound with two different state types in @argument_of_another_type
func.func @argument_of_another_type(%ids: tensor<2xi64>, %s: !spin.state<layer = 0, level = block>,
                                    %p: tensor<2x1xi32>, %n: tensor<2x1xi32>) -> (tensor<2x1x64xf32>, tensor<2x1x64xf32>) {
  %a = spin.layer_state %ids : tensor<2xi64> -> !spin.state<layer = 0>
  %za = spin.predict %a positions(%p : tensor<2x1xi32>) lengths(%n : tensor<2x1xi32>)
      : !spin.state<layer = 0> -> tensor<2x1x64xf32>
  %zb = spin.predict %s positions(%p : tensor<2x1xi32>) lengths(%n : tensor<2x1xi32>) {block_size = 16 : i64}
      : !spin.state<layer = 0, level = block> -> tensor<2x1x64xf32>
  return %za, %zb : tensor<2x1x64xf32>, tensor<2x1x64xf32>
}

// -----

// CHECK: error: failed to legalize operation 'spin.predict'
%ids = arith.constant dense<0> : tensor<2xi64>
%p = arith.constant dense<0> : tensor<2x1xi32>
%s = spin.layer_state %ids : tensor<2xi64> -> !spin.state<layer = 0>
%z = spin.predict %s positions(%p : tensor<2x1xi32>) lengths(%p : tensor<2x1xi32>)
    : !spin.state<layer = 0> -> tensor<2x1x64xf32>
