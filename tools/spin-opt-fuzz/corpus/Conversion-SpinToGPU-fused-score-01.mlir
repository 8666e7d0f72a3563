‘Ifunc.func @fused_update(%q: tensor<2x1x16x64xbf16>, %w: tensor<2x1x16xf32>, %keys: tensor<?x16x64xbf16>,
                        %table: tensor<2x8xi32>, %n: tensor<2x1xi32>, %p: tensor<2x1xi32> {spin.positions},
                        %ids: tensor<2xi64> {spin.request_ids}) -> tensor<2x1x8xi32> {
  %s = spin.layer_state %ids : tensor<2xi64> -> !spin.state<layer = 0>
  %mask = spin.fused_select %s positions(%p : tensor<2x1xi32>) lengths(%n : tensor<2x1xi32>) {block_size = 16 : i64, pooling = #spin.pooling<max>, sparsity = 5.000000e-01 : f64, topk = 8 : i64} : !spin.state<layer = 0> -> tensor<2x8xi1>
  %t, %z, %s1 = spin.fused_score q(%q : tensor<2x1x16x64xbf16>) w(%w : tensor<2x1x16xf32>) keys(%keys : tensor<?x16x64xbf16>) block_table(%table : tensor<2x8xi32>) lengths(%n : tensor<2x1xi32>) mask(%mask : tensor<2x8xi1>) state(%s : !spin.state<layer = 0>) positions(%p : tensor<2x1xi32>) {block_size = 16 : i64, decay = 5.000000e-01 : f64, k = 8 : i64, update = #spin.update<ema>} -> tensor<2x1x8xi32>, tensor<2x1x128xf32>, !spin.state<layer = 0>
  return %t : tensor<2x1x8xi32>
}
