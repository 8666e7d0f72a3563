% func.func @sparse_indexer_rejects_mask_blocks_not_tiling_block_table(%q: tensor<2x1x4x16xbf16>, %w: tensor<2x1x4xf32>, %k: tensor<8x16x16xbf16>, %bt: tensor<2x4xi32>, %n: tensor<2x1xi32>, %m: tensor<2x3xi1>) {
  %z = spin.sparse_indexer q(%q : tensor<2x1x4x16xbf16>) w(%w : tensor<2x1x4xf32>) keys(%k : tensor<8x16x16xbf16>) block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>) mask(%m : tensor<2x3xi1>) {block_size = 16 : i64} -> tensor<2x1x?xf32>
  return
}
