‘Ifunc.func @sparse_indexer_rejects_slots_not_multiple_of_block_size(%q: tensor<2x1x4x16xbf16>, %w: tensor<2x1x4xf32>, %k: tensor<?x?x16xbf16>, %bt: tensor<2x?xi32>, %n: tensor<2x1xi32>, %m: tensor<2x?xi1>) {
  %z = spin.sparse_indexer q(%q : tensor<2x1x4x16xbf16>) w(%w : tensor<2x1x4xf32>) keys(%k : tensor<?x?x16xbf16>) block_table(%bt : tensor<2x?xi32>) lengths(%n : tensor<2x1xi32>) mask(%m : tensor<2x?xi1>) {block_size = 16 : i64} -> tensor<2x1x60xf32>
  return
}
