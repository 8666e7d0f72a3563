€func.func @predict_rejects_f16_prediction(%s: !spin.state<layer = 0>, %p: tensor<2x1xi32>, %n: tensor<2x1xi32>) {
  %z = spin.predict %s positions(%p : tensor<2x1xi32>) lengths(%n : tensor<2x1xi32>) : !spin.state<layer = 0> -> tensor<2x1x64xf16>
  return
}
