// RUN: spin-opt %s --split-input-file --convert-spin-to-scf | FileCheck %s
// RUN: spin-opt %s --split-input-file --convert-spin-to-scf | FileCheck %s --check-prefix=LOWERED

// The CPU lowering of prediction, pooling and block selection
// (SelectLowering.cpp). The state of spin.layer_state becomes the state-pool
// arguments of docs/Runtime-ABI.md (slot indices, then V, D, it and, for a
// last_observed state, last_observed), which the loops read. Shapes: B = 2,
// R = 1 (4 for MTP), 64 slots in blocks of 16 (4 blocks).

// No spin op or type is left; the spin.* argument attributes remain.
// LOWERED-NOT: {{!spin\.|spin\.[a-z_]+ [^=]}}

// Slot-level prediction: zhat[i] = max(V[slot, i], D[slot, p - i]) for the
// visible slots, -inf beyond.
// CHECK-LABEL: func.func @predict(
// CHECK-SAME:    %[[SLOTS:[^:]*]]: memref<?xi32> {spin.slots},
// CHECK-SAME:    %[[V:[^:]*]]: memref<?x?xf32> {spin.layer = 0 : i64, spin.state = "v"},
// CHECK-SAME:    %[[D:[^:]*]]: memref<?x?xf32> {spin.layer = 0 : i64, spin.state = "d"},
// CHECK-SAME:    %{{[^:]*}}: memref<?xi64> {spin.layer = 0 : i64, spin.state = "it"}) -> tensor<2x1x64xf32>
// CHECK-DAG:     %[[P:.*]] = bufferization.to_buffer %arg1 read_only : tensor<2x1xi32>
// CHECK-DAG:     %[[N:.*]] = bufferization.to_buffer %arg2 read_only : tensor<2x1xi32>
// CHECK-DAG:     %[[W:.*]] = arith.constant 64 : index
// CHECK:         %[[OUT:.*]] = memref.alloc() : memref<2x1x64xf32>
// CHECK:         %[[NINF:.*]] = arith.constant 0xFF800000 : f32
// CHECK:         scf.for %[[B:.*]] = %{{.*}} to %{{.*}} step
// CHECK:           %[[SLOT32:.*]] = memref.load %[[SLOTS]][%[[B]]] : memref<?xi32>
// CHECK:           %[[SLOT:.*]] = arith.index_cast %[[SLOT32]] : i32 to index
// CHECK:           scf.for %[[R:.*]] = %{{.*}} to %{{.*}} step
// CHECK:             memref.load %[[P]][%[[B]], %[[R]]]
// CHECK:             %[[POS:.*]] = arith.index_cast
// CHECK:             memref.load %[[N]][%[[B]], %[[R]]]
// CHECK:             %[[VIS:.*]] = arith.index_cast
// CHECK:             scf.for %[[I:.*]] = %{{.*}} to %[[W]] step
// CHECK:               %[[IN:.*]] = arith.cmpi ult, %[[I]], %[[VIS]] : index
// CHECK:               %[[Z:.*]] = scf.if %[[IN]] -> (f32) {
// CHECK:                 %[[VV:.*]] = memref.load %[[V]][%[[SLOT]], %[[I]]] : memref<?x?xf32>
// CHECK:                 %[[OFF:.*]] = arith.subi %[[POS]], %[[I]] : index
// CHECK:                 %[[DD:.*]] = memref.load %[[D]][%[[SLOT]], %[[OFF]]] : memref<?x?xf32>
// CHECK:                 %[[MAX:.*]] = arith.maximumf %[[VV]], %[[DD]] : f32
// CHECK:                 scf.yield %[[MAX]] : f32
// CHECK:               } else {
// CHECK-NEXT:            scf.yield %[[NINF]] : f32
// CHECK:               memref.store %[[Z]], %[[OUT]][%[[B]], %[[R]], %[[I]]] : memref<2x1x64xf32>
// CHECK:         return
func.func @predict(%ids: tensor<2xi64>, %p: tensor<2x1xi32>, %n: tensor<2x1xi32>) -> tensor<2x1x64xf32> {
  %s = spin.layer_state %ids : tensor<2xi64> -> !spin.state<layer = 0>
  %z = spin.predict %s positions(%p : tensor<2x1xi32>) lengths(%n : tensor<2x1xi32>)
      : !spin.state<layer = 0> -> tensor<2x1x64xf32>
  return %z : tensor<2x1x64xf32>
}

// -----

// Block-level prediction (A2): per block j < ceil(n / 16),
// max(Vb[slot, j], Db[slot, p / 16 - j]).
// CHECK-LABEL: func.func @predict_block(
// CHECK-SAME:    %[[SLOTS:[^:]*]]: memref<?xi32> {spin.slots},
// CHECK-SAME:    %[[V:[^:]*]]: memref<?x?xf32> {spin.layer = 1 : i64, spin.state = "v"},
// CHECK-SAME:    %[[D:[^:]*]]: memref<?x?xf32> {spin.layer = 1 : i64, spin.state = "d"},
// CHECK-DAG:     %[[NB:.*]] = arith.constant 4 : index
// CHECK-DAG:     %[[BS:.*]] = arith.constant 16 : index
// CHECK:         scf.for %[[B:.*]] = %{{.*}} to %{{.*}} step
// CHECK:           memref.load %[[SLOTS]][%[[B]]]
// CHECK:           %[[SLOT:.*]] = arith.index_cast
// CHECK:           scf.for %[[R:.*]] = %{{.*}} to %{{.*}} step
// CHECK:             %[[POS:.*]] = arith.index_cast
// CHECK:             %[[VIS:.*]] = arith.index_cast
// CHECK:             %[[VB:.*]] = arith.ceildivui %[[VIS]], %[[BS]] : index
// CHECK:             %[[PB:.*]] = arith.divui %[[POS]], %[[BS]] : index
// CHECK:             scf.for %[[J:.*]] = %{{.*}} to %[[NB]] step
// CHECK:               arith.cmpi ult, %[[J]], %[[VB]] : index
// CHECK:               memref.load %[[V]][%[[SLOT]], %[[J]]]
// CHECK:               %[[OFF:.*]] = arith.subi %[[PB]], %[[J]] : index
// CHECK:               memref.load %[[D]][%[[SLOT]], %[[OFF]]]
// CHECK:               arith.maximumf
// CHECK:         return
func.func @predict_block(%ids: tensor<2xi64>, %p: tensor<2x1xi32>, %n: tensor<2x1xi32>) -> tensor<2x1x4xf32> {
  %s = spin.layer_state %ids : tensor<2xi64> -> !spin.state<layer = 1, level = block>
  %z = spin.predict %s positions(%p : tensor<2x1xi32>) lengths(%n : tensor<2x1xi32>) {block_size = 16 : i64}
      : !spin.state<layer = 1, level = block> -> tensor<2x1x4xf32>
  return %z : tensor<2x1x4xf32>
}

// -----

// Max pooling: per block [16 j, min(16 j + 16, visible)), the running
// maximum; -inf for a block with no visible slot.
// CHECK-LABEL: func.func @pool_max(
// CHECK-DAG:     %[[Z:.*]] = bufferization.to_buffer %arg0 read_only : tensor<2x1x64xf32>
// CHECK-DAG:     %[[BS:.*]] = arith.constant 16 : index
// CHECK:         %[[OUT:.*]] = memref.alloc() : memref<2x1x4xf32>
// CHECK:         scf.for %[[B:.*]] = %{{.*}} to %{{.*}} step
// CHECK:           scf.for %[[R:.*]] = %{{.*}} to %{{.*}} step
// CHECK:             scf.for %[[J:.*]] = %{{.*}} to %{{.*}} step
// CHECK:               %[[BEGIN:.*]] = arith.muli %[[J]], %[[BS]] : index
// CHECK:               %[[LIMIT:.*]] = arith.addi %[[BEGIN]], %[[BS]] : index
// CHECK:               %[[END0:.*]] = arith.minui %[[LIMIT]], %{{.*}} : index
// CHECK:               %[[END:.*]] = arith.maxui %[[END0]], %[[BEGIN]] : index
// CHECK:               %[[NINF:.*]] = arith.constant 0xFF800000 : f32
// CHECK:               %[[ACC:.*]]:7 = scf.for %[[I:.*]] = %[[BEGIN]] to %[[END]] step
// CHECK:                 %[[X:.*]] = memref.load %[[Z]][%[[B]], %[[R]], %[[I]]] : memref<2x1x64xf32>
// CHECK:                 arith.maximumf %{{.*}}, %[[X]] : f32
// CHECK:               %[[ANY:.*]] = arith.cmpi ugt, %[[ACC]]#6, %{{.*}} : index
// CHECK:               %[[POOLED:.*]] = arith.select %[[ANY]], %[[ACC]]#0, %[[NINF]] : f32
// CHECK:               memref.store %[[POOLED]], %[[OUT]][%[[B]], %[[R]], %[[J]]] : memref<2x1x4xf32>
// CHECK:         return
func.func @pool_max(%z: tensor<2x1x64xf32>, %n: tensor<2x1xi32>) -> tensor<2x1x4xf32> {
  %S = spin.pool %z lengths(%n : tensor<2x1xi32>) {pooling = #spin.pooling<max>, block_size = 16 : i64}
      : tensor<2x1x64xf32> -> tensor<2x1x4xf32>
  return %S : tensor<2x1x4xf32>
}

// -----

// Mean pooling over blocks of 8: the running sum divided by the count
// (CodeBuilder::poolSumsFinish, shared with the GPU select kernel).
// CHECK-LABEL: func.func @pool_mean(
// CHECK-DAG:     %[[BS:.*]] = arith.constant 8 : index
// CHECK:         %[[OUT:.*]] = memref.alloc() : memref<2x1x8xf32>
// CHECK:         scf.for %[[B:.*]] = %{{.*}} to %{{.*}} step
// CHECK:           scf.for %[[R:.*]] = %{{.*}} to %{{.*}} step
// CHECK:             scf.for %[[J:.*]] = %{{.*}} to %{{.*}} step
// CHECK:               arith.muli %[[J]], %[[BS]] : index
// CHECK:               %[[ACC:.*]]:7 = scf.for
// CHECK:                 arith.addf
// CHECK:               %[[ANY:.*]] = arith.cmpi ugt, %[[ACC]]#6, %{{.*}} : index
// CHECK:               %[[CNT:.*]] = arith.index_cast %[[ACC]]#6 : index to i64
// CHECK:               %[[CNTF:.*]] = arith.sitofp %[[CNT]] : i64 to f32
// CHECK:               %[[MEAN:.*]] = arith.divf %[[ACC]]#1, %[[CNTF]] : f32
// CHECK:               %[[POOLED:.*]] = arith.select %[[ANY]], %[[MEAN]], %{{.*}} : f32
// CHECK:               memref.store %[[POOLED]], %[[OUT]][%[[B]], %[[R]], %[[J]]] : memref<2x1x8xf32>
// CHECK:         return
func.func @pool_mean(%z: tensor<2x1x64xf32>, %n: tensor<2x1xi32>) -> tensor<2x1x8xf32> {
  %S = spin.pool %z lengths(%n : tensor<2x1xi32>) {pooling = #spin.pooling<mean>, block_size = 8 : i64}
      : tensor<2x1x64xf32> -> tensor<2x1x8xf32>
  return %S : tensor<2x1x8xf32>
}

// -----

// Random exploration (the default policy), layer 3, seed 7, sparsity 0.25,
// explore 0.5. Per request: the slot, it (0 is a warm-up), and the step's
// exploration base mix(mix(mix(mix(7) ^ id) ^ 3) ^ it) with splitmix64
// (increment 0x9e3779b97f4a7c15 = -7046029254386353131, multipliers
// 0xbf58476d1ce4e5b9, 0x94d049bb133111eb); mix(7) = 7191089600892374487 is
// folded at compile time. Per row: a warm-up marks every visible block;
// otherwise the budget max(ceil(K / 16), ceil(0.75 * B - 1e-9)) clamped to
// [0, B], the forced first and last blocks, the best scores, and
// floor(0.5 * budget) (a truncation: the product is non-negative) blocks
// of smallest hash rank mix(base ^ j).
// CHECK-LABEL: func.func @select_random(
// CHECK-SAME:    %[[SLOTS:[^:]*]]: memref<?xi32> {spin.slots},
// CHECK-SAME:    %{{[^:]*}}: memref<?x?xf32> {spin.layer = 3 : i64, spin.state = "v"},
// CHECK-SAME:    %{{[^:]*}}: memref<?x?xf32> {spin.layer = 3 : i64, spin.state = "d"},
// CHECK-SAME:    %[[ITS:[^:]*]]: memref<?xi64> {spin.layer = 3 : i64, spin.state = "it"}) -> tensor<2x4xi1>
// CHECK-DAG:     %[[SC:.*]] = bufferization.to_buffer %arg1 read_only : tensor<2x1x4xf32>
// CHECK-DAG:     %[[N:.*]] = bufferization.to_buffer %arg2 read_only : tensor<2x1xi32>
// CHECK-DAG:     %[[IDS:.*]] = bufferization.to_buffer %arg0 read_only : tensor<2xi64> to memref<2xi64>
// CHECK:         %[[MASK:.*]] = memref.alloc() : memref<2x4xi1>
// CHECK:         memref.store %false, %[[MASK]]
// CHECK:         %[[ROWMASK:.*]] = memref.alloc(%{{.*}}) : memref<?xi1>
// CHECK:         %[[KEYSF:.*]] = memref.alloc(%{{.*}}) : memref<?xf32>
// CHECK:         %[[KEYSH:.*]] = memref.alloc(%{{.*}}) : memref<?xi64>
// CHECK:         scf.for %[[B:.*]] = %{{.*}} to %{{.*}} step
// CHECK:           %[[SLOT32:.*]] = memref.load %[[SLOTS]][%[[B]]] : memref<?xi32>
// CHECK:           %[[SLOT:.*]] = arith.index_cast %[[SLOT32]] : i32 to index
// CHECK:           %[[IT:.*]] = memref.load %[[ITS]][%[[SLOT]]] : memref<?xi64>
// CHECK:           %[[WARM:.*]] = arith.cmpi eq, %[[IT]], %{{.*}} : i64
// CHECK:           %[[RID:.*]] = memref.load %[[IDS]][%[[B]]] : memref<2xi64>
// CHECK:           %[[SEED:.*]] = arith.constant 7191089600892374487 : i64
// CHECK:           %[[X0:.*]] = arith.xori %[[SEED]], %[[RID]] : i64
// CHECK:           %[[GOLD:.*]] = arith.constant -7046029254386353131 : i64
// CHECK:           arith.addi %[[X0]], %[[GOLD]] : i64
// CHECK:           arith.constant -4658895280553007687 : i64
// CHECK:           arith.constant -7723592293110705685 : i64
// CHECK:           %[[LAYER:.*]] = arith.constant 3 : i64
// CHECK:           arith.xori %{{.*}}, %[[LAYER]] : i64
// CHECK:           arith.constant -7046029254386353131 : i64
// CHECK:           arith.xori %{{.*}}, %[[IT]] : i64
// CHECK:           arith.constant -7046029254386353131 : i64
// CHECK:           scf.for %[[R:.*]] = %{{.*}} to %{{.*}} step
// CHECK:             memref.load %[[N]][%[[B]], %[[R]]] : memref<2x1xi32>
// CHECK:             %[[BLOCKS:.*]] = arith.minui
// CHECK:             scf.if %[[WARM]] {
// CHECK:               scf.for %{{.*}} = %{{.*}} to %[[BLOCKS]] step
// CHECK:                 memref.store %true{{.*}}, %[[ROWMASK]]
// CHECK:             } else {
// CHECK:               %[[EPS:.*]] = arith.constant 1.000000e-09 : f64
// CHECK:               %[[KEEP:.*]] = arith.constant 7.500000e-01 : f64
// CHECK:               %[[SCALED:.*]] = arith.mulf %[[KEEP]], %{{.*}} : f64
// CHECK:               arith.subf %[[SCALED]], %[[EPS]] : f64
// CHECK:               arith.maxsi
// CHECK:               arith.minsi
// CHECK:               %[[BUDGET:.*]] = arith.index_cast %{{.*}} : i64 to index
// CHECK:               %[[SHARE:.*]] = arith.constant 5.000000e-01 : f64
// CHECK:               %[[WANT:.*]] = arith.mulf %[[SHARE]], %{{.*}} : f64
// CHECK:               arith.fptosi %[[WANT]] : f64 to i64
// Exploitation keeps the best scores (ogt) among blocks 1 .. B - 2.
// CHECK:               scf.for %[[J:.*]] = %{{.*}} to %{{.*}} step %{{.*}} iter_args
// CHECK:                 %[[S:.*]] = memref.load %[[SC]][%[[B]], %[[R]], %[[J]]] : memref<2x1x4xf32>
// CHECK:                 arith.cmpf ogt, %[[S]], %{{.*}} : f32
// Exploration draws the unselected blocks of smallest hash rank.
// CHECK:               scf.for %[[E:.*]] = %{{.*}} to %[[BLOCKS]] step %{{.*}} iter_args
// CHECK:                 %[[TAKEN:.*]] = memref.load %[[ROWMASK]][%[[E]]] : memref<?xi1>
// CHECK:                 scf.if %[[TAKEN]] -> (index) {
// CHECK:                 } else {
// CHECK:                   %[[E64:.*]] = arith.index_cast %[[E]] : index to i64
// CHECK:                   %[[H0:.*]] = arith.xori %{{.*}}, %[[E64]] : i64
// CHECK:                   %[[G:.*]] = arith.constant -7046029254386353131 : i64
// CHECK:                   arith.addi %[[H0]], %[[G]] : i64
// CHECK:                   %[[C31:.*]] = arith.constant 31 : i64
// CHECK:                   %[[SH:.*]] = arith.shrui %[[MX:.*]], %[[C31]] : i64
// CHECK:                   %[[RANK:.*]] = arith.xori %[[MX]], %[[SH]] : i64
// CHECK:                   arith.cmpi ult, %[[RANK]], %{{.*}} : i64
// CHECK:                   memref.store %[[RANK]], %[[KEYSH]]
// The row's selection is OR-ed into the request's mask.
// CHECK:             scf.for %[[U:.*]] = %{{.*}} to %[[BLOCKS]] step
// CHECK:               %[[BIT:.*]] = memref.load %[[ROWMASK]][%[[U]]] : memref<?xi1>
// CHECK:               %[[OLD:.*]] = memref.load %[[MASK]][%[[B]], %[[U]]] : memref<2x4xi1>
// CHECK:               %[[NEW:.*]] = arith.ori %[[OLD]], %[[BIT]] : i1
// CHECK:               memref.store %[[NEW]], %[[MASK]][%[[B]], %[[U]]] : memref<2x4xi1>
// CHECK:         %[[T:.*]] = bufferization.to_tensor %[[MASK]]
// CHECK:         return %[[T]] : tensor<2x4xi1>
func.func @select_random(%ids: tensor<2xi64>, %sc: tensor<2x1x4xf32>, %n: tensor<2x1xi32>) -> tensor<2x4xi1> {
  %s = spin.layer_state %ids : tensor<2xi64> -> !spin.state<layer = 3>
  %m = spin.select_blocks %s scores(%sc : tensor<2x1x4xf32>) lengths(%n : tensor<2x1xi32>)
      {topk = 16 : i64, block_size = 16 : i64, sparsity = 0.25, explore = 0.5, seed = 7 : i64}
      : !spin.state<layer = 3> -> tensor<2x4xi1>
  return %m : tensor<2x4xi1>
}

// -----

// Block-age exploration on a last_observed state: the exploration list
// ranks unselected blocks by age it + 1 - last_observed[slot, j], oldest
// (sgt) first, instead of by hash.
// CHECK-LABEL: func.func @select_block_age(
// CHECK-SAME:    %[[SLOTS:[^:]*]]: memref<?xi32> {spin.slots},
// CHECK-SAME:    %[[ITS:[^:]*]]: memref<?xi64> {spin.layer = 0 : i64, spin.state = "it"},
// CHECK-SAME:    %[[LAST:[^:]*]]: memref<?x?xi32> {spin.layer = 0 : i64, spin.state = "last_observed"}) -> tensor<2x4xi1>
// CHECK:         scf.for %[[B:.*]] = %{{.*}} to %{{.*}} step
// CHECK:           memref.load %[[SLOTS]][%[[B]]]
// CHECK:           %[[SLOT:.*]] = arith.index_cast
// CHECK:           %[[IT:.*]] = memref.load %[[ITS]][%[[SLOT]]] : memref<?xi64>
// CHECK:           arith.constant -7046029254386353131 : i64
// CHECK:           scf.for %[[R:.*]] = %{{.*}} to %{{.*}} step
// CHECK:             arith.constant 1.000000e-09 : f64
// CHECK:             scf.if %{{.*}} -> (index) {
// CHECK:             } else {
// CHECK:               %[[SEEN:.*]] = memref.load %[[LAST]][%[[SLOT]], %[[J:.*]]] : memref<?x?xi32>
// CHECK-NOT:           arith.constant -7046029254386353131
// CHECK:               %[[SEEN64:.*]] = arith.extsi %[[SEEN]] : i32 to i64
// CHECK:               %[[NEXT:.*]] = arith.addi %[[IT]], %{{.*}} : i64
// CHECK:               %[[AGE:.*]] = arith.subi %[[NEXT]], %[[SEEN64]] : i64
// CHECK:               arith.cmpi sgt, %[[AGE]], %{{.*}} : i64
// CHECK:         return
func.func @select_block_age(%ids: tensor<2xi64>, %sc: tensor<2x1x4xf32>, %n: tensor<2x1xi32>) -> tensor<2x4xi1> {
  %s = spin.layer_state %ids : tensor<2xi64> -> !spin.state<layer = 0, last_observed = true>
  %m = spin.select_blocks %s scores(%sc : tensor<2x1x4xf32>) lengths(%n : tensor<2x1xi32>)
      {topk = 16 : i64, block_size = 16 : i64, sparsity = 0.5, explore = 0.25,
       explore_policy = #spin.explore_policy<block_age>}
      : !spin.state<layer = 0, last_observed = true> -> tensor<2x4xi1>
  return %m : tensor<2x4xi1>
}

// -----

// The a0 reduction with row-0 sharing (MTP, R = 4): only row 0 selects
// outside a warm-up; the top-K (K = 8) slot predictions mark their blocks
// (slot / 16), then the forced first and last blocks. No budget.
// CHECK-LABEL: func.func @select_a0_row0(
// CHECK-DAG:     %[[Z:.*]] = bufferization.to_buffer %arg1 read_only : tensor<2x4x64xf32>
// CHECK-DAG:     %[[BS:.*]] = arith.constant 16 : index
// CHECK:         %[[ROWMASK:.*]] = memref.alloc(%{{.*}}) : memref<?xi1>
// CHECK:         %[[K:.*]] = arith.constant 8 : index
// CHECK:         memref.alloc(%[[K]]) : memref<?xf32>
// CHECK:         %[[IDS:.*]] = memref.alloc(%[[K]]) : memref<?xi32>
// CHECK:         scf.for %[[B:.*]] = %{{.*}} to %{{.*}} step
// CHECK:           %[[WARM:.*]] = arith.cmpi eq, %{{.*}}, %{{.*}} : i64
// CHECK:           scf.for %[[R:.*]] = %{{.*}} to %{{.*}} step
// CHECK:             %[[ROW0:.*]] = arith.cmpi eq, %[[R]], %{{.*}} : index
// CHECK:             %[[USED:.*]] = arith.ori %[[WARM]], %[[ROW0]] : i1
// CHECK:             scf.if %[[USED]] {
// CHECK:               scf.if %[[WARM]] {
// CHECK:               } else {
// CHECK-NOT:             arith.constant 1.000000e-09
// CHECK:                 scf.for %[[I:.*]] = %{{.*}} to %{{.*}} step %{{.*}} iter_args
// CHECK:                   memref.load %[[Z]][%[[B]], %[[R]], %[[I]]] : memref<2x4x64xf32>
// CHECK:                 scf.for %[[T:.*]] = %{{.*}} to %{{.*}} step
// CHECK:                   %[[ID:.*]] = memref.load %[[IDS]][%[[T]]] : memref<?xi32>
// CHECK:                   %[[IDX:.*]] = arith.index_cast %[[ID]] : i32 to index
// CHECK:                   %[[BLK:.*]] = arith.divui %[[IDX]], %[[BS]] : index
// CHECK:                   memref.store %{{.*}}, %[[ROWMASK]][%[[BLK]]] : memref<?xi1>
// CHECK:         return
func.func @select_a0_row0(%ids: tensor<2xi64>, %z: tensor<2x4x64xf32>, %n: tensor<2x4xi32>) -> tensor<2x4xi1> {
  %s = spin.layer_state %ids : tensor<2xi64> -> !spin.state<layer = 0>
  %m = spin.select_blocks %s scores(%z : tensor<2x4x64xf32>) lengths(%n : tensor<2x4xi32>)
      {topk = 8 : i64, block_size = 16 : i64, sparsity = 0.5, reduction = #spin.reduction<a0>,
       mtp_mask = #spin.mtp_mask<row0>}
      : !spin.state<layer = 0> -> tensor<2x4xi1>
  return %m : tensor<2x4xi1>
}
