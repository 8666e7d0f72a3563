€func.func @rows16_105k(%q: tensor<16x1x64x128xbf16>, %w: tensor<16x1x64xf32>,
                       %keys: tensor<?x64x128xbf16>, %table: tensor<16x1639xi32>,
                       %lengths: tensor<16x1xi32>) -> tensor<16x1x512xi32> {
  %z = spin.dense_indexer q(%q : tensor<16x1x64x128xbf16>)
      w(%w : tensor<16x1x64xf32>) keys(%keys : tensor<?x64x128xbf16>)
      block_table(%table : tensor<16x1639xi32>)
      lengths(%lengths : tensor<16x1xi32>) -> tensor<16x1x104896xf32>
  %t = spin.topk %z lengths(%lengths : tensor<16x1xi32>) {k = 512 : i64}
      : tensor<16x1x104896xf32> -> tensor<16x1x512xi32>
  return %t : tensor<16x1x512xi32>
}
