€func.func @fused_select(%ids: tensor<2xi64>, %p: tensor<2x1xi32>, %n: tensor<2x1xi32>) -> tensor<2x4xi1> {
  %s = spin.layer_state %ids : tensor<2xi64> -> !spin.state<layer = 0>
  %m = spin.fused_select %s positions(%p : tensor<2x1xi32>) lengths(%n : tensor<2x1xi32>)
      {topk = 16 : i64, block_size = 16 : i64, sparsity = 0.5 : f64, pooling = #spin.pooling<max>}
      : !spin.state<layer = 0> -> tensor<2x4xi1>
  return %m : tensor<2x4xi1>
}
