€func.func @duplicate(%q: tensor<2x1x4x16xbf16>, %w: tensor<2x1x4xf32>,
                     %k: tensor<?x64x16xbf16>, %bt: tensor<2x4xi32>,
                     %n: tensor<2x1xi32>) -> (tensor<2x1x128xi32>, tensor<2x1x128xi32>) {
  %z0 = spin.dense_indexer q(%q : tensor<2x1x4x16xbf16>) w(%w : tensor<2x1x4xf32>) keys(%k : tensor<?x64x16xbf16>) block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>) {spin.layer = 3 : i64} -> tensor<2x1x256xf32>
  %t0 = spin.topk %z0 lengths(%n : tensor<2x1xi32>) {k = 128 : i64} : tensor<2x1x256xf32> -> tensor<2x1x128xi32>
  %z1 = spin.dense_indexer q(%q : tensor<2x1x4x16xbf16>) w(%w : tensor<2x1x4xf32>) keys(%k : tensor<?x64x16xbf16>) block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>) {spin.layer = 3 : i64} -> tensor<2x1x256xf32>
  %t1 = spin.topk %z1 lengths(%n : tensor<2x1xi32>) {k = 128 : i64} : tensor<2x1x256xf32> -> tensor<2x1x128xi32>
  return %t0, %t1 : tensor<2x1x128xi32>, tensor<2x1x128xi32>
}
