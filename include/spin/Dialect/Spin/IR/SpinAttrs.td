//===- SpinAttrs.td - spin attributes and enums ------------*- tablegen -*-===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
//===----------------------------------------------------------------------===//

#ifndef SPIN_DIALECT_SPIN_IR_SPINATTRS_TD
#define SPIN_DIALECT_SPIN_IR_SPINATTRS_TD

include "spin/Dialect/Spin/IR/SpinDialect.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"

//===----------------------------------------------------------------------===//
// Enums
//===----------------------------------------------------------------------===//

def Spin_PoolingKind : I32EnumAttr<"PoolingKind",
    "how slot scores are pooled into a block score (SPIN_SPEC §3.3)", [
      I32EnumAttrCase<"max", 0>,
      I32EnumAttrCase<"mean", 1>,
      I32EnumAttrCase<"top4", 2>
    ]> {
  let cppNamespace = "::mlir::spin";
  let genSpecializedAttr = 0;
}

def Spin_Reduction : I32EnumAttr<"Reduction",
    "how slot-level predictions become a block selection (SPIN_SPEC §3)", [
      I32EnumAttrCase<"a0", 0>,
      I32EnumAttrCase<"a1", 1>,
      I32EnumAttrCase<"a2", 2>
    ]> {
  let cppNamespace = "::mlir::spin";
  let genSpecializedAttr = 0;
}

def Spin_ExplorePolicy : I32EnumAttr<"ExplorePolicy",
    "how the exploration budget picks blocks (SPIN_SPEC §3.7, §7)", [
      I32EnumAttrCase<"random", 0>,
      I32EnumAttrCase<"staleness_score", 1>,
      I32EnumAttrCase<"block_age", 2>
    ]> {
  let cppNamespace = "::mlir::spin";
  let genSpecializedAttr = 0;
}

def Spin_MtpMask : I32EnumAttr<"MtpMask",
    "which blocks an MTP verification step scores (SPIN_SPEC §4)", [
      I32EnumAttrCase<"union_", 0, "union">,
      I32EnumAttrCase<"row0", 1>
    ]> {
  let cppNamespace = "::mlir::spin";
  let genSpecializedAttr = 0;
}

def Spin_MtpUpdate : I32EnumAttr<"MtpUpdate",
    "which accepted MTP rows update the state at commit (SPIN_SPEC §4)", [
      I32EnumAttrCase<"prefix", 0>,
      I32EnumAttrCase<"row0", 1>
    ]> {
  let cppNamespace = "::mlir::spin";
  let genSpecializedAttr = 0;
}

def Spin_UpdateKind : I32EnumAttr<"UpdateKind",
    "how a scored step changes the state: now (decode) or at commit (MTP)", [
      I32EnumAttrCase<"ema", 0>,
      I32EnumAttrCase<"observe", 1>
    ]> {
  let cppNamespace = "::mlir::spin";
  let genSpecializedAttr = 0;
}

def Spin_StateLevel : I32EnumAttr<"StateLevel",
    "granularity of the EMA state: per slot/offset (A0, A1) or per block (A2)", [
      I32EnumAttrCase<"slot", 0>,
      I32EnumAttrCase<"block", 1>
    ]> {
  let cppNamespace = "::mlir::spin";
  let genSpecializedAttr = 0;
}

//===----------------------------------------------------------------------===//
// Enum attributes
//===----------------------------------------------------------------------===//

class Spin_EnumAttr<EnumAttrInfo info, string mnemonic>
    : EnumAttr<Spin_Dialect, info, mnemonic> {
  let assemblyFormat = "`<` $value `>`";
}

def Spin_PoolingKindAttr : Spin_EnumAttr<Spin_PoolingKind, "pooling">;
def Spin_ReductionAttr : Spin_EnumAttr<Spin_Reduction, "reduction">;
def Spin_ExplorePolicyAttr : Spin_EnumAttr<Spin_ExplorePolicy, "explore_policy">;
def Spin_MtpMaskAttr : Spin_EnumAttr<Spin_MtpMask, "mtp_mask">;
def Spin_MtpUpdateAttr : Spin_EnumAttr<Spin_MtpUpdate, "mtp_update">;
def Spin_UpdateKindAttr : Spin_EnumAttr<Spin_UpdateKind, "update">;

//===----------------------------------------------------------------------===//
// GPU kernel configurations
//===----------------------------------------------------------------------===//

// Chosen by spin-configure-gpu-kernels, read by convert-spin-to-gpu; set
// them by hand in the IR to override the choice for one op.
class Spin_ConfigAttr<string name, string attrMnemonic>
    : AttrDef<Spin_Dialect, name> {
  let mnemonic = attrMnemonic;
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

def Spin_ScoreConfigAttr : Spin_ConfigAttr<"ScoreConfig", "score_config"> {
  let summary = "How a scoring kernel tiles its work";
  let description = [{
    On `spin.dense_indexer` and `spin.fused_score`: `warps` per CTA, each
    scoring `tiles_per_warp` warp tiles of `m_tiles` 16-slot MMA tiles
    (1 or 2); `wgmma` scores with sm_90a's warpgroup MMA instead of
    mma.sync (then one M tile and a multiple of 4 warps). With
    `copy_warpgroup` (wgmma only) a CTA is one warpgroup that copies 64-slot
    key tiles and their scales through tensor maps into shared-memory
    rings and two to four that multiply them, both wgmma operands in shared
    memory; `warps x tiles_per_warp x 16` is then the CTA's slots.
    `evict_first` (copy_warpgroup only): the copier loads keys and scales
    with an L2 evict-first policy, so that the scores the kernel writes
    stay in the L2 for the kernels that read them next (the top-K, an MTP
    step's observe kernel).
  }];
  let parameters = (ins "int64_t":$warps, "int64_t":$tiles_per_warp,
                        "int64_t":$m_tiles, "bool":$wgmma,
                        DefaultValuedParameter<"bool", "false">:$copy_warpgroup,
                        DefaultValuedParameter<"bool", "false">:$evict_first);
}

def Spin_TopKConfigAttr : Spin_ConfigAttr<"TopKConfig", "topk_config"> {
  let summary = "How a top-K kernel splits its rows";
  let description = [{
    On `spin.topk` and `spin.fused_score`: a cluster of `cluster` CTAs of
    `threads` threads (512 or 1024) per row, a portable cluster of 1 to 8;
    `merge_ranks` sorts the candidates by merge ranks across the cluster
    (512 threads, at least 2 CTAs) instead of in the leader.
  }];
  let parameters = (ins "int64_t":$threads, "int64_t":$cluster,
                        "bool":$merge_ranks);
}

def Spin_SelectConfigAttr : Spin_ConfigAttr<"SelectConfig", "select_config"> {
  let summary = "How a selection's prediction meets a cache miss, and how "
                "many CTAs select a request's rows";
  let description = [{
    On `spin.fused_select`. Of a single-row step with max pooling (the
    prediction cache): with `prefetch_on_miss` a row that missed the cache
    at its previous step prefetches its V and D lines; without it the
    select kernel lets the scoring kernel start before its wait, and the
    first `scoring_prefetch_ctas` scoring CTAs in launch order (0: none)
    prefetch their first key tiles where the request's previous step's
    block list placed them, while the select kernel runs.
    Of a step of several rows: `row_ctas` CTAs a request, 1 or one per row
    (2 to 8, a portable thread-block cluster), which then select the rows
    side by side, the first merging their masks through distributed shared
    memory.
  }];
  let parameters = (ins "bool":$prefetch_on_miss,
                        DefaultValuedParameter<"int64_t", "0">:$scoring_prefetch_ctas,
                        DefaultValuedParameter<"int64_t", "1">:$row_ctas);
}

//===----------------------------------------------------------------------===//
// Attribute constraints
//===----------------------------------------------------------------------===//

def Spin_UnitIntervalF64Attr : ConfinedAttr<F64Attr, [AttrConstraint<
    CPred<"::llvm::cast<::mlir::FloatAttr>($_self).getValueAsDouble() >= 0.0 && "
          "::llvm::cast<::mlir::FloatAttr>($_self).getValueAsDouble() <= 1.0">,
    "whose value is in [0, 1]">]>;

// Block sizes and top-K counts: slot indices, lengths and positions are
// i32, so a size past 2^31 - 1 can never be met (and would overflow the
// 64-bit slot arithmetic of the lowerings).
def Spin_PositiveI64Attr
    : ConfinedAttr<I64Attr, [IntPositive, IntMaxValue<2147483647>]>;

#endif // SPIN_DIALECT_SPIN_IR_SPINATTRS_TD
