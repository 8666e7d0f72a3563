% func.func @select_a0_row0(%ids: tensor<2xi64>, %z: tensor<2x4x64xf32>, %n: tensor<2x4xi32>) -> tensor<2x4xi1> {
  %s = spin.layer_state %ids : tensor<2xi64> -> !spin.state<layer = 0>
  %m = spin.select_blocks %s scores(%z : tensor<2x4x64xf32>) lengths(%n : tensor<2x4xi32>)
      {topk = 8 : i64, block_size = 16 : i64, sparsity = 0.5, reduction = #spin.reduction<a0>,
       mtp_mask = #spin.mtp_mask<row0>}
      : !spin.state<layer = 0> -> tensor<2x4xi1>
  return %m : tensor<2x4xi1>
}
