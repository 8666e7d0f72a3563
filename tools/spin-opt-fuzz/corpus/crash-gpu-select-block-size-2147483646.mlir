% func.func @select(%p: tensor<2x1xi32> {spin.positions}, %n: tensor<2x1xi32> {spin.input = "lengths"},
                  %ids: tensor<2xi64> {spin.request_ids}) -> (tensor<2x1xf32> {spin.sparsity}) {
  %s = spin.layer_state %ids : tensor<2xi64> -> !spin.state<layer = 0>
  %m = spin.fused_select %s positions(%p : tensor<2x1xi32>) lengths(%n : tensor<2x1xi32>) {block_size = 2147483646 : i64, explore = 2.500000e-01 : f64, pooling = #spin.pooling<max>, seed = 7 : i64, sparsity = 5.000000e-01 : f64, topk = 8 : i64} : !spin.state<layer = 0> -> tensor<2x8xi1>
  %r = spin.block_sparsity %m lengths(%n : tensor<2x1xi32>) {block_size = 16 : i64} : tensor<2x8xi1> -> tensor<2x1xf32>
  return %r : tensor<2x1xf32>
}
