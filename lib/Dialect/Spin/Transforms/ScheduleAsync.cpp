//===- ScheduleAsync.cpp - take SPIN state work off the critical path -----===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
// Moves the two state-only parts of every SPIN layer into async.execute
// regions: the state update (after the top-K) and the block prediction
// (before the layer's scoring).
//
// Why async.execute + !async.value: the spin ops already order state
// accesses with SSA versions of the state handle (every writer returns the
// new version, every later reader uses it). Wrapping a writer in
// async.execute turns its new version into an !async.value, so the
// dependencies stay explicit SSA edges, just asynchronous ones: the top-K
// result never depends on the update region, and every later use of the new
// state goes through async.await, which is where a consumer blocks. The mask
// of a prediction region is awaited by the layer's scoring only. No implicit
// ordering is left for a lowering to guess: the CPU lowering runs the regions
// inline in program order, the GPU lowering puts them on a second stream and
// turns the awaits into event waits.
//
//===----------------------------------------------------------------------===//

#include "spin/Dialect/Spin/IR/SpinOps.h"
#include "spin/Dialect/Spin/Transforms/Passes.h"
#include "spin/Dialect/Spin/Transforms/StateEffects.h"

#include "mlir/Dialect/Async/IR/Async.h"
#include "mlir/IR/Dominance.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"
#include "llvm/Support/Debug.h"

#define DEBUG_TYPE "spin-schedule-async"

namespace mlir::spin {
#define GEN_PASS_DEF_SPINSCHEDULEASYNC
#include "spin/Dialect/Spin/Transforms/Passes.h.inc"
} // namespace mlir::spin

using namespace mlir;
using namespace mlir::spin;

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//


/// The op of `block` that holds the first use of `value` outside `exclude`
/// (an op and what it contains), or null when some use is not in `block`
/// (it is then in a block dominated by the definition).
static Operation *findFirstUserInBlock(Value value, Block *block,
                                       Operation *exclude, bool &allInBlock) {
  Operation *first = nullptr;
  allInBlock = true;
  for (OpOperand &use : value.getUses()) {
    Operation *user = use.getOwner();
    if (exclude && exclude->isAncestor(user))
      continue;
    Operation *ancestor = block->findAncestorOpInBlock(*user);
    if (!ancestor) {
      allInBlock = false;
      continue;
    }
    if (!first || ancestor->isBeforeInBlock(first))
      first = ancestor;
  }
  return first;
}

/// Replaces the uses of `value` outside `exec` by an async.await of
/// `asyncValue`, created right before the first of those uses. The await
/// goes right after `exec` instead when a use lies in another block (which
/// `exec`'s block dominates). Nothing is created when there is no such use.
static void awaitBeforeFirstUse(PatternRewriter &rewriter, Value value,
                                Value asyncValue, async::ExecuteOp exec) {
  Block *block = exec->getBlock();
  bool allInBlock;
  Operation *first = findFirstUserInBlock(value, block, exec, allInBlock);
  if (!first && allInBlock)
    return;
  if (allInBlock)
    rewriter.setInsertionPoint(first);
  else
    rewriter.setInsertionPointAfter(exec);
  auto await = async::AwaitOp::create(rewriter, value.getLoc(), asyncValue);
  rewriter.replaceUsesWithIf(value, await.getResult(), [&](OpOperand &use) {
    return !exec->isAncestor(use.getOwner());
  });
}

/// Creates an empty async.execute returning `types` at the rewriter's
/// insertion point, moves `ops` (in order) into it and yields `yielded`.
static async::ExecuteOp wrapInExecute(PatternRewriter &rewriter, Location loc,
                                      ArrayRef<Operation *> ops,
                                      ValueRange yielded) {
  auto exec = async::ExecuteOp::create(rewriter, loc, yielded.getTypes(),
                                       /*dependencies=*/ValueRange(),
                                       /*operands=*/ValueRange());
  Block *body = &exec.getBodyRegion().front();
  OpBuilder::InsertionGuard guard(rewriter);
  rewriter.setInsertionPointToEnd(body);
  auto yield = async::YieldOp::create(rewriter, loc, yielded);
  for (Operation *op : ops)
    rewriter.moveOpBefore(op, yield);
  return exec;
}

namespace {

//===----------------------------------------------------------------------===//
// SplitFusedUpdate
//===----------------------------------------------------------------------===//

/// fused_score with a state => fused_score + ema_update | observe.
///
/// The fused update would make the top-K wait for the state write. Split
/// off, the update becomes a separate op that WrapUpdate moves into its own
/// region; the scoring kernel only writes the scores it hands over.
struct SplitFusedUpdate : OpRewritePattern<FusedScoreOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(FusedScoreOp op,
                                PatternRewriter &rewriter) const override {
    Value state = op.getState();
    if (!state)
      return rewriter.notifyMatchFailure(op, "no state update is fused");
    std::optional<UpdateKind> kind = op.getUpdate();
    if (!kind)
      return rewriter.notifyMatchFailure(op, "a state without an update kind");
    if (!op.getDecayAttr())
      return rewriter.notifyMatchFailure(op, "an update without decay");

    Location loc = op.getLoc();
    auto score = FusedScoreOp::create(
        rewriter, loc, op.getIndices().getType(), op.getScores().getType(),
        /*new_state=*/Type(), op.getQ(), op.getW(), op.getKeys(),
        op.getScales(), op.getBlockTable(), op.getLengths(), op.getMask(),
        /*state=*/Value(), /*positions=*/Value(), op.getKAttr(),
        op.getBlockSizeAttr(), /*update=*/UpdateKindAttr(),
        /*decay=*/FloatAttr(), /*pooling=*/PoolingKindAttr());
    Value newState;
    if (*kind == UpdateKind::ema) {
      newState = EmaUpdateOp::create(
          rewriter, loc, state.getType(), state, score.getScores(),
          op.getPositions(), op.getLengths(), op.getMask(),
          op.getBlockSizeAttr(), op.getPoolingAttr(), op.getDecayAttr());
    } else {
      newState = ObserveOp::create(rewriter, loc, state.getType(), state,
                                   score.getScores(), op.getPositions(),
                                   op.getLengths(), op.getMask(),
                                   op.getBlockSizeAttr(), op.getPoolingAttr(),
                                   op.getDecayAttr());
    }
    rewriter.replaceOp(op, {score.getIndices(), score.getScores(), newState});
    return success();
  }
};

//===----------------------------------------------------------------------===//
// WrapUpdate
//===----------------------------------------------------------------------===//

/// update => async.execute { update; yield new state } + await at first use.
///
/// The update only consumes the scores; nothing of the current layer waits
/// for it. Its new state version becomes an !async.value, awaited where the
/// state is next used (usually the next step, outside this graph: then there
/// is no await at all).
template <typename UpdateOp> struct WrapUpdate : OpRewritePattern<UpdateOp> {
  using OpRewritePattern<UpdateOp>::OpRewritePattern;

  LogicalResult matchAndRewrite(UpdateOp op,
                                PatternRewriter &rewriter) const override {
    if (op->template getParentOfType<async::ExecuteOp>())
      return rewriter.notifyMatchFailure(op, "already in an async.execute");

    Value newState = op.getNewState();
    rewriter.setInsertionPoint(op);
    auto exec =
        wrapInExecute(rewriter, op.getLoc(), {op.getOperation()}, newState);
    awaitBeforeFirstUse(rewriter, newState, exec.getBodyResults()[0], exec);
    return success();
  }
};

//===----------------------------------------------------------------------===//
// ScheduleSelect
//===----------------------------------------------------------------------===//

/// Whether `user` is a state update reading `committed` as its state: the
/// only kind of use besides the selection that lets a commit move with it.
static bool isUpdateOf(Operation *user, Value committed) {
  if (auto ema = dyn_cast<EmaUpdateOp>(user))
    return ema.getState() == committed;
  if (auto observe = dyn_cast<ObserveOp>(user))
    return observe.getState() == committed;
  if (auto score = dyn_cast<FusedScoreOp>(user))
    return score.getState() == committed;
  return false;
}

/// The MTP commit that `select` should take along into its region, or null.
///
/// An MTP step first replays the previous step's accepted rows (spin.commit)
/// and then predicts from the committed state. The commit is moved with the
/// prediction when its new state is used only by this selection and by
/// state updates after it (which then await the committed state), and when
/// nothing between the two touches the same state.
static CommitOp findMovableCommit(FusedSelectOp select) {
  auto commit = select.getState().getDefiningOp<CommitOp>();
  if (!commit || commit->getBlock() != select->getBlock())
    return nullptr;
  Value committed = commit.getNewState();
  Block *block = select->getBlock();
  for (Operation *user : committed.getUsers()) {
    if (user == select.getOperation())
      continue;
    Operation *ancestor = block->findAncestorOpInBlock(*user);
    if (!isUpdateOf(user, committed) || !ancestor ||
        !select->isBeforeInBlock(ancestor))
      return nullptr;
  }
  for (Operation *op = commit->getNextNode(); op != select.getOperation();
       op = op->getNextNode())
    if (mayAccessState(op, committed.getType(), /*writesOnly=*/false))
      return nullptr;
  return commit;
}

/// fused_select (+ its MTP commit) => async.execute at the earliest point.
///
/// The prediction reads only the state, positions and lengths, not the
/// layer's queries, so it can start as soon as those exist: predictions of
/// later layers overlap the scoring of earlier ones. The region goes right
/// after the last op of the block that defines one of its inputs, or that
/// the moved ops may not cross (a write of the same state, or any access to
/// it when the commit moves too); the mask and the committed state are
/// awaited right before their first uses.
struct ScheduleSelect : OpRewritePattern<FusedSelectOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(FusedSelectOp select,
                                PatternRewriter &rewriter) const override {
    if (select->getParentOfType<async::ExecuteOp>())
      return rewriter.notifyMatchFailure(select, "already in an async.execute");

    CommitOp commit = findMovableCommit(select);
    SmallVector<Value> captured = {select.getPositions(), select.getLengths()};
    if (commit) {
      captured.push_back(commit.getState());
      captured.push_back(commit.getAccepted());
    } else {
      captured.push_back(select.getState());
    }

    // Walk up from the selection to the last op that the region must follow.
    Type stateType = select.getState().getType();
    Operation *after = nullptr;
    for (Operation *op = select->getPrevNode(); op; op = op->getPrevNode()) {
      if (commit && op == commit.getOperation())
        continue;
      bool definesInput = llvm::any_of(op->getResults(), [&](Value result) {
        return llvm::is_contained(captured, result);
      });
      if (definesInput ||
          mayAccessState(op, stateType, /*writesOnly=*/!commit)) {
        after = op;
        break;
      }
    }

    // Every input must be available where the region goes: the walk above
    // guarantees it within the block, dominance covers values from outside.
    Block *block = select->getBlock();
    Operation *insertionPoint = after ? after->getNextNode() : &block->front();
    DominanceInfo dominance;
    for (Value value : captured)
      if (!dominance.properlyDominates(value, insertionPoint))
        return rewriter.notifyMatchFailure(
            select, "an input of the prediction does not dominate the block "
                    "position chosen for it");

    SmallVector<Operation *> moved;
    SmallVector<Value> yielded = {select.getMask()};
    SmallVector<Location> locs;
    if (commit) {
      moved.push_back(commit);
      yielded.push_back(commit.getNewState());
      locs.push_back(commit.getLoc());
    }
    moved.push_back(select);
    locs.push_back(select.getLoc());

    rewriter.setInsertionPoint(insertionPoint);
    auto exec =
        wrapInExecute(rewriter, rewriter.getFusedLoc(locs), moved, yielded);
    for (auto [value, asyncValue] :
         llvm::zip_equal(yielded, exec.getBodyResults()))
      awaitBeforeFirstUse(rewriter, value, asyncValue, exec);
    return success();
  }
};

//===----------------------------------------------------------------------===//
// Pass
//===----------------------------------------------------------------------===//

struct SpinScheduleAsyncPass
    : mlir::spin::impl::SpinScheduleAsyncBase<SpinScheduleAsyncPass> {
  using Base::Base;

  void runOnOperation() override {
    MLIRContext *ctx = &getContext();
    RewritePatternSet patterns(ctx);
    patterns.add<SplitFusedUpdate, WrapUpdate<EmaUpdateOp>,
                 WrapUpdate<ObserveOp>, ScheduleSelect>(ctx);
    // Only the scheduling: no folding or region simplification of the rest
    // of the function (the pipelines canonicalize separately).
    GreedyRewriteConfig config;
    config.enableFolding(false)
        .enableConstantCSE(false)
        .setRegionSimplificationLevel(GreedySimplifyRegionLevel::Disabled);
    if (failed(
            applyPatternsGreedily(getOperation(), std::move(patterns), config)))
      signalPassFailure();
  }
};

} // namespace
