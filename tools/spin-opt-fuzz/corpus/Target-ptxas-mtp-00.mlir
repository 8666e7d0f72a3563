€func.func @verify(%q: tensor<2x4x16x64xbf16>, %w: tensor<2x4x16xf32>,
                  %keys: tensor<?x16x64xf8E4M3FN>, %scales: tensor<?x16xf32>,
                  %table: tensor<2x8xi32>, %lengths: tensor<2x4xi32>)
    -> tensor<2x4x8xi32> {
  %z = spin.dense_indexer q(%q : tensor<2x4x16x64xbf16>)
      w(%w : tensor<2x4x16xf32>) keys(%keys : tensor<?x16x64xf8E4M3FN>)
      scales(%scales : tensor<?x16xf32>)
      block_table(%table : tensor<2x8xi32>)
      lengths(%lengths : tensor<2x4xi32>) -> tensor<2x4x128xf32>
  %t = spin.topk %z lengths(%lengths : tensor<2x4xi32>) {k = 8 : i64}
      : tensor<2x4x128xf32> -> tensor<2x4x8xi32>
  return %t : tensor<2x4x8xi32>
}
