% func.func @pool_rejects_row_count_mismatch(%z: tensor<2x4x64xf32>, %n: tensor<2x1xi32>) {
  %p = spin.pool %z lengths(%n : tensor<2x1xi32>) {pooling = #spin.pooling<mean>, block_size = 16 : i64} : tensor<2x4x64xf32> -> tensor<2x4x4xf32>
  return
}
