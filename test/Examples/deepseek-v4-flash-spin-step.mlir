// The shipped hand-written SPIN step: every stage of Algorithm 1 verifies
// and the state threads through predict -> select -> ema_update.
// RUN: spin-opt %spin_src_root/examples/deepseek-v4-flash-spin-step.mlir | FileCheck %s
// RUN: spin-opt %spin_src_root/examples/deepseek-v4-flash-spin-step.mlir --mlir-print-op-generic | spin-opt | FileCheck %s

// CHECK-LABEL: func.func @dsv4_flash_spin_step
// CHECK:         %[[S:.*]] = spin.layer_state %{{.*}} : tensor<16xi64> -> !spin.state<layer = 0>
// CHECK:         %[[ZH:.*]] = spin.predict %[[S]] positions
// CHECK:         %[[BS:.*]] = spin.pool %[[ZH]] lengths
// CHECK-SAME:      pooling = #spin.pooling<max>
// CHECK:         %[[M:.*]] = spin.select_blocks %[[S]] scores(%[[BS]] : tensor<16x1x2048xf32>)
// CHECK-SAME:      explore = 5.000000e-02 : f64, sparsity = 4.000000e-01 : f64, topk = 512 : i64
// CHECK:         %[[Z:.*]] = spin.sparse_indexer {{.*}} mask(%[[M]] : tensor<16x2048xi1>)
// CHECK:         %[[T:.*]] = spin.topk %[[Z]] {{.*}} mask(%[[M]] : tensor<16x2048xi1>)
// CHECK:         spin.ema_update %[[S]] scores(%[[Z]] : tensor<16x1x131072xf32>)
// CHECK-SAME:      decay = 5.000000e-01
// CHECK:         %[[R:.*]] = spin.block_sparsity %[[M]]
// CHECK:         return %[[T]], %[[R]]
