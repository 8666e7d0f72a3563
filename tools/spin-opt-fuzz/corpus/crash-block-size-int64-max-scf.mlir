% func.func @topk_masked(%z: tensor<2x1x64xf32>, %n: tensor<2x1xi32>, %m: tensor<2x4xi1>) -> tensor<2x1x8xi32> {
  %t = spin.topk %z lengths(%n : tensor<2x1xi32>) mask(%m : tensor<2x4xi1>)
      {k = 8 : i64, block_size = 9223372036854775807 : i64} : tensor<2x1x64xf32> -> tensor<2x1x8xi32>
  return %t : tensor<2x1x8xi32>
}
