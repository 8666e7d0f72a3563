‘Ifunc.func @ema_update_rejects_missing_decay(%s: !spin.state<layer = 0>, %z: tensor<2x1x64xf32>, %p: tensor<2x1xi32>, %n: tensor<2x1xi32>, %m: tensor<2x4xi1>) {
  %s1 = spin.ema_update %s scores(%z : tensor<2x1x64xf32>) positions(%p : tensor<2x1xi32>) lengths(%n : tensor<2x1xi32>) mask(%m : tensor<2x4xi1>) {block_size = 16 : i64} : !spin.state<layer = 0>
  return
}
