€func.func @observe_rejects_i64_positions(%s: !spin.state<layer = 0>, %z: tensor<2x4x64xf32>, %p: tensor<2x4xi64>, %n: tensor<2x4xi32>, %m: tensor<2x4xi1>) {
  %s1 = spin.observe %s scores(%z : tensor<2x4x64xf32>) positions(%p : tensor<2x4xi64>) lengths(%n : tensor<2x4xi32>) mask(%m : tensor<2x4xi1>) {block_size = 16 : i64} : !spin.state<layer = 0>
  return
}
