€func.func @topk_rejects_block_size_without_mask(%z: tensor<2x1x64xf32>, %n: tensor<2x1xi32>) {
  %t = spin.topk %z lengths(%n : tensor<2x1xi32>) {k = 16 : i64, block_size = 16 : i64} : tensor<2x1x64xf32> -> tensor<2x1x16xi32>
  return
}
