// RUN: spin-opt %s --split-input-file --convert-spin-to-scf | FileCheck %s
// RUN: spin-opt %s --split-input-file --convert-spin-to-scf | FileCheck %s --check-prefix=LOWERED

// The CPU lowering of the scoring ops (IndexerLowering.cpp): spin.dense_indexer,
// spin.sparse_indexer, spin.topk and spin.block_sparsity become scf.for nests
// over requests, rows and slots that read the operands through
// bufferization.to_buffer and write a fresh buffer. None of them has a state,
// so no state-pool argument is added. Shapes: B = 2, R = 1, H = 4, Dh = 16,
// 8 pages of 16 slots, 4 pages per request (64 slots).

// No spin op or type is left.
// LOWERED-NOT: {{!spin\.|spin\.}}

// Dense fp8 indexer: the row's queries decoded to f32 once per row into a
// scratch [H, Dh]; gather through the block table (page = i / 16, slot =
// i % 16), decode each key component once into a scratch row, scale the dot
// product per slot, ReLU, weight by w and sum over heads; -inf beyond the
// visible length.
// CHECK-LABEL: func.func @dense_indexer(
// CHECK-SAME:    -> tensor<2x1x64xf32> {
// CHECK-DAG:     %[[Q:.*]] = bufferization.to_buffer %arg0 read_only : tensor<2x1x4x16xbf16> to memref<2x1x4x16xbf16>
// CHECK-DAG:     %[[W:.*]] = bufferization.to_buffer %arg1 read_only : tensor<2x1x4xf32> to memref<2x1x4xf32>
// CHECK-DAG:     %[[K:.*]] = bufferization.to_buffer %arg2 read_only : tensor<8x16x16xf8E4M3FN>
// CHECK-DAG:     %[[SC:.*]] = bufferization.to_buffer %arg3 read_only : tensor<8x16xf32>
// CHECK-DAG:     %[[BT:.*]] = bufferization.to_buffer %arg4 read_only : tensor<2x4xi32>
// CHECK-DAG:     %[[N:.*]] = bufferization.to_buffer %arg5 read_only : tensor<2x1xi32>
// CHECK:         %[[OUT:.*]] = memref.alloc() : memref<2x1x64xf32>
// CHECK:         %[[KEY:.*]] = memref.alloca(%{{.*}}) : memref<?xf32>
// CHECK:         %[[QS:.*]] = memref.alloca(%{{.*}}, %{{.*}}) : memref<?x?xf32>
// CHECK:         %[[NINF:.*]] = arith.constant 0xFF800000 : f32
// CHECK:         scf.for %[[B:.*]] = %{{.*}} to %{{.*}} step
// CHECK:           scf.for %[[R:.*]] = %{{.*}} to %{{.*}} step
// CHECK:             scf.for %[[QH:.*]] = %{{.*}} to %{{.*}} step
// CHECK:               scf.for %[[QD:.*]] = %{{.*}} to %{{.*}} step
// CHECK:                 memref.load %[[Q]][%[[B]], %[[R]], %[[QH]], %[[QD]]] : memref<2x1x4x16xbf16>
// CHECK:                 arith.extf %{{.*}} : bf16 to f32
// CHECK:                 memref.store %{{.*}}, %[[QS]][%[[QH]], %[[QD]]]
// CHECK:             %[[LEN:.*]] = memref.load %[[N]][%[[B]], %[[R]]] : memref<2x1xi32>
// CHECK:             %[[VIS:.*]] = arith.index_cast %[[LEN]] : i32 to index
// CHECK:             scf.for %[[I:.*]] = %{{.*}} to %{{.*}} step
// CHECK:               %[[IN:.*]] = arith.cmpi ult, %[[I]], %[[VIS]] : index
// CHECK:               %[[Z:.*]] = scf.if %[[IN]] -> (f32) {
// CHECK:                 %[[PI:.*]] = arith.divui %[[I]], %{{.*}} : index
// CHECK:                 memref.load %[[BT]][%[[B]], %[[PI]]] : memref<2x4xi32>
// CHECK:                 arith.remui %[[I]], %{{.*}} : index
// CHECK:                 memref.load %[[K]]
// CHECK:                 arith.bitcast %{{.*}} : f8E4M3FN to i8
// CHECK:                 memref.store %{{.*}}, %[[KEY]]
// CHECK:                 %[[S:.*]] = memref.load %[[SC]]
// CHECK:                 scf.for %[[H:.*]] = {{.*}} iter_args
// CHECK:                   scf.for {{.*}} iter_args
// CHECK:                     memref.load %[[QS]][%[[H]], %{{.*}}] : memref<?x?xf32>
// CHECK:                     memref.load %[[KEY]]
// CHECK:                   arith.mulf %{{.*}}, %[[S]] : f32
// CHECK:                   arith.maximumf
// CHECK:                   memref.load %[[W]][%[[B]], %[[R]], %[[H]]]
// CHECK:               } else {
// CHECK-NEXT:            scf.yield %[[NINF]] : f32
// CHECK:               memref.store %[[Z]], %[[OUT]][%[[B]], %[[R]], %[[I]]] : memref<2x1x64xf32>
// CHECK:         %[[T:.*]] = bufferization.to_tensor %[[OUT]]
// CHECK:         return %[[T]] : tensor<2x1x64xf32>
func.func @dense_indexer(%q: tensor<2x1x4x16xbf16>, %w: tensor<2x1x4xf32>,
                         %k: tensor<8x16x16xf8E4M3FN>, %sc: tensor<8x16xf32>,
                         %bt: tensor<2x4xi32>, %n: tensor<2x1xi32>) -> tensor<2x1x64xf32> {
  %z = spin.dense_indexer q(%q : tensor<2x1x4x16xbf16>) w(%w : tensor<2x1x4xf32>)
      keys(%k : tensor<8x16x16xf8E4M3FN>) scales(%sc : tensor<8x16xf32>)
      block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>) -> tensor<2x1x64xf32>
  return %z : tensor<2x1x64xf32>
}

// -----

// Dense indexer with fp8 e4m3 queries and fp8 e4m3 keys: each query element
// is decoded from its bits exactly as the keys are (sign, exponent rebased
// by 127 - 7, mantissa; subnormals m * 2^-9; 0x7F / 0xFF NaN), with no
// arith.extf, once per row into the f32 scratch, and multiplied by the
// decoded key in f32.
// CHECK-LABEL: func.func @dense_indexer_fp8_queries(
// CHECK-DAG:     %[[Q:.*]] = bufferization.to_buffer %arg0 read_only : tensor<2x1x4x16xf8E4M3FN> to memref<2x1x4x16xf8E4M3FN>
// CHECK-DAG:     %[[K:.*]] = bufferization.to_buffer %arg2 read_only : tensor<8x16x16xf8E4M3FN>
// CHECK:         %[[KEY:.*]] = memref.alloca(%{{.*}}) : memref<?xf32>
// CHECK:         %[[QS:.*]] = memref.alloca(%{{.*}}, %{{.*}}) : memref<?x?xf32>
// CHECK:         scf.for %[[B:.*]] = %{{.*}} to %{{.*}} step
// CHECK:           scf.for %[[R:.*]] = %{{.*}} to %{{.*}} step
// CHECK:             scf.for %[[QH:.*]] = %{{.*}} to %{{.*}} step
// CHECK:               scf.for %[[QD:.*]] = %{{.*}} to %{{.*}} step
// CHECK:                 %[[QV:.*]] = memref.load %[[Q]][%[[B]], %[[R]], %[[QH]], %[[QD]]] : memref<2x1x4x16xf8E4M3FN>
// CHECK-NEXT:            %[[QB:.*]] = arith.bitcast %[[QV]] : f8E4M3FN to i8
// CHECK-NEXT:            %[[QI:.*]] = arith.extui %[[QB]] : i8 to i32
// CHECK:                 arith.constant 120 : i32
// CHECK:                 %[[NORMAL:.*]] = arith.bitcast %{{.*}} : i32 to f32
// CHECK:                 arith.constant 0.001953125 : f32
// CHECK:                 %[[FINITE:.*]] = arith.select %{{.*}}, %{{.*}}, %[[NORMAL]] : f32
// CHECK:                 %[[NAN:.*]] = arith.constant 0x7FC00000 : f32
// CHECK:                 %[[QF:.*]] = arith.select %{{.*}}, %[[NAN]], %[[FINITE]] : f32
// CHECK:                 memref.store %[[QF]], %[[QS]][%[[QH]], %[[QD]]]
// CHECK:                 memref.load %[[K]]
// CHECK:                 arith.bitcast %{{.*}} : f8E4M3FN to i8
// CHECK:                 memref.store %{{.*}}, %[[KEY]]
// CHECK:                 scf.for %[[H:.*]] = {{.*}} iter_args
// CHECK:                   scf.for {{.*}} iter_args
// CHECK-NOT:                 arith.bitcast
// CHECK:                     %[[QL:.*]] = memref.load %[[QS]][%[[H]], %{{.*}}] : memref<?x?xf32>
// CHECK:                     %[[KV:.*]] = memref.load %[[KEY]]
// CHECK:                     arith.mulf %[[QL]], %[[KV]] : f32
// CHECK:                   arith.maximumf
// CHECK:         return
func.func @dense_indexer_fp8_queries(%q: tensor<2x1x4x16xf8E4M3FN>, %w: tensor<2x1x4xf32>,
                                     %k: tensor<8x16x16xf8E4M3FN>, %sc: tensor<8x16xf32>,
                                     %bt: tensor<2x4xi32>, %n: tensor<2x1xi32>) -> tensor<2x1x64xf32> {
  %z = spin.dense_indexer q(%q : tensor<2x1x4x16xf8E4M3FN>) w(%w : tensor<2x1x4xf32>)
      keys(%k : tensor<8x16x16xf8E4M3FN>) scales(%sc : tensor<8x16xf32>)
      block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>) -> tensor<2x1x64xf32>
  return %z : tensor<2x1x64xf32>
}

// -----

// Sparse indexer with fp8 e4m3 queries: the same decode of q once per row,
// then the slots under the block mask.
// CHECK-LABEL: func.func @sparse_indexer_fp8_queries(
// CHECK-DAG:     %[[Q:.*]] = bufferization.to_buffer %arg0 read_only : tensor<2x1x4x16xf8E4M3FN> to memref<2x1x4x16xf8E4M3FN>
// CHECK-DAG:     %[[M:.*]] = bufferization.to_buffer %arg6 read_only : tensor<2x4xi1> to memref<2x4xi1>
// CHECK:                 %[[QV:.*]] = memref.load %[[Q]]{{.*}} : memref<2x1x4x16xf8E4M3FN>
// CHECK-NEXT:            arith.bitcast %[[QV]] : f8E4M3FN to i8
// CHECK:               memref.load %[[M]]
// CHECK:         return
func.func @sparse_indexer_fp8_queries(%q: tensor<2x1x4x16xf8E4M3FN>, %w: tensor<2x1x4xf32>,
                                      %k: tensor<8x16x16xf8E4M3FN>, %sc: tensor<8x16xf32>,
                                      %bt: tensor<2x4xi32>, %n: tensor<2x1xi32>,
                                      %m: tensor<2x4xi1>) -> tensor<2x1x64xf32> {
  %z = spin.sparse_indexer q(%q : tensor<2x1x4x16xf8E4M3FN>) w(%w : tensor<2x1x4xf32>)
      keys(%k : tensor<8x16x16xf8E4M3FN>) scales(%sc : tensor<8x16xf32>)
      block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>)
      mask(%m : tensor<2x4xi1>) {block_size = 16 : i64} -> tensor<2x1x64xf32>
  return %z : tensor<2x1x64xf32>
}

// -----

// Sparse f32 indexer: a slot is scored only if it is visible and its block
// (i / block_size) is selected in the mask; f32 keys need no decoding and
// there is no scale.
// CHECK-LABEL: func.func @sparse_indexer(
// CHECK-DAG:     %[[BT:.*]] = bufferization.to_buffer %arg3 read_only : tensor<2x4xi32>
// CHECK-DAG:     %[[N:.*]] = bufferization.to_buffer %arg4 read_only : tensor<2x1xi32>
// CHECK-DAG:     %[[M:.*]] = bufferization.to_buffer %arg5 read_only : tensor<2x4xi1> to memref<2x4xi1>
// CHECK-DAG:     %[[BS:.*]] = arith.constant 16 : index
// CHECK:         %[[OUT:.*]] = memref.alloc() : memref<2x1x64xf32>
// CHECK:         scf.for %[[B:.*]] = %{{.*}} to %{{.*}} step
// CHECK:           scf.for %[[R:.*]] = %{{.*}} to %{{.*}} step
// CHECK:             memref.load %[[N]][%[[B]], %[[R]]]
// CHECK:             scf.for %[[I:.*]] = %{{.*}} to %{{.*}} step
// CHECK:               %[[IN:.*]] = arith.cmpi ult, %[[I]], %{{.*}} : index
// CHECK:               %[[J:.*]] = arith.divui %[[I]], %[[BS]] : index
// CHECK:               %[[SEL:.*]] = memref.load %[[M]][%[[B]], %[[J]]] : memref<2x4xi1>
// CHECK:               %[[SCORED:.*]] = arith.andi %[[IN]], %[[SEL]] : i1
// CHECK:               %[[Z:.*]] = scf.if %[[SCORED]] -> (f32) {
// CHECK:                 memref.load %[[BT]][%[[B]], %{{.*}}] : memref<2x4xi32>
// CHECK-NOT:             arith.bitcast
// CHECK:                 arith.maximumf
// CHECK:               memref.store %[[Z]], %[[OUT]][%[[B]], %[[R]], %[[I]]]
// CHECK:         return
func.func @sparse_indexer(%q: tensor<2x1x4x16xf32>, %w: tensor<2x1x4xf32>,
                          %k: tensor<8x16x16xf32>, %bt: tensor<2x4xi32>,
                          %n: tensor<2x1xi32>, %m: tensor<2x4xi1>) -> tensor<2x1x64xf32> {
  %z = spin.sparse_indexer q(%q : tensor<2x1x4x16xf32>) w(%w : tensor<2x1x4xf32>)
      keys(%k : tensor<8x16x16xf32>) block_table(%bt : tensor<2x4xi32>)
      lengths(%n : tensor<2x1xi32>) mask(%m : tensor<2x4xi1>) {block_size = 16 : i64}
      -> tensor<2x1x64xf32>
  return %z : tensor<2x1x64xf32>
}

// -----

// Top-K: one pass per row over min(length, slots) keeping a sorted list of
// k = 8 keys and ids (insertion by ogt, so ties keep the lower slot); NaN is
// never eligible; unfilled entries are -1.
// CHECK-LABEL: func.func @topk(
// CHECK-DAG:     %[[Z:.*]] = bufferization.to_buffer %arg0 read_only : tensor<2x1x64xf32>
// CHECK-DAG:     %[[N:.*]] = bufferization.to_buffer %arg1 read_only : tensor<2x1xi32>
// CHECK:         %[[OUT:.*]] = memref.alloc() : memref<2x1x8xi32>
// CHECK:         %[[KEYS:.*]] = memref.alloc() : memref<8xf32>
// CHECK:         %[[IDS:.*]] = memref.alloc() : memref<8xi32>
// CHECK:         scf.for %[[B:.*]] = %{{.*}} to %{{.*}} step
// CHECK:           scf.for %[[R:.*]] = %{{.*}} to %{{.*}} step
// CHECK:             %[[VIS:.*]] = arith.index_cast
// CHECK:             %[[END:.*]] = arith.minui %[[VIS]], %{{.*}} : index
// CHECK:             %[[COUNT:.*]] = scf.for %[[I:.*]] = %{{.*}} to %[[END]] step %{{.*}} iter_args(%{{.*}}) -> (index) {
// CHECK:               %[[V:.*]] = memref.load %[[Z]][%[[B]], %[[R]], %[[I]]] : memref<2x1x64xf32>
// CHECK:               %[[OK:.*]] = arith.cmpf ord, %[[V]], %[[V]] : f32
// CHECK:               scf.if %[[OK]] -> (index) {
// CHECK:                 arith.cmpf ogt, %[[V]], %{{.*}} : f32
// CHECK:                 scf.while
// CHECK:                 memref.store %[[V]], %[[KEYS]]
// CHECK:                 memref.store %{{.*}}, %[[IDS]]
// CHECK:             scf.for %[[T:.*]] = %{{.*}} to %{{.*}} step
// CHECK:               %[[KEPT:.*]] = arith.cmpi ult, %[[T]], %[[COUNT]] : index
// CHECK:               %[[ID:.*]] = scf.if %[[KEPT]] -> (i32) {
// CHECK:                 memref.load %[[IDS]][%[[T]]]
// CHECK:               } else {
// CHECK:                 %[[PAD:.*]] = arith.constant -1 : i32
// CHECK-NEXT:            scf.yield %[[PAD]] : i32
// CHECK:               memref.store %[[ID]], %[[OUT]][%[[B]], %[[R]], %[[T]]] : memref<2x1x8xi32>
// CHECK:         return
func.func @topk(%z: tensor<2x1x64xf32>, %n: tensor<2x1xi32>) -> tensor<2x1x8xi32> {
  %t = spin.topk %z lengths(%n : tensor<2x1xi32>) {k = 8 : i64}
      : tensor<2x1x64xf32> -> tensor<2x1x8xi32>
  return %t : tensor<2x1x8xi32>
}

// -----

// Masked top-K: a slot is eligible only if it is not NaN and its block is
// selected.
// CHECK-LABEL: func.func @topk_masked(
// CHECK-DAG:     %[[Z:.*]] = bufferization.to_buffer %arg0 read_only
// CHECK-DAG:     %[[M:.*]] = bufferization.to_buffer %arg2 read_only : tensor<2x4xi1> to memref<2x4xi1>
// CHECK-DAG:     %[[BS:.*]] = arith.constant 16 : index
// CHECK:         scf.for %[[B:.*]] = %{{.*}} to %{{.*}} step
// CHECK:           scf.for %[[R:.*]] = %{{.*}} to %{{.*}} step
// CHECK:             scf.for %[[I:.*]] = {{.*}} iter_args
// CHECK:               %[[V:.*]] = memref.load %[[Z]][%[[B]], %[[R]], %[[I]]]
// CHECK:               %[[OK:.*]] = arith.cmpf ord, %[[V]], %[[V]] : f32
// CHECK:               %[[J:.*]] = arith.divui %[[I]], %[[BS]] : index
// CHECK:               %[[SEL:.*]] = memref.load %[[M]][%[[B]], %[[J]]] : memref<2x4xi1>
// CHECK:               %[[ELIG:.*]] = arith.andi %[[OK]], %[[SEL]] : i1
// CHECK:               scf.if %[[ELIG]] -> (index) {
// CHECK:         return
func.func @topk_masked(%z: tensor<2x1x64xf32>, %n: tensor<2x1xi32>, %m: tensor<2x4xi1>) -> tensor<2x1x8xi32> {
  %t = spin.topk %z lengths(%n : tensor<2x1xi32>) mask(%m : tensor<2x4xi1>)
      {k = 8 : i64, block_size = 16 : i64} : tensor<2x1x64xf32> -> tensor<2x1x8xi32>
  return %t : tensor<2x1x8xi32>
}

// -----

// Block sparsity: 1 - selected / visible blocks in f64, 0 for a row with no
// visible block, truncated to f32.
// CHECK-LABEL: func.func @block_sparsity(
// CHECK-DAG:     %[[M:.*]] = bufferization.to_buffer %arg0 read_only : tensor<2x4xi1>
// CHECK-DAG:     %[[N:.*]] = bufferization.to_buffer %arg1 read_only : tensor<2x1xi32>
// CHECK-DAG:     %[[BS:.*]] = arith.constant 16 : index
// CHECK:         %[[OUT:.*]] = memref.alloc() : memref<2x1xf32>
// CHECK:         scf.for %[[B:.*]] = %{{.*}} to %{{.*}} step
// CHECK:           scf.for %[[R:.*]] = %{{.*}} to %{{.*}} step
// CHECK:             %[[LEN:.*]] = arith.index_cast
// CHECK:             %[[CEIL:.*]] = arith.ceildivui %[[LEN]], %[[BS]] : index
// CHECK:             %[[BLOCKS:.*]] = arith.minui %[[CEIL]], %{{.*}} : index
// CHECK:             %[[SELECTED:.*]] = scf.for %[[J:.*]] = %{{.*}} to %[[BLOCKS]] step %{{.*}} iter_args(%{{.*}}) -> (index) {
// CHECK:               memref.load %[[M]][%[[B]], %[[J]]] : memref<2x4xi1>
// CHECK:             %[[ANY:.*]] = arith.cmpi ugt, %[[BLOCKS]], %{{.*}} : index
// CHECK:             %[[FRAC:.*]] = arith.divf %{{.*}}, %{{.*}} : f64
// CHECK:             %[[ONE:.*]] = arith.constant 1.000000e+00 : f64
// CHECK:             %[[REST:.*]] = arith.subf %[[ONE]], %[[FRAC]] : f64
// CHECK:             %[[RHO:.*]] = arith.select %[[ANY]], %[[REST]], %{{.*}} : f64
// CHECK:             %[[RHO32:.*]] = arith.truncf %[[RHO]] : f64 to f32
// CHECK:             memref.store %[[RHO32]], %[[OUT]][%[[B]], %[[R]]] : memref<2x1xf32>
// CHECK:         return
func.func @block_sparsity(%m: tensor<2x4xi1>, %n: tensor<2x1xi32>) -> tensor<2x1xf32> {
  %r = spin.block_sparsity %m lengths(%n : tensor<2x1xi32>) {block_size = 16 : i64}
      : tensor<2x4xi1> -> tensor<2x1xf32>
  return %r : tensor<2x1xf32>
}
