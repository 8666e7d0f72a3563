//===- Passes.td - spin graph passes -----------------------*- tablegen -*-===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
//===----------------------------------------------------------------------===//

#ifndef SPIN_DIALECT_SPIN_TRANSFORMS_PASSES_TD
#define SPIN_DIALECT_SPIN_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

//===----------------------------------------------------------------------===//
// spin-raise-indexer
//===----------------------------------------------------------------------===//

def SpinRaiseIndexer : Pass<"spin-raise-indexer", "ModuleOp"> {
  let summary = "Raise a dense indexer written in linalg to spin ops";
  let description = [{
    Recognises the lightning indexer the way frontends emit it in upstream
    dialects and replaces it with `spin.dense_indexer` (+ `spin.topk`):

    1. the per-head logits, a `linalg.generic` contraction over the head dim
       `s[b, r, h, n] = sum_d q[b, r, h, d] * k[b, n, d]` accumulated in f32
       (operands may be widened with `arith.extf` in the body), into a
       zero-filled init;
    2. optionally a per-slot key scale, `s * scales[b, n]`;
    3. ReLU, an elementwise `linalg.generic` yielding
       `arith.maximumf`/`arith.maxnumf` of the value and 0.0;
    4. the weighted head sum, a `linalg.generic` reducing over `h`:
       `z[b, r, n] += relu[b, r, h, n] * w[b, r, h]`, into a zero-filled init;
    5. optionally a length mask, a `linalg.generic` over `[B, R, NS]` that
       yields `z` where `linalg.index 2 < lengths[b, r]` and `-inf` elsewhere;
    6. optionally the top-K, a `func.call` to the external function named by
       `topk-callee` returning `(values, indices)` of shape `[B, R, K]`
       (indices i32 or i64, sorted by score descending, ties to the lower
       slot; upstream MLIR has no top-K op, so frontends emit a library
       call). Only the indices may be used.

    Keys are per-request contiguous `[B, NS, Dh]` tensors; the raised form
    views them as `NS / page-size` pages of `page-size` slots per request
    with an identity block table, which computes the same scores. Anything
    that does not match is left untouched; with `report-failures` every
    candidate head sum that is not raised gets a remark saying why.

    Input (abridged):

    ```mlir
    %s = linalg.generic {... iterator_types = ["parallel", "parallel",
           "parallel", "parallel", "reduction"]} ins(%q, %k : ...) outs(%zero4)
    %r = linalg.generic {...} ins(%s) outs(%e) { arith.maximumf %x, %c0 }
    %z = linalg.generic {... ["parallel", "parallel", "reduction",
           "parallel"]} ins(%r, %w) outs(%zero3) { %x * %w + %acc }
    %v, %i = func.call @topk(%z) : (tensor<2x1x256xf32>)
           -> (tensor<2x1x64xf32>, tensor<2x1x64xi64>)
    ```

    Output:

    ```mlir
    %z = spin.dense_indexer q(%q : ...) w(%w : ...) keys(%pages : ...)
           block_table(%bt : ...) lengths(%n : ...) -> tensor<2x1x256xf32>
    %t = spin.topk %z lengths(%n : ...) {k = 64 : i64}
           : tensor<2x1x256xf32> -> tensor<2x1x64xi32>
    %i = arith.extsi %t : tensor<2x1x64xi32> to tensor<2x1x64xi64>
    ```
  }];
  let options = [
    Option<"topkCallee", "topk-callee", "std::string", "\"topk\"",
           "Name of the external top-K function the frontend calls">,
    Option<"pageSize", "page-size", "int64_t", "64",
           "Slots per page when viewing contiguous keys as pages">,
    Option<"reportFailures", "report-failures", "bool", "false",
           "Emit a remark on every weighted head sum that is not raised">,
  ];
  let dependentDialects = [
    "::mlir::spin::SpinDialect", "::mlir::arith::ArithDialect",
    "::mlir::linalg::LinalgDialect", "::mlir::tensor::TensorDialect"
  ];
}

//===----------------------------------------------------------------------===//
// spin-sparsify-indexer
//===----------------------------------------------------------------------===//

def SpinSparsifyIndexer : Pass<"spin-sparsify-indexer", "ModuleOp"> {
  let summary = "Rewrite dense indexers into SPIN pipelines";
  let description = [{
    Replaces every `spin.dense_indexer` whose only user is a maskless
    `spin.topk` with SPIN's pipeline (SPIN_SPEC §3): predict, pool (A1),
    select, sparse score, top-K over the selection, and the state update.

    * Each rewritten indexer gets its own state, `!spin.state<layer = L>`
      (with `last_observed = true` when `explore-policy` is
      `staleness-score` or `block-age`, which rank blocks by age).
      Layer ids are stable: indexers are numbered in program order over the
      module, starting after the largest layer id already present in the
      module (0 in a fresh graph); an indexer carrying a `spin.layer = L : i64`
      attribute keeps `L`. Duplicate ids are an error.
    * The pipeline needs the query positions and request ids, which a dense
      indexer does not take: the pass appends function arguments marked
      `{spin.positions}` (`[B, R]` i32, the type of `lengths`) and
      `{spin.request_ids}` (`[B]` i64), or reuses arguments already so
      marked. MTP steps (R != 1) also take `{spin.accepted}` (`[B]` i32,
      the previous step's accepted draft counts); `reset-input` adds
      `{spin.reset}` (`[B]` i1). With `report-sparsity`, each layer's
      realized block sparsity (`spin.block_sparsity`, `[B, R]` f32) becomes
      an extra function result marked `{spin.sparsity}`. Functions with
      callers are not changed.
    * Decode steps (R = 1) update the state with `spin.ema_update`. MTP
      steps commit the previous step's buffered rows first (`spin.commit`
      with `mtp-update`), then score the union (or row 0's) selection
      (`mtp-mask`) and buffer the rows with `spin.observe`.
    * Warm-up and reset stay runtime decisions: the iteration counter in the
      state makes the first step after a reset dense (`spin.select_blocks`),
      and `spin.reset` (from `reset-input`, or the runtime) starts one.

    Input:

    ```mlir
    func.func @f(%q: ..., %w: ..., %k: ..., %bt: ..., %n: tensor<2x1xi32>) {
      %z = spin.dense_indexer q(%q ...) ... -> tensor<2x1x1024xf32>
      %t = spin.topk %z lengths(%n ...) {k = 512 : i64} ...
    ```

    Output (`sparsity=0.5`):

    ```mlir
    func.func @f(..., %n: tensor<2x1xi32>,
                 %p: tensor<2x1xi32> {spin.positions},
                 %ids: tensor<2xi64> {spin.request_ids}) {
      %s = spin.layer_state %ids : tensor<2xi64> -> !spin.state<layer = 0>
      %zhat = spin.predict %s positions(%p ...) lengths(%n ...) ...
      %S = spin.pool %zhat lengths(%n ...) {block_size = 64, pooling = max}
      %m = spin.select_blocks %s scores(%S ...) lengths(%n ...)
             {block_size = 64, sparsity = 0.5, topk = 512} ...
      %z = spin.sparse_indexer ... mask(%m ...) {block_size = 64}
      %t = spin.topk %z lengths(%n ...) mask(%m ...) {block_size = 64, k = 512}
      %s1 = spin.ema_update %s scores(%z ...) positions(%p ...) ... {decay = 0.5}
    ```
  }];
  let options = [
    Option<"sparsity", "sparsity", "double", "0.4",
           "Target block sparsity rho in [0, 1]">,
    Option<"blockSize", "block-size", "int64_t", "64",
           "SPIN block size in slots; must divide the key cache's page size">,
    Option<"emaDecay", "ema-decay", "double", "0.5",
           "EMA decay alpha in [0, 1]">,
    Option<"explore", "explore", "double", "0.0",
           "Fraction of the block budget explored, in [0, 1]">,
    Option<"seed", "seed", "uint64_t", "0", "Exploration seed">,
    Option<"explorePolicy", "explore-policy", "::mlir::spin::ExplorePolicy",
           "::mlir::spin::ExplorePolicy::random",
           "Which blocks exploration picks (SPIN_SPEC §3.7, §7.1)",
           [{::llvm::cl::values(
             clEnumValN(::mlir::spin::ExplorePolicy::random, "random",
                        "deterministic splitmix64 ranks (default)"),
             clEnumValN(::mlir::spin::ExplorePolicy::staleness_score,
                        "staleness-score",
                        "largest block age times positive predicted score"),
             clEnumValN(::mlir::spin::ExplorePolicy::block_age, "block-age",
                        "least recently observed blocks"))}]>,
    Option<"pooling", "pooling", "::mlir::spin::PoolingKind",
           "::mlir::spin::PoolingKind::max", "Block pooling of predictions",
           [{::llvm::cl::values(
             clEnumValN(::mlir::spin::PoolingKind::max, "max", "maximum"),
             clEnumValN(::mlir::spin::PoolingKind::mean, "mean", "mean"),
             clEnumValN(::mlir::spin::PoolingKind::top4, "top4",
                        "mean of the 4 largest"))}]>,
    Option<"reduction", "reduction", "::mlir::spin::Reduction",
           "::mlir::spin::Reduction::a1", "Block reduction variant",
           [{::llvm::cl::values(
             clEnumValN(::mlir::spin::Reduction::a0, "A0",
                        "blocks holding the predicted top-K slots"),
             clEnumValN(::mlir::spin::Reduction::a1, "A1",
                        "pooled slot predictions (default)"),
             clEnumValN(::mlir::spin::Reduction::a2, "A2",
                        "block-level EMA state"))}]>,
    Option<"mtpMask", "mtp-mask", "::mlir::spin::MtpMask",
           "::mlir::spin::MtpMask::union_", "Blocks an MTP step scores",
           [{::llvm::cl::values(
             clEnumValN(::mlir::spin::MtpMask::union_, "union",
                        "union of the rows' selections"),
             clEnumValN(::mlir::spin::MtpMask::row0, "row0",
                        "row 0's selection for every row"))}]>,
    Option<"mtpUpdate", "mtp-update", "::mlir::spin::MtpUpdate",
           "::mlir::spin::MtpUpdate::prefix", "Rows an MTP commit replays",
           [{::llvm::cl::values(
             clEnumValN(::mlir::spin::MtpUpdate::prefix, "prefix",
                        "rows 0..accepted in order"),
             clEnumValN(::mlir::spin::MtpUpdate::row0, "row0", "row 0 only"))}]>,
    Option<"resetInput", "reset-input", "bool", "false",
           "Add a {spin.reset} [B] i1 argument that resets requests first">,
    Option<"reportSparsity", "report-sparsity", "bool", "false",
           "Return each layer's realized block sparsity per row as an extra "
           "[B, R] f32 result marked {spin.sparsity}">,
  ];
  let dependentDialects = ["::mlir::spin::SpinDialect"];
}

//===----------------------------------------------------------------------===//
// spin-fuse
//===----------------------------------------------------------------------===//

def SpinFuse : Pass<"spin-fuse"> {
  let summary = "Fuse predict+pool+select and score+top-K+update";
  let description = [{
    Merges `spin.predict` -> (`spin.pool` ->) `spin.select_blocks` over one
    state into `spin.fused_select`, and `spin.sparse_indexer` with the
    `spin.topk` over the same mask (and the `spin.ema_update` or
    `spin.observe` of its scores, when there is one) into
    `spin.fused_score`: one GPU kernel each. Chains whose intermediate
    results have other users are left as they are.

    Input:

    ```mlir
    %zhat = spin.predict %s positions(%p ...) lengths(%n ...) ...
    %S = spin.pool %zhat lengths(%n ...) {block_size = 64, pooling = max}
    %m = spin.select_blocks %s scores(%S ...) lengths(%n ...) {...}
    %z = spin.sparse_indexer ... mask(%m ...) {block_size = 64}
    %t = spin.topk %z lengths(%n ...) mask(%m ...) {block_size = 64, k = 512}
    %s1 = spin.ema_update %s scores(%z ...) ... {block_size = 64, decay = 0.5}
    ```

    Output:

    ```mlir
    %m = spin.fused_select %s positions(%p ...) lengths(%n ...)
           {block_size = 64, pooling = max, sparsity = 0.5, topk = 512} ...
    %t, %z, %s1 = spin.fused_score ... mask(%m ...) state(%s ...)
           positions(%p ...) {block_size = 64, decay = 0.5, k = 512,
           update = #spin.update<ema>} -> ..., ..., !spin.state<layer = 0>
    ```
  }];
  let dependentDialects = ["::mlir::spin::SpinDialect"];
}

//===----------------------------------------------------------------------===//
// spin-schedule-async
//===----------------------------------------------------------------------===//

def SpinScheduleAsync : Pass<"spin-schedule-async", "::mlir::func::FuncOp"> {
  let summary = "Take the state update and block prediction off the critical path";
  let description = [{
    Makes the two state-only parts of every SPIN layer asynchronous to the
    rest of the function, with `async` dialect dependencies:

    * the state update (`spin.ema_update`, `spin.observe`, or the update
      fused into a `spin.fused_score`, which is split off) runs in an
      `async.execute` region that takes the layer's scores and yields the
      new state. The top-K result does not depend on it; every later use of
      the new state goes through `async.await`.
    * the block prediction (`spin.fused_select`, preceded by the layer's
      `spin.commit` for MTP steps) reads only the state, positions and
      lengths, so it moves to the earliest point where those exist, in an
      `async.execute` region yielding the mask; the layer's scoring awaits
      the mask. Predictions of later layers thus overlap earlier layers.

    The CPU lowering runs the regions in order; the GPU lowering puts them
    on a second stream ordered by events. Across steps the runtime records
    the update's completion per state and the next step's prediction waits
    for it.

    Input:

    ```mlir
    %m = spin.fused_select %s positions(%p ...) lengths(%n ...) {...}
    %t, %z, %s1 = spin.fused_score ... mask(%m ...) state(%s ...)
           positions(%p ...) {..., update = #spin.update<ema>} -> ...
    ```

    Output:

    ```mlir
    %tok0, %mv = async.execute -> !async.value<tensor<2x16xi1>> {
      %m = spin.fused_select %s positions(%p ...) lengths(%n ...) {...}
      async.yield %m : tensor<2x16xi1>
    }
    %m = async.await %mv : !async.value<tensor<2x16xi1>>
    %t, %z = spin.fused_score ... mask(%m ...) {block_size = 64, k = 512}
    %tok1, %sv = async.execute -> !async.value<!spin.state<layer = 0>> {
      %s1 = spin.ema_update %s scores(%z ...) ... {decay = 0.5}
      async.yield %s1 : !spin.state<layer = 0>
    }
    ```
  }];
  let dependentDialects = [
    "::mlir::spin::SpinDialect", "::mlir::async::AsyncDialect"
  ];
}

#endif // SPIN_DIALECT_SPIN_TRANSFORMS_PASSES_TD
