€func.func @decode_step(%s: !spin.state<layer = 0>, %q: tensor<2x1x4x16xbf16>,
                       %w: tensor<2x1x4xf32>, %k: tensor<?x16x16xbf16>,
                       %bt: tensor<2x4xi32>, %p: tensor<2x1xi32>,
                       %n: tensor<2x1xi32>) -> tensor<2x1x16xi32> {
  %m = spin.fused_select %s positions(%p : tensor<2x1xi32>)
      lengths(%n : tensor<2x1xi32>)
      {topk = 16 : i64, block_size = 16 : i64, sparsity = 5.0e-01,
       pooling = #spin.pooling<max>}
      : !spin.state<layer = 0> -> tensor<2x4xi1>
  %t, %z, %s1 = spin.fused_score q(%q : tensor<2x1x4x16xbf16>)
      w(%w : tensor<2x1x4xf32>) keys(%k : tensor<?x16x16xbf16>)
      block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>)
      mask(%m : tensor<2x4xi1>)
      state(%s : !spin.state<layer = 0>) positions(%p : tensor<2x1xi32>)
      {k = 16 : i64, block_size = 16 : i64, update = #spin.update<ema>,
       decay = 5.0e-01}
      -> tensor<2x1x16xi32>, tensor<2x1x64xf32>, !spin.state<layer = 0>
  return %t : tensor<2x1x16xi32>
}
