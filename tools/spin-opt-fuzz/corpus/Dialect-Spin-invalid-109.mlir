% func.func @block_sparsity_rejects_zero_block_size(%m: tensor<2x4xi1>, %n: tensor<2x1xi32>) {
  %r = spin.block_sparsity %m lengths(%n : tensor<2x1xi32>) {block_size = 0 : i64} : tensor<2x4xi1> -> tensor<2x1xf32>
  return
}
