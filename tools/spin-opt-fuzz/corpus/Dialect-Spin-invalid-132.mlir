‘Ifunc.func @commit_rejects_i64_accepted(%s: !spin.state<layer = 0>, %a: tensor<2xi64>) {
  %s1 = spin.commit %s accepted(%a : tensor<2xi64>) {block_size = 16 : i64, decay = 5.0e-01} : !spin.state<layer = 0>
  return
}
