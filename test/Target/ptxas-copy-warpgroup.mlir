// REQUIRES: ptxas
// RUN: rm -rf %t && spin-compile %s --function=mtp --copy-warpgroup --target=sm_90a -o %t
// RUN: %ptxas -arch=sm_90a -v %t/sm_90a.ptx -o %t/sm_90a.cubin 2>&1 | FileCheck %s --check-prefix=REGS
// RUN: rm -rf %t.r1 && spin-compile %s --function=one_row --copy-warpgroup --target=sm_90a -o %t.r1
// RUN: %ptxas -arch=sm_90a -v %t.r1/sm_90a.ptx -o %t.r1/sm_90a.cubin 2>&1 | FileCheck %s --check-prefix=REGS
// RUN: FileCheck %s --dump-input=never --check-prefix=WS < %t/sm_90a.ptx
// RUN: FileCheck %s --dump-input=never --check-prefix=COPY < %t/sm_90a.ptx
// RUN: grep -c "cp.async.cg.shared.global" %t/sm_90a.ptx | FileCheck %s --check-prefix=CG
// RUN: FileCheck %s --dump-input=never --check-prefix=MANIFEST < %t/manifest.json
// RUN: not spin-compile %s --function=mtp --copy-warpgroup --target=sm_90a,sm_100a -o %t.chips 2>&1 | FileCheck %s --check-prefix=CHIPS
// RUN: not spin-compile %s --function=mtp --copy-warpgroup --no-wgmma --target=sm_90a -o %t.sync 2>&1 | FileCheck %s --check-prefix=NOWG
// RUN: rm -rf %t.spin && spin-compile %s --function=mtp --sparsify="sparsity=0.5 block-size=64" --copy-warpgroup --target=sm_90a -o %t.spin && %ptxas -arch=sm_90a %t.spin/sm_90a.ptx -o %t.spin/sm_90a.cubin
// RUN: FileCheck %s --dump-input=never --check-prefix=SPARSE < %t.spin/sm_90a.ptx
// RUN: rm -rf %t.bf16 && spin-compile %s --function=mtp_bf16 --copy-warpgroup --target=sm_90a -o %t.bf16
// RUN: FileCheck %s --dump-input=never --check-prefix=BF16 < %t.bf16/sm_90a.ptx

// Dense fp8 scoring by a copying warpgroup and two multiplying ones
// (--copy-warpgroup, #spin.score_config copy_warpgroup): 384 threads and
// the ring in dynamic shared memory. Warpgroup 0 gives up registers,
// copies each 64-slot tile's key rows (four 16-byte cp.async a thread)
// and scales, and arrives on the stage's full mbarrier when they land;
// warpgroups 1 and 2 take more registers, wait for the stage, fence the
// copies into the async proxy, multiply with both operands from shared
// memory (keys as A, M = 64; both rows' queries as B, N = 2 x 64 = 128,
// four k32 steps) and release the stage. Chips without wgmma would need a
// launch plan of their own, which one manifest cannot hold: refused.

// WS-LABEL: .entry spin_score_dense_0(
// WS: .maxntid 384, 1, 1
// WS-NEXT: .minnctapersm 1
// WS-COUNT-8: mbarrier.init.shared::cta.b64 [%r{{[0-9]+}}], 128;
// WS: fence.proxy.async.shared::cta;
// WS: setmaxnreg.dec.sync.aligned.u32 40;
// WS: setmaxnreg.inc.sync.aligned.u32 232;
// WS: mbarrier.try_wait.parity.shared::cta.b64
// WS: fence.proxy.async.shared::cta;
// WS: wgmma.fence.sync.aligned;
// WS-COUNT-4: wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {{.*}}}, %rd{{[0-9]+}}, %rd{{[0-9]+}}, p, 1, 1;
// WS-NOT: wgmma.mma_async
// WS: wgmma.commit_group.sync.aligned;
// WS-NEXT: wgmma.wait_group.sync.aligned{{[[:space:]]+}}0;
// WS: mbarrier.arrive.shared::cta.b64
// WS-NOT: wgmma.mma_async
// WS-LABEL: .entry spin_topk_1(

// setmaxnreg moves registers within the launch allocation: the declared
// bound makes ptxas allocate the 168 a thread that 40 x 128 + 232 x 256
// needs, also for one row, whose kernel needs far fewer.
// REGS: Compiling entry function 'spin_score_dense_0'
// REGS: Used 168 registers

// The copier's blocks, in whatever order the code generator lays them out.
// COPY-LABEL: .entry spin_score_dense_0(
// COPY-DAG: cp.async.ca.shared.global [{{[^]]+}}], [%rd{{[0-9]+}}], 4, %r{{[0-9]+}};
// COPY-DAG: cp.async.mbarrier.arrive.noinc.shared::cta.b64
// COPY-DAG: cp.async.wait_all;
// COPY-LABEL: .entry spin_topk_1(
// Four 16-byte copies a thread per tile (512 chunks of the 8 KiB tile).
// CG: 4

// CHIPS: error: the copying warpgroup (copy-warpgroup) scores with wgmma: every target chip must be sm_90a, without --no-wgmma or m-tiles > 1 (got sm_100a)
// NOWG: error: the copying warpgroup (copy-warpgroup) scores with wgmma: every target chip must be sm_90a, without --no-wgmma or m-tiles > 1 (got sm_90a)

// 1024 (alignment) + 2 x 64 x 128 (queries) + 8 x (8192 + 256) (ring) +
// 16 x 8 (mbarriers) bytes of dynamic shared memory.
// MANIFEST: "kernels": [
// MANIFEST-NEXT: {
// MANIFEST-NEXT: "name": "spin_score_dense_0",
// MANIFEST-NEXT: "block": [384, 1, 1],
// MANIFEST-NEXT: "shared_bytes": 85120

// The option applies where the kernel does: a SPIN step's sparse scoring
// and bf16 queries keep the other kernels (256 threads, no setmaxnreg).
// SPARSE-LABEL: .entry spin_score_sparse_2(
// SPARSE: .maxntid 256, 1, 1
// SPARSE-NOT: setmaxnreg
// SPARSE-LABEL: .entry spin_topk_sparse_3(
// BF16-LABEL: .entry spin_score_dense_0(
// BF16: .maxntid 256, 1, 1
// BF16-NOT: setmaxnreg
// BF16-LABEL: .entry spin_topk_1(

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

func.func @mtp_bf16(%q: tensor<2x2x64x128xbf16>, %w: tensor<2x2x64xf32>,
                    %keys: tensor<?x64x128xf8E4M3FN>, %scales: tensor<?x64xf32>,
                    %table: tensor<2x8xi32>, %lengths: tensor<2x2xi32>)
    -> tensor<2x2x64xi32> {
  %z = spin.dense_indexer q(%q : tensor<2x2x64x128xbf16>)
      w(%w : tensor<2x2x64xf32>) keys(%keys : tensor<?x64x128xf8E4M3FN>)
      scales(%scales : tensor<?x64xf32>)
      block_table(%table : tensor<2x8xi32>)
      lengths(%lengths : tensor<2x2xi32>) -> tensor<2x2x512xf32>
  %t = spin.topk %z lengths(%lengths : tensor<2x2xi32>) {k = 64 : i64}
      : tensor<2x2x512xf32> -> tensor<2x2x64xi32>
  return %t : tensor<2x2x64xi32>
}

func.func @one_row(%q: tensor<2x1x64x128xf8E4M3FN>, %w: tensor<2x1x64xf32>,
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
