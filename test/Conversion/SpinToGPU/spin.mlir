// RUN: spin-opt %s --spin-sparsify-pipeline="sparsity=0.5 block-size=16 explore=0.25 seed=7 reset-input=true report-sparsity=true" --convert-spin-to-gpu | FileCheck %s
// RUN: spin-opt %s --spin-sparsify-pipeline="sparsity=0.5 block-size=16 explore=0.25 seed=7 reset-input=true report-sparsity=true" --convert-spin-to-gpu | FileCheck %s --check-prefix=HINT
// RUN: spin-opt %s --spin-sparsify-pipeline="sparsity=0.5 block-size=16 explore=0.25 seed=7 reset-input=true report-sparsity=true" --spin-configure-gpu-kernels="sm-count=1" --convert-spin-to-gpu | FileCheck %s --check-prefix=NOHINT
// RUN: spin-opt %s --spin-sparsify-pipeline="sparsity=0.5 block-size=16 explore=0.25 seed=7 reset-input=true report-sparsity=true" --spin-configure-gpu-kernels="sm-count=1" \
// RUN:   | sed 's/prefetch_on_miss = false>/prefetch_on_miss = false, scoring_prefetch_ctas = 3>/' | spin-opt --convert-spin-to-gpu | FileCheck %s --check-prefix=PREFETCH

// The SPIN pipeline after spin-sparsify-pipeline (fused, EMA update
// scheduled asynchronously) becomes: prediction and max pooling (many CTAs
// per row, into the state's prediction cache, skipped where the last step
// predicted this one; the same kernel applies the reset flags, so there is
// no reset launch), selection (and realized sparsity), sparse
// tensor-core scoring that records event 0, sparse top-K on the caller's
// stream (one launch: a cluster of CTAs per row), and on the side stream
// after event 0 the EMA update, then the next step's prediction.

// A prediction grid of at most one CTA per SM (here 2 CTAs, 132 SMs)
// prefetches on a cache miss and takes the hint scratch as its last
// argument; with more CTAs than SMs it does neither.
// HINT: %[[HINT:arg[0-9]+]]: !llvm.ptr<1> {spin.bytes = 8 : i64, spin.name = "spin_select_1_hint", spin.role = "scratch"}
// HINT: gpu.launch_func @spin_kernels::@spin_select_1_predict {{.*}}, %[[HINT]] : !llvm.ptr<1>, {{.*}} : i32) {spin.record
// HINT: gpu.launch_func @spin_kernels::@spin_select_1_predict_next
// HINT-NOT: %[[HINT]]
// HINT-SAME: {spin.record
// HINT-NOT: _previous
// There the select kernel lets the scoring kernel start before its own wait
// (not with the hint). Here its CTAs occupy every SM (sm-count=1), so no
// scoring CTA prefetches (#spin.select_config's scoring_prefetch_ctas = 0).
// NOHINT-NOT: _hint
// NOHINT-NOT: _previous
// NOHINT: gpu.launch_func @spin_kernels::@spin_select_1_predict blocks in
// NOHINT-NOT: _hint
// NOHINT-NOT: _previous
// NOHINT: gpu.module @spin_kernels
// The predict kernel reads the reset flags (step inputs, i8) before its
// grid wait, and `it` and the prediction record right after it, before the
// reset branch's stores: one round trip after the wait, not two.
// NOHINT: gpu.func @spin_select_1_predict(
// NOHINT: llvm.load {{.*}} invariant {alignment = 1 : i64} : !llvm.ptr<1> -> i8
// NOHINT: "griddepcontrol.wait;"
// NOHINT-NOT: llvm.store
// NOHINT: llvm.load {{.*}} : !llvm.ptr<1> -> i64
// NOHINT-NOT: llvm.store
// NOHINT: llvm.load {{.*}} : !llvm.ptr<1> -> i32
// NOHINT-NOT: llvm.store
// NOHINT: llvm.load {{.*}} : !llvm.ptr<1> -> i32
// NOHINT-NOT: llvm.store
// NOHINT: llvm.load {{.*}} : !llvm.ptr<1> -> i32
// NOHINT-NOT: llvm.store
// NOHINT: llvm.load {{.*}} : !llvm.ptr<1> -> i32
// NOHINT-NOT: griddepcontrol
// NOHINT: llvm.store
// Where SMs are left (set by hand here), the update kernel keeps each
// request's slot, count and block list in the `_previous` scratch (2 + 2 x
// (1 + 8) i32), from which the first CTAs of the next step's scoring
// kernel, which also takes the slots to find a request's list, prefetch
// their first tiles before their wait.
// PREFETCH-NOT: _hint
// PREFETCH: %[[SLOTS:arg[0-9]+]]: !llvm.ptr<1> {spin.dtype = "i32", spin.name = "slots", spin.role = "slots"
// PREFETCH: %[[PREV:arg[0-9]+]]: !llvm.ptr<1> {spin.bytes = 80 : i64, spin.name = "spin_select_1_previous", spin.role = "scratch"}
// PREFETCH-NOT: _hint
// PREFETCH: gpu.launch_func @spin_kernels::@spin_score_sparse_2 {{.*}}, %[[PREV]] : !llvm.ptr<1>, %[[SLOTS]] : !llvm.ptr<1>, {{.*}} {spin.record = 0
// PREFETCH: gpu.launch_func @spin_kernels::@spin_update_4 {{.*}}, %[[PREV]] : !llvm.ptr<1>) {spin.record
// PREFETCH-NOT: _hint
// The CTAs from the third on in launch order (y * 2 + x) skip the
// prefetch of their first tiles (the block-table row's lines come first).
// PREFETCH: gpu.func @spin_score_sparse_2(
// PREFETCH: %[[Y:.*]] = nvvm.read.ptx.sreg.ctaid.y
// PREFETCH: "prefetch.global.L2 [$0];"
// PREFETCH: %[[X:.*]] = nvvm.read.ptx.sreg.ctaid.x
// PREFETCH-NEXT: %[[TWO:.*]] = arith.constant 2 : i32
// PREFETCH-NEXT: %[[ROWS:.*]] = arith.muli %[[Y]], %[[TWO]] : i32
// PREFETCH-NEXT: %[[LAUNCHED:.*]] = arith.addi %[[ROWS]], %[[X]] : i32
// PREFETCH-NEXT: %[[THREE:.*]] = arith.constant 3 : i32
// PREFETCH-NEXT: %[[FIRST:.*]] = arith.cmpi slt, %[[LAUNCHED]], %[[THREE]] : i32
// PREFETCH-NEXT: scf.if %[[FIRST]] {
// PREFETCH: "prefetch.global.L2 [$0];"

// CHECK-LABEL: func.func @layer(
// CHECK-SAME: {spin.dtype = "i32", spin.name = "positions", spin.role = "positions", spin.shape = [2, 1]}
// CHECK-SAME: {spin.dtype = "i64", spin.name = "request_ids", spin.role = "request_ids", spin.shape = [2]}
// CHECK-SAME: %[[RESET:arg[0-9]+]]: !llvm.ptr<1> {spin.dtype = "i1", spin.name = "reset", spin.role = "reset", spin.shape = [2]}
// CHECK-SAME: {spin.dtype = "i32", spin.name = "slots", spin.role = "slots", spin.shape = [-1]}
// CHECK-SAME: {spin.dtype = "f32", spin.layer = 0 : i64, spin.name = "v", spin.role = "state", spin.shape = [-1, -1]}
// CHECK-SAME: {spin.dtype = "f32", spin.layer = 0 : i64, spin.name = "d", spin.role = "state", spin.shape = [-1, -1]}
// CHECK-SAME: {spin.dtype = "i64", spin.layer = 0 : i64, spin.name = "it", spin.role = "state", spin.shape = [-1]}
// CHECK-SAME: %[[PREDAT:arg[0-9]+]]: !llvm.ptr<1> {spin.dtype = "i32", spin.layer = 0 : i64, spin.name = "pred_at", spin.role = "state", spin.shape = [-1, 4]}
// CHECK-SAME: {spin.dtype = "i32", spin.layer = 0 : i64, spin.name = "pred_keys", spin.role = "state", spin.shape = [-1, -1]}
// CHECK-SAME: {spin.dtype = "i32", spin.name = "topk", spin.role = "output", spin.shape = [2, 1, 8]}
// CHECK-SAME: {spin.dtype = "f32", spin.name = "sparsity", spin.role = "output", spin.shape = [2, 1]}
// CHECK-SAME: attributes {spin.block_size = 16 : i64, spin.capacity = 128 : i64, spin.events = 1 : i64, spin.launch_plan, spin.layers = 1 : i64}
// CHECK-NOT: @spin_reset_0
// CHECK: gpu.launch_func @spin_kernels::@spin_select_1_predict blocks in ({{.*}}) threads in (%c256{{.*}}, %[[RESET]] : !llvm.ptr<1>, %[[PREDAT]] : !llvm.ptr<1>, %{{.*}} : i32)
// CHECK: gpu.launch_func @spin_kernels::@spin_select_1 blocks in ({{.*}}) threads in (%c1024{{.*}}, %[[RESET]] : !llvm.ptr<1>, %{{.*}} : !llvm.ptr<1>, %{{.*}} : i32)
// CHECK: gpu.launch_func @spin_kernels::@spin_score_sparse_2 {{.*}} {spin.record = 0 : i64, spin.stream = 0 : i64, spin.wait = []}
// CHECK: gpu.launch_func @spin_kernels::@spin_topk_sparse_3 {{.*}} {spin.record = -1 : i64, spin.stream = 0 : i64, spin.wait = []}
// CHECK: gpu.launch_func @spin_kernels::@spin_update_4 {{.*}} {spin.record = -1 : i64, spin.stream = 1 : i64, spin.wait = [0]}
// CHECK: gpu.launch_func @spin_kernels::@spin_select_1_predict_next {{.*}} {spin.record = -1 : i64, spin.stream = 1 : i64, spin.wait = []}
// CHECK-NEXT: return
// CHECK-NOT: spin.fused_select
// CHECK: gpu.module @spin_kernels
// A single row selects into the request's mask: no row mask to merge.
// CHECK-NOT: @spin_select_1_row_mask
func.func @layer(%q: tensor<2x1x16x64xbf16>, %w: tensor<2x1x16xf32>,
                 %keys: tensor<?x16x64xbf16>, %table: tensor<2x8xi32>,
                 %lengths: tensor<2x1xi32>) -> tensor<2x1x8xi32> {
  %z = spin.dense_indexer q(%q : tensor<2x1x16x64xbf16>)
      w(%w : tensor<2x1x16xf32>) keys(%keys : tensor<?x16x64xbf16>)
      block_table(%table : tensor<2x8xi32>)
      lengths(%lengths : tensor<2x1xi32>) -> tensor<2x1x128xf32>
  %t = spin.topk %z lengths(%lengths : tensor<2x1xi32>) {k = 8 : i64}
      : tensor<2x1x128xf32> -> tensor<2x1x8xi32>
  return %t : tensor<2x1x8xi32>
}
