€func.func @two_handles(%ids: tensor<2xi64>, %p: tensor<2x1xi32>, %n: tensor<2x1xi32>)
    -> (tensor<2x1x64xf32>, tensor<2x1x64xf32>) {
  %a = spin.layer_state %ids : tensor<2xi64> -> !spin.state<layer = 0>
  %b = spin.layer_state %ids : tensor<2xi64> -> !spin.state<layer = 0, last_observed = true>
  %za = spin.predict %a positions(%p : tensor<2x1xi32>) lengths(%n : tensor<2x1xi32>)
      : !spin.state<layer = 0> -> tensor<2x1x64xf32>
  %zb = spin.predict %b positions(%p : tensor<2x1xi32>) lengths(%n : tensor<2x1xi32>)
      : !spin.state<layer = 0, last_observed = true> -> tensor<2x1x64xf32>
  return %za, %zb : tensor<2x1x64xf32>, tensor<2x1x64xf32>
}
