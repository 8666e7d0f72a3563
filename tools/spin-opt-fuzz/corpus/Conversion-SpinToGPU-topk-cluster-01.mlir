€func.func @k16(%q: tensor<3x1x8x64xbf16> {spin.input = "q"},
               %w: tensor<3x1x8xf32> {spin.input = "w"},
               %keys: tensor<?x64x64xbf16> {spin.input = "keys"},
               %table: tensor<3x384xi32> {spin.input = "block_table"},
               %lengths: tensor<3x1xi32> {spin.input = "lengths"})
    -> tensor<3x1x16xi32> {
  %z = spin.dense_indexer q(%q : tensor<3x1x8x64xbf16>)
      w(%w : tensor<3x1x8xf32>) keys(%keys : tensor<?x64x64xbf16>)
      block_table(%table : tensor<3x384xi32>)
      lengths(%lengths : tensor<3x1xi32>) -> tensor<3x1x24576xf32>
  %t = spin.topk %z lengths(%lengths : tensor<3x1xi32>) {k = 16 : i64}
      : tensor<3x1x24576xf32> -> tensor<3x1x16xi32>
  return %t : tensor<3x1x16xi32>
}
