‘Ifunc.func @predict_rejects_zero_block_size(%s: !spin.state<layer = 0, level = block>, %p: tensor<2x1xi32>, %n: tensor<2x1xi32>) {
  %z = spin.predict %s positions(%p : tensor<2x1xi32>) lengths(%n : tensor<2x1xi32>) {block_size = 0 : i64} : !spin.state<layer = 0, level = block> -> tensor<2x1x4xf32>
  return
}
