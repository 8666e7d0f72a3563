// DeepSeek-V4-Flash-like lightning indexer, one layer, one decode step.
//
//   16 requests, 1 query row each (plain decode), H = 64 indexer heads,
//   Dh = 128, top-K = 512, fp8 e4m3 keys with one f32 scale per slot,
//   64-slot pages, block tables up to 2048 pages (131072 slots) per request.
//   The number of physical pages in the cache (`?`) is known at run time.
//
// This is the dense form a frontend emits; spin-sparsify-indexer turns it
// into SPIN's predict -> pool -> select -> score -> top-K -> update pipeline.

func.func @dsv4_flash_indexer_layer(
    %q: tensor<16x1x64x128xbf16>,          // indexer queries [B, R, H, Dh]
    %w: tensor<16x1x64xf32>,               // head weights [B, R, H]
    %keys: tensor<?x64x128xf8E4M3FN>,      // key cache [pages, 64, Dh]
    %scales: tensor<?x64xf32>,             // per-slot key scales [pages, 64]
    %block_table: tensor<16x2048xi32>,     // logical -> physical page
    %lengths: tensor<16x1xi32>)            // visible slots per row
    -> tensor<16x1x512xi32> {
  %scores = spin.dense_indexer q(%q : tensor<16x1x64x128xbf16>)
      w(%w : tensor<16x1x64xf32>)
      keys(%keys : tensor<?x64x128xf8E4M3FN>)
      scales(%scales : tensor<?x64xf32>)
      block_table(%block_table : tensor<16x2048xi32>)
      lengths(%lengths : tensor<16x1xi32>) -> tensor<16x1x131072xf32>
  %topk = spin.topk %scores lengths(%lengths : tensor<16x1xi32>) {k = 512 : i64}
      : tensor<16x1x131072xf32> -> tensor<16x1x512xi32>
  return %topk : tensor<16x1x512xi32>
}
