// REQUIRES: ptxas
// RUN: rm -rf %t && spin-compile %s --target=sm_90a,sm_100a,sm_103a -o %t
// RUN: %ptxas -arch=sm_90a %t/sm_90a.ptx -o %t/sm_90a.cubin
// RUN: %ptxas -arch=sm_100a %t/sm_100a.ptx -o %t/sm_100a.cubin
// RUN: %ptxas -arch=sm_103a %t/sm_103a.ptx -o %t/sm_103a.cubin
// RUN: FileCheck %s --dump-input=never < %t/sm_90a.ptx
// RUN: FileCheck %s --dump-input=never < %t/sm_103a.ptx

// K = 2048 over rows of 128K slots: the top-K by merge ranks, 512 threads
// in clusters of 8 (docs/GPU-ABI.md). After the histogram's two cluster
// barriers, each CTA sorts its slice of the candidates, meets its peers at
// a third barrier, copies their sorted slices with 16-byte loads through
// distributed shared memory and meets them at a fourth before it searches
// its own shared memory.

// CHECK: .entry spin_topk_1
// CHECK: .maxntid 512, 1, 1
// CHECK: .reqnctapercluster 8, 1, 1
// CHECK-COUNT-2: barrier.cluster.wait.aligned
// CHECK: barrier.cluster.wait.aligned
// CHECK: mapa.shared::cluster.u64
// CHECK: ld.shared::cluster.v2.{{[bu]}}64
// CHECK: st.shared.v2.{{[bu]}}64
// CHECK: barrier.cluster.wait.aligned
func.func @merge(%q: tensor<16x1x64x128xbf16> {spin.input = "q"},
                 %w: tensor<16x1x64xf32> {spin.input = "w"},
                 %keys: tensor<?x64x128xf8E4M3FN> {spin.input = "keys"},
                 %scales: tensor<?x64xf32> {spin.input = "scales"},
                 %table: tensor<16x2048xi32> {spin.input = "block_table"},
                 %lengths: tensor<16x1xi32> {spin.input = "lengths"})
    -> tensor<16x1x2048xi32> {
  %z = spin.dense_indexer q(%q : tensor<16x1x64x128xbf16>)
      w(%w : tensor<16x1x64xf32>) keys(%keys : tensor<?x64x128xf8E4M3FN>)
      scales(%scales : tensor<?x64xf32>)
      block_table(%table : tensor<16x2048xi32>)
      lengths(%lengths : tensor<16x1xi32>) -> tensor<16x1x131072xf32>
  %t = spin.topk %z lengths(%lengths : tensor<16x1xi32>) {k = 2048 : i64}
      : tensor<16x1x131072xf32> -> tensor<16x1x2048xi32>
  return %t : tensor<16x1x2048xi32>
}
