% func.func @mtp(%q: tensor<2x4x4x16xbf16>, %w: tensor<2x4x4xf32>,
               %k: tensor<?x64x16xf8E4M3FN>, %sc: tensor<?x64xf32>,
               %bt: tensor<2x4xi32>, %n: tensor<2x4xi32>) -> tensor<2x4x128xi32> {
  %z = spin.dense_indexer q(%q : tensor<2x4x4x16xbf16>) w(%w : tensor<2x4x4xf32>) keys(%k : tensor<?x64x16xf8E4M3FN>) scales(%sc : tensor<?x64xf32>) block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x4xi32>) -> tensor<2x4x256xf32>
  %t = spin.topk %z lengths(%n : tensor<2x4xi32>) {k = 128 : i64} : tensor<2x4x256xf32> -> tensor<2x4x128xi32>
  return %t : tensor<2x4x128xi32>
}
