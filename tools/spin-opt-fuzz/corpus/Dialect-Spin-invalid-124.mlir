‘Ifunc.func @observe_rejects_mask_batch_mismatch(%s: !spin.state<layer = 0>, %z: tensor<?x4x64xf32>, %p: tensor<2x4xi32>, %n: tensor<2x4xi32>, %m: tensor<3x4xi1>) {
  %s1 = spin.observe %s scores(%z : tensor<?x4x64xf32>) positions(%p : tensor<2x4xi32>) lengths(%n : tensor<2x4xi32>) mask(%m : tensor<3x4xi1>) {block_size = 16 : i64} : !spin.state<layer = 0>
  return
}
