//===- SpinDialect.cpp - spin dialect registration ------------------------===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
//===----------------------------------------------------------------------===//

#include "spin/Dialect/Spin/IR/SpinDialect.h"
#include "spin/Dialect/Spin/IR/SpinOps.h"

#include "spin/Runtime/Abi.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "llvm/ADT/TypeSwitch.h"

#include <limits>
#include <string>

using namespace mlir;
using namespace mlir::spin;

#include "spin/Dialect/Spin/IR/SpinEnums.cpp.inc"
#include "spin/Dialect/Spin/IR/SpinOpsDialect.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "spin/Dialect/Spin/IR/SpinAttrs.cpp.inc"

void SpinDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "spin/Dialect/Spin/IR/SpinOps.cpp.inc"
      >();
  registerAttributes();
  registerTypes();
}

void SpinDialect::registerAttributes() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "spin/Dialect/Spin/IR/SpinAttrs.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// Discardable attributes
//===----------------------------------------------------------------------===//

namespace {

/// Checks that `attr`'s value is of kind `T` (and, with `check`, acceptable).
template <typename T>
LogicalResult expectKind(function_ref<InFlightDiagnostic()> emitError,
                         NamedAttribute attr, StringRef what,
                         function_ref<bool(T)> check = nullptr) {
  auto value = dyn_cast<T>(attr.getValue());
  if (!value || (check && !check(value)))
    return emitError() << "'" << attr.getName().getValue() << "' must be "
                       << what << ", got " << attr.getValue();
  return success();
}

/// Whether `value` is in [least, most]. Values wider than 64 bits are
/// compared whole: the passes read these attributes with getInt().
bool inRange(IntegerAttr value, int64_t least,
             int64_t most = std::numeric_limits<int64_t>::max()) {
  const APInt &v = value.getValue();
  if (v.getSignificantBits() > 64)
    return false;
  int64_t x = v.getSExtValue();
  return x >= least && x <= most;
}

bool nonNegative(IntegerAttr value) { return inRange(value, 0); }

bool isNonNegativeIntArray(ArrayAttr values, int64_t least) {
  return llvm::all_of(values, [&](Attribute a) {
    auto i = dyn_cast<IntegerAttr>(a);
    return i && inRange(i, least);
  });
}

/// `spin.layer`: a non-negative integer, and a layer id the state type and
/// the runtime can hold.
LogicalResult verifyLayerAttr(function_ref<InFlightDiagnostic()> emitError,
                              NamedAttribute attr) {
  if (failed(expectKind<IntegerAttr>(emitError, attr, "a non-negative integer",
                                     nonNegative)))
    return failure();
  return expectKind<IntegerAttr>(
      emitError, attr,
      "a layer id of at most " + std::to_string(kMaxLayerId),
      [](IntegerAttr i) { return inRange(i, 0, kMaxLayerId); });
}

/// Verifies one argument attribute of a function (`func`'s argument `arg`).
LogicalResult verifyArgAttr(function_ref<InFlightDiagnostic()> emitError,
                            Operation *func, unsigned arg,
                            NamedAttribute attr) {
  namespace abi = ::spin::runtime;
  StringRef name = attr.getName().getValue();
  auto argAttr = [&](StringRef other) -> Attribute {
    if (auto f = dyn_cast<FunctionOpInterface>(func))
      return f.getArgAttr(arg, other);
    return nullptr;
  };
  if (name == SpinDialect::InputAttrHelper::getNameStr() ||
      name == SpinDialect::NameAttrHelper::getNameStr())
    return expectKind<StringAttr>(emitError, attr, "a non-empty string",
                                  [](StringAttr s) { return !s.empty(); });
  if (name == SpinDialect::PositionsAttrHelper::getNameStr() ||
      name == SpinDialect::RequestIdsAttrHelper::getNameStr() ||
      name == SpinDialect::AcceptedAttrHelper::getNameStr() ||
      name == SpinDialect::ResetAttrHelper::getNameStr() ||
      name == SpinDialect::SlotsAttrHelper::getNameStr() ||
      // A result's mark moves to its out-parameter when bufferization
      // turns results into arguments.
      name == SpinDialect::SparsityAttrHelper::getNameStr())
    return expectKind<UnitAttr>(emitError, attr, "a unit attribute");
  if (name == SpinDialect::StateAttrHelper::getNameStr()) {
    if (failed(expectKind<StringAttr>(
            emitError, attr,
            "the name of a state field (" + abi::stateFieldList() + ")",
            [](StringAttr s) {
              return abi::stateFieldFromName(s.getValue().str()).has_value();
            })))
      return failure();
    if (!argAttr(SpinDialect::LayerAttrHelper::getNameStr()))
      return emitError() << "'" << name << "' needs a '"
                         << SpinDialect::LayerAttrHelper::getNameStr()
                         << "' on the same argument";
    return success();
  }
  if (name == SpinDialect::LayerAttrHelper::getNameStr())
    return verifyLayerAttr(emitError, attr);
  if (name == SpinDialect::ArgumentAttrHelper::getNameStr() ||
      name == SpinDialect::DimAttrHelper::getNameStr())
    return expectKind<IntegerAttr>(emitError, attr, "a non-negative integer",
                                   nonNegative);
  if (name == SpinDialect::BytesAttrHelper::getNameStr())
    return expectKind<IntegerAttr>(
        emitError, attr, "a positive integer",
        [](IntegerAttr i) { return i.getValue().isStrictlyPositive(); });
  if (name == SpinDialect::RoleAttrHelper::getNameStr())
    return expectKind<StringAttr>(
        emitError, attr, "an argument role or a launch-parameter kind",
        [](StringAttr s) {
          std::string role = s.getValue().str();
          return abi::argRoleFromName(role) ||
                 abi::launchArgKindFromName(role);
        });
  if (name == SpinDialect::DtypeAttrHelper::getNameStr())
    return expectKind<StringAttr>(
        emitError, attr, "an element type of the runtime", [](StringAttr s) {
          return abi::dtypeFromName(s.getValue().str()).has_value();
        });
  if (name == SpinDialect::ShapeAttrHelper::getNameStr())
    return expectKind<ArrayAttr>(
        emitError, attr, "an array of sizes (-1 for a run-time size)",
        [](ArrayAttr a) { return isNonNegativeIntArray(a, -1); });
  return emitError() << "'" << name
                     << "' is not an argument attribute of the spin dialect";
}

} // namespace

LogicalResult SpinDialect::verifyRegionArgAttribute(Operation *op,
                                                    unsigned region,
                                                    unsigned arg,
                                                    NamedAttribute attr) {
  auto emitError = [&]() {
    return op->emitOpError() << "argument " << arg << ": ";
  };
  if (failed(verifyArgAttr(emitError, op, arg, attr)))
    return failure();
  // One role marker per argument.
  auto func = dyn_cast<FunctionOpInterface>(op);
  if (!func || region != 0)
    return success();
  StringRef markers[] = {
      InputAttrHelper::getNameStr(),     PositionsAttrHelper::getNameStr(),
      RequestIdsAttrHelper::getNameStr(), AcceptedAttrHelper::getNameStr(),
      ResetAttrHelper::getNameStr(),     SlotsAttrHelper::getNameStr(),
      StateAttrHelper::getNameStr()};
  if (!llvm::is_contained(markers, attr.getName().getValue()))
    return success();
  for (StringRef other : markers)
    if (other != attr.getName().getValue() && func.getArgAttr(arg, other))
      return emitError() << "'" << attr.getName().getValue() << "' and '"
                         << other << "' mark the same argument";
  return success();
}

LogicalResult SpinDialect::verifyRegionResultAttribute(Operation *op,
                                                       unsigned region,
                                                       unsigned result,
                                                       NamedAttribute attr) {
  if (attr.getName().getValue() == SparsityAttrHelper::getNameStr())
    return expectKind<UnitAttr>(
        [&]() { return op->emitOpError() << "result " << result << ": "; },
        attr, "a unit attribute");
  return op->emitOpError() << "result " << result << ": '"
                           << attr.getName().getValue()
                           << "' is not a result attribute of the spin dialect";
}

LogicalResult SpinDialect::verifyOperationAttribute(Operation *op,
                                                    NamedAttribute attr) {
  auto emitError = [&]() { return op->emitOpError(); };
  StringRef name = attr.getName().getValue();
  if (name == LaunchPlanAttrHelper::getNameStr()) {
    if (!isa<FunctionOpInterface>(op))
      return emitError() << "'" << name << "' marks functions only";
    return expectKind<UnitAttr>(emitError, attr, "a unit attribute");
  }
  if (name == EventsAttrHelper::getNameStr() ||
      name == LayersAttrHelper::getNameStr() ||
      name == CapacityAttrHelper::getNameStr() ||
      name == BlockSizeAttrHelper::getNameStr() ||
      name == PageSizeAttrHelper::getNameStr() ||
      name == StreamAttrHelper::getNameStr())
    return expectKind<IntegerAttr>(emitError, attr, "a non-negative integer",
                                   nonNegative);
  if (name == LayerAttrHelper::getNameStr())
    return verifyLayerAttr(emitError, attr);
  if (name == RecordAttrHelper::getNameStr())
    return expectKind<IntegerAttr>(
        emitError, attr, "an event index, or -1 for none",
        [](IntegerAttr i) { return inRange(i, -1); });
  if (name == WaitAttrHelper::getNameStr())
    return expectKind<ArrayAttr>(
        emitError, attr, "an array of event indices",
        [](ArrayAttr a) { return isNonNegativeIntArray(a, 0); });
  if (name == ScoreConfigAttrHelper::getNameStr()) {
    if (!isa<DenseIndexerOp, FusedScoreOp>(op))
      return emitError() << "'" << name << "' configures the scoring of "
                         << "spin.dense_indexer and spin.fused_score only";
    return expectKind<ScoreConfigAttr>(emitError, attr, "a #spin.score_config");
  }
  if (name == TopkConfigAttrHelper::getNameStr()) {
    if (!isa<TopKOp, FusedScoreOp>(op))
      return emitError() << "'" << name << "' configures the top-K of "
                         << "spin.topk and spin.fused_score only";
    return expectKind<TopKConfigAttr>(emitError, attr, "a #spin.topk_config");
  }
  if (name == SelectConfigAttrHelper::getNameStr()) {
    if (!isa<FusedSelectOp>(op))
      return emitError() << "'" << name << "' configures spin.fused_select only";
    return expectKind<SelectConfigAttr>(emitError, attr,
                                        "a #spin.select_config");
  }
  return emitError() << "'" << name
                     << "' is not an operation attribute of the spin dialect";
}

//===----------------------------------------------------------------------===//
// GPU kernel configurations
//===----------------------------------------------------------------------===//

LogicalResult
ScoreConfigAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                        int64_t warps, int64_t tilesPerWarp, int64_t mTiles,
                        bool wgmma, bool copyWarpgroup, bool evictFirst) {
  if (warps < 1 || warps > 32)
    return emitError() << "score_config: warps must be in [1, 32], got "
                       << warps;
  if (tilesPerWarp < 1)
    return emitError() << "score_config: tiles_per_warp must be positive, got "
                       << tilesPerWarp;
  if (mTiles != 1 && mTiles != 2)
    return emitError() << "score_config: m_tiles must be 1 or 2, got "
                       << mTiles;
  if (wgmma && (mTiles != 1 || warps % 4 != 0))
    return emitError() << "score_config: wgmma needs m_tiles = 1 and warps a "
                          "multiple of 4, got m_tiles = "
                       << mTiles << ", warps = " << warps;
  // (wgmma's warps, a multiple of 4, make the CTA's slots whole 64-slot
  // tiles.)
  if (copyWarpgroup && !wgmma)
    return emitError() << "score_config: copy_warpgroup needs wgmma";
  // Only the copier's tensor-map loads carry the cache policy.
  if (evictFirst && !copyWarpgroup)
    return emitError() << "score_config: evict_first needs copy_warpgroup";
  return success();
}

LogicalResult
SelectConfigAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                         bool prefetchOnMiss, int64_t scoringPrefetchCtas,
                         int64_t rowCtas) {
  if (rowCtas < 1 || rowCtas > 8)
    return emitError() << "select_config: row_ctas must be in [1, 8] (a "
                          "portable cluster), got "
                       << rowCtas;
  if (scoringPrefetchCtas < 0 || scoringPrefetchCtas > 2147483647)
    return emitError() << "select_config: scoring_prefetch_ctas must be in "
                          "[0, 2^31), got "
                       << scoringPrefetchCtas;
  if (prefetchOnMiss && scoringPrefetchCtas > 0)
    return emitError() << "select_config: scoring_prefetch_ctas needs "
                          "prefetch_on_miss = false (with the miss prefetch "
                          "the scoring kernel does not start early), got "
                       << scoringPrefetchCtas;
  return success();
}

LogicalResult
TopKConfigAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                       int64_t threads, int64_t cluster, bool mergeRanks) {
  if (threads != 512 && threads != 1024)
    return emitError() << "topk_config: threads must be 512 or 1024, got "
                       << threads;
  if (cluster < 1 || cluster > 8)
    return emitError() << "topk_config: cluster must be in [1, 8], got "
                       << cluster;
  if (mergeRanks && (threads != 512 || cluster < 2))
    return emitError() << "topk_config: merge_ranks needs 512 threads and a "
                          "cluster of at least 2, got threads = "
                       << threads << ", cluster = " << cluster;
  return success();
}
