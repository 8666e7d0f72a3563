//===- SpinDialect.td - spin dialect definition ------------*- tablegen -*-===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
//===----------------------------------------------------------------------===//

#ifndef SPIN_DIALECT_SPIN_IR_SPINDIALECT_TD
#define SPIN_DIALECT_SPIN_IR_SPINDIALECT_TD

include "mlir/IR/OpBase.td"

def Spin_Dialect : Dialect {
  let name = "spin";
  let cppNamespace = "::mlir::spin";
  let summary = "Indexer-based sparse attention and SPIN block prediction.";
  let description = [{
    The `spin` dialect expresses the lightning indexer of DeepSeek-V3.2/V4 and
    GLM-5 style sparse attention, and SPIN (Shadow Predictive Indexer), which
    predicts the important KV blocks of a decode step from exponential moving
    averages of earlier indexer scores and scores only those blocks.

    Conventions shared by every op (dimension letters used in the docs):

    * `B` requests in a ragged batch, `R` query rows per request (1 for plain
      decode, `d + 1` for an MTP verification step with draft length `d`),
      `H` indexer heads, `Dh` head dimension.
    * The key cache is paged: `P` physical pages of `S` slots each; request
      `b` reaches its logical page `j` through `block_table[b, j]`; `MB` is the
      block-table width. A request's slot space has `NS = MB * S` slots.
    * SPIN blocks hold `block_size` slots and tile the page (`block_size`
      divides `S`), so a request has `NB = NS / block_size` blocks.
    * `lengths[b, r]` is the number of visible slots `N` of row `r`;
      `positions[b, r]` is its query position `p` (slot coordinates,
      `N <= p + 1`).
    * SPIN state is owned by the runtime and named in the IR by a
      `!spin.state` handle; ops that change it return the new version, so
      the order of state updates is explicit SSA dataflow.

    The semantics are fixed by the project's SPIN_SPEC (sections cited in op
    descriptions as "§n").
  }];
  // Every `spin.*` attribute the project attaches to functions, their
  // arguments and results, and launch ops; the dialect verifies each
  // (SpinDialect.cpp) and rejects any other `spin.*` attribute.
  let discardableAttrs = (ins
    // Step-function arguments (docs/Runtime-ABI.md): the role of each, as
    // the compiler-runtime contract names it (spin/Runtime/Abi.def).
    "::mlir::StringAttr":$input,
    "::mlir::UnitAttr":$positions,
    "::mlir::UnitAttr":$request_ids,
    "::mlir::UnitAttr":$accepted,
    "::mlir::UnitAttr":$reset,
    "::mlir::UnitAttr":$slots,
    "::mlir::StringAttr":$state,
    // The state layer of a `spin.state` argument, or the layer a dense
    // indexer op is pinned to.
    "::mlir::IntegerAttr":$layer,
    // A graph result that reports the realized block sparsity.
    "::mlir::UnitAttr":$sparsity,
    // The GPU launch plan (docs/GPU-ABI.md): the plan function, its
    // arguments and its launches.
    "::mlir::UnitAttr":$launch_plan,
    "::mlir::IntegerAttr":$events,
    "::mlir::IntegerAttr":$layers,
    "::mlir::IntegerAttr":$capacity,
    "::mlir::IntegerAttr":$block_size,
    "::mlir::IntegerAttr":$page_size,
    "::mlir::StringAttr":$role,
    "::mlir::StringAttr":$name,
    "::mlir::StringAttr":$dtype,
    "::mlir::ArrayAttr":$shape,
    "::mlir::IntegerAttr":$bytes,
    "::mlir::IntegerAttr":$argument,
    "::mlir::IntegerAttr":$dim,
    "::mlir::IntegerAttr":$stream,
    "::mlir::ArrayAttr":$wait,
    "::mlir::IntegerAttr":$record,
    // The tuning of an op's kernels (spin-configure-gpu-kernels).
    "::mlir::spin::ScoreConfigAttr":$score_config,
    "::mlir::spin::TopKConfigAttr":$topk_config,
    "::mlir::spin::SelectConfigAttr":$select_config
  );
  let hasOperationAttrVerify = 1;
  let hasRegionArgAttrVerify = 1;
  let hasRegionResultAttrVerify = 1;
  let useDefaultTypePrinterParser = 1;
  let useDefaultAttributePrinterParser = 1;
  let extraClassDeclaration = [{
  private:
    void registerAttributes();
    void registerTypes();
  public:
  }];
}

#endif // SPIN_DIALECT_SPIN_IR_SPINDIALECT_TD
