% func.func @layer(%q: tensor<2x1x4x16xbf16>, %w: tensor<2x1x4xf32>,
                 %k: tensor<?x64x16xbf16>, %bt: tensor<2x4xi32>,
                 %n: tensor<2x1xi32>) -> tensor<2x1x128xi32> {
  %z = spin.dense_indexer q(%q : tensor<2x1x4x16xbf16>) w(%w : tensor<2x1x4xf32>) keys(%k : tensor<?x64x16xbf16>) block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>) -> tensor<2x1x256xf32>
  %t = spin.topk %z lengths(%n : tensor<2x1xi32>) {k = 128 : i64} : tensor<2x1x256xf32> -> tensor<2x1x128xi32>
  return %t : tensor<2x1x128xi32>
}
