// RUN: rm -rf %t && spin-compile %s --target=sm_90a -o %t 2>&1 | FileCheck %s --check-prefix=OK
// RUN: FileCheck %s --check-prefix=MANIFEST < %t/manifest.json
// RUN: not spin-compile %s --target=sm_89 -o %t.a 2>&1 | FileCheck %s --check-prefix=CHIP
// RUN: not spin-compile %s --target=sm_103a --ptx-version=8.6 -o %t.b 2>&1 | FileCheck %s --check-prefix=PTX
// RUN: not spin-compile %s --ptx-version=eight -o %t.c 2>&1 | FileCheck %s --check-prefix=PTXTEXT
// RUN: not spin-compile %s --dense --sparsify="sparsity=0.5" -o %t.d 2>&1 | FileCheck %s --check-prefix=BOTH
// RUN: not spin-compile %s --sm-count=0 -o %t.h 2>&1 | FileCheck %s --check-prefix=SMS
// RUN: not spin-compile %s --sparsify="sparsity=2" -o %t.e 2>&1 | FileCheck %s --check-prefix=RANGE
// RUN: not spin-compile %s --function=missing -o %t.f 2>&1 | FileCheck %s --check-prefix=FUNC
// RUN: not spin-compile %t.does-not-exist.mlir -o %t.g 2>&1 | FileCheck %s --check-prefix=FILE
// RUN: test ! -e %t.a/manifest.json && test ! -e %t.b/manifest.json

// spin-compile writes a manifest and PTX for a dense graph; every bad
// request is one clear error line and a non-zero exit, and writes nothing.

// OK: spin-compile: wrote {{.*}}manifest.json and 1 PTX module(s)
// MANIFEST: "format": "spin-gpu-artifact"
// MANIFEST: "function": "dense"
// MANIFEST: "ptx_version": 86
// MANIFEST: "programmatic_launch": 1
// CHIP: spin-compile: error: unknown chip 'sm_89' (known: sm_90a, sm_100a, sm_103a)
// PTX: spin-compile: error: sm_103a needs PTX version 8.8 or later (got 8.6)
// PTXTEXT: spin-compile: error: --ptx-version must look like 88 or 8.8 (got 'eight')
// BOTH: spin-compile: error: --dense and --sparsify exclude each other
// SMS: --sm-count must be positive (got 0)
// RANGE: spin-compile: error: spin-sparsify-pipeline failed:
// RANGE-NEXT: option 'sparsity' must be in [0, 1], got 2
// FUNC: spin-compile: error: the graph has no function @missing
// FILE: spin-compile: error: cannot read {{.*}}does-not-exist.mlir

func.func @dense(%q: tensor<2x1x16x64xbf16>, %w: tensor<2x1x16xf32>,
                 %keys: tensor<?x16x64xbf16>, %table: tensor<2x8xi32>,
                 %lengths: tensor<2x1xi32>) -> tensor<2x1x8xi32> {
  %z = spin.dense_indexer q(%q : tensor<2x1x16x64xbf16>)
      w(%w : tensor<2x1x16xf32>) keys(%keys : tensor<?x16x64xbf16>)
      block_table(%table : tensor<2x8xi32>)
      lengths(%lengths : tensor<2x1xi32>) -> tensor<2x1x128xf32>
  %t = spin.topk %z lengths(%lengths : tensor<2x1xi32>) {k = 8 : i64}
      : tensor<2x1x128xf32> -> tensor<2x1x8xi32>
  return %t : tensor<2x1x8xi32>
}
