€func.func @ema_update_rejects_multiple_rows_with_dynamic_scores(%s: !spin.state<layer = 0>, %z: tensor<2x?x64xf32>, %p: tensor<2x4xi32>, %n: tensor<2x4xi32>, %m: tensor<2x4xi1>) {
  %s1 = spin.ema_update %s scores(%z : tensor<2x?x64xf32>) positions(%p : tensor<2x4xi32>) lengths(%n : tensor<2x4xi32>) mask(%m : tensor<2x4xi1>) {decay = 5.0e-01, block_size = 16 : i64} : !spin.state<layer = 0>
  return
}
