‘Ifunc.func @pool_rejects_batch_mismatch(%z: tensor<2x1x64xf32>, %n: tensor<2x1xi32>) {
  %p = spin.pool %z lengths(%n : tensor<2x1xi32>) {pooling = #spin.pooling<max>, block_size = 16 : i64} : tensor<2x1x64xf32> -> tensor<1x1x4xf32>
  return
}
