// spin-sparsify-pipeline takes exactly the options generated from
// Pipelines.td: those Passes.td declares for spin-raise-indexer (but
// report-failures) and spin-sparsify-indexer, plus fuse and schedule-async;
// each reaches its pass.
//
// RUN: spin-opt %spin_src_root/examples/upstream-linalg-indexer.mlir --spin-sparsify-pipeline="topk-callee=topk page-size=128 sparsity=0.5 block-size=32 ema-decay=0.25 explore=0.5 seed=7 explore-policy=block-age pooling=mean reduction=A1 mtp-mask=row0 mtp-update=row0 reset-input=true report-sparsity=true fuse=false schedule-async=false" | FileCheck %s
// RUN: spin-opt %spin_src_root/examples/upstream-linalg-indexer.mlir --spin-sparsify-pipeline="topk-callee=other_topk" | FileCheck %s --check-prefix=CALLEE
// RUN: not spin-opt %spin_src_root/examples/upstream-linalg-indexer.mlir --spin-sparsify-pipeline="report-failures=true" 2>&1 | FileCheck %s --check-prefix=UNFORWARDED
// RUN: not spin-opt %spin_src_root/examples/upstream-linalg-indexer.mlir --spin-sparsify-pipeline="explore-policy=oldest" 2>&1 | FileCheck %s --check-prefix=BADENUM
// RUN: not spin-opt %spin_src_root/examples/upstream-linalg-indexer.mlir --spin-sparsify-pipeline="block-size=wide" 2>&1 | FileCheck %s --check-prefix=BADINT
// RUN: spin-opt --help | FileCheck %s --check-prefix=HELP

// CHECK-LABEL: func.func @upstream_indexer
// CHECK-SAME:    {spin.reset}) -> (tensor<2x1x64xi64>, tensor<2x1xf32> {spin.sparsity})
// CHECK:         spin.layer_state {{.*}} -> !spin.state<layer = 0, last_observed = true>
// CHECK:         tensor.expand_shape {{.*}} into tensor<2x2x128x16xbf16>
// CHECK:         spin.pool {{.*}} {block_size = 32 : i64, pooling = #spin.pooling<mean>}
// CHECK:         spin.select_blocks {{.*}} {block_size = 32 : i64, explore = 5.000000e-01 : f64, explore_policy = #spin.explore_policy<block_age>, mtp_mask = #spin.mtp_mask<row0>, seed = 7 : i64, sparsity = 5.000000e-01 : f64, topk = 64 : i64}
// CHECK:         spin.ema_update {{.*}} {block_size = 32 : i64, decay = 2.500000e-01 : f64}
// CHECK-NOT:     spin.fused_
// CHECK-NOT:     async.execute

// The head sum is raised, but the top-K call is not the named one: the
// indexer stays dense.
// CALLEE-LABEL: func.func @upstream_indexer
// CALLEE-NOT:     spin.layer_state
// CALLEE:         spin.dense_indexer
// CALLEE-NEXT:    call @topk

// UNFORWARDED: no such option report-failures

// BADENUM: for the --explore-policy option: Cannot find option named 'oldest'!

// BADINT: for the --block-size option: 'wide' value invalid for long argument!

// The descriptions and value names are those of Passes.td.
// HELP-LABEL: --spin-sparsify-pipeline
// HELP-NEXT:    --block-size=<long> - SPIN block size in slots; must divide the key cache's page size
// HELP:         --explore-policy=<value>
// HELP-NEXT:      =random
// HELP-NEXT:      =staleness-score
// HELP-NEXT:      =block-age
// HELP:         --fuse - Run spin-fuse
// HELP:         --reduction=<value>
// HELP-NOT:     --report-failures
// HELP:         --report-sparsity
// HELP:         --seed=<ulong>
// HELP:         --topk-callee=<string>
