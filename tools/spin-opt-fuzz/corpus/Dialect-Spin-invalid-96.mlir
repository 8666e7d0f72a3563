‘Ifunc.func @select_blocks_rejects_zero_topk(%s: !spin.state<layer = 0>, %sc: tensor<2x1x4xf32>, %n: tensor<2x1xi32>) {
  %m = spin.select_blocks %s scores(%sc : tensor<2x1x4xf32>) lengths(%n : tensor<2x1xi32>) {topk = 0 : i64, block_size = 16 : i64, sparsity = 5.0e-01} : !spin.state<layer = 0> -> tensor<2x4xi1>
  return
}
