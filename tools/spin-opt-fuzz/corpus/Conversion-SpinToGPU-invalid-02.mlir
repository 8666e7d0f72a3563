‘Ifunc.func @rejects_bf16_keys_with_f16_queries(%q: tensor<1x1x8x32xf16> {spin.input = "q"},
    %w: tensor<1x1x8xf32> {spin.input = "w"},
    %keys: tensor<?x16x32xbf16> {spin.input = "keys"},
    %table: tensor<1x4xi32> {spin.input = "block_table"},
    %lengths: tensor<1x1xi32> {spin.input = "lengths"}) -> tensor<1x1x64xf32> {
  %z = spin.dense_indexer q(%q : tensor<1x1x8x32xf16>)
      w(%w : tensor<1x1x8xf32>) keys(%keys : tensor<?x16x32xbf16>)
      block_table(%table : tensor<1x4xi32>)
      lengths(%lengths : tensor<1x1xi32>) -> tensor<1x1x64xf32>
  return %z : tensor<1x1x64xf32>
}
