// RUN: spin-opt %s --split-input-file --convert-spin-to-gpu | FileCheck %s
// RUN: spin-opt %s --split-input-file --spin-sparsify-pipeline="sparsity=0.5 block-size=64" --convert-spin-to-gpu | FileCheck %s --check-prefix=SPIN

// The top-K is one launch of a cluster of CTAs per row: 512 threads for
// K <= 512, else 1024; one CTA per 16 entries a thread of the row's width,
// at most 8 (a portable cluster); grid (cluster, rows); the cluster size is
// fixed in the kernel; at most 64 registers. K > 512 takes 512 threads and
// merge ranks where a cluster of those holds the candidates in slices of at
// most 512 (2K over the cluster, docs/GPU-ABI.md).

// 16 rows of 128K slots, K = 2048: 512 threads, 8 CTAs per row, slices of
// 512; the CTAs copy their peers' sorted slices through distributed shared
// memory (16-byte loads). The SPIN rows are as wide (the selected blocks of
// the full width): the same.
// CHECK-LABEL: func.func @k2048(
// CHECK: gpu.launch_func @spin_kernels::@spin_topk_1 blocks in (%c8{{(_[0-9]+)?}}, %c16{{(_[0-9]+)?}}, %c1{{(_[0-9]+)?}}) threads in (%c512
// CHECK: gpu.func @spin_topk_1({{.*}}) kernel attributes {known_block_size = array<i32: 512, 1, 1>, nvvm.cluster_dim = array<i32: 8, 1, 1>, nvvm.maxnreg = 64 : i32}
// CHECK: nvvm.mapa
// CHECK: llvm.load {{.*}} : !llvm.ptr<7> -> vector<2xi64>
// SPIN-LABEL: func.func @k2048(
// SPIN: gpu.launch_func @spin_kernels::@spin_topk_sparse_{{[0-9]+}} blocks in (%c8{{(_[0-9]+)?}}, %c16{{(_[0-9]+)?}}, %c1{{(_[0-9]+)?}}) threads in (%c512
// SPIN: nvvm.cluster_dim = array<i32: 8, 1, 1>
// SPIN: llvm.load {{.*}} : !llvm.ptr<7> -> vector<2xi64>
func.func @k2048(%q: tensor<16x1x64x128xbf16> {spin.input = "q"},
                 %w: tensor<16x1x64xf32> {spin.input = "w"},
                 %keys: tensor<?x64x128xbf16> {spin.input = "keys"},
                 %table: tensor<16x2048xi32> {spin.input = "block_table"},
                 %lengths: tensor<16x1xi32> {spin.input = "lengths"})
    -> tensor<16x1x2048xi32> {
  %z = spin.dense_indexer q(%q : tensor<16x1x64x128xbf16>)
      w(%w : tensor<16x1x64xf32>) keys(%keys : tensor<?x64x128xbf16>)
      block_table(%table : tensor<16x2048xi32>)
      lengths(%lengths : tensor<16x1xi32>) -> tensor<16x1x131072xf32>
  %t = spin.topk %z lengths(%lengths : tensor<16x1xi32>) {k = 2048 : i64}
      : tensor<16x1x131072xf32> -> tensor<16x1x2048xi32>
  return %t : tensor<16x1x2048xi32>
}

// -----

// 3 rows of 24K slots, K = 16: 512 threads, 3 CTAs per row (24576 / 8192).
// CHECK-LABEL: func.func @k16(
// CHECK: gpu.launch_func @spin_kernels::@spin_topk_1 blocks in (%c3{{(_[0-9]+)?}}, %c3{{(_[0-9]+)?}}, %c1{{(_[0-9]+)?}}) threads in (%c512
// CHECK: nvvm.cluster_dim = array<i32: 3, 1, 1>, nvvm.maxnreg = 64 : i32
func.func @k16(%q: tensor<3x1x8x64xbf16> {spin.input = "q"},
               %w: tensor<3x1x8xf32> {spin.input = "w"},
               %keys: tensor<?x64x64xbf16> {spin.input = "keys"},
               %table: tensor<3x384xi32> {spin.input = "block_table"},
               %lengths: tensor<3x1xi32> {spin.input = "lengths"})
    -> tensor<3x1x16xi32> {
  %z = spin.dense_indexer q(%q : tensor<3x1x8x64xbf16>)
      w(%w : tensor<3x1x8xf32>) keys(%keys : tensor<?x64x64xbf16>)
      block_table(%table : tensor<3x384xi32>)
      lengths(%lengths : tensor<3x1xi32>) -> tensor<3x1x24576xf32>
  %t = spin.topk %z lengths(%lengths : tensor<3x1xi32>) {k = 16 : i64}
      : tensor<3x1x24576xf32> -> tensor<3x1x16xi32>
  return %t : tensor<3x1x16xi32>
}

// -----

// 3 rows of 16K slots, K = 2048: two CTAs of 512 threads would need slices
// of 2048, so 1024 threads in one CTA, whose leader sorts, and no copies.
// CHECK-LABEL: func.func @k2048short(
// CHECK: gpu.launch_func @spin_kernels::@spin_topk_1 blocks in (%c1{{(_[0-9]+)?}}, %c3{{(_[0-9]+)?}}, %c1{{(_[0-9]+)?}}) threads in (%c1024
// CHECK: gpu.func @spin_topk_1({{.*}}) kernel attributes {known_block_size = array<i32: 1024, 1, 1>, nvvm.cluster_dim = array<i32: 1, 1, 1>
// CHECK-NOT: vector<2xi64>
// CHECK: gpu.return
func.func @k2048short(%q: tensor<3x1x8x64xbf16> {spin.input = "q"},
                      %w: tensor<3x1x8xf32> {spin.input = "w"},
                      %keys: tensor<?x64x64xbf16> {spin.input = "keys"},
                      %table: tensor<3x256xi32> {spin.input = "block_table"},
                      %lengths: tensor<3x1xi32> {spin.input = "lengths"})
    -> tensor<3x1x2048xi32> {
  %z = spin.dense_indexer q(%q : tensor<3x1x8x64xbf16>)
      w(%w : tensor<3x1x8xf32>) keys(%keys : tensor<?x64x64xbf16>)
      block_table(%table : tensor<3x256xi32>)
      lengths(%lengths : tensor<3x1xi32>) -> tensor<3x1x16384xf32>
  %t = spin.topk %z lengths(%lengths : tensor<3x1xi32>) {k = 2048 : i64}
      : tensor<3x1x16384xf32> -> tensor<3x1x2048xi32>
  return %t : tensor<3x1x2048xi32>
}
