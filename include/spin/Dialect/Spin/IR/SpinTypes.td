//===- SpinTypes.td - spin types ---------------------------*- tablegen -*-===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
//===----------------------------------------------------------------------===//

#ifndef SPIN_DIALECT_SPIN_IR_SPINTYPES_TD
#define SPIN_DIALECT_SPIN_IR_SPINTYPES_TD

include "spin/Dialect/Spin/IR/SpinAttrs.td"
include "mlir/IR/AttrTypeBase.td"

def Spin_StateLevelParameter : EnumParameter<Spin_StateLevel> {
  let defaultValue = "::mlir::spin::StateLevel::slot";
}

/// A boolean type parameter written `true` / `false`, false by default (and
/// then omitted from the printed type).
def Spin_FlagParameter : AttrOrTypeParameter<"bool", "a flag (true or false)"> {
  let defaultValue = "false";
  let parser = [{ [&]() -> ::mlir::FailureOr<bool> {
    ::llvm::StringRef keyword;
    ::llvm::SMLoc loc = $_parser.getCurrentLocation();
    if (::mlir::failed($_parser.parseKeyword(&keyword)))
      return ::mlir::failure();
    if (keyword == "true")
      return true;
    if (keyword == "false")
      return false;
    return $_parser.emitError(loc, "expected 'true' or 'false', got '")
           << keyword << "'";
  }() }];
  let printer = [{ $_printer << ($_self ? "true" : "false") }];
}

class Spin_Type<string name, string typeMnemonic, list<Trait> traits = []>
    : TypeDef<Spin_Dialect, name, traits> {
  let mnemonic = typeMnemonic;
}

def Spin_StateType : Spin_Type<"State", "state"> {
  let summary = "handle to one indexer layer's SPIN state for a batch";
  let description = [{
    Names the SPIN state (SPIN_SPEC §2) of one indexer layer for every request
    of the batch: the EMA vectors `V` and `D` (per slot and per relative
    offset for `level = slot`; per block and per block offset for
    `level = block`, the A2 variant), the iteration counter `it`, and the
    buffered MTP observations. The runtime owns the memory; the IR only says
    which layer it is and orders its reads and writes.

    `layer` is the stable id the runtime files the state under (and part of
    the exploration hash of SPIN_SPEC §3.7). `level` defaults to `slot`.
    `last_observed = true` adds, per request and block, the iteration at
    which the block was last scored (SPIN_SPEC §7.1): the staleness-score
    and block-age exploration policies rank blocks by it. The field exists
    only in such states, so the layout of every other state stays as it is.

    ```mlir
    !spin.state<layer = 3>
    !spin.state<layer = 0, level = block>
    !spin.state<layer = 1, last_observed = true>
    ```
  }];
  let parameters = (ins
    "int64_t":$layer,
    Spin_StateLevelParameter:$level,
    Spin_FlagParameter:$last_observed);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

#endif // SPIN_DIALECT_SPIN_IR_SPINTYPES_TD
