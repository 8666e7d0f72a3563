€func.func @rejects_a_state_field_without_layer(%a: memref<?x?xf32> {spin.state = "v"}) {
  return
}
