// RUN: spin-opt %s --spin-sparsify-pipeline="sparsity=0.5 block-size=16 explore=0.25" --convert-spin-to-gpu | FileCheck %s

// Two layers of the same shapes and options share every kernel: each
// distinct kernel is defined once and launched by both layers, with each
// layer's state as arguments. The select kernel takes the layer of the
// exploration hash (SPIN_SPEC §3.7) as its last parameter, a constant of
// the launch (the manifest's `i32` argument kind).

// CHECK-LABEL: func.func @two_layers(
// CHECK-SAME: spin.layers = 2 : i64
// CHECK: %[[L0:.*]] = arith.constant 0 : i32
// CHECK: gpu.launch_func @spin_kernels::@spin_select_0 {{.*}}, %[[L0]] : i32)
// CHECK: %[[L1:.*]] = arith.constant 1 : i32
// CHECK: gpu.launch_func @spin_kernels::@spin_select_0 {{.*}}, %[[L1]] : i32)
// CHECK: gpu.launch_func @spin_kernels::@[[SCORE:spin_score_sparse_[0-9]+]] {{.*}} {spin.record = 0 : i64
// CHECK: gpu.launch_func @spin_kernels::@[[TOPK:spin_topk_sparse_[0-9]+]]
// CHECK: gpu.launch_func @spin_kernels::@[[UPDATE:spin_update_[0-9]+]]
// CHECK: gpu.launch_func @spin_kernels::@spin_select_0_predict_next
// CHECK: gpu.launch_func @spin_kernels::@[[SCORE]] {{.*}} {spin.record = 1 : i64
// CHECK: gpu.launch_func @spin_kernels::@[[TOPK]]
// CHECK: gpu.launch_func @spin_kernels::@[[UPDATE]]
// CHECK: gpu.launch_func @spin_kernels::@spin_select_0_predict_next
// CHECK: return
// One definition of each kernel, and only the shared-memory arrays of the
// kernels kept.
// CHECK: gpu.module @spin_kernels
// CHECK-NOT: llvm.mlir.global internal @spin_select_{{[1-9]}}
// CHECK: gpu.func @spin_select_0_predict(
// CHECK: gpu.func @spin_select_0_predict_next(
// CHECK: gpu.func @spin_select_0({{.*}}, %{{.*}}: !llvm.ptr<1>, %{{.*}}: i32) kernel
// CHECK: gpu.func @[[SCORE]](
// CHECK: gpu.func @[[TOPK]](
// CHECK: gpu.func @[[UPDATE]](
// CHECK-NOT: gpu.func
func.func @two_layers(%q0: tensor<2x1x16x64xbf16>, %w0: tensor<2x1x16xf32>, %k0: tensor<?x16x64xbf16>,
                      %q1: tensor<2x1x16x64xbf16>, %w1: tensor<2x1x16xf32>, %k1: tensor<?x16x64xbf16>,
                      %table: tensor<2x8xi32>, %n: tensor<2x1xi32>) -> (tensor<2x1x8xi32>, tensor<2x1x8xi32>) {
  %z0 = spin.dense_indexer q(%q0 : tensor<2x1x16x64xbf16>) w(%w0 : tensor<2x1x16xf32>) keys(%k0 : tensor<?x16x64xbf16>) block_table(%table : tensor<2x8xi32>) lengths(%n : tensor<2x1xi32>) -> tensor<2x1x128xf32>
  %t0 = spin.topk %z0 lengths(%n : tensor<2x1xi32>) {k = 8 : i64} : tensor<2x1x128xf32> -> tensor<2x1x8xi32>
  %z1 = spin.dense_indexer q(%q1 : tensor<2x1x16x64xbf16>) w(%w1 : tensor<2x1x16xf32>) keys(%k1 : tensor<?x16x64xbf16>) block_table(%table : tensor<2x8xi32>) lengths(%n : tensor<2x1xi32>) -> tensor<2x1x128xf32>
  %t1 = spin.topk %z1 lengths(%n : tensor<2x1xi32>) {k = 8 : i64} : tensor<2x1x128xf32> -> tensor<2x1x8xi32>
  return %t0, %t1 : tensor<2x1x8xi32>, tensor<2x1x8xi32>
}
