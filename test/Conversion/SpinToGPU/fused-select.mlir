// RUN: spin-opt %s --convert-spin-to-gpu | FileCheck %s
// RUN: spin-opt %s --convert-spin-to-gpu=layer-argument=true | FileCheck %s --check-prefix=LAYER

// spin.fused_select on its own input, as spin-sparsify-pipeline leaves it
// (a1, max pooling, explore 0.25, seed 7), with the block sparsity report:
// a prediction kernel (into the state's prediction cache, pred_at and
// pred_keys), the select kernel (which also writes the realized sparsity),
// and the next step's prediction kernel, all on the caller's stream.

// CHECK-LABEL: func.func @select(
// CHECK-SAME: %[[POS:arg[0-9]+]]: !llvm.ptr<1> {spin.dtype = "i32", spin.name = "positions", spin.role = "positions", spin.shape = [2, 1]}
// CHECK-SAME: %[[LEN:arg[0-9]+]]: !llvm.ptr<1> {spin.dtype = "i32", spin.name = "lengths", spin.role = "input", spin.shape = [2, 1]}
// CHECK-SAME: %[[IDS:arg[0-9]+]]: !llvm.ptr<1> {spin.dtype = "i64", spin.name = "request_ids", spin.role = "request_ids", spin.shape = [2]}
// CHECK-SAME: %[[SLOTS:arg[0-9]+]]: !llvm.ptr<1> {spin.dtype = "i32", spin.name = "slots", spin.role = "slots", spin.shape = [-1]}
// CHECK-SAME: %[[V:arg[0-9]+]]: !llvm.ptr<1> {spin.dtype = "f32", spin.layer = 0 : i64, spin.name = "v", spin.role = "state", spin.shape = [-1, -1]}
// CHECK-SAME: %[[D:arg[0-9]+]]: !llvm.ptr<1> {spin.dtype = "f32", spin.layer = 0 : i64, spin.name = "d", spin.role = "state", spin.shape = [-1, -1]}
// CHECK-SAME: %[[IT:arg[0-9]+]]: !llvm.ptr<1> {spin.dtype = "i64", spin.layer = 0 : i64, spin.name = "it", spin.role = "state", spin.shape = [-1]}
// CHECK-SAME: %[[PREDAT:arg[0-9]+]]: !llvm.ptr<1> {spin.dtype = "i32", spin.layer = 0 : i64, spin.name = "pred_at", spin.role = "state", spin.shape = [-1, 4]}
// CHECK-SAME: %[[PREDKEYS:arg[0-9]+]]: !llvm.ptr<1> {spin.dtype = "i32", spin.layer = 0 : i64, spin.name = "pred_keys", spin.role = "state", spin.shape = [-1, -1]}
// CHECK-SAME: %[[RHO:arg[0-9]+]]: !llvm.ptr<1> {spin.dtype = "f32", spin.name = "sparsity", spin.role = "output", spin.shape = [2, 1]}
// CHECK-SAME: {spin.bytes = 64 : i64, spin.name = "spin_select_0_blocks", spin.role = "scratch"}
// CHECK-SAME: %[[ERR:arg[0-9]+]]: !llvm.ptr<1> {spin.role = "errors"}
// Where the select kernel writes each batch row's status:
// CHECK-SAME: %[[STATUS:arg[0-9]+]]: !llvm.ptr<1> {spin.name = "status", spin.role = "status"}
// The pool's slot count, size 0 of `v`, for the kernels that read slots:
// CHECK-SAME: %[[NSLOTS:arg[0-9]+]]: i32 {spin.argument = 4 : i64, spin.dim = 0 : i64, spin.role = "dim"})
// CHECK-SAME: attributes {spin.block_size = 16 : i64, spin.capacity = 128 : i64, spin.events = 0 : i64, spin.launch_plan, spin.layers = 1 : i64}
// The prediction grid: (1 CTA, 2 rows) of 256 threads.
// CHECK: gpu.launch_func @spin_kernels::@spin_select_0_predict blocks in (%c1{{(_[0-9]+)?}}, %c2{{(_[0-9]+)?}}, %c1{{(_[0-9]+)?}}) threads in (%c256{{.*}}) args(%[[POS]] : !llvm.ptr<1>, %[[LEN]] : !llvm.ptr<1>, %[[SLOTS]] : !llvm.ptr<1>, %[[V]] : !llvm.ptr<1>, %[[D]] : !llvm.ptr<1>, %[[IT]] : !llvm.ptr<1>, %[[PREDAT]] : !llvm.ptr<1>, %[[PREDKEYS]] : !llvm.ptr<1>, {{.*}}, %[[NSLOTS]] : i32) {spin.record = -1 : i64, spin.stream = 0 : i64, spin.wait = []}
// One CTA of 1024 threads per request selects, reading the request ids for
// the exploration hash, and writes the sparsity:
// CHECK: gpu.launch_func @spin_kernels::@spin_select_0 blocks in (%c2{{(_[0-9]+)?}}, %c1{{(_[0-9]+)?}}, %c1{{(_[0-9]+)?}}) threads in (%c1024{{.*}}) args(%[[POS]] : !llvm.ptr<1>, %[[LEN]] : !llvm.ptr<1>, %[[IDS]] : !llvm.ptr<1>, %[[SLOTS]] : !llvm.ptr<1>, %[[V]] : !llvm.ptr<1>, %[[D]] : !llvm.ptr<1>, %[[IT]] : !llvm.ptr<1>, {{.*}}, %[[RHO]] : !llvm.ptr<1>, %[[STATUS]] : !llvm.ptr<1>, %[[ERR]] : !llvm.ptr<1>, %[[NSLOTS]] : i32) {spin.record = -1 : i64, spin.stream = 0 : i64, spin.wait = []}
// CHECK-NOT: gpu.launch_func
// CHECK: return
// CHECK-NOT: spin.fused_select
// CHECK-NOT: spin.block_sparsity
// CHECK: gpu.module @spin_kernels
// CHECK: gpu.func @spin_select_0_predict({{.*}}) kernel attributes {known_block_size = array<i32: 256, 1, 1>}
// Blocks and state rows of multiples of four slots: a lane pools four slots,
// V's four cells in one 16-byte load, D's from the two aligned ones around
// them.
// CHECK: llvm.load %{{.*}} {alignment = 16 : i64} : !llvm.ptr<1> -> vector<4xf32>
// CHECK: llvm.load %{{.*}} {alignment = 16 : i64} : !llvm.ptr<1> -> vector<4xf32>
// CHECK: llvm.load %{{.*}} {alignment = 16 : i64} : !llvm.ptr<1> -> vector<4xf32>
// CHECK: gpu.func @spin_select_0_predict_next({{.*}}) kernel attributes {known_block_size = array<i32: 256, 1, 1>}
// CHECK: llvm.load %{{.*}} {alignment = 16 : i64} : !llvm.ptr<1> -> vector<4xf32>
// CHECK: gpu.func @spin_select_0({{.*}}) kernel attributes {known_block_size = array<i32: 1024, 1, 1>}
// With layer-argument, the select kernel takes the layer of the exploration
// hash from a run-time `layer` argument (plus the graph's layer, 0 here):
// LAYER-LABEL: func.func @select(
// LAYER-SAME: %[[NSLOTS:arg[0-9]+]]: i32 {spin.argument = 4 : i64, spin.dim = 0 : i64, spin.role = "dim"}, %[[LAYER:arg[0-9]+]]: i32 {spin.layer = 0 : i64, spin.role = "layer"})
// LAYER: gpu.launch_func @spin_kernels::@spin_select_0 {{.*}} %[[NSLOTS]] : i32, %[[LAYER]] : i32)
// LAYER: gpu.func @spin_select_0({{.*}}: i32, %{{.*}}: i32) kernel
func.func @select(%p: tensor<2x1xi32> {spin.positions}, %n: tensor<2x1xi32> {spin.input = "lengths"},
                  %ids: tensor<2xi64> {spin.request_ids}) -> (tensor<2x1xf32> {spin.sparsity}) {
  %s = spin.layer_state %ids : tensor<2xi64> -> !spin.state<layer = 0>
  %m = spin.fused_select %s positions(%p : tensor<2x1xi32>) lengths(%n : tensor<2x1xi32>) {block_size = 16 : i64, explore = 2.500000e-01 : f64, pooling = #spin.pooling<max>, seed = 7 : i64, sparsity = 5.000000e-01 : f64, topk = 8 : i64} : !spin.state<layer = 0> -> tensor<2x8xi1>
  %r = spin.block_sparsity %m lengths(%n : tensor<2x1xi32>) {block_size = 16 : i64} : tensor<2x8xi1> -> tensor<2x1xf32>
  return %r : tensor<2x1xf32>
}
