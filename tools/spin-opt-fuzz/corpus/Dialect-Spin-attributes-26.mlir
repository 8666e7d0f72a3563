€func.func @select_config_on_topk(%z: tensor<2x1x64xf32>, %n: tensor<2x1xi32>) -> tensor<2x1x8xi32> {
  %t = spin.topk %z lengths(%n : tensor<2x1xi32>) {k = 8 : i64, spin.select_config = #spin.select_config<prefetch_on_miss = true>}
      : tensor<2x1x64xf32> -> tensor<2x1x8xi32>
  return %t : tensor<2x1x8xi32>
}
