€func.func @rejects_age_exploration_policy(%q: tensor<2x1x16x64xbf16> {spin.input = "q"},
    %w: tensor<2x1x16xf32> {spin.input = "w"},
    %keys: tensor<?x16x64xbf16> {spin.input = "keys"},
    %table: tensor<2x8xi32> {spin.input = "block_table"},
    %lengths: tensor<2x1xi32> {spin.input = "lengths"},
    %positions: tensor<2x1xi32> {spin.positions},
    %ids: tensor<2xi64> {spin.request_ids}) -> tensor<2x1x8xi32> {
  %s = spin.layer_state %ids : tensor<2xi64> -> !spin.state<layer = 0, last_observed = true>
  %m = spin.fused_select %s positions(%positions : tensor<2x1xi32>)
      lengths(%lengths : tensor<2x1xi32>)
      {block_size = 16 : i64, explore = 2.5e-01, pooling = #spin.pooling<max>,
       sparsity = 5.0e-01, topk = 8 : i64,
       explore_policy = #spin.explore_policy<block_age>}
      : !spin.state<layer = 0, last_observed = true> -> tensor<2x8xi1>
  %t, %z, %s1 = spin.fused_score q(%q : tensor<2x1x16x64xbf16>)
      w(%w : tensor<2x1x16xf32>) keys(%keys : tensor<?x16x64xbf16>)
      block_table(%table : tensor<2x8xi32>) lengths(%lengths : tensor<2x1xi32>)
      mask(%m : tensor<2x8xi1>)
      state(%s : !spin.state<layer = 0, last_observed = true>)
      positions(%positions : tensor<2x1xi32>)
      {block_size = 16 : i64, decay = 5.0e-01, k = 8 : i64,
       update = #spin.update<ema>}
      -> tensor<2x1x8xi32>, tensor<2x1x128xf32>, !spin.state<layer = 0, last_observed = true>
  return %t : tensor<2x1x8xi32>
}
