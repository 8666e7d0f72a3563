‘Ifunc.func @fused_select_rejects_a0_with_explore(%s: !spin.state<layer = 0>, %p: tensor<2x1xi32>, %n: tensor<2x1xi32>) {
  %m = spin.fused_select %s positions(%p : tensor<2x1xi32>) lengths(%n : tensor<2x1xi32>) {topk = 32 : i64, block_size = 16 : i64, sparsity = 0.5 : f64, explore = 0.1 : f64, reduction = #spin.reduction<a0>} : !spin.state<layer = 0> -> tensor<2x4xi1>
  return
}
