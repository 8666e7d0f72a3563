‘Ifunc.func @reset_rejects_new_state_of_other_layer(%s: !spin.state<layer = 0>) {
  %s1 = "spin.reset"(%s) : (!spin.state<layer = 0>) -> !spin.state<layer = 1>
  return
}
