// RUN: spin-opt %s --split-input-file --convert-spin-to-gpu | FileCheck %s

// Results are named by the op that produces them (graphResultNames): a
// block sparsity is "sparsity" with or without the {spin.sparsity} mark, a
// dense indexer's scores "scores", a top-K "topk".

// CHECK-LABEL: func.func @unmarked_sparsity(
// CHECK-SAME: {spin.dtype = "f32", spin.name = "sparsity", spin.role = "output", spin.shape = [2, 1]}
func.func @unmarked_sparsity(%p: tensor<2x1xi32> {spin.positions}, %n: tensor<2x1xi32> {spin.input = "lengths"},
                             %ids: tensor<2xi64> {spin.request_ids}) -> tensor<2x1xf32> {
  %s = spin.layer_state %ids : tensor<2xi64> -> !spin.state<layer = 0>
  %m = spin.fused_select %s positions(%p : tensor<2x1xi32>) lengths(%n : tensor<2x1xi32>) {block_size = 16 : i64, explore = 2.500000e-01 : f64, pooling = #spin.pooling<max>, seed = 7 : i64, sparsity = 5.000000e-01 : f64, topk = 8 : i64} : !spin.state<layer = 0> -> tensor<2x8xi1>
  %r = spin.block_sparsity %m lengths(%n : tensor<2x1xi32>) {block_size = 16 : i64} : tensor<2x8xi1> -> tensor<2x1xf32>
  return %r : tensor<2x1xf32>
}

// -----

// CHECK-LABEL: func.func @scores_and_topk(
// CHECK-SAME: spin.name = "scores", spin.role = "output"
// CHECK-SAME: spin.name = "topk", spin.role = "output"
func.func @scores_and_topk(%q: tensor<2x1x16x64xbf16>, %w: tensor<2x1x16xf32>,
                           %keys: tensor<?x16x64xbf16>, %table: tensor<2x8xi32>,
                           %lengths: tensor<2x1xi32>) -> (tensor<2x1x128xf32>, tensor<2x1x8xi32>) {
  %z = spin.dense_indexer q(%q : tensor<2x1x16x64xbf16>)
      w(%w : tensor<2x1x16xf32>) keys(%keys : tensor<?x16x64xbf16>)
      block_table(%table : tensor<2x8xi32>)
      lengths(%lengths : tensor<2x1xi32>) -> tensor<2x1x128xf32>
  %t = spin.topk %z lengths(%lengths : tensor<2x1xi32>) {k = 8 : i64}
      : tensor<2x1x128xf32> -> tensor<2x1x8xi32>
  return %z, %t : tensor<2x1x128xf32>, tensor<2x1x8xi32>
}
