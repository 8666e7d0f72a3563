// RUN: rm -rf %t && spin-compile %s --function=dense --target=sm_90a -o %t 2>&1 | FileCheck %s --check-prefix=OK
// RUN: FileCheck %s --check-prefix=MANIFEST < %t/manifest.json
// RUN: grep -c "^.visible .entry\|^.entry" %t/sm_90a.ptx | FileCheck %s --check-prefix=ENTRIES
// RUN: not spin-compile %s --function=dynamic -o %t.b 2>&1 | FileCheck %s --check-prefix=DYNAMIC

// A graph file with several functions: spin-compile --function=NAME
// compiles that function alone. The other one, which the GPU path cannot
// take (dynamic query shape), neither fails the compile nor adds kernels.

// OK: spin-compile: wrote {{.*}}manifest.json and 1 PTX module(s)
// MANIFEST: "function": "dense"
// ENTRIES: 2
// DYNAMIC: needs static query, block-table, page and head-dim sizes on the GPU path

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

func.func @dynamic(%q: tensor<?x1x16x64xbf16>, %w: tensor<?x1x16xf32>,
                   %keys: tensor<?x16x64xbf16>, %table: tensor<?x8xi32>,
                   %lengths: tensor<?x1xi32>) -> tensor<?x1x8xi32> {
  %z = spin.dense_indexer q(%q : tensor<?x1x16x64xbf16>)
      w(%w : tensor<?x1x16xf32>) keys(%keys : tensor<?x16x64xbf16>)
      block_table(%table : tensor<?x8xi32>)
      lengths(%lengths : tensor<?x1xi32>) -> tensor<?x1x128xf32>
  %t = spin.topk %z lengths(%lengths : tensor<?x1xi32>) {k = 8 : i64}
      : tensor<?x1x128xf32> -> tensor<?x1x8xi32>
  return %t : tensor<?x1x8xi32>
}
