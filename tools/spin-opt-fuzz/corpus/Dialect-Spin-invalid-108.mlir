‘Ifunc.func @block_sparsity_rejects_f16_result(%m: tensor<2x4xi1>, %n: tensor<2x1xi32>) {
  %r = spin.block_sparsity %m lengths(%n : tensor<2x1xi32>) {block_size = 16 : i64} : tensor<2x4xi1> -> tensor<2x1xf16>
  return
}
