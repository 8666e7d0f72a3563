‘Ifunc.func @k2048short(%q: tensor<3x1x8x64xbf16> {spin.input = "q"},
                      %w: tensor<3x1x8xf32> {spin.input = "w"},
                      %keys: tensor<?x64x64xbf16> {spin.input = "keys"},
                      %table: tensor<3x256xi32> {spin.input = "block_table"},
                      %lengths: tensor<3x1xi32> {spin.input = "lengths"})
    -> tensor<3x1x2048xi32> {
  %z = spin.dense_indexer q(%q : tensor<3x1x8x64xbf16>)
      w(%w : tensor<3x1x8xf32>) keys(%keys : tensor<?x64x64xbf16>)
      block_table(%table : tensor<3x256xi32>)
      lengths(%lengths : tensor<3x1xi32>) -> tensor<3x1x16384xf32>
  %t = spin.topk %z lengths(%lengths : tensor<3x1xi32>) {k = 2048 : i64}
      : tensor<3x1x16384xf32> -> tensor<3x1x2048xi32>
  return %t : tensor<3x1x2048xi32>
}
