% func.func @layer2(%q: tensor<2x1x16x64xbf16> {spin.input = "q"},
                  %w: tensor<2x1x16xf32> {spin.input = "w"},
                  %keys: tensor<?x16x64xbf16> {spin.input = "keys"},
                  %table: tensor<2x8xi32> {spin.input = "block_table"},
                  %lengths: tensor<2x1xi32> {spin.input = "lengths"})
    -> tensor<2x1x8xi32> {
  %z = spin.dense_indexer q(%q : tensor<2x1x16x64xbf16>)
      w(%w : tensor<2x1x16xf32>) keys(%keys : tensor<?x16x64xbf16>)
      block_table(%table : tensor<2x8xi32>)
      lengths(%lengths : tensor<2x1xi32>) {spin.layer = 9223372036854775807 : i64}
      -> tensor<2x1x128xf32>
  %t = spin.topk %z lengths(%lengths : tensor<2x1xi32>) {k = 8 : i64}
      : tensor<2x1x128xf32> -> tensor<2x1x8xi32>
  return %t : tensor<2x1x8xi32>
}
