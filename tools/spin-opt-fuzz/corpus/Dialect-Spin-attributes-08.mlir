% func.func @rejects_two_roles_on_one_argument(%a: tensor<2xi64> {spin.positions, spin.request_ids}) {
  return
}
