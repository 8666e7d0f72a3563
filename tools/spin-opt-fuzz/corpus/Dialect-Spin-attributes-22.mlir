€func.func @topk_config_not_an_attr(%z: tensor<2x1x64xf32>, %n: tensor<2x1xi32>) -> tensor<2x1x8xi32> {
  %t = spin.topk %z lengths(%n : tensor<2x1xi32>) {k = 8 : i64, spin.topk_config = 1 : i64}
      : tensor<2x1x64xf32> -> tensor<2x1x8xi32>
  return %t : tensor<2x1x8xi32>
}
