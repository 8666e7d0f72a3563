‘Ifunc.func @fused_select_rejects_pooling_with_a2(%s: !spin.state<layer = 0, level = block>, %p: tensor<2x1xi32>, %n: tensor<2x1xi32>) {
  %m = spin.fused_select %s positions(%p : tensor<2x1xi32>) lengths(%n : tensor<2x1xi32>) {topk = 32 : i64, block_size = 16 : i64, sparsity = 0.5 : f64, reduction = #spin.reduction<a2>, pooling = #spin.pooling<mean>} : !spin.state<layer = 0, level = block> -> tensor<2x4xi1>
  return
}
