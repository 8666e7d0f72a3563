// RUN: spin-opt %s --split-input-file --convert-spin-to-gpu=fused-fp8-pages=1 --verify-diagnostics

// The fused pages hold fp8 keys and their scales: bf16 keys have none.
func.func @rejects_bf16_keys(%q: tensor<1x1x8x64xbf16>, %w: tensor<1x1x8xf32>,
    %keys: tensor<?x16x64xbf16>, %table: tensor<1x4xi32>,
    %lengths: tensor<1x1xi32>) -> tensor<1x1x64xf32> {
  // expected-error @below {{GPU path: fused-fp8-pages needs fp8 keys with scales}}
  %z = spin.dense_indexer q(%q : tensor<1x1x8x64xbf16>)
      w(%w : tensor<1x1x8xf32>) keys(%keys : tensor<?x16x64xbf16>)
      block_table(%table : tensor<1x4xi32>)
      lengths(%lengths : tensor<1x1xi32>) -> tensor<1x1x64xf32>
  return %z : tensor<1x1x64xf32>
}

// -----

// Key rows are read 16 bytes at a time: a page of 2 x (64 + 4) = 136 bytes
// would misalign every odd page.
func.func @rejects_unaligned_pages(%q: tensor<1x1x8x64xbf16>, %w: tensor<1x1x8xf32>,
    %keys: tensor<?x2x64xf8E4M3FN>, %scales: tensor<?x2xf32>,
    %table: tensor<1x32xi32>, %lengths: tensor<1x1xi32>) -> tensor<1x1x64xf32> {
  // expected-error @below {{GPU path: fused-fp8-pages needs static page and head-dim sizes whose page of keys and scales is a multiple of 16 bytes (got 'tensor<?x2x64xf8E4M3FN>')}}
  %z = spin.dense_indexer q(%q : tensor<1x1x8x64xbf16>)
      w(%w : tensor<1x1x8xf32>) keys(%keys : tensor<?x2x64xf8E4M3FN>)
      scales(%scales : tensor<?x2xf32>)
      block_table(%table : tensor<1x32xi32>)
      lengths(%lengths : tensor<1x1xi32>) -> tensor<1x1x64xf32>
  return %z : tensor<1x1x64xf32>
}

// -----

// One page holds one key cache's scales: a key cache read with two scales
// tensors has no fused layout.
func.func @rejects_two_scales(%q: tensor<1x1x8x64xbf16>, %w: tensor<1x1x8xf32>,
    %keys: tensor<?x16x64xf8E4M3FN>, %scales: tensor<?x16xf32>,
    %scales1: tensor<?x16xf32>, %table: tensor<1x4xi32>,
    %lengths: tensor<1x1xi32>) -> (tensor<1x1x64xf32>, tensor<1x1x64xf32>) {
  %z = spin.dense_indexer q(%q : tensor<1x1x8x64xbf16>)
      w(%w : tensor<1x1x8xf32>) keys(%keys : tensor<?x16x64xf8E4M3FN>)
      scales(%scales : tensor<?x16xf32>)
      block_table(%table : tensor<1x4xi32>)
      lengths(%lengths : tensor<1x1xi32>) -> tensor<1x1x64xf32>
  // expected-error @below {{GPU path: fused-fp8-pages needs each key cache read with one scales tensor}}
  %z1 = spin.dense_indexer q(%q : tensor<1x1x8x64xbf16>)
      w(%w : tensor<1x1x8xf32>) keys(%keys : tensor<?x16x64xf8E4M3FN>)
      scales(%scales1 : tensor<?x16xf32>)
      block_table(%table : tensor<1x4xi32>)
      lengths(%lengths : tensor<1x1xi32>) -> tensor<1x1x64xf32>
  return %z, %z1 : tensor<1x1x64xf32>, tensor<1x1x64xf32>
}

// -----

// Scales shared by two key caches cannot follow both caches' pages.
func.func @rejects_shared_scales(%q: tensor<1x1x8x64xbf16>, %w: tensor<1x1x8xf32>,
    %keys: tensor<?x16x64xf8E4M3FN>, %keys1: tensor<?x16x64xf8E4M3FN>,
    %scales: tensor<?x16xf32>, %table: tensor<1x4xi32>,
    %lengths: tensor<1x1xi32>) -> (tensor<1x1x64xf32>, tensor<1x1x64xf32>) {
  %z = spin.dense_indexer q(%q : tensor<1x1x8x64xbf16>)
      w(%w : tensor<1x1x8xf32>) keys(%keys : tensor<?x16x64xf8E4M3FN>)
      scales(%scales : tensor<?x16xf32>)
      block_table(%table : tensor<1x4xi32>)
      lengths(%lengths : tensor<1x1xi32>) -> tensor<1x1x64xf32>
  // expected-error @below {{GPU path: fused-fp8-pages needs each scales tensor read with one key cache}}
  %z1 = spin.dense_indexer q(%q : tensor<1x1x8x64xbf16>)
      w(%w : tensor<1x1x8xf32>) keys(%keys1 : tensor<?x16x64xf8E4M3FN>)
      scales(%scales : tensor<?x16xf32>)
      block_table(%table : tensor<1x4xi32>)
      lengths(%lengths : tensor<1x1xi32>) -> tensor<1x1x64xf32>
  return %z, %z1 : tensor<1x1x64xf32>, tensor<1x1x64xf32>
}
