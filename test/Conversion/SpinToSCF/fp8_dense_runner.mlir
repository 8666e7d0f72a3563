// Executes the dense indexer on fp8 e4m3 keys with per-slot scales, and a
// top-K that has ties and more room than eligible slots.
// RUN: spin-opt %s --spin-lower-to-cpu | mlir-runner -e main -entry-point-result=void -shared-libs=%mlir_runner_utils | FileCheck %s
//
// One request, two heads of dim 1: q = [1], [-1]; w = [1, 0.5]. The page
// holds k = [2, -2, 3, 1] (fp8) with scales [2, 0.5, 2, 4], so k * scale =
// [4, -1, 6, 4] and z = relu(ks) + 0.5 * relu(-ks) = [4, 0.5, 6, 4]. Top-5
// over 4 visible slots: 2 (6), 0 (4, tie with 3 goes to the lower slot), 3,
// 1, then -1 padding.

func.func private @printMemrefI32(memref<*xi32>) attributes {llvm.emit_c_interface}
func.func private @printMemrefF32(memref<*xf32>) attributes {llvm.emit_c_interface}

func.func @main() {
  %q = arith.constant dense<[[[[1.0], [-1.0]]]]> : tensor<1x1x2x1xbf16>
  %w = arith.constant dense<[[[1.0, 0.5]]]> : tensor<1x1x2xf32>
  %keys = arith.constant dense<[[[2.0], [-2.0], [3.0], [1.0]]]> : tensor<1x4x1xf8E4M3FN>
  %scales = arith.constant dense<[[2.0, 0.5, 2.0, 4.0]]> : tensor<1x4xf32>
  %bt = arith.constant dense<[[0]]> : tensor<1x1xi32>
  %n = arith.constant dense<[[4]]> : tensor<1x1xi32>
  %z = spin.dense_indexer q(%q : tensor<1x1x2x1xbf16>) w(%w : tensor<1x1x2xf32>)
      keys(%keys : tensor<1x4x1xf8E4M3FN>) scales(%scales : tensor<1x4xf32>)
      block_table(%bt : tensor<1x1xi32>) lengths(%n : tensor<1x1xi32>)
      -> tensor<1x1x4xf32>
  %t = spin.topk %z lengths(%n : tensor<1x1xi32>) {k = 5 : i64}
      : tensor<1x1x4xf32> -> tensor<1x1x5xi32>
  %zm = bufferization.to_buffer %z : tensor<1x1x4xf32> to memref<1x1x4xf32>
  %zu = memref.cast %zm : memref<1x1x4xf32> to memref<*xf32>
  // CHECK: {{\[\[\[}}4, 0.5, 6, 4]]]
  call @printMemrefF32(%zu) : (memref<*xf32>) -> ()
  %tm = bufferization.to_buffer %t : tensor<1x1x5xi32> to memref<1x1x5xi32>
  %tu = memref.cast %tm : memref<1x1x5xi32> to memref<*xi32>
  // CHECK: {{\[\[\[}}2, 0, 3, 1, -1]]]
  call @printMemrefI32(%tu) : (memref<*xi32>) -> ()
  return
}
