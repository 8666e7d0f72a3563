// RUN: spin-opt %s --convert-spin-to-gpu | FileCheck %s

// A dense indexer (fp8 keys + scales) becomes a tensor-core scoring kernel
// and a radix-select top-K (one launch: a cluster of CTAs per row, here one
// CTA of 512 threads for this K and width); the function becomes their
// launch plan over device pointers that keep their roles.

// CHECK-LABEL: func.func @dense(
// CHECK-SAME: %[[Q:arg[0-9]+]]: !llvm.ptr<1> {spin.dtype = "bf16", spin.name = "q", spin.role = "input", spin.shape = [2, 1, 16, 64]}
// CHECK-SAME: {spin.dtype = "fp8e4m3", spin.name = "keys", spin.role = "input", spin.shape = [-1, 16, 64]}
// CHECK-SAME: %[[OUT:arg[0-9]+]]: !llvm.ptr<1> {spin.dtype = "i32", spin.name = "topk", spin.role = "output", spin.shape = [2, 1, 8]}
// CHECK-SAME: %[[SCORES:arg[0-9]+]]: !llvm.ptr<1> {spin.bytes = 1024 : i64, spin.name = "spin_score_dense_0_scores", spin.role = "scratch"}
// CHECK-SAME: %[[ERR:arg[0-9]+]]: !llvm.ptr<1> {spin.role = "errors"}
// CHECK-SAME: %[[PAGES:arg[0-9]+]]: i32 {spin.argument = 2 : i64, spin.dim = 0 : i64, spin.role = "dim"}
// CHECK-SAME: attributes {spin.block_size = 0 : i64, spin.capacity = 0 : i64, spin.events = 0 : i64, spin.launch_plan, spin.layers = 0 : i64}
// CHECK: gpu.launch_func @spin_kernels::@spin_score_dense_0 {{.*}} args(%[[Q]] : !llvm.ptr<1>, {{.*}}, %[[SCORES]] : !llvm.ptr<1>, %[[PAGES]] : i32, %[[ERR]] : !llvm.ptr<1>) {spin.record = -1 : i64, spin.stream = 0 : i64, spin.wait = []}
// CHECK: gpu.launch_func @spin_kernels::@spin_topk_1 blocks in (%c1{{(_[0-9]+)?}}, %c2{{(_[0-9]+)?}}, %c1{{(_[0-9]+)?}}) threads in (%c512{{.*}}) args(%[[SCORES]] : !llvm.ptr<1>, %{{.*}} : !llvm.ptr<1>, %[[CAND:.*]] : !llvm.ptr<1>, %[[OUT]] : !llvm.ptr<1>)
// CHECK-NOT: spin.dense_indexer

// A second graph in the module (bf16 keys) gets a scoring kernel of its
// own and launches the first's top-K, which is the same kernel
// (SharedKernels: one kernel per distinct configuration).
// CHECK-LABEL: func.func @second(
// CHECK: gpu.launch_func @spin_kernels::@spin_score_dense_2
// CHECK: gpu.launch_func @spin_kernels::@spin_topk_1 blocks

// A graph that returns the scores gets them in its output, written by the
// scoring kernel itself (no scratch copy), -inf past each row's length
// included; results are named by kind.
// CHECK-LABEL: func.func @scores(
// CHECK-SAME: %[[Z:arg[0-9]+]]: !llvm.ptr<1> {spin.dtype = "f32", spin.name = "scores", spin.role = "output", spin.shape = [2, 1, 128]}
// CHECK-SAME: %[[T:arg[0-9]+]]: !llvm.ptr<1> {spin.dtype = "i32", spin.name = "topk", spin.role = "output", spin.shape = [2, 1, 8]}
// CHECK-NOT: spin_score_dense_4_scores
// CHECK: gpu.launch_func @spin_kernels::@spin_score_dense_4 {{.*}}, %[[Z]] : !llvm.ptr<1>, %{{.*}} : i32, %{{.*}} : !llvm.ptr<1>)
// Its top-K is the first graph's.
// CHECK: gpu.launch_func @spin_kernels::@spin_topk_1 {{.*}} args(%[[Z]] : !llvm.ptr<1>, {{.*}}, %[[T]] : !llvm.ptr<1>)

// CHECK: gpu.module @spin_kernels
// CHECK: gpu.func @spin_score_dense_0({{.*}}) kernel attributes {known_block_size = array<i32: 256, 1, 1>, nvvm.minctasm = 2 : i32}
// CHECK-COUNT-2: nvvm.mma.sync
// CHECK: gpu.func @spin_topk_1({{.*}}) kernel attributes {known_block_size = array<i32: 512, 1, 1>, nvvm.cluster_dim = array<i32: 1, 1, 1>, nvvm.maxnreg = 64 : i32}
// CHECK: gpu.func @spin_score_dense_2(
// The fill of the entries past the length: a store of -inf (0xFF800000).
// CHECK: gpu.func @spin_score_dense_4(
// CHECK: arith.constant -8388608 : i32
// CHECK-NOT: gpu.func
func.func @dense(%q: tensor<2x1x16x64xbf16> {spin.input = "q"},
                 %w: tensor<2x1x16xf32> {spin.input = "w"},
                 %keys: tensor<?x16x64xf8E4M3FN> {spin.input = "keys"},
                 %scales: tensor<?x16xf32> {spin.input = "scales"},
                 %table: tensor<2x8xi32> {spin.input = "block_table"},
                 %lengths: tensor<2x1xi32> {spin.input = "lengths"})
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

func.func @second(%q: tensor<2x1x16x64xbf16> {spin.input = "q"},
                  %w: tensor<2x1x16xf32> {spin.input = "w"},
                  %keys: tensor<?x16x64xbf16> {spin.input = "keys"},
                  %table: tensor<2x8xi32> {spin.input = "block_table"},
                  %lengths: tensor<2x1xi32> {spin.input = "lengths"})
    -> tensor<2x1x8xi32> {
  %z = spin.dense_indexer q(%q : tensor<2x1x16x64xbf16>)
      w(%w : tensor<2x1x16xf32>) keys(%keys : tensor<?x16x64xbf16>)
      block_table(%table : tensor<2x8xi32>)
      lengths(%lengths : tensor<2x1xi32>) -> tensor<2x1x128xf32>
  %t = spin.topk %z lengths(%lengths : tensor<2x1xi32>) {k = 8 : i64}
      : tensor<2x1x128xf32> -> tensor<2x1x8xi32>
  return %t : tensor<2x1x8xi32>
}

func.func @scores(%q: tensor<2x1x16x64xbf16> {spin.input = "q"},
                  %w: tensor<2x1x16xf32> {spin.input = "w"},
                  %keys: tensor<?x16x64xbf16> {spin.input = "keys"},
                  %table: tensor<2x8xi32> {spin.input = "block_table"},
                  %lengths: tensor<2x1xi32> {spin.input = "lengths"})
    -> (tensor<2x1x128xf32>, tensor<2x1x8xi32>) {
  %z = spin.dense_indexer q(%q : tensor<2x1x16x64xbf16>)
      w(%w : tensor<2x1x16xf32>) keys(%keys : tensor<?x16x64xbf16>)
      block_table(%table : tensor<2x8xi32>)
      lengths(%lengths : tensor<2x1xi32>) -> tensor<2x1x128xf32>
  %t = spin.topk %z lengths(%lengths : tensor<2x1xi32>) {k = 8 : i64}
      : tensor<2x1x128xf32> -> tensor<2x1x8xi32>
  return %z, %t : tensor<2x1x128xf32>, tensor<2x1x8xi32>
}
