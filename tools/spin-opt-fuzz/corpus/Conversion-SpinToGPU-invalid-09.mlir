€func.func @observe_rejects_mtp_layers_with_different_rows(
    %q2: tensor<2x2x16x64xbf16> {spin.input = "q"},
    %w2: tensor<2x2x16xf32> {spin.input = "w"},
    %keys: tensor<?x16x64xbf16> {spin.input = "keys"},
    %table: tensor<2x8xi32> {spin.input = "block_table"},
    %n2: tensor<2x2xi32> {spin.input = "lengths"},
    %p2: tensor<2x2xi32> {spin.positions},
    %n3: tensor<2x3xi32> {spin.input = "lengths_1"},
    %p3: tensor<2x3xi32> {spin.input = "positions_1"},
    %ids: tensor<2xi64> {spin.request_ids}) -> tensor<2x2x8xi32> {
  %s = spin.layer_state %ids : tensor<2xi64> -> !spin.state<layer = 0>
  %m = spin.fused_select %s positions(%p2 : tensor<2x2xi32>)
      lengths(%n2 : tensor<2x2xi32>)
      {block_size = 16 : i64, sparsity = 5.0e-01, topk = 8 : i64,
       pooling = #spin.pooling<max>}
      : !spin.state<layer = 0> -> tensor<2x8xi1>
  %t, %z, %s1 = spin.fused_score q(%q2 : tensor<2x2x16x64xbf16>)
      w(%w2 : tensor<2x2x16xf32>) keys(%keys : tensor<?x16x64xbf16>)
      block_table(%table : tensor<2x8xi32>) lengths(%n2 : tensor<2x2xi32>)
      mask(%m : tensor<2x8xi1>) state(%s : !spin.state<layer = 0>)
      positions(%p2 : tensor<2x2xi32>)
      {block_size = 16 : i64, k = 8 : i64, update = #spin.update<observe>}
      -> tensor<2x2x8xi32>, tensor<2x2x128xf32>, !spin.state<layer = 0>
  %t1 = spin.layer_state %ids : tensor<2xi64> -> !spin.state<layer = 1>
  %z3 = tensor.empty() : tensor<2x3x128xf32>
  %m1 = spin.fused_select %t1 positions(%p3 : tensor<2x3xi32>)
      lengths(%n3 : tensor<2x3xi32>)
      {block_size = 16 : i64, sparsity = 5.0e-01, topk = 8 : i64,
       pooling = #spin.pooling<max>}
      : !spin.state<layer = 1> -> tensor<2x8xi1>
  %o = spin.observe %t1 scores(%z3 : tensor<2x3x128xf32>)
      positions(%p3 : tensor<2x3xi32>) lengths(%n3 : tensor<2x3xi32>)
      mask(%m1 : tensor<2x8xi1>) {block_size = 16 : i64}
      : !spin.state<layer = 1>
  return %t : tensor<2x2x8xi32>
}
