// The shipped GLM-5-like example (bf16 keys, no scales, ragged batch).
// RUN: spin-opt %spin_src_root/examples/glm5-indexer.mlir | FileCheck %s
// RUN: spin-opt %spin_src_root/examples/glm5-indexer.mlir --mlir-print-op-generic | spin-opt | FileCheck %s

// CHECK-LABEL: func.func @glm5_indexer_layer
// CHECK:         %[[Z:.*]] = spin.dense_indexer q(%{{.*}} : tensor<?x1x32x128xbf16>) w(%{{.*}} : tensor<?x1x32xf32>) keys(%{{.*}} : tensor<?x64x128xbf16>) block_table(%{{.*}} : tensor<?x4096xi32>) lengths(%{{.*}} : tensor<?x1xi32>) -> tensor<?x1x262144xf32>
// CHECK-NOT:     scales
// CHECK:         %[[T:.*]] = spin.topk %[[Z]] lengths(%{{.*}}) {k = 2048 : i64} : tensor<?x1x262144xf32> -> tensor<?x1x2048xi32>
// CHECK:         return %[[T]]
