// RUN: spin-opt %s | FileCheck %s
// RUN: spin-opt %s | spin-opt | FileCheck %s
// RUN: spin-opt %s --mlir-print-op-generic | spin-opt | FileCheck %s

// Round-trip tests of every spin op. Shapes: B = 2 requests, R = 1 row (4 for
// MTP), H = 4 heads, Dh = 16, pages of S = 16 slots, MB = 4 pages per request
// (NS = 64 slots), block_size 16 (NB = 4) or 8 (NB = 8).

//===----------------------------------------------------------------------===//
// spin.layer_state, spin.reset
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @layer_state_and_reset(
// CHECK-SAME:    %[[IDS:[^:]+]]: tensor<2xi64>,
// CHECK-SAME:    %[[FRESH:[^:]+]]: tensor<2xi1>,
// CHECK-SAME:    %[[DIDS:[^:]+]]: tensor<?xi64>,
// CHECK-SAME:    %[[DFRESH:[^:]+]]: tensor<?xi1>)
func.func @layer_state_and_reset(%ids: tensor<2xi64>, %fresh: tensor<2xi1>,
                                 %dids: tensor<?xi64>, %dfresh: tensor<?xi1>)
    -> (!spin.state<layer = 0>, !spin.state<layer = 3, level = block>,
        !spin.state<layer = 7>) {
  // CHECK: %[[S:.*]] = spin.layer_state %[[IDS]] : tensor<2xi64> -> !spin.state<layer = 0>{{$}}
  %s = spin.layer_state %ids : tensor<2xi64> -> !spin.state<layer = 0>
  // CHECK: %[[S1:.*]] = spin.reset %[[S]] : !spin.state<layer = 0>{{$}}
  %s1 = spin.reset %s : !spin.state<layer = 0>
  // CHECK: %[[S2:.*]] = spin.reset %[[S1]] requests(%[[FRESH]] : tensor<2xi1>) : !spin.state<layer = 0>{{$}}
  %s2 = spin.reset %s1 requests(%fresh : tensor<2xi1>) : !spin.state<layer = 0>
  // CHECK: %[[B:.*]] = spin.layer_state %[[IDS]] : tensor<2xi64> -> !spin.state<layer = 3, level = block>{{$}}
  %b = spin.layer_state %ids : tensor<2xi64> -> !spin.state<layer = 3, level = block>
  // CHECK: %[[B1:.*]] = spin.reset %[[B]] requests(%[[FRESH]] : tensor<2xi1>) : !spin.state<layer = 3, level = block>{{$}}
  %b1 = spin.reset %b requests(%fresh : tensor<2xi1>) : !spin.state<layer = 3, level = block>
  // An explicit `level = slot` is the default and is elided.
  // CHECK: %[[D:.*]] = spin.layer_state %[[DIDS]] : tensor<?xi64> -> !spin.state<layer = 7>{{$}}
  %d = spin.layer_state %dids : tensor<?xi64> -> !spin.state<layer = 7, level = slot>
  // CHECK: %[[D1:.*]] = spin.reset %[[D]] requests(%[[DFRESH]] : tensor<?xi1>) : !spin.state<layer = 7>{{$}}
  %d1 = spin.reset %d requests(%dfresh : tensor<?xi1>) : !spin.state<layer = 7>
  // CHECK: return %[[S2]], %[[B1]], %[[D1]] : !spin.state<layer = 0>, !spin.state<layer = 3, level = block>, !spin.state<layer = 7>
  return %s2, %b1, %d1 : !spin.state<layer = 0>, !spin.state<layer = 3, level = block>,
                         !spin.state<layer = 7>
}

//===----------------------------------------------------------------------===//
// spin.dense_indexer
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @dense_indexer(
// CHECK-SAME:    %[[QBF:[^:]+]]: tensor<2x1x4x16xbf16>,
// CHECK-SAME:    %[[QF16:[^:]+]]: tensor<2x1x4x16xf16>,
// CHECK-SAME:    %[[QF32:[^:]+]]: tensor<?x?x4x16xf32>,
// CHECK-SAME:    %[[W:[^:]+]]: tensor<2x1x4xf32>,
// CHECK-SAME:    %[[WD:[^:]+]]: tensor<?x?x4xf32>,
// CHECK-SAME:    %[[KBF:[^:]+]]: tensor<8x16x16xbf16>,
// CHECK-SAME:    %[[KF16:[^:]+]]: tensor<?x16x16xf16>,
// CHECK-SAME:    %[[KF32:[^:]+]]: tensor<8x16x16xf32>,
// CHECK-SAME:    %[[K8:[^:]+]]: tensor<?x16x16xf8E4M3FN>,
// CHECK-SAME:    %[[SC:[^:]+]]: tensor<?x16xf32>,
// CHECK-SAME:    %[[BT:[^:]+]]: tensor<2x4xi32>,
// CHECK-SAME:    %[[BTD:[^:]+]]: tensor<?x?xi32>,
// CHECK-SAME:    %[[N:[^:]+]]: tensor<2x1xi32>,
// CHECK-SAME:    %[[ND:[^:]+]]: tensor<?x?xi32>)
func.func @dense_indexer(%qbf: tensor<2x1x4x16xbf16>, %qf16: tensor<2x1x4x16xf16>,
                         %qf32: tensor<?x?x4x16xf32>,
                         %w: tensor<2x1x4xf32>, %wd: tensor<?x?x4xf32>,
                         %kbf: tensor<8x16x16xbf16>, %kf16: tensor<?x16x16xf16>,
                         %kf32: tensor<8x16x16xf32>,
                         %k8: tensor<?x16x16xf8E4M3FN>, %sc: tensor<?x16xf32>,
                         %bt: tensor<2x4xi32>, %btd: tensor<?x?xi32>,
                         %n: tensor<2x1xi32>, %nd: tensor<?x?xi32>)
    -> (tensor<2x1x64xf32>, tensor<2x1x64xf32>, tensor<?x?x?xf32>,
        tensor<2x1x64xf32>) {
  // CHECK: %[[ZBF:.*]] = spin.dense_indexer q(%[[QBF]] : tensor<2x1x4x16xbf16>) w(%[[W]] : tensor<2x1x4xf32>) keys(%[[KBF]] : tensor<8x16x16xbf16>) block_table(%[[BT]] : tensor<2x4xi32>) lengths(%[[N]] : tensor<2x1xi32>) -> tensor<2x1x64xf32>{{$}}
  %zbf = spin.dense_indexer q(%qbf : tensor<2x1x4x16xbf16>)
      w(%w : tensor<2x1x4xf32>) keys(%kbf : tensor<8x16x16xbf16>)
      block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>)
      -> tensor<2x1x64xf32>
  // CHECK: %[[ZF16:.*]] = spin.dense_indexer q(%[[QF16]] : tensor<2x1x4x16xf16>) w(%[[W]] : tensor<2x1x4xf32>) keys(%[[KF16]] : tensor<?x16x16xf16>) block_table(%[[BT]] : tensor<2x4xi32>) lengths(%[[N]] : tensor<2x1xi32>) -> tensor<2x1x64xf32>{{$}}
  %zf16 = spin.dense_indexer q(%qf16 : tensor<2x1x4x16xf16>)
      w(%w : tensor<2x1x4xf32>) keys(%kf16 : tensor<?x16x16xf16>)
      block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>)
      -> tensor<2x1x64xf32>
  // CHECK: %[[ZF32:.*]] = spin.dense_indexer q(%[[QF32]] : tensor<?x?x4x16xf32>) w(%[[WD]] : tensor<?x?x4xf32>) keys(%[[KF32]] : tensor<8x16x16xf32>) block_table(%[[BTD]] : tensor<?x?xi32>) lengths(%[[ND]] : tensor<?x?xi32>) -> tensor<?x?x?xf32>{{$}}
  %zf32 = spin.dense_indexer q(%qf32 : tensor<?x?x4x16xf32>)
      w(%wd : tensor<?x?x4xf32>) keys(%kf32 : tensor<8x16x16xf32>)
      block_table(%btd : tensor<?x?xi32>) lengths(%nd : tensor<?x?xi32>)
      -> tensor<?x?x?xf32>
  // CHECK: %[[Z8:.*]] = spin.dense_indexer q(%[[QBF]] : tensor<2x1x4x16xbf16>) w(%[[W]] : tensor<2x1x4xf32>) keys(%[[K8]] : tensor<?x16x16xf8E4M3FN>) scales(%[[SC]] : tensor<?x16xf32>) block_table(%[[BT]] : tensor<2x4xi32>) lengths(%[[N]] : tensor<2x1xi32>) -> tensor<2x1x64xf32>{{$}}
  %z8 = spin.dense_indexer q(%qbf : tensor<2x1x4x16xbf16>)
      w(%w : tensor<2x1x4xf32>) keys(%k8 : tensor<?x16x16xf8E4M3FN>)
      scales(%sc : tensor<?x16xf32>) block_table(%bt : tensor<2x4xi32>)
      lengths(%n : tensor<2x1xi32>) -> tensor<2x1x64xf32>
  // CHECK: return %[[ZBF]], %[[ZF16]], %[[ZF32]], %[[Z8]] :
  return %zbf, %zf16, %zf32, %z8
      : tensor<2x1x64xf32>, tensor<2x1x64xf32>, tensor<?x?x?xf32>, tensor<2x1x64xf32>
}

// fp8 e4m3 queries with fp8 e4m3 keys (and their per-slot scales), one row
// and an MTP step of R = 4 rows with a dynamic batch.
// CHECK-LABEL: func.func @dense_indexer_fp8_queries(
// CHECK-SAME:    %[[Q8:[^:]+]]: tensor<2x1x4x16xf8E4M3FN>,
// CHECK-SAME:    %[[QD8:[^:]+]]: tensor<?x4x4x16xf8E4M3FN>,
// CHECK-SAME:    %[[W:[^:]+]]: tensor<2x1x4xf32>,
// CHECK-SAME:    %[[WD:[^:]+]]: tensor<?x4x4xf32>,
// CHECK-SAME:    %[[K8:[^:]+]]: tensor<?x16x16xf8E4M3FN>,
// CHECK-SAME:    %[[SC:[^:]+]]: tensor<?x16xf32>,
// CHECK-SAME:    %[[BT:[^:]+]]: tensor<2x4xi32>,
// CHECK-SAME:    %[[BTD:[^:]+]]: tensor<?x4xi32>,
// CHECK-SAME:    %[[N:[^:]+]]: tensor<2x1xi32>,
// CHECK-SAME:    %[[ND:[^:]+]]: tensor<?x4xi32>)
func.func @dense_indexer_fp8_queries(%q8: tensor<2x1x4x16xf8E4M3FN>,
                                     %qd8: tensor<?x4x4x16xf8E4M3FN>,
                                     %w: tensor<2x1x4xf32>, %wd: tensor<?x4x4xf32>,
                                     %k8: tensor<?x16x16xf8E4M3FN>, %sc: tensor<?x16xf32>,
                                     %bt: tensor<2x4xi32>, %btd: tensor<?x4xi32>,
                                     %n: tensor<2x1xi32>, %nd: tensor<?x4xi32>)
    -> (tensor<2x1x64xf32>, tensor<?x4x64xf32>) {
  // CHECK: %[[Z:.*]] = spin.dense_indexer q(%[[Q8]] : tensor<2x1x4x16xf8E4M3FN>) w(%[[W]] : tensor<2x1x4xf32>) keys(%[[K8]] : tensor<?x16x16xf8E4M3FN>) scales(%[[SC]] : tensor<?x16xf32>) block_table(%[[BT]] : tensor<2x4xi32>) lengths(%[[N]] : tensor<2x1xi32>) -> tensor<2x1x64xf32>{{$}}
  %z = spin.dense_indexer q(%q8 : tensor<2x1x4x16xf8E4M3FN>)
      w(%w : tensor<2x1x4xf32>) keys(%k8 : tensor<?x16x16xf8E4M3FN>)
      scales(%sc : tensor<?x16xf32>) block_table(%bt : tensor<2x4xi32>)
      lengths(%n : tensor<2x1xi32>) -> tensor<2x1x64xf32>
  // CHECK: %[[ZD:.*]] = spin.dense_indexer q(%[[QD8]] : tensor<?x4x4x16xf8E4M3FN>) w(%[[WD]] : tensor<?x4x4xf32>) keys(%[[K8]] : tensor<?x16x16xf8E4M3FN>) scales(%[[SC]] : tensor<?x16xf32>) block_table(%[[BTD]] : tensor<?x4xi32>) lengths(%[[ND]] : tensor<?x4xi32>) -> tensor<?x4x64xf32>{{$}}
  %zd = spin.dense_indexer q(%qd8 : tensor<?x4x4x16xf8E4M3FN>)
      w(%wd : tensor<?x4x4xf32>) keys(%k8 : tensor<?x16x16xf8E4M3FN>)
      scales(%sc : tensor<?x16xf32>) block_table(%btd : tensor<?x4xi32>)
      lengths(%nd : tensor<?x4xi32>) -> tensor<?x4x64xf32>
  // CHECK: return %[[Z]], %[[ZD]] : tensor<2x1x64xf32>, tensor<?x4x64xf32>
  return %z, %zd : tensor<2x1x64xf32>, tensor<?x4x64xf32>
}

//===----------------------------------------------------------------------===//
// spin.sparse_indexer
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @sparse_indexer(
// CHECK-SAME:    %[[Q:[^:]+]]: tensor<2x1x4x16xbf16>,
// CHECK-SAME:    %[[QM:[^:]+]]: tensor<2x4x4x16xf16>,
// CHECK-SAME:    %[[W:[^:]+]]: tensor<2x1x4xf32>,
// CHECK-SAME:    %[[WM:[^:]+]]: tensor<2x4x4xf32>,
// CHECK-SAME:    %[[K:[^:]+]]: tensor<?x16x16xbf16>,
// CHECK-SAME:    %[[K8:[^:]+]]: tensor<8x16x16xf8E4M3FN>,
// CHECK-SAME:    %[[SC:[^:]+]]: tensor<8x16xf32>,
// CHECK-SAME:    %[[BT:[^:]+]]: tensor<2x4xi32>,
// CHECK-SAME:    %[[N:[^:]+]]: tensor<2x1xi32>,
// CHECK-SAME:    %[[NM:[^:]+]]: tensor<2x4xi32>,
// CHECK-SAME:    %[[M:[^:]+]]: tensor<2x4xi1>,
// CHECK-SAME:    %[[M8:[^:]+]]: tensor<2x?xi1>)
func.func @sparse_indexer(%q: tensor<2x1x4x16xbf16>, %qm: tensor<2x4x4x16xf16>,
                          %w: tensor<2x1x4xf32>, %wm: tensor<2x4x4xf32>,
                          %k: tensor<?x16x16xbf16>,
                          %k8: tensor<8x16x16xf8E4M3FN>, %sc: tensor<8x16xf32>,
                          %bt: tensor<2x4xi32>, %n: tensor<2x1xi32>,
                          %nm: tensor<2x4xi32>, %m: tensor<2x4xi1>,
                          %m8: tensor<2x?xi1>)
    -> (tensor<2x1x64xf32>, tensor<2x4x64xf32>) {
  // CHECK: %[[Z:.*]] = spin.sparse_indexer q(%[[Q]] : tensor<2x1x4x16xbf16>) w(%[[W]] : tensor<2x1x4xf32>) keys(%[[K]] : tensor<?x16x16xbf16>) block_table(%[[BT]] : tensor<2x4xi32>) lengths(%[[N]] : tensor<2x1xi32>) mask(%[[M]] : tensor<2x4xi1>) {block_size = 16 : i64} -> tensor<2x1x64xf32>{{$}}
  %z = spin.sparse_indexer q(%q : tensor<2x1x4x16xbf16>)
      w(%w : tensor<2x1x4xf32>) keys(%k : tensor<?x16x16xbf16>)
      block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>)
      mask(%m : tensor<2x4xi1>) {block_size = 16 : i64}
      -> tensor<2x1x64xf32>
  // MTP verification step: R = 4 rows share the (dynamic-width) mask.
  // CHECK: %[[ZM:.*]] = spin.sparse_indexer q(%[[QM]] : tensor<2x4x4x16xf16>) w(%[[WM]] : tensor<2x4x4xf32>) keys(%[[K8]] : tensor<8x16x16xf8E4M3FN>) scales(%[[SC]] : tensor<8x16xf32>) block_table(%[[BT]] : tensor<2x4xi32>) lengths(%[[NM]] : tensor<2x4xi32>) mask(%[[M8]] : tensor<2x?xi1>) {block_size = 8 : i64} -> tensor<2x4x64xf32>{{$}}
  %zm = spin.sparse_indexer q(%qm : tensor<2x4x4x16xf16>)
      w(%wm : tensor<2x4x4xf32>) keys(%k8 : tensor<8x16x16xf8E4M3FN>)
      scales(%sc : tensor<8x16xf32>) block_table(%bt : tensor<2x4xi32>)
      lengths(%nm : tensor<2x4xi32>) mask(%m8 : tensor<2x?xi1>)
      {block_size = 8 : i64} -> tensor<2x4x64xf32>
  // CHECK: return %[[Z]], %[[ZM]] : tensor<2x1x64xf32>, tensor<2x4x64xf32>
  return %z, %zm : tensor<2x1x64xf32>, tensor<2x4x64xf32>
}

// fp8 e4m3 queries with fp8 e4m3 keys and scales.
// CHECK-LABEL: func.func @sparse_indexer_fp8_queries(
// CHECK-SAME:    %[[Q8:[^:]+]]: tensor<2x1x4x16xf8E4M3FN>,
// CHECK-SAME:    %[[W:[^:]+]]: tensor<2x1x4xf32>,
// CHECK-SAME:    %[[K8:[^:]+]]: tensor<8x16x16xf8E4M3FN>,
// CHECK-SAME:    %[[SC:[^:]+]]: tensor<8x16xf32>,
// CHECK-SAME:    %[[BT:[^:]+]]: tensor<2x4xi32>,
// CHECK-SAME:    %[[N:[^:]+]]: tensor<2x1xi32>,
// CHECK-SAME:    %[[M:[^:]+]]: tensor<2x4xi1>)
func.func @sparse_indexer_fp8_queries(%q8: tensor<2x1x4x16xf8E4M3FN>,
                                      %w: tensor<2x1x4xf32>,
                                      %k8: tensor<8x16x16xf8E4M3FN>, %sc: tensor<8x16xf32>,
                                      %bt: tensor<2x4xi32>, %n: tensor<2x1xi32>,
                                      %m: tensor<2x4xi1>) -> tensor<2x1x64xf32> {
  // CHECK: %[[Z:.*]] = spin.sparse_indexer q(%[[Q8]] : tensor<2x1x4x16xf8E4M3FN>) w(%[[W]] : tensor<2x1x4xf32>) keys(%[[K8]] : tensor<8x16x16xf8E4M3FN>) scales(%[[SC]] : tensor<8x16xf32>) block_table(%[[BT]] : tensor<2x4xi32>) lengths(%[[N]] : tensor<2x1xi32>) mask(%[[M]] : tensor<2x4xi1>) {block_size = 16 : i64} -> tensor<2x1x64xf32>{{$}}
  %z = spin.sparse_indexer q(%q8 : tensor<2x1x4x16xf8E4M3FN>)
      w(%w : tensor<2x1x4xf32>) keys(%k8 : tensor<8x16x16xf8E4M3FN>)
      scales(%sc : tensor<8x16xf32>) block_table(%bt : tensor<2x4xi32>)
      lengths(%n : tensor<2x1xi32>) mask(%m : tensor<2x4xi1>)
      {block_size = 16 : i64} -> tensor<2x1x64xf32>
  // CHECK: return %[[Z]] : tensor<2x1x64xf32>
  return %z : tensor<2x1x64xf32>
}

//===----------------------------------------------------------------------===//
// spin.topk
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @topk(
// CHECK-SAME:    %[[Z:[^:]+]]: tensor<2x1x64xf32>,
// CHECK-SAME:    %[[ZD:[^:]+]]: tensor<?x4x?xf32>,
// CHECK-SAME:    %[[N:[^:]+]]: tensor<2x1xi32>,
// CHECK-SAME:    %[[ND:[^:]+]]: tensor<?x4xi32>,
// CHECK-SAME:    %[[M:[^:]+]]: tensor<2x4xi1>)
func.func @topk(%z: tensor<2x1x64xf32>, %zd: tensor<?x4x?xf32>,
                %n: tensor<2x1xi32>, %nd: tensor<?x4xi32>, %m: tensor<2x4xi1>)
    -> (tensor<2x1x32xi32>, tensor<?x4x8xi32>, tensor<2x1x?xi32>) {
  // CHECK: %[[T:.*]] = spin.topk %[[Z]] lengths(%[[N]] : tensor<2x1xi32>) {k = 32 : i64} : tensor<2x1x64xf32> -> tensor<2x1x32xi32>{{$}}
  %t = spin.topk %z lengths(%n : tensor<2x1xi32>) {k = 32 : i64}
      : tensor<2x1x64xf32> -> tensor<2x1x32xi32>
  // CHECK: %[[TD:.*]] = spin.topk %[[ZD]] lengths(%[[ND]] : tensor<?x4xi32>) {k = 8 : i64} : tensor<?x4x?xf32> -> tensor<?x4x8xi32>{{$}}
  %td = spin.topk %zd lengths(%nd : tensor<?x4xi32>) {k = 8 : i64}
      : tensor<?x4x?xf32> -> tensor<?x4x8xi32>
  // CHECK: %[[TM:.*]] = spin.topk %[[Z]] lengths(%[[N]] : tensor<2x1xi32>) mask(%[[M]] : tensor<2x4xi1>) {block_size = 16 : i64, k = 16 : i64} : tensor<2x1x64xf32> -> tensor<2x1x?xi32>{{$}}
  %tm = spin.topk %z lengths(%n : tensor<2x1xi32>) mask(%m : tensor<2x4xi1>)
      {k = 16 : i64, block_size = 16 : i64}
      : tensor<2x1x64xf32> -> tensor<2x1x?xi32>
  // CHECK: return %[[T]], %[[TD]], %[[TM]] :
  return %t, %td, %tm : tensor<2x1x32xi32>, tensor<?x4x8xi32>, tensor<2x1x?xi32>
}

//===----------------------------------------------------------------------===//
// spin.predict
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @predict(
// CHECK-SAME:    %[[S:[^:]+]]: !spin.state<layer = 0>,
// CHECK-SAME:    %[[SB:[^:]+]]: !spin.state<layer = 1, level = block>,
// CHECK-SAME:    %[[P:[^:]+]]: tensor<2x1xi32>,
// CHECK-SAME:    %[[N:[^:]+]]: tensor<2x1xi32>,
// CHECK-SAME:    %[[PD:[^:]+]]: tensor<?x4xi32>,
// CHECK-SAME:    %[[ND:[^:]+]]: tensor<?x4xi32>)
func.func @predict(%s: !spin.state<layer = 0>,
                   %sb: !spin.state<layer = 1, level = block>,
                   %p: tensor<2x1xi32>, %n: tensor<2x1xi32>,
                   %pd: tensor<?x4xi32>, %nd: tensor<?x4xi32>)
    -> (tensor<2x1x64xf32>, tensor<2x1x4xf32>, tensor<?x4x?xf32>) {
  // Slot level (A0, A1): one prediction per slot.
  // CHECK: %[[Z:.*]] = spin.predict %[[S]] positions(%[[P]] : tensor<2x1xi32>) lengths(%[[N]] : tensor<2x1xi32>) : !spin.state<layer = 0> -> tensor<2x1x64xf32>{{$}}
  %z = spin.predict %s positions(%p : tensor<2x1xi32>)
      lengths(%n : tensor<2x1xi32>) : !spin.state<layer = 0>
      -> tensor<2x1x64xf32>
  // Block level (A2): one prediction per block.
  // CHECK: %[[ZB:.*]] = spin.predict %[[SB]] positions(%[[P]] : tensor<2x1xi32>) lengths(%[[N]] : tensor<2x1xi32>) {block_size = 16 : i64} : !spin.state<layer = 1, level = block> -> tensor<2x1x4xf32>{{$}}
  %zb = spin.predict %sb positions(%p : tensor<2x1xi32>)
      lengths(%n : tensor<2x1xi32>) {block_size = 16 : i64}
      : !spin.state<layer = 1, level = block> -> tensor<2x1x4xf32>
  // CHECK: %[[ZD:.*]] = spin.predict %[[S]] positions(%[[PD]] : tensor<?x4xi32>) lengths(%[[ND]] : tensor<?x4xi32>) : !spin.state<layer = 0> -> tensor<?x4x?xf32>{{$}}
  %zd = spin.predict %s positions(%pd : tensor<?x4xi32>)
      lengths(%nd : tensor<?x4xi32>) : !spin.state<layer = 0>
      -> tensor<?x4x?xf32>
  // CHECK: return %[[Z]], %[[ZB]], %[[ZD]] :
  return %z, %zb, %zd : tensor<2x1x64xf32>, tensor<2x1x4xf32>, tensor<?x4x?xf32>
}

//===----------------------------------------------------------------------===//
// spin.pool
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @pool(
// CHECK-SAME:    %[[Z:[^:]+]]: tensor<2x1x64xf32>,
// CHECK-SAME:    %[[ZD:[^:]+]]: tensor<2x4x?xf32>,
// CHECK-SAME:    %[[N:[^:]+]]: tensor<2x1xi32>,
// CHECK-SAME:    %[[NM:[^:]+]]: tensor<2x4xi32>)
func.func @pool(%z: tensor<2x1x64xf32>, %zd: tensor<2x4x?xf32>,
                %n: tensor<2x1xi32>, %nm: tensor<2x4xi32>)
    -> (tensor<2x1x4xf32>, tensor<2x1x8xf32>, tensor<2x4x?xf32>) {
  // CHECK: %[[MAX:.*]] = spin.pool %[[Z]] lengths(%[[N]] : tensor<2x1xi32>) {block_size = 16 : i64, pooling = #spin.pooling<max>} : tensor<2x1x64xf32> -> tensor<2x1x4xf32>{{$}}
  %max = spin.pool %z lengths(%n : tensor<2x1xi32>)
      {pooling = #spin.pooling<max>, block_size = 16 : i64}
      : tensor<2x1x64xf32> -> tensor<2x1x4xf32>
  // CHECK: %[[MEAN:.*]] = spin.pool %[[Z]] lengths(%[[N]] : tensor<2x1xi32>) {block_size = 8 : i64, pooling = #spin.pooling<mean>} : tensor<2x1x64xf32> -> tensor<2x1x8xf32>{{$}}
  %mean = spin.pool %z lengths(%n : tensor<2x1xi32>)
      {pooling = #spin.pooling<mean>, block_size = 8 : i64}
      : tensor<2x1x64xf32> -> tensor<2x1x8xf32>
  // CHECK: %[[TOP4:.*]] = spin.pool %[[ZD]] lengths(%[[NM]] : tensor<2x4xi32>) {block_size = 16 : i64, pooling = #spin.pooling<top4>} : tensor<2x4x?xf32> -> tensor<2x4x?xf32>{{$}}
  %top4 = spin.pool %zd lengths(%nm : tensor<2x4xi32>)
      {pooling = #spin.pooling<top4>, block_size = 16 : i64}
      : tensor<2x4x?xf32> -> tensor<2x4x?xf32>
  // CHECK: return %[[MAX]], %[[MEAN]], %[[TOP4]] :
  return %max, %mean, %top4 : tensor<2x1x4xf32>, tensor<2x1x8xf32>, tensor<2x4x?xf32>
}

//===----------------------------------------------------------------------===//
// spin.select_blocks
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @select_blocks(
// CHECK-SAME:    %[[S:[^:]+]]: !spin.state<layer = 0>,
// CHECK-SAME:    %[[SB:[^:]+]]: !spin.state<layer = 2, level = block>,
// CHECK-SAME:    %[[SC:[^:]+]]: tensor<2x1x4xf32>,
// CHECK-SAME:    %[[SCM:[^:]+]]: tensor<2x4x4xf32>,
// CHECK-SAME:    %[[Z:[^:]+]]: tensor<2x1x64xf32>,
// CHECK-SAME:    %[[N:[^:]+]]: tensor<2x1xi32>,
// CHECK-SAME:    %[[NM:[^:]+]]: tensor<2x4xi32>)
func.func @select_blocks(%s: !spin.state<layer = 0>,
                         %sb: !spin.state<layer = 2, level = block>,
                         %sc: tensor<2x1x4xf32>, %scm: tensor<2x4x4xf32>,
                         %z: tensor<2x1x64xf32>,
                         %n: tensor<2x1xi32>, %nm: tensor<2x4xi32>)
    -> (tensor<2x4xi1>, tensor<2x4xi1>, tensor<2x4xi1>, tensor<2x4xi1>,
        tensor<2x4xi1>, tensor<?x?xi1>) {
  // A1 with every defaulted attribute spelled out: explore = 0, seed = 0,
  // reduction = a1 and mtp_mask = union are all elided when printed.
  // CHECK: %[[DEF:.*]] = spin.select_blocks %[[S]] scores(%[[SC]] : tensor<2x1x4xf32>) lengths(%[[N]] : tensor<2x1xi32>) {block_size = 16 : i64, sparsity = 5.000000e-01 : f64, topk = 32 : i64} : !spin.state<layer = 0> -> tensor<2x4xi1>{{$}}
  %def = spin.select_blocks %s scores(%sc : tensor<2x1x4xf32>)
      lengths(%n : tensor<2x1xi32>)
      {topk = 32 : i64, block_size = 16 : i64, sparsity = 5.0e-01,
       explore = 0.0, seed = 0 : i64, reduction = #spin.reduction<a1>,
       mtp_mask = #spin.mtp_mask<union>}
      : !spin.state<layer = 0> -> tensor<2x4xi1>
  // A1 with exploration and a seed.
  // CHECK: %[[A1:.*]] = spin.select_blocks %[[S]] scores(%[[SC]] : tensor<2x1x4xf32>) lengths(%[[N]] : tensor<2x1xi32>) {block_size = 16 : i64, explore = 2.500000e-01 : f64, seed = 7 : i64, sparsity = 0.000000e+00 : f64, topk = 16 : i64} : !spin.state<layer = 0> -> tensor<2x4xi1>{{$}}
  %a1 = spin.select_blocks %s scores(%sc : tensor<2x1x4xf32>)
      lengths(%n : tensor<2x1xi32>)
      {topk = 16 : i64, block_size = 16 : i64, sparsity = 0.0,
       explore = 2.5e-01, seed = 7 : i64}
      : !spin.state<layer = 0> -> tensor<2x4xi1>
  // A0 ranks slot predictions; no exploration.
  // CHECK: %[[A0:.*]] = spin.select_blocks %[[S]] scores(%[[Z]] : tensor<2x1x64xf32>) lengths(%[[N]] : tensor<2x1xi32>) {block_size = 16 : i64, reduction = #spin.reduction<a0>, sparsity = 1.000000e+00 : f64, topk = 32 : i64} : !spin.state<layer = 0> -> tensor<2x4xi1>{{$}}
  %a0 = spin.select_blocks %s scores(%z : tensor<2x1x64xf32>)
      lengths(%n : tensor<2x1xi32>)
      {topk = 32 : i64, block_size = 16 : i64, sparsity = 1.0,
       reduction = #spin.reduction<a0>}
      : !spin.state<layer = 0> -> tensor<2x4xi1>
  // A2 ranks block-level predictions of a level = block state.
  // CHECK: %[[A2:.*]] = spin.select_blocks %[[SB]] scores(%[[SC]] : tensor<2x1x4xf32>) lengths(%[[N]] : tensor<2x1xi32>) {block_size = 16 : i64, explore = 5.000000e-02 : f64, reduction = #spin.reduction<a2>, seed = -3 : i64, sparsity = 7.500000e-01 : f64, topk = 32 : i64} : !spin.state<layer = 2, level = block> -> tensor<2x4xi1>{{$}}
  %a2 = spin.select_blocks %sb scores(%sc : tensor<2x1x4xf32>)
      lengths(%n : tensor<2x1xi32>)
      {topk = 32 : i64, block_size = 16 : i64, sparsity = 7.5e-01,
       explore = 5.0e-02, seed = -3 : i64, reduction = #spin.reduction<a2>}
      : !spin.state<layer = 2, level = block> -> tensor<2x4xi1>
  // MTP (R = 4) with the explicit union mask and with row 0's selection.
  // CHECK: %[[UNION:.*]] = spin.select_blocks %[[S]] scores(%[[SCM]] : tensor<2x4x4xf32>) lengths(%[[NM]] : tensor<2x4xi32>) {block_size = 16 : i64, sparsity = 5.000000e-01 : f64, topk = 32 : i64} : !spin.state<layer = 0> -> tensor<2x4xi1>{{$}}
  %union = spin.select_blocks %s scores(%scm : tensor<2x4x4xf32>)
      lengths(%nm : tensor<2x4xi32>)
      {topk = 32 : i64, block_size = 16 : i64, sparsity = 5.0e-01,
       mtp_mask = #spin.mtp_mask<union>}
      : !spin.state<layer = 0> -> tensor<2x4xi1>
  // CHECK: %[[ROW0:.*]] = spin.select_blocks %[[S]] scores(%[[SCM]] : tensor<2x4x4xf32>) lengths(%[[NM]] : tensor<2x4xi32>) {block_size = 16 : i64, mtp_mask = #spin.mtp_mask<row0>, sparsity = 5.000000e-01 : f64, topk = 32 : i64} : !spin.state<layer = 0> -> tensor<?x?xi1>{{$}}
  %row0 = spin.select_blocks %s scores(%scm : tensor<2x4x4xf32>)
      lengths(%nm : tensor<2x4xi32>)
      {topk = 32 : i64, block_size = 16 : i64, sparsity = 5.0e-01,
       mtp_mask = #spin.mtp_mask<row0>}
      : !spin.state<layer = 0> -> tensor<?x?xi1>
  // CHECK: return %[[DEF]], %[[A1]], %[[A0]], %[[A2]], %[[UNION]], %[[ROW0]] :
  return %def, %a1, %a0, %a2, %union, %row0
      : tensor<2x4xi1>, tensor<2x4xi1>, tensor<2x4xi1>, tensor<2x4xi1>,
        tensor<2x4xi1>, tensor<?x?xi1>
}

// The age-based exploration policies read a state with last_observed; the
// default random policy is elided when printed.
// CHECK-LABEL: func.func @select_blocks_explore_policies(
// CHECK-SAME:    %[[S:[^:]+]]: !spin.state<layer = 1, last_observed = true>,
// CHECK-SAME:    %[[SB:[^:]+]]: !spin.state<layer = 2, level = block, last_observed = true>,
func.func @select_blocks_explore_policies(
    %s: !spin.state<layer = 1, last_observed = true>,
    %sb: !spin.state<layer = 2, level = block, last_observed = true>,
    %sc: tensor<2x1x4xf32>, %n: tensor<2x1xi32>, %p: tensor<2x1xi32>)
    -> (tensor<2x4xi1>, tensor<2x4xi1>, tensor<2x4xi1>, tensor<2x4xi1>) {
  // CHECK: spin.select_blocks %[[S]] {{.*}} {block_size = 16 : i64, explore = 2.500000e-01 : f64, explore_policy = #spin.explore_policy<block_age>, sparsity = 5.000000e-01 : f64, topk = 16 : i64} : !spin.state<layer = 1, last_observed = true> -> tensor<2x4xi1>{{$}}
  %age = spin.select_blocks %s scores(%sc : tensor<2x1x4xf32>)
      lengths(%n : tensor<2x1xi32>)
      {topk = 16 : i64, block_size = 16 : i64, sparsity = 5.0e-01,
       explore = 2.5e-01, explore_policy = #spin.explore_policy<block_age>}
      : !spin.state<layer = 1, last_observed = true> -> tensor<2x4xi1>
  // CHECK: spin.select_blocks %[[SB]] {{.*}} {block_size = 16 : i64, explore = 2.500000e-01 : f64, explore_policy = #spin.explore_policy<staleness_score>, reduction = #spin.reduction<a2>, sparsity = 5.000000e-01 : f64, topk = 16 : i64} : !spin.state<layer = 2, level = block, last_observed = true> -> tensor<2x4xi1>{{$}}
  %stale = spin.select_blocks %sb scores(%sc : tensor<2x1x4xf32>)
      lengths(%n : tensor<2x1xi32>)
      {topk = 16 : i64, block_size = 16 : i64, sparsity = 5.0e-01,
       explore = 2.5e-01, reduction = #spin.reduction<a2>,
       explore_policy = #spin.explore_policy<staleness_score>}
      : !spin.state<layer = 2, level = block, last_observed = true> -> tensor<2x4xi1>
  // CHECK: spin.select_blocks %[[S]] {{.*}} {block_size = 16 : i64, explore = 2.500000e-01 : f64, sparsity = 5.000000e-01 : f64, topk = 16 : i64} : !spin.state<layer = 1, last_observed = true> -> tensor<2x4xi1>{{$}}
  %random = spin.select_blocks %s scores(%sc : tensor<2x1x4xf32>)
      lengths(%n : tensor<2x1xi32>)
      {topk = 16 : i64, block_size = 16 : i64, sparsity = 5.0e-01,
       explore = 2.5e-01, explore_policy = #spin.explore_policy<random>}
      : !spin.state<layer = 1, last_observed = true> -> tensor<2x4xi1>
  // CHECK: spin.fused_select %[[S]] {{.*}} {block_size = 16 : i64, explore = 2.500000e-01 : f64, explore_policy = #spin.explore_policy<block_age>, pooling = #spin.pooling<max>, sparsity = 5.000000e-01 : f64, topk = 16 : i64} : !spin.state<layer = 1, last_observed = true> -> tensor<2x4xi1>{{$}}
  %fused = spin.fused_select %s positions(%p : tensor<2x1xi32>)
      lengths(%n : tensor<2x1xi32>)
      {topk = 16 : i64, block_size = 16 : i64, sparsity = 5.0e-01,
       explore = 2.5e-01, pooling = #spin.pooling<max>,
       explore_policy = #spin.explore_policy<block_age>}
      : !spin.state<layer = 1, last_observed = true> -> tensor<2x4xi1>
  return %age, %stale, %random, %fused
      : tensor<2x4xi1>, tensor<2x4xi1>, tensor<2x4xi1>, tensor<2x4xi1>
}

//===----------------------------------------------------------------------===//
// spin.block_sparsity
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @block_sparsity(
// CHECK-SAME:    %[[M:[^:]+]]: tensor<2x4xi1>,
// CHECK-SAME:    %[[N:[^:]+]]: tensor<2x1xi32>,
// CHECK-SAME:    %[[MD:[^:]+]]: tensor<?x?xi1>,
// CHECK-SAME:    %[[NM:[^:]+]]: tensor<?x4xi32>)
func.func @block_sparsity(%m: tensor<2x4xi1>, %n: tensor<2x1xi32>,
                          %md: tensor<?x?xi1>, %nm: tensor<?x4xi32>)
    -> (tensor<2x1xf32>, tensor<?x4xf32>) {
  // CHECK: %[[R:.*]] = spin.block_sparsity %[[M]] lengths(%[[N]] : tensor<2x1xi32>) {block_size = 16 : i64} : tensor<2x4xi1> -> tensor<2x1xf32>{{$}}
  %r = spin.block_sparsity %m lengths(%n : tensor<2x1xi32>)
      {block_size = 16 : i64} : tensor<2x4xi1> -> tensor<2x1xf32>
  // CHECK: %[[RD:.*]] = spin.block_sparsity %[[MD]] lengths(%[[NM]] : tensor<?x4xi32>) {block_size = 8 : i64} : tensor<?x?xi1> -> tensor<?x4xf32>{{$}}
  %rd = spin.block_sparsity %md lengths(%nm : tensor<?x4xi32>)
      {block_size = 8 : i64} : tensor<?x?xi1> -> tensor<?x4xf32>
  // CHECK: return %[[R]], %[[RD]] : tensor<2x1xf32>, tensor<?x4xf32>
  return %r, %rd : tensor<2x1xf32>, tensor<?x4xf32>
}

//===----------------------------------------------------------------------===//
// spin.ema_update
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @ema_update(
// CHECK-SAME:    %[[S:[^:]+]]: !spin.state<layer = 0>,
// CHECK-SAME:    %[[SB:[^:]+]]: !spin.state<layer = 2, level = block>,
// CHECK-SAME:    %[[Z:[^:]+]]: tensor<2x1x64xf32>,
// CHECK-SAME:    %[[ZD:[^:]+]]: tensor<?x1x?xf32>,
// CHECK-SAME:    %[[P:[^:]+]]: tensor<2x1xi32>,
// CHECK-SAME:    %[[N:[^:]+]]: tensor<2x1xi32>,
// CHECK-SAME:    %[[M:[^:]+]]: tensor<2x4xi1>,
// CHECK-SAME:    %[[MD:[^:]+]]: tensor<?x?xi1>)
func.func @ema_update(%s: !spin.state<layer = 0>,
                      %sb: !spin.state<layer = 2, level = block>,
                      %z: tensor<2x1x64xf32>, %zd: tensor<?x1x?xf32>,
                      %p: tensor<2x1xi32>, %n: tensor<2x1xi32>,
                      %m: tensor<2x4xi1>, %md: tensor<?x?xi1>)
    -> (!spin.state<layer = 0>, !spin.state<layer = 2, level = block>) {
  // Slot level (A0, A1).
  // CHECK: %[[S1:.*]] = spin.ema_update %[[S]] scores(%[[Z]] : tensor<2x1x64xf32>) positions(%[[P]] : tensor<2x1xi32>) lengths(%[[N]] : tensor<2x1xi32>) mask(%[[M]] : tensor<2x4xi1>) {block_size = 16 : i64, decay = 5.000000e-01 : f64} : !spin.state<layer = 0>{{$}}
  %s1 = spin.ema_update %s scores(%z : tensor<2x1x64xf32>)
      positions(%p : tensor<2x1xi32>) lengths(%n : tensor<2x1xi32>)
      mask(%m : tensor<2x4xi1>) {decay = 5.0e-01, block_size = 16 : i64}
      : !spin.state<layer = 0>
  // Block level (A2) pools the observed scores per block.
  // CHECK: %[[SB1:.*]] = spin.ema_update %[[SB]] scores(%[[Z]] : tensor<2x1x64xf32>) positions(%[[P]] : tensor<2x1xi32>) lengths(%[[N]] : tensor<2x1xi32>) mask(%[[M]] : tensor<2x4xi1>) {block_size = 16 : i64, decay = 9.000000e-01 : f64, pooling = #spin.pooling<mean>} : !spin.state<layer = 2, level = block>{{$}}
  %sb1 = spin.ema_update %sb scores(%z : tensor<2x1x64xf32>)
      positions(%p : tensor<2x1xi32>) lengths(%n : tensor<2x1xi32>)
      mask(%m : tensor<2x4xi1>)
      {decay = 9.0e-01, block_size = 16 : i64, pooling = #spin.pooling<mean>}
      : !spin.state<layer = 2, level = block>
  // Dynamic batch and slot counts; decay at both ends of [0, 1].
  // CHECK: %[[S2:.*]] = spin.ema_update %[[S1]] scores(%[[ZD]] : tensor<?x1x?xf32>) positions(%[[P]] : tensor<2x1xi32>) lengths(%[[N]] : tensor<2x1xi32>) mask(%[[MD]] : tensor<?x?xi1>) {block_size = 8 : i64, decay = 0.000000e+00 : f64} : !spin.state<layer = 0>{{$}}
  %s2 = spin.ema_update %s1 scores(%zd : tensor<?x1x?xf32>)
      positions(%p : tensor<2x1xi32>) lengths(%n : tensor<2x1xi32>)
      mask(%md : tensor<?x?xi1>) {decay = 0.0, block_size = 8 : i64}
      : !spin.state<layer = 0>
  // CHECK: %[[S3:.*]] = spin.ema_update %[[S2]] scores(%[[Z]] : tensor<2x1x64xf32>) positions(%[[P]] : tensor<2x1xi32>) lengths(%[[N]] : tensor<2x1xi32>) mask(%[[M]] : tensor<2x4xi1>) {block_size = 16 : i64, decay = 1.000000e+00 : f64} : !spin.state<layer = 0>{{$}}
  %s3 = spin.ema_update %s2 scores(%z : tensor<2x1x64xf32>)
      positions(%p : tensor<2x1xi32>) lengths(%n : tensor<2x1xi32>)
      mask(%m : tensor<2x4xi1>) {decay = 1.0, block_size = 16 : i64}
      : !spin.state<layer = 0>
  // CHECK: return %[[S3]], %[[SB1]] : !spin.state<layer = 0>, !spin.state<layer = 2, level = block>
  return %s3, %sb1 : !spin.state<layer = 0>, !spin.state<layer = 2, level = block>
}

//===----------------------------------------------------------------------===//
// spin.observe, spin.commit
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @observe_and_commit(
// CHECK-SAME:    %[[S:[^:]+]]: !spin.state<layer = 0>,
// CHECK-SAME:    %[[SB:[^:]+]]: !spin.state<layer = 2, level = block>,
// CHECK-SAME:    %[[Z:[^:]+]]: tensor<2x4x64xf32>,
// CHECK-SAME:    %[[P:[^:]+]]: tensor<2x4xi32>,
// CHECK-SAME:    %[[N:[^:]+]]: tensor<2x4xi32>,
// CHECK-SAME:    %[[M:[^:]+]]: tensor<2x4xi1>,
// CHECK-SAME:    %[[ZD:[^:]+]]: tensor<?x?x?xf32>,
// CHECK-SAME:    %[[A:[^:]+]]: tensor<2xi32>,
// CHECK-SAME:    %[[AD:[^:]+]]: tensor<?xi32>)
func.func @observe_and_commit(%s: !spin.state<layer = 0>,
                              %sb: !spin.state<layer = 2, level = block>,
                              %z: tensor<2x4x64xf32>, %p: tensor<2x4xi32>,
                              %n: tensor<2x4xi32>, %m: tensor<2x4xi1>,
                              %zd: tensor<?x?x?xf32>,
                              %a: tensor<2xi32>, %ad: tensor<?xi32>)
    -> (!spin.state<layer = 0>, !spin.state<layer = 2, level = block>) {
  // An MTP verification step with draft length 3 (R = 4 rows).
  // CHECK: %[[S1:.*]] = spin.observe %[[S]] scores(%[[Z]] : tensor<2x4x64xf32>) positions(%[[P]] : tensor<2x4xi32>) lengths(%[[N]] : tensor<2x4xi32>) mask(%[[M]] : tensor<2x4xi1>) {block_size = 16 : i64, decay = 5.000000e-01 : f64} : !spin.state<layer = 0>{{$}}
  %s1 = spin.observe %s scores(%z : tensor<2x4x64xf32>)
      positions(%p : tensor<2x4xi32>) lengths(%n : tensor<2x4xi32>)
      mask(%m : tensor<2x4xi1>) {block_size = 16 : i64, decay = 5.0e-01}
      : !spin.state<layer = 0>
  // CHECK: %[[S2:.*]] = spin.commit %[[S1]] accepted(%[[A]] : tensor<2xi32>) {block_size = 16 : i64, decay = 5.000000e-01 : f64} : !spin.state<layer = 0>{{$}}
  %s2 = spin.commit %s1 accepted(%a : tensor<2xi32>)
      {block_size = 16 : i64, decay = 5.0e-01, mtp_update = #spin.mtp_update<prefix>}
      : !spin.state<layer = 0>
  // CHECK: %[[SB1:.*]] = spin.observe %[[SB]] scores(%[[ZD]] : tensor<?x?x?xf32>) positions(%[[P]] : tensor<2x4xi32>) lengths(%[[N]] : tensor<2x4xi32>) mask(%[[M]] : tensor<2x4xi1>) {block_size = 16 : i64, decay = 5.000000e-01 : f64, pooling = #spin.pooling<top4>} : !spin.state<layer = 2, level = block>{{$}}
  %sb1 = spin.observe %sb scores(%zd : tensor<?x?x?xf32>)
      positions(%p : tensor<2x4xi32>) lengths(%n : tensor<2x4xi32>)
      mask(%m : tensor<2x4xi1>)
      {block_size = 16 : i64, decay = 5.0e-01, pooling = #spin.pooling<top4>}
      : !spin.state<layer = 2, level = block>
  // CHECK: %[[SB2:.*]] = spin.commit %[[SB1]] accepted(%[[AD]] : tensor<?xi32>) {block_size = 16 : i64, decay = 7.500000e-01 : f64, mtp_update = #spin.mtp_update<row0>} : !spin.state<layer = 2, level = block>{{$}}
  %sb2 = spin.commit %sb1 accepted(%ad : tensor<?xi32>)
      {block_size = 16 : i64, decay = 7.5e-01, mtp_update = #spin.mtp_update<row0>}
      : !spin.state<layer = 2, level = block>
  // CHECK: return %[[S2]], %[[SB2]] : !spin.state<layer = 0>, !spin.state<layer = 2, level = block>
  return %s2, %sb2 : !spin.state<layer = 0>, !spin.state<layer = 2, level = block>
}

//===----------------------------------------------------------------------===//
// A whole SPIN decode step (variant A1), as the ops compose.
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @spin_decode_step(
// CHECK-SAME:    %[[IDS:[^:]+]]: tensor<2xi64>,
// CHECK-SAME:    %[[Q:[^:]+]]: tensor<2x1x4x16xbf16>,
// CHECK-SAME:    %[[W:[^:]+]]: tensor<2x1x4xf32>,
// CHECK-SAME:    %[[K:[^:]+]]: tensor<?x16x16xbf16>,
// CHECK-SAME:    %[[BT:[^:]+]]: tensor<2x4xi32>,
// CHECK-SAME:    %[[P:[^:]+]]: tensor<2x1xi32>,
// CHECK-SAME:    %[[N:[^:]+]]: tensor<2x1xi32>)
func.func @spin_decode_step(%ids: tensor<2xi64>, %q: tensor<2x1x4x16xbf16>,
                            %w: tensor<2x1x4xf32>, %k: tensor<?x16x16xbf16>,
                            %bt: tensor<2x4xi32>, %p: tensor<2x1xi32>,
                            %n: tensor<2x1xi32>)
    -> (tensor<2x1x16xi32>, tensor<2x1xf32>, !spin.state<layer = 5>) {
  // CHECK: %[[S:.*]] = spin.layer_state %[[IDS]] : tensor<2xi64> -> !spin.state<layer = 5>
  %s = spin.layer_state %ids : tensor<2xi64> -> !spin.state<layer = 5>
  // CHECK: %[[ZHAT:.*]] = spin.predict %[[S]] positions(%[[P]] : tensor<2x1xi32>) lengths(%[[N]] : tensor<2x1xi32>)
  %zhat = spin.predict %s positions(%p : tensor<2x1xi32>)
      lengths(%n : tensor<2x1xi32>) : !spin.state<layer = 5>
      -> tensor<2x1x64xf32>
  // CHECK: %[[BS:.*]] = spin.pool %[[ZHAT]] lengths(%[[N]] : tensor<2x1xi32>)
  %bs = spin.pool %zhat lengths(%n : tensor<2x1xi32>)
      {pooling = #spin.pooling<max>, block_size = 16 : i64}
      : tensor<2x1x64xf32> -> tensor<2x1x4xf32>
  // CHECK: %[[M:.*]] = spin.select_blocks %[[S]] scores(%[[BS]] : tensor<2x1x4xf32>) lengths(%[[N]] : tensor<2x1xi32>)
  %m = spin.select_blocks %s scores(%bs : tensor<2x1x4xf32>)
      lengths(%n : tensor<2x1xi32>)
      {topk = 16 : i64, block_size = 16 : i64, sparsity = 5.0e-01,
       explore = 5.0e-02, seed = 7 : i64}
      : !spin.state<layer = 5> -> tensor<2x4xi1>
  // CHECK: %[[Z:.*]] = spin.sparse_indexer q(%[[Q]] : {{.*}} mask(%[[M]] : tensor<2x4xi1>)
  %z = spin.sparse_indexer q(%q : tensor<2x1x4x16xbf16>)
      w(%w : tensor<2x1x4xf32>) keys(%k : tensor<?x16x16xbf16>)
      block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>)
      mask(%m : tensor<2x4xi1>) {block_size = 16 : i64}
      -> tensor<2x1x64xf32>
  // CHECK: %[[T:.*]] = spin.topk %[[Z]] lengths(%[[N]] : tensor<2x1xi32>) mask(%[[M]] : tensor<2x4xi1>)
  %t = spin.topk %z lengths(%n : tensor<2x1xi32>) mask(%m : tensor<2x4xi1>)
      {k = 16 : i64, block_size = 16 : i64}
      : tensor<2x1x64xf32> -> tensor<2x1x16xi32>
  // CHECK: %[[RHO:.*]] = spin.block_sparsity %[[M]] lengths(%[[N]] : tensor<2x1xi32>)
  %rho = spin.block_sparsity %m lengths(%n : tensor<2x1xi32>)
      {block_size = 16 : i64} : tensor<2x4xi1> -> tensor<2x1xf32>
  // CHECK: %[[S1:.*]] = spin.ema_update %[[S]] scores(%[[Z]] : tensor<2x1x64xf32>) positions(%[[P]] : tensor<2x1xi32>) lengths(%[[N]] : tensor<2x1xi32>) mask(%[[M]] : tensor<2x4xi1>)
  %s1 = spin.ema_update %s scores(%z : tensor<2x1x64xf32>)
      positions(%p : tensor<2x1xi32>) lengths(%n : tensor<2x1xi32>)
      mask(%m : tensor<2x4xi1>) {decay = 5.0e-01, block_size = 16 : i64}
      : !spin.state<layer = 5>
  // CHECK: return %[[T]], %[[RHO]], %[[S1]] :
  return %t, %rho, %s1 : tensor<2x1x16xi32>, tensor<2x1xf32>, !spin.state<layer = 5>
}

//===----------------------------------------------------------------------===//
// spin.fused_select, spin.fused_score
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @fused(
// CHECK-SAME:    %[[S:[^:]+]]: !spin.state<layer = 0>,
// CHECK-SAME:    %[[SB:[^:]+]]: !spin.state<layer = 1, level = block>,
// CHECK-SAME:    %[[Q:[^:]+]]: tensor<2x1x4x16xbf16>,
// CHECK-SAME:    %[[W:[^:]+]]: tensor<2x1x4xf32>,
// CHECK-SAME:    %[[K8:[^:]+]]: tensor<?x16x16xf8E4M3FN>,
// CHECK-SAME:    %[[SC:[^:]+]]: tensor<?x16xf32>,
// CHECK-SAME:    %[[BT:[^:]+]]: tensor<2x4xi32>,
// CHECK-SAME:    %[[N:[^:]+]]: tensor<2x1xi32>,
// CHECK-SAME:    %[[P:[^:]+]]: tensor<2x1xi32>,
// CHECK-SAME:    %[[Q4:[^:]+]]: tensor<2x4x4x16xbf16>,
// CHECK-SAME:    %[[W4:[^:]+]]: tensor<2x4x4xf32>,
// CHECK-SAME:    %[[N4:[^:]+]]: tensor<2x4xi32>,
// CHECK-SAME:    %[[P4:[^:]+]]: tensor<2x4xi32>)
func.func @fused(%s: !spin.state<layer = 0>, %sb: !spin.state<layer = 1, level = block>,
                 %q: tensor<2x1x4x16xbf16>, %w: tensor<2x1x4xf32>,
                 %k8: tensor<?x16x16xf8E4M3FN>, %sc: tensor<?x16xf32>,
                 %bt: tensor<2x4xi32>, %n: tensor<2x1xi32>, %p: tensor<2x1xi32>,
                 %q4: tensor<2x4x4x16xbf16>, %w4: tensor<2x4x4xf32>,
                 %n4: tensor<2x4xi32>, %p4: tensor<2x4xi32>) {
  // A1 needs a pooling kind; defaults (explore, seed, reduction, mtp_mask) are elided.
  // CHECK: %[[M:.*]] = spin.fused_select %[[S]] positions(%[[P]] : tensor<2x1xi32>) lengths(%[[N]] : tensor<2x1xi32>) {block_size = 16 : i64, pooling = #spin.pooling<max>, sparsity = 5.000000e-01 : f64, topk = 32 : i64} : !spin.state<layer = 0> -> tensor<2x4xi1>{{$}}
  %m = spin.fused_select %s positions(%p : tensor<2x1xi32>) lengths(%n : tensor<2x1xi32>) {topk = 32 : i64, block_size = 16 : i64, sparsity = 0.5 : f64, explore = 0.0 : f64, seed = 0 : i64, reduction = #spin.reduction<a1>, mtp_mask = #spin.mtp_mask<union>, pooling = #spin.pooling<max>} : !spin.state<layer = 0> -> tensor<2x4xi1>
  // CHECK: %[[M0:.*]] = spin.fused_select %[[S]] positions(%[[P4]] : tensor<2x4xi32>) lengths(%[[N4]] : tensor<2x4xi32>) {block_size = 16 : i64, mtp_mask = #spin.mtp_mask<row0>, reduction = #spin.reduction<a0>, sparsity = 2.500000e-01 : f64, topk = 32 : i64} : !spin.state<layer = 0> -> tensor<2x4xi1>{{$}}
  %m0 = spin.fused_select %s positions(%p4 : tensor<2x4xi32>) lengths(%n4 : tensor<2x4xi32>) {topk = 32 : i64, block_size = 16 : i64, sparsity = 0.25 : f64, reduction = #spin.reduction<a0>, mtp_mask = #spin.mtp_mask<row0>} : !spin.state<layer = 0> -> tensor<2x4xi1>
  // CHECK: %[[M2:.*]] = spin.fused_select %[[SB]] positions(%[[P]] : tensor<2x1xi32>) lengths(%[[N]] : tensor<2x1xi32>) {block_size = 16 : i64, explore = 1.000000e-01 : f64, reduction = #spin.reduction<a2>, seed = -3 : i64, sparsity = 7.500000e-01 : f64, topk = 16 : i64} : !spin.state<layer = 1, level = block> -> tensor<2x4xi1>{{$}}
  %m2 = spin.fused_select %sb positions(%p : tensor<2x1xi32>) lengths(%n : tensor<2x1xi32>) {topk = 16 : i64, block_size = 16 : i64, sparsity = 0.75 : f64, explore = 0.1 : f64, seed = -3 : i64, reduction = #spin.reduction<a2>} : !spin.state<layer = 1, level = block> -> tensor<2x4xi1>

  // Pure form: no state update.
  // CHECK: %[[T:.*]], %[[Z:.*]] = spin.fused_score q(%[[Q]] : tensor<2x1x4x16xbf16>) w(%[[W]] : tensor<2x1x4xf32>) keys(%[[K8]] : tensor<?x16x16xf8E4M3FN>) scales(%[[SC]] : tensor<?x16xf32>) block_table(%[[BT]] : tensor<2x4xi32>) lengths(%[[N]] : tensor<2x1xi32>) mask(%[[M]] : tensor<2x4xi1>) {block_size = 16 : i64, k = 32 : i64} -> tensor<2x1x32xi32>, tensor<2x1x64xf32>{{$}}
  %t, %z = spin.fused_score q(%q : tensor<2x1x4x16xbf16>) w(%w : tensor<2x1x4xf32>) keys(%k8 : tensor<?x16x16xf8E4M3FN>) scales(%sc : tensor<?x16xf32>) block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>) mask(%m : tensor<2x4xi1>) {k = 32 : i64, block_size = 16 : i64} -> tensor<2x1x32xi32>, tensor<2x1x64xf32>
  // With the EMA update fused (decode).
  // CHECK: %[[T1:.*]], %[[Z1:.*]], %[[S1:.*]] = spin.fused_score q(%[[Q]] : tensor<2x1x4x16xbf16>) w(%[[W]] : tensor<2x1x4xf32>) keys(%[[K8]] : tensor<?x16x16xf8E4M3FN>) scales(%[[SC]] : tensor<?x16xf32>) block_table(%[[BT]] : tensor<2x4xi32>) lengths(%[[N]] : tensor<2x1xi32>) mask(%[[M]] : tensor<2x4xi1>) state(%[[S]] : !spin.state<layer = 0>) positions(%[[P]] : tensor<2x1xi32>) {block_size = 16 : i64, decay = 5.000000e-01 : f64, k = 32 : i64, update = #spin.update<ema>} -> tensor<2x1x32xi32>, tensor<2x1x64xf32>, !spin.state<layer = 0>{{$}}
  %t1, %z1, %s1 = spin.fused_score q(%q : tensor<2x1x4x16xbf16>) w(%w : tensor<2x1x4xf32>) keys(%k8 : tensor<?x16x16xf8E4M3FN>) scales(%sc : tensor<?x16xf32>) block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>) mask(%m : tensor<2x4xi1>) state(%s : !spin.state<layer = 0>) positions(%p : tensor<2x1xi32>) {k = 32 : i64, block_size = 16 : i64, update = #spin.update<ema>, decay = 0.5 : f64} -> tensor<2x1x32xi32>, tensor<2x1x64xf32>, !spin.state<layer = 0>
  // MTP rows buffered for a commit, on a block-level state (pooled).
  // CHECK: %{{.*}}, %{{.*}}, %[[S2:.*]] = spin.fused_score q(%[[Q4]] : tensor<2x4x4x16xbf16>) w(%[[W4]] : tensor<2x4x4xf32>) keys(%[[K8]] : tensor<?x16x16xf8E4M3FN>) scales(%[[SC]] : tensor<?x16xf32>) block_table(%[[BT]] : tensor<2x4xi32>) lengths(%[[N4]] : tensor<2x4xi32>) mask(%[[M2]] : tensor<2x4xi1>) state(%[[SB]] : !spin.state<layer = 1, level = block>) positions(%[[P4]] : tensor<2x4xi32>) {block_size = 16 : i64, decay = 5.000000e-01 : f64, k = 32 : i64, pooling = #spin.pooling<top4>, update = #spin.update<observe>} -> tensor<2x4x32xi32>, tensor<2x4x64xf32>, !spin.state<layer = 1, level = block>{{$}}
  %t2, %z2, %s2 = spin.fused_score q(%q4 : tensor<2x4x4x16xbf16>) w(%w4 : tensor<2x4x4xf32>) keys(%k8 : tensor<?x16x16xf8E4M3FN>) scales(%sc : tensor<?x16xf32>) block_table(%bt : tensor<2x4xi32>) lengths(%n4 : tensor<2x4xi32>) mask(%m2 : tensor<2x4xi1>) state(%sb : !spin.state<layer = 1, level = block>) positions(%p4 : tensor<2x4xi32>) {k = 32 : i64, block_size = 16 : i64, update = #spin.update<observe>, decay = 5.0e-01, pooling = #spin.pooling<top4>} -> tensor<2x4x32xi32>, tensor<2x4x64xf32>, !spin.state<layer = 1, level = block>
  return
}
