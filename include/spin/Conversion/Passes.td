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
    `{spin.state = "<field>", spin.layer = L}` with the field names of the
    compiler-runtime contract (runtime/include/spin/Runtime/Abi.def: `v`,
    `d`, `it`, the MTP observation buffers, `last_observed` for the
    age-based exploration policies). Functions with callers are
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

def ConvertSpinToGPU : Pass<"convert-spin-to-gpu", "ModuleOp"> {
  let summary = "Lower spin ops to generated GPU kernels and a launch plan";
  let description = [{
    Replaces the body of every function that holds spin ops by a launch
    plan: a sequence of `gpu.launch_func` ops on kernels generated into one
    `gpu.module @spin_kernels` (docs/GPU-ABI.md). Each op becomes one or
    more kernels specialised for its static shapes and options:

    * `spin.dense_indexer` -> tensor-core scoring of every visible slot;
    * `spin.fused_select` -> prediction, pooling and block selection (one
      CTA per request), writing the mask and the ascending block list;
    * `spin.fused_score` -> tensor-core scoring of the selected blocks and
      top-K over them;
    * `spin.topk` -> radix-select top-K over a cluster of CTAs per row (its
      leader's selection and sort, or merge ranks for K > 512 where each
      CTA's slice holds at most 512 candidates);
    * `spin.ema_update` -> the EMA update of the scored slots and `it += 1`,
      on the side stream (`spin.stream = 1`) when spin-schedule-async put
      it in an `async.execute` region, ordered after the scores by an event;
    * `spin.reset` -> zeroing of the flagged requests' state;
    * `spin.commit` / `spin.observe` (MTP) -> the replay of the accepted
      rows of the previous step into V and D, and the buffering of this
      step's rows, scored blocks and scores until the next commit.

    The function's arguments become device pointers (`!llvm.ptr<1>`) that
    keep their role in attributes (`spin.role`, `spin.name`, `spin.dtype`,
    `spin.shape`); the pass adds the runtime-owned arguments (`slots`, the
    state fields per layer), one pointer per result (`spin.role = "output"`),
    the scratch buffers (`spin.role = "scratch"`, `spin.bytes`), the error
    record and one i32 per dynamic size of an input (`spin.role = "dim"`).
    Graphs this path cannot run yet (A0/A2 reductions, the staleness-score
    and block-age exploration policies, f32 keys) are rejected with a
    diagnostic naming the op.

    Each kernel's tuning comes from the op's `spin.score_config`,
    `spin.topk_config` and `spin.select_config` attributes; ops without them
    are first configured as spin-configure-gpu-kernels does with its
    default options.
  }];
  let options = [
    Option<"capacity", "capacity", "int64_t", "0",
           "slots of state per request (0: the block table's reach)">,
    Option<"layerArgument", "layer-argument", "bool", "false",
           "the step takes its layer at run time (a `layer` launch "
           "argument): the graph's state layers are offsets from it, so one "
           "program serves every layer of a model">,
    Option<"pagedState", "paged-state", "bool", "false",
           "the state follows the KV pages (docs/GPU-ABI.md, \"Paged "
           "state\"): V, D and the MTP scores live in pages of the key "
           "cache's page size, addressed through a `state_block_table` "
           "input, and each slot keeps how far its pages are written "
           "(`valid`); the capacity is the block table's reach">,
    Option<"fusedFp8Pages", "fused-fp8-pages", "bool", "false",
           "fp8 keys and their scales come in one i8 `kv_cache` input of "
           "the serving engines' page layout (docs/GPU-ABI.md, \"Fused fp8 "
           "key pages\"): each page holds its key rows, then their f32 "
           "scales">,
  ];
  let dependentDialects = [
    "::mlir::arith::ArithDialect", "::mlir::gpu::GPUDialect",
    "::mlir::LLVM::LLVMDialect", "::mlir::NVVM::NVVMDialect",
    "::mlir::scf::SCFDialect", "::mlir::math::MathDialect"
  ];
}

def SpinConfigureGpuKernels : Pass<"spin-configure-gpu-kernels", "ModuleOp"> {
  let summary = "Choose the tuning of each op's GPU kernels";
  let description = [{
    The config step of the GPU path: records on every op that
    convert-spin-to-gpu turns into kernels how those kernels split their
    work, as attributes that the conversion reads (and that a test or a
    user may set by hand instead):

    * `spin.score_config` on `spin.dense_indexer` and `spin.fused_score`:
      warps per CTA, warp tiles per warp (by default the T in [8, 64] that
      minimises the wave cost ceil(CTAs / (2 x SMs)) x (T + 2) for the
      entries a row scores: every visible slot, or the selection's block
      budget), M tiles and wgmma;
    * `spin.topk_config` on `spin.topk` and `spin.fused_score`: a cluster of
      one CTA per 16 x threads entries of the row (at most 8), 1024 threads
      for K > 512 and 512 otherwise, and merge ranks for K > 512 where a
      cluster of 512-thread CTAs takes a slice of at most 512 candidates
      each;
    * `spin.select_config` on `spin.fused_select`: whether a single-row
      step's prediction prefetches on a cache miss (when its grid has at
      most `sm-count` CTAs), and whether a step of 2 to 8 rows selects them
      side by side, a CTA per row in one cluster (when the batch's B x R
      CTAs are at most `sm-count`, and not under row-0 sharing).

    Ops that already carry an attribute keep it. The model and the
    measurements behind each choice are in docs/benchmarks-kernels.md,
    "Tuning choices of the GPU lowering".
  }];
  let options = [
    Option<"warpsPerCta", "warps-per-cta", "int64_t", "8",
           "warps per CTA of the scoring kernels">,
    Option<"tilesPerWarp", "tiles-per-warp", "int64_t", "0",
           "warp tiles each scoring warp handles (0: by the wave cost "
           "model, see sm-count)">,
    Option<"mTiles", "m-tiles", "int64_t", "0",
           "16-slot MMA tiles per warp tile, 1 or 2 (0: 1)">,
    Option<"wgmma", "wgmma", "bool", "false",
           "score with wgmma (sm_90a only; one M tile, warps-per-cta a "
           "multiple of 4)">,
    Option<"copyWarpgroup", "copy-warpgroup", "bool", "false",
           "with wgmma: dense indexers and sparse scoring (blocks of a "
           "multiple of 64 slots) of fp8 keys and queries (Dh = 128, "
           "compact key cache) scored by a warpgroup that copies key tiles "
           "through tensor maps and two to four that multiply them "
           "(#spin.score_config copy_warpgroup); other ops keep their "
           "kernels">,
    Option<"autoCopyWarpgroup", "auto-copy-warpgroup", "bool", "false",
           "with wgmma: the copying warpgroup where it measured faster "
           "than the other kernels, a CTA's rows of a power of two of "
           "heads in all (one, two or four query rows at H = 64; not "
           "three), where copy-warpgroup applies">,
    Option<"smCount", "sm-count", "int64_t", "132",
           "SMs of the GPU the scoring grids are sized for, two CTAs each "
           "(one with the copying warpgroup), "
           "and the most CTAs of a prediction that prefetches on a cache "
           "miss (132: H100 SXM / H200; 148: B200 / B300)">,
  ];
}

def SpinMarkTensorMapParameters
    : Pass<"spin-mark-tensor-map-parameters", "gpu::GPUModuleOp"> {
  let summary = "Pass the kernels' tensor maps by value in the parameter space";
  let description = [{
    After convert-gpu-ops-to-nvvm-ops: every `llvm.func` kernel with a
    `spin_tensor_map_parameters` array (set by convert-spin-to-gpu on the
    scoring kernel of `copy_warpgroup`) gets, on each listed pointer
    argument, `llvm.byval = !llvm.array<128 x i8>`, `llvm.align = 64` and
    `nvvm.grid_constant`: the PTX parameter is the 128-byte tensor map the
    runtime passes (docs/GPU-ABI.md, "Kernel parameters"), and the kernel's
    copies address it in the parameter space, as the copy engine requires.
    (The GPU-to-NVVM conversion drops those attributes from a `gpu.func`, so
    they are set on its result.) The array is removed.
  }];
  let dependentDialects = ["NVVM::NVVMDialect", "LLVM::LLVMDialect"];
}

#endif // SPIN_CONVERSION_PASSES_TD
