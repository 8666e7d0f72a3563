‘Ifunc.func @mtp_step(%s: !spin.state<layer = 0>, %q: tensor<2x4x4x16xbf16>,
                    %w: tensor<2x4x4xf32>, %k: tensor<?x16x16xbf16>,
                    %bt: tensor<2x4xi32>, %p: tensor<2x4xi32>,
                    %n: tensor<2x4xi32>, %a: tensor<2xi32>)
    -> (tensor<2x4x16xi32>, !spin.state<layer = 0>) {
  %s1 = spin.commit %s accepted(%a : tensor<2xi32>) {block_size = 16 : i64, decay = 5.0e-01}
      : !spin.state<layer = 0>
  %zhat = spin.predict %s1 positions(%p : tensor<2x4xi32>)
      lengths(%n : tensor<2x4xi32>) : !spin.state<layer = 0>
      -> tensor<2x4x64xf32>
  %bs = spin.pool %zhat lengths(%n : tensor<2x4xi32>)
      {pooling = #spin.pooling<top4>, block_size = 16 : i64}
      : tensor<2x4x64xf32> -> tensor<2x4x4xf32>
  %m = spin.select_blocks %s1 scores(%bs : tensor<2x4x4xf32>)
      lengths(%n : tensor<2x4xi32>)
      {topk = 16 : i64, block_size = 16 : i64, sparsity = 5.0e-01,
       mtp_mask = #spin.mtp_mask<row0>}
      : !spin.state<layer = 0> -> tensor<2x4xi1>
  %z = spin.sparse_indexer q(%q : tensor<2x4x4x16xbf16>)
      w(%w : tensor<2x4x4xf32>) keys(%k : tensor<?x16x16xbf16>)
      block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x4xi32>)
      mask(%m : tensor<2x4xi1>) {block_size = 16 : i64}
      -> tensor<2x4x64xf32>
  %t = spin.topk %z lengths(%n : tensor<2x4xi32>) mask(%m : tensor<2x4xi1>)
      {k = 16 : i64, block_size = 16 : i64}
      : tensor<2x4x64xf32> -> tensor<2x4x16xi32>
  %s2 = spin.observe %s1 scores(%z : tensor<2x4x64xf32>)
      positions(%p : tensor<2x4xi32>) lengths(%n : tensor<2x4xi32>)
      mask(%m : tensor<2x4xi1>) {block_size = 16 : i64}
      : !spin.state<layer = 0>
  return %t, %s2 : tensor<2x4x16xi32>, !spin.state<layer = 0>
}
