//===- SpinOps.td - spin operations ------------------------*- tablegen -*-===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
// The ops follow Algorithm 1 of the SPIN paper, one op per step:
//
//   spin.dense_indexer + spin.topk             the dense baseline (SPIN_SPEC §1)
//   spin.predict -> spin.pool                  zhat = max(V[i], D[p-i]); S[j]
//   spin.select_blocks                         budget, forced, warm-up, explore
//   spin.sparse_indexer -> spin.topk           score the selected blocks only
//   spin.ema_update | spin.observe, spin.commit  EMA update; MTP replay
//   spin.layer_state, spin.reset               naming and resetting state
//
//===----------------------------------------------------------------------===//

#ifndef SPIN_DIALECT_SPIN_IR_SPINOPS_TD
#define SPIN_DIALECT_SPIN_IR_SPINOPS_TD

include "spin/Dialect/Spin/IR/SpinDialect.td"
include "spin/Dialect/Spin/IR/SpinAttrs.td"
include "spin/Dialect/Spin/IR/SpinTypes.td"
include "mlir/IR/OpBase.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

//===----------------------------------------------------------------------===//
// Type constraints
//===----------------------------------------------------------------------===//

def Spin_QueryTensor : TensorRankOf<[BF16, F16, F32, F8E4M3FN], [4]>;
def Spin_WeightTensor : TensorRankOf<[F32], [3]>;
def Spin_KeyCacheTensor : TensorRankOf<[BF16, F16, F32, F8E4M3FN], [3]>;
def Spin_ScaleTensor : TensorRankOf<[F32], [2]>;
def Spin_BlockTableTensor : TensorRankOf<[I32], [2]>;
def Spin_RowI32Tensor : TensorRankOf<[I32], [2]>;
def Spin_RowScoresTensor : TensorRankOf<[F32], [3]>;
def Spin_RowF32Tensor : TensorRankOf<[F32], [2]>;
def Spin_TopKTensor : TensorRankOf<[I32], [3]>;
def Spin_BlockMaskTensor : TensorRankOf<[I1], [2]>;
def Spin_RequestIdTensor : TensorRankOf<[I64], [1]>;
def Spin_RequestI32Tensor : TensorRankOf<[I32], [1]>;
def Spin_RequestMaskTensor : TensorRankOf<[I1], [1]>;

/// The runtime-owned memory behind every `!spin.state` handle.
def Spin_StateResource : Resource<"::mlir::spin::StateResource">;

//===----------------------------------------------------------------------===//
// Base classes
//===----------------------------------------------------------------------===//

// Every static size of an op's tensors is at most 2^31 - 1: the runtime's
// sizes and the ops' slot indices, lengths and positions are 32-bit, and
// the lowerings multiply sizes in 64 bits (SpinOps.h).
def Spin_SizesFitInt32 : NativeOpTrait<"SizesFitInt32"> {
  let cppNamespace = "::mlir::spin";
}

class Spin_Op<string mnemonic, list<Trait> traits = []>
    : Op<Spin_Dialect, mnemonic, !listconcat(traits, [Spin_SizesFitInt32])>;

/// Shared operand list and syntax of the dense and sparse indexer ops.
class Spin_IndexerOp<string mnemonic, dag extraArgs, string extraFormat>
    : Spin_Op<mnemonic, [Pure]> {
  let arguments = !con((ins
    Spin_QueryTensor:$q,
    Spin_WeightTensor:$w,
    Spin_KeyCacheTensor:$keys,
    Optional<Spin_ScaleTensor>:$scales,
    Spin_BlockTableTensor:$block_table,
    Spin_RowI32Tensor:$lengths), extraArgs);
  let results = (outs Spin_RowScoresTensor:$scores);
  let assemblyFormat = [{
    `q` `(` $q `:` type($q) `)`
    `w` `(` $w `:` type($w) `)`
    `keys` `(` $keys `:` type($keys) `)`
    (`scales` `(` $scales^ `:` type($scales) `)`)?
    `block_table` `(` $block_table `:` type($block_table) `)`
    `lengths` `(` $lengths `:` type($lengths) `)`
  }] # extraFormat # [{
    attr-dict `->` type($scores)
  }];
  let hasVerifier = 1;
}

/// Shared operands of the ops that fold one step's scores into the state:
/// spin.ema_update (now) and spin.observe (deferred to spin.commit).
class Spin_ObservationOp<string mnemonic, dag extraArgs>
    : Spin_Op<mnemonic, [AllTypesMatch<["state", "new_state"]>]> {
  let arguments = !con((ins
    Arg<Spin_StateType, "the layer's state",
        [MemRead<Spin_StateResource>, MemWrite<Spin_StateResource>]>:$state,
    Spin_RowScoresTensor:$scores,
    Spin_RowI32Tensor:$positions,
    Spin_RowI32Tensor:$lengths,
    Spin_BlockMaskTensor:$mask,
    Spin_PositiveI64Attr:$block_size,
    OptionalAttr<Spin_PoolingKindAttr>:$pooling), extraArgs);
  let results = (outs Spin_StateType:$new_state);
  let assemblyFormat = [{
    $state
    `scores` `(` $scores `:` type($scores) `)`
    `positions` `(` $positions `:` type($positions) `)`
    `lengths` `(` $lengths `:` type($lengths) `)`
    `mask` `(` $mask `:` type($mask) `)`
    attr-dict `:` qualified(type($state))
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// State
//===----------------------------------------------------------------------===//

def Spin_LayerStateOp : Spin_Op<"layer_state", [Pure]> {
  let summary = "names one indexer layer's SPIN state for the batch's requests";
  let description = [{
    Binds the state of the indexer layer given by the result type's `layer`
    for the requests of the batch, in batch order. The runtime owns the
    memory (V, D, the iteration counter and pending MTP observations); this
    op only says which state the following ops read and write.

    ```mlir
    %s = spin.layer_state %request_ids : tensor<4xi64> -> !spin.state<layer = 0>
    ```
  }];
  let arguments = (ins Spin_RequestIdTensor:$request_ids);
  let results = (outs Spin_StateType:$state);
  let assemblyFormat = [{
    $request_ids attr-dict `:` type($request_ids) `->` qualified(type($state))
  }];
}

def Spin_ResetOp : Spin_Op<"reset",
    [AllTypesMatch<["state", "new_state"]>]> {
  let summary = "zeroes SPIN state: the next step of those requests is a warm-up";
  let description = [{
    Resets the state of every request whose entry in `requests` is true (of
    every request when `requests` is absent): `V` and `D` become zero, the
    iteration counter becomes 0 (so the next step selects every block,
    SPIN_SPEC §2), pending MTP observations are dropped and, in a
    `last_observed = true` state, every block becomes never observed (0). Serving engines
    reset after prefill and at the start of each conversation turn.

    ```mlir
    %s1 = spin.reset %s requests(%fresh : tensor<4xi1>) : !spin.state<layer = 0>
    ```
  }];
  let arguments = (ins
    Arg<Spin_StateType, "the layer's state",
        [MemRead<Spin_StateResource>, MemWrite<Spin_StateResource>]>:$state,
    Optional<Spin_RequestMaskTensor>:$requests);
  let results = (outs Spin_StateType:$new_state);
  let assemblyFormat = [{
    $state (`requests` `(` $requests^ `:` type($requests) `)`)?
    attr-dict `:` qualified(type($state))
  }];
}

//===----------------------------------------------------------------------===//
// Dense indexer and top-K
//===----------------------------------------------------------------------===//

def Spin_DenseIndexerOp : Spin_IndexerOp<"dense_indexer", (ins), ""> {
  let summary = "scores every visible slot of a paged key cache (SPIN_SPEC §1)";
  let description = [{
    The lightning indexer. For request `b`, row `r` and slot `i < N`
    (`N = lengths[b, r]`):

        z[b, r, i] = sum_h w[b, r, h] * ReLU(dot(q[b, r, h, :], k(i)) * scale(i))

    where `k(i)` is slot `i % S` of page `block_table[b, i / S]`, and
    `scale(i)` the matching entry of `scales` (fp8 e4m3 keys need scales;
    other key formats take none). Queries may be fp8 e4m3 with fp8 e4m3
    keys (their exact values: the caller folds a query scale into `w`).
    Products and sums accumulate in f32. Slots at or after `N` are -inf;
    `spin.topk` never returns them.

    `q` is `[B, R, H, Dh]`, `w` `[B, R, H]`, `keys` `[P, S, Dh]`, `scales`
    `[P, S]`, `block_table` `[B, MB]`, `lengths` `[B, R]`, and the result
    `[B, R, MB * S]`.

    ```mlir
    %z = spin.dense_indexer q(%q : tensor<2x1x64x128xbf16>)
        w(%w : tensor<2x1x64xf32>) keys(%k : tensor<?x64x128xf8E4M3FN>)
        scales(%sc : tensor<?x64xf32>) block_table(%bt : tensor<2x16xi32>)
        lengths(%n : tensor<2x1xi32>) -> tensor<2x1x1024xf32>
    ```
  }];
}

def Spin_SparseIndexerOp : Spin_IndexerOp<"sparse_indexer",
    (ins Spin_BlockMaskTensor:$mask, Spin_PositiveI64Attr:$block_size),
    "`mask` `(` $mask `:` type($mask) `)`"> {
  let summary = "scores only the slots of selected blocks (SPIN_SPEC §3.8)";
  let description = [{
    `spin.dense_indexer` restricted to the blocks of `mask` (`[B, NB]`, one
    bit per `block_size`-slot block of each request; `block_size` divides
    the page size `S`). Slots of unselected blocks, and slots at or after a
    row's length, are -inf. All rows of a request share the mask (for MTP it
    is the union of the rows' selections).

    ```mlir
    %z = spin.sparse_indexer q(%q : tensor<2x1x64x128xbf16>)
        w(%w : tensor<2x1x64xf32>) keys(%k : tensor<?x64x128xbf16>)
        block_table(%bt : tensor<2x16xi32>) lengths(%n : tensor<2x1xi32>)
        mask(%m : tensor<2x16xi1>) {block_size = 64 : i64}
        -> tensor<2x1x1024xf32>
    ```
  }];
}

def Spin_TopKOp : Spin_Op<"topk", [Pure]> {
  let summary = "top-K slot indices per row, ties to the lower slot (SPIN_SPEC §1)";
  let description = [{
    For each row, the indices of the `k` highest scores among the eligible
    slots, sorted by score descending, ties to the lower index; the tail is
    padded with -1 when fewer than `k` slots are eligible. Slot `i` of row
    `(b, r)` is eligible when `i < lengths[b, r]` and, when `mask` is given,
    its block `i / block_size` is selected. Result `[B, R, k]`.

    ```mlir
    %t = spin.topk %z lengths(%n : tensor<2x1xi32>)
        mask(%m : tensor<2x16xi1>) {k = 512 : i64, block_size = 64 : i64}
        : tensor<2x1x1024xf32> -> tensor<2x1x512xi32>
    ```
  }];
  let arguments = (ins
    Spin_RowScoresTensor:$scores,
    Spin_RowI32Tensor:$lengths,
    Optional<Spin_BlockMaskTensor>:$mask,
    Spin_PositiveI64Attr:$k,
    OptionalAttr<Spin_PositiveI64Attr>:$block_size);
  let results = (outs Spin_TopKTensor:$indices);
  let assemblyFormat = [{
    $scores `lengths` `(` $lengths `:` type($lengths) `)`
    (`mask` `(` $mask^ `:` type($mask) `)`)?
    attr-dict `:` type($scores) `->` type($indices)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// SPIN: predict, pool, select
//===----------------------------------------------------------------------===//

def Spin_PredictOp : Spin_Op<"predict"> {
  let summary = "predicted scores from the EMA state (SPIN_SPEC §3.2)";
  let description = [{
    With a slot-level state (variants A0 and A1), the predicted score of
    every slot of every row, `zhat[b, r, i] = max(V[i], D[p - i])` with
    `p = positions[b, r]`; result `[B, R, NS]`.

    With a block-level state (variant A2, `block_size` required), the
    predicted score of every block, `max(Vb[j], Db[p / block_size - j])`;
    result `[B, R, NB]`.

    Entries at or after the row's length (slots `>= N`, blocks
    `>= ceil(N / block_size)`) are -inf.

    ```mlir
    %zhat = spin.predict %s positions(%p : tensor<2x1xi32>)
        lengths(%n : tensor<2x1xi32>) : !spin.state<layer = 0>
        -> tensor<2x1x1024xf32>
    ```
  }];
  let arguments = (ins
    Arg<Spin_StateType, "the layer's state", [MemRead<Spin_StateResource>]>:$state,
    Spin_RowI32Tensor:$positions,
    Spin_RowI32Tensor:$lengths,
    OptionalAttr<Spin_PositiveI64Attr>:$block_size);
  let results = (outs Spin_RowScoresTensor:$prediction);
  let assemblyFormat = [{
    $state `positions` `(` $positions `:` type($positions) `)`
    `lengths` `(` $lengths `:` type($lengths) `)`
    attr-dict `:` qualified(type($state)) `->` type($prediction)
  }];
  let hasVerifier = 1;
}

def Spin_PoolOp : Spin_Op<"pool", [Pure]> {
  let summary = "pools predicted slot scores into block scores (SPIN_SPEC §3.3)";
  let description = [{
    `S[b, r, j] = pool(zhat[b, r, i] for visible i in block j)` with `pool`
    one of `max` (default in the paper), `mean`, or `top4` (mean of the up
    to 4 largest). Only visible slots (`i < lengths[b, r]`) take part;
    blocks with none are -inf. `[B, R, NB * block_size]` -> `[B, R, NB]`.

    ```mlir
    %S = spin.pool %zhat lengths(%n : tensor<2x1xi32>)
        {pooling = #spin.pooling<max>, block_size = 64 : i64}
        : tensor<2x1x1024xf32> -> tensor<2x1x16xf32>
    ```
  }];
  let arguments = (ins
    Spin_RowScoresTensor:$prediction,
    Spin_RowI32Tensor:$lengths,
    Spin_PoolingKindAttr:$pooling,
    Spin_PositiveI64Attr:$block_size);
  let results = (outs Spin_RowScoresTensor:$block_scores);
  let assemblyFormat = [{
    $prediction `lengths` `(` $lengths `:` type($lengths) `)`
    attr-dict `:` type($prediction) `->` type($block_scores)
  }];
  let hasVerifier = 1;
}

def Spin_SelectBlocksOp : Spin_Op<"select_blocks"> {
  let summary = "picks the blocks to score this step (SPIN_SPEC §3.4-3.7, §4)";
  let description = [{
    Per row: `B = ceil(N / block_size)` blocks, budget
    `m = min(B, max(ceil(topk / block_size), ceil((1 - sparsity) * B)))`;
    the sink block 0 and the newest block `B - 1` are always selected and
    count toward `m`; `e = min(floor(explore * m), m - |forced|)` blocks are
    explored and the remaining `m - |forced| - e` go to the highest `scores`
    (ties to the lower block). A warm-up step (iteration counter 0 after a
    reset) selects every block of every row, under either MTP policy.

    `explore_policy` says which not-yet-selected blocks are explored:
    `random` (default) takes the smallest deterministic splitmix64 ranks of
    `seed`, request id, the state's layer, the iteration counter and the
    block index (SPIN_SPEC §3.7); `block_age` the oldest blocks, by
    `age = it + 1 - last_observed[j]`; `staleness_score` the largest
    `f32(age) * max(scores[j], 0)` (ties to the lower block for both,
    SPIN_SPEC §7.1). The two age policies need a state with
    `last_observed = true`.

    `reduction` chooses the variant: `a1` (default) ranks pooled block
    scores `[B, R, NB]`; `a2` ranks block-level predictions of a
    `level = block` state; `a0` takes slot predictions `[B, R, NS]`, selects
    their top-`topk` slots and every block holding one (plus the forced
    blocks), with no budget and therefore no exploration.

    The result `[B, NB]` is the per-request mask the sparse indexer scores:
    for several rows (MTP) the union of the rows' selections (`mtp_mask =
    union`) or row 0's selection (`mtp_mask = row0`).

    ```mlir
    %m = spin.select_blocks %s scores(%S : tensor<2x1x16xf32>)
        lengths(%n : tensor<2x1xi32>)
        {topk = 512 : i64, block_size = 64 : i64, sparsity = 5.0e-01,
         explore = 5.0e-02, seed = 7 : i64}
        : !spin.state<layer = 0> -> tensor<2x16xi1>
    %a = spin.select_blocks %t scores(%S : tensor<2x1x16xf32>)
        lengths(%n : tensor<2x1xi32>)
        {topk = 512 : i64, block_size = 64 : i64, sparsity = 5.0e-01,
         explore = 5.0e-02, explore_policy = #spin.explore_policy<block_age>}
        : !spin.state<layer = 1, last_observed = true> -> tensor<2x16xi1>
    ```
  }];
  let arguments = (ins
    Arg<Spin_StateType, "the layer's state", [MemRead<Spin_StateResource>]>:$state,
    Spin_RowScoresTensor:$scores,
    Spin_RowI32Tensor:$lengths,
    Spin_PositiveI64Attr:$topk,
    Spin_PositiveI64Attr:$block_size,
    Spin_UnitIntervalF64Attr:$sparsity,
    DefaultValuedAttr<Spin_UnitIntervalF64Attr, "0.0">:$explore,
    DefaultValuedAttr<I64Attr, "0">:$seed,
    DefaultValuedAttr<Spin_ReductionAttr, "::mlir::spin::Reduction::a1">:$reduction,
    DefaultValuedAttr<Spin_MtpMaskAttr, "::mlir::spin::MtpMask::union_">:$mtp_mask,
    DefaultValuedAttr<Spin_ExplorePolicyAttr,
                      "::mlir::spin::ExplorePolicy::random">:$explore_policy);
  let results = (outs Spin_BlockMaskTensor:$mask);
  let assemblyFormat = [{
    $state `scores` `(` $scores `:` type($scores) `)`
    `lengths` `(` $lengths `:` type($lengths) `)`
    attr-dict `:` qualified(type($state)) `->` type($mask)
  }];
  let hasVerifier = 1;
}

def Spin_BlockSparsityOp : Spin_Op<"block_sparsity", [Pure]> {
  let summary = "realized block sparsity per row (SPIN_SPEC §5)";
  let description = [{
    `1 - selected / B` for each row, where `B = ceil(N / block_size)` are the
    row's visible blocks and `selected` those of them set in `mask`. A row
    with no visible slot has sparsity 0.

    ```mlir
    %rho = spin.block_sparsity %m lengths(%n : tensor<2x1xi32>)
        {block_size = 64 : i64} : tensor<2x16xi1> -> tensor<2x1xf32>
    ```
  }];
  let arguments = (ins
    Spin_BlockMaskTensor:$mask,
    Spin_RowI32Tensor:$lengths,
    Spin_PositiveI64Attr:$block_size);
  let results = (outs Spin_RowF32Tensor:$sparsity);
  let assemblyFormat = [{
    $mask `lengths` `(` $lengths `:` type($lengths) `)`
    attr-dict `:` type($mask) `->` type($sparsity)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// SPIN: state updates
//===----------------------------------------------------------------------===//

def Spin_EmaUpdateOp : Spin_ObservationOp<"ema_update",
    (ins Spin_UnitIntervalF64Attr:$decay)> {
  let summary = "folds one row's scores into the EMA state (SPIN_SPEC §3.10)";
  let description = [{
    For every scored slot `i` (its block set in `mask`, `i < N`) of the
    single row of each request:
    `V[i] = decay * V[i] + (1 - decay) * z[i]` and
    `D[p - i] = decay * D[p - i] + (1 - decay) * z[i]`; then the iteration
    counter increases by one. Slots of unselected blocks keep their state.
    A `last_observed = true` state records `it + 1` (the counter before the
    increment, plus one) for every scored block `j < ceil(N / block_size)`,
    whatever its scores (SPIN_SPEC §7.1).
    With a `level = block` state (A2) the observed scores are first pooled
    per block with `pooling` and the block EMAs `Vb[j]`, `Db[p/block_size - j]`
    are updated. Rows must be 1: MTP steps buffer rows with `spin.observe`
    and replay them with `spin.commit`.

    ```mlir
    %s1 = spin.ema_update %s scores(%z : tensor<2x1x1024xf32>)
        positions(%p : tensor<2x1xi32>) lengths(%n : tensor<2x1xi32>)
        mask(%m : tensor<2x16xi1>) {decay = 5.0e-01, block_size = 64 : i64}
        : !spin.state<layer = 0>
    ```
  }];
}

def Spin_ObserveOp : Spin_ObservationOp<"observe",
    (ins Spin_UnitIntervalF64Attr:$decay)> {
  let summary = "folds an MTP verification step's row 0 and buffers the others for a later commit (SPIN_SPEC §4)";
  let description = [{
    Row 0 of every request is the verified token, which every commit
    replays first whatever the accepted count (docs/SPIN_SPEC.md §7.2), so
    it is folded into `V` and `D` at once with the update rule of
    `spin.ema_update` and `decay` (a `last_observed = true` state marks its
    blocks); the iteration counter does not change. The scored slots of the
    other rows (the union mask, `i < N_r`) are recorded with every row's
    position and length in the request's pending-observation buffer until
    `spin.commit`. A request may hold one uncommitted step per layer. With a
    `level = block` state the rows are pooled per block with `pooling`.

    ```mlir
    %s1 = spin.observe %s scores(%z : tensor<2x4x1024xf32>)
        positions(%p : tensor<2x4xi32>) lengths(%n : tensor<2x4xi32>)
        mask(%m : tensor<2x16xi1>) {block_size = 64 : i64, decay = 5.0e-01}
        : !spin.state<layer = 0>
    ```
  }];
}

def Spin_CommitOp : Spin_Op<"commit", [AllTypesMatch<["state", "new_state"]>]> {
  let summary = "replays the accepted MTP rows into the EMA state (SPIN_SPEC §4)";
  let description = [{
    For request `b` with `a = accepted[b]` accepted draft tokens, replays the
    buffered rows `1..a` in order (`mtp_update = prefix`; `spin.observe`
    folded row 0 at its step), or none (`mtp_update = row0`), with the
    update rule of `spin.ema_update`, each row from the state the previous
    one left; the other rows are dropped.
    A `last_observed = true` state records `it + 1` for every buffered block
    that a replayed row sees (`j < ceil(N_r / block_size)`). The iteration
    counter increases by one per committed step. `block_size`
    is the one the step was observed with (the buffered mask is per block).

    ```mlir
    %s2 = spin.commit %s1 accepted(%a : tensor<2xi32>)
        {block_size = 64 : i64, decay = 5.0e-01,
         mtp_update = #spin.mtp_update<prefix>}
        : !spin.state<layer = 0>
    ```
  }];
  let arguments = (ins
    Arg<Spin_StateType, "the layer's state",
        [MemRead<Spin_StateResource>, MemWrite<Spin_StateResource>]>:$state,
    Spin_RequestI32Tensor:$accepted,
    Spin_PositiveI64Attr:$block_size,
    Spin_UnitIntervalF64Attr:$decay,
    DefaultValuedAttr<Spin_MtpUpdateAttr, "::mlir::spin::MtpUpdate::prefix">:$mtp_update);
  let results = (outs Spin_StateType:$new_state);
  let assemblyFormat = [{
    $state `accepted` `(` $accepted `:` type($accepted) `)`
    attr-dict `:` qualified(type($state))
  }];
}

//===----------------------------------------------------------------------===//
// Fused forms (produced by spin-fuse; one GPU kernel each)
//===----------------------------------------------------------------------===//

def Spin_FusedSelectOp : Spin_Op<"fused_select"> {
  let summary = "predict + pool + select_blocks in one op";
  let description = [{
    `spin.predict`, then `spin.pool` (variant A1 only), then
    `spin.select_blocks`, with the same state, positions and lengths: the
    block mask of a step straight from the state, without materialising the
    `[B, R, NS]` prediction. The attributes are those of the three ops;
    `pooling` is required for A1 and absent for A0 and A2 (which do not pool
    predictions). It reads only the state and the step's positions and
    lengths, not the queries, which is what lets `spin-schedule-async` start
    it before the layer's inputs exist.

    ```mlir
    %m = spin.fused_select %s positions(%p : tensor<2x1xi32>)
        lengths(%n : tensor<2x1xi32>)
        {topk = 512 : i64, block_size = 64 : i64, sparsity = 5.0e-01,
         pooling = #spin.pooling<max>}
        : !spin.state<layer = 0> -> tensor<2x16xi1>
    ```
  }];
  let arguments = (ins
    Arg<Spin_StateType, "the layer's state", [MemRead<Spin_StateResource>]>:$state,
    Spin_RowI32Tensor:$positions,
    Spin_RowI32Tensor:$lengths,
    Spin_PositiveI64Attr:$topk,
    Spin_PositiveI64Attr:$block_size,
    Spin_UnitIntervalF64Attr:$sparsity,
    DefaultValuedAttr<Spin_UnitIntervalF64Attr, "0.0">:$explore,
    DefaultValuedAttr<I64Attr, "0">:$seed,
    DefaultValuedAttr<Spin_ReductionAttr, "::mlir::spin::Reduction::a1">:$reduction,
    DefaultValuedAttr<Spin_MtpMaskAttr, "::mlir::spin::MtpMask::union_">:$mtp_mask,
    OptionalAttr<Spin_PoolingKindAttr>:$pooling,
    DefaultValuedAttr<Spin_ExplorePolicyAttr,
                      "::mlir::spin::ExplorePolicy::random">:$explore_policy);
  let results = (outs Spin_BlockMaskTensor:$mask);
  let assemblyFormat = [{
    $state `positions` `(` $positions `:` type($positions) `)`
    `lengths` `(` $lengths `:` type($lengths) `)`
    attr-dict `:` qualified(type($state)) `->` type($mask)
  }];
  let hasVerifier = 1;
}

def Spin_FusedScoreOp : Spin_Op<"fused_score", [AttrSizedOperandSegments]> {
  let summary = "sparse_indexer + topk (+ ema_update or observe) in one op";
  let description = [{
    Scores the selected blocks (`spin.sparse_indexer`), takes each row's
    top-`k` over them (`spin.topk` with the same mask) and, when `state` is
    given, folds the scores into it in the same pass over the keys: an EMA
    update for a decode step (`update = #spin.update<ema>`, one row) or
    buffering for a later `spin.commit` (`update = #spin.update<observe>`,
    MTP: row 0 folded, the other rows buffered). `state`, `positions`,
    `update` and `decay` come together, with `pooling` for a `level = block`
    state; without them the op is pure. `scores` is the sparse score tensor (-inf outside the scored
    slots); lowerings skip writing it when it has no use.

    ```mlir
    %t, %z, %s1 = spin.fused_score q(%q : tensor<2x1x64x128xbf16>)
        w(%w : tensor<2x1x64xf32>) keys(%k : tensor<?x64x128xbf16>)
        block_table(%bt : tensor<2x16xi32>) lengths(%n : tensor<2x1xi32>)
        mask(%m : tensor<2x16xi1>)
        state(%s : !spin.state<layer = 0>) positions(%p : tensor<2x1xi32>)
        {k = 512 : i64, block_size = 64 : i64, update = #spin.update<ema>,
         decay = 5.0e-01}
        -> tensor<2x1x512xi32>, tensor<2x1x1024xf32>, !spin.state<layer = 0>
    ```
  }];
  let arguments = (ins
    Spin_QueryTensor:$q,
    Spin_WeightTensor:$w,
    Spin_KeyCacheTensor:$keys,
    Optional<Spin_ScaleTensor>:$scales,
    Spin_BlockTableTensor:$block_table,
    Spin_RowI32Tensor:$lengths,
    Spin_BlockMaskTensor:$mask,
    Arg<Optional<Spin_StateType>, "the layer's state, when the update is fused",
        [MemRead<Spin_StateResource>, MemWrite<Spin_StateResource>]>:$state,
    Optional<Spin_RowI32Tensor>:$positions,
    Spin_PositiveI64Attr:$k,
    Spin_PositiveI64Attr:$block_size,
    OptionalAttr<Spin_UpdateKindAttr>:$update,
    OptionalAttr<Spin_UnitIntervalF64Attr>:$decay,
    OptionalAttr<Spin_PoolingKindAttr>:$pooling);
  let results = (outs
    Spin_TopKTensor:$indices,
    Spin_RowScoresTensor:$scores,
    Optional<Spin_StateType>:$new_state);
  let assemblyFormat = [{
    `q` `(` $q `:` type($q) `)`
    `w` `(` $w `:` type($w) `)`
    `keys` `(` $keys `:` type($keys) `)`
    (`scales` `(` $scales^ `:` type($scales) `)`)?
    `block_table` `(` $block_table `:` type($block_table) `)`
    `lengths` `(` $lengths `:` type($lengths) `)`
    `mask` `(` $mask `:` type($mask) `)`
    (`state` `(` $state^ `:` qualified(type($state)) `)`)?
    (`positions` `(` $positions^ `:` type($positions) `)`)?
    attr-dict `->` type($indices) `,` type($scores) (`,` qualified(type($new_state))^)?
  }];
  let hasVerifier = 1;
}

#endif // SPIN_DIALECT_SPIN_IR_SPINOPS_TD
