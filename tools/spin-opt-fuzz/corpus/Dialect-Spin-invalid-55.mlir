€func.func @topk_rejects_rank2_scores(%z: tensor<2x64xf32>, %n: tensor<2x1xi32>) {
  %t = spin.topk %z lengths(%n : tensor<2x1xi32>) {k = 16 : i64} : tensor<2x64xf32> -> tensor<2x1x16xi32>
  return
}
