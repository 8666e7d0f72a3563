% func.func @commit_rejects_last_observed_state(
    %lengths: tensor<2x2xi32> {spin.input = "lengths"},
    %positions: tensor<2x2xi32> {spin.positions},
    %ids: tensor<2xi64> {spin.request_ids},
    %accepted: tensor<2xi32> {spin.accepted}) -> tensor<2x8xi1> {
  %s = spin.layer_state %ids : tensor<2xi64> -> !spin.state<layer = 0, last_observed = true>
  %c = spin.commit %s accepted(%accepted : tensor<2xi32>)
      {block_size = 16 : i64, decay = 5.0e-01}
      : !spin.state<layer = 0, last_observed = true>
  %m = spin.fused_select %c positions(%positions : tensor<2x2xi32>)
      lengths(%lengths : tensor<2x2xi32>)
      {block_size = 16 : i64, sparsity = 5.0e-01, topk = 8 : i64,
       pooling = #spin.pooling<max>}
      : !spin.state<layer = 0, last_observed = true> -> tensor<2x8xi1>
  return %m : tensor<2x8xi1>
}
