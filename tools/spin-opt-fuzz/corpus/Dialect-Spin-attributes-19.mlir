‘Ifunc.func @kernel_configs(%z: tensor<2x1x64xf32>, %n: tensor<2x1xi32>, %q: tensor<2x1x8x64xbf16>,
                          %w: tensor<2x1x8xf32>, %keys: tensor<?x16x64xbf16>, %table: tensor<2x4xi32>)
    -> (tensor<2x1x64xf32>, tensor<2x1x8xi32>) {
  %s = spin.dense_indexer q(%q : tensor<2x1x8x64xbf16>) w(%w : tensor<2x1x8xf32>)
      keys(%keys : tensor<?x16x64xbf16>) block_table(%table : tensor<2x4xi32>)
      lengths(%n : tensor<2x1xi32>)
      {spin.score_config = #spin.score_config<warps = 4, tiles_per_warp = 12, m_tiles = 1, wgmma = true>}
      -> tensor<2x1x64xf32>
  %t = spin.topk %z lengths(%n : tensor<2x1xi32>)
      {k = 8 : i64, spin.topk_config = #spin.topk_config<threads = 512, cluster = 4, merge_ranks = true>}
      : tensor<2x1x64xf32> -> tensor<2x1x8xi32>
  return %s, %t : tensor<2x1x64xf32>, tensor<2x1x8xi32>
}
