‘Ifunc.func @fused_score_rejects_new_state_of_other_layer(%s: !spin.state<layer = 0>, %q: tensor<2x1x4x16xbf16>, %w: tensor<2x1x4xf32>, %k: tensor<?x16x16xbf16>, %bt: tensor<2x4xi32>, %n: tensor<2x1xi32>, %p: tensor<2x1xi32>, %m: tensor<2x4xi1>) {
  %t, %z, %s1 = "spin.fused_score"(%q, %w, %k, %bt, %n, %m, %s, %p) <{k = 32 : i64, block_size = 16 : i64, update = #spin.update<ema>, decay = 0.5 : f64, operandSegmentSizes = array<i32: 1, 1, 1, 0, 1, 1, 1, 1, 1>}> : (tensor<2x1x4x16xbf16>, tensor<2x1x4xf32>, tensor<?x16x16xbf16>, tensor<2x4xi32>, tensor<2x1xi32>, tensor<2x4xi1>, !spin.state<layer = 0>, tensor<2x1xi32>) -> (tensor<2x1x32xi32>, tensor<2x1x64xf32>, !spin.state<layer = 1>)
  return
}
