//===- Passes.td - spin conversion passes ------------------*- tablegen -*-===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
//===----------------------------------------------------------------------===//

#ifndef SPIN_CONVERSION_PASSES_TD
#define SPIN_CONVERSION_PASSES_TD

include "mlir/Pass/PassBase.td"

def ConvertSpinToSCF : Pass<"convert-spin-to-scf", "ModuleOp"> {
  let summary = "Lower spin ops to scalar loops on memrefs (the CPU path)";
  let description = [{
    Replaces every spin op with `scf.for` loop nests over memrefs: operands
    are read through `bufferization.to_buffer`, results are fresh
    `memref.alloc` buffers handed back with `bufferization.to_tensor`, so
    that one-shot bufferization can finish the function afterwards. Scratch
    buffers are plain `memref.alloc`s too; the buffer-deallocation passes of
    `spin-lower-to-cpu` free them. The
    semantics are SPIN_SPEC's, with the project's NaN rules: a NaN score is
    never selected by top-K and non-finite scores never enter the EMA state.

    Before lowering, fused ops are split back into their parts (the CPU
    runs them one after the other anyway) and `async.execute` regions are
    inlined in program order, which is a valid schedule of the dependencies
    that spin-schedule-async expressed.

    The runtime-owned state becomes function arguments (docs/Runtime-ABI.md):
    `{spin.slots}` (`[B]` i32, each request's slot in the state pool) and, per
    layer in increasing order, the state fields the function uses, marked
    `{spin.state = "v" | "d" | "it" | "obs_rows" | "obs_pos" | "obs_len" |
    "obs_mask" | "obs_z", spin.layer = L}`. Functions with callers are
    rejected. With `state-storage=globals` the state lives instead in
    zero-initialised module globals sized by `num-slots`, `capacity` and
    `max-rows`, and a request's slot is its id (ids must be in
    `[0, num-slots)`): self-contained programs (tests, `mlir-runner`) keep
    their signatures.

    Input:

    ```mlir
    func.func @f(..., %ids: tensor<2xi64> {spin.request_ids}) -> ... {
      %s = spin.layer_state %ids : tensor<2xi64> -> !spin.state<layer = 0>
      %m = spin.select_blocks %s scores(%S ...) lengths(%n ...) {...}
    ```

    Output:

    ```mlir
    func.func @f(..., %ids: tensor<2xi64> {spin.request_ids},
                 %slots: memref<?xi32> {spin.slots},
                 %v: memref<?x?xf32> {spin.layer = 0 : i64, spin.state = "v"},
                 %d: memref<?x?xf32> {spin.layer = 0 : i64, spin.state = "d"},
                 %it: memref<?xi64> {spin.layer = 0 : i64, spin.state = "it"}) {
      %mask = memref.alloc() : memref<2x16xi1>
      scf.for %b = %c0 to %c2 step %c1 { ... }
      %m = bufferization.to_tensor %mask restrict writable ...
    ```
  }];
  let options = [
    Option<"stateStorage", "state-storage", "std::string", "\"arguments\"",
           "'arguments' (the runtime's state pool) or 'globals'">,
    Option<"numSlots", "num-slots", "int64_t", "8",
           "globals: requests the state buffers hold">,
    Option<"capacity", "capacity", "int64_t", "4096",
           "globals: slots of state per request">,
    Option<"maxRows", "max-rows", "int64_t", "4",
           "globals: query rows per step (MTP buffers)">,
  ];
  let dependentDialects = [
    "::mlir::arith::ArithDialect", "::mlir::bufferization::BufferizationDialect",
    "::mlir::math::MathDialect", "::mlir::memref::MemRefDialect",
    "::mlir::scf::SCFDialect", "::mlir::tensor::TensorDialect"
  ];
}

#endif // SPIN_CONVERSION_PASSES_TD
