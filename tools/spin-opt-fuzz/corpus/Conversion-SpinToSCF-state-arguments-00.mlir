€func.func @two_layers(%ids: tensor<2xi64>, %p: tensor<2x1xi32>, %n: tensor<2x1xi32>,
                      %p4: tensor<2x4xi32>, %n4: tensor<2x4xi32>) -> tensor<2x4xf32> {
  %s4 = spin.layer_state %ids : tensor<2xi64> -> !spin.state<layer = 4>
  %s1 = spin.layer_state %ids : tensor<2xi64> -> !spin.state<layer = 1>
  %z1 = spin.predict %s1 positions(%p : tensor<2x1xi32>) lengths(%n : tensor<2x1xi32>)
      : !spin.state<layer = 1> -> tensor<2x1x64xf32>
  %a = arith.constant dense<0> : tensor<2xi32>
  %c = spin.commit %s4 accepted(%a : tensor<2xi32>) {block_size = 16 : i64, decay = 0.5 : f64}
      : !spin.state<layer = 4>
  %z4 = spin.predict %c positions(%p4 : tensor<2x4xi32>) lengths(%n4 : tensor<2x4xi32>)
      : !spin.state<layer = 4> -> tensor<2x4x64xf32>
  %S = spin.pool %z4 lengths(%n4 : tensor<2x4xi32>) {pooling = #spin.pooling<mean>, block_size = 16 : i64}
      : tensor<2x4x64xf32> -> tensor<2x4x4xf32>
  %r = tensor.extract_slice %S[0, 0, 0] [2, 1, 4] [1, 1, 1] : tensor<2x4x4xf32> to tensor<2x4xf32>
  return %r : tensor<2x4xf32>
}
func.func @block_age_layer(%ids: tensor<2xi64>, %p: tensor<2x1xi32>, %n: tensor<2x1xi32>,
                           %fresh: tensor<2xi1>, %z: tensor<2x1x64xf32>) -> tensor<2x4xi1> {
  %s0 = spin.layer_state %ids : tensor<2xi64> -> !spin.state<layer = 2, last_observed = true>
  %s = spin.reset %s0 requests(%fresh : tensor<2xi1>) : !spin.state<layer = 2, last_observed = true>
  %zh = spin.predict %s positions(%p : tensor<2x1xi32>) lengths(%n : tensor<2x1xi32>)
      : !spin.state<layer = 2, last_observed = true> -> tensor<2x1x64xf32>
  %S = spin.pool %zh lengths(%n : tensor<2x1xi32>) {pooling = #spin.pooling<max>, block_size = 16 : i64}
      : tensor<2x1x64xf32> -> tensor<2x1x4xf32>
  %m = spin.select_blocks %s scores(%S : tensor<2x1x4xf32>) lengths(%n : tensor<2x1xi32>)
      {topk = 16 : i64, block_size = 16 : i64, sparsity = 0.5, explore = 0.5,
       explore_policy = #spin.explore_policy<block_age>}
      : !spin.state<layer = 2, last_observed = true> -> tensor<2x4xi1>
  %s1 = spin.ema_update %s scores(%z : tensor<2x1x64xf32>) positions(%p : tensor<2x1xi32>)
      lengths(%n : tensor<2x1xi32>) mask(%m : tensor<2x4xi1>) {decay = 0.5 : f64, block_size = 16 : i64}
      : !spin.state<layer = 2, last_observed = true>
  return %m : tensor<2x4xi1>
}
