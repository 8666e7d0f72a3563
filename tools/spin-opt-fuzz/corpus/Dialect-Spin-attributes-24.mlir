% func.func @topk_config_merge_needs_cluster(%z: tensor<2x1x64xf32>, %n: tensor<2x1xi32>) -> tensor<2x1x8xi32> {
  %t = spin.topk %z lengths(%n : tensor<2x1xi32>) {k = 8 : i64, spin.topk_config = #spin.topk_config<threads = 1024, cluster = 2, merge_ranks = true>}
      : tensor<2x1x64xf32> -> tensor<2x1x8xi32>
  return %t : tensor<2x1x8xi32>
}
