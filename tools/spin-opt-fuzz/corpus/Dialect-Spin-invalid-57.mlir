% func.func @topk_rejects_row_count_mismatch(%z: tensor<2x4x64xf32>, %n: tensor<2x1xi32>) {
  %t = spin.topk %z lengths(%n : tensor<2x1xi32>) {k = 16 : i64} : tensor<2x4x64xf32> -> tensor<2x4x16xi32>
  return
}
