// Executes the dense indexer on fp8 e4m3 queries with fp8 e4m3 keys and
// per-slot scales (SPIN_SPEC §1: q enters with its exact fp8 values), and
// the top-K of its scores.
// RUN: spin-opt %s --spin-lower-to-cpu | mlir-runner -e main -entry-point-result=void -shared-libs=%mlir_runner_utils | FileCheck %s
//
// One request, two rows, two heads of dim 2, w = [1, 2]; the queries are
// given as fp8 bit patterns (i8, bitcast):
//   row 0: head 0 = [448 (0x7E), 2^-9 (0x01, the smallest subnormal)],
//          head 1 = [-0.0 (0x80), 0.5 (0x30)];
//   row 1: head 0 = [1 (0x38), 1], head 1 = [NaN (0x7F), 0 (0x00)].
// Keys k = [1, 0], [0, 256], [-1, 448], [0.125, 0] with scales
// [1, 1, 0.5, 2]. Row 0, N = 4:
//   head 0 dots 448, 2^-9 * 256 = 0.5, -448 + 0.875, 56; scaled
//          448, 0.5, -223.5625 (ReLU 0), 112;
//   head 1 dots 0, 128, 224, -0 + 0; scaled 0, 128, 112, 0;
//   z = 448, 0.5 + 256 = 256.5, 224, 112; top-5: 0, 1, 2, 3, -1.
// Row 1, N = 3: the NaN query element makes head 1's dot NaN for every
// slot (NaN * 0 is NaN), ReLU and the head sum propagate it: z = NaN for
// the three visible slots, -inf past N; NaN is never selected: all -1.

func.func private @printMemrefI32(memref<*xi32>) attributes {llvm.emit_c_interface}
func.func private @printMemrefF32(memref<*xf32>) attributes {llvm.emit_c_interface}

func.func @main() {
  %qbits = arith.constant dense<[[[[126, 1], [-128, 48]], [[56, 56], [127, 0]]]]> : tensor<1x2x2x2xi8>
  %q = arith.bitcast %qbits : tensor<1x2x2x2xi8> to tensor<1x2x2x2xf8E4M3FN>
  %w = arith.constant dense<[[[1.0, 2.0], [1.0, 2.0]]]> : tensor<1x2x2xf32>
  %keys = arith.constant dense<[[[1.0, 0.0], [0.0, 256.0], [-1.0, 448.0], [0.125, 0.0]]]> : tensor<1x4x2xf8E4M3FN>
  %scales = arith.constant dense<[[1.0, 1.0, 0.5, 2.0]]> : tensor<1x4xf32>
  %bt = arith.constant dense<[[0]]> : tensor<1x1xi32>
  %n = arith.constant dense<[[4, 3]]> : tensor<1x2xi32>
  %z = spin.dense_indexer q(%q : tensor<1x2x2x2xf8E4M3FN>) w(%w : tensor<1x2x2xf32>)
      keys(%keys : tensor<1x4x2xf8E4M3FN>) scales(%scales : tensor<1x4xf32>)
      block_table(%bt : tensor<1x1xi32>) lengths(%n : tensor<1x2xi32>)
      -> tensor<1x2x4xf32>
  %t = spin.topk %z lengths(%n : tensor<1x2xi32>) {k = 5 : i64}
      : tensor<1x2x4xf32> -> tensor<1x2x5xi32>
  %zm = bufferization.to_buffer %z : tensor<1x2x4xf32> to memref<1x2x4xf32>
  %zu = memref.cast %zm : memref<1x2x4xf32> to memref<*xf32>
  // CHECK: {{\[\[\[}}448, 256.5, 224, 112],
  // CHECK-NEXT: {{\[}}nan, nan, nan, -inf]]]
  call @printMemrefF32(%zu) : (memref<*xf32>) -> ()
  %tm = bufferization.to_buffer %t : tensor<1x2x5xi32> to memref<1x2x5xi32>
  %tu = memref.cast %tm : memref<1x2x5xi32> to memref<*xi32>
  // CHECK: {{\[\[\[}}0, 1, 2, 3, -1],
  // CHECK-NEXT: {{\[}}-1, -1, -1, -1, -1]]]
  call @printMemrefI32(%tu) : (memref<*xi32>) -> ()
  return
}
