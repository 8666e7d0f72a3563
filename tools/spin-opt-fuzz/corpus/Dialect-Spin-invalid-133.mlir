% func.func @commit_rejects_new_state_of_other_layer(%s: !spin.state<layer = 0>, %a: tensor<2xi32>) {
  %s1 = "spin.commit"(%s, %a) <{block_size = 16 : i64, decay = 5.0e-01 : f64}> : (!spin.state<layer = 0>, tensor<2xi32>) -> !spin.state<layer = 1>
  return
}
