// The shipped three-layer MTP example (R = 4 rows per request).
// RUN: spin-opt %spin_src_root/examples/deepseek-v4-flash-multilayer.mlir | FileCheck %s
// RUN: spin-opt %spin_src_root/examples/deepseek-v4-flash-multilayer.mlir --mlir-print-op-generic | spin-opt | FileCheck %s

// CHECK-LABEL: func.func @three_indexer_layers
// CHECK:         %[[Z0:.*]] = spin.dense_indexer {{.*}} -> tensor<8x4x65536xf32>
// CHECK:         %[[T0:.*]] = spin.topk %[[Z0]]
// CHECK-SAME:      {k = 512 : i64} : tensor<8x4x65536xf32> -> tensor<8x4x512xi32>
// CHECK:         %[[Z1:.*]] = spin.dense_indexer
// CHECK:         %[[T1:.*]] = spin.topk %[[Z1]]
// CHECK:         %[[Z2:.*]] = spin.dense_indexer
// CHECK:         %[[T2:.*]] = spin.topk %[[Z2]]
// CHECK:         return %[[T0]], %[[T1]], %[[T2]]
