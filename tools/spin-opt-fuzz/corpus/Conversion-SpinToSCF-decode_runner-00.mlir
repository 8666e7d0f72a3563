% func.func private @printMemrefI32(memref<*xi32>) attributes {llvm.emit_c_interface}
func.func private @printMemrefF32(memref<*xf32>) attributes {llvm.emit_c_interface}
func.func @print_i32(%t: tensor<1x1x3xi32>) {
  %m = bufferization.to_buffer %t : tensor<1x1x3xi32> to memref<1x1x3xi32>
  %u = memref.cast %m : memref<1x1x3xi32> to memref<*xi32>
  call @printMemrefI32(%u) : (memref<*xi32>) -> ()
  return
}
func.func @print_mask(%t: tensor<1x4xi1>) {
  %e = arith.extui %t : tensor<1x4xi1> to tensor<1x4xi32>
  %m = bufferization.to_buffer %e : tensor<1x4xi32> to memref<1x4xi32>
  %u = memref.cast %m : memref<1x4xi32> to memref<*xi32>
  call @printMemrefI32(%u) : (memref<*xi32>) -> ()
  return
}
func.func @print_f32(%t: tensor<1x1xf32>) {
  %m = bufferization.to_buffer %t : tensor<1x1xf32> to memref<1x1xf32>
  %u = memref.cast %m : memref<1x1xf32> to memref<*xf32>
  call @printMemrefF32(%u) : (memref<*xf32>) -> ()
  return
}
func.func @step(%ids: tensor<1xi64>, %n: tensor<1x1xi32>, %p: tensor<1x1xi32>) {
  %q = arith.constant dense<[[[[1.0, 0.0]]]]> : tensor<1x1x1x2xf32>
  %w = arith.constant dense<[[[1.0]]]> : tensor<1x1x1xf32>
  %keys = arith.constant dense<[[[5.0, 9.0], [1.0, 9.0], [7.0, 9.0], [3.0, 9.0]],
                                [[2.0, 9.0], [8.0, 9.0], [6.0, 9.0], [6.0, 9.0]]]> : tensor<2x4x2xf32>
  %bt = arith.constant dense<[[1, 0]]> : tensor<1x2xi32>
  %s = spin.layer_state %ids : tensor<1xi64> -> !spin.state<layer = 0>
  %zhat = spin.predict %s positions(%p : tensor<1x1xi32>) lengths(%n : tensor<1x1xi32>)
      : !spin.state<layer = 0> -> tensor<1x1x8xf32>
  %S = spin.pool %zhat lengths(%n : tensor<1x1xi32>) {pooling = #spin.pooling<max>, block_size = 2 : i64}
      : tensor<1x1x8xf32> -> tensor<1x1x4xf32>
  %m = spin.select_blocks %s scores(%S : tensor<1x1x4xf32>) lengths(%n : tensor<1x1xi32>)
      {topk = 3 : i64, block_size = 2 : i64, sparsity = 0.25 : f64}
      : !spin.state<layer = 0> -> tensor<1x4xi1>
  %z = spin.sparse_indexer q(%q : tensor<1x1x1x2xf32>) w(%w : tensor<1x1x1xf32>)
      keys(%keys : tensor<2x4x2xf32>) block_table(%bt : tensor<1x2xi32>)
      lengths(%n : tensor<1x1xi32>) mask(%m : tensor<1x4xi1>) {block_size = 2 : i64}
      -> tensor<1x1x8xf32>
  %t = spin.topk %z lengths(%n : tensor<1x1xi32>) mask(%m : tensor<1x4xi1>)
      {k = 3 : i64, block_size = 2 : i64} : tensor<1x1x8xf32> -> tensor<1x1x3xi32>
  %s1 = spin.ema_update %s scores(%z : tensor<1x1x8xf32>) positions(%p : tensor<1x1xi32>)
      lengths(%n : tensor<1x1xi32>) mask(%m : tensor<1x4xi1>)
      {decay = 0.5 : f64, block_size = 2 : i64} : !spin.state<layer = 0>
  %rho = spin.block_sparsity %m lengths(%n : tensor<1x1xi32>) {block_size = 2 : i64}
      : tensor<1x4xi1> -> tensor<1x1xf32>
  call @print_mask(%m) : (tensor<1x4xi1>) -> ()
  call @print_i32(%t) : (tensor<1x1x3xi32>) -> ()
  call @print_f32(%rho) : (tensor<1x1xf32>) -> ()
  return
}
func.func @main() {
  %ids = arith.constant dense<[1]> : tensor<1xi64>
  %n7 = arith.constant dense<[[7]]> : tensor<1x1xi32>
  %p6 = arith.constant dense<[[6]]> : tensor<1x1xi32>
  %n8 = arith.constant dense<[[8]]> : tensor<1x1xi32>
  %p7 = arith.constant dense<[[7]]> : tensor<1x1xi32>
  call @step(%ids, %n7, %p6) : (tensor<1xi64>, tensor<1x1xi32>, tensor<1x1xi32>) -> ()
  call @step(%ids, %n8, %p7) : (tensor<1xi64>, tensor<1x1xi32>, tensor<1x1xi32>) -> ()
  return
}
