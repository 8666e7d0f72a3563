‘Ifunc.func @sparse_indexer_rejects_fp8_keys_without_scales(%q: tensor<2x1x4x16xbf16>, %w: tensor<2x1x4xf32>, %k: tensor<8x16x16xf8E4M3FN>, %bt: tensor<2x4xi32>, %n: tensor<2x1xi32>, %m: tensor<2x4xi1>) {
  %z = spin.sparse_indexer q(%q : tensor<2x1x4x16xbf16>) w(%w : tensor<2x1x4xf32>) keys(%k : tensor<8x16x16xf8E4M3FN>) block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>) mask(%m : tensor<2x4xi1>) {block_size = 16 : i64} -> tensor<2x1x64xf32>
  return
}
