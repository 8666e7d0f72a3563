‘Ifunc.func @dense_indexer_rejects_i8_query(%q: tensor<2x1x4x16xi8>, %w: tensor<2x1x4xf32>, %k: tensor<8x16x16xbf16>, %bt: tensor<2x4xi32>, %n: tensor<2x1xi32>) {
  %z = spin.dense_indexer q(%q : tensor<2x1x4x16xi8>) w(%w : tensor<2x1x4xf32>) keys(%k : tensor<8x16x16xbf16>) block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>) -> tensor<2x1x64xf32>
  return
}
