‘Ifunc.func @glm5_indexer_layer(
    %q: tensor<?x1x32x128xbf16>,           // indexer queries [B, R, H, Dh]
    %w: tensor<?x1x32xf32>,                // head weights [B, R, H]
    %keys: tensor<?x64x128xbf16>,          // key cache [pages, 64, Dh]
    %block_table: tensor<?x4096xi32>,      // logical -> physical page
    %lengths: tensor<?x1xi32>)             // visible slots per row
    -> tensor<?x1x2048xi32> {
  %scores = spin.dense_indexer q(%q : tensor<?x1x32x128xbf16>)
      w(%w : tensor<?x1x32xf32>)
      keys(%keys : tensor<?x64x128xbf16>)
      block_table(%block_table : tensor<?x4096xi32>)
      lengths(%lengths : tensor<?x1xi32>) -> tensor<?x1x262144xf32>
  %topk = spin.topk %scores lengths(%lengths : tensor<?x1xi32>) {k = 2048 : i64}
      : tensor<?x1x262144xf32> -> tensor<?x1x2048xi32>
  return %topk : tensor<?x1x2048xi32>
}
