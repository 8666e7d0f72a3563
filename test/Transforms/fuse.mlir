// RUN: spin-opt %s --spin-fuse | FileCheck %s
// RUN: spin-opt %s --spin-fuse --spin-fuse | FileCheck %s

// spin-fuse: predict (-> pool) -> select_blocks becomes spin.fused_select and
// sparse_indexer -> topk (+ ema_update | observe) becomes spin.fused_score.
// The second RUN shows that a second application changes nothing more.
// Shapes: B = 2 requests, R = 1 row (4 for MTP), H = 4 heads, Dh = 16, pages
// of S = 16 slots, MB = 4 pages (NS = 64 slots), block_size 16 (NB = 4).

//===----------------------------------------------------------------------===//
// Fused chains
//===----------------------------------------------------------------------===//

// A1 decode step: the pool's kind becomes the fused select's `pooling`, the
// EMA update is fused into the scoring with its decay.

// CHECK-LABEL: func.func @a1_decode_step(
// CHECK-SAME:    %[[S:[^:]+]]: !spin.state<layer = 0>, %[[Q:[^:]+]]: tensor<2x1x4x16xbf16>,
// CHECK-SAME:    %[[W:[^:]+]]: tensor<2x1x4xf32>, %[[K:[^:]+]]: tensor<?x16x16xbf16>,
// CHECK-SAME:    %[[BT:[^:]+]]: tensor<2x4xi32>, %[[P:[^:]+]]: tensor<2x1xi32>,
// CHECK-SAME:    %[[N:[^:]+]]: tensor<2x1xi32>)
// CHECK-NOT:     spin.predict
// CHECK-NOT:     spin.pool
// CHECK-NOT:     spin.select_blocks
// CHECK:         %[[M:.*]] = spin.fused_select %[[S]] positions(%[[P]] : tensor<2x1xi32>) lengths(%[[N]] : tensor<2x1xi32>) {block_size = 16 : i64, explore = 2.500000e-01 : f64, pooling = #spin.pooling<max>, seed = 7 : i64, sparsity = 5.000000e-01 : f64, topk = 16 : i64} : !spin.state<layer = 0> -> tensor<2x4xi1>{{$}}
// CHECK-NOT:     spin.sparse_indexer
// CHECK:         %[[T:.*]], %{{.*}}, %[[S1:.*]] = spin.fused_score q(%[[Q]] : tensor<2x1x4x16xbf16>) w(%[[W]] : tensor<2x1x4xf32>) keys(%[[K]] : tensor<?x16x16xbf16>) block_table(%[[BT]] : tensor<2x4xi32>) lengths(%[[N]] : tensor<2x1xi32>) mask(%[[M]] : tensor<2x4xi1>) state(%[[S]] : !spin.state<layer = 0>) positions(%[[P]] : tensor<2x1xi32>) {block_size = 16 : i64, decay = 5.000000e-01 : f64, k = 16 : i64, update = #spin.update<ema>} -> tensor<2x1x16xi32>, tensor<2x1x64xf32>, !spin.state<layer = 0>{{$}}
// CHECK-NOT:     spin.topk
// CHECK-NOT:     spin.ema_update
// CHECK:         return %[[T]], %[[S1]] :
func.func @a1_decode_step(%s: !spin.state<layer = 0>, %q: tensor<2x1x4x16xbf16>,
                          %w: tensor<2x1x4xf32>, %k: tensor<?x16x16xbf16>,
                          %bt: tensor<2x4xi32>, %p: tensor<2x1xi32>,
                          %n: tensor<2x1xi32>)
    -> (tensor<2x1x16xi32>, !spin.state<layer = 0>) {
  %zhat = spin.predict %s positions(%p : tensor<2x1xi32>)
      lengths(%n : tensor<2x1xi32>) : !spin.state<layer = 0>
      -> tensor<2x1x64xf32>
  %bs = spin.pool %zhat lengths(%n : tensor<2x1xi32>)
      {pooling = #spin.pooling<max>, block_size = 16 : i64}
      : tensor<2x1x64xf32> -> tensor<2x1x4xf32>
  %m = spin.select_blocks %s scores(%bs : tensor<2x1x4xf32>)
      lengths(%n : tensor<2x1xi32>)
      {topk = 16 : i64, block_size = 16 : i64, sparsity = 5.0e-01,
       explore = 2.5e-01, seed = 7 : i64}
      : !spin.state<layer = 0> -> tensor<2x4xi1>
  %z = spin.sparse_indexer q(%q : tensor<2x1x4x16xbf16>)
      w(%w : tensor<2x1x4xf32>) keys(%k : tensor<?x16x16xbf16>)
      block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>)
      mask(%m : tensor<2x4xi1>) {block_size = 16 : i64}
      -> tensor<2x1x64xf32>
  %t = spin.topk %z lengths(%n : tensor<2x1xi32>) mask(%m : tensor<2x4xi1>)
      {k = 16 : i64, block_size = 16 : i64}
      : tensor<2x1x64xf32> -> tensor<2x1x16xi32>
  %s1 = spin.ema_update %s scores(%z : tensor<2x1x64xf32>)
      positions(%p : tensor<2x1xi32>) lengths(%n : tensor<2x1xi32>)
      mask(%m : tensor<2x4xi1>) {decay = 5.0e-01, block_size = 16 : i64}
      : !spin.state<layer = 0>
  return %t, %s1 : tensor<2x1x16xi32>, !spin.state<layer = 0>
}

// A0 ranks the slot predictions directly: no pool, no `pooling`.

// CHECK-LABEL: func.func @a0_step(
// CHECK-SAME:    %[[S:[^:]+]]: !spin.state<layer = 0>, %[[Q:[^:]+]]: tensor<2x1x4x16xbf16>,
// CHECK-SAME:    %[[P:[^:]+]]: tensor<2x1xi32>, %[[N:[^:]+]]: tensor<2x1xi32>)
// CHECK-NOT:     spin.predict
// CHECK:         %[[M:.*]] = spin.fused_select %[[S]] positions(%[[P]] : tensor<2x1xi32>) lengths(%[[N]] : tensor<2x1xi32>) {block_size = 16 : i64, reduction = #spin.reduction<a0>, sparsity = 5.000000e-01 : f64, topk = 16 : i64} : !spin.state<layer = 0> -> tensor<2x4xi1>{{$}}
// CHECK:         %[[T:.*]], %{{.*}}, %[[S1:.*]] = spin.fused_score q(%[[Q]] : {{.*}} lengths(%[[N]] : tensor<2x1xi32>) mask(%[[M]] : tensor<2x4xi1>) state(%[[S]] : !spin.state<layer = 0>) positions(%[[P]] : tensor<2x1xi32>) {block_size = 16 : i64, decay = 2.500000e-01 : f64, k = 16 : i64, update = #spin.update<ema>}
// CHECK-NOT:     spin.select_blocks
// CHECK-NOT:     spin.sparse_indexer
// CHECK-NOT:     spin.topk
// CHECK-NOT:     spin.ema_update
// CHECK:         return %[[T]], %[[S1]] :
func.func @a0_step(%s: !spin.state<layer = 0>, %q: tensor<2x1x4x16xbf16>,
                   %w: tensor<2x1x4xf32>, %k: tensor<?x16x16xbf16>,
                   %bt: tensor<2x4xi32>, %p: tensor<2x1xi32>,
                   %n: tensor<2x1xi32>)
    -> (tensor<2x1x16xi32>, !spin.state<layer = 0>) {
  %zhat = spin.predict %s positions(%p : tensor<2x1xi32>)
      lengths(%n : tensor<2x1xi32>) : !spin.state<layer = 0>
      -> tensor<2x1x64xf32>
  %m = spin.select_blocks %s scores(%zhat : tensor<2x1x64xf32>)
      lengths(%n : tensor<2x1xi32>)
      {topk = 16 : i64, block_size = 16 : i64, sparsity = 5.0e-01,
       reduction = #spin.reduction<a0>}
      : !spin.state<layer = 0> -> tensor<2x4xi1>
  %z = spin.sparse_indexer q(%q : tensor<2x1x4x16xbf16>)
      w(%w : tensor<2x1x4xf32>) keys(%k : tensor<?x16x16xbf16>)
      block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>)
      mask(%m : tensor<2x4xi1>) {block_size = 16 : i64}
      -> tensor<2x1x64xf32>
  %t = spin.topk %z lengths(%n : tensor<2x1xi32>) mask(%m : tensor<2x4xi1>)
      {k = 16 : i64, block_size = 16 : i64}
      : tensor<2x1x64xf32> -> tensor<2x1x16xi32>
  %s1 = spin.ema_update %s scores(%z : tensor<2x1x64xf32>)
      positions(%p : tensor<2x1xi32>) lengths(%n : tensor<2x1xi32>)
      mask(%m : tensor<2x4xi1>) {decay = 2.5e-01, block_size = 16 : i64}
      : !spin.state<layer = 0>
  return %t, %s1 : tensor<2x1x16xi32>, !spin.state<layer = 0>
}

// A2: block-level state, block predictions ranked directly; the update pools
// the observed scores per block, which the fused score keeps as `pooling`.

// CHECK-LABEL: func.func @a2_block_state(
// CHECK-SAME:    %[[S:[^:]+]]: !spin.state<layer = 2, level = block>,
// CHECK-SAME:    %[[P:[^:]+]]: tensor<2x1xi32>, %[[N:[^:]+]]: tensor<2x1xi32>)
// CHECK-NOT:     spin.predict
// CHECK:         %[[M:.*]] = spin.fused_select %[[S]] positions(%[[P]] : tensor<2x1xi32>) lengths(%[[N]] : tensor<2x1xi32>) {block_size = 16 : i64, explore = 5.000000e-02 : f64, reduction = #spin.reduction<a2>, seed = -3 : i64, sparsity = 7.500000e-01 : f64, topk = 16 : i64} : !spin.state<layer = 2, level = block> -> tensor<2x4xi1>{{$}}
// CHECK:         %[[T:.*]], %{{.*}}, %[[S1:.*]] = spin.fused_score {{.*}} mask(%[[M]] : tensor<2x4xi1>) state(%[[S]] : !spin.state<layer = 2, level = block>) positions(%[[P]] : tensor<2x1xi32>) {block_size = 16 : i64, decay = 9.000000e-01 : f64, k = 16 : i64, pooling = #spin.pooling<mean>, update = #spin.update<ema>} -> tensor<2x1x16xi32>, tensor<2x1x64xf32>, !spin.state<layer = 2, level = block>{{$}}
// CHECK-NOT:     spin.select_blocks
// CHECK-NOT:     spin.ema_update
// CHECK:         return %[[T]], %[[S1]] :
func.func @a2_block_state(%s: !spin.state<layer = 2, level = block>,
                          %q: tensor<2x1x4x16xbf16>, %w: tensor<2x1x4xf32>,
                          %k: tensor<?x16x16xbf16>, %bt: tensor<2x4xi32>,
                          %p: tensor<2x1xi32>, %n: tensor<2x1xi32>)
    -> (tensor<2x1x16xi32>, !spin.state<layer = 2, level = block>) {
  %zb = spin.predict %s positions(%p : tensor<2x1xi32>)
      lengths(%n : tensor<2x1xi32>) {block_size = 16 : i64}
      : !spin.state<layer = 2, level = block> -> tensor<2x1x4xf32>
  %m = spin.select_blocks %s scores(%zb : tensor<2x1x4xf32>)
      lengths(%n : tensor<2x1xi32>)
      {topk = 16 : i64, block_size = 16 : i64, sparsity = 7.5e-01,
       explore = 5.0e-02, seed = -3 : i64, reduction = #spin.reduction<a2>}
      : !spin.state<layer = 2, level = block> -> tensor<2x4xi1>
  %z = spin.sparse_indexer q(%q : tensor<2x1x4x16xbf16>)
      w(%w : tensor<2x1x4xf32>) keys(%k : tensor<?x16x16xbf16>)
      block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>)
      mask(%m : tensor<2x4xi1>) {block_size = 16 : i64}
      -> tensor<2x1x64xf32>
  %t = spin.topk %z lengths(%n : tensor<2x1xi32>) mask(%m : tensor<2x4xi1>)
      {k = 16 : i64, block_size = 16 : i64}
      : tensor<2x1x64xf32> -> tensor<2x1x16xi32>
  %s1 = spin.ema_update %s scores(%z : tensor<2x1x64xf32>)
      positions(%p : tensor<2x1xi32>) lengths(%n : tensor<2x1xi32>)
      mask(%m : tensor<2x4xi1>)
      {decay = 9.0e-01, block_size = 16 : i64, pooling = #spin.pooling<mean>}
      : !spin.state<layer = 2, level = block>
  return %t, %s1 : tensor<2x1x16xi32>, !spin.state<layer = 2, level = block>
}

// MTP verification step (R = 4): the commit of the previous step stays, the
// selection reads the committed state, and the observation is fused with
// `update = observe` (no decay: spin.commit applies it).

// CHECK-LABEL: func.func @mtp_step(
// CHECK-SAME:    %[[S:[^:]+]]: !spin.state<layer = 0>, %[[Q:[^:]+]]: tensor<2x4x4x16xbf16>,
// CHECK-SAME:    %[[BT:[^:]+]]: tensor<2x4xi32>, %[[P:[^:]+]]: tensor<2x4xi32>,
// CHECK-SAME:    %[[N:[^:]+]]: tensor<2x4xi32>, %[[A:[^:]+]]: tensor<2xi32>)
// CHECK:         %[[S1:.*]] = spin.commit %[[S]] accepted(%[[A]] : tensor<2xi32>) {block_size = 16 : i64, decay = 5.000000e-01 : f64} : !spin.state<layer = 0>{{$}}
// CHECK-NEXT:    %[[M:.*]] = spin.fused_select %[[S1]] positions(%[[P]] : tensor<2x4xi32>) lengths(%[[N]] : tensor<2x4xi32>) {block_size = 16 : i64, mtp_mask = #spin.mtp_mask<row0>, pooling = #spin.pooling<top4>, sparsity = 5.000000e-01 : f64, topk = 16 : i64} : !spin.state<layer = 0> -> tensor<2x4xi1>{{$}}
// CHECK-NEXT:    %[[T:.*]], %{{.*}}, %[[S2:.*]] = spin.fused_score q(%[[Q]] : tensor<2x4x4x16xbf16>) {{.*}} block_table(%[[BT]] : tensor<2x4xi32>) lengths(%[[N]] : tensor<2x4xi32>) mask(%[[M]] : tensor<2x4xi1>) state(%[[S1]] : !spin.state<layer = 0>) positions(%[[P]] : tensor<2x4xi32>) {block_size = 16 : i64, decay = 5.000000e-01 : f64, k = 16 : i64, update = #spin.update<observe>} -> tensor<2x4x16xi32>, tensor<2x4x64xf32>, !spin.state<layer = 0>{{$}}
// CHECK-NEXT:    return %[[T]], %[[S2]] :
func.func @mtp_step(%s: !spin.state<layer = 0>, %q: tensor<2x4x4x16xbf16>,
                    %w: tensor<2x4x4xf32>, %k: tensor<?x16x16xbf16>,
                    %bt: tensor<2x4xi32>, %p: tensor<2x4xi32>,
                    %n: tensor<2x4xi32>, %a: tensor<2xi32>)
    -> (tensor<2x4x16xi32>, !spin.state<layer = 0>) {
  %s1 = spin.commit %s accepted(%a : tensor<2xi32>) {block_size = 16 : i64, decay = 5.0e-01}
      : !spin.state<layer = 0>
  %zhat = spin.predict %s1 positions(%p : tensor<2x4xi32>)
      lengths(%n : tensor<2x4xi32>) : !spin.state<layer = 0>
      -> tensor<2x4x64xf32>
  %bs = spin.pool %zhat lengths(%n : tensor<2x4xi32>)
      {pooling = #spin.pooling<top4>, block_size = 16 : i64}
      : tensor<2x4x64xf32> -> tensor<2x4x4xf32>
  %m = spin.select_blocks %s1 scores(%bs : tensor<2x4x4xf32>)
      lengths(%n : tensor<2x4xi32>)
      {topk = 16 : i64, block_size = 16 : i64, sparsity = 5.0e-01,
       mtp_mask = #spin.mtp_mask<row0>}
      : !spin.state<layer = 0> -> tensor<2x4xi1>
  %z = spin.sparse_indexer q(%q : tensor<2x4x4x16xbf16>)
      w(%w : tensor<2x4x4xf32>) keys(%k : tensor<?x16x16xbf16>)
      block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x4xi32>)
      mask(%m : tensor<2x4xi1>) {block_size = 16 : i64}
      -> tensor<2x4x64xf32>
  %t = spin.topk %z lengths(%n : tensor<2x4xi32>) mask(%m : tensor<2x4xi1>)
      {k = 16 : i64, block_size = 16 : i64}
      : tensor<2x4x64xf32> -> tensor<2x4x16xi32>
  %s2 = spin.observe %s1 scores(%z : tensor<2x4x64xf32>)
      positions(%p : tensor<2x4xi32>) lengths(%n : tensor<2x4xi32>)
      mask(%m : tensor<2x4xi1>) {block_size = 16 : i64, decay = 5.0e-01}
      : !spin.state<layer = 0>
  return %t, %s2 : tensor<2x4x16xi32>, !spin.state<layer = 0>
}

// Two indexer layers with their own states: each layer is fused on its own.

// CHECK-LABEL: func.func @two_layers(
// CHECK-SAME:    %[[IDS:[^:]+]]: tensor<2xi64>,
// CHECK-SAME:    %[[Q0:[^:]+]]: tensor<2x1x4x16xbf16>, %[[Q1:[^:]+]]: tensor<2x1x4x16xbf16>,
// CHECK-SAME:    %[[K0:[^:]+]]: tensor<?x16x16xbf16>, %[[K1:[^:]+]]: tensor<?x16x16xbf16>,
// CHECK-SAME:    %[[P:[^:]+]]: tensor<2x1xi32>, %[[N:[^:]+]]: tensor<2x1xi32>,
// CHECK:         %[[S0:.*]] = spin.layer_state %[[IDS]] : tensor<2xi64> -> !spin.state<layer = 0>
// CHECK-NEXT:    %[[M0:.*]] = spin.fused_select %[[S0]] positions(%[[P]] : tensor<2x1xi32>) lengths(%[[N]] : tensor<2x1xi32>) {{.*}}pooling = #spin.pooling<max>{{.*}} : !spin.state<layer = 0> -> tensor<2x4xi1>
// CHECK-NEXT:    %[[T0:.*]], %{{.*}}, %[[S0N:.*]] = spin.fused_score q(%[[Q0]] : {{.*}} keys(%[[K0]] : {{.*}} mask(%[[M0]] : tensor<2x4xi1>) state(%[[S0]] : !spin.state<layer = 0>) {{.*}}update = #spin.update<ema>}
// CHECK-NEXT:    %[[S1:.*]] = spin.layer_state %[[IDS]] : tensor<2xi64> -> !spin.state<layer = 1>
// CHECK-NEXT:    %[[M1:.*]] = spin.fused_select %[[S1]] positions(%[[P]] : tensor<2x1xi32>) lengths(%[[N]] : tensor<2x1xi32>) {{.*}}pooling = #spin.pooling<mean>{{.*}} : !spin.state<layer = 1> -> tensor<2x4xi1>
// CHECK-NEXT:    %[[T1:.*]], %{{.*}}, %[[S1N:.*]] = spin.fused_score q(%[[Q1]] : {{.*}} keys(%[[K1]] : {{.*}} mask(%[[M1]] : tensor<2x4xi1>) state(%[[S1]] : !spin.state<layer = 1>) {{.*}}update = #spin.update<ema>}
// CHECK-NEXT:    return %[[T0]], %[[T1]], %[[S0N]], %[[S1N]] :
func.func @two_layers(%ids: tensor<2xi64>,
                      %q0: tensor<2x1x4x16xbf16>, %q1: tensor<2x1x4x16xbf16>,
                      %k0: tensor<?x16x16xbf16>, %k1: tensor<?x16x16xbf16>,
                      %p: tensor<2x1xi32>, %n: tensor<2x1xi32>,
                      %w: tensor<2x1x4xf32>, %bt: tensor<2x4xi32>)
    -> (tensor<2x1x16xi32>, tensor<2x1x16xi32>, !spin.state<layer = 0>,
        !spin.state<layer = 1>) {
  %s0 = spin.layer_state %ids : tensor<2xi64> -> !spin.state<layer = 0>
  %zhat0 = spin.predict %s0 positions(%p : tensor<2x1xi32>)
      lengths(%n : tensor<2x1xi32>) : !spin.state<layer = 0>
      -> tensor<2x1x64xf32>
  %bs0 = spin.pool %zhat0 lengths(%n : tensor<2x1xi32>)
      {pooling = #spin.pooling<max>, block_size = 16 : i64}
      : tensor<2x1x64xf32> -> tensor<2x1x4xf32>
  %m0 = spin.select_blocks %s0 scores(%bs0 : tensor<2x1x4xf32>)
      lengths(%n : tensor<2x1xi32>)
      {topk = 16 : i64, block_size = 16 : i64, sparsity = 5.0e-01}
      : !spin.state<layer = 0> -> tensor<2x4xi1>
  %z0 = spin.sparse_indexer q(%q0 : tensor<2x1x4x16xbf16>)
      w(%w : tensor<2x1x4xf32>) keys(%k0 : tensor<?x16x16xbf16>)
      block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>)
      mask(%m0 : tensor<2x4xi1>) {block_size = 16 : i64}
      -> tensor<2x1x64xf32>
  %t0 = spin.topk %z0 lengths(%n : tensor<2x1xi32>) mask(%m0 : tensor<2x4xi1>)
      {k = 16 : i64, block_size = 16 : i64}
      : tensor<2x1x64xf32> -> tensor<2x1x16xi32>
  %s0n = spin.ema_update %s0 scores(%z0 : tensor<2x1x64xf32>)
      positions(%p : tensor<2x1xi32>) lengths(%n : tensor<2x1xi32>)
      mask(%m0 : tensor<2x4xi1>) {decay = 5.0e-01, block_size = 16 : i64}
      : !spin.state<layer = 0>
  %s1 = spin.layer_state %ids : tensor<2xi64> -> !spin.state<layer = 1>
  %zhat1 = spin.predict %s1 positions(%p : tensor<2x1xi32>)
      lengths(%n : tensor<2x1xi32>) : !spin.state<layer = 1>
      -> tensor<2x1x64xf32>
  %bs1 = spin.pool %zhat1 lengths(%n : tensor<2x1xi32>)
      {pooling = #spin.pooling<mean>, block_size = 16 : i64}
      : tensor<2x1x64xf32> -> tensor<2x1x4xf32>
  %m1 = spin.select_blocks %s1 scores(%bs1 : tensor<2x1x4xf32>)
      lengths(%n : tensor<2x1xi32>)
      {topk = 16 : i64, block_size = 16 : i64, sparsity = 2.5e-01}
      : !spin.state<layer = 1> -> tensor<2x4xi1>
  %z1 = spin.sparse_indexer q(%q1 : tensor<2x1x4x16xbf16>)
      w(%w : tensor<2x1x4xf32>) keys(%k1 : tensor<?x16x16xbf16>)
      block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>)
      mask(%m1 : tensor<2x4xi1>) {block_size = 16 : i64}
      -> tensor<2x1x64xf32>
  %t1 = spin.topk %z1 lengths(%n : tensor<2x1xi32>) mask(%m1 : tensor<2x4xi1>)
      {k = 16 : i64, block_size = 16 : i64}
      : tensor<2x1x64xf32> -> tensor<2x1x16xi32>
  %s1n = spin.ema_update %s1 scores(%z1 : tensor<2x1x64xf32>)
      positions(%p : tensor<2x1xi32>) lengths(%n : tensor<2x1xi32>)
      mask(%m1 : tensor<2x4xi1>) {decay = 5.0e-01, block_size = 16 : i64}
      : !spin.state<layer = 1>
  return %t0, %t1, %s0n, %s1n : tensor<2x1x16xi32>, tensor<2x1x16xi32>,
      !spin.state<layer = 0>, !spin.state<layer = 1>
}

// Without an update, the fused score is pure (no state); the scores' other
// user reads the fused op's scores result.

// CHECK-LABEL: func.func @score_without_update(
// CHECK-SAME:    %[[Q:[^:]+]]: tensor<2x1x4x16xbf16>,
// CHECK-SAME:    %[[N:[^:]+]]: tensor<2x1xi32>, %[[M:[^:]+]]: tensor<2x4xi1>)
// CHECK-NEXT:    %[[T:.*]], %[[Z:.*]] = spin.fused_score q(%[[Q]] : {{.*}} lengths(%[[N]] : tensor<2x1xi32>) mask(%[[M]] : tensor<2x4xi1>) {block_size = 16 : i64, k = 8 : i64} -> tensor<2x1x8xi32>, tensor<2x1x64xf32>{{$}}
// CHECK-NEXT:    return %[[T]], %[[Z]] :
func.func @score_without_update(%q: tensor<2x1x4x16xbf16>, %w: tensor<2x1x4xf32>,
                                %k: tensor<?x16x16xbf16>, %bt: tensor<2x4xi32>,
                                %n: tensor<2x1xi32>, %m: tensor<2x4xi1>)
    -> (tensor<2x1x8xi32>, tensor<2x1x64xf32>) {
  %z = spin.sparse_indexer q(%q : tensor<2x1x4x16xbf16>)
      w(%w : tensor<2x1x4xf32>) keys(%k : tensor<?x16x16xbf16>)
      block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>)
      mask(%m : tensor<2x4xi1>) {block_size = 16 : i64}
      -> tensor<2x1x64xf32>
  %t = spin.topk %z lengths(%n : tensor<2x1xi32>) mask(%m : tensor<2x4xi1>)
      {k = 8 : i64, block_size = 16 : i64}
      : tensor<2x1x64xf32> -> tensor<2x1x8xi32>
  return %t, %z : tensor<2x1x8xi32>, tensor<2x1x64xf32>
}

// The observed state is committed only after the scoring: the fused op goes
// before the first use of the scores, where the committed state exists.

// CHECK-LABEL: func.func @state_defined_after_scoring(
// CHECK-SAME:    %[[S:[^:]+]]: !spin.state<layer = 0>, %[[Q:[^:]+]]: tensor<2x4x4x16xbf16>,
// CHECK-SAME:    %[[BT:[^:]+]]: tensor<2x4xi32>, %[[P:[^:]+]]: tensor<2x4xi32>,
// CHECK-SAME:    %[[N:[^:]+]]: tensor<2x4xi32>, %[[M:[^:]+]]: tensor<2x4xi1>,
// CHECK-SAME:    %[[A:[^:]+]]: tensor<2xi32>)
// CHECK-NEXT:    %[[S1:.*]] = spin.commit %[[S]] accepted(%[[A]] : tensor<2xi32>)
// CHECK-NEXT:    %[[T:.*]], %{{.*}}, %[[S2:.*]] = spin.fused_score q(%[[Q]] : {{.*}} block_table(%[[BT]] : tensor<2x4xi32>) lengths(%[[N]] : tensor<2x4xi32>) mask(%[[M]] : tensor<2x4xi1>) state(%[[S1]] : !spin.state<layer = 0>) positions(%[[P]] : tensor<2x4xi32>) {block_size = 16 : i64, decay = 5.000000e-01 : f64, k = 16 : i64, update = #spin.update<observe>}
// CHECK-NEXT:    return %[[T]], %[[S2]] :
func.func @state_defined_after_scoring(%s: !spin.state<layer = 0>,
                                       %q: tensor<2x4x4x16xbf16>,
                                       %w: tensor<2x4x4xf32>,
                                       %k: tensor<?x16x16xbf16>,
                                       %bt: tensor<2x4xi32>, %p: tensor<2x4xi32>,
                                       %n: tensor<2x4xi32>, %m: tensor<2x4xi1>,
                                       %a: tensor<2xi32>)
    -> (tensor<2x4x16xi32>, !spin.state<layer = 0>) {
  %z = spin.sparse_indexer q(%q : tensor<2x4x4x16xbf16>)
      w(%w : tensor<2x4x4xf32>) keys(%k : tensor<?x16x16xbf16>)
      block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x4xi32>)
      mask(%m : tensor<2x4xi1>) {block_size = 16 : i64}
      -> tensor<2x4x64xf32>
  %s1 = spin.commit %s accepted(%a : tensor<2xi32>) {block_size = 16 : i64, decay = 5.0e-01}
      : !spin.state<layer = 0>
  %t = spin.topk %z lengths(%n : tensor<2x4xi32>) mask(%m : tensor<2x4xi1>)
      {k = 16 : i64, block_size = 16 : i64}
      : tensor<2x4x64xf32> -> tensor<2x4x16xi32>
  %s2 = spin.observe %s1 scores(%z : tensor<2x4x64xf32>)
      positions(%p : tensor<2x4xi32>) lengths(%n : tensor<2x4xi32>)
      mask(%m : tensor<2x4xi1>) {block_size = 16 : i64, decay = 5.0e-01}
      : !spin.state<layer = 0>
  return %t, %s2 : tensor<2x4x16xi32>, !spin.state<layer = 0>
}

//===----------------------------------------------------------------------===//
// Chains left as they are
//===----------------------------------------------------------------------===//

// The pooled scores have another user: the select chain stays (the scoring
// chain, which has no such problem, is still fused).

// CHECK-LABEL: func.func @pool_has_other_user(
// CHECK:         %[[ZHAT:.*]] = spin.predict
// CHECK-NEXT:    %[[BS:.*]] = spin.pool %[[ZHAT]]
// CHECK-NEXT:    %[[M:.*]] = spin.select_blocks %{{.*}} scores(%[[BS]] : tensor<2x1x4xf32>)
// CHECK-NOT:     spin.fused_select
// CHECK:         spin.fused_score {{.*}} mask(%[[M]] : tensor<2x4xi1>)
// CHECK:         return %{{.*}}, %[[BS]] :
func.func @pool_has_other_user(%s: !spin.state<layer = 0>,
                               %q: tensor<2x1x4x16xbf16>, %w: tensor<2x1x4xf32>,
                               %k: tensor<?x16x16xbf16>, %bt: tensor<2x4xi32>,
                               %p: tensor<2x1xi32>, %n: tensor<2x1xi32>)
    -> (tensor<2x1x16xi32>, tensor<2x1x4xf32>) {
  %zhat = spin.predict %s positions(%p : tensor<2x1xi32>)
      lengths(%n : tensor<2x1xi32>) : !spin.state<layer = 0>
      -> tensor<2x1x64xf32>
  %bs = spin.pool %zhat lengths(%n : tensor<2x1xi32>)
      {pooling = #spin.pooling<max>, block_size = 16 : i64}
      : tensor<2x1x64xf32> -> tensor<2x1x4xf32>
  %m = spin.select_blocks %s scores(%bs : tensor<2x1x4xf32>)
      lengths(%n : tensor<2x1xi32>)
      {topk = 16 : i64, block_size = 16 : i64, sparsity = 5.0e-01}
      : !spin.state<layer = 0> -> tensor<2x4xi1>
  %z = spin.sparse_indexer q(%q : tensor<2x1x4x16xbf16>)
      w(%w : tensor<2x1x4xf32>) keys(%k : tensor<?x16x16xbf16>)
      block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>)
      mask(%m : tensor<2x4xi1>) {block_size = 16 : i64}
      -> tensor<2x1x64xf32>
  %t = spin.topk %z lengths(%n : tensor<2x1xi32>) mask(%m : tensor<2x4xi1>)
      {k = 16 : i64, block_size = 16 : i64}
      : tensor<2x1x64xf32> -> tensor<2x1x16xi32>
  return %t, %bs : tensor<2x1x16xi32>, tensor<2x1x4xf32>
}

// The state is reset between the prediction and the selection: fusing would
// move the prediction's read after the reset.

// CHECK-LABEL: func.func @state_written_between_predict_and_select(
// CHECK:         spin.predict
// CHECK-NEXT:    spin.pool
// CHECK-NEXT:    spin.reset
// CHECK-NEXT:    spin.select_blocks
// CHECK-NOT:     spin.fused_select
func.func @state_written_between_predict_and_select(
    %s: !spin.state<layer = 0>, %p: tensor<2x1xi32>, %n: tensor<2x1xi32>)
    -> (tensor<2x4xi1>, !spin.state<layer = 0>) {
  %zhat = spin.predict %s positions(%p : tensor<2x1xi32>)
      lengths(%n : tensor<2x1xi32>) : !spin.state<layer = 0>
      -> tensor<2x1x64xf32>
  %bs = spin.pool %zhat lengths(%n : tensor<2x1xi32>)
      {pooling = #spin.pooling<max>, block_size = 16 : i64}
      : tensor<2x1x64xf32> -> tensor<2x1x4xf32>
  %s1 = spin.reset %s : !spin.state<layer = 0>
  %m = spin.select_blocks %s scores(%bs : tensor<2x1x4xf32>)
      lengths(%n : tensor<2x1xi32>)
      {topk = 16 : i64, block_size = 16 : i64, sparsity = 5.0e-01}
      : !spin.state<layer = 0> -> tensor<2x4xi1>
  return %m, %s1 : tensor<2x4xi1>, !spin.state<layer = 0>
}

// No top-K reads the scores: nothing to fuse the scoring with.

// CHECK-LABEL: func.func @indexer_without_topk(
// CHECK:         %[[Z:.*]] = spin.sparse_indexer
// CHECK-NEXT:    spin.ema_update %{{.*}} scores(%[[Z]] : tensor<2x1x64xf32>)
// CHECK-NOT:     spin.fused_score
func.func @indexer_without_topk(%s: !spin.state<layer = 0>,
                                %q: tensor<2x1x4x16xbf16>, %w: tensor<2x1x4xf32>,
                                %k: tensor<?x16x16xbf16>, %bt: tensor<2x4xi32>,
                                %p: tensor<2x1xi32>, %n: tensor<2x1xi32>,
                                %m: tensor<2x4xi1>) -> !spin.state<layer = 0> {
  %z = spin.sparse_indexer q(%q : tensor<2x1x4x16xbf16>)
      w(%w : tensor<2x1x4xf32>) keys(%k : tensor<?x16x16xbf16>)
      block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>)
      mask(%m : tensor<2x4xi1>) {block_size = 16 : i64}
      -> tensor<2x1x64xf32>
  %s1 = spin.ema_update %s scores(%z : tensor<2x1x64xf32>)
      positions(%p : tensor<2x1xi32>) lengths(%n : tensor<2x1xi32>)
      mask(%m : tensor<2x4xi1>) {decay = 5.0e-01, block_size = 16 : i64}
      : !spin.state<layer = 0>
  return %s1 : !spin.state<layer = 0>
}

// The top-K restricts eligibility to another mask than the scored one.

// CHECK-LABEL: func.func @topk_with_other_mask(
// CHECK-SAME:    %[[M:[^:]+]]: tensor<2x4xi1>, %[[M2:[^:]+]]: tensor<2x4xi1>)
// CHECK:         %[[Z:.*]] = spin.sparse_indexer {{.*}} mask(%[[M]] : tensor<2x4xi1>)
// CHECK-NEXT:    spin.topk %[[Z]] {{.*}} mask(%[[M2]] : tensor<2x4xi1>)
// CHECK-NEXT:    spin.ema_update %{{.*}} scores(%[[Z]] : tensor<2x1x64xf32>)
// CHECK-NOT:     spin.fused_score
func.func @topk_with_other_mask(%s: !spin.state<layer = 0>,
                                %q: tensor<2x1x4x16xbf16>, %w: tensor<2x1x4xf32>,
                                %k: tensor<?x16x16xbf16>, %bt: tensor<2x4xi32>,
                                %p: tensor<2x1xi32>, %n: tensor<2x1xi32>,
                                %m: tensor<2x4xi1>, %m2: tensor<2x4xi1>)
    -> (tensor<2x1x16xi32>, !spin.state<layer = 0>) {
  %z = spin.sparse_indexer q(%q : tensor<2x1x4x16xbf16>)
      w(%w : tensor<2x1x4xf32>) keys(%k : tensor<?x16x16xbf16>)
      block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>)
      mask(%m : tensor<2x4xi1>) {block_size = 16 : i64}
      -> tensor<2x1x64xf32>
  %t = spin.topk %z lengths(%n : tensor<2x1xi32>) mask(%m2 : tensor<2x4xi1>)
      {k = 16 : i64, block_size = 16 : i64}
      : tensor<2x1x64xf32> -> tensor<2x1x16xi32>
  %s1 = spin.ema_update %s scores(%z : tensor<2x1x64xf32>)
      positions(%p : tensor<2x1xi32>) lengths(%n : tensor<2x1xi32>)
      mask(%m : tensor<2x4xi1>) {decay = 5.0e-01, block_size = 16 : i64}
      : !spin.state<layer = 0>
  return %t, %s1 : tensor<2x1x16xi32>, !spin.state<layer = 0>
}
