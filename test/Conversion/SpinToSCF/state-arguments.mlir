// convert-spin-to-scf appends the state-pool arguments of docs/Runtime-ABI.md
// (slot indices, then each layer's fields in increasing layer order; MTP
// layers also get their observation buffers) and leaves no spin op behind.
// RUN: spin-opt %s --convert-spin-to-scf | FileCheck %s
// RUN: spin-opt %s --convert-spin-to-scf="state-storage=globals num-slots=4 capacity=64 max-rows=4" | FileCheck %s --check-prefix=GLOBALS

// CHECK-LABEL: func.func @two_layers
// CHECK-SAME:    %{{.*}}: memref<?xi32> {spin.slots}
// CHECK-SAME:    %{{.*}}: memref<?x?xf32> {spin.layer = 1 : i64, spin.state = "v"}
// CHECK-SAME:    %{{.*}}: memref<?x?xf32> {spin.layer = 1 : i64, spin.state = "d"}
// CHECK-SAME:    %{{.*}}: memref<?xi64> {spin.layer = 1 : i64, spin.state = "it"}
// CHECK-SAME:    %{{.*}}: memref<?x?xf32> {spin.layer = 4 : i64, spin.state = "v"}
// CHECK-SAME:    %{{.*}}: memref<?x?xf32> {spin.layer = 4 : i64, spin.state = "d"}
// CHECK-SAME:    %{{.*}}: memref<?xi64> {spin.layer = 4 : i64, spin.state = "it"}
// CHECK-SAME:    %{{.*}}: memref<?xi32> {spin.layer = 4 : i64, spin.state = "obs_rows"}
// CHECK-SAME:    %{{.*}}: memref<?x?xi32> {spin.layer = 4 : i64, spin.state = "obs_pos"}
// CHECK-SAME:    %{{.*}}: memref<?x?xi32> {spin.layer = 4 : i64, spin.state = "obs_len"}
// CHECK-SAME:    %{{.*}}: memref<?x?xi8> {spin.layer = 4 : i64, spin.state = "obs_mask"}
// CHECK-SAME:    %{{.*}}: memref<?x?x?xf32> {spin.layer = 4 : i64, spin.state = "obs_z"})
// CHECK-NOT:     spin.
// CHECK:         scf.for
// CHECK:         return

// GLOBALS-DAG: memref.global "private" @__spin_state_1_v : memref<4x64xf32> = dense<0.000000e+00> {alignment = 64 : i64}
// GLOBALS-DAG: memref.global "private" @__spin_state_4_obs_z : memref<4x3x64xf32>
// GLOBALS-DAG: memref.global "private" @__spin_state_2_last_observed : memref<4x64xi32>
// GLOBALS-LABEL: func.func @two_layers
// GLOBALS-SAME:    %{{[^:]*}}: tensor<2x4xi32>) -> tensor<2x4xf32>
// GLOBALS:         memref.get_global @__spin_state_1_v
func.func @two_layers(%ids: tensor<2xi64>, %p: tensor<2x1xi32>, %n: tensor<2x1xi32>,
                      %p4: tensor<2x4xi32>, %n4: tensor<2x4xi32>) -> tensor<2x4xf32> {
  %s4 = spin.layer_state %ids : tensor<2xi64> -> !spin.state<layer = 4>
  %s1 = spin.layer_state %ids : tensor<2xi64> -> !spin.state<layer = 1>
  %z1 = spin.predict %s1 positions(%p : tensor<2x1xi32>) lengths(%n : tensor<2x1xi32>)
      : !spin.state<layer = 1> -> tensor<2x1x64xf32>
  %a = arith.constant dense<0> : tensor<2xi32>
  %c = spin.commit %s4 accepted(%a : tensor<2xi32>) {block_size = 16 : i64, decay = 0.5 : f64}
      : !spin.state<layer = 4>
  %z4 = spin.predict %c positions(%p4 : tensor<2x4xi32>) lengths(%n4 : tensor<2x4xi32>)
      : !spin.state<layer = 4> -> tensor<2x4x64xf32>
  %S = spin.pool %z4 lengths(%n4 : tensor<2x4xi32>) {pooling = #spin.pooling<mean>, block_size = 16 : i64}
      : tensor<2x4x64xf32> -> tensor<2x4x4xf32>
  %r = tensor.extract_slice %S[0, 0, 0] [2, 1, 4] [1, 1, 1] : tensor<2x4x4xf32> to tensor<2x4xf32>
  return %r : tensor<2x4xf32>
}

// A state with last_observed gets that field last (the layers that explore
// by block age); the update writes it and the reset clears it.
// CHECK-LABEL: func.func @block_age_layer
// CHECK-SAME:    %{{.*}}: memref<?xi32> {spin.slots}
// CHECK-SAME:    %{{.*}}: memref<?x?xf32> {spin.layer = 2 : i64, spin.state = "v"}
// CHECK-SAME:    %{{.*}}: memref<?x?xf32> {spin.layer = 2 : i64, spin.state = "d"}
// CHECK-SAME:    %{{.*}}: memref<?xi64> {spin.layer = 2 : i64, spin.state = "it"}
// CHECK-SAME:    %[[LAST:[^:]*]]: memref<?x?xi32> {spin.layer = 2 : i64, spin.state = "last_observed"})
// CHECK-NOT:     spin.
// CHECK:         memref.store %{{.*}}, %[[LAST]]
// CHECK:         memref.load %[[LAST]]
// CHECK:         memref.store %{{.*}}, %[[LAST]]
// CHECK:         return

func.func @block_age_layer(%ids: tensor<2xi64>, %p: tensor<2x1xi32>, %n: tensor<2x1xi32>,
                           %fresh: tensor<2xi1>, %z: tensor<2x1x64xf32>) -> tensor<2x4xi1> {
  %s0 = spin.layer_state %ids : tensor<2xi64> -> !spin.state<layer = 2, last_observed = true>
  %s = spin.reset %s0 requests(%fresh : tensor<2xi1>) : !spin.state<layer = 2, last_observed = true>
  %zh = spin.predict %s positions(%p : tensor<2x1xi32>) lengths(%n : tensor<2x1xi32>)
      : !spin.state<layer = 2, last_observed = true> -> tensor<2x1x64xf32>
  %S = spin.pool %zh lengths(%n : tensor<2x1xi32>) {pooling = #spin.pooling<max>, block_size = 16 : i64}
      : tensor<2x1x64xf32> -> tensor<2x1x4xf32>
  %m = spin.select_blocks %s scores(%S : tensor<2x1x4xf32>) lengths(%n : tensor<2x1xi32>)
      {topk = 16 : i64, block_size = 16 : i64, sparsity = 0.5, explore = 0.5,
       explore_policy = #spin.explore_policy<block_age>}
      : !spin.state<layer = 2, last_observed = true> -> tensor<2x4xi1>
  %s1 = spin.ema_update %s scores(%z : tensor<2x1x64xf32>) positions(%p : tensor<2x1xi32>)
      lengths(%n : tensor<2x1xi32>) mask(%m : tensor<2x4xi1>) {decay = 0.5 : f64, block_size = 16 : i64}
      : !spin.state<layer = 2, last_observed = true>
  return %m : tensor<2x4xi1>
}
