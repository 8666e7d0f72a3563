€func.func @rejects_an_unknown_dtype(%a: !llvm.ptr<1> {spin.dtype = "f64"}) {
  return
}
