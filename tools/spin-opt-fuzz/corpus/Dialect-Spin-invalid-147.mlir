€func.func @fused_score_rejects_k_mismatch(%q: tensor<2x1x4x16xbf16>, %w: tensor<2x1x4xf32>, %k: tensor<?x16x16xbf16>, %bt: tensor<2x4xi32>, %n: tensor<2x1xi32>, %m: tensor<2x4xi1>) {
  %t, %z = spin.fused_score q(%q : tensor<2x1x4x16xbf16>) w(%w : tensor<2x1x4xf32>) keys(%k : tensor<?x16x16xbf16>) block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>) mask(%m : tensor<2x4xi1>) {k = 32 : i64, block_size = 16 : i64} -> tensor<2x1x16xi32>, tensor<2x1x64xf32>
  return
}
