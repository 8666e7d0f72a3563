// RUN: spin-opt %s --convert-spin-to-gpu | FileCheck %s

// spin.commit and spin.observe on their own input: the IR that
// spin-sparsify-pipeline makes of an MTP verification step (mtp.mlir, 3 query
// rows), without the reset and the sparsity report. The commit (replay of the
// accepted rows 1..a, then it += 1 and obs_rows = 0) runs before the
// selection that reads the committed state; the observe folds row 0 and
// buffers this step's rows on the side stream after the scoring kernel's
// event 0. The plan takes the accepted counts and binds the observation
// fields after v, d and it.

// CHECK-LABEL: func.func @verify(
// CHECK-SAME: %[[POS:arg[0-9]+]]: !llvm.ptr<1> {spin.dtype = "i32", spin.name = "positions", spin.role = "positions", spin.shape = [2, 3]}
// CHECK-SAME: %[[ACC:arg[0-9]+]]: !llvm.ptr<1> {spin.dtype = "i32", spin.name = "accepted", spin.role = "accepted", spin.shape = [2]}
// CHECK-SAME: %[[SLOTS:arg[0-9]+]]: !llvm.ptr<1> {spin.dtype = "i32", spin.name = "slots", spin.role = "slots", spin.shape = [-1]}
// CHECK-SAME: %[[V:arg[0-9]+]]: !llvm.ptr<1> {spin.dtype = "f32", spin.layer = 0 : i64, spin.name = "v", spin.role = "state", spin.shape = [-1, -1]}
// CHECK-SAME: %[[D:arg[0-9]+]]: !llvm.ptr<1> {spin.dtype = "f32", spin.layer = 0 : i64, spin.name = "d", spin.role = "state", spin.shape = [-1, -1]}
// CHECK-SAME: %[[IT:arg[0-9]+]]: !llvm.ptr<1> {spin.dtype = "i64", spin.layer = 0 : i64, spin.name = "it", spin.role = "state", spin.shape = [-1]}
// CHECK-SAME: %[[ROWS:arg[0-9]+]]: !llvm.ptr<1> {spin.dtype = "i32", spin.layer = 0 : i64, spin.name = "obs_rows", spin.role = "state", spin.shape = [-1]}
// CHECK-SAME: %[[OPOS:arg[0-9]+]]: !llvm.ptr<1> {spin.dtype = "i32", spin.layer = 0 : i64, spin.name = "obs_pos", spin.role = "state", spin.shape = [-1, -1]}
// CHECK-SAME: %[[OLEN:arg[0-9]+]]: !llvm.ptr<1> {spin.dtype = "i32", spin.layer = 0 : i64, spin.name = "obs_len", spin.role = "state", spin.shape = [-1, -1]}
// CHECK-SAME: %[[OMASK:arg[0-9]+]]: !llvm.ptr<1> {spin.dtype = "i8", spin.layer = 0 : i64, spin.name = "obs_mask", spin.role = "state", spin.shape = [-1, -1]}
// CHECK-SAME: %[[OZ:arg[0-9]+]]: !llvm.ptr<1> {spin.dtype = "f32", spin.layer = 0 : i64, spin.name = "obs_z", spin.role = "state", spin.shape = [-1, -1, -1]}
// CHECK-SAME: {spin.dtype = "i32", spin.name = "topk", spin.role = "output", spin.shape = [2, 3, 8]}
// CHECK-SAME: %[[SCORES:arg[0-9]+]]: !llvm.ptr<1> {spin.bytes = 3072 : i64, spin.name = "spin_score_sparse_2_scores", spin.role = "scratch"}
// CHECK-SAME: %[[ERR:arg[0-9]+]]: !llvm.ptr<1> {spin.role = "errors"}
// CHECK-SAME: %[[STATUS:arg[0-9]+]]: !llvm.ptr<1> {spin.name = "status", spin.role = "status"}
// CHECK-SAME: %[[NSLOTS:arg[0-9]+]]: i32 {spin.argument = {{[0-9]+}} : i64, spin.dim = 0 : i64, spin.role = "dim"}
// CHECK-SAME: attributes {spin.block_size = 16 : i64, spin.capacity = 128 : i64, spin.events = 1 : i64, spin.launch_plan, spin.layers = 1 : i64}
// The replay reads the accepted counts and the buffered rows into V and D:
// CHECK: gpu.launch_func @spin_kernels::@spin_commit_0 blocks in ({{.*}}) threads in (%c256{{.*}}) args(%[[ACC]] : !llvm.ptr<1>, %[[SLOTS]] : !llvm.ptr<1>, %[[V]] : !llvm.ptr<1>, %[[D]] : !llvm.ptr<1>, %[[ROWS]] : !llvm.ptr<1>, %[[OPOS]] : !llvm.ptr<1>, %[[OLEN]] : !llvm.ptr<1>, %[[OMASK]] : !llvm.ptr<1>, %[[OZ]] : !llvm.ptr<1>, %[[ERR]] : !llvm.ptr<1>, %[[NSLOTS]] : i32) {spin.record = -1 : i64, spin.stream = 0 : i64, spin.wait = []}
// then one request per thread advances it and drops the buffer:
// CHECK: gpu.launch_func @spin_kernels::@spin_commit_0_finish {{.*}} args(%[[SLOTS]] : !llvm.ptr<1>, %[[IT]] : !llvm.ptr<1>, %[[ROWS]] : !llvm.ptr<1>, %[[ACC]] : !llvm.ptr<1>, %[[NSLOTS]] : i32) {spin.record = -1 : i64, spin.stream = 0 : i64, spin.wait = []}
// CHECK: gpu.launch_func @spin_kernels::@spin_select_1_predict {{.*}} {spin.record = -1 : i64, spin.stream = 0 : i64, spin.wait = []}
// The select kernel skips a request whose rows are still buffered (its
// commit was refused): it reads obs_rows.
// CHECK: gpu.launch_func @spin_kernels::@spin_select_1 {{.*}}, %[[ROWS]] : !llvm.ptr<1>, %[[STATUS]] : !llvm.ptr<1>, %[[ERR]] : !llvm.ptr<1>, %[[NSLOTS]] : i32) {spin.record = -1 : i64, spin.stream = 0 : i64, spin.wait = []}
// The scoring kernel takes the same status after the skip flags: a row
// whose block table names a page outside the key cache gets the bad-page
// code there.
// CHECK: gpu.launch_func @spin_kernels::@spin_score_sparse_2 {{.*}}, %[[STATUS]] : !llvm.ptr<1>, %[[SCORES]] : !llvm.ptr<1>, {{.*}} {spin.record = 0 : i64, spin.stream = 0 : i64, spin.wait = []}
// CHECK: gpu.launch_func @spin_kernels::@spin_topk_sparse_3 {{.*}} {spin.record = -1 : i64, spin.stream = 0 : i64, spin.wait = []}
// The observe reads the scores, folds row 0 into V and D and writes every
// observation field:
// CHECK: gpu.launch_func @spin_kernels::@spin_observe_4 {{.*}} args(%[[SCORES]] : !llvm.ptr<1>, %[[POS]] : !llvm.ptr<1>, {{.*}}, %[[ROWS]] : !llvm.ptr<1>, %[[OPOS]] : !llvm.ptr<1>, %[[OLEN]] : !llvm.ptr<1>, %[[OMASK]] : !llvm.ptr<1>, %[[OZ]] : !llvm.ptr<1>, %[[V]] : !llvm.ptr<1>, %[[D]] : !llvm.ptr<1>) {spin.record = -1 : i64, spin.stream = 1 : i64, spin.wait = [0]}
// CHECK-NEXT: return
// CHECK-NOT: spin.commit
// CHECK-NOT: spin.observe
// CHECK: gpu.module @spin_kernels
// CHECK: gpu.func @spin_commit_0({{.*}}) kernel attributes {known_block_size = array<i32: 256, 1, 1>}
// CHECK: gpu.func @spin_commit_0_finish({{.*}}) kernel attributes {known_block_size = array<i32: 128, 1, 1>}
// CHECK: gpu.func @spin_observe_4({{.*}}) kernel attributes {known_block_size = array<i32: 256, 1, 1>}
func.func @verify(%q: tensor<2x3x16x64xbf16>, %w: tensor<2x3x16xf32>, %keys: tensor<?x16x64xbf16>,
                  %table: tensor<2x8xi32>, %n: tensor<2x3xi32>, %p: tensor<2x3xi32> {spin.positions},
                  %ids: tensor<2xi64> {spin.request_ids}, %accepted: tensor<2xi32> {spin.accepted})
    -> tensor<2x3x8xi32> {
  %s = spin.layer_state %ids : tensor<2xi64> -> !spin.state<layer = 0>
  %token, %results:2 = async.execute -> (!async.value<tensor<2x8xi1>>, !async.value<!spin.state<layer = 0>>) {
    %c = spin.commit %s accepted(%accepted : tensor<2xi32>) {block_size = 16 : i64, decay = 5.000000e-01 : f64} : !spin.state<layer = 0>
    %m = spin.fused_select %c positions(%p : tensor<2x3xi32>) lengths(%n : tensor<2x3xi32>) {block_size = 16 : i64, pooling = #spin.pooling<max>, sparsity = 5.000000e-01 : f64, topk = 8 : i64} : !spin.state<layer = 0> -> tensor<2x8xi1>
    async.yield %m, %c : tensor<2x8xi1>, !spin.state<layer = 0>
  }
  %mask = async.await %results#0 : !async.value<tensor<2x8xi1>>
  %t, %z = spin.fused_score q(%q : tensor<2x3x16x64xbf16>) w(%w : tensor<2x3x16xf32>) keys(%keys : tensor<?x16x64xbf16>) block_table(%table : tensor<2x8xi32>) lengths(%n : tensor<2x3xi32>) mask(%mask : tensor<2x8xi1>) {block_size = 16 : i64, k = 8 : i64} -> tensor<2x3x8xi32>, tensor<2x3x128xf32>
  %committed = async.await %results#1 : !async.value<!spin.state<layer = 0>>
  %token_1, %observed = async.execute -> !async.value<!spin.state<layer = 0>> {
    %o = spin.observe %committed scores(%z : tensor<2x3x128xf32>) positions(%p : tensor<2x3xi32>) lengths(%n : tensor<2x3xi32>) mask(%mask : tensor<2x8xi1>) {block_size = 16 : i64, decay = 5.0e-01} : !spin.state<layer = 0>
    async.yield %o : !spin.state<layer = 0>
  }
  return %t : tensor<2x3x8xi32>
}
