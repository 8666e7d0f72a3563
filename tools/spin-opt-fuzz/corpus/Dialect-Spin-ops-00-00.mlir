% func.func @layer_state_and_reset(%ids: tensor<2xi64>, %fresh: tensor<2xi1>,
                                 %dids: tensor<?xi64>, %dfresh: tensor<?xi1>)
    -> (!spin.state<layer = 0>, !spin.state<layer = 3, level = block>,
        !spin.state<layer = 7>) {
  %s = spin.layer_state %ids : tensor<2xi64> -> !spin.state<layer = 0>
  %s1 = spin.reset %s : !spin.state<layer = 0>
  %s2 = spin.reset %s1 requests(%fresh : tensor<2xi1>) : !spin.state<layer = 0>
  %b = spin.layer_state %ids : tensor<2xi64> -> !spin.state<layer = 3, level = block>
  %b1 = spin.reset %b requests(%fresh : tensor<2xi1>) : !spin.state<layer = 3, level = block>
  %d = spin.layer_state %dids : tensor<?xi64> -> !spin.state<layer = 7, level = slot>
  %d1 = spin.reset %d requests(%dfresh : tensor<?xi1>) : !spin.state<layer = 7>
  return %s2, %b1, %d1 : !spin.state<layer = 0>, !spin.state<layer = 3, level = block>,
                         !spin.state<layer = 7>
}
