// REQUIRES: ptxas
// RUN: rm -rf %t && spin-compile %s --function=mtp --copy-warpgroup --target=sm_90a -o %t
// RUN: %ptxas -arch=sm_90a -v %t/sm_90a.ptx -o %t/sm_90a.cubin 2>&1 | FileCheck %s --check-prefix=REGS2
// RUN: rm -rf %t.r1 && spin-compile %s --function=one_row --copy-warpgroup --target=sm_90a -o %t.r1
// RUN: %ptxas -arch=sm_90a -v %t.r1/sm_90a.ptx -o %t.r1/sm_90a.cubin 2>&1 | FileCheck %s --check-prefix=REGS1
// RUN: FileCheck %s --dump-input=never --check-prefix=WS < %t/sm_90a.ptx
// RUN: FileCheck %s --dump-input=never --check-prefix=ONE < %t.r1/sm_90a.ptx
// RUN: FileCheck %s --dump-input=never --check-prefix=MANIFEST < %t/manifest.json
// RUN: not spin-compile %s --function=mtp --copy-warpgroup --target=sm_90a,sm_100a -o %t.chips 2>&1 | FileCheck %s --check-prefix=CHIPS
// RUN: not spin-compile %s --function=mtp --copy-warpgroup --no-wgmma --target=sm_90a -o %t.sync 2>&1 | FileCheck %s --check-prefix=NOWG
// RUN: not spin-compile %s --function=mtp --copy-warpgroup --fused-fp8-pages --target=sm_90a -o %t.fused 2>&1 | FileCheck %s --check-prefix=FUSED
// RUN: rm -rf %t.spin && spin-compile %s --function=mtp --sparsify="sparsity=0.5 block-size=64" --target=sm_90a -o %t.spin
// RUN: %ptxas -arch=sm_90a -v %t.spin/sm_90a.ptx -o %t.spin/sm_90a.cubin 2>&1 | FileCheck %s --check-prefix=SPREGS
// RUN: FileCheck %s --dump-input=never --check-prefix=SPARSE < %t.spin/sm_90a.ptx
// RUN: FileCheck %s --dump-input=never --check-prefix=SPMANIFEST < %t.spin/manifest.json
// RUN: rm -rf %t.spin32 && spin-compile %s --function=mtp --sparsify="sparsity=0.5 block-size=32" --copy-warpgroup --target=sm_90a -o %t.spin32
// RUN: FileCheck %s --dump-input=never --check-prefix=SPARSE32 < %t.spin32/sm_90a.ptx
// RUN: rm -rf %t.spin.fused && not spin-compile %s --function=mtp --sparsify="sparsity=0.5 block-size=64" --copy-warpgroup --fused-fp8-pages --target=sm_90a -o %t.spin.fused 2>&1 | FileCheck %s --check-prefix=SPFUSED
// RUN: rm -rf %t.pre && spin-compile %s --function=one_row_long --sparsify="sparsity=0.5 block-size=64" --sm-count=3 --target=sm_90a -o %t.pre
// RUN: %ptxas -arch=sm_90a %t.pre/sm_90a.ptx -o %t.pre/sm_90a.cubin
// RUN: FileCheck %s --dump-input=never --check-prefix=PREFETCH < %t.pre/sm_90a.ptx
// RUN: rm -rf %t.bf16 && spin-compile %s --function=mtp_bf16 --copy-warpgroup --target=sm_90a -o %t.bf16
// RUN: FileCheck %s --dump-input=never --check-prefix=BF16 < %t.bf16/sm_90a.ptx
// RUN: rm -rf %t.auto && spin-compile %s --function=one_row --target=sm_90a -o %t.auto
// RUN: FileCheck %s --dump-input=never --check-prefix=ONE < %t.auto/sm_90a.ptx
// RUN: rm -rf %t.auto2 && spin-compile %s --function=mtp --target=sm_90a -o %t.auto2
// RUN: FileCheck %s --dump-input=never --check-prefix=WS < %t.auto2/sm_90a.ptx
// RUN: rm -rf %t.auto3 && spin-compile %s --function=three_rows --target=sm_90a -o %t.auto3
// RUN: FileCheck %s --dump-input=never --check-prefix=OTHER < %t.auto3/sm_90a.ptx
// RUN: rm -rf %t.auto4 && spin-compile %s --function=four_rows --target=sm_90a -o %t.auto4
// RUN: FileCheck %s --dump-input=never --check-prefix=FOUR < %t.auto4/sm_90a.ptx
// RUN: %ptxas -arch=sm_90a -v %t.auto4/sm_90a.ptx -o %t.auto4/sm_90a.cubin 2>&1 | FileCheck %s --check-prefix=REGS4
// RUN: rm -rf %t.off && spin-compile %s --function=one_row --no-copy-warpgroup --target=sm_90a -o %t.off
// RUN: FileCheck %s --dump-input=never --check-prefix=OTHER < %t.off/sm_90a.ptx
// RUN: rm -rf %t.mixed && spin-compile %s --function=one_row --target=sm_90a,sm_100a -o %t.mixed
// RUN: FileCheck %s --dump-input=never --check-prefix=OTHER < %t.mixed/sm_90a.ptx
// RUN: not spin-compile %s --function=one_row --copy-warpgroup --no-copy-warpgroup --target=sm_90a -o %t.both 2>&1 | FileCheck %s --check-prefix=BOTH

// Dense fp8 scoring by a copying warpgroup and several multiplying ones
// (--copy-warpgroup, #spin.score_config copy_warpgroup), the ring in
// dynamic shared memory. Warpgroup 0 gives up registers; lane 0 of its
// warp k fills multiplier k's ring of four stages: per 64-slot tile one
// tensor copy of the key rows (3-D tensor map, the copy engine writing the
// 128-byte swizzle) and one of their scales (2-D), both completing on the
// stage's full mbarrier by their 8448 bytes. The multipliers take the
// registers, wait for the stage, multiply with both operands from shared
// memory (keys as A, M = 64; the rows' queries as B, four k32 steps) and
// release the stage. The tensor maps are 128-byte parameters in the
// parameter space. Two rows (N = 128): three multipliers, 128 registers a
// thread at launch, 152 after setmaxnreg; one row (N = 64): four, 96 and
// 104 (65536 over the threads; setmaxnreg moves registers within it, and
// ptxas allocates up to the increased count after it). Chips without
// wgmma would need a launch plan of their own, which one manifest cannot
// hold: refused.

// WS-LABEL: .entry spin_score_dense_0(
// WS: .param .align 64 .b8 spin_score_dense_0_param_9[128],
// WS-NEXT: .param .align 64 .b8 spin_score_dense_0_param_10[128]
// WS: .maxntid 512, 1, 1
// WS-NEXT: .minnctapersm 1
// WS: cvta.param.u64
// WS-COUNT-12: mbarrier.init.shared::cta.b64 [%r{{[0-9]+}}], {{[14]}};
// WS: fence.mbarrier_init.release.cluster;
// WS: fence.proxy.async.shared::cta;
// WS: setmaxnreg.dec.sync.aligned.u32 40;
// WS: mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r{{[0-9]+}}], 8448;
// Dense scoring keeps the default L2 policy (no cache hint).
// WS-NOT: createpolicy
// WS: cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [
// WS: cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [
// WS-NOT: createpolicy
// WS: setmaxnreg.inc.sync.aligned.u32 152;
// WS: mbarrier.try_wait.parity.shared::cta.b64
// WS: wgmma.fence.sync.aligned;
// WS-COUNT-4: wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {{.*}}}, %rd{{[0-9]+}}, %rd{{[0-9]+}}, p, 1, 1;
// WS-NOT: wgmma.mma_async
// WS: wgmma.commit_group.sync.aligned;
// The scales are read and checked while the MMAs run.
// WS: vote.sync.ballot.b32
// WS: wgmma.wait_group.sync.aligned{{[[:space:]]+}}0;
// WS: mbarrier.arrive.shared::cta.b64
// WS-NOT: wgmma.mma_async
// A group's sums of its four (row, thread row) pairs end one in each of
// its lanes: three shuffles and one store a lane, not two and one each.
// WS-COUNT-3: shfl.sync.bfly.b32
// WS-NOT: shfl.sync
// WS: st.global.b32
// WS-NOT: st.global
// WS: bra.uni
// WS-LABEL: .entry spin_topk_1(
// No thread copies key rows itself.
// WS-NOT: cp.async.cg

// ONE-LABEL: .entry spin_score_dense_0(
// ONE: .maxntid 640, 1, 1
// ONE-COUNT-16: mbarrier.init.shared::cta.b64 [%r{{[0-9]+}}], {{[14]}};
// ONE: setmaxnreg.inc.sync.aligned.u32 104;
// ONE-COUNT-4: wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3

// The declared bound makes ptxas allocate the launch's share a thread,
// which the copier's and multipliers' counts add up to; no spills.
// REGS2: Compiling entry function 'spin_score_dense_0'
// REGS2-NEXT: Function properties for spin_score_dense_0
// REGS2-NEXT: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
// REGS2-NEXT: Used 128 registers
// REGS1: Compiling entry function 'spin_score_dense_0'
// REGS1-NEXT: Function properties for spin_score_dense_0
// REGS1-NEXT: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
// REGS1-NEXT: Used 96 registers

// Four rows (N = 256): two multipliers (168 registers at launch, 232
// after setmaxnreg), each tile's MMAs in two chains of two rows (N = 128)
// committed apart, so that the first chain's epilogue runs while the
// second one's MMAs do; the stage is released after the second wait.
// FOUR-LABEL: .entry spin_score_dense_0(
// FOUR: .maxntid 384, 1, 1
// FOUR: setmaxnreg.inc.sync.aligned.u32 232;
// FOUR-COUNT-4: wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3
// FOUR-NOT: wgmma.mma_async
// FOUR: wgmma.commit_group.sync.aligned;
// FOUR-COUNT-4: wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3
// FOUR-NOT: wgmma.mma_async
// FOUR: wgmma.commit_group.sync.aligned;
// FOUR-NOT: wgmma.mma_async
// FOUR: wgmma.wait_group.sync.aligned{{[[:space:]]+}}1;
// FOUR: st.global.b32
// FOUR: wgmma.wait_group.sync.aligned{{[[:space:]]+}}0;
// FOUR: mbarrier.arrive.shared::cta.b64
// FOUR: st.global.b32
// FOUR-LABEL: .entry spin_topk_1(
// REGS4: Compiling entry function 'spin_score_dense_0'
// REGS4-NEXT: Function properties for spin_score_dense_0
// REGS4-NEXT: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
// REGS4-NEXT: Used 168 registers

// By default the copying warpgroup scores where it measured faster: one,
// two or four rows of 64 heads (ONE, WS and FOUR above, without the
// option); three rows, the option off, or a target without wgmma keep
// the other kernel.
// OTHER-LABEL: .entry spin_score_dense_0(
// OTHER: .maxntid 256, 1, 1
// OTHER-NOT: setmaxnreg
// OTHER-LABEL: .entry spin_topk_1(
// BOTH: error: --copy-warpgroup and --no-copy-warpgroup exclude each other

// CHIPS: error: the copying warpgroup (copy-warpgroup) scores with wgmma: every target chip must be sm_90a, without --no-wgmma or m-tiles > 1 (got sm_100a)
// FUSED: 'spin.dense_indexer' op GPU path: copy_warpgroup reads the compact key cache (not fused-fp8-pages)
// NOWG: error: the copying warpgroup (copy-warpgroup) scores with wgmma: every target chip must be sm_90a, without --no-wgmma or m-tiles > 1 (got sm_90a)

// 1024 (alignment) + 2 x 64 x 128 (queries) + 12 x (8192 + 256) (rings)
// + 24 x 8 (mbarriers) bytes of dynamic shared memory; the launch passes
// the tensor maps of the keys and scales (step arguments 2 and 3).
// MANIFEST: "kernels": [
// MANIFEST-NEXT: {
// MANIFEST-NEXT: "name": "spin_score_dense_0",
// MANIFEST-NEXT: "block": [512, 1, 1],
// MANIFEST-NEXT: "shared_bytes": 118976
// MANIFEST: "kernel": "spin_score_dense_0",
// MANIFEST: "kind": "errors"
// MANIFEST-NEXT: },
// MANIFEST-NEXT: {
// MANIFEST-NEXT: "kind": "tensor_map",
// MANIFEST-NEXT: "argument": 2,
// MANIFEST-NEXT: "rows": 64
// MANIFEST-NEXT: },
// MANIFEST-NEXT: {
// MANIFEST-NEXT: "kind": "tensor_map",
// MANIFEST-NEXT: "argument": 3,
// MANIFEST-NEXT: "rows": 64

// A SPIN step's sparse scoring of 64-slot blocks takes the same kernel (by
// default, as the dense one): a 64-slot tile is one selected block's, its
// page looked up through the block list. The ring is set up and the queries
// staged before the grid wait, while the select kernel runs; the block
// list and counts are read after it. No spills at two rows.
// SPARSE-LABEL: .entry spin_score_sparse_2(
// SPARSE: .param .align 64 .b8 spin_score_sparse_2_param_13[128],
// SPARSE-NEXT: .param .align 64 .b8 spin_score_sparse_2_param_14[128]
// SPARSE: .maxntid 512, 1, 1
// SPARSE-COUNT-12: mbarrier.init.shared::cta.b64 [%r{{[0-9]+}}], {{[14]}};
// SPARSE: fence.proxy.async.shared::cta;
// SPARSE: bar.sync 0;
// SPARSE: griddepcontrol.wait;
// SPARSE: setmaxnreg.dec.sync.aligned.u32 40;
// Sparse scoring (#spin.score_config evict_first): keys and scales leave
// the L2 first, so that the scores stay there for the top-K and the
// observe kernel.
// SPARSE: createpolicy.fractional.L2::evict_first.b64 [[POLICY:[a-z0-9%]+]], 1.0;
// SPARSE-NEXT: cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint [{{.*}}], [{{.*}}], [{{.*}}], [[POLICY]];
// SPARSE: createpolicy.fractional.L2::evict_first.b64 [[POLICY2:[a-z0-9%]+]], 1.0;
// SPARSE-NEXT: cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint [{{.*}}], [{{.*}}], [{{.*}}], [[POLICY2]];
// SPARSE: setmaxnreg.inc.sync.aligned.u32 152;
// SPARSE-LABEL: .entry spin_topk_sparse_3(
// SPREGS: Function properties for spin_score_sparse_2
// SPREGS-NEXT: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
// SPMANIFEST: "kernel": "spin_score_sparse_2",
// SPMANIFEST: "kind": "tensor_map",
// SPMANIFEST-NEXT: "argument": 2,
// SPMANIFEST: "kind": "tensor_map",
// SPMANIFEST-NEXT: "argument": 3,
// A single-row step whose selection lets the scoring start before its
// wait (a predict grid of more CTAs than SMs: 4 on 3): the copying
// warpgroup's CTA prefetches its first tiles where the previous step's
// list put them, before the wait.
// PREFETCH-LABEL: .entry spin_score_sparse_1(
// PREFETCH: .param .align 64 .b8 spin_score_sparse_1_param_16[128]
// PREFETCH: .maxntid 640, 1, 1
// PREFETCH: prefetch.global.L2
// PREFETCH: griddepcontrol.wait;
// PREFETCH: setmaxnreg.dec.sync.aligned.u32 40;
// SPFUSED: 'spin.fused_score' op GPU path: copy_warpgroup reads the compact key cache (not fused-fp8-pages)
// The option applies where the kernel does: blocks of 32 slots (a tile
// would span two blocks) and bf16 queries keep the other kernels (256
// threads, no setmaxnreg).
// SPARSE32-LABEL: .entry spin_score_sparse_2(
// SPARSE32: .maxntid 256, 1, 1
// SPARSE32-NOT: setmaxnreg
// SPARSE32-LABEL: .entry spin_topk_sparse_3(
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

func.func @three_rows(%q: tensor<2x3x64x128xf8E4M3FN>, %w: tensor<2x3x64xf32>,
                     %keys: tensor<?x64x128xf8E4M3FN>, %scales: tensor<?x64xf32>,
                     %table: tensor<2x8xi32>, %lengths: tensor<2x3xi32>)
    -> tensor<2x3x64xi32> {
  %z = spin.dense_indexer q(%q : tensor<2x3x64x128xf8E4M3FN>)
      w(%w : tensor<2x3x64xf32>) keys(%keys : tensor<?x64x128xf8E4M3FN>)
      scales(%scales : tensor<?x64xf32>)
      block_table(%table : tensor<2x8xi32>)
      lengths(%lengths : tensor<2x3xi32>) -> tensor<2x3x512xf32>
  %t = spin.topk %z lengths(%lengths : tensor<2x3xi32>) {k = 64 : i64}
      : tensor<2x3x512xf32> -> tensor<2x3x64xi32>
  return %t : tensor<2x3x64xi32>
}

func.func @four_rows(%q: tensor<2x4x64x128xf8E4M3FN>, %w: tensor<2x4x64xf32>,
                    %keys: tensor<?x64x128xf8E4M3FN>, %scales: tensor<?x64xf32>,
                    %table: tensor<2x8xi32>, %lengths: tensor<2x4xi32>)
    -> tensor<2x4x64xi32> {
  %z = spin.dense_indexer q(%q : tensor<2x4x64x128xf8E4M3FN>)
      w(%w : tensor<2x4x64xf32>) keys(%keys : tensor<?x64x128xf8E4M3FN>)
      scales(%scales : tensor<?x64xf32>)
      block_table(%table : tensor<2x8xi32>)
      lengths(%lengths : tensor<2x4xi32>) -> tensor<2x4x512xf32>
  %t = spin.topk %z lengths(%lengths : tensor<2x4xi32>) {k = 64 : i64}
      : tensor<2x4x512xf32> -> tensor<2x4x64xi32>
  return %t : tensor<2x4x64xi32>
}

func.func @one_row_long(%q: tensor<2x1x64x128xf8E4M3FN>, %w: tensor<2x1x64xf32>,
                        %keys: tensor<?x64x128xf8E4M3FN>, %scales: tensor<?x64xf32>,
                        %table: tensor<2x128xi32>, %lengths: tensor<2x1xi32>)
    -> tensor<2x1x64xi32> {
  %z = spin.dense_indexer q(%q : tensor<2x1x64x128xf8E4M3FN>)
      w(%w : tensor<2x1x64xf32>) keys(%keys : tensor<?x64x128xf8E4M3FN>)
      scales(%scales : tensor<?x64xf32>)
      block_table(%table : tensor<2x128xi32>)
      lengths(%lengths : tensor<2x1xi32>) -> tensor<2x1x8192xf32>
  %t = spin.topk %z lengths(%lengths : tensor<2x1xi32>) {k = 64 : i64}
      : tensor<2x1x8192xf32> -> tensor<2x1x64xi32>
  return %t : tensor<2x1x64xi32>
}
