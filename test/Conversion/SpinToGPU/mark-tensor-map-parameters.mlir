// RUN: spin-opt %s --split-input-file --verify-diagnostics \
// RUN:   --pass-pipeline='builtin.module(gpu.module(spin-mark-tensor-map-parameters))' | FileCheck %s

// The listed pointer parameters become 128-byte tensor maps passed by
// value in the parameter space; the list is removed, other parameters and
// kernels are left as they are.
// CHECK-LABEL: llvm.func @score(
// CHECK-SAME: %{{.*}}: !llvm.ptr<1>,
// CHECK-SAME: %{{.*}}: !llvm.ptr {llvm.align = 64 : i64, llvm.byval = !llvm.array<128 x i8>, nvvm.grid_constant},
// CHECK-SAME: %{{.*}}: !llvm.ptr {llvm.align = 64 : i64, llvm.byval = !llvm.array<128 x i8>, nvvm.grid_constant})
// CHECK-NOT: spin_tensor_map_parameters
// CHECK-LABEL: llvm.func @other(
// CHECK-SAME: %{{.*}}: !llvm.ptr)
gpu.module @kernels {
  llvm.func @score(%out: !llvm.ptr<1>, %keys: !llvm.ptr, %scales: !llvm.ptr)
      attributes {nvvm.kernel, spin_tensor_map_parameters = array<i32: 1, 2>} {
    llvm.return
  }
  llvm.func @other(%p: !llvm.ptr) attributes {nvvm.kernel} {
    llvm.return
  }
}

// -----

gpu.module @kernels {
  // expected-error @+1 {{tensor-map parameter 0 is not a pointer argument}}
  llvm.func @score(%n: i32) attributes {nvvm.kernel, spin_tensor_map_parameters = array<i32: 0>} {
    llvm.return
  }
}

// -----

gpu.module @kernels {
  // expected-error @+1 {{tensor-map parameter 3 is not a pointer argument}}
  llvm.func @score(%p: !llvm.ptr) attributes {nvvm.kernel, spin_tensor_map_parameters = array<i32: 3>} {
    llvm.return
  }
}
