//===- SpinOps.cpp - spin operations and their verifiers ------------------===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
// Element types and ranks are checked by the ODS type constraints; the
// verifiers here check the rules that relate several operands and
// attributes: shared batch/row/head sizes, slot and block counts, the key
// format against the scales, and which attributes a state level needs.
// Dynamic sizes are accepted and left to the runtime's checks.
//
//===----------------------------------------------------------------------===//

#include "spin/Dialect/Spin/IR/SpinOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpImplementation.h"

using namespace mlir;
using namespace mlir::spin;

namespace {

/// One dimension of a named operand or result, for diagnostics that say
/// exactly which sizes disagree.
struct NamedDim {
  StringRef name;
  Type type;
  unsigned index;

  int64_t size() const { return cast<ShapedType>(type).getDimSize(index); }
  bool isStatic() const { return !ShapedType::isDynamic(size()); }
};

} // namespace

LogicalResult mlir::spin::verifySizesFitInt32(Operation *op) {
  auto check = [&](Type type, StringRef kind, unsigned index) -> LogicalResult {
    auto shaped = dyn_cast<ShapedType>(type);
    if (!shaped || !shaped.hasRank())
      return success();
    for (auto [dim, size] : llvm::enumerate(shaped.getShape()))
      if (!ShapedType::isDynamic(size) && size > kMaxStaticSize)
        return op->emitOpError()
               << kind << " #" << index << " dim " << dim << " is " << size
               << ": static sizes must be at most " << kMaxStaticSize
               << " (the runtime's sizes and indices are 32-bit)";
    return success();
  };
  for (auto [index, type] : llvm::enumerate(op->getOperandTypes()))
    if (failed(check(type, "operand", index)))
      return failure();
  for (auto [index, type] : llvm::enumerate(op->getResultTypes()))
    if (failed(check(type, "result", index)))
      return failure();
  return success();
}

/// Checks that every static size among `dims` is the same; `what` says which
/// quantity the dimensions share (batch size, rows, ...).
static LogicalResult verifySameSize(Operation *op, StringRef what,
                                    ArrayRef<NamedDim> dims) {
  const NamedDim *first = nullptr;
  for (const NamedDim &dim : dims) {
    if (!dim.isStatic())
      continue;
    if (!first) {
      first = &dim;
      continue;
    }
    if (dim.size() != first->size())
      return op->emitOpError()
             << what << " mismatch: '" << dim.name << "' dim " << dim.index
             << " is " << dim.size() << " but '" << first->name << "' dim "
             << first->index << " is " << first->size();
  }
  return success();
}

/// A value laid out by request and query row: dim 0 is the batch and,
/// unless `batchOnly` (a per-request value such as a block mask), dim 1 the
/// row.
struct RowMajorValue {
  StringRef name;
  Type type;
  bool batchOnly = false;
};

/// Checks that `values` agree on the batch size (dim 0), then that those
/// with rows agree on the row count (dim 1).
static LogicalResult verifyBatchAndRows(Operation *op,
                                        ArrayRef<RowMajorValue> values) {
  SmallVector<NamedDim> batch, rows;
  for (const RowMajorValue &value : values) {
    batch.push_back({value.name, value.type, 0});
    if (!value.batchOnly)
      rows.push_back({value.name, value.type, 1});
  }
  if (failed(verifySameSize(op, "batch size", batch)))
    return failure();
  return verifySameSize(op, "row count", rows);
}

/// Checks that a slot count is `blocks * blockSize`, or at least a multiple
/// of `blockSize` when the block count is dynamic.
static LogicalResult verifyBlockTiling(Operation *op, NamedDim slots,
                                       NamedDim blocks, int64_t blockSize) {
  if (!slots.isStatic())
    return success();
  if (blocks.isStatic() && slots.size() != blocks.size() * blockSize)
    return op->emitOpError()
           << "'" << slots.name << "' dim " << slots.index << " ("
           << slots.size() << " slots) must equal '" << blocks.name << "' dim "
           << blocks.index << " (" << blocks.size() << " blocks) times block_size ("
           << blockSize << ")";
  if (slots.size() % blockSize != 0)
    return op->emitOpError()
           << "'" << slots.name << "' dim " << slots.index << " ("
           << slots.size() << " slots) is not a multiple of block_size ("
           << blockSize << ")";
  return success();
}

/// Checks that `attrName` is present exactly when the state is block-level:
/// the A2 variant needs a block size (to locate blocks) and a pooling kind
/// (to reduce observed scores); slot-level states use neither.
static LogicalResult verifyBlockLevelAttr(Operation *op, StateType state,
                                          StringRef attrName, bool present) {
  bool blockLevel = state.getLevel() == StateLevel::block;
  if (blockLevel && !present)
    return op->emitOpError() << "needs '" << attrName
                             << "' with a level = block state (variant A2)";
  if (!blockLevel && present)
    return op->emitOpError() << "takes '" << attrName
                             << "' only with a level = block state (variant A2)";
  return success();
}

/// Checks that a block-selection variant fits the state it reads: A2 keeps
/// block-level EMAs, A0 and A1 slot-level ones; A0 has no block budget, so
/// there is nothing to explore with.
static LogicalResult verifyReduction(Operation *op, StateType state,
                                     Reduction reduction, double explore,
                                     ExplorePolicy policy) {
  bool blockLevel = state.getLevel() == StateLevel::block;
  if (blockLevel != (reduction == Reduction::a2))
    return op->emitOpError() << "reduction " << stringifyReduction(reduction)
                             << " needs a level = "
                             << (reduction == Reduction::a2 ? "block" : "slot")
                             << " state, got " << state;
  if (reduction == Reduction::a0 && explore != 0.0)
    return op->emitOpError("reduction a0 has no block budget to explore with; "
                           "explore must be 0");
  if (reduction == Reduction::a0 && policy != ExplorePolicy::random)
    return op->emitOpError("reduction a0 has no block budget to explore with; "
                           "explore_policy must be random, got ")
           << stringifyExplorePolicy(policy);
  return success();
}

/// Checks that an exploration policy that ranks blocks by age reads a state
/// that keeps the per-block last-observed iterations (SPIN_SPEC §7.1).
static LogicalResult verifyExplorePolicy(Operation *op, StateType state,
                                         ExplorePolicy policy) {
  if (policy == ExplorePolicy::random || state.getLastObserved())
    return success();
  return op->emitOpError() << "explore_policy " << stringifyExplorePolicy(policy)
                           << " ranks blocks by age and needs a state with "
                              "last_observed = true, got "
                           << state;
}

//===----------------------------------------------------------------------===//
// Indexer ops
//===----------------------------------------------------------------------===//

/// Rules shared by spin.dense_indexer and spin.sparse_indexer.
template <typename IndexerOp>
static LogicalResult verifyIndexer(IndexerOp op) {
  Type q = op.getQ().getType(), w = op.getW().getType();
  auto keys = cast<RankedTensorType>(op.getKeys().getType());
  Type blockTable = op.getBlockTable().getType();
  Type lengths = op.getLengths().getType(), scores = op.getScores().getType();

  bool fp8 = isa<Float8E4M3FNType>(keys.getElementType());
  if (fp8 && !op.getScales())
    return op.emitOpError("fp8 e4m3 keys need per-slot 'scales'");
  if (!fp8 && op.getScales())
    return op.emitOpError("'scales' are only taken with fp8 e4m3 keys, not ")
           << keys.getElementType() << " keys";
  Type qElement = cast<RankedTensorType>(q).getElementType();
  if (isa<Float8E4M3FNType>(qElement) && !fp8)
    return op.emitOpError("fp8 e4m3 queries need fp8 e4m3 keys, not ")
           << keys.getElementType() << " keys";

  if (failed(verifyBatchAndRows(op, {{"q", q},
                                     {"w", w},
                                     {"block_table", blockTable, true},
                                     {"lengths", lengths},
                                     {"scores", scores}})) ||
      failed(verifySameSize(op, "head count", {{"q", q, 2}, {"w", w, 2}})) ||
      failed(verifySameSize(op, "head dim", {{"q", q, 3}, {"keys", keys, 2}})))
    return failure();

  if (Value scales = op.getScales()) {
    if (failed(verifySameSize(op, "page count",
                              {{"keys", keys, 0}, {"scales", scales.getType(), 0}})) ||
        failed(verifySameSize(op, "page size",
                              {{"keys", keys, 1}, {"scales", scales.getType(), 1}})))
      return failure();
  }

  NamedDim slots{"scores", scores, 2}, pages{"block_table", blockTable, 1},
      pageSize{"keys", keys, 1};
  if (slots.isStatic() && pages.isStatic() && pageSize.isStatic() &&
      slots.size() != pages.size() * pageSize.size())
    return op.emitOpError() << "'scores' dim 2 (" << slots.size()
                            << " slots) must equal 'block_table' dim 1 ("
                            << pages.size() << " pages) times the page size ("
                            << pageSize.size() << ")";
  return success();
}

LogicalResult DenseIndexerOp::verify() { return verifyIndexer(*this); }

/// Rules of a block mask over an indexer's slot space, shared by
/// spin.sparse_indexer and spin.fused_score.
template <typename IndexerOp>
static LogicalResult verifyIndexerMask(IndexerOp op) {
  int64_t blockSize = op.getBlockSize();
  int64_t pageSize = op.getKeys().getType().getDimSize(1);
  if (!ShapedType::isDynamic(pageSize) && pageSize % blockSize != 0)
    return op.emitOpError() << "block_size (" << blockSize
                            << ") must divide the page size (" << pageSize << ")";
  Type mask = op.getMask().getType(), scores = op.getScores().getType();
  // Compare the mask with every batch-sized operand, not only 'scores': the
  // result's batch size may be dynamic while the inputs' are static.
  if (failed(verifySameSize(op, "batch size",
                            {{"q", op.getQ().getType(), 0},
                             {"w", op.getW().getType(), 0},
                             {"block_table", op.getBlockTable().getType(), 0},
                             {"lengths", op.getLengths().getType(), 0},
                             {"scores", scores, 0},
                             {"mask", mask, 0}})))
    return failure();
  if (failed(verifyBlockTiling(op, {"scores", scores, 2}, {"mask", mask, 1},
                               blockSize)))
    return failure();
  // With a dynamic slot count in 'scores', the mask must still tile the
  // request's slot space NS = MB * S.
  int64_t pages = op.getBlockTable().getType().getDimSize(1);
  int64_t blocks = op.getMask().getType().getDimSize(1);
  if (!ShapedType::isDynamic(pages) && !ShapedType::isDynamic(pageSize) &&
      !ShapedType::isDynamic(blocks) && pages * pageSize != blocks * blockSize)
    return op.emitOpError() << "'mask' dim 1 (" << blocks
                            << " blocks) times block_size (" << blockSize
                            << ") must equal 'block_table' dim 1 (" << pages
                            << " pages) times the page size (" << pageSize << ")";
  return success();
}

LogicalResult SparseIndexerOp::verify() {
  if (failed(verifyIndexer(*this)))
    return failure();
  return verifyIndexerMask(*this);
}

//===----------------------------------------------------------------------===//
// TopKOp
//===----------------------------------------------------------------------===//

LogicalResult TopKOp::verify() {
  Type scores = getScores().getType(), lengths = getLengths().getType();
  auto indices = cast<RankedTensorType>(getIndices().getType());
  if (failed(verifyBatchAndRows(*this, {{"scores", scores},
                                        {"lengths", lengths},
                                        {"indices", indices}})))
    return failure();
  int64_t perRow = indices.getDimSize(2);
  if (!ShapedType::isDynamic(perRow) && perRow != static_cast<int64_t>(getK()))
    return emitOpError() << "result holds " << perRow << " indices per row but k is "
                         << getK();

  std::optional<uint64_t> blockSize = getBlockSize();
  if (getMask() && !blockSize)
    return emitOpError("needs 'block_size' to read a block 'mask'");
  if (!getMask() && blockSize)
    return emitOpError("takes 'block_size' only together with a block 'mask'");
  if (Value mask = getMask()) {
    if (failed(verifySameSize(*this, "batch size",
                              {{"scores", scores, 0},
                               {"lengths", lengths, 0},
                               {"indices", indices, 0},
                               {"mask", mask.getType(), 0}})))
      return failure();
    return verifyBlockTiling(*this, {"scores", scores, 2},
                             {"mask", mask.getType(), 1}, *blockSize);
  }
  return success();
}

//===----------------------------------------------------------------------===//
// PredictOp
//===----------------------------------------------------------------------===//

LogicalResult PredictOp::verify() {
  StateType state = getState().getType();
  if (failed(verifyBlockLevelAttr(*this, state, "block_size",
                                  getBlockSize().has_value())))
    return failure();
  Type positions = getPositions().getType(), lengths = getLengths().getType(),
       prediction = getPrediction().getType();
  return verifyBatchAndRows(*this, {{"positions", positions},
                                    {"lengths", lengths},
                                    {"prediction", prediction}});
}

//===----------------------------------------------------------------------===//
// PoolOp
//===----------------------------------------------------------------------===//

LogicalResult PoolOp::verify() {
  Type prediction = getPrediction().getType(), lengths = getLengths().getType(),
       blockScores = getBlockScores().getType();
  if (failed(verifyBatchAndRows(*this, {{"prediction", prediction},
                                        {"lengths", lengths},
                                        {"block_scores", blockScores}})))
    return failure();
  return verifyBlockTiling(*this, {"prediction", prediction, 2},
                           {"block_scores", blockScores, 2}, getBlockSize());
}

//===----------------------------------------------------------------------===//
// SelectBlocksOp
//===----------------------------------------------------------------------===//

LogicalResult SelectBlocksOp::verify() {
  Reduction reduction = getReduction();
  if (failed(verifyReduction(*this, getState().getType(), reduction,
                             getExplore().convertToDouble(),
                             getExplorePolicy())) ||
      failed(verifyExplorePolicy(*this, getState().getType(),
                                 getExplorePolicy())))
    return failure();

  Type scores = getScores().getType(), lengths = getLengths().getType(),
       mask = getMask().getType();
  if (failed(verifyBatchAndRows(*this, {{"scores", scores},
                                        {"lengths", lengths},
                                        {"mask", mask, true}})))
    return failure();
  // A0 ranks slots; A1 and A2 rank blocks.
  if (reduction == Reduction::a0)
    return verifyBlockTiling(*this, {"scores", scores, 2}, {"mask", mask, 1},
                             getBlockSize());
  return verifySameSize(*this, "block count",
                        {{"scores", scores, 2}, {"mask", mask, 1}});
}

//===----------------------------------------------------------------------===//
// BlockSparsityOp
//===----------------------------------------------------------------------===//

LogicalResult BlockSparsityOp::verify() {
  Type mask = getMask().getType(), lengths = getLengths().getType(),
       sparsity = getSparsity().getType();
  return verifyBatchAndRows(*this, {{"mask", mask, true},
                                    {"lengths", lengths},
                                    {"sparsity", sparsity}});
}

//===----------------------------------------------------------------------===//
// Observation ops: EmaUpdateOp, ObserveOp
//===----------------------------------------------------------------------===//

/// Rules shared by spin.ema_update and spin.observe.
template <typename ObservationOp>
static LogicalResult verifyObservation(ObservationOp op) {
  StateType state = op.getState().getType();
  if (failed(verifyBlockLevelAttr(op, state, "pooling",
                                  op.getPooling().has_value())))
    return failure();
  Type scores = op.getScores().getType(), positions = op.getPositions().getType(),
       lengths = op.getLengths().getType(), mask = op.getMask().getType();
  if (failed(verifyBatchAndRows(op, {{"scores", scores},
                                     {"positions", positions},
                                     {"lengths", lengths},
                                     {"mask", mask, true}})))
    return failure();
  return verifyBlockTiling(op, {"scores", scores, 2}, {"mask", mask, 1},
                           op.getBlockSize());
}

LogicalResult EmaUpdateOp::verify() {
  if (failed(verifyObservation(*this)))
    return failure();
  // verifyObservation has checked that the static row counts agree; any of
  // them (not only the one of 'scores', which may be dynamic) must be 1.
  for (Type type : {getScores().getType(), getPositions().getType(),
                    getLengths().getType()}) {
    int64_t rows = cast<ShapedType>(type).getDimSize(1);
    if (!ShapedType::isDynamic(rows) && rows != 1)
      return emitOpError() << "updates from a single row per request, got "
                           << rows
                           << " rows; buffer MTP rows with spin.observe and "
                              "replay them with spin.commit";
  }
  return success();
}

LogicalResult ObserveOp::verify() { return verifyObservation(*this); }

//===----------------------------------------------------------------------===//
// FusedSelectOp
//===----------------------------------------------------------------------===//

LogicalResult FusedSelectOp::verify() {
  Reduction reduction = getReduction();
  if (failed(verifyReduction(*this, getState().getType(), reduction,
                             getExplore().convertToDouble(),
                             getExplorePolicy())) ||
      failed(verifyExplorePolicy(*this, getState().getType(),
                                 getExplorePolicy())))
    return failure();
  bool pools = reduction == Reduction::a1;
  if (pools && !getPooling())
    return emitOpError("needs 'pooling' with reduction a1");
  if (!pools && getPooling())
    return emitOpError() << "takes 'pooling' only with reduction a1, not "
                         << stringifyReduction(reduction);
  Type positions = getPositions().getType(), lengths = getLengths().getType(),
       mask = getMask().getType();
  return verifyBatchAndRows(*this, {{"positions", positions},
                                    {"lengths", lengths},
                                    {"mask", mask, true}});
}

//===----------------------------------------------------------------------===//
// FusedScoreOp
//===----------------------------------------------------------------------===//

LogicalResult FusedScoreOp::verify() {
  if (failed(verifyIndexer(*this)) || failed(verifyIndexerMask(*this)))
    return failure();

  auto indices = cast<RankedTensorType>(getIndices().getType());
  Type scores = getScores().getType();
  if (failed(verifyBatchAndRows(*this, {{"scores", scores},
                                        {"indices", indices}})))
    return failure();
  int64_t perRow = indices.getDimSize(2);
  if (!ShapedType::isDynamic(perRow) && perRow != static_cast<int64_t>(getK()))
    return emitOpError() << "result holds " << perRow
                         << " indices per row but k is " << getK();

  // The state update: all of state, positions, update kind and result, or none.
  Value state = getState();
  bool updates = state != nullptr;
  if (updates != (getPositions() != nullptr) ||
      updates != getUpdate().has_value() || updates != (getNewState() != nullptr))
    return emitOpError("takes 'state', 'positions', 'update' and returns the "
                       "new state together, or none of them");
  if (!updates) {
    if (getDecay() || getPooling())
      return emitOpError("takes 'decay' and 'pooling' only with a state update");
    return success();
  }
  if (getNewState().getType() != state.getType())
    return emitOpError() << "new state type " << getNewState().getType()
                         << " differs from the state type " << state.getType();
  auto stateType = cast<StateType>(state.getType());
  if (failed(verifyBlockLevelAttr(*this, stateType, "pooling",
                                  getPooling().has_value())))
    return failure();
  Type positions = getPositions().getType();
  if (failed(verifySameSize(*this, "batch size",
                            {{"scores", scores, 0}, {"positions", positions, 0}})) ||
      failed(verifySameSize(*this, "row count",
                            {{"scores", scores, 1},
                             {"lengths", getLengths().getType(), 1},
                             {"positions", positions, 1}})))
    return failure();

  if (!getDecay())
    return emitOpError() << "needs 'decay' with update = "
                         << stringifyUpdateKind(*getUpdate());
  if (*getUpdate() == UpdateKind::observe)
    return success();
  for (Type type : {scores, positions, Type(getLengths().getType())}) {
    int64_t rows = cast<ShapedType>(type).getDimSize(1);
    if (!ShapedType::isDynamic(rows) && rows != 1)
      return emitOpError() << "updates from a single row per request, got "
                           << rows << " rows; MTP rows need update = observe";
  }
  return success();
}

#define GET_OP_CLASSES
#include "spin/Dialect/Spin/IR/SpinOps.cpp.inc"
