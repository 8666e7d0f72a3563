€func.func @rejects_a_launch_plan_mark_on_an_op() {
  %c = arith.constant {spin.launch_plan} 0 : i32
  return
}
