‘Ifunc.func @commit_rejects_negative_decay(%s: !spin.state<layer = 0>, %a: tensor<2xi32>) {
  %s1 = spin.commit %s accepted(%a : tensor<2xi32>) {block_size = 16 : i64, decay = -1.0e-01} : !spin.state<layer = 0>
  return
}
