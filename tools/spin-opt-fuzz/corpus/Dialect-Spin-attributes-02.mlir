€func.func @rejects_an_unknown_argument_attribute(%a: tensor<2xi32> {spin.bogus}) {
  return
}
