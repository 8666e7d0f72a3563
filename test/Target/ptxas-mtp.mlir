// REQUIRES: ptxas
// RUN: rm -rf %t && spin-compile %s --sparsify="sparsity=0.5 block-size=16 explore=0.25 reset-input=true" --target=sm_90a,sm_100a,sm_103a -o %t 2>&1 | FileCheck %s --check-prefix=LOG
// RUN: %ptxas -arch=sm_90a %t/sm_90a.ptx -o %t/sm_90a.cubin
// RUN: %ptxas -arch=sm_100a %t/sm_100a.ptx -o %t/sm_100a.cubin
// RUN: %ptxas -arch=sm_103a %t/sm_103a.ptx -o %t/sm_103a.cubin
// RUN: FileCheck %s --dump-input=never --check-prefix=PTX < %t/sm_90a.ptx
// RUN: FileCheck %s --dump-input=never --check-prefix=PTX < %t/sm_103a.ptx
// RUN: FileCheck %s --check-prefix=MANIFEST < %t/manifest.json
// RUN: rm -rf %t.row0 && spin-compile %s --sparsify="sparsity=0.5 block-size=16 mtp-mask=row0 mtp-update=row0 schedule-async=false" --target=sm_90a,sm_100a -o %t.row0 && %ptxas -arch=sm_90a %t.row0/sm_90a.ptx -o %t.row0/sm_90a.cubin && %ptxas -arch=sm_100a %t.row0/sm_100a.ptx -o %t.row0/sm_100a.cubin

// The MTP kernels (replay of the accepted rows, its finish, the buffering
// of a step's rows) assemble for every chip, with fp8 keys and four rows;
// the replay folds with two roundings and no FMA (mul.rn/add.rn), as the
// single-row EMA update and the CPU path.

// LOG: spin-compile: wrote {{.*}}manifest.json and 3 PTX module(s)
// PTX-NOT: .entry spin_reset_0
// PTX: .entry spin_commit_1(
// PTX-NOT: fma.rn.f32
// PTX: mul.rn.f32
// PTX: add.rn.f32
// PTX: .entry spin_commit_1_finish(
// PTX: .entry spin_select_2
// PTX: .entry spin_observe_5(
// MANIFEST: "rows": 4,
// MANIFEST: "max_rows": 4
// MANIFEST: "role": "accepted",
// MANIFEST-NEXT: "name": "accepted",
// MANIFEST: "name": "obs_z",
// MANIFEST: "kernel": "spin_commit_1",
// MANIFEST: "kernel": "spin_commit_1_finish",
// MANIFEST: "kernel": "spin_observe_5",
// MANIFEST: "stream": 1,
// MANIFEST-NEXT: "wait": [0],

func.func @verify(%q: tensor<2x4x16x64xbf16>, %w: tensor<2x4x16xf32>,
                  %keys: tensor<?x16x64xf8E4M3FN>, %scales: tensor<?x16xf32>,
                  %table: tensor<2x8xi32>, %lengths: tensor<2x4xi32>)
    -> tensor<2x4x8xi32> {
  %z = spin.dense_indexer q(%q : tensor<2x4x16x64xbf16>)
      w(%w : tensor<2x4x16xf32>) keys(%keys : tensor<?x16x64xf8E4M3FN>)
      scales(%scales : tensor<?x16xf32>)
      block_table(%table : tensor<2x8xi32>)
      lengths(%lengths : tensor<2x4xi32>) -> tensor<2x4x128xf32>
  %t = spin.topk %z lengths(%lengths : tensor<2x4xi32>) {k = 8 : i64}
      : tensor<2x4x128xf32> -> tensor<2x4x8xi32>
  return %t : tensor<2x4x8xi32>
}
