‘Ifunc.func @state_rejects_negative_layer(%ids: tensor<2xi64>) {
  %s = spin.layer_state %ids : tensor<2xi64> -> !spin.state<layer = -1>
  return
}
