// RUN: spin-opt %s --split-input-file --convert-spin-to-gpu | FileCheck %s
// RUN: spin-opt %s --split-input-file --spin-configure-gpu-kernels="tiles-per-warp=16" --convert-spin-to-gpu | FileCheck %s --check-prefix=FIXED
// RUN: spin-opt %s --split-input-file --spin-configure-gpu-kernels="sm-count=148" --convert-spin-to-gpu | FileCheck %s --check-prefix=SM148
// RUN: not spin-opt %s --split-input-file --spin-configure-gpu-kernels="sm-count=0" --convert-spin-to-gpu 2>&1 | FileCheck %s --check-prefix=BADSM
// RUN: spin-opt %s --split-input-file --spin-lower-to-nvvm="chips=sm_90a sm-count=148" | FileCheck %s --check-prefix=NVVM148

// The scoring grid follows the work: 8 warps x 16 slots x T tiles per CTA,
// T in [8, 64] minimising ceil(CTAs / 264) x (T + 2), waves of two CTAs per
// SM of a 132-SM H200 (docs/GPU-ABI.md); --sm-count sizes the waves for
// another GPU, --tiles-per-warp fixes T.
// BADSM: error: spin-configure-gpu-kernels: sm-count must be positive (got 0)

// 16 rows of 64K slots: 32 tiles (4096 slots per CTA), 16 x 16 CTAs: one
// wave.
// CHECK-LABEL: func.func @rows16_64k(
// CHECK: gpu.launch_func @spin_kernels::@spin_score_dense_0 blocks in (%c16{{(_[0-9]+)?}}, %c16{{(_[0-9]+)?}}, %c1{{(_[0-9]+)?}})
// The top-K: a cluster of 8 CTAs per row (16 entries per thread of 512
// threads in each, at most 8 CTAs).
// CHECK: gpu.launch_func @spin_kernels::@spin_topk_1 blocks in (%c8{{(_[0-9]+)?}}, %c16{{(_[0-9]+)?}}, %c1{{(_[0-9]+)?}}) threads in (%c512
// On 148 SMs: 29 tiles, one wave of 18 x 16 CTAs (spin-lower-to-nvvm's
// sm-count reaches the conversion).
// NVVM148-LABEL: func.func @rows16_64k(
// NVVM148: gpu.launch_func @spin_kernels::@spin_score_dense_0 blocks in (%c18{{(_[0-9]+)?}}, %c16{{(_[0-9]+)?}}, %c1{{(_[0-9]+)?}})
// FIXED-LABEL: func.func @rows16_64k(
// FIXED: gpu.launch_func @spin_kernels::@spin_score_dense_0 blocks in (%c32{{(_[0-9]+)?}}, %c16{{(_[0-9]+)?}}, %c1{{(_[0-9]+)?}})
func.func @rows16_64k(%q: tensor<16x1x64x128xbf16>, %w: tensor<16x1x64xf32>,
                      %keys: tensor<?x64x128xbf16>, %table: tensor<16x1024xi32>,
                      %lengths: tensor<16x1xi32>) -> tensor<16x1x512xi32> {
  %z = spin.dense_indexer q(%q : tensor<16x1x64x128xbf16>)
      w(%w : tensor<16x1x64xf32>) keys(%keys : tensor<?x64x128xbf16>)
      block_table(%table : tensor<16x1024xi32>)
      lengths(%lengths : tensor<16x1xi32>) -> tensor<16x1x65536xf32>
  %t = spin.topk %z lengths(%lengths : tensor<16x1xi32>) {k = 512 : i64}
      : tensor<16x1x65536xf32> -> tensor<16x1x512xi32>
  return %t : tensor<16x1x512xi32>
}

// -----

// One row of 16K slots: even 8 tiles give 16 CTAs only, so 8 (1024 slots
// per CTA).
// CHECK-LABEL: func.func @row1_16k(
// CHECK: gpu.launch_func @spin_kernels::@spin_score_dense_0 blocks in (%c16{{(_[0-9]+)?}}, %c1{{(_[0-9]+)?}}, %c1{{(_[0-9]+)?}})
// CHECK: gpu.launch_func @spin_kernels::@spin_topk_1 blocks in (%c2{{(_[0-9]+)?}}, %c1{{(_[0-9]+)?}}, %c1{{(_[0-9]+)?}}) threads in (%c512
// CHECK: gpu.func @spin_topk_1({{.*}}) kernel attributes {{{.*}}nvvm.cluster_dim = array<i32: 2, 1, 1>
// FIXED-LABEL: func.func @row1_16k(
// FIXED: gpu.launch_func @spin_kernels::@spin_score_dense_0 blocks in (%c8{{(_[0-9]+)?}}, %c1{{(_[0-9]+)?}}, %c1{{(_[0-9]+)?}})
func.func @row1_16k(%q: tensor<1x1x64x128xbf16>, %w: tensor<1x1x64xf32>,
                    %keys: tensor<?x64x128xbf16>, %table: tensor<1x256xi32>,
                    %lengths: tensor<1x1xi32>) -> tensor<1x1x512xi32> {
  %z = spin.dense_indexer q(%q : tensor<1x1x64x128xbf16>)
      w(%w : tensor<1x1x64xf32>) keys(%keys : tensor<?x64x128xbf16>)
      block_table(%table : tensor<1x256xi32>)
      lengths(%lengths : tensor<1x1xi32>) -> tensor<1x1x16384xf32>
  %t = spin.topk %z lengths(%lengths : tensor<1x1xi32>) {k = 512 : i64}
      : tensor<1x1x16384xf32> -> tensor<1x1x512xi32>
  return %t : tensor<1x1x512xi32>
}

// -----

// 16 rows of 104896 slots (1639 pages): 25 tiles give 33 x 16 = 528 CTAs,
// two full waves (32 tiles would leave the second wave mostly empty).
// CHECK-LABEL: func.func @rows16_105k(
// CHECK: gpu.launch_func @spin_kernels::@spin_score_dense_0 blocks in (%c33{{(_[0-9]+)?}}, %c16{{(_[0-9]+)?}}, %c1{{(_[0-9]+)?}})
// On 148 SMs (296 CTAs a wave) 46 tiles fit all rows in one wave of
// 18 x 16 CTAs.
// SM148-LABEL: func.func @rows16_105k(
// SM148: gpu.launch_func @spin_kernels::@spin_score_dense_0 blocks in (%c18{{(_[0-9]+)?}}, %c16{{(_[0-9]+)?}}, %c1{{(_[0-9]+)?}})
// FIXED-LABEL: func.func @rows16_105k(
// FIXED: gpu.launch_func @spin_kernels::@spin_score_dense_0 blocks in (%c52{{(_[0-9]+)?}}, %c16{{(_[0-9]+)?}}, %c1{{(_[0-9]+)?}})
func.func @rows16_105k(%q: tensor<16x1x64x128xbf16>, %w: tensor<16x1x64xf32>,
                       %keys: tensor<?x64x128xbf16>, %table: tensor<16x1639xi32>,
                       %lengths: tensor<16x1xi32>) -> tensor<16x1x512xi32> {
  %z = spin.dense_indexer q(%q : tensor<16x1x64x128xbf16>)
      w(%w : tensor<16x1x64xf32>) keys(%keys : tensor<?x64x128xbf16>)
      block_table(%table : tensor<16x1639xi32>)
      lengths(%lengths : tensor<16x1xi32>) -> tensor<16x1x104896xf32>
  %t = spin.topk %z lengths(%lengths : tensor<16x1xi32>) {k = 512 : i64}
      : tensor<16x1x104896xf32> -> tensor<16x1x512xi32>
  return %t : tensor<16x1x512xi32>
}
