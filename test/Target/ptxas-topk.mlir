// REQUIRES: ptxas
// RUN: rm -rf %t && spin-compile %s --target=sm_90a,sm_100a,sm_103a -o %t
// RUN: %ptxas -arch=sm_90a %t/sm_90a.ptx -o %t/sm_90a.cubin
// RUN: %ptxas -arch=sm_100a %t/sm_100a.ptx -o %t/sm_100a.cubin
// RUN: %ptxas -arch=sm_103a %t/sm_103a.ptx -o %t/sm_103a.cubin
// RUN: FileCheck %s --dump-input=never < %t/sm_90a.ptx

// The top-K of a long row runs in one cluster of CTAs per row: the cluster
// size is fixed in the kernel, the CTAs meet at cluster barriers and read
// each other's histogram group sums and bins through distributed shared
// memory (mapa).

// CHECK: .entry spin_topk_1
// CHECK: .reqnctapercluster 8, 1, 1
// CHECK: barrier.cluster.arrive.aligned
// CHECK: barrier.cluster.wait.aligned
// CHECK: mapa.shared::cluster.u64
// CHECK: ld.shared::cluster.b32
// CHECK: barrier.cluster.arrive.aligned
// CHECK: barrier.cluster.wait.aligned
func.func @long(%q: tensor<16x1x64x128xbf16> {spin.input = "q"},
                %w: tensor<16x1x64xf32> {spin.input = "w"},
                %keys: tensor<?x64x128xf8E4M3FN> {spin.input = "keys"},
                %scales: tensor<?x64xf32> {spin.input = "scales"},
                %table: tensor<16x2048xi32> {spin.input = "block_table"},
                %lengths: tensor<16x1xi32> {spin.input = "lengths"})
    -> tensor<16x1x512xi32> {
  %z = spin.dense_indexer q(%q : tensor<16x1x64x128xbf16>)
      w(%w : tensor<16x1x64xf32>) keys(%keys : tensor<?x64x128xf8E4M3FN>)
      scales(%scales : tensor<?x64xf32>)
      block_table(%table : tensor<16x2048xi32>)
      lengths(%lengths : tensor<16x1xi32>) -> tensor<16x1x131072xf32>
  %t = spin.topk %z lengths(%lengths : tensor<16x1xi32>) {k = 512 : i64}
      : tensor<16x1x131072xf32> -> tensor<16x1x512xi32>
  return %t : tensor<16x1x512xi32>
}
