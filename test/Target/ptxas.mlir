// REQUIRES: ptxas
// RUN: rm -rf %t && spin-compile %s --sparsify="sparsity=0.5 block-size=16 explore=0.25 reset-input=true" --target=sm_90a,sm_100a,sm_103a -o %t 2>&1 | FileCheck %s --check-prefix=LOG
// RUN: %ptxas -arch=sm_90a %t/sm_90a.ptx -o %t/sm_90a.cubin
// RUN: %ptxas -arch=sm_100a %t/sm_100a.ptx -o %t/sm_100a.cubin
// RUN: %ptxas -arch=sm_103a %t/sm_103a.ptx -o %t/sm_103a.cubin
// RUN: FileCheck %s --dump-input=never --check-prefix=PTX < %t/sm_90a.ptx
// RUN: FileCheck %s --dump-input=never --check-prefix=SYNC < %t/sm_100a.ptx
// RUN: rm -rf %t.sync && spin-compile %s --sparsify="sparsity=0.5 block-size=16" --target=sm_90a --no-wgmma -o %t.sync && %ptxas -arch=sm_90a %t.sync/sm_90a.ptx -o %t.sync/sm_90a.cubin
// RUN: FileCheck %s --dump-input=never --check-prefix=SYNC < %t.sync/sm_90a.ptx
// RUN: FileCheck %s --check-prefix=MANIFEST < %t/manifest.json
// RUN: FileCheck %s --dump-input=never --check-prefix=WAIT < %t/sm_90a.ptx
// RUN: FileCheck %s --dump-input=never --check-prefix=HINT < %t/sm_90a.ptx
// RUN: rm -rf %t.mean && spin-compile %s --sparsify="sparsity=0.5 block-size=16 pooling=mean reset-input=true" --target=sm_90a -o %t.mean && %ptxas -arch=sm_90a %t.mean/sm_90a.ptx -o %t.mean/sm_90a.cubin
// RUN: FileCheck %s --dump-input=never --check-prefix=MEAN < %t.mean/sm_90a.ptx
// RUN: rm -rf %t.big && spin-compile %s --sparsify="sparsity=0.5 block-size=16" --target=sm_90a --sm-count=1 -o %t.big && %ptxas -arch=sm_90a %t.big/sm_90a.ptx -o %t.big/sm_90a.cubin
// RUN: FileCheck %s --dump-input=never --check-prefix=EARLY < %t.big/sm_90a.ptx
// RUN: FileCheck %s --dump-input=never --check-prefix=LATE < %t/sm_90a.ptx
// RUN: rm -rf %t.dense && spin-compile %s --target=sm_90a -o %t.dense && %ptxas -arch=sm_90a %t.dense/sm_90a.ptx -o %t.dense/sm_90a.cubin

// Every generated kernel assembles for every chip and begins with the
// programmatic-launch waits (docs/GPU-ABI.md, "Launch order"); fp8 keys decode into f16
// MMAs (wgmma on sm_90a, B from a shared-memory descriptor after a proxy
// fence; mma.sync on sm_100a, or with --no-wgmma); the EMA update is unfused
// (mul.rn/add.rn: no FMA contraction).

// LOG: spin-compile: wrote {{.*}}manifest.json and 3 PTX module(s)
// PTX: .target sm_90a
// The predict kernel applies the reset flags (no reset kernel with max
// pooling); the kernel of the first launch is a model of all of them.
// PTX: .entry spin_select_1_predict(
// PTX: griddepcontrol.wait;
// PTX-NEXT: // end inline asm
// PTX-NEXT: // begin inline asm
// PTX-NEXT: griddepcontrol.launch_dependents;
// PTX: .entry spin_select_1
// PTX: .entry spin_score_sparse_2
// PTX: fence.proxy.async.shared::cta
// PTX: wgmma.fence.sync.aligned
// PTX: wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16
// PTX: wgmma.commit_group.sync.aligned
// PTX: wgmma.wait_group.sync.aligned 0
// PTX-NOT: mma.sync
// SYNC: .entry spin_score_sparse_{{[0-9]+}}
// SYNC-NOT: wgmma
// SYNC: mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32
// PTX: .entry spin_topk_sparse_3
// PTX: .entry spin_update_4
// PTX-NOT: fma.rn.f32
// PTX: mul.rn.f32
// PTX: add.rn.f32
// Before its griddepcontrol.wait a kernel loads only what the kernel before
// it does not write (setInsertionBeforeGridWait): the select kernel its
// request's slot, id, position and length, and `it` and the prediction
// cache's record after the predict kernel (which writes block scores only);
// the scoring kernel the row's length and
// queries; the top-K the selected-block count (the select kernel's, two
// launches back). The predict kernel loads only the batch's slots there
// (read-only loads: its row's slot, and the earlier rows' to find a
// repeated one), the update kernel nothing.
// The sparse scoring kernel also stages the queries in shared memory there
// (with the bf16 queries' prescale, then wgmma's B layout and its proxy
// fence), loads its head weights and prefetches its request's block-table
// row into L2.
// WAIT-LABEL: .entry spin_select_1_predict(
// WAIT-NOT: ld.global.{{[bfsu][0-9]}}
// WAIT: ld.global.nc.b32
// WAIT-NOT: ld.global.{{[bfsu][0-9]}}
// WAIT: griddepcontrol.wait
// WAIT-LABEL: .entry spin_select_1(
// WAIT: ld.global.nc.b32
// WAIT: ld.global.b64
// A request whose prediction-cache record is this step's skips the wait
// (the predict kernel skips it too): the record's four fields, the
// request's mask zeroed in shared memory, then a branch around the wait.
// WAIT-COUNT-4: ld.global.b32
// WAIT-NOT: ld.global
// WAIT: st.shared.b8
// WAIT: bar.sync
// WAIT-NOT: ld.global
// WAIT: bra
// WAIT-NEXT: // begin inline asm
// WAIT-NEXT: griddepcontrol.wait
// WAIT-LABEL: .entry spin_score_sparse_2(
// WAIT: ld.global.nc.b32
// WAIT: ld.global.nc.v4.b32
// WAIT-NOT: ld.global
// WAIT: st.shared.b32
// WAIT-NOT: ld.global
// WAIT: fence.proxy.async.shared::cta
// WAIT: bar.sync
// WAIT-NOT: griddepcontrol.wait
// WAIT: ld.global.nc.b32
// WAIT-NOT: griddepcontrol.wait
// WAIT: prefetch.global.L2
// WAIT-NOT: ld.global
// WAIT: griddepcontrol.wait
// WAIT-LABEL: .entry spin_topk_sparse_3(
// WAIT: ld.global.nc.b32
// WAIT-NOT: ld.global
// WAIT: griddepcontrol.wait
// WAIT-LABEL: .entry spin_update_4(
// WAIT-NOT: ld.global
// WAIT: griddepcontrol.wait
// The step's predict kernel reads its batch row's hint (volatile: CTA 0
// rewrites it while the others read) with the row's inputs, issues `it`
// and the cache record, and prefetches its blocks' V and D lines into L2
// (taken when the hint says that the last step missed) before it compares
// the record; then CTA 0's thread 0 stores the new hint. The next step's
// prediction neither reads nor prefetches.
// HINT-LABEL: .entry spin_select_1_predict(
// HINT: ld.volatile.global.b32
// HINT: ld.global.b64
// HINT-COUNT-4: ld.global.b32
// HINT-NOT: setp.ne.b32
// HINT: prefetch.global.L2
// HINT-NOT: setp.ne.b32
// HINT: prefetch.global.L2
// HINT: st.volatile.global.b32
// HINT-LABEL: .entry spin_select_1_predict_next(
// HINT-NOT: prefetch.global
// HINT-NOT: volatile
// HINT: ret;
// When the predict grid has more CTAs than --sm-count, the select kernel
// lets the scoring kernel's CTAs start first thing (they load only step
// inputs before their own wait); with a smaller grid it does so after its
// wait, like every other kernel.
// EARLY-LABEL: .entry spin_select_{{[0-9]+}}(
// EARLY-NOT: ld.global
// EARLY: griddepcontrol.launch_dependents
// EARLY: ld.global.nc.b32
// EARLY: griddepcontrol.wait
// LATE-LABEL: .entry spin_select_1(
// LATE-NOT: griddepcontrol.launch_dependents
// LATE: griddepcontrol.wait
// LATE: griddepcontrol.launch_dependents
// With mean pooling no predict kernel runs and the reset kernel, which
// writes `it`, comes directly before the select kernel: `it` is loaded
// after the wait.
// MEAN-LABEL: .entry spin_select_1(
// MEAN-NOT: ld.global.b64
// MEAN: griddepcontrol.wait
// MEAN: ld.global.b64
// MANIFEST: "format": "spin-gpu-artifact"
// MANIFEST: "kernel": "spin_update_4"
// MANIFEST: "stream": 1
// MANIFEST-NEXT: "wait": [0]

func.func @layer(%q: tensor<2x1x16x64xbf16>, %w: tensor<2x1x16xf32>,
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
