// REQUIRES: ptxas
// RUN: rm -rf %t && spin-compile %s --target=sm_90a,sm_100a,sm_103a -o %t 2>&1 | FileCheck %s --check-prefix=LOG
// RUN: %ptxas -arch=sm_90a %t/sm_90a.ptx -o %t/sm_90a.cubin
// RUN: %ptxas -arch=sm_100a %t/sm_100a.ptx -o %t/sm_100a.cubin
// RUN: %ptxas -arch=sm_103a %t/sm_103a.ptx -o %t/sm_103a.cubin
// RUN: FileCheck %s --dump-input=never --check-prefix=WGMMA < %t/sm_90a.ptx
// RUN: FileCheck %s --dump-input=never --check-prefix=SYNC < %t/sm_100a.ptx
// RUN: FileCheck %s --dump-input=never --check-prefix=SYNC < %t/sm_103a.ptx
// RUN: FileCheck %s --check-prefix=MANIFEST < %t/manifest.json
// RUN: rm -rf %t.sync && spin-compile %s --target=sm_90a --no-wgmma -o %t.sync && %ptxas -arch=sm_90a %t.sync/sm_90a.ptx -o %t.sync/sm_90a.cubin
// RUN: FileCheck %s --dump-input=never --check-prefix=SYNC < %t.sync/sm_90a.ptx
// RUN: rm -rf %t.spin && spin-compile %s --sparsify="sparsity=0.5 block-size=64" --target=sm_90a,sm_100a,sm_103a -o %t.spin
// RUN: %ptxas -arch=sm_90a %t.spin/sm_90a.ptx -o %t.spin/sm_90a.cubin
// RUN: %ptxas -arch=sm_100a %t.spin/sm_100a.ptx -o %t.spin/sm_100a.cubin
// RUN: %ptxas -arch=sm_103a %t.spin/sm_103a.ptx -o %t.spin/sm_103a.cubin
// RUN: FileCheck %s --dump-input=never --check-prefix=SPIN-WGMMA < %t.spin/sm_90a.ptx
// RUN: FileCheck %s --dump-input=never --check-prefix=SPIN-SYNC < %t.spin/sm_103a.ptx

// fp8 e4m3 queries with fp8 e4m3 keys (SPIN_SPEC §1) multiply on e4m3 tensor
// cores, both operands as they are (no conversion to f16 of the keys or of
// the queries): on sm_90a a wgmma chain m64n<N>k32 with N = rows x heads of
// one chain (H = 64: N = 64; Dh = 128 is four k32 steps), on sm_100a and
// sm_103a (and on sm_90a with --no-wgmma) mma.sync m16n8k32 (Dh = 128 is two
// 64-byte chunks of two k32 steps, for each of the 8 head tiles: 32 a row).
// Every module assembles for its chip; the manifest names q fp8e4m3.

// LOG: spin-compile: wrote {{.*}}manifest.json and 3 PTX module(s)

// WGMMA-LABEL: .entry spin_score_dense_0(
// WGMMA-NOT: cvt.rn.f16x2.e4m3x2
// WGMMA-NOT: mma.sync
// WGMMA: fence.proxy.async.shared::cta
// WGMMA: wgmma.fence.sync.aligned
// WGMMA-COUNT-4: wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3
// WGMMA-NOT: wgmma.mma_async
// WGMMA: wgmma.commit_group.sync.aligned
// WGMMA-NEXT: wgmma.wait_group.sync.aligned 0
// WGMMA-NOT: wgmma.mma_async
// WGMMA-NOT: mma.sync
// WGMMA-NOT: cvt.rn.f16x2.e4m3x2
// WGMMA-LABEL: .entry spin_topk_1(

// SYNC-LABEL: .entry spin_score_dense_0(
// SYNC-NOT: wgmma
// SYNC-NOT: cvt.rn.f16x2.e4m3x2
// SYNC-COUNT-32: mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32
// SYNC-NOT: mma.sync
// SYNC-NOT: wgmma
// SYNC-NOT: cvt.rn.f16x2.e4m3x2
// SYNC-LABEL: .entry spin_topk_1(

// MANIFEST: "name": "q",
// MANIFEST-NEXT: "layer": -1,
// MANIFEST-NEXT: "dtype": "fp8e4m3",
// MANIFEST-NEXT: "shape": [2, 1, 64, 128],
// MANIFEST: "name": "keys",
// MANIFEST-NEXT: "layer": -1,
// MANIFEST-NEXT: "dtype": "fp8e4m3",

// SPIN: the sparse scoring kernel (selected blocks) the same way.
// SPIN-WGMMA-LABEL: .entry spin_score_sparse_{{[0-9]+}}(
// SPIN-WGMMA-NOT: cvt.rn.f16x2.e4m3x2
// SPIN-WGMMA: wgmma.fence.sync.aligned
// SPIN-WGMMA-COUNT-4: wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3
// SPIN-WGMMA-NOT: wgmma.mma_async
// SPIN-WGMMA-NOT: cvt.rn.f16x2.e4m3x2
// SPIN-WGMMA-LABEL: .entry spin_topk_sparse_{{[0-9]+}}(
// SPIN-SYNC-LABEL: .entry spin_score_sparse_{{[0-9]+}}(
// SPIN-SYNC-NOT: wgmma
// SPIN-SYNC-COUNT-32: mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32
// SPIN-SYNC-NOT: mma.sync
// SPIN-SYNC-LABEL: .entry spin_topk_sparse_{{[0-9]+}}(

func.func @dense(%q: tensor<2x1x64x128xf8E4M3FN>, %w: tensor<2x1x64xf32>,
                 %keys: tensor<?x64x128xf8E4M3FN>, %scales: tensor<?x64xf32>,
                 %table: tensor<2x8xi32>, %lengths: tensor<2x1xi32>)
    -> tensor<2x1x64xi32> {
  %z = spin.dense_indexer q(%q : tensor<2x1x64x128xf8E4M3FN>)
      w(%w : tensor<2x1x64xf32>) keys(%keys : tensor<?x64x128xf8E4M3FN>)
      scales(%scales : tensor<?x64xf32>)
      block_table(%table : tensor<2x8xi32>)
      lengths(%lengths : tensor<2x1xi32>) -> tensor<2x1x512xf32>
  %t = spin.topk %z lengths(%lengths : tensor<2x1xi32>) {k = 64 : i64}
      : tensor<2x1x512xf32> -> tensor<2x1x64xi32>
  return %t : tensor<2x1x64xi32>
}
