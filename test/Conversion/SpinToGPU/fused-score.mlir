// RUN: spin-opt %s --split-input-file --convert-spin-to-gpu | FileCheck %s

// spin.fused_score on its own input: the IR that spin-sparsify-pipeline
// makes of a decode step (spin.mlir), without the reset and the sparsity
// report. The scoring kernel scores the selected blocks' slots (reading the
// select kernel's block lists) into a scores scratch that the sparse top-K
// and the EMA update read.

// With the update scheduled asynchronously (the default): the scoring
// kernel records event 0; the update kernel and then the next step's
// prediction run on the side stream 1, after event 0.
// CHECK-LABEL: func.func @async_update(
// CHECK-SAME: %[[Q:arg[0-9]+]]: !llvm.ptr<1> {spin.dtype = "bf16", spin.name = "q", spin.role = "input", spin.shape = [2, 1, 16, 64]}
// CHECK-SAME: %[[POS:arg[0-9]+]]: !llvm.ptr<1> {spin.dtype = "i32", spin.name = "positions", spin.role = "positions", spin.shape = [2, 1]}
// CHECK-SAME: %[[SLOTS:arg[0-9]+]]: !llvm.ptr<1> {spin.dtype = "i32", spin.name = "slots", spin.role = "slots", spin.shape = [-1]}
// CHECK-SAME: %[[V:arg[0-9]+]]: !llvm.ptr<1> {spin.dtype = "f32", spin.layer = 0 : i64, spin.name = "v", spin.role = "state", spin.shape = [-1, -1]}
// CHECK-SAME: %[[D:arg[0-9]+]]: !llvm.ptr<1> {spin.dtype = "f32", spin.layer = 0 : i64, spin.name = "d", spin.role = "state", spin.shape = [-1, -1]}
// CHECK-SAME: %[[IT:arg[0-9]+]]: !llvm.ptr<1> {spin.dtype = "i64", spin.layer = 0 : i64, spin.name = "it", spin.role = "state", spin.shape = [-1]}
// CHECK-SAME: %[[OUT:arg[0-9]+]]: !llvm.ptr<1> {spin.dtype = "i32", spin.name = "topk", spin.role = "output", spin.shape = [2, 1, 8]}
// CHECK-SAME: %[[BLOCKS:arg[0-9]+]]: !llvm.ptr<1> {spin.bytes = 64 : i64, spin.name = "spin_select_0_blocks", spin.role = "scratch"}
// CHECK-SAME: %[[SCORES:arg[0-9]+]]: !llvm.ptr<1> {spin.bytes = 1024 : i64, spin.name = "spin_score_sparse_1_scores", spin.role = "scratch"}
// CHECK-SAME: spin.events = 1 : i64, spin.launch_plan, spin.layers = 1 : i64}
// CHECK: gpu.launch_func @spin_kernels::@spin_select_0_predict {{.*}} {spin.record = -1 : i64, spin.stream = 0 : i64, spin.wait = []}
// CHECK: gpu.launch_func @spin_kernels::@spin_select_0 {{.*}} {spin.record = -1 : i64, spin.stream = 0 : i64, spin.wait = []}
// CHECK: gpu.launch_func @spin_kernels::@spin_score_sparse_1 blocks in ({{.*}}) threads in (%c256{{.*}}) args(%[[Q]] : !llvm.ptr<1>, {{.*}}, %[[BLOCKS]] : !llvm.ptr<1>, {{.*}}, %[[SCORES]] : !llvm.ptr<1>, {{.*}}) {spin.record = 0 : i64, spin.stream = 0 : i64, spin.wait = []}
// CHECK: gpu.launch_func @spin_kernels::@spin_topk_sparse_2 {{.*}} args(%[[SCORES]] : !llvm.ptr<1>, {{.*}}, %[[OUT]] : !llvm.ptr<1>) {spin.record = -1 : i64, spin.stream = 0 : i64, spin.wait = []}
// CHECK: gpu.launch_func @spin_kernels::@spin_update_3 {{.*}} args(%[[SCORES]] : !llvm.ptr<1>, %[[POS]] : !llvm.ptr<1>, {{.*}}, %[[SLOTS]] : !llvm.ptr<1>, {{.*}}, %[[V]] : !llvm.ptr<1>, %[[D]] : !llvm.ptr<1>, %[[IT]] : !llvm.ptr<1>) {spin.record = -1 : i64, spin.stream = 1 : i64, spin.wait = [0]}
// CHECK: gpu.launch_func @spin_kernels::@spin_select_0_predict_next {{.*}} {spin.record = -1 : i64, spin.stream = 1 : i64, spin.wait = []}
// CHECK-NEXT: return
// CHECK-NOT: spin.fused_score
// CHECK-NOT: spin.ema_update
// CHECK: gpu.module @spin_kernels
// CHECK: gpu.func @spin_score_sparse_1({{.*}}) kernel attributes {known_block_size = array<i32: 256, 1, 1>, nvvm.minctasm = 2 : i32}
// CHECK: gpu.func @spin_topk_sparse_2({{.*}}) kernel attributes {known_block_size = array<i32: 512, 1, 1>, nvvm.cluster_dim = array<i32: 1, 1, 1>, nvvm.maxnreg = 64 : i32}
// CHECK: gpu.func @spin_update_3({{.*}}) kernel attributes {known_block_size = array<i32: 256, 1, 1>}
func.func @async_update(%q: tensor<2x1x16x64xbf16>, %w: tensor<2x1x16xf32>, %keys: tensor<?x16x64xbf16>,
                        %table: tensor<2x8xi32>, %n: tensor<2x1xi32>, %p: tensor<2x1xi32> {spin.positions},
                        %ids: tensor<2xi64> {spin.request_ids}) -> tensor<2x1x8xi32> {
  %s = spin.layer_state %ids : tensor<2xi64> -> !spin.state<layer = 0>
  %token, %selected = async.execute -> !async.value<tensor<2x8xi1>> {
    %m = spin.fused_select %s positions(%p : tensor<2x1xi32>) lengths(%n : tensor<2x1xi32>) {block_size = 16 : i64, pooling = #spin.pooling<max>, sparsity = 5.000000e-01 : f64, topk = 8 : i64} : !spin.state<layer = 0> -> tensor<2x8xi1>
    async.yield %m : tensor<2x8xi1>
  }
  %mask = async.await %selected : !async.value<tensor<2x8xi1>>
  %t, %z = spin.fused_score q(%q : tensor<2x1x16x64xbf16>) w(%w : tensor<2x1x16xf32>) keys(%keys : tensor<?x16x64xbf16>) block_table(%table : tensor<2x8xi32>) lengths(%n : tensor<2x1xi32>) mask(%mask : tensor<2x8xi1>) {block_size = 16 : i64, k = 8 : i64} -> tensor<2x1x8xi32>, tensor<2x1x128xf32>
  %token_1, %updated = async.execute -> !async.value<!spin.state<layer = 0>> {
    %s1 = spin.ema_update %s scores(%z : tensor<2x1x128xf32>) positions(%p : tensor<2x1xi32>) lengths(%n : tensor<2x1xi32>) mask(%mask : tensor<2x8xi1>) {block_size = 16 : i64, decay = 5.000000e-01 : f64} : !spin.state<layer = 0>
    async.yield %s1 : !spin.state<layer = 0>
  }
  return %t : tensor<2x1x8xi32>
}

// -----

// With the EMA update fused into spin.fused_score (schedule-async=false):
// the same kernels, all on the caller's stream, no event.
// CHECK-LABEL: func.func @fused_update(
// CHECK-SAME: spin.events = 0 : i64, spin.launch_plan, spin.layers = 1 : i64}
// CHECK: gpu.launch_func @spin_kernels::@spin_select_0_predict {{.*}} {spin.record = -1 : i64, spin.stream = 0 : i64, spin.wait = []}
// CHECK: gpu.launch_func @spin_kernels::@spin_select_0 {{.*}} {spin.record = -1 : i64, spin.stream = 0 : i64, spin.wait = []}
// CHECK: gpu.launch_func @spin_kernels::@spin_score_sparse_1 {{.*}} {spin.record = -1 : i64, spin.stream = 0 : i64, spin.wait = []}
// CHECK: gpu.launch_func @spin_kernels::@spin_topk_sparse_2 {{.*}} {spin.record = -1 : i64, spin.stream = 0 : i64, spin.wait = []}
// CHECK: gpu.launch_func @spin_kernels::@spin_update_3 {{.*}} {spin.record = -1 : i64, spin.stream = 0 : i64, spin.wait = []}
// CHECK: gpu.launch_func @spin_kernels::@spin_select_0_predict_next {{.*}} {spin.record = -1 : i64, spin.stream = 0 : i64, spin.wait = []}
// CHECK-NEXT: return
// CHECK-NOT: spin.fused_score
// CHECK: gpu.func @spin_update_3(
func.func @fused_update(%q: tensor<2x1x16x64xbf16>, %w: tensor<2x1x16xf32>, %keys: tensor<?x16x64xbf16>,
                        %table: tensor<2x8xi32>, %n: tensor<2x1xi32>, %p: tensor<2x1xi32> {spin.positions},
                        %ids: tensor<2xi64> {spin.request_ids}) -> tensor<2x1x8xi32> {
  %s = spin.layer_state %ids : tensor<2xi64> -> !spin.state<layer = 0>
  %mask = spin.fused_select %s positions(%p : tensor<2x1xi32>) lengths(%n : tensor<2x1xi32>) {block_size = 16 : i64, pooling = #spin.pooling<max>, sparsity = 5.000000e-01 : f64, topk = 8 : i64} : !spin.state<layer = 0> -> tensor<2x8xi1>
  %t, %z, %s1 = spin.fused_score q(%q : tensor<2x1x16x64xbf16>) w(%w : tensor<2x1x16xf32>) keys(%keys : tensor<?x16x64xbf16>) block_table(%table : tensor<2x8xi32>) lengths(%n : tensor<2x1xi32>) mask(%mask : tensor<2x8xi1>) state(%s : !spin.state<layer = 0>) positions(%p : tensor<2x1xi32>) {block_size = 16 : i64, decay = 5.000000e-01 : f64, k = 8 : i64, update = #spin.update<ema>} -> tensor<2x1x8xi32>, tensor<2x1x128xf32>, !spin.state<layer = 0>
  return %t : tensor<2x1x8xi32>
}
