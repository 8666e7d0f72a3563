% func.func @pool_rejects_missing_pooling(%z: tensor<2x1x64xf32>, %n: tensor<2x1xi32>) {
  %p = spin.pool %z lengths(%n : tensor<2x1xi32>) {block_size = 16 : i64} : tensor<2x1x64xf32> -> tensor<2x1x4xf32>
  return
}
