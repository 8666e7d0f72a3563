// RUN: spin-opt %s --spin-sparsify-pipeline="sparsity=0.5 block-size=16 explore=0.25 seed=7 reset-input=true report-sparsity=true" --convert-spin-to-gpu | FileCheck %s
// RUN: spin-opt %s --spin-sparsify-pipeline="sparsity=0.5 block-size=16 schedule-async=false mtp-mask=row0 mtp-update=row0" --convert-spin-to-gpu | FileCheck %s --check-prefix=FUSED

// An MTP verification step (3 query rows) after spin-sparsify-pipeline
// becomes: the replay of the previous step's accepted rows and its finish
// (it += 1, obs_rows = 0), which leave the rows the step resets alone, the
// prediction, which applies the reset flags (V, D, it, the record, and the
// buffered rows dropped: no reset launch), the selection over
// every row (their union), sparse scoring of all rows recording event 0,
// each row's top-K on the caller's stream, and the buffering of the rows on
// the side stream after event 0. The plan takes the accepted counts and
// binds the layer's observation fields after v, d, it (the CPU step
// function's order) and the prediction cache, whose record the reset
// clears (a single-row step of the request could otherwise match it).

// CHECK-LABEL: func.func @verify(
// CHECK-SAME: {spin.dtype = "i32", spin.name = "lengths", spin.role = "input", spin.shape = [2, 3]}
// CHECK-SAME: {spin.dtype = "i32", spin.name = "positions", spin.role = "positions", spin.shape = [2, 3]}
// CHECK-SAME: {spin.dtype = "i64", spin.name = "request_ids", spin.role = "request_ids", spin.shape = [2]}
// CHECK-SAME: %[[ACC:[a-z0-9]+]]: !llvm.ptr<1> {spin.dtype = "i32", spin.name = "accepted", spin.role = "accepted", spin.shape = [2]}
// CHECK-SAME: %[[RESET:[a-z0-9]+]]: !llvm.ptr<1> {spin.dtype = "i1", spin.name = "reset", spin.role = "reset", spin.shape = [2]}
// CHECK-SAME: %[[SLOTS:[a-z0-9]+]]: !llvm.ptr<1> {spin.dtype = "i32", spin.name = "slots", spin.role = "slots", spin.shape = [-1]}
// CHECK-SAME: %[[V:[a-z0-9]+]]: !llvm.ptr<1> {spin.dtype = "f32", spin.layer = 0 : i64, spin.name = "v", spin.role = "state", spin.shape = [-1, -1]}
// CHECK-SAME: %[[D:[a-z0-9]+]]: !llvm.ptr<1> {spin.dtype = "f32", spin.layer = 0 : i64, spin.name = "d", spin.role = "state", spin.shape = [-1, -1]}
// CHECK-SAME: %[[IT:[a-z0-9]+]]: !llvm.ptr<1> {spin.dtype = "i64", spin.layer = 0 : i64, spin.name = "it", spin.role = "state", spin.shape = [-1]}
// CHECK-SAME: %[[PREDAT:[a-z0-9]+]]: !llvm.ptr<1> {spin.dtype = "i32", spin.layer = 0 : i64, spin.name = "pred_at", spin.role = "state", spin.shape = [-1, 4]}
// CHECK-SAME: {spin.dtype = "i32", spin.layer = 0 : i64, spin.name = "pred_keys", spin.role = "state", spin.shape = [-1, -1]}
// CHECK-SAME: %[[ROWS:[a-z0-9]+]]: !llvm.ptr<1> {spin.dtype = "i32", spin.layer = 0 : i64, spin.name = "obs_rows", spin.role = "state", spin.shape = [-1]}
// CHECK-SAME: %[[POS:[a-z0-9]+]]: !llvm.ptr<1> {spin.dtype = "i32", spin.layer = 0 : i64, spin.name = "obs_pos", spin.role = "state", spin.shape = [-1, -1]}
// CHECK-SAME: %[[LEN:[a-z0-9]+]]: !llvm.ptr<1> {spin.dtype = "i32", spin.layer = 0 : i64, spin.name = "obs_len", spin.role = "state", spin.shape = [-1, -1]}
// CHECK-SAME: %[[MASK:[a-z0-9]+]]: !llvm.ptr<1> {spin.dtype = "i8", spin.layer = 0 : i64, spin.name = "obs_mask", spin.role = "state", spin.shape = [-1, -1]}
// CHECK-SAME: %[[Z:[a-z0-9]+]]: !llvm.ptr<1> {spin.dtype = "f32", spin.layer = 0 : i64, spin.name = "obs_z", spin.role = "state", spin.shape = [-1, -1, -1]}
// CHECK-SAME: {spin.dtype = "i32", spin.name = "topk", spin.role = "output", spin.shape = [2, 3, 8]}
// CHECK-SAME: {spin.dtype = "f32", spin.name = "sparsity", spin.role = "output", spin.shape = [2, 3]}
// CHECK-SAME: attributes {spin.block_size = 16 : i64, spin.capacity = 128 : i64, spin.events = 1 : i64, spin.launch_plan, spin.layers = 1 : i64}
// CHECK-NOT: @spin_reset_0
// CHECK: gpu.launch_func @spin_kernels::@spin_commit_1 blocks in (%{{.*}}, %c2{{.*}}, %{{.*}}) {{.*}} args(%[[ACC]] : {{.*}}, %[[SLOTS]] : {{.*}}, %[[V]] : {{.*}}, %[[D]] : {{.*}}, %[[ROWS]] : {{.*}}, %[[POS]] : {{.*}}, %[[LEN]] : {{.*}}, %[[MASK]] : {{.*}}, %[[Z]] : !llvm.ptr<1>, %{{.*}} : !llvm.ptr<1>, %[[RESET]] : !llvm.ptr<1>, %[[NSLOTS:arg[0-9]+]] : i32) {spin.record = -1 : i64, spin.stream = 0 : i64, spin.wait = []}
// CHECK: gpu.launch_func @spin_kernels::@spin_commit_1_finish {{.*}} args(%[[SLOTS]] : {{.*}}, %[[IT]] : {{.*}}, %[[ROWS]] : {{.*}}, %[[ACC]] : {{.*}}, %[[RESET]] : {{.*}}, %[[NSLOTS]] : i32) {spin.record = -1 : i64, spin.stream = 0 : i64, spin.wait = []}
// CHECK: gpu.launch_func @spin_kernels::@spin_select_2_predict {{.*}} args({{.*}}, %[[RESET]] : !llvm.ptr<1>, %[[PREDAT]] : !llvm.ptr<1>, %[[ROWS]] : !llvm.ptr<1>, %[[NSLOTS]] : i32)
// The selection: a cluster of a CTA per row (3) for each request (2).
// CHECK: gpu.launch_func @spin_kernels::@spin_select_2 blocks in (%c3{{(_[0-9]+)?}}, %c2{{(_[0-9]+)?}}, %c1{{(_[0-9]+)?}})
// The sparse scoring grid is (rows, CTAs per row): launch order takes the
// rows' first CTAs, which have entries, before their later ones. (bf16
// queries: a CTA per row; fp8 ones score a request's rows in one CTA, see
// test/Target/ptxas-fp8-queries-mtp.mlir.)
// CHECK: gpu.launch_func @spin_kernels::@spin_score_sparse_3 blocks in (%c6{{(_[0-9]+)?}}, %c1{{(_[0-9]+)?}}, %{{.*}}) {{.*}} {spin.record = 0 : i64, spin.stream = 0 : i64, spin.wait = []}
// CHECK: gpu.launch_func @spin_kernels::@spin_topk_sparse_4 blocks in (%c1{{(_[0-9]+)?}}, %c6{{.*}}) {{.*}} {spin.record = -1 : i64, spin.stream = 0 : i64, spin.wait = []}
// The observe folds row 0 into V and D and buffers the rows:
// CHECK: gpu.launch_func @spin_kernels::@spin_observe_5 {{.*}} args({{.*}}, %[[ROWS]] : {{.*}}, %[[POS]] : {{.*}}, %[[LEN]] : {{.*}}, %[[MASK]] : {{.*}}, %[[Z]] : !llvm.ptr<1>, %[[V]] : !llvm.ptr<1>, %[[D]] : !llvm.ptr<1>) {spin.record = -1 : i64, spin.stream = 1 : i64, spin.wait = [0]}
// CHECK-NEXT: return
// CHECK-NOT: spin.commit
// CHECK-NOT: spin.observe
// Each row selects into its CTA's mask (no row mask), which the leader
// merges through distributed shared memory between two cluster barriers.
// CHECK-NOT: llvm.mlir.global internal @spin_select_2_row_mask()
// CHECK-LABEL: gpu.func @spin_commit_1(
// CHECK: nvvm.read.ptx.sreg.ctaid.y
// The accepted count of the request (mtp-update=prefix) is read.
// CHECK: llvm.getelementptr %arg0[
// CHECK: gpu.return
// CHECK-LABEL: gpu.func @spin_commit_1_finish(
// The reset also clears the prediction cache's record (the predict
// kernel's argument 8, pred_at): four zeros at the request's slot.
// CHECK-LABEL: gpu.func @spin_select_2_predict(
// CHECK: %[[AT0:.*]] = llvm.getelementptr %arg8[
// CHECK-NEXT: llvm.store %{{.*}}, %[[AT0]] {{.*}} : i32, !llvm.ptr<1>
// CHECK: %[[AT1:.*]] = llvm.getelementptr %arg8[
// CHECK-NEXT: llvm.store %{{.*}}, %[[AT1]] {{.*}} : i32, !llvm.ptr<1>
// CHECK: %[[AT2:.*]] = llvm.getelementptr %arg8[
// CHECK-NEXT: llvm.store %{{.*}}, %[[AT2]] {{.*}} : i32, !llvm.ptr<1>
// CHECK: %[[AT3:.*]] = llvm.getelementptr %arg8[
// CHECK-NEXT: llvm.store %{{.*}}, %[[AT3]] {{.*}} : i32, !llvm.ptr<1>

// CHECK-LABEL: gpu.func @spin_select_2(
// CHECK-SAME: nvvm.cluster_dim = array<i32: 3, 1, 1>
// CHECK: nvvm.read.ptx.sreg.ctaid.y
// CHECK: nvvm.cluster.arrive {aligned}
// CHECK-NEXT: nvvm.cluster.wait {aligned}
// CHECK: nvvm.mapa %{{.*}}, %c1{{.*}} : !llvm.ptr<3> -> !llvm.ptr<7>
// CHECK: nvvm.mapa %{{.*}}, %c2{{.*}} : !llvm.ptr<3> -> !llvm.ptr<7>
// CHECK: nvvm.cluster.arrive {aligned}
// CHECK-NEXT: nvvm.cluster.wait {aligned}

// CHECK-LABEL: gpu.func @spin_observe_5(

// Without spin-schedule-async the buffering is fused into the scoring op and
// follows the top-K on the caller's stream; with mtp-update=row0 the observe
// kernel folds row 0, nothing is replayed (no replay kernel), and the finish
// never reads the accepted counts.

// FUSED-LABEL: func.func @verify(
// FUSED-SAME: spin.name = "accepted", spin.role = "accepted"
// FUSED-SAME: spin.events = 0 : i64
// FUSED-NOT: @spin_commit_0 blocks
// FUSED: gpu.launch_func @spin_kernels::@spin_commit_0_finish {{.*}} {spin.record = -1 : i64, spin.stream = 0 : i64, spin.wait = []}
// Under row-0 sharing one CTA a request selects (the rows' masks merged
// in its shared memory).
// FUSED: gpu.launch_func @spin_kernels::@spin_select_1 blocks in (%c2{{(_[0-9]+)?}}, %c1{{(_[0-9]+)?}}, %c1{{(_[0-9]+)?}})
// FUSED: gpu.launch_func @spin_kernels::@spin_score_sparse_2 {{.*}} {spin.record = -1 : i64, spin.stream = 0 : i64, spin.wait = []}
// FUSED: gpu.launch_func @spin_kernels::@spin_topk_sparse_3 blocks
// FUSED: gpu.launch_func @spin_kernels::@spin_observe_4 {{.*}} {spin.record = -1 : i64, spin.stream = 0 : i64, spin.wait = []}
// FUSED-NEXT: return
// FUSED: llvm.mlir.global internal @spin_select_1_row_mask()
// FUSED-NOT: gpu.func @spin_commit_0(
// FUSED-LABEL: gpu.func @spin_commit_0_finish(
// FUSED-NOT: llvm.getelementptr %arg3[
// FUSED: gpu.return
func.func @verify(%q: tensor<2x3x16x64xbf16>, %w: tensor<2x3x16xf32>,
                  %keys: tensor<?x16x64xbf16>, %table: tensor<2x8xi32>,
                  %lengths: tensor<2x3xi32>) -> tensor<2x3x8xi32> {
  %z = spin.dense_indexer q(%q : tensor<2x3x16x64xbf16>)
      w(%w : tensor<2x3x16xf32>) keys(%keys : tensor<?x16x64xbf16>)
      block_table(%table : tensor<2x8xi32>)
      lengths(%lengths : tensor<2x3xi32>) -> tensor<2x3x128xf32>
  %t = spin.topk %z lengths(%lengths : tensor<2x3xi32>) {k = 8 : i64}
      : tensor<2x3x128xf32> -> tensor<2x3x8xi32>
  return %t : tensor<2x3x8xi32>
}
