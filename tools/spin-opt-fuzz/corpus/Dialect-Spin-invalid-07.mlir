€func.func @reset_rejects_i32_requests(%s: !spin.state<layer = 0>, %fresh: tensor<2xi32>) {
  %s1 = spin.reset %s requests(%fresh : tensor<2xi32>) : !spin.state<layer = 0>
  return
}
