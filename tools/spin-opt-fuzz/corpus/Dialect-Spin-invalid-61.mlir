% func.func @topk_rejects_mask_batch_mismatch(%z: tensor<2x1x64xf32>, %n: tensor<2x1xi32>, %m: tensor<3x4xi1>) {
  %t = spin.topk %z lengths(%n : tensor<2x1xi32>) mask(%m : tensor<3x4xi1>) {k = 16 : i64, block_size = 16 : i64} : tensor<2x1x64xf32> -> tensor<2x1x16xi32>
  return
}
