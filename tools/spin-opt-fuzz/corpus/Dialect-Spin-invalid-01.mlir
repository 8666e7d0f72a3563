% func.func @state_rejects_unknown_level(%ids: tensor<2xi64>) {
  %s = spin.layer_state %ids : tensor<2xi64> -> !spin.state<layer = 0, level = warp>
  return
}
