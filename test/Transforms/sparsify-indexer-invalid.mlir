// Invalid options and graphs the sparsifier refuses, each with a diagnostic.
// RUN: not spin-opt %s --split-input-file --spin-sparsify-indexer=sparsity=1.5 2>&1 | FileCheck %s --check-prefix=SPARSITY
// RUN: not spin-opt %s --split-input-file --spin-sparsify-indexer=sparsity=-0.1 2>&1 | FileCheck %s --check-prefix=SPARSITY-NEG
// RUN: not spin-opt %s --split-input-file --spin-sparsify-indexer=ema-decay=1.01 2>&1 | FileCheck %s --check-prefix=DECAY
// RUN: not spin-opt %s --split-input-file --spin-sparsify-indexer=explore=2 2>&1 | FileCheck %s --check-prefix=EXPLORE
// RUN: not spin-opt %s --split-input-file --spin-sparsify-indexer=block-size=0 2>&1 | FileCheck %s --check-prefix=BLOCK0
// RUN: not spin-opt %s --split-input-file --spin-sparsify-indexer=block-size=48 2>&1 | FileCheck %s --check-prefix=BLOCK48
// RUN: not spin-opt %s --split-input-file --spin-sparsify-indexer="reduction=A0 explore=0.05" 2>&1 | FileCheck %s --check-prefix=A0EXPLORE
// RUN: not spin-opt %s --split-input-file --spin-sparsify-indexer="reduction=A0 explore-policy=block-age" 2>&1 | FileCheck %s --check-prefix=A0AGE
// RUN: not spin-opt %s --split-input-file --spin-sparsify-indexer=explore-policy=oldest 2>&1 | FileCheck %s --check-prefix=POLICY
// RUN: not spin-opt %s --split-input-file --spin-sparsify-indexer=pooling=median 2>&1 | FileCheck %s --check-prefix=POOLING
// RUN: not spin-opt %s --split-input-file --spin-sparsify-indexer=reduction=A3 2>&1 | FileCheck %s --check-prefix=REDUCTION
// RUN: not spin-opt %s --split-input-file --spin-sparsify-indexer=mtp-mask=all 2>&1 | FileCheck %s --check-prefix=MTPMASK
// RUN: not spin-opt %s --split-input-file --spin-sparsify-indexer=mtp-update=all 2>&1 | FileCheck %s --check-prefix=MTPUPDATE
// RUN: not spin-opt %s --split-input-file --spin-sparsify-indexer 2>&1 | FileCheck %s --check-prefix=GRAPH

// SPARSITY: error: spin-sparsify-indexer: option 'sparsity' must be in [0, 1], got 1.5
// SPARSITY-NEG: error: spin-sparsify-indexer: option 'sparsity' must be in [0, 1], got -0.1
// DECAY: error: spin-sparsify-indexer: option 'ema-decay' must be in [0, 1], got 1.01
// EXPLORE: error: spin-sparsify-indexer: option 'explore' must be in [0, 1], got 2
// BLOCK0: error: spin-sparsify-indexer: option 'block-size' must be positive, got 0
// BLOCK48: error: block-size 48 does not divide the page size 64 of this indexer's key cache
// A0EXPLORE: error: spin-sparsify-indexer: reduction A0 has no block budget to explore with; 'explore' must be 0, got 0.05
// A0AGE: error: spin-sparsify-indexer: reduction A0 has no block budget to explore with; 'explore-policy' must be random
// POLICY: Cannot find option named 'oldest'!
// POOLING: Cannot find option named 'median'!
// REDUCTION: Cannot find option named 'A3'!
// MTPMASK: Cannot find option named 'all'!
// MTPUPDATE: Cannot find option named 'all'!

func.func @layer(%q: tensor<2x1x4x16xbf16>, %w: tensor<2x1x4xf32>,
                 %k: tensor<?x64x16xbf16>, %bt: tensor<2x4xi32>,
                 %n: tensor<2x1xi32>) -> tensor<2x1x128xi32> {
  %z = spin.dense_indexer q(%q : tensor<2x1x4x16xbf16>) w(%w : tensor<2x1x4xf32>) keys(%k : tensor<?x64x16xbf16>) block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>) -> tensor<2x1x256xf32>
  %t = spin.topk %z lengths(%n : tensor<2x1xi32>) {k = 128 : i64} : tensor<2x1x256xf32> -> tensor<2x1x128xi32>
  return %t : tensor<2x1x128xi32>
}

// -----

// GRAPH: error: cannot add the SPIN input 'spin.positions' ('tensor<2x1xi32>') to @callee: the function has callers; give it an argument marked {spin.positions}
func.func @callee(%q: tensor<2x1x4x16xbf16>, %w: tensor<2x1x4xf32>,
                  %k: tensor<?x64x16xbf16>, %bt: tensor<2x4xi32>,
                  %n: tensor<2x1xi32>) -> tensor<2x1x128xi32> {
  %z = spin.dense_indexer q(%q : tensor<2x1x4x16xbf16>) w(%w : tensor<2x1x4xf32>) keys(%k : tensor<?x64x16xbf16>) block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>) -> tensor<2x1x256xf32>
  %t = spin.topk %z lengths(%n : tensor<2x1xi32>) {k = 128 : i64} : tensor<2x1x256xf32> -> tensor<2x1x128xi32>
  return %t : tensor<2x1x128xi32>
}
func.func @caller(%q: tensor<2x1x4x16xbf16>, %w: tensor<2x1x4xf32>,
                  %k: tensor<?x64x16xbf16>, %bt: tensor<2x4xi32>,
                  %n: tensor<2x1xi32>) -> tensor<2x1x128xi32> {
  %t = func.call @callee(%q, %w, %k, %bt, %n) : (tensor<2x1x4x16xbf16>, tensor<2x1x4xf32>, tensor<?x64x16xbf16>, tensor<2x4xi32>, tensor<2x1xi32>) -> tensor<2x1x128xi32>
  return %t : tensor<2x1x128xi32>
}

// -----

// GRAPH: error: layer id 3 is already used by another indexer
func.func @duplicate(%q: tensor<2x1x4x16xbf16>, %w: tensor<2x1x4xf32>,
                     %k: tensor<?x64x16xbf16>, %bt: tensor<2x4xi32>,
                     %n: tensor<2x1xi32>) -> (tensor<2x1x128xi32>, tensor<2x1x128xi32>) {
  %z0 = spin.dense_indexer q(%q : tensor<2x1x4x16xbf16>) w(%w : tensor<2x1x4xf32>) keys(%k : tensor<?x64x16xbf16>) block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>) {spin.layer = 3 : i64} -> tensor<2x1x256xf32>
  %t0 = spin.topk %z0 lengths(%n : tensor<2x1xi32>) {k = 128 : i64} : tensor<2x1x256xf32> -> tensor<2x1x128xi32>
  %z1 = spin.dense_indexer q(%q : tensor<2x1x4x16xbf16>) w(%w : tensor<2x1x4xf32>) keys(%k : tensor<?x64x16xbf16>) block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>) {spin.layer = 3 : i64} -> tensor<2x1x256xf32>
  %t1 = spin.topk %z1 lengths(%n : tensor<2x1xi32>) {k = 128 : i64} : tensor<2x1x256xf32> -> tensor<2x1x128xi32>
  return %t0, %t1 : tensor<2x1x128xi32>, tensor<2x1x128xi32>
}

// -----

// The largest layer id (the runtime counts layers in an int32) is pinned,
// so the unpinned indexer gets none.
// GRAPH: error: no layer id is left for this indexer: layer 2147483646, the largest, is in use
func.func @no_layer_left(%q: tensor<2x1x4x16xbf16>, %w: tensor<2x1x4xf32>,
                         %k: tensor<?x64x16xbf16>, %bt: tensor<2x4xi32>,
                         %n: tensor<2x1xi32>) -> (tensor<2x1x128xi32>, tensor<2x1x128xi32>) {
  %z0 = spin.dense_indexer q(%q : tensor<2x1x4x16xbf16>) w(%w : tensor<2x1x4xf32>) keys(%k : tensor<?x64x16xbf16>) block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>) {spin.layer = 2147483646 : i64} -> tensor<2x1x256xf32>
  %t0 = spin.topk %z0 lengths(%n : tensor<2x1xi32>) {k = 128 : i64} : tensor<2x1x256xf32> -> tensor<2x1x128xi32>
  %z1 = spin.dense_indexer q(%q : tensor<2x1x4x16xbf16>) w(%w : tensor<2x1x4xf32>) keys(%k : tensor<?x64x16xbf16>) block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>) -> tensor<2x1x256xf32>
  %t1 = spin.topk %z1 lengths(%n : tensor<2x1xi32>) {k = 128 : i64} : tensor<2x1x256xf32> -> tensor<2x1x128xi32>
  return %t0, %t1 : tensor<2x1x128xi32>, tensor<2x1x128xi32>
}
