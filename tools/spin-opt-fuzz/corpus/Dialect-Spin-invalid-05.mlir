% func.func @layer_state_rejects_i32_request_ids(%ids: tensor<2xi32>) {
  %s = spin.layer_state %ids : tensor<2xi32> -> !spin.state<layer = 0>
  return
}
