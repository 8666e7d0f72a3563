‘Ifunc.func @merge(%q: tensor<16x1x64x128xbf16> {spin.input = "q"},
                 %w: tensor<16x1x64xf32> {spin.input = "w"},
                 %keys: tensor<?x64x128xf8E4M3FN> {spin.input = "keys"},
                 %scales: tensor<?x64xf32> {spin.input = "scales"},
                 %table: tensor<16x2048xi32> {spin.input = "block_table"},
                 %lengths: tensor<16x1xi32> {spin.input = "lengths"})
    -> tensor<16x1x2048xi32> {
  %z = spin.dense_indexer q(%q : tensor<16x1x64x128xbf16>)
      w(%w : tensor<16x1x64xf32>) keys(%keys : tensor<?x64x128xf8E4M3FN>)
      scales(%scales : tensor<?x64xf32>)
      block_table(%table : tensor<16x2048xi32>)
      lengths(%lengths : tensor<16x1xi32>) -> tensor<16x1x131072xf32>
  %t = spin.topk %z lengths(%lengths : tensor<16x1xi32>) {k = 2048 : i64}
      : tensor<16x1x131072xf32> -> tensor<16x1x2048xi32>
  return %t : tensor<16x1x2048xi32>
}
