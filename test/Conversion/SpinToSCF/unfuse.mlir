// RUN: spin-opt %s --split-input-file --convert-spin-to-scf | FileCheck %s
// RUN: spin-opt %s --split-input-file --convert-spin-to-scf | FileCheck %s --check-prefix=LOWERED

// The fused ops (one GPU kernel each) are split back for the CPU
// (UnfuseLowering.cpp) into the ops they fused, which are lowered in turn:
// each part's loops appear in order, each reading the previous part's result.

// No spin op or type is left; the spin.* argument attributes remain.
// LOWERED-NOT: {{!spin\.|spin\.[a-z_]+ [^=]}}

// spin.fused_select (a1, max pooling) -> spin.predict -> spin.pool ->
// spin.select_blocks.
// CHECK-LABEL: func.func @fused_select(
// CHECK-SAME:    %[[SLOTS:[^:]*]]: memref<?xi32> {spin.slots},
// CHECK-SAME:    %[[V:[^:]*]]: memref<?x?xf32> {spin.layer = 0 : i64, spin.state = "v"},
// CHECK-SAME:    %[[D:[^:]*]]: memref<?x?xf32> {spin.layer = 0 : i64, spin.state = "d"},
// CHECK-SAME:    %[[ITS:[^:]*]]: memref<?xi64> {spin.layer = 0 : i64, spin.state = "it"}) -> tensor<2x4xi1>
// Prediction over the 64 slots:
// CHECK:         %[[ZHAT:.*]] = memref.alloc() : memref<2x1x64xf32>
// CHECK:         scf.for
// CHECK:           memref.load %[[V]]
// CHECK:           memref.load %[[D]]
// CHECK:           arith.maximumf
// CHECK:         %[[ZHATT:.*]] = bufferization.to_tensor %[[ZHAT]]
// Max pooling into the 4 blocks:
// CHECK:         %[[ZB:.*]] = bufferization.to_buffer %[[ZHATT]] read_only : tensor<2x1x64xf32>
// CHECK:         %[[POOLED:.*]] = memref.alloc() : memref<2x1x4xf32>
// CHECK:         scf.for
// CHECK:           memref.load %[[ZB]]
// CHECK:           arith.maximumf
// CHECK:         %[[POOLEDT:.*]] = bufferization.to_tensor %[[POOLED]]
// The selection ranks the pooled scores:
// CHECK:         %[[SB:.*]] = bufferization.to_buffer %[[POOLEDT]] read_only : tensor<2x1x4xf32>
// CHECK:         %[[MASK:.*]] = memref.alloc() : memref<2x4xi1>
// CHECK:         scf.for
// CHECK:           memref.load %[[ITS]]
// CHECK:           arith.constant -7046029254386353131 : i64
// CHECK:           arith.constant 1.000000e-09 : f64
// CHECK:           memref.load %[[SB]]
// CHECK:         %[[M:.*]] = bufferization.to_tensor %[[MASK]]
// CHECK:         return %[[M]] : tensor<2x4xi1>
func.func @fused_select(%ids: tensor<2xi64>, %p: tensor<2x1xi32>, %n: tensor<2x1xi32>) -> tensor<2x4xi1> {
  %s = spin.layer_state %ids : tensor<2xi64> -> !spin.state<layer = 0>
  %m = spin.fused_select %s positions(%p : tensor<2x1xi32>) lengths(%n : tensor<2x1xi32>)
      {topk = 16 : i64, block_size = 16 : i64, sparsity = 0.5 : f64, pooling = #spin.pooling<max>}
      : !spin.state<layer = 0> -> tensor<2x4xi1>
  return %m : tensor<2x4xi1>
}

// -----

// spin.fused_score with the EMA update -> spin.sparse_indexer -> spin.topk
// and spin.ema_update, both reading the indexer's scores.
// CHECK-LABEL: func.func @fused_score(
// CHECK-SAME:    %[[SLOTS:[^:]*]]: memref<?xi32> {spin.slots},
// CHECK-SAME:    %[[V:[^:]*]]: memref<?x?xf32> {spin.layer = 0 : i64, spin.state = "v"},
// CHECK-SAME:    %[[D:[^:]*]]: memref<?x?xf32> {spin.layer = 0 : i64, spin.state = "d"},
// CHECK-SAME:    %[[ITS:[^:]*]]: memref<?xi64> {spin.layer = 0 : i64, spin.state = "it"}) -> tensor<2x1x8xi32>
// The sparse indexer (slots of selected blocks only):
// CHECK:         %[[MB:.*]] = bufferization.to_buffer %arg7 read_only : tensor<2x4xi1>
// CHECK:         %[[ZBUF:.*]] = memref.alloc() : memref<2x1x64xf32>
// CHECK:         scf.for
// CHECK:           memref.load %[[MB]]
// CHECK:           arith.andi
// CHECK:           arith.maximumf
// CHECK:         %[[Z:.*]] = bufferization.to_tensor %[[ZBUF]]
// The masked top-8 of its scores:
// CHECK:         %[[ZT:.*]] = bufferization.to_buffer %[[Z]] read_only : tensor<2x1x64xf32>
// CHECK:         %[[TBUF:.*]] = memref.alloc() : memref<2x1x8xi32>
// CHECK:         scf.for
// CHECK:           memref.load %[[ZT]]
// CHECK:           arith.cmpf ord
// CHECK:         %[[T:.*]] = bufferization.to_tensor %[[TBUF]]
// The EMA update (decay 0.5) from the same scores:
// CHECK:         %[[ZE:.*]] = bufferization.to_buffer %[[Z]] read_only : tensor<2x1x64xf32>
// CHECK:         arith.constant 5.000000e-01 : f32
// CHECK:         scf.for
// CHECK:           memref.load %[[SLOTS]]
// CHECK:           memref.load %[[ZE]]
// CHECK:           memref.store %{{.*}}, %[[V]]
// CHECK:           memref.store %{{.*}}, %[[D]]
// CHECK:           memref.store %{{.*}}, %[[ITS]]
// CHECK:         return %[[T]] : tensor<2x1x8xi32>
func.func @fused_score(%ids: tensor<2xi64>, %q: tensor<2x1x4x16xf32>, %w: tensor<2x1x4xf32>,
                       %k: tensor<8x16x16xf32>, %bt: tensor<2x4xi32>, %n: tensor<2x1xi32>,
                       %p: tensor<2x1xi32>, %m: tensor<2x4xi1>) -> tensor<2x1x8xi32> {
  %s = spin.layer_state %ids : tensor<2xi64> -> !spin.state<layer = 0>
  %t, %z, %s1 = spin.fused_score q(%q : tensor<2x1x4x16xf32>) w(%w : tensor<2x1x4xf32>)
      keys(%k : tensor<8x16x16xf32>) block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>)
      mask(%m : tensor<2x4xi1>) state(%s : !spin.state<layer = 0>) positions(%p : tensor<2x1xi32>)
      {k = 8 : i64, block_size = 16 : i64, update = #spin.update<ema>, decay = 0.5 : f64}
      -> tensor<2x1x8xi32>, tensor<2x1x64xf32>, !spin.state<layer = 0>
  return %t : tensor<2x1x8xi32>
}
