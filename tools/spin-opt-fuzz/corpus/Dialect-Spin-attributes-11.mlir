‘Ifunc.func @rejects_a_bad_shape(%a: !llvm.ptr<1> {spin.shape = [-2]}) {
  return
}
