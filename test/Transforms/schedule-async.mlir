// RUN: spin-opt %s --spin-schedule-async | FileCheck %s
// RUN: spin-opt %s --spin-schedule-async --spin-schedule-async | FileCheck %s
// RUN: spin-opt %s --spin-fuse --spin-schedule-async | FileCheck %s --check-prefix=FUSED

// spin-schedule-async: the block prediction (spin.fused_select, with the MTP
// commit before it) moves into an async.execute at the earliest point where
// its inputs exist, yielding the mask (and the committed state); the state
// update, split off a fused score, runs in its own async.execute after the
// scoring. Values leave the regions only through async.await, placed right
// before their first use. The second RUN shows that a second application
// changes nothing more; the third starts from unfused IR.
// Shapes: B = 2 requests, R = 1 row (4 for MTP), H = 4 heads, Dh = 16, pages
// of S = 16 slots, MB = 4 pages (NS = 64 slots), block_size 16 (NB = 4).

// A fused decode step: the update is split off the scoring, and nothing
// awaits the new state, which this graph does not use.

// CHECK-LABEL: func.func @decode_step(
// CHECK-SAME:    %[[S:[^:]+]]: !spin.state<layer = 0>, %[[Q:[^:]+]]: tensor<2x1x4x16xbf16>,
// CHECK-SAME:    %[[P:[^:]+]]: tensor<2x1xi32>, %[[N:[^:]+]]: tensor<2x1xi32>)
// CHECK-NEXT:    %{{.*}}, %[[MV:.*]] = async.execute -> !async.value<tensor<2x4xi1>> {
// CHECK-NEXT:      %[[M0:.*]] = spin.fused_select %[[S]] positions(%[[P]] : tensor<2x1xi32>) lengths(%[[N]] : tensor<2x1xi32>) {block_size = 16 : i64, pooling = #spin.pooling<max>, sparsity = 5.000000e-01 : f64, topk = 16 : i64} : !spin.state<layer = 0> -> tensor<2x4xi1>{{$}}
// CHECK-NEXT:      async.yield %[[M0]] : tensor<2x4xi1>
// CHECK-NEXT:    }
// CHECK-NEXT:    %[[M:.*]] = async.await %[[MV]] : !async.value<tensor<2x4xi1>>
// CHECK-NEXT:    %[[T:.*]], %[[Z:.*]] = spin.fused_score q(%[[Q]] : {{.*}} lengths(%[[N]] : tensor<2x1xi32>) mask(%[[M]] : tensor<2x4xi1>) {block_size = 16 : i64, k = 16 : i64} -> tensor<2x1x16xi32>, tensor<2x1x64xf32>{{$}}
// CHECK-NEXT:    %{{.*}}, %{{.*}} = async.execute -> !async.value<!spin.state<layer = 0>> {
// CHECK-NEXT:      %[[S1:.*]] = spin.ema_update %[[S]] scores(%[[Z]] : tensor<2x1x64xf32>) positions(%[[P]] : tensor<2x1xi32>) lengths(%[[N]] : tensor<2x1xi32>) mask(%[[M]] : tensor<2x4xi1>) {block_size = 16 : i64, decay = 5.000000e-01 : f64} : !spin.state<layer = 0>{{$}}
// CHECK-NEXT:      async.yield %[[S1]] : !spin.state<layer = 0>
// CHECK-NEXT:    }
// CHECK-NEXT:    return %[[T]] :
func.func @decode_step(%s: !spin.state<layer = 0>, %q: tensor<2x1x4x16xbf16>,
                       %w: tensor<2x1x4xf32>, %k: tensor<?x16x16xbf16>,
                       %bt: tensor<2x4xi32>, %p: tensor<2x1xi32>,
                       %n: tensor<2x1xi32>) -> tensor<2x1x16xi32> {
  %m = spin.fused_select %s positions(%p : tensor<2x1xi32>)
      lengths(%n : tensor<2x1xi32>)
      {topk = 16 : i64, block_size = 16 : i64, sparsity = 5.0e-01,
       pooling = #spin.pooling<max>}
      : !spin.state<layer = 0> -> tensor<2x4xi1>
  %t, %z, %s1 = spin.fused_score q(%q : tensor<2x1x4x16xbf16>)
      w(%w : tensor<2x1x4xf32>) keys(%k : tensor<?x16x16xbf16>)
      block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>)
      mask(%m : tensor<2x4xi1>)
      state(%s : !spin.state<layer = 0>) positions(%p : tensor<2x1xi32>)
      {k = 16 : i64, block_size = 16 : i64, update = #spin.update<ema>,
       decay = 5.0e-01}
      -> tensor<2x1x16xi32>, tensor<2x1x64xf32>, !spin.state<layer = 0>
  return %t : tensor<2x1x16xi32>
}

// An MTP step: the commit moves with the prediction; the observation awaits
// the committed state, the returned state is awaited before the return.

// CHECK-LABEL: func.func @mtp_step(
// CHECK-SAME:    %[[S:[^:]+]]: !spin.state<layer = 0>, %[[Q:[^:]+]]: tensor<2x4x4x16xbf16>,
// CHECK-SAME:    %[[BT:[^:]+]]: tensor<2x4xi32>, %[[P:[^:]+]]: tensor<2x4xi32>,
// CHECK-SAME:    %[[N:[^:]+]]: tensor<2x4xi32>, %[[A:[^:]+]]: tensor<2xi32>)
// CHECK-NEXT:    %{{.*}}, %[[V:.*]]:2 = async.execute -> (!async.value<tensor<2x4xi1>>, !async.value<!spin.state<layer = 0>>) {
// CHECK-NEXT:      %[[C:.*]] = spin.commit %[[S]] accepted(%[[A]] : tensor<2xi32>) {block_size = 16 : i64, decay = 5.000000e-01 : f64} : !spin.state<layer = 0>{{$}}
// CHECK-NEXT:      %[[M0:.*]] = spin.fused_select %[[C]] positions(%[[P]] : tensor<2x4xi32>) lengths(%[[N]] : tensor<2x4xi32>)
// CHECK-NEXT:      async.yield %[[M0]], %[[C]] : tensor<2x4xi1>, !spin.state<layer = 0>
// CHECK-NEXT:    }
// CHECK-NEXT:    %[[M:.*]] = async.await %[[V]]#0 : !async.value<tensor<2x4xi1>>
// CHECK-NEXT:    %[[T:.*]], %[[Z:.*]] = spin.fused_score q(%[[Q]] : {{.*}} mask(%[[M]] : tensor<2x4xi1>) {block_size = 16 : i64, k = 16 : i64} -> tensor<2x4x16xi32>, tensor<2x4x64xf32>{{$}}
// CHECK-NEXT:    %[[S1:.*]] = async.await %[[V]]#1 : !async.value<!spin.state<layer = 0>>
// CHECK-NEXT:    %{{.*}}, %[[SV:.*]] = async.execute -> !async.value<!spin.state<layer = 0>> {
// CHECK-NEXT:      %[[S2:.*]] = spin.observe %[[S1]] scores(%[[Z]] : tensor<2x4x64xf32>) positions(%[[P]] : tensor<2x4xi32>) lengths(%[[N]] : tensor<2x4xi32>) mask(%[[M]] : tensor<2x4xi1>) {block_size = 16 : i64, decay = 5.000000e-01 : f64} : !spin.state<layer = 0>{{$}}
// CHECK-NEXT:      async.yield %[[S2]] : !spin.state<layer = 0>
// CHECK-NEXT:    }
// CHECK-NEXT:    %[[S2A:.*]] = async.await %[[SV]] : !async.value<!spin.state<layer = 0>>
// CHECK-NEXT:    return %[[T]], %[[S2A]] :
func.func @mtp_step(%s: !spin.state<layer = 0>, %q: tensor<2x4x4x16xbf16>,
                    %w: tensor<2x4x4xf32>, %k: tensor<?x16x16xbf16>,
                    %bt: tensor<2x4xi32>, %p: tensor<2x4xi32>,
                    %n: tensor<2x4xi32>, %a: tensor<2xi32>)
    -> (tensor<2x4x16xi32>, !spin.state<layer = 0>) {
  %s1 = spin.commit %s accepted(%a : tensor<2xi32>) {block_size = 16 : i64, decay = 5.0e-01}
      : !spin.state<layer = 0>
  %m = spin.fused_select %s1 positions(%p : tensor<2x4xi32>)
      lengths(%n : tensor<2x4xi32>)
      {topk = 16 : i64, block_size = 16 : i64, sparsity = 5.0e-01,
       pooling = #spin.pooling<max>}
      : !spin.state<layer = 0> -> tensor<2x4xi1>
  %t, %z, %s2 = spin.fused_score q(%q : tensor<2x4x4x16xbf16>)
      w(%w : tensor<2x4x4xf32>) keys(%k : tensor<?x16x16xbf16>)
      block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x4xi32>)
      mask(%m : tensor<2x4xi1>)
      state(%s1 : !spin.state<layer = 0>) positions(%p : tensor<2x4xi32>)
      {k = 16 : i64, block_size = 16 : i64, update = #spin.update<observe>, decay = 5.0e-01}
      -> tensor<2x4x16xi32>, tensor<2x4x64xf32>, !spin.state<layer = 0>
  return %t, %s2 : tensor<2x4x16xi32>, !spin.state<layer = 0>
}

// Two layers: layer 1's prediction starts right after its state is named,
// before layer 0 is scored.

// CHECK-LABEL: func.func @two_layers(
// CHECK-SAME:    %[[IDS:[^:]+]]: tensor<2xi64>,
// CHECK-SAME:    %[[Q0:[^:]+]]: tensor<2x1x4x16xbf16>, %[[Q1:[^:]+]]: tensor<2x1x4x16xbf16>,
// CHECK-NEXT:    %[[S0:.*]] = spin.layer_state %[[IDS]] : tensor<2xi64> -> !spin.state<layer = 0>
// CHECK-NEXT:    %{{.*}}, %[[MV0:.*]] = async.execute -> !async.value<tensor<2x4xi1>> {
// CHECK-NEXT:      spin.fused_select %[[S0]]
// CHECK-NEXT:      async.yield
// CHECK-NEXT:    }
// CHECK-NEXT:    %[[S1:.*]] = spin.layer_state %[[IDS]] : tensor<2xi64> -> !spin.state<layer = 1>
// CHECK-NEXT:    %{{.*}}, %[[MV1:.*]] = async.execute -> !async.value<tensor<2x4xi1>> {
// CHECK-NEXT:      spin.fused_select %[[S1]]
// CHECK-NEXT:      async.yield
// CHECK-NEXT:    }
// CHECK-NEXT:    %[[M0:.*]] = async.await %[[MV0]] : !async.value<tensor<2x4xi1>>
// CHECK-NEXT:    %[[T0:.*]], %[[Z0:.*]] = spin.fused_score q(%[[Q0]] : {{.*}} mask(%[[M0]] : tensor<2x4xi1>) {block_size = 16 : i64, k = 16 : i64} -> tensor<2x1x16xi32>, tensor<2x1x64xf32>{{$}}
// CHECK-NEXT:    async.execute -> !async.value<!spin.state<layer = 0>> {
// CHECK-NEXT:      spin.ema_update %[[S0]] scores(%[[Z0]] : tensor<2x1x64xf32>)
// CHECK-NEXT:      async.yield
// CHECK-NEXT:    }
// CHECK-NEXT:    %[[M1:.*]] = async.await %[[MV1]] : !async.value<tensor<2x4xi1>>
// CHECK-NEXT:    %[[T1:.*]], %[[Z1:.*]] = spin.fused_score q(%[[Q1]] : {{.*}} mask(%[[M1]] : tensor<2x4xi1>) {block_size = 16 : i64, k = 16 : i64} -> tensor<2x1x16xi32>, tensor<2x1x64xf32>{{$}}
// CHECK-NEXT:    async.execute -> !async.value<!spin.state<layer = 1>> {
// CHECK-NEXT:      spin.ema_update %[[S1]] scores(%[[Z1]] : tensor<2x1x64xf32>)
// CHECK-NEXT:      async.yield
// CHECK-NEXT:    }
// CHECK-NEXT:    return %[[T0]], %[[T1]] :
func.func @two_layers(%ids: tensor<2xi64>,
                      %q0: tensor<2x1x4x16xbf16>, %q1: tensor<2x1x4x16xbf16>,
                      %k0: tensor<?x16x16xbf16>, %k1: tensor<?x16x16xbf16>,
                      %p: tensor<2x1xi32>, %n: tensor<2x1xi32>,
                      %w: tensor<2x1x4xf32>, %bt: tensor<2x4xi32>)
    -> (tensor<2x1x16xi32>, tensor<2x1x16xi32>) {
  %s0 = spin.layer_state %ids : tensor<2xi64> -> !spin.state<layer = 0>
  %s1 = spin.layer_state %ids : tensor<2xi64> -> !spin.state<layer = 1>
  %m0 = spin.fused_select %s0 positions(%p : tensor<2x1xi32>)
      lengths(%n : tensor<2x1xi32>)
      {topk = 16 : i64, block_size = 16 : i64, sparsity = 5.0e-01,
       pooling = #spin.pooling<max>}
      : !spin.state<layer = 0> -> tensor<2x4xi1>
  %t0, %z0, %s0n = spin.fused_score q(%q0 : tensor<2x1x4x16xbf16>)
      w(%w : tensor<2x1x4xf32>) keys(%k0 : tensor<?x16x16xbf16>)
      block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>)
      mask(%m0 : tensor<2x4xi1>)
      state(%s0 : !spin.state<layer = 0>) positions(%p : tensor<2x1xi32>)
      {k = 16 : i64, block_size = 16 : i64, update = #spin.update<ema>,
       decay = 5.0e-01}
      -> tensor<2x1x16xi32>, tensor<2x1x64xf32>, !spin.state<layer = 0>
  %m1 = spin.fused_select %s1 positions(%p : tensor<2x1xi32>)
      lengths(%n : tensor<2x1xi32>)
      {topk = 16 : i64, block_size = 16 : i64, sparsity = 2.5e-01,
       pooling = #spin.pooling<mean>}
      : !spin.state<layer = 1> -> tensor<2x4xi1>
  %t1, %z1, %s1n = spin.fused_score q(%q1 : tensor<2x1x4x16xbf16>)
      w(%w : tensor<2x1x4xf32>) keys(%k1 : tensor<?x16x16xbf16>)
      block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>)
      mask(%m1 : tensor<2x4xi1>)
      state(%s1 : !spin.state<layer = 1>) positions(%p : tensor<2x1xi32>)
      {k = 16 : i64, block_size = 16 : i64, update = #spin.update<ema>,
       decay = 5.0e-01}
      -> tensor<2x1x16xi32>, tensor<2x1x64xf32>, !spin.state<layer = 1>
  return %t0, %t1 : tensor<2x1x16xi32>, tensor<2x1x16xi32>
}

// Unfused input: only the standalone update is scheduled (the select chain is
// not a spin.fused_select); the next read of the new state awaits it. With
// spin-fuse first (FUSED), the fused chains are scheduled as above.

// CHECK-LABEL: func.func @unfused_decode_step(
// CHECK-SAME:    %[[S:[^:]+]]: !spin.state<layer = 0>,
// CHECK:         %[[M:.*]] = spin.select_blocks %[[S]]
// CHECK-NEXT:    %[[Z:.*]] = spin.sparse_indexer {{.*}} mask(%[[M]] : tensor<2x4xi1>)
// CHECK-NEXT:    %[[T:.*]] = spin.topk %[[Z]]
// CHECK-NEXT:    %{{.*}}, %[[SV:.*]] = async.execute -> !async.value<!spin.state<layer = 0>> {
// CHECK-NEXT:      %[[S1:.*]] = spin.ema_update %[[S]] scores(%[[Z]] : tensor<2x1x64xf32>) {{.*}} mask(%[[M]] : tensor<2x4xi1>) {block_size = 16 : i64, decay = 5.000000e-01 : f64} : !spin.state<layer = 0>{{$}}
// CHECK-NEXT:      async.yield %[[S1]] : !spin.state<layer = 0>
// CHECK-NEXT:    }
// CHECK-NEXT:    %[[S1A:.*]] = async.await %[[SV]] : !async.value<!spin.state<layer = 0>>
// CHECK-NEXT:    %[[NEXT:.*]] = spin.predict %[[S1A]]
// CHECK-NEXT:    return %[[T]], %[[NEXT]] :

// FUSED-LABEL: func.func @unfused_decode_step(
// FUSED-SAME:    %[[S:[^:]+]]: !spin.state<layer = 0>,
// FUSED-NEXT:    %{{.*}}, %[[MV:.*]] = async.execute -> !async.value<tensor<2x4xi1>> {
// FUSED-NEXT:      %[[M0:.*]] = spin.fused_select %[[S]] {{.*}}pooling = #spin.pooling<max>
// FUSED-NEXT:      async.yield %[[M0]] : tensor<2x4xi1>
// FUSED-NEXT:    }
// FUSED-NEXT:    %[[M:.*]] = async.await %[[MV]] : !async.value<tensor<2x4xi1>>
// FUSED-NEXT:    %[[T:.*]], %[[Z:.*]] = spin.fused_score {{.*}} mask(%[[M]] : tensor<2x4xi1>) {block_size = 16 : i64, k = 16 : i64} -> tensor<2x1x16xi32>, tensor<2x1x64xf32>{{$}}
// FUSED-NEXT:    %{{.*}}, %[[SV:.*]] = async.execute -> !async.value<!spin.state<layer = 0>> {
// FUSED-NEXT:      %[[S1:.*]] = spin.ema_update %[[S]] scores(%[[Z]] : tensor<2x1x64xf32>) {{.*}} mask(%[[M]] : tensor<2x4xi1>) {block_size = 16 : i64, decay = 5.000000e-01 : f64} : !spin.state<layer = 0>{{$}}
// FUSED-NEXT:      async.yield %[[S1]] : !spin.state<layer = 0>
// FUSED-NEXT:    }
// FUSED-NEXT:    %[[S1A:.*]] = async.await %[[SV]] : !async.value<!spin.state<layer = 0>>
// FUSED-NEXT:    %[[NEXT:.*]] = spin.predict %[[S1A]]
// FUSED-NEXT:    return %[[T]], %[[NEXT]] :
func.func @unfused_decode_step(%s: !spin.state<layer = 0>,
                               %q: tensor<2x1x4x16xbf16>, %w: tensor<2x1x4xf32>,
                               %k: tensor<?x16x16xbf16>, %bt: tensor<2x4xi32>,
                               %p: tensor<2x1xi32>, %n: tensor<2x1xi32>)
    -> (tensor<2x1x16xi32>, tensor<2x1x64xf32>) {
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
  %s1 = spin.ema_update %s scores(%z : tensor<2x1x64xf32>)
      positions(%p : tensor<2x1xi32>) lengths(%n : tensor<2x1xi32>)
      mask(%m : tensor<2x4xi1>) {decay = 5.0e-01, block_size = 16 : i64}
      : !spin.state<layer = 0>
  %next = spin.predict %s1 positions(%p : tensor<2x1xi32>)
      lengths(%n : tensor<2x1xi32>) : !spin.state<layer = 0>
      -> tensor<2x1x64xf32>
  return %t, %next : tensor<2x1x16xi32>, tensor<2x1x64xf32>
}

// The prediction may not move above a write of its own layer's state, but
// may move above one of another layer's.

// CHECK-LABEL: func.func @select_after_same_layer_write(
// CHECK-SAME:    %[[S:[^:]+]]: !spin.state<layer = 0>, %[[U:[^:]+]]: !spin.state<layer = 1>,
// CHECK-NEXT:    %[[R:.*]] = spin.reset %[[S]] : !spin.state<layer = 0>
// CHECK-NEXT:    %{{.*}}, %[[MV:.*]] = async.execute -> !async.value<tensor<2x4xi1>> {
// CHECK-NEXT:      spin.fused_select %[[S]]
// CHECK-NEXT:      async.yield
// CHECK-NEXT:    }
// CHECK-NEXT:    %[[V:.*]] = spin.reset %[[U]] : !spin.state<layer = 1>
// CHECK-NEXT:    %[[M:.*]] = async.await %[[MV]] : !async.value<tensor<2x4xi1>>
// CHECK-NEXT:    return %[[M]], %[[R]], %[[V]] :
func.func @select_after_same_layer_write(%s: !spin.state<layer = 0>,
                                         %u: !spin.state<layer = 1>,
                                         %p: tensor<2x1xi32>,
                                         %n: tensor<2x1xi32>)
    -> (tensor<2x4xi1>, !spin.state<layer = 0>, !spin.state<layer = 1>) {
  %r = spin.reset %s : !spin.state<layer = 0>
  %v = spin.reset %u : !spin.state<layer = 1>
  %m = spin.fused_select %s positions(%p : tensor<2x1xi32>)
      lengths(%n : tensor<2x1xi32>)
      {topk = 16 : i64, block_size = 16 : i64, sparsity = 5.0e-01,
       pooling = #spin.pooling<max>}
      : !spin.state<layer = 0> -> tensor<2x4xi1>
  return %m, %r, %v
      : tensor<2x4xi1>, !spin.state<layer = 0>, !spin.state<layer = 1>
}

// The committed state is also returned (not only updated): the commit stays
// in place and only the prediction is scheduled.

// CHECK-LABEL: func.func @commit_with_other_user(
// CHECK-NEXT:    %[[C:.*]] = spin.commit
// CHECK-NEXT:    %{{.*}}, %[[MV:.*]] = async.execute -> !async.value<tensor<2x4xi1>> {
// CHECK-NEXT:      %[[M0:.*]] = spin.fused_select %[[C]]
// CHECK-NEXT:      async.yield %[[M0]] : tensor<2x4xi1>
// CHECK-NEXT:    }
// CHECK-NEXT:    %[[M:.*]] = async.await %[[MV]] : !async.value<tensor<2x4xi1>>
// CHECK-NEXT:    return %[[M]], %[[C]] :
func.func @commit_with_other_user(%s: !spin.state<layer = 0>,
                                  %p: tensor<2x4xi32>, %n: tensor<2x4xi32>,
                                  %a: tensor<2xi32>)
    -> (tensor<2x4xi1>, !spin.state<layer = 0>) {
  %s1 = spin.commit %s accepted(%a : tensor<2xi32>) {block_size = 16 : i64, decay = 5.0e-01}
      : !spin.state<layer = 0>
  %m = spin.fused_select %s1 positions(%p : tensor<2x4xi32>)
      lengths(%n : tensor<2x4xi32>)
      {topk = 16 : i64, block_size = 16 : i64, sparsity = 5.0e-01,
       pooling = #spin.pooling<max>}
      : !spin.state<layer = 0> -> tensor<2x4xi1>
  return %m, %s1 : tensor<2x4xi1>, !spin.state<layer = 0>
}
