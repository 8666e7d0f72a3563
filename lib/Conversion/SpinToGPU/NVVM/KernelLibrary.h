//===- KernelLibrary.h - CTA-wide building blocks of the kernels -*- C++ -*-===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
// Building blocks that several generated kernels share: a block-wide prefix
// sum, a radix select that finds the k largest keys of a CTA-wide sequence
// with SPIN's tie rule (equal keys: lower index first), and a bitonic sort of
// 64-bit keys in shared memory. Each takes the block size the kernel is
// launched with; all threads of the CTA must call them (they synchronise).
//
//===----------------------------------------------------------------------===//

#ifndef SPIN_LIB_CONVERSION_SPINTOGPU_KERNELLIBRARY_H
#define SPIN_LIB_CONVERSION_SPINTOGPU_KERNELLIBRARY_H

#include "KernelBuilder.h"

namespace mlir::spin::gpu_codegen {

/// Inclusive prefix sum of one i32 per lane within each warp (shfl.up);
/// `lane` is the thread's lane.
Value warpInclusiveScan(KernelBuilder &kb, Value value, Value lane);

/// Exclusive prefix sum of one i32 per thread over the CTA, plus the total.
std::pair<Value, Value> blockExclusiveScan(KernelBuilder &kb, StringRef prefix,
                                           Value value, int64_t blockThreads);

/// Block-wide maximum of one f32 per thread (NaN-propagating).
Value blockMaxF(KernelBuilder &kb, StringRef prefix, Value value,
                int64_t blockThreads);

/// The outcome of `selectLargest`: the selected elements are the eligible
/// ones with `key > threshold`, plus, when `needFromTies > 0`, the
/// `needFromTies` lowest-index ones with `key == threshold`; with `takeAll`
/// every eligible element is selected (there are at most k).
struct RadixSelection {
  Value takeAll;       ///< i1
  Value threshold;     ///< key type
  Value needFromTies;  ///< i32
  Value indexLimit;    ///< i32: ties with index <= indexLimit are selected
};

/// Key of element `i`: {eligible (i1), key (i32 or i64, unsigned order)}.
using KeyFunction = function_ref<std::pair<Value, Value>(Value)>;

/// The index that breaks ties of element `i` (default: `i` itself).
using IndexFunction = function_ref<Value(Value)>;

/// Finds the `k` largest eligible keys among elements `[0, n)` (elements are
/// visited as `i = tid + t * blockThreads`) by an 8-bit-digit radix select
/// with a shared-memory histogram, then resolves ties at the threshold by
/// index (`indexOf(i)`, distinct per element) with a second select over
/// its complement. `isSelected` must then be given that index.
RadixSelection selectLargest(KernelBuilder &kb, StringRef prefix, Type keyType,
                             Value n, Value k, int64_t blockThreads,
                             KeyFunction keyOf, IndexFunction indexOf = {});

/// What a caller already knows of the k-th largest of i32 keys: its top
/// `bits` bits (`bin`), how many eligible keys lie in higher bins (`above`,
/// less than k) and how many in `bin` itself (`inBin`), and whether there are
/// at most k eligible keys (`takeAll`; `bin` is then unused).
struct KnownBin {
  int64_t bits;
  Value bin, above, inBin, takeAll;
};

/// `selectLargest` of i32 keys whose top bits are known: the radix passes
/// start below them and look only at the keys of `known.bin`.
RadixSelection selectLargest(KernelBuilder &kb, StringRef prefix, Value n,
                             Value k, int64_t blockThreads, KeyFunction keyOf,
                             IndexFunction indexOf, const KnownBin &known);

/// True for an element that `selection` selects.
Value isSelected(KernelBuilder &kb, const RadixSelection &selection,
                 Value eligible, Value key, Value index);

/// Sorts `size` (a power of two) i64 keys in shared memory ascending as
/// unsigned numbers. With `size <= blockThreads` each thread keeps one key
/// in registers and the stages within a warp exchange them by shuffles;
/// only the stages across warps go through shared memory. With `size ==
/// 2 * blockThreads` each thread keeps two adjacent keys the same way.
void bitonicSortU64(KernelBuilder &kb, Value keys, int64_t size,
                    int64_t blockThreads);

/// Writes an error into the error record `{code, value, request, row}`
/// (docs/GPU-ABI.md) unless an earlier one is there: the first error wins.
void recordError(KernelBuilder &kb, Value errors, int32_t code, Value value,
                 Value request, Value row);

/// SPIN_SPEC §2's checks of a row with position `p` and visible length `n`:
/// the length within `[0, reach]`, and `n <= p + 1`, `p < capacity`.
struct RowChecks {
  Value lengthOk, positionOk;
};
RowChecks checkRow(KernelBuilder &kb, Value p, Value n, int64_t capacity,
                   int64_t reach);

/// A batch row's state slot (docs/GPU-ABI.md, "Device batches"). The row
/// is `live` when its slot is in `[0, numSlots)` and no earlier row of the
/// batch has it; -1 marks a padding row, any other slot that is not live is
/// `bad` (`duplicate` when an earlier row has it). `slot` is the slot where
/// live and 0 otherwise, so that loads issued before the test stay inside
/// the pool (which has at least one slot). With `wholeWarp` (every lane of
/// the warp calls it for the same row) the lanes share the scan of the
/// earlier rows; otherwise each thread scans them alone.
struct BatchSlot {
  Value slot, live, bad, duplicate, value;
};
BatchSlot loadBatchSlot(KernelBuilder &kb, Value slots, Value row,
                        Value numSlots, int64_t batch, bool wholeWarp = true);
/// loadBatchSlot of the row `row()` placed before the grid wait of `func`
/// (slots are a step input, which no kernel writes), so that its loads
/// overlap the kernel before.
BatchSlot loadBatchSlotBeforeWait(KernelBuilder &kb, OpBuilder &b,
                                  gpu::GPUFuncOp func, Value slots,
                                  function_ref<Value()> row, Value numSlots,
                                  int64_t batch, bool wholeWarp = true);
/// Records the error of a `bad` batch slot (ErrorBadSlot or
/// ErrorDuplicateSlot) for batch row `row`; call it from one thread.
void recordSlotError(KernelBuilder &kb, Value errors, const BatchSlot &slot,
                     Value row);
/// Whether the step resets batch row `row`'s slot: the row is live and its
/// flag in `resetFlags` (i8 [batch], a step input) is set.
Value rowResets(KernelBuilder &kb, Value live, Value resetFlags, Value row);

/// The paged state layout of a kernel's state (docs/GPU-ABI.md, "Paged
/// state"): the per-KV-slot fields (V, D, obs_z) live in pages of `page`
/// KV slots, named by the state block table (i32 [batch, width], the
/// `state_block_table` input) among `pages` (an i32 parameter); `valid`
/// (i32 [slots]) says how many leading entries of each slot's pages hold
/// state. `page == 0`: the compact layout, `[slots, ..., capacity]`.
struct StatePaging {
  int64_t page = 0, width = 0;
  Value table, pages, valid;
  bool paged() const { return page > 0; }
};

/// The entries of one request's per-KV-slot state fields: row `slot` of the
/// compact layout, or the pages of batch row `batchRow`'s state block-table
/// row.
class StateRows {
public:
  StateRows(KernelBuilder &kb, const StatePaging &paging, Value slot,
            Value batchRow, int64_t capacity);
  /// The element index (i64) of entry `i` (an i32 KV slot, below the
  /// request's reach) of row `r` of a field with `rows` rows per slot (V
  /// and D: no `r`, obs_z: the draft rows). A page entry outside the pool
  /// maps to page 0, so that a load stays inside it (inPool says whether it
  /// was).
  Value index(Value i, Value r = {}, int64_t rows = 1) const;
  /// Whether entry `i`'s page is one of the pool's (always, compact).
  Value inPool(Value i) const;
  bool paged() const { return paging.paged(); }

private:
  Value pageOf(Value i) const;
  KernelBuilder &kb;
  StatePaging paging;
  Value slot, tableRow, slotBase;
  int64_t capacity;
};

/// Whether every state page that `reach` KV slots of batch row `row` span
/// (entries [0, ceil(reach / page)) of its state block-table row) is one of
/// the pool's; an entry outside is recorded in `errors` when given (the
/// state-page error of the contract, the first error winning). Every thread of the
/// CTA must call it (a CTA-wide reduction through `scanPrefix`'s shared
/// memory).
Value statePagesInPool(KernelBuilder &kb, const StatePaging &paging, Value row,
                       Value reach, int64_t threads, StringRef scanPrefix,
                       Value errors);

/// SPIN_SPEC §2's reset of state slot `slot`: V and D zeroed by the `ctas`
/// CTAs of `threads` threads along x that share the row, then `it`, the
/// prediction cache's record (`predAt`) and, when given, the buffered MTP
/// rows (`obsRows`) by thread 0 of CTA 0. With `valid` (the paged layout)
/// V and D are not touched: `valid = 0` makes every entry unwritten.
struct SlotStateArrays {
  Value v, d, it, predAt, obsRows, valid;
};
void resetSlotState(KernelBuilder &kb, const SlotStateArrays &state,
                    Value slot, int64_t capacity, int64_t threads,
                    int64_t ctas);

/// `for (i = tid; i < n; i += blockThreads) body(i)`.
void forEachThreadStrided(KernelBuilder &kb, Value n, int64_t blockThreads,
                          function_ref<void(Value)> body);

/// The same visit, but every thread of the CTA runs the same number of
/// iterations (`body(i, inRange)` with `inRange = i < n`), so warp-wide
/// operations inside `body` see the whole warp.
void forEachThreadStridedInWarps(KernelBuilder &kb, Value n,
                                 int64_t blockThreads,
                                 function_ref<void(Value, Value)> body);

/// Reserves one cell of `*counter` for every lane of the warp with `take`
/// by one atomic per warp; returns this lane's cell (meaningless where
/// `take` is false). All 32 lanes must call it.
Value warpReserve(KernelBuilder &kb, Value counter, Value take);

/// Reserves `count` consecutive cells of `*counter` for every lane of the
/// warp, lane 0's first, by one atomic per warp; returns the first of this
/// lane's cells. All 32 lanes must call it.
Value warpReserveCount(KernelBuilder &kb, Value counter, Value count);

} // namespace mlir::spin::gpu_codegen

#endif // SPIN_LIB_CONVERSION_SPINTOGPU_KERNELLIBRARY_H
