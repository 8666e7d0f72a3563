//===- LoopBuilder.h - scalar loop nests for the CPU lowering ----*- C++ -*-===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
// The CPU lowering writes every spin op as plain scf loops over memrefs.
// This builder keeps those loop nests short to write and read, and holds
// what only the loops need (fp8 decoded from its bits, the running top-n
// with ties to the lower id, pooling loops); the SPIN rules both lowerings
// emit (the splitmix64 hash, the pooling sums, the EMA step) are
// CodeBuilder's.
//
//===----------------------------------------------------------------------===//

#ifndef SPIN_LIB_CONVERSION_SPINTOSCF_LOOPBUILDER_H
#define SPIN_LIB_CONVERSION_SPINTOSCF_LOOPBUILDER_H

#include "spin/Conversion/SpinToSCF/SpinToSCF.h"
#include "spin/Conversion/Utils/CodeBuilder.h"
#include "spin/Dialect/Spin/IR/SpinOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Builders.h"
#include "mlir/Transforms/DialectConversion.h"

namespace mlir::spin {

/// The arithmetic, control flow and SPIN rules are CodeBuilder's, shared
/// with the GPU lowering; this adds memrefs, index loops and the CPU
/// path's SPIN pieces.
class LoopBuilder : public CodeBuilder {
public:
  LoopBuilder(OpBuilder &b, Location loc) : CodeBuilder(b, loc) {}

  //===--- constants and casts ------------------------------------------===//
  Value negInf();
  Value nan();
  Value toIndex(Value integer);
  Value toI32(Value index);
  Value toI64(Value integer);

  //===--- memory --------------------------------------------------------===//
  Value dim(Value memref, int64_t d);
  Value load(Value memref, ValueRange indices);
  void store(Value value, Value memref, ValueRange indices);
  /// Reads an i32 memref element as an index.
  Value loadIndex(Value memref, ValueRange indices);
  /// A fresh buffer of `type` whose dynamic sizes are taken from `sizes`
  /// (one size per dimension; static ones are ignored).
  Value alloc(MemRefType type, ArrayRef<Value> sizes);
  /// A memref view of a tensor operand (identity layout, read only).
  Value toBuffer(Value tensor);
  /// A tensor result backed by a buffer this op filled.
  Value toTensor(Value memref, Type tensorType);

  //===--- arithmetic ----------------------------------------------------===//
  Value isFinite(Value f);

  //===--- control flow --------------------------------------------------===//
  /// Loops over index values with step 1.
  void forEach(Value lb, Value ub, function_ref<void(Value)> body);
  SmallVector<Value> forEachWith(Value lb, Value ub, ValueRange inits,
                                 function_ref<SmallVector<Value>(Value, ValueRange)> body);
  /// Fills `memref` (any rank, dims given) with `value`.
  void fill(Value memref, Value value);

  //===--- SPIN pieces ---------------------------------------------------===//
  /// Widens a bf16/f16/f32 or fp8 e4m3 scalar to f32 (fp8 decoded from its
  /// bits: bias 7, subnormals m * 2^-9, 0x7f/0xff NaN, no infinities).
  Value toF32(Value scalar);

  /// Offers candidate (`key`, `id`) to the running best-`n` list kept in
  /// `keys`/`ids` (best first; `count` entries valid). Ids must arrive in
  /// increasing order: a candidate never displaces an equal key, so ties go
  /// to the lower id. `better(x, y)` says whether key x ranks before y.
  /// Returns the new count.
  Value offerTopN(Value keys, Value ids, Value n, Value count, Value key,
                  Value id, function_ref<Value(Value, Value)> better);

  /// Pools the values `load(i)` for `i` in [begin, end) with `kind`
  /// (CodeBuilder's maxF or pooling sums), skipping non-finite ones when
  /// `finiteOnly`. Returns (pooled, count):
  /// -inf and 0 when nothing was pooled.
  std::pair<Value, Value> pool(PoolingKind kind, Value begin, Value end,
                               function_ref<Value(Value)> load, bool finiteOnly);

private:
  /// Runs `body` with the insertion point moved to `nested`.
  void at(OpBuilder &nested, function_ref<void()> body);
};

/// The state buffers of the layer `state` belongs to in `op`'s function;
/// null where the pass bound none (an op outside the functions it
/// prepares), which the patterns report as a failure to match.
const StateBuffers *lookupState(const StateBufferMap &buffers, Operation *op,
                                Value state);

/// Base for patterns of ops that read or write a layer's state buffers:
/// `lowerBound` lowers the op once its layer's buffers are found, and the
/// pattern fails to match where the pass bound none.
template <typename OpTy>
struct StatefulLowering : public OpConversionPattern<OpTy> {
  using OpAdaptor = typename OpConversionPattern<OpTy>::OpAdaptor;

  StatefulLowering(MLIRContext *ctx, const StateBufferMap &buffers)
      : OpConversionPattern<OpTy>(ctx), buffers(buffers) {}

  LogicalResult
  matchAndRewrite(OpTy op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const final {
    const StateBuffers *bound = lookupState(buffers, op, op.getState());
    if (!bound)
      return rewriter.notifyMatchFailure(
          op, "no state buffers are bound for this layer here");
    return lowerBound(op, adaptor, *bound, rewriter);
  }

  virtual LogicalResult
  lowerBound(OpTy op, OpAdaptor adaptor, const StateBuffers &state,
             ConversionPatternRewriter &rewriter) const = 0;

  const StateBufferMap &buffers;
};

/// Lowering patterns by group (one file each).
void populateIndexerLoweringPatterns(RewritePatternSet &patterns);
void populateSelectLoweringPatterns(RewritePatternSet &patterns,
                                    const StateBufferMap &buffers);
void populateStateLoweringPatterns(RewritePatternSet &patterns,
                                   const StateBufferMap &buffers);
void populateUnfusePatterns(RewritePatternSet &patterns);

} // namespace mlir::spin

#endif // SPIN_LIB_CONVERSION_SPINTOSCF_LOOPBUILDER_H
