// RUN: spin-opt %s --split-input-file --convert-spin-to-gpu=fused-fp8-pages=1 | FileCheck %s
// RUN: spin-opt %s --split-input-file --spin-sparsify-pipeline="sparsity=0.5 block-size=16" --convert-spin-to-gpu=fused-fp8-pages=1 | FileCheck %s --check-prefix=SPARSE

// fused-fp8-pages takes fp8 keys and their scales the way serving engines
// keep them (docs/GPU-ABI.md, "Fused fp8 key pages"): one i8 `kv_cache`
// input whose page p holds the page's 16 key rows of 64 bytes and then their
// 16 f32 scales (16 x (64 + 4) = 1088 bytes). The plan has no scales
// argument: the scoring kernel takes the kv_cache pointer for both, and the
// page count is size 0 of the kv_cache.
// CHECK-LABEL: func.func @dense(
// CHECK-SAME: %[[Q:[a-z0-9]+]]: !llvm.ptr<1> {spin.dtype = "bf16", spin.name = "q"
// CHECK-SAME: %[[W:[a-z0-9]+]]: !llvm.ptr<1> {spin.dtype = "f32", spin.name = "w"
// CHECK-SAME: %[[KV:[a-z0-9]+]]: !llvm.ptr<1> {spin.dtype = "i8", spin.name = "kv_cache", spin.role = "input", spin.shape = [-1, 1088]}
// CHECK-SAME: %[[TABLE:[a-z0-9]+]]: !llvm.ptr<1> {spin.dtype = "i32", spin.name = "block_table"
// CHECK-NOT: spin.name = "scales"
// CHECK-SAME: %[[PAGES:[a-z0-9]+]]: i32 {spin.argument = 2 : i64, spin.dim = 0 : i64, spin.role = "dim"}
// CHECK: gpu.launch_func @spin_kernels::@spin_score_dense_0 {{.*}}args(%[[Q]] : !llvm.ptr<1>, %[[W]] : !llvm.ptr<1>, %[[KV]] : !llvm.ptr<1>, %[[KV]] : !llvm.ptr<1>, %[[TABLE]] : !llvm.ptr<1>, {{.*}}, %[[PAGES]] : i32,

// A key row lies at page x 1088 + offset x 64 bytes, its scale at
// page x 1088 + 1024 + offset x 4.
// CHECK-LABEL: gpu.func @spin_score_dense_0(
// CHECK: %[[PB:.*]] = arith.constant 1088 : i64
// CHECK: arith.muli %{{.*}}, %[[PB]] : i64
// CHECK: arith.constant 64 : i64
// CHECK: arith.constant 1024 : i64

// SPARSE-LABEL: func.func @dense(
// SPARSE-SAME: %[[KV:[a-z0-9]+]]: !llvm.ptr<1> {spin.dtype = "i8", spin.name = "kv_cache", spin.role = "input", spin.shape = [-1, 1088]}
// SPARSE-NOT: spin.name = "scales"
// SPARSE: gpu.launch_func @spin_kernels::@spin_score_sparse_{{[0-9]+}} {{.*}}%[[KV]] : !llvm.ptr<1>, %[[KV]] : !llvm.ptr<1>,
func.func @dense(%q: tensor<2x1x16x64xbf16>, %w: tensor<2x1x16xf32>,
                 %keys: tensor<?x16x64xf8E4M3FN>, %scales: tensor<?x16xf32>,
                 %table: tensor<2x8xi32>, %lengths: tensor<2x1xi32>)
    -> tensor<2x1x8xi32> {
  %z = spin.dense_indexer q(%q : tensor<2x1x16x64xbf16>)
      w(%w : tensor<2x1x16xf32>) keys(%keys : tensor<?x16x64xf8E4M3FN>)
      scales(%scales : tensor<?x16xf32>)
      block_table(%table : tensor<2x8xi32>)
      lengths(%lengths : tensor<2x1xi32>) -> tensor<2x1x128xf32>
  %t = spin.topk %z lengths(%lengths : tensor<2x1xi32>) {k = 8 : i64}
      : tensor<2x1x128xf32> -> tensor<2x1x8xi32>
  return %t : tensor<2x1x8xi32>
}

// -----

// Two indexers with their own key caches: each becomes its own kv_cache
// input, named as its keys were (`keys`, `keys_1`).
// CHECK-LABEL: func.func @two_caches(
// CHECK-SAME: spin.name = "kv_cache", spin.role = "input", spin.shape = [-1, 1088]
// CHECK-SAME: spin.name = "kv_cache_1", spin.role = "input", spin.shape = [7, 1088]
// CHECK-NOT: spin.name = "scales
// CHECK-SAME: spin.launch_plan
func.func @two_caches(%q: tensor<2x1x16x64xbf16>, %w: tensor<2x1x16xf32>,
                      %keys: tensor<?x16x64xf8E4M3FN>, %scales: tensor<?x16xf32>,
                      %keys1: tensor<7x16x64xf8E4M3FN>, %scales1: tensor<7x16xf32>,
                      %table: tensor<2x8xi32>, %lengths: tensor<2x1xi32>)
    -> (tensor<2x1x8xi32>, tensor<2x1x8xi32>) {
  %z = spin.dense_indexer q(%q : tensor<2x1x16x64xbf16>)
      w(%w : tensor<2x1x16xf32>) keys(%keys : tensor<?x16x64xf8E4M3FN>)
      scales(%scales : tensor<?x16xf32>)
      block_table(%table : tensor<2x8xi32>)
      lengths(%lengths : tensor<2x1xi32>) -> tensor<2x1x128xf32>
  %t = spin.topk %z lengths(%lengths : tensor<2x1xi32>) {k = 8 : i64}
      : tensor<2x1x128xf32> -> tensor<2x1x8xi32>
  %z1 = spin.dense_indexer q(%q : tensor<2x1x16x64xbf16>)
      w(%w : tensor<2x1x16xf32>) keys(%keys1 : tensor<7x16x64xf8E4M3FN>)
      scales(%scales1 : tensor<7x16xf32>)
      block_table(%table : tensor<2x8xi32>)
      lengths(%lengths : tensor<2x1xi32>) -> tensor<2x1x128xf32>
  %t1 = spin.topk %z1 lengths(%lengths : tensor<2x1xi32>) {k = 8 : i64}
      : tensor<2x1x128xf32> -> tensor<2x1x8xi32>
  return %t, %t1 : tensor<2x1x8xi32>, tensor<2x1x8xi32>
}
