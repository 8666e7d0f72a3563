% func.func @state_written_between_predict_and_select(
    %s: !spin.state<layer = 0>, %p: tensor<2x1xi32>, %n: tensor<2x1xi32>)
    -> (tensor<2x4xi1>, !spin.state<layer = 0>) {
  %zhat = spin.predict %s positions(%p : tensor<2x1xi32>)
      lengths(%n : tensor<2x1xi32>) : !spin.state<layer = 0>
      -> tensor<2x1x64xf32>
  %bs = spin.pool %zhat lengths(%n : tensor<2x1xi32>)
      {pooling = #spin.pooling<max>, block_size = 16 : i64}
      : tensor<2x1x64xf32> -> tensor<2x1x4xf32>
  %s1 = spin.reset %s : !spin.state<layer = 0>
  %m = spin.select_blocks %s scores(%bs : tensor<2x1x4xf32>)
      lengths(%n : tensor<2x1xi32>)
      {topk = 16 : i64, block_size = 16 : i64, sparsity = 5.0e-01}
      : !spin.state<layer = 0> -> tensor<2x4xi1>
  return %m, %s1 : tensor<2x4xi1>, !spin.state<layer = 0>
}
