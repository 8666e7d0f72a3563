//===- RaiseIndexer.cpp - linalg lightning indexers to spin ops -----------===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
// Recognises the dense indexer the way frontends emit it in upstream
// dialects (a chain of linalg.generic ops: per-head contraction, optional
// per-slot scale, ReLU, weighted head sum, optional length mask, then a
// library top-K call) and raises it to spin.dense_indexer + spin.topk. The
// pattern is anchored at the weighted head sum and walks up and down the
// chain from there. The accepted forms are listed in Passes.td.
//
//===----------------------------------------------------------------------===//

#include "spin/Dialect/Spin/IR/SpinOps.h"
#include "spin/Dialect/Spin/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"
#include "llvm/Support/Debug.h"

#include <set>
#include <vector>

#define DEBUG_TYPE "spin-raise-indexer"

namespace mlir::spin {
#define GEN_PASS_DEF_SPINRAISEINDEXER
#include "spin/Dialect/Spin/Transforms/Passes.h.inc"
} // namespace mlir::spin

using namespace mlir;
using namespace mlir::spin;

//===----------------------------------------------------------------------===//
// Matching helpers
//===----------------------------------------------------------------------===//

/// The dims `dims` of an `numDims`-loop iteration space as an affine map.
static AffineMap projection(MLIRContext *ctx, unsigned numDims,
                            ArrayRef<unsigned> dims) {
  SmallVector<AffineExpr> exprs;
  for (unsigned dim : dims)
    exprs.push_back(getAffineDimExpr(dim, ctx));
  return AffineMap::get(numDims, 0, exprs, ctx);
}

/// True when `op` has the iterator types and indexing maps given, in order
/// (inputs first, then the one init).
static bool hasStructure(linalg::GenericOp op, unsigned numInputs,
                         ArrayRef<utils::IteratorType> iterators,
                         ArrayRef<SmallVector<unsigned>> maps) {
  if (op.getNumDpsInputs() != numInputs || op.getNumDpsInits() != 1 ||
      op.getNumLoops() != iterators.size() ||
      !llvm::equal(op.getIteratorTypesArray(), iterators))
    return false;
  SmallVector<AffineMap> actual = op.getIndexingMapsArray();
  for (auto [map, dims] : llvm::zip_equal(actual, maps))
    if (map != projection(op.getContext(), iterators.size(), dims))
      return false;
  return true;
}

/// The value a single-block linalg body yields.
static Value yielded(linalg::GenericOp op) {
  auto yield = cast<linalg::YieldOp>(op.getBody()->getTerminator());
  return yield.getNumOperands() == 1 ? yield.getOperand(0) : Value();
}

/// Looks through an `arith.extf` widening.
static Value stripExtF(Value value) {
  if (auto ext = value.getDefiningOp<arith::ExtFOp>())
    return ext.getIn();
  return value;
}

/// True when {x, y} == {a, b} as unordered pairs.
static bool sameOperands(Value x, Value y, Value a, Value b) {
  return (x == a && y == b) || (x == b && y == a);
}

/// Matches `acc + a * b` (any operand order, `a` and `b` possibly widened
/// with arith.extf when `allowExt`).
static bool isMulAdd(Value value, Value a, Value b, Value acc, bool allowExt) {
  auto add = value.getDefiningOp<arith::AddFOp>();
  if (!add)
    return false;
  Value product = add.getLhs() == acc ? add.getRhs() : add.getLhs();
  if ((add.getLhs() == acc) == (add.getRhs() == acc))
    return false;
  auto mul = product.getDefiningOp<arith::MulFOp>();
  if (!mul)
    return false;
  Value x = mul.getLhs(), y = mul.getRhs();
  if (allowExt) {
    x = stripExtF(x);
    y = stripExtF(y);
  }
  return sameOperands(x, y, a, b);
}

/// True when `init` is a zero-filled tensor.
static bool isZeroInit(Value init) {
  if (auto fill = init.getDefiningOp<linalg::FillOp>())
    return matchPattern(fill.getInputs()[0], m_AnyZeroFloat());
  return matchPattern(init, m_AnyZeroFloat());
}

static bool isElementType(Value value, ArrayRef<Type> types) {
  Type element = cast<ShapedType>(value.getType()).getElementType();
  return llvm::is_contained(types, element);
}

//===----------------------------------------------------------------------===//
// RaiseIndexerPattern
//===----------------------------------------------------------------------===//

namespace {

using utils::IteratorType;
constexpr IteratorType kPar = IteratorType::parallel;
constexpr IteratorType kRed = IteratorType::reduction;

/// The recognised chain, from the logits to the (masked) scores.
struct IndexerChain {
  Value q, keys, scales, w, lengths;
  SmallVector<Operation *> ops; // in program order, all erased on success
  Value scores;                 // the value spin.dense_indexer replaces
};

/// Raises one weighted head sum and the chain around it.
struct RaiseIndexerPattern : public OpRewritePattern<linalg::GenericOp> {
  RaiseIndexerPattern(MLIRContext *ctx, StringRef topkCallee, int64_t pageSize)
      : OpRewritePattern(ctx), topkCallee(topkCallee), pageSize(pageSize) {}

  LogicalResult matchAndRewrite(linalg::GenericOp headSum,
                                PatternRewriter &rewriter) const override;

private:
  LogicalResult matchUpstream(linalg::GenericOp headSum, IndexerChain &chain,
                              PatternRewriter &rewriter) const;
  func::CallOp matchTopK(Value scores) const;
  Value buildPagedView(PatternRewriter &rewriter, Location loc, Value tensor,
                       int64_t pages) const;
  Value buildBlockTable(PatternRewriter &rewriter, Location loc, Value q,
                        int64_t pages) const;

  std::string topkCallee;
  int64_t pageSize;
};

} // namespace

/// Matches the ReLU: `max(x, 0.0)` elementwise over `[B, R, H, NS]`.
static bool isRelu(linalg::GenericOp op) {
  SmallVector<unsigned> id = {0, 1, 2, 3};
  if (!hasStructure(op, 1, {kPar, kPar, kPar, kPar}, {id, id}))
    return false;
  Value result = yielded(op);
  Value in = op.getBody()->getArgument(0);
  Operation *max = result ? result.getDefiningOp() : nullptr;
  if (!max || !isa<arith::MaximumFOp, arith::MaxNumFOp>(max))
    return false;
  Value lhs = max->getOperand(0), rhs = max->getOperand(1);
  return (lhs == in && matchPattern(rhs, m_AnyZeroFloat())) ||
         (rhs == in && matchPattern(lhs, m_AnyZeroFloat()));
}

/// The weighted head sum `acc + relu * w` over `[B, R, H, NS]` into a zero
/// `[B, R, NS]`, with f32 weights and scores; sets `chain.w`. Its shape is
/// the entry gate: other generics are not candidates and are skipped
/// without a reason.
static LogicalResult matchHeadSum(linalg::GenericOp headSum,
                                  IndexerChain &chain,
                                  PatternRewriter &rewriter) {
  Type f32 = Float32Type::get(headSum.getContext());
  Block *body = headSum.getBody();
  if (!hasStructure(headSum, 2, {kPar, kPar, kRed, kPar},
                    {{0, 1, 2, 3}, {0, 1, 2}, {0, 1, 3}})) {
    LLVM_DEBUG(llvm::dbgs() << "not a weighted head sum: " << headSum << "\n");
    return failure();
  }
  if (!isMulAdd(yielded(headSum), body->getArgument(0), body->getArgument(1),
                body->getArgument(2), /*allowExt=*/false))
    return rewriter.notifyMatchFailure(headSum,
                                       "head sum body is not acc + relu * w");
  if (!isZeroInit(headSum.getDpsInits()[0]))
    return rewriter.notifyMatchFailure(headSum, "head sum init is not zero");
  chain.w = headSum.getDpsInputs()[1];
  if (!isElementType(chain.w, {f32}) ||
      !isElementType(headSum.getResult(0), {f32}))
    return rewriter.notifyMatchFailure(headSum,
                                       "head weights and scores must be f32");
  return success();
}

/// The ReLU generic that feeds the head sum, which must be its only user
/// (the whole chain is erased).
static FailureOr<linalg::GenericOp> matchRelu(linalg::GenericOp headSum,
                                              PatternRewriter &rewriter) {
  Value relu = headSum.getDpsInputs()[0];
  auto reluOp = relu.getDefiningOp<linalg::GenericOp>();
  if (!reluOp || !isRelu(reluOp))
    return rewriter.notifyMatchFailure(
        headSum, "head sum input is not a ReLU (max(x, 0.0)) generic");
  if (!relu.hasOneUse())
    return rewriter.notifyMatchFailure(reluOp, "ReLU result has other users");
  return reluOp;
}

/// The optional per-slot scale `logits * scale[b, slot]` between the
/// contraction and the ReLU. When present, sets `chain.scales` and
/// `scaleOp` and moves `logits` to the unscaled logits.
static LogicalResult matchScale(Value &logits, linalg::GenericOp &scaleOp,
                                IndexerChain &chain,
                                PatternRewriter &rewriter) {
  auto logitsOp = logits.getDefiningOp<linalg::GenericOp>();
  if (!logitsOp || !hasStructure(logitsOp, 2, {kPar, kPar, kPar, kPar},
                                 {{0, 1, 2, 3}, {0, 3}, {0, 1, 2, 3}}))
    return success();
  Block *scaleBody = logitsOp.getBody();
  auto mul = yielded(logitsOp).getDefiningOp<arith::MulFOp>();
  if (!mul ||
      !sameOperands(mul.getLhs(), mul.getRhs(), scaleBody->getArgument(0),
                    scaleBody->getArgument(1)))
    return rewriter.notifyMatchFailure(logitsOp,
                                       "scale body is not logits * scale");
  if (!logits.hasOneUse())
    return rewriter.notifyMatchFailure(logitsOp,
                                       "scaled logits have other users");
  scaleOp = logitsOp;
  chain.scales = logitsOp.getDpsInputs()[1];
  logits = logitsOp.getDpsInputs()[0];
  return success();
}

/// The `acc + q * k` contraction over the head dim that produces `logits`
/// (the ReLU's input, or the scale's), used only there; sets `chain.q` and
/// `chain.keys`.
static LogicalResult matchContraction(linalg::GenericOp reluOp, Value logits,
                                      IndexerChain &chain,
                                      PatternRewriter &rewriter) {
  auto logitsOp = logits.getDefiningOp<linalg::GenericOp>();
  if (!logitsOp || !hasStructure(logitsOp, 2, {kPar, kPar, kPar, kPar, kRed},
                                 {{0, 1, 2, 4}, {0, 3, 4}, {0, 1, 2, 3}}))
    return rewriter.notifyMatchFailure(
        reluOp, "ReLU input is not the q . k contraction over the head dim");
  Block *contractionBody = logitsOp.getBody();
  if (!isMulAdd(yielded(logitsOp), contractionBody->getArgument(0),
                contractionBody->getArgument(1),
                contractionBody->getArgument(2), /*allowExt=*/true))
    return rewriter.notifyMatchFailure(logitsOp,
                                       "contraction body is not acc + q * k");
  if (!isZeroInit(logitsOp.getDpsInits()[0]))
    return rewriter.notifyMatchFailure(logitsOp,
                                       "contraction init is not zero");
  if (!logits.hasOneUse())
    return rewriter.notifyMatchFailure(logitsOp, "logits have other users");
  chain.q = logitsOp.getDpsInputs()[0];
  chain.keys = logitsOp.getDpsInputs()[1];
  return success();
}

/// The element types spin.dense_indexer accepts: bf16/f16/f32 queries (fp8
/// queries with fp8 keys), bf16/f16/f32/fp8 keys, f32 logits, and per-slot
/// f32 scales exactly when the keys are fp8.
static LogicalResult matchElementTypes(Value logits, linalg::GenericOp scaleOp,
                                       const IndexerChain &chain,
                                       PatternRewriter &rewriter) {
  auto logitsOp = logits.getDefiningOp<linalg::GenericOp>();
  MLIRContext *ctx = logits.getContext();
  Type f32 = Float32Type::get(ctx), bf16 = BFloat16Type::get(ctx),
       f16 = Float16Type::get(ctx), fp8 = Float8E4M3FNType::get(ctx);
  if (!isElementType(chain.q, {bf16, f16, f32, fp8}))
    return rewriter.notifyMatchFailure(
        logitsOp, "queries must be bf16, f16, f32 or f8E4M3FN");
  if (!isElementType(chain.keys, {bf16, f16, f32, fp8}))
    return rewriter.notifyMatchFailure(
        logitsOp, "keys must be bf16, f16, f32 or f8E4M3FN");
  if (!isElementType(logits, {f32}))
    return rewriter.notifyMatchFailure(logitsOp,
                                       "logits must accumulate in f32");
  bool fp8Keys = isElementType(chain.keys, {fp8});
  if (chain.scales && (!fp8Keys || !isElementType(chain.scales, {f32})))
    return rewriter.notifyMatchFailure(
        scaleOp, "per-slot scales need fp8 e4m3 keys and f32 scales");
  if (isElementType(chain.q, {fp8}) && !fp8Keys)
    return rewriter.notifyMatchFailure(logitsOp,
                                       "fp8 queries need fp8 keys");
  if (fp8Keys && !chain.scales)
    return rewriter.notifyMatchFailure(logitsOp,
                                       "fp8 keys without per-slot scales");
  return success();
}

/// The optional length mask after the head sum: `z` where
/// `slot < lengths[b, r]`, -inf elsewhere. When it matches, it joins the
/// chain (its i32 lengths become the indexer's) and its result becomes the
/// scores; anything else leaves the chain ending at the head sum.
static void matchLengthMask(IndexerChain &chain) {
  Value scores = chain.scores;
  if (!scores.hasOneUse())
    return;
  auto maskOp = dyn_cast<linalg::GenericOp>(*scores.getUsers().begin());
  if (!maskOp ||
      !hasStructure(maskOp, 2, {kPar, kPar, kPar},
                    {{0, 1, 2}, {0, 1}, {0, 1, 2}}) ||
      maskOp.getDpsInputs()[0] != scores)
    return;
  Block *maskBody = maskOp.getBody();
  auto select = yielded(maskOp).getDefiningOp<arith::SelectOp>();
  if (!select || select.getTrueValue() != maskBody->getArgument(0) ||
      !matchPattern(select.getFalseValue(), m_NegInfFloat()))
    return;
  auto cmp = select.getCondition().getDefiningOp<arith::CmpIOp>();
  if (!cmp)
    return;
  Value slot = cmp.getLhs(), length = cmp.getRhs();
  if (cmp.getPredicate() == arith::CmpIPredicate::sgt ||
      cmp.getPredicate() == arith::CmpIPredicate::ugt)
    std::swap(slot, length);
  else if (cmp.getPredicate() != arith::CmpIPredicate::slt &&
           cmp.getPredicate() != arith::CmpIPredicate::ult)
    return;
  if (auto cast = slot.getDefiningOp<arith::IndexCastOp>())
    slot = cast.getIn();
  auto index = slot.getDefiningOp<linalg::IndexOp>();
  if (!index || index.getDim() != 2 || length != maskBody->getArgument(1) ||
      !isElementType(maskOp.getDpsInputs()[1],
                     {IntegerType::get(scores.getContext(), 32)}))
    return;
  chain.lengths = maskOp.getDpsInputs()[1];
  chain.ops.push_back(maskOp);
  chain.scores = maskOp.getResult(0);
}

/// The chain above `headSum` (head sum, ReLU, optional scale, contraction,
/// in that order of checks) and the optional length mask below it, into
/// `chain`; every failure but the entry gate says why.
LogicalResult
RaiseIndexerPattern::matchUpstream(linalg::GenericOp headSum,
                                   IndexerChain &chain,
                                   PatternRewriter &rewriter) const {
  if (failed(matchHeadSum(headSum, chain, rewriter)))
    return failure();
  FailureOr<linalg::GenericOp> reluOp = matchRelu(headSum, rewriter);
  if (failed(reluOp))
    return failure();
  Value logits = reluOp->getDpsInputs()[0];
  linalg::GenericOp scaleOp;
  if (failed(matchScale(logits, scaleOp, chain, rewriter)) ||
      failed(matchContraction(*reluOp, logits, chain, rewriter)) ||
      failed(matchElementTypes(logits, scaleOp, chain, rewriter)))
    return failure();
  auto logitsOp = logits.getDefiningOp<linalg::GenericOp>();

  // Slots must form whole pages.
  auto keysType = cast<RankedTensorType>(chain.keys.getType());
  int64_t slots = keysType.getDimSize(1);
  if (ShapedType::isDynamic(slots) || slots % pageSize != 0)
    return rewriter.notifyMatchFailure(logitsOp, [&](Diagnostic &diag) {
      diag << "slot count " << slots
           << " is not a static multiple of page-size " << pageSize;
    });

  chain.ops = {logitsOp};
  if (scaleOp)
    chain.ops.push_back(scaleOp);
  chain.ops.append({*reluOp, headSum});
  chain.scores = headSum.getResult(0);
  matchLengthMask(chain);
  return success();
}

func::CallOp RaiseIndexerPattern::matchTopK(Value scores) const {
  for (Operation *user : scores.getUsers()) {
    auto call = dyn_cast<func::CallOp>(user);
    if (!call || call.getCallee() != topkCallee || call.getNumOperands() != 1 ||
        call.getNumResults() != 2 || !call.getResult(0).use_empty())
      continue;
    auto indices = dyn_cast<RankedTensorType>(call.getResult(1).getType());
    if (!indices || indices.getRank() != 3 ||
        ShapedType::isDynamic(indices.getDimSize(2)) ||
        !indices.getElementType().isSignlessInteger() ||
        (indices.getElementTypeBitWidth() != 32 &&
         indices.getElementTypeBitWidth() != 64))
      continue;
    return call;
  }
  return {};
}

/// Views per-request contiguous `[B, NS, ...]` data as `[B * NS/S, S, ...]`
/// pages of `S = page-size` slots.
Value RaiseIndexerPattern::buildPagedView(PatternRewriter &rewriter,
                                          Location loc, Value tensor,
                                          int64_t pages) const {
  auto type = cast<RankedTensorType>(tensor.getType());
  SmallVector<int64_t> split = {type.getDimSize(0), pages, pageSize};
  SmallVector<ReassociationIndices> expand = {{0}, {1, 2}};
  SmallVector<ReassociationIndices> collapse = {{0, 1}, {2}};
  for (int64_t d = 2; d < type.getRank(); ++d) {
    split.push_back(type.getDimSize(d));
    expand.push_back({d + 1});
    collapse.push_back({d + 1});
  }
  auto expanded = tensor::ExpandShapeOp::create(
      rewriter, loc, RankedTensorType::get(split, type.getElementType()),
      tensor, expand);
  return tensor::CollapseShapeOp::create(rewriter, loc, expanded, collapse);
}

/// The identity block table of the paged view: `bt[b, j] = b * pages + j`.
Value RaiseIndexerPattern::buildBlockTable(PatternRewriter &rewriter,
                                           Location loc, Value q,
                                           int64_t pages) const {
  Type i32 = rewriter.getI32Type();
  SmallVector<OpFoldResult> sizes = {tensor::getMixedSize(rewriter, loc, q, 0),
                                     rewriter.getIndexAttr(pages)};
  Value empty = tensor::EmptyOp::create(rewriter, loc, sizes, i32);
  auto map = AffineMap::getMultiDimIdentityMap(2, rewriter.getContext());
  auto table = linalg::GenericOp::create(
      rewriter, loc, TypeRange{empty.getType()}, ValueRange{},
      ValueRange{empty}, ArrayRef<AffineMap>{map},
      ArrayRef<IteratorType>{kPar, kPar},
      [&](OpBuilder &b, Location nested, ValueRange) {
        Value request = linalg::IndexOp::create(b, nested, 0);
        Value page = linalg::IndexOp::create(b, nested, 1);
        Value width = arith::ConstantIndexOp::create(b, nested, pages);
        Value first = arith::MulIOp::create(b, nested, request, width);
        Value entry = arith::AddIOp::create(b, nested, first, page);
        Value cast = arith::IndexCastOp::create(b, nested, i32, entry);
        linalg::YieldOp::create(b, nested, cast);
      });
  return table.getResult(0);
}

LogicalResult
RaiseIndexerPattern::matchAndRewrite(linalg::GenericOp headSum,
                                     PatternRewriter &rewriter) const {
  IndexerChain chain;
  if (failed(matchUpstream(headSum, chain, rewriter)))
    return failure();

  Location loc = headSum.getLoc();
  rewriter.setInsertionPoint(chain.ops.back());
  auto keysType = cast<RankedTensorType>(chain.keys.getType());
  auto scoresType = cast<RankedTensorType>(chain.scores.getType());
  int64_t pages = keysType.getDimSize(1) / pageSize;

  Value keys = buildPagedView(rewriter, loc, chain.keys, pages);
  Value scales =
      chain.scales ? buildPagedView(rewriter, loc, chain.scales, pages) : Value();
  Value blockTable = buildBlockTable(rewriter, loc, chain.q, pages);
  Value lengths = chain.lengths;
  if (!lengths) {
    // No mask: every slot is visible.
    SmallVector<OpFoldResult> sizes = {
        tensor::getMixedSize(rewriter, loc, chain.q, 0),
        tensor::getMixedSize(rewriter, loc, chain.q, 1)};
    Value empty =
        tensor::EmptyOp::create(rewriter, loc, sizes, rewriter.getI32Type());
    Value all = arith::ConstantOp::create(
        rewriter, loc, rewriter.getI32IntegerAttr(keysType.getDimSize(1)));
    lengths = linalg::FillOp::create(rewriter, loc, all, empty).getResult(0);
  }
  auto dense = DenseIndexerOp::create(rewriter, loc, scoresType, chain.q,
                                      chain.w, keys, scales, blockTable,
                                      lengths);

  if (func::CallOp call = matchTopK(chain.scores)) {
    rewriter.setInsertionPoint(call);
    auto indicesType = cast<RankedTensorType>(call.getResult(1).getType());
    auto i32Indices = RankedTensorType::get(indicesType.getShape(),
                                            rewriter.getI32Type());
    Value indices =
        TopKOp::create(rewriter, call.getLoc(), i32Indices, dense, lengths,
                       /*mask=*/Value(),
                       rewriter.getI64IntegerAttr(indicesType.getDimSize(2)),
                       /*block_size=*/IntegerAttr());
    if (indicesType.getElementTypeBitWidth() == 64)
      indices = arith::ExtSIOp::create(rewriter, call.getLoc(), indicesType,
                                       indices);
    rewriter.replaceAllUsesWith(call.getResult(1), indices);
    rewriter.eraseOp(call);
  }
  rewriter.replaceAllUsesWith(chain.scores, dense.getScores());
  for (Operation *op : llvm::reverse(chain.ops))
    rewriter.eraseOp(op);
  return success();
}

//===----------------------------------------------------------------------===//
// Pass
//===----------------------------------------------------------------------===//

namespace {

/// Turns pattern match failures into remarks (deduplicated: the greedy
/// driver retries patterns), for `report-failures`.
struct FailureRemarks : public RewriterBase::Listener {
  void notifyMatchFailure(Location loc,
                          function_ref<void(Diagnostic &)> reason) override {
    Diagnostic diag(loc, DiagnosticSeverity::Remark);
    reason(diag);
    std::string text;
    llvm::raw_string_ostream os(text);
    os << diag;
    if (seen.insert({loc.getAsOpaquePointer(), text}).second)
      reasons.push_back({loc, text});
  }

  void emit() {
    for (auto &[loc, text] : reasons)
      emitRemark(loc) << "spin-raise-indexer: not raised: " << text;
  }

  std::set<std::pair<const void *, std::string>> seen;
  std::vector<std::pair<Location, std::string>> reasons;
};

struct SpinRaiseIndexerPass
    : public mlir::spin::impl::SpinRaiseIndexerBase<SpinRaiseIndexerPass> {
  using Base::Base;

  void runOnOperation() override {
    if (pageSize <= 0) {
      emitError(getOperation().getLoc())
          << "spin-raise-indexer: option 'page-size' must be positive, got "
          << pageSize.getValue();
      return signalPassFailure();
    }
    RewritePatternSet patterns(&getContext());
    patterns.add<RaiseIndexerPattern>(&getContext(), topkCallee.getValue(),
                                      pageSize.getValue());
    FailureRemarks remarks;
    GreedyRewriteConfig config;
    if (reportFailures)
      config.setListener(&remarks);
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns),
                                     config)))
      return signalPassFailure();
    remarks.emit();
  }
};

} // namespace
