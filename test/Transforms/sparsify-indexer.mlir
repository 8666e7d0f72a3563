// Defaults: A1, max pooling, sparsity 0.4, decay 0.5, no exploration.
// RUN: spin-opt %s --split-input-file --spin-sparsify-indexer 2>/dev/null | FileCheck %s
// A second run changes nothing more.
// RUN: spin-opt %s --split-input-file --spin-sparsify-indexer --spin-sparsify-indexer 2>/dev/null | FileCheck %s
// Every option set away from its default.
// RUN: spin-opt %s --split-input-file --spin-sparsify-indexer="sparsity=0.5 block-size=32 ema-decay=0.75 explore=0.25 seed=42 pooling=mean mtp-mask=row0 mtp-update=row0 reset-input=true" 2>/dev/null | FileCheck %s --check-prefix=OPTS
// RUN: spin-opt %s --split-input-file --spin-sparsify-indexer="pooling=top4" 2>/dev/null | FileCheck %s --check-prefix=TOP4
// RUN: spin-opt %s --split-input-file --spin-sparsify-indexer="reduction=A0" 2>/dev/null | FileCheck %s --check-prefix=A0
// RUN: spin-opt %s --split-input-file --spin-sparsify-indexer="reduction=A2 pooling=mean" 2>/dev/null | FileCheck %s --check-prefix=A2
// RUN: spin-opt %s --split-input-file --spin-sparsify-indexer="reduction=A1 mtp-mask=union mtp-update=prefix" 2>/dev/null | FileCheck %s
// RUN: spin-opt %s --split-input-file --spin-sparsify-indexer=report-sparsity 2>/dev/null | FileCheck %s --check-prefix=SPARSITY
// The age-based exploration policies get a state with last_observed.
// RUN: spin-opt %s --split-input-file --spin-sparsify-indexer="explore=0.25 explore-policy=block-age" 2>/dev/null | FileCheck %s --check-prefix=AGE
// RUN: spin-opt %s --split-input-file --spin-sparsify-indexer="reduction=A2 explore=0.25 explore-policy=staleness-score" 2>/dev/null | FileCheck %s --check-prefix=STALE
// RUN: spin-opt %s --split-input-file --spin-sparsify-indexer="explore=0.25 explore-policy=random" 2>/dev/null | FileCheck %s --check-prefix=RANDOM
// Indexers that cannot be sparsified say why.
// RUN: spin-opt %s --split-input-file --spin-sparsify-indexer 2>&1 >/dev/null | FileCheck %s --check-prefix=REMARK

// CHECK-LABEL: func.func @decode
// CHECK-SAME:    (%[[Q:.*]]: tensor<2x1x4x16xbf16>, %[[W:.*]]: tensor<2x1x4xf32>, %[[K:.*]]: tensor<?x64x16xbf16>, %[[BT:.*]]: tensor<2x4xi32>, %[[N:.*]]: tensor<2x1xi32>, %[[P:.*]]: tensor<2x1xi32> {spin.positions}, %[[IDS:.*]]: tensor<2xi64> {spin.request_ids})
// CHECK:         %[[S:.*]] = spin.layer_state %[[IDS]] : tensor<2xi64> -> !spin.state<layer = 0>
// CHECK:         %[[ZH:.*]] = spin.predict %[[S]] positions(%[[P]] : tensor<2x1xi32>) lengths(%[[N]] : tensor<2x1xi32>) : !spin.state<layer = 0> -> tensor<2x1x256xf32>
// CHECK:         %[[BS:.*]] = spin.pool %[[ZH]] lengths(%[[N]] : tensor<2x1xi32>) {block_size = 64 : i64, pooling = #spin.pooling<max>} : tensor<2x1x256xf32> -> tensor<2x1x4xf32>
// CHECK:         %[[M:.*]] = spin.select_blocks %[[S]] scores(%[[BS]] : tensor<2x1x4xf32>) lengths(%[[N]] : tensor<2x1xi32>) {block_size = 64 : i64, sparsity = 4.000000e-01 : f64, topk = 128 : i64} : !spin.state<layer = 0> -> tensor<2x4xi1>
// CHECK:         %[[Z:.*]] = spin.sparse_indexer q(%[[Q]] : tensor<2x1x4x16xbf16>) w(%[[W]] : tensor<2x1x4xf32>) keys(%[[K]] : tensor<?x64x16xbf16>) block_table(%[[BT]] : tensor<2x4xi32>) lengths(%[[N]] : tensor<2x1xi32>) mask(%[[M]] : tensor<2x4xi1>) {block_size = 64 : i64} -> tensor<2x1x256xf32>
// CHECK:         %[[T:.*]] = spin.topk %[[Z]] lengths(%[[N]] : tensor<2x1xi32>) mask(%[[M]] : tensor<2x4xi1>) {block_size = 64 : i64, k = 128 : i64} : tensor<2x1x256xf32> -> tensor<2x1x128xi32>
// CHECK:         spin.ema_update %[[S]] scores(%[[Z]] : tensor<2x1x256xf32>) positions(%[[P]] : tensor<2x1xi32>) lengths(%[[N]] : tensor<2x1xi32>) mask(%[[M]] : tensor<2x4xi1>) {block_size = 64 : i64, decay = 5.000000e-01 : f64} : !spin.state<layer = 0>
// CHECK:         return %[[T]]
// CHECK-NOT:     spin.dense_indexer

// OPTS-LABEL: func.func @decode
// OPTS-SAME:    %[[N:[^:]*]]: tensor<2x1xi32>, %[[P:[^:]*]]: tensor<2x1xi32> {spin.positions}, %[[IDS:[^:]*]]: tensor<2xi64> {spin.request_ids}, %[[RST:[^:]*]]: tensor<2xi1> {spin.reset})
// OPTS:         %[[S0:.*]] = spin.layer_state %[[IDS]]
// OPTS:         %[[S:.*]] = spin.reset %[[S0]] requests(%[[RST]] : tensor<2xi1>) : !spin.state<layer = 0>
// OPTS-NOT:     spin.commit
// OPTS:         spin.predict %[[S]]
// OPTS:         spin.pool {{.*}} {block_size = 32 : i64, pooling = #spin.pooling<mean>} : tensor<2x1x256xf32> -> tensor<2x1x8xf32>
// OPTS:         %[[M:.*]] = spin.select_blocks %[[S]] {{.*}} {block_size = 32 : i64, explore = 2.500000e-01 : f64, mtp_mask = #spin.mtp_mask<row0>, seed = 42 : i64, sparsity = 5.000000e-01 : f64, topk = 128 : i64} : !spin.state<layer = 0> -> tensor<2x8xi1>
// OPTS:         spin.sparse_indexer {{.*}} mask(%[[M]] : tensor<2x8xi1>) {block_size = 32 : i64}
// OPTS:         spin.topk {{.*}} {block_size = 32 : i64, k = 128 : i64}
// OPTS:         spin.ema_update %[[S]] {{.*}} {block_size = 32 : i64, decay = 7.500000e-01 : f64}

// SPARSITY-LABEL: func.func @decode
// SPARSITY-SAME:    -> (tensor<2x1x128xi32>, tensor<2x1xf32> {spin.sparsity})
// SPARSITY:         %[[M:.*]] = spin.select_blocks
// SPARSITY:         %[[T:.*]] = spin.topk
// SPARSITY:         %[[R:.*]] = spin.block_sparsity %[[M]] lengths(%{{.*}} : tensor<2x1xi32>) {block_size = 64 : i64} : tensor<2x4xi1> -> tensor<2x1xf32>
// SPARSITY:         return %[[T]], %[[R]] : tensor<2x1x128xi32>, tensor<2x1xf32>

// TOP4-LABEL: func.func @decode
// TOP4:         spin.pool {{.*}} pooling = #spin.pooling<top4>

// A0-LABEL: func.func @decode
// A0:         %[[ZH:.*]] = spin.predict
// A0-NOT:     spin.pool
// A0:         spin.select_blocks %{{.*}} scores(%[[ZH]] : tensor<2x1x256xf32>) {{.*}} reduction = #spin.reduction<a0>
// A0:         spin.ema_update

// A2-LABEL: func.func @decode
// A2:         %[[S:.*]] = spin.layer_state {{.*}} -> !spin.state<layer = 0, level = block>
// A2:         %[[BS:.*]] = spin.predict %[[S]] {{.*}} {block_size = 64 : i64} : !spin.state<layer = 0, level = block> -> tensor<2x1x4xf32>
// A2-NOT:     spin.pool
// A2:         spin.select_blocks %[[S]] scores(%[[BS]] : tensor<2x1x4xf32>) {{.*}} reduction = #spin.reduction<a2>
// A2:         spin.ema_update %[[S]] {{.*}} {block_size = 64 : i64, decay = 5.000000e-01 : f64, pooling = #spin.pooling<mean>} : !spin.state<layer = 0, level = block>

// AGE-LABEL: func.func @decode
// AGE:         %[[S:.*]] = spin.layer_state {{.*}} -> !spin.state<layer = 0, last_observed = true>
// AGE:         spin.select_blocks %[[S]] {{.*}} {block_size = 64 : i64, explore = 2.500000e-01 : f64, explore_policy = #spin.explore_policy<block_age>, sparsity = 4.000000e-01 : f64, topk = 128 : i64} : !spin.state<layer = 0, last_observed = true>
// AGE:         spin.ema_update %[[S]] {{.*}} : !spin.state<layer = 0, last_observed = true>

// STALE-LABEL: func.func @decode
// STALE:         %[[S:.*]] = spin.layer_state {{.*}} -> !spin.state<layer = 0, level = block, last_observed = true>
// STALE:         spin.select_blocks %[[S]] {{.*}} explore_policy = #spin.explore_policy<staleness_score>, reduction = #spin.reduction<a2>

// RANDOM-LABEL: func.func @decode
// RANDOM:         %[[S:.*]] = spin.layer_state {{.*}} -> !spin.state<layer = 0>{{$}}
// RANDOM-NOT:     explore_policy
// RANDOM-NOT:     last_observed
func.func @decode(%q: tensor<2x1x4x16xbf16>, %w: tensor<2x1x4xf32>,
                  %k: tensor<?x64x16xbf16>, %bt: tensor<2x4xi32>,
                  %n: tensor<2x1xi32>) -> tensor<2x1x128xi32> {
  %z = spin.dense_indexer q(%q : tensor<2x1x4x16xbf16>) w(%w : tensor<2x1x4xf32>) keys(%k : tensor<?x64x16xbf16>) block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>) -> tensor<2x1x256xf32>
  %t = spin.topk %z lengths(%n : tensor<2x1xi32>) {k = 128 : i64} : tensor<2x1x256xf32> -> tensor<2x1x128xi32>
  return %t : tensor<2x1x128xi32>
}

// -----

// An MTP verification step (R = 4) with fp8 keys: commit the previous step's
// rows first, buffer this step's rows at the end.

// CHECK-LABEL: func.func @mtp
// CHECK-SAME:    %[[N:[^:]*]]: tensor<2x4xi32>, %[[P:[^:]*]]: tensor<2x4xi32> {spin.positions}, %[[IDS:[^:]*]]: tensor<2xi64> {spin.request_ids}, %[[ACC:[^:]*]]: tensor<2xi32> {spin.accepted})
// CHECK:         %[[S0:.*]] = spin.layer_state %[[IDS]] : tensor<2xi64> -> !spin.state<layer = 0>
// CHECK:         %[[S:.*]] = spin.commit %[[S0]] accepted(%[[ACC]] : tensor<2xi32>) {block_size = 64 : i64, decay = 5.000000e-01 : f64} : !spin.state<layer = 0>
// CHECK:         spin.predict %[[S]] positions(%[[P]] : tensor<2x4xi32>) lengths(%[[N]] : tensor<2x4xi32>)
// CHECK:         %[[M:.*]] = spin.select_blocks %[[S]]
// CHECK-NOT:       mtp_mask
// CHECK-SAME:      -> tensor<2x4xi1>
// CHECK:         %[[Z:.*]] = spin.sparse_indexer {{.*}} scales(%{{.*}} : tensor<?x64xf32>) {{.*}} mask(%[[M]] : tensor<2x4xi1>)
// CHECK:         %[[T:.*]] = spin.topk %[[Z]] {{.*}} -> tensor<2x4x128xi32>
// CHECK:         spin.observe %[[S]] scores(%[[Z]] : tensor<2x4x256xf32>) positions(%[[P]] : tensor<2x4xi32>) lengths(%[[N]] : tensor<2x4xi32>) mask(%[[M]] : tensor<2x4xi1>) {block_size = 64 : i64, decay = 5.000000e-01 : f64} : !spin.state<layer = 0>
// CHECK-NOT:     spin.ema_update
// CHECK:         return %[[T]]

// OPTS-LABEL: func.func @mtp
// OPTS:         spin.reset
// OPTS:         spin.commit {{.*}} {block_size = 32 : i64, decay = 7.500000e-01 : f64, mtp_update = #spin.mtp_update<row0>}
// OPTS:         spin.select_blocks {{.*}} mtp_mask = #spin.mtp_mask<row0>
// OPTS:         spin.observe {{.*}} decay = 7.500000e-01 : f64

// A2-LABEL: func.func @mtp
// A2:         spin.observe {{.*}} {block_size = 64 : i64, decay = 5.000000e-01 : f64, pooling = #spin.pooling<mean>} : !spin.state<layer = 0, level = block>
func.func @mtp(%q: tensor<2x4x4x16xbf16>, %w: tensor<2x4x4xf32>,
               %k: tensor<?x64x16xf8E4M3FN>, %sc: tensor<?x64xf32>,
               %bt: tensor<2x4xi32>, %n: tensor<2x4xi32>) -> tensor<2x4x128xi32> {
  %z = spin.dense_indexer q(%q : tensor<2x4x4x16xbf16>) w(%w : tensor<2x4x4xf32>) keys(%k : tensor<?x64x16xf8E4M3FN>) scales(%sc : tensor<?x64xf32>) block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x4xi32>) -> tensor<2x4x256xf32>
  %t = spin.topk %z lengths(%n : tensor<2x4xi32>) {k = 128 : i64} : tensor<2x4x256xf32> -> tensor<2x4x128xi32>
  return %t : tensor<2x4x128xi32>
}

// -----

// Three layers: each gets its own state, numbered in program order after the
// pinned id 5 is set aside; the state handles go to the start of the
// function; the function's SPIN inputs are added once and arguments already
// marked are reused.

// SPARSITY-LABEL: func.func @layers
// SPARSITY-SAME:    -> (tensor<2x1x128xi32>, tensor<2x1x128xi32>, tensor<2x1x128xi32>, tensor<2x1xf32> {spin.sparsity}, tensor<2x1xf32> {spin.sparsity}, tensor<2x1xf32> {spin.sparsity})

// CHECK-LABEL: func.func @layers
// CHECK-SAME:    %[[P:[^:]*]]: tensor<2x1xi32> {spin.positions}
// CHECK-SAME:    %[[IDS:[^:]*]]: tensor<2xi64> {spin.request_ids})
// CHECK-NOT:     spin.positions
// CHECK-NEXT:    %[[S6:.*]] = spin.layer_state %[[IDS]] : tensor<2xi64> -> !spin.state<layer = 6>
// CHECK-NEXT:    %[[S5:.*]] = spin.layer_state %[[IDS]] : tensor<2xi64> -> !spin.state<layer = 5>
// CHECK-NEXT:    %[[S7:.*]] = spin.layer_state %[[IDS]] : tensor<2xi64> -> !spin.state<layer = 7>
// CHECK:         spin.predict %[[S6]] positions(%[[P]]
// CHECK:         spin.sparse_indexer {{.*}} keys(%arg2
// CHECK:         spin.predict %[[S5]] positions(%[[P]]
// CHECK:         spin.sparse_indexer {{.*}} keys(%arg3
// CHECK:         spin.predict %[[S7]] positions(%[[P]]
// CHECK:         spin.sparse_indexer {{.*}} keys(%arg4
// CHECK-NOT:     spin.dense_indexer
func.func @layers(%q: tensor<2x1x4x16xbf16>, %w: tensor<2x1x4xf32>,
                  %k0: tensor<?x64x16xbf16>, %k1: tensor<?x64x16xbf16>,
                  %k2: tensor<?x64x16xbf16>, %bt: tensor<2x4xi32>,
                  %n: tensor<2x1xi32>, %p: tensor<2x1xi32> {spin.positions})
    -> (tensor<2x1x128xi32>, tensor<2x1x128xi32>, tensor<2x1x128xi32>) {
  %z0 = spin.dense_indexer q(%q : tensor<2x1x4x16xbf16>) w(%w : tensor<2x1x4xf32>) keys(%k0 : tensor<?x64x16xbf16>) block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>) -> tensor<2x1x256xf32>
  %t0 = spin.topk %z0 lengths(%n : tensor<2x1xi32>) {k = 128 : i64} : tensor<2x1x256xf32> -> tensor<2x1x128xi32>
  %z1 = spin.dense_indexer q(%q : tensor<2x1x4x16xbf16>) w(%w : tensor<2x1x4xf32>) keys(%k1 : tensor<?x64x16xbf16>) block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>) {spin.layer = 5 : i64} -> tensor<2x1x256xf32>
  %t1 = spin.topk %z1 lengths(%n : tensor<2x1xi32>) {k = 128 : i64} : tensor<2x1x256xf32> -> tensor<2x1x128xi32>
  %z2 = spin.dense_indexer q(%q : tensor<2x1x4x16xbf16>) w(%w : tensor<2x1x4xf32>) keys(%k2 : tensor<?x64x16xbf16>) block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>) -> tensor<2x1x256xf32>
  %t2 = spin.topk %z2 lengths(%n : tensor<2x1xi32>) {k = 128 : i64} : tensor<2x1x256xf32> -> tensor<2x1x128xi32>
  return %t0, %t1, %t2 : tensor<2x1x128xi32>, tensor<2x1x128xi32>, tensor<2x1x128xi32>
}

// -----

// Dense scores that are also returned need every slot scored: untouched.

// CHECK-LABEL: func.func @scores_escape
// CHECK-NOT:     spin.layer_state
// CHECK:         spin.dense_indexer
// CHECK:         spin.topk
// REMARK: remark: not sparsified: its scores have other users than one spin.topk, which need every slot scored
func.func @scores_escape(%q: tensor<2x1x4x16xbf16>, %w: tensor<2x1x4xf32>,
                         %k: tensor<?x64x16xbf16>, %bt: tensor<2x4xi32>,
                         %n: tensor<2x1xi32>) -> (tensor<2x1x256xf32>, tensor<2x1x128xi32>) {
  %z = spin.dense_indexer q(%q : tensor<2x1x4x16xbf16>) w(%w : tensor<2x1x4xf32>) keys(%k : tensor<?x64x16xbf16>) block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>) -> tensor<2x1x256xf32>
  %t = spin.topk %z lengths(%n : tensor<2x1xi32>) {k = 128 : i64} : tensor<2x1x256xf32> -> tensor<2x1x128xi32>
  return %z, %t : tensor<2x1x256xf32>, tensor<2x1x128xi32>
}

// -----

// No top-K at all: nothing to sparsify.

// CHECK-LABEL: func.func @no_topk
// CHECK:         spin.dense_indexer
// REMARK: remark: not sparsified: its scores feed func.return, not spin.topk
func.func @no_topk(%q: tensor<2x1x4x16xbf16>, %w: tensor<2x1x4xf32>,
                   %k: tensor<?x64x16xbf16>, %bt: tensor<2x4xi32>,
                   %n: tensor<2x1xi32>) -> tensor<2x1x256xf32> {
  %z = spin.dense_indexer q(%q : tensor<2x1x4x16xbf16>) w(%w : tensor<2x1x4xf32>) keys(%k : tensor<?x64x16xbf16>) block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>) -> tensor<2x1x256xf32>
  return %z : tensor<2x1x256xf32>
}
