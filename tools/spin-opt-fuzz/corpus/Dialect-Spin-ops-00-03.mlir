‘Ifunc.func @sparse_indexer(%q: tensor<2x1x4x16xbf16>, %qm: tensor<2x4x4x16xf16>,
                          %w: tensor<2x1x4xf32>, %wm: tensor<2x4x4xf32>,
                          %k: tensor<?x16x16xbf16>,
                          %k8: tensor<8x16x16xf8E4M3FN>, %sc: tensor<8x16xf32>,
                          %bt: tensor<2x4xi32>, %n: tensor<2x1xi32>,
                          %nm: tensor<2x4xi32>, %m: tensor<2x4xi1>,
                          %m8: tensor<2x?xi1>)
    -> (tensor<2x1x64xf32>, tensor<2x4x64xf32>) {
  %z = spin.sparse_indexer q(%q : tensor<2x1x4x16xbf16>)
      w(%w : tensor<2x1x4xf32>) keys(%k : tensor<?x16x16xbf16>)
      block_table(%bt : tensor<2x4xi32>) lengths(%n : tensor<2x1xi32>)
      mask(%m : tensor<2x4xi1>) {block_size = 16 : i64}
      -> tensor<2x1x64xf32>
  %zm = spin.sparse_indexer q(%qm : tensor<2x4x4x16xf16>)
      w(%wm : tensor<2x4x4xf32>) keys(%k8 : tensor<8x16x16xf8E4M3FN>)
      scales(%sc : tensor<8x16xf32>) block_table(%bt : tensor<2x4xi32>)
      lengths(%nm : tensor<2x4xi32>) mask(%m8 : tensor<2x?xi1>)
      {block_size = 8 : i64} -> tensor<2x4x64xf32>
  return %z, %zm : tensor<2x1x64xf32>, tensor<2x4x64xf32>
}
