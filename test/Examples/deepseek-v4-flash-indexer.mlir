// The shipped DeepSeek-V4-Flash-like example parses, verifies, and survives
// a round trip through the generic form.
// RUN: spin-opt %spin_src_root/examples/deepseek-v4-flash-indexer.mlir | FileCheck %s
// RUN: spin-opt %spin_src_root/examples/deepseek-v4-flash-indexer.mlir --mlir-print-op-generic | spin-opt | FileCheck %s

// CHECK-LABEL: func.func @dsv4_flash_indexer_layer
// CHECK:         %[[Z:.*]] = spin.dense_indexer q(%{{.*}} : tensor<16x1x64x128xbf16>) w(%{{.*}} : tensor<16x1x64xf32>) keys(%{{.*}} : tensor<?x64x128xf8E4M3FN>) scales(%{{.*}} : tensor<?x64xf32>) block_table(%{{.*}} : tensor<16x2048xi32>) lengths(%{{.*}} : tensor<16x1xi32>) -> tensor<16x1x131072xf32>
// CHECK:         %[[T:.*]] = spin.topk %[[Z]] lengths(%{{.*}}) {k = 512 : i64} : tensor<16x1x131072xf32> -> tensor<16x1x512xi32>
// CHECK:         return %[[T]]
