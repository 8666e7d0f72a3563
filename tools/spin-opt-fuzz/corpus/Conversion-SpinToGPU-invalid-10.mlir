‘Ifunc.func @rejects_returning_sparse_scores(%q: tensor<2x1x16x64xbf16> {spin.input = "q"},
    %w: tensor<2x1x16xf32> {spin.input = "w"},
    %keys: tensor<?x16x64xbf16> {spin.input = "keys"},
    %table: tensor<2x8xi32> {spin.input = "block_table"},
    %lengths: tensor<2x1xi32> {spin.input = "lengths"},
    %positions: tensor<2x1xi32> {spin.positions},
    %ids: tensor<2xi64> {spin.request_ids}) -> (tensor<2x1x8xi32>, tensor<2x1x128xf32>) {
  %state = spin.layer_state %ids : tensor<2xi64> -> !spin.state<layer = 0>
  %mask = spin.fused_select %state positions(%positions : tensor<2x1xi32>)
      lengths(%lengths : tensor<2x1xi32>) {block_size = 16 : i64,
      pooling = #spin.pooling<max>, sparsity = 5.000000e-01 : f64, topk = 8 : i64}
      : !spin.state<layer = 0> -> tensor<2x8xi1>
  %indices, %scores = spin.fused_score q(%q : tensor<2x1x16x64xbf16>)
      w(%w : tensor<2x1x16xf32>) keys(%keys : tensor<?x16x64xbf16>)
      block_table(%table : tensor<2x8xi32>) lengths(%lengths : tensor<2x1xi32>)
      mask(%mask : tensor<2x8xi1>) {block_size = 16 : i64, k = 8 : i64}
      -> tensor<2x1x8xi32>, tensor<2x1x128xf32>
  return %indices, %scores : tensor<2x1x8xi32>, tensor<2x1x128xf32>
}
