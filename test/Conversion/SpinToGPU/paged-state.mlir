// RUN: spin-opt %s --spin-sparsify-pipeline="sparsity=0.5 block-size=16 explore=0.25 seed=7 reset-input=true" --convert-spin-to-gpu=paged-state=1 | FileCheck %s
// RUN: not spin-opt %s --spin-sparsify-pipeline="sparsity=0.5 block-size=16" --convert-spin-to-gpu="paged-state=1 capacity=256" 2>&1 | FileCheck %s --check-prefix=CAPACITY

// With paged-state the state follows the KV pages (docs/GPU-ABI.md, "Paged
// state"): the plan takes a `state_block_table` input of the block table's
// shape, binds each layer's `valid` after v, d and it, and sizes the slot
// count from `it` (size 0 of `v` is now the page count, a dim of its own).
// Every kernel that reads V, D or the MTP scores takes the state table and
// the page count last, and so does the commit's finish (after the buffered
// rows' positions and lengths: it checks the pages of the committed rows
// itself, in a CTA per request); the predict and select kernels take `valid` between
// them (the select kernel zeroes a request's entries from `valid` up to its
// longest row and advances it), the scoring and top-K kernels nothing. The
// plan records the page size for the manifest.

// CHECK-LABEL: func.func @verify(
// CHECK-SAME: %[[TABLE:[a-z0-9]+]]: !llvm.ptr<1> {spin.dtype = "i32", spin.name = "state_block_table", spin.role = "input", spin.shape = [2, 8]}
// CHECK-SAME: %[[V:[a-z0-9]+]]: !llvm.ptr<1> {spin.dtype = "f32", spin.layer = 0 : i64, spin.name = "v", spin.role = "state", spin.shape = [-1, -1]}
// CHECK-SAME: %[[IT:[a-z0-9]+]]: !llvm.ptr<1> {spin.dtype = "i64", spin.layer = 0 : i64, spin.name = "it", spin.role = "state", spin.shape = [-1]}
// CHECK-SAME: %[[VALID:[a-z0-9]+]]: !llvm.ptr<1> {spin.dtype = "i32", spin.layer = 0 : i64, spin.name = "valid", spin.role = "state", spin.shape = [-1]}
// CHECK-SAME: %[[OBSZ:[a-z0-9]+]]: !llvm.ptr<1> {spin.dtype = "f32", spin.layer = 0 : i64, spin.name = "obs_z", spin.role = "state", spin.shape = [-1, -1, -1]}
// CHECK-SAME: %[[SLOTS:[a-z0-9]+]]: i32 {spin.argument = {{[0-9]+}} : i64, spin.dim = 0 : i64, spin.role = "dim"}
// CHECK-SAME: %[[PAGES:[a-z0-9]+]]: i32 {spin.argument = {{[0-9]+}} : i64, spin.dim = 0 : i64, spin.role = "dim"}
// CHECK-SAME: spin.capacity = 128 : i64
// CHECK-SAME: spin.page_size = 16 : i64
// CHECK: gpu.launch_func @spin_kernels::@spin_commit_1 {{.*}}%[[SLOTS]] : i32, %[[TABLE]] : !llvm.ptr<1>, %[[PAGES]] : i32)
// CHECK: gpu.launch_func @spin_kernels::@spin_commit_1_finish blocks in (%c2{{.*}}%[[SLOTS]] : i32, %{{.*}} : !llvm.ptr<1>, %{{.*}} : !llvm.ptr<1>, %[[TABLE]] : !llvm.ptr<1>, %[[PAGES]] : i32)
// CHECK: gpu.launch_func @spin_kernels::@spin_select_2_predict {{.*}}%[[SLOTS]] : i32, %[[TABLE]] : !llvm.ptr<1>, %[[VALID]] : !llvm.ptr<1>, %[[PAGES]] : i32)
// CHECK: gpu.launch_func @spin_kernels::@spin_select_2 {{.*}}%[[SLOTS]] : i32, %[[TABLE]] : !llvm.ptr<1>, %[[VALID]] : !llvm.ptr<1>, %[[PAGES]] : i32)
// CHECK: gpu.launch_func @spin_kernels::@spin_score_sparse_3 {{.*}} : !llvm.ptr<1>)
// CHECK: gpu.launch_func @spin_kernels::@spin_observe_5 {{.*}}%[[OBSZ]] : !llvm.ptr<1>, %[[V]] : !llvm.ptr<1>, %{{.*}} : !llvm.ptr<1>, %[[TABLE]] : !llvm.ptr<1>, %[[PAGES]] : i32)

// The finish compares the committed rows' state-table entries with the page
// count (its last parameter) and reduces over the CTA before its grid wait;
// only the stores of `it` and obs_rows follow the wait.
// CHECK-LABEL: gpu.func @spin_commit_1_finish(
// CHECK-SAME: %[[FPAGES:[a-z0-9]+]]: i32) kernel
// CHECK: arith.cmpi uge, %{{.*}}, %[[FPAGES]] : i32
// CHECK: gpu.barrier
// CHECK: griddepcontrol.wait
// CHECK-NOT: llvm.load
// CHECK: llvm.store {{.*}} : i64, !llvm.ptr<1>
// CHECK-NOT: llvm.load
// CHECK: llvm.store {{.*}} : i32, !llvm.ptr<1>
// CHECK: gpu.return

// The kernels find an entry through its page: a table load, then the page
// entry clamped into the pool (a load through a bad entry stays inside it);
// the predict kernel reads an entry at or past `valid` as zero.
// CHECK-LABEL: gpu.func @spin_select_2_predict(
// CHECK: arith.cmpi ult
// CHECK: arith.select
// CHECK: arith.cmpi slt
// CHECK: arith.select

// CAPACITY: error: 'func.func' op GPU path: paged-state takes the capacity from the block table (drop the capacity option)

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
