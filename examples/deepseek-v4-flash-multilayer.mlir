// Three DeepSeek-V4-Flash-like indexer layers of one decode step, MTP
// verification with draft length 3 (R = 4 query rows per request).
//
//   8 requests, H = 64, Dh = 128, top-K = 512, fp8 e4m3 keys with per-slot
//   scales, 64-slot pages, block tables up to 1024 pages (65536 slots).
//   Each layer has its own key cache; the requests' block tables and
//   per-row lengths are shared by the layers.

func.func @three_indexer_layers(
    %q0: tensor<8x4x64x128xbf16>, %w0: tensor<8x4x64xf32>,
    %k0: tensor<?x64x128xf8E4M3FN>, %s0: tensor<?x64xf32>,
    %q1: tensor<8x4x64x128xbf16>, %w1: tensor<8x4x64xf32>,
    %k1: tensor<?x64x128xf8E4M3FN>, %s1: tensor<?x64xf32>,
    %q2: tensor<8x4x64x128xbf16>, %w2: tensor<8x4x64xf32>,
    %k2: tensor<?x64x128xf8E4M3FN>, %s2: tensor<?x64xf32>,
    %block_table: tensor<8x1024xi32>, %lengths: tensor<8x4xi32>)
    -> (tensor<8x4x512xi32>, tensor<8x4x512xi32>, tensor<8x4x512xi32>) {
  %z0 = spin.dense_indexer q(%q0 : tensor<8x4x64x128xbf16>)
      w(%w0 : tensor<8x4x64xf32>) keys(%k0 : tensor<?x64x128xf8E4M3FN>)
      scales(%s0 : tensor<?x64xf32>) block_table(%block_table : tensor<8x1024xi32>)
      lengths(%lengths : tensor<8x4xi32>) -> tensor<8x4x65536xf32>
  %t0 = spin.topk %z0 lengths(%lengths : tensor<8x4xi32>) {k = 512 : i64}
      : tensor<8x4x65536xf32> -> tensor<8x4x512xi32>
  %z1 = spin.dense_indexer q(%q1 : tensor<8x4x64x128xbf16>)
      w(%w1 : tensor<8x4x64xf32>) keys(%k1 : tensor<?x64x128xf8E4M3FN>)
      scales(%s1 : tensor<?x64xf32>) block_table(%block_table : tensor<8x1024xi32>)
      lengths(%lengths : tensor<8x4xi32>) -> tensor<8x4x65536xf32>
  %t1 = spin.topk %z1 lengths(%lengths : tensor<8x4xi32>) {k = 512 : i64}
      : tensor<8x4x65536xf32> -> tensor<8x4x512xi32>
  %z2 = spin.dense_indexer q(%q2 : tensor<8x4x64x128xbf16>)
      w(%w2 : tensor<8x4x64xf32>) keys(%k2 : tensor<?x64x128xf8E4M3FN>)
      scales(%s2 : tensor<?x64xf32>) block_table(%block_table : tensor<8x1024xi32>)
      lengths(%lengths : tensor<8x4xi32>) -> tensor<8x4x65536xf32>
  %t2 = spin.topk %z2 lengths(%lengths : tensor<8x4xi32>) {k = 512 : i64}
      : tensor<8x4x65536xf32> -> tensor<8x4x512xi32>
  return %t0, %t1, %t2 : tensor<8x4x512xi32>, tensor<8x4x512xi32>, tensor<8x4x512xi32>
}
