// One SPIN decode step of a DeepSeek-V4-Flash-like indexer layer, written out
// op by op (SPIN_SPEC §3; the paper's Algorithm 1):
//
//   predict (line 3)  zhat[i] = max(V[i], D[p - i])
//   pool    (line 3)  S[j]    = max over the visible slots of block j
//   select  (4-5)     budget m from 40 % target sparsity and K = 512,
//                     sink + newest blocks forced, 5 % random exploration
//   score   (6)       the indexer over the selected blocks only
//   top-K   (7)       over the scored slots
//   update  (8-10)    EMA of V and D on every scored slot, alpha = 0.5
//
// 16 requests, H = 64, Dh = 128, fp8 e4m3 keys with per-slot scales,
// 64-slot pages = SPIN blocks, up to 2048 blocks (131072 slots) per request.
// The state of indexer layer 0 is owned by the runtime and named by
// spin.layer_state; the returned realized sparsity is per row.

func.func @dsv4_flash_spin_step(
    %request_ids: tensor<16xi64>,
    %q: tensor<16x1x64x128xbf16>, %w: tensor<16x1x64xf32>,
    %keys: tensor<?x64x128xf8E4M3FN>, %scales: tensor<?x64xf32>,
    %block_table: tensor<16x2048xi32>,
    %lengths: tensor<16x1xi32>, %positions: tensor<16x1xi32>)
    -> (tensor<16x1x512xi32>, tensor<16x1xf32>) {
  %state = spin.layer_state %request_ids : tensor<16xi64> -> !spin.state<layer = 0>
  %zhat = spin.predict %state positions(%positions : tensor<16x1xi32>)
      lengths(%lengths : tensor<16x1xi32>)
      : !spin.state<layer = 0> -> tensor<16x1x131072xf32>
  %block_scores = spin.pool %zhat lengths(%lengths : tensor<16x1xi32>)
      {pooling = #spin.pooling<max>, block_size = 64 : i64}
      : tensor<16x1x131072xf32> -> tensor<16x1x2048xf32>
  %mask = spin.select_blocks %state scores(%block_scores : tensor<16x1x2048xf32>)
      lengths(%lengths : tensor<16x1xi32>)
      {topk = 512 : i64, block_size = 64 : i64, sparsity = 0.4 : f64,
       explore = 0.05 : f64, seed = 0 : i64}
      : !spin.state<layer = 0> -> tensor<16x2048xi1>
  %scores = spin.sparse_indexer q(%q : tensor<16x1x64x128xbf16>)
      w(%w : tensor<16x1x64xf32>)
      keys(%keys : tensor<?x64x128xf8E4M3FN>)
      scales(%scales : tensor<?x64xf32>)
      block_table(%block_table : tensor<16x2048xi32>)
      lengths(%lengths : tensor<16x1xi32>)
      mask(%mask : tensor<16x2048xi1>) {block_size = 64 : i64}
      -> tensor<16x1x131072xf32>
  %topk = spin.topk %scores lengths(%lengths : tensor<16x1xi32>)
      mask(%mask : tensor<16x2048xi1>) {k = 512 : i64, block_size = 64 : i64}
      : tensor<16x1x131072xf32> -> tensor<16x1x512xi32>
  %updated = spin.ema_update %state scores(%scores : tensor<16x1x131072xf32>)
      positions(%positions : tensor<16x1xi32>)
      lengths(%lengths : tensor<16x1xi32>)
      mask(%mask : tensor<16x2048xi1>) {decay = 0.5 : f64, block_size = 64 : i64}
      : !spin.state<layer = 0>
  %sparsity = spin.block_sparsity %mask lengths(%lengths : tensor<16x1xi32>)
      {block_size = 64 : i64} : tensor<16x2048xi1> -> tensor<16x1xf32>
  return %topk, %sparsity : tensor<16x1x512xi32>, tensor<16x1xf32>
}
