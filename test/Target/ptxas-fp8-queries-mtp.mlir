// REQUIRES: ptxas
// RUN: rm -rf %t && spin-compile %s --function=mtp --target=sm_90a,sm_100a,sm_103a -o %t
// RUN: %ptxas -arch=sm_90a %t/sm_90a.ptx -o %t/sm_90a.cubin
// RUN: %ptxas -arch=sm_100a %t/sm_100a.ptx -o %t/sm_100a.cubin
// RUN: %ptxas -arch=sm_103a %t/sm_103a.ptx -o %t/sm_103a.cubin
// RUN: FileCheck %s --dump-input=never --check-prefix=MTP < %t/sm_90a.ptx
// RUN: FileCheck %s --dump-input=never --check-prefix=SYNC < %t/sm_100a.ptx
// RUN: FileCheck %s --dump-input=never --check-prefix=SYNC < %t/sm_103a.ptx
// RUN: rm -rf %t.sync && spin-compile %s --function=mtp --target=sm_90a --no-wgmma -o %t.sync && %ptxas -arch=sm_90a %t.sync/sm_90a.ptx -o %t.sync/sm_90a.cubin
// RUN: FileCheck %s --dump-input=never --check-prefix=SYNC < %t.sync/sm_90a.ptx
// RUN: rm -rf %t.h8 && spin-compile %s --function=mtp_h8 --target=sm_90a,sm_100a -o %t.h8
// RUN: %ptxas -arch=sm_90a %t.h8/sm_90a.ptx -o %t.h8/sm_90a.cubin
// RUN: %ptxas -arch=sm_100a %t.h8/sm_100a.ptx -o %t.h8/sm_100a.cubin
// RUN: FileCheck %s --dump-input=never --check-prefix=H8 < %t.h8/sm_90a.ptx

// MTP with fp8 e4m3 queries and keys (ptxas-fp8-queries.mlir for one row):
// a scoring CTA scores every query row of its request (R = 2), each key
// tile loaded once and multiplied by the queries of both rows, on e4m3
// tensor cores. A wgmma chain covers min(R, 64 / H) rows (N = rows x H):
// with H = 64 each row is a chain of its own (N = 64, four k32 steps for
// Dh = 128), the two chains reading the same A registers (the key tile),
// each ended by its commit and wait before its row's epilogue. mma.sync
// (sm_100a, sm_103a, sm_90a --no-wgmma): 32 m16n8k32 a row, 64 in all.
// With H = 8 both rows are one chain of N = 16.

// MTP-LABEL: .entry spin_score_dense_0(
// MTP-NOT: cvt.rn.f16x2.e4m3x2
// MTP-NOT: mma.sync
// MTP: wgmma.fence.sync.aligned
// MTP: wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {{.*}}}, {[[A0:%r[0-9]+]], [[A1:%r[0-9]+]], [[A2:%r[0-9]+]], [[A3:%r[0-9]+]]}
// MTP-COUNT-3: wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3
// MTP-NOT: wgmma.mma_async
// MTP: wgmma.commit_group.sync.aligned
// MTP-NEXT: wgmma.wait_group.sync.aligned 0
// MTP-NOT: wgmma.mma_async
// MTP: wgmma.fence.sync.aligned
// MTP: wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {{.*}}}, {[[A0]], [[A1]], [[A2]], [[A3]]}
// MTP-COUNT-3: wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3
// MTP-NOT: wgmma.mma_async
// MTP: wgmma.commit_group.sync.aligned
// MTP-NEXT: wgmma.wait_group.sync.aligned 0
// MTP-NOT: wgmma.mma_async
// MTP-NOT: mma.sync
// MTP-NOT: cvt.rn.f16x2.e4m3x2
// MTP-LABEL: .entry spin_topk_1(

// SYNC-LABEL: .entry spin_score_dense_0(
// SYNC-NOT: wgmma
// SYNC-NOT: cvt.rn.f16x2.e4m3x2
// SYNC-COUNT-64: mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32
// SYNC-NOT: mma.sync
// SYNC-NOT: wgmma
// SYNC-LABEL: .entry spin_topk_1(

// H = 8: one chain of four m64n16k32 (no commit between them), and no other.
// H8: wgmma.mma_async.sync.aligned.m64n16k32.f32.e4m3.e4m3
// H8-NOT: wgmma.commit_group
// H8: wgmma.mma_async.sync.aligned.m64n16k32.f32.e4m3.e4m3
// H8-NOT: wgmma.commit_group
// H8: wgmma.mma_async.sync.aligned.m64n16k32.f32.e4m3.e4m3
// H8-NOT: wgmma.commit_group
// H8: wgmma.mma_async.sync.aligned.m64n16k32.f32.e4m3.e4m3
// H8-NOT: wgmma.mma_async
// H8: wgmma.commit_group.sync.aligned
// H8-NEXT: wgmma.wait_group.sync.aligned 0
// H8-NOT: wgmma.mma_async.sync.aligned.m64n16k32

func.func @mtp(%q: tensor<2x2x64x128xf8E4M3FN>, %w: tensor<2x2x64xf32>,
               %keys: tensor<?x64x128xf8E4M3FN>, %scales: tensor<?x64xf32>,
               %table: tensor<2x8xi32>, %lengths: tensor<2x2xi32>)
    -> tensor<2x2x64xi32> {
  %z = spin.dense_indexer q(%q : tensor<2x2x64x128xf8E4M3FN>)
      w(%w : tensor<2x2x64xf32>) keys(%keys : tensor<?x64x128xf8E4M3FN>)
      scales(%scales : tensor<?x64xf32>)
      block_table(%table : tensor<2x8xi32>)
      lengths(%lengths : tensor<2x2xi32>) -> tensor<2x2x512xf32>
  %t = spin.topk %z lengths(%lengths : tensor<2x2xi32>) {k = 64 : i64}
      : tensor<2x2x512xf32> -> tensor<2x2x64xi32>
  return %t : tensor<2x2x64xi32>
}

func.func @mtp_h8(%q: tensor<2x2x8x128xf8E4M3FN>, %w: tensor<2x2x8xf32>,
                  %keys: tensor<?x64x128xf8E4M3FN>, %scales: tensor<?x64xf32>,
                  %table: tensor<2x8xi32>, %lengths: tensor<2x2xi32>)
    -> tensor<2x2x64xi32> {
  %z = spin.dense_indexer q(%q : tensor<2x2x8x128xf8E4M3FN>)
      w(%w : tensor<2x2x8xf32>) keys(%keys : tensor<?x64x128xf8E4M3FN>)
      scales(%scales : tensor<?x64xf32>)
      block_table(%table : tensor<2x8xi32>)
      lengths(%lengths : tensor<2x2xi32>) -> tensor<2x2x512xf32>
  %t = spin.topk %z lengths(%lengths : tensor<2x2xi32>) {k = 64 : i64}
      : tensor<2x2x512xf32> -> tensor<2x2x64xi32>
  return %t : tensor<2x2x64xi32>
}
