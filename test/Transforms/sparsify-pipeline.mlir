// spin-sparsify-pipeline end to end on the shipped examples: linalg form in,
// fused and asynchronously scheduled SPIN out; options reach the passes.
//
// RUN: spin-opt %spin_src_root/examples/upstream-linalg-indexer.mlir --spin-sparsify-pipeline="sparsity=0.5 explore=0.25 seed=9" | FileCheck %s --check-prefix=UPSTREAM
// RUN: spin-opt %spin_src_root/examples/upstream-linalg-indexer.mlir --spin-sparsify-pipeline="fuse=false schedule-async=false" | FileCheck %s --check-prefix=UNFUSED
// RUN: spin-opt %spin_src_root/examples/deepseek-v4-flash-multilayer.mlir --spin-sparsify-pipeline="reduction=A2 mtp-mask=row0 mtp-update=row0" | FileCheck %s --check-prefix=MTP
// RUN: spin-opt %spin_src_root/examples/deepseek-v4-flash-indexer.mlir --spin-sparsify-pipeline | spin-opt --spin-sparsify-pipeline | FileCheck %s --check-prefix=TWICE
// RUN: not spin-opt %spin_src_root/examples/upstream-linalg-indexer.mlir --spin-sparsify-pipeline="sparsity=2" 2>&1 | FileCheck %s --check-prefix=BAD
// RUN: not spin-opt %spin_src_root/examples/upstream-linalg-indexer.mlir --spin-sparsify-pipeline="pooling=median" 2>&1 | FileCheck %s --check-prefix=BADENUM

// UPSTREAM-LABEL: func.func @upstream_indexer
// UPSTREAM-SAME:    {spin.positions}
// UPSTREAM-SAME:    {spin.request_ids}
// UPSTREAM-NOT:     arith.maximumf
// UPSTREAM:         %[[S:.*]] = spin.layer_state
// UPSTREAM:         %{{.*}}, %[[MV:.*]] = async.execute -> !async.value<tensor<2x4xi1>> {
// UPSTREAM-NEXT:      %[[M0:.*]] = spin.fused_select %[[S]] {{.*}} {block_size = 64 : i64, explore = 2.500000e-01 : f64, pooling = #spin.pooling<max>, seed = 9 : i64, sparsity = 5.000000e-01 : f64, topk = 64 : i64}
// UPSTREAM-NEXT:      async.yield %[[M0]]
// UPSTREAM:         %[[M:.*]] = async.await %[[MV]]
// UPSTREAM:         %[[T:.*]], %[[Z:.*]] = spin.fused_score {{.*}} mask(%[[M]] : tensor<2x4xi1>) {block_size = 64 : i64, k = 64 : i64} -> tensor<2x1x64xi32>, tensor<2x1x256xf32>
// UPSTREAM:         async.execute -> !async.value<!spin.state<layer = 0>> {
// UPSTREAM-NEXT:      spin.ema_update %[[S]] scores(%[[Z]]
// UPSTREAM:         %[[T64:.*]] = arith.extsi %[[T]]
// UPSTREAM:         return %[[T64]]
// UPSTREAM-NOT:     spin.dense_indexer
// UPSTREAM-NOT:     call @topk

// UNFUSED-LABEL: func.func @upstream_indexer
// UNFUSED-NOT:     async.execute
// UNFUSED:         spin.predict
// UNFUSED:         spin.pool
// UNFUSED:         spin.select_blocks
// UNFUSED:         spin.sparse_indexer
// UNFUSED:         spin.topk
// UNFUSED:         spin.ema_update
// UNFUSED-NOT:     spin.fused

// Three MTP layers: every layer's commit + prediction moves to the start of
// the function, ahead of the first layer's scoring.
// MTP-LABEL: func.func @three_indexer_layers
// MTP-SAME:    {spin.accepted}
// MTP:         spin.layer_state {{.*}} -> !spin.state<layer = 0, level = block>
// MTP:         async.execute
// MTP-NEXT:      spin.commit {{.*}} mtp_update = #spin.mtp_update<row0>
// MTP-NEXT:      spin.fused_select {{.*}} mtp_mask = #spin.mtp_mask<row0>, reduction = #spin.reduction<a2>
// MTP:         spin.layer_state {{.*}} -> !spin.state<layer = 1, level = block>
// MTP:         spin.fused_select
// MTP:         spin.layer_state {{.*}} -> !spin.state<layer = 2, level = block>
// MTP:         spin.fused_select
// MTP:         spin.fused_score
// MTP:         spin.observe {{.*}} pooling = #spin.pooling<max>
// MTP:         spin.fused_score
// MTP:         spin.observe
// MTP:         spin.fused_score
// MTP:         spin.observe
// MTP-NOT:     spin.dense_indexer

// TWICE-LABEL: func.func @dsv4_flash_indexer_layer
// TWICE-COUNT-1: spin.layer_state
// TWICE-NOT:     spin.layer_state
// TWICE-NOT:     spin.dense_indexer

// BAD: error: spin-sparsify-indexer: option 'sparsity' must be in [0, 1], got 2
// BADENUM: Cannot find option named 'median'!
