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
