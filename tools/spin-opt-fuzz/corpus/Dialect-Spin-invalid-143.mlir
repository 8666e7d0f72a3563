€func.func @fused_select_rejects_sparsity_above_one(%s: !spin.state<layer = 0>, %p: tensor<2x1xi32>, %n: tensor<2x1xi32>) {
  %m = spin.fused_select %s positions(%p : tensor<2x1xi32>) lengths(%n : tensor<2x1xi32>) {topk = 32 : i64, block_size = 16 : i64, sparsity = 1.5 : f64, pooling = #spin.pooling<max>} : !spin.state<layer = 0> -> tensor<2x4xi1>
  return
}
