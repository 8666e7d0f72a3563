% func.func @observe_and_commit(%s: !spin.state<layer = 0>,
                              %sb: !spin.state<layer = 2, level = block>,
                              %z: tensor<2x4x64xf32>, %p: tensor<2x4xi32>,
                              %n: tensor<2x4xi32>, %m: tensor<2x4xi1>,
                              %zd: tensor<?x?x?xf32>,
                              %a: tensor<2xi32>, %ad: tensor<?xi32>)
    -> (!spin.state<layer = 0>, !spin.state<layer = 2, level = block>) {
  %s1 = spin.observe %s scores(%z : tensor<2x4x64xf32>)
      positions(%p : tensor<2x4xi32>) lengths(%n : tensor<2x4xi32>)
      mask(%m : tensor<2x4xi1>) {block_size = 16 : i64}
      : !spin.state<layer = 0>
  %s2 = spin.commit %s1 accepted(%a : tensor<2xi32>)
      {block_size = 16 : i64, decay = 5.0e-01, mtp_update = #spin.mtp_update<prefix>}
      : !spin.state<layer = 0>
  %sb1 = spin.observe %sb scores(%zd : tensor<?x?x?xf32>)
      positions(%p : tensor<2x4xi32>) lengths(%n : tensor<2x4xi32>)
      mask(%m : tensor<2x4xi1>)
      {block_size = 16 : i64, pooling = #spin.pooling<top4>}
      : !spin.state<layer = 2, level = block>
  %sb2 = spin.commit %sb1 accepted(%ad : tensor<?xi32>)
      {block_size = 16 : i64, decay = 7.5e-01, mtp_update = #spin.mtp_update<row0>}
      : !spin.state<layer = 2, level = block>
  return %s2, %sb2 : !spin.state<layer = 0>, !spin.state<layer = 2, level = block>
}
