% func.func @rejects_a_valued_role_marker(%a: tensor<2x1xi32> {spin.positions = 1 : i64}) {
  return
}
