//===- ScoreKernel.cpp - tensor-core scoring of paged keys ----------------===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
// z[i] = sum_h w[h] * ReLU(dot(q[h], k[i]) * scale[i]) on mma.sync.m16n8k16:
// A = 16 slots x 16 key elements (row-major, straight from global memory),
// B = 16 key elements x 8 heads (queries staged once per CTA in shared
// memory), C = f32. Each thread loads 16 contiguous bytes of a key row per
// chunk, which is 8 (bf16/f16) or 16 (fp8) elements; the K order inside a
// chunk is permuted the same way for queries, so every dot product is the
// same sum of the same products.
//
// fp8 e4m3 keys become f16 exactly (cvt.rn.f16x2.e4m3x2); bf16 queries of
// fp8/f16 keys become f16 after an exact power-of-two prescale that puts the
// row's largest |q| in [2^14, 2^15), undone on the f32 accumulator.
//
//===----------------------------------------------------------------------===//

#include "KernelLibrary.h"
#include "Kernels.h"

#include <numeric>
#include <optional>

using namespace mlir;
using namespace mlir::spin;
using namespace mlir::spin::gpu_codegen;
using arith::CmpFPredicate;
using arith::CmpIPredicate;

namespace {

/// Two f16x2 registers from four e4m3 bytes, (b0, b1) and (b2, b3), with
/// the exact `cvt.rn.f16x2.e4m3x2` (NaN stays NaN).
std::pair<Value, Value> fp8QuadToF16(KernelBuilder &kb, Value x) {
  OpBuilder &b = kb.builder();
  Location loc = kb.location();
  Type pair = VectorType::get({2}, b.getI8Type());
  Type halves = VectorType::get({2}, b.getF16Type());
  auto convert = [&](Value bits16) {
    Value src = LLVM::BitcastOp::create(b, loc, pair, bits16);
    Value h = NVVM::ConvertF8x2ToF16x2Op::create(
        b, loc, halves, src, /*relu=*/b.getBoolAttr(false),
        TypeAttr::get(b.getType<Float8E4M3FNType>()));
    return kb.bitcast(h, kb.i32T());
  };
  Value lo = arith::TruncIOp::create(b, loc, kb.i16T(), x);
  Value hi = arith::TruncIOp::create(b, loc, kb.i16T(),
                                     kb.shrU(x, kb.i32(16)));
  return {convert(lo), convert(hi)};
}

/// `v` through an empty side-effecting asm statement: the value the next
/// instructions see is produced here, so nothing that uses it moves above
/// this point (after a wgmma wait) and nothing computing it moves below
/// (before a wgmma fence).
Value pinRegister(KernelBuilder &kb, Value v, StringRef constraint) {
  std::string constraints = ("=" + constraint + ",0").str();
  auto op = LLVM::InlineAsmOp::create(
      kb.builder(), kb.location(), v.getType(), ValueRange{v}, "",
      constraints, /*has_side_effects=*/true, /*is_align_stack=*/false,
      LLVM::tailcallkind::TailCallKind::None, LLVM::AsmDialectAttr(),
      ArrayAttr());
  return op.getResult(0);
}

/// One `wgmma.mma_async.m64n<N>k16.f32` with A (four 32-bit registers of
/// f16 or bf16 pairs, the mma.sync m16n8k16 A layout per warp) from
/// registers and B from the shared-memory matrix `descriptor`. `acc` holds
/// the thread's N/2 accumulators; `first` discards them (D = A * B).
SmallVector<Value> wgmmaRegA(KernelBuilder &kb, bool bf16, int64_t n,
                             ArrayRef<Value> acc, ArrayRef<Value> a,
                             Value descriptor, bool first) {
  OpBuilder &b = kb.builder();
  const int64_t count = n / 2;
  std::string type = bf16 ? "bf16" : "f16";
  std::string text = "{\n.reg .pred p;\nsetp.ne.b32 p, $" +
                     std::to_string(count + (first ? 0 : count) + 5) +
                     ", 0;\nwgmma.mma_async.sync.aligned.m64n" +
                     std::to_string(n) + "k16.f32." + type + "." + type + " {";
  for (int64_t i = 0; i < count; ++i)
    text += (i ? ", $" : "$") + std::to_string(i);
  int64_t next = count + (first ? 0 : count);
  text += "}, {$" + std::to_string(next) + ", $" + std::to_string(next + 1) +
          ", $" + std::to_string(next + 2) + ", $" + std::to_string(next + 3) +
          "}, $" + std::to_string(next + 4) + ", p, 1, 1, 0;\n}";
  std::string constraints;
  for (int64_t i = 0; i < count; ++i)
    constraints += "=f,";
  SmallVector<Value> operands;
  if (!first)
    for (int64_t i = 0; i < count; ++i) {
      constraints += std::to_string(i) + ",";
      operands.push_back(acc[i]);
    }
  constraints += "r,r,r,r,l,r";
  operands.append(a.begin(), a.end());
  operands.push_back(descriptor);
  operands.push_back(kb.i32(first ? 0 : 1));
  SmallVector<Type> fields(count, kb.f32T());
  Type result = LLVM::LLVMStructType::getLiteral(b.getContext(), fields);
  auto op = LLVM::InlineAsmOp::create(
      b, kb.location(), result, operands, text, constraints,
      /*has_side_effects=*/true, /*is_align_stack=*/false,
      LLVM::tailcallkind::TailCallKind::None, LLVM::AsmDialectAttr(),
      ArrayAttr());
  SmallVector<Value> out;
  for (int64_t i = 0; i < count; ++i)
    out.push_back(LLVM::ExtractValueOp::create(b, kb.location(), op.getResult(0),
                                               ArrayRef<int64_t>{i}));
  return out;
}

/// The f32 value of bf16 element `e` (of 8) of a 16-byte query vector.
Value bf16Element(KernelBuilder &kb, Value vec, int64_t e) {
  Value word = kb.extract(vec, e / 2);
  Value bits = e % 2 ? kb.andI(word, kb.i32(static_cast<int32_t>(0xffff0000u)))
                     : kb.shl(word, kb.i32(16));
  return kb.bitcast(bits, kb.f32T());
}

/// The row's queries staged in shared memory (and, for wgmma, in its B
/// layout), the factor that undoes their prescale on the accumulator, and
/// this thread's head weights.
struct StagedQueries {
  Value queries, unscale, descriptor;
  SmallVector<Value> weights;
};

/// One scoring kernel while it is built: the spec's derived sizes, the
/// kernel's parameters and the values its phases share. `build` runs the
/// phases in the order of the generated code.
class ScoreKernel : KernelPhases<ScoreKernelSpec> {
public:
  ScoreKernel(OpBuilder &b, Location loc, gpu::GPUModuleOp module,
              const ScoreKernelSpec &spec);
  LaunchShape build();

private:
  void declareKernel();
  void loadBeforeWait();
  void prefetchBlockTableRow();
  void prefetchFromPreviousList(Value rowTable);
  void prefetchListedEntry(Value rowTable, Value listBase, Value lastSlot,
                           Value entry, Value within, Value line);
  StagedQueries stageQueries();
  Value stagedIndex(Value v);
  void copyQueries(Value qs);
  Value prescaleQueries(Value qs);
  Value stageWgmmaOperand(Value qs);
  SmallVector<Value> loadHeadWeights(Value quad);
  void boundCtaRange();
  void fillPastLength();
  void scoreCta();
  void lookupUnitPages();
  void lookupUnitPage(Value u);
  void runTiles();
  Value tileStartOf(Value j, Value w);
  SmallVector<Value> fetchTile(Value start);
  SmallVector<Value> fetchRow(Value entry);
  SmallVector<Value> loadKeyRow(Value slotIndex);
  using Accumulators = SmallVector<SmallVector<SmallVector<Value, 4>>>;
  void computeTile(ValueRange raw);
  Value rowPart(ValueRange raw, int64_t r, int64_t k) const {
    return raw[r * perRow + k];
  }
  SmallVector<Value> chunkRegs(ValueRange raw, int64_t r, int64_t c);
  void mmaWgmma(ValueRange raw, Accumulators &acc);
  void mmaSync(ValueRange raw, Accumulators &acc);
  void epilogue(ValueRange raw, const Accumulators &acc);
  LaunchShape launchShape() const;

  Type i32, f32, i16, words;
  bool fp8, bf16Mma, prescale;
  int64_t H, Dh, R, keyBytes, chunkElems, chunks, ksteps, nTiles, qStride;
  int64_t threads;
  /// 16-byte vectors of 8 query elements of a row, and each thread's share.
  int64_t vectors, qPerThread;
  /// The CTA's entries, and the unit of entries that lie in one page.
  int64_t tilesPerCta, ctaEntries, unit, units;
  /// Thread rows of a tile (g + 8 * r for r < 2 * mTiles: m-tile r / 2,
  /// half r % 2) and the loop-carried values of one (valid, entry, the
  /// chunks' 16-byte vectors and the scale).
  int64_t mTiles, threadRows, perRow;

  gpu::GPUFuncOp func;
  Value q, w, keys, scales, table, lengths, blocks, counts, skip, previous;
  Value out, pages, errors;
  Value tid, lane, warp, rowId, ctaIndex, visible;
  SmallVector<Value> qLoaded, qInRange;
  std::optional<StagedQueries> staged;
  Value g, t, request, row, lengthOk, total, ctaStart, active;
  Value unitSlot, unitPage, zeroWords, groupWarp;
};

ScoreKernel::ScoreKernel(OpBuilder &b, Location loc, gpu::GPUModuleOp module,
                         const ScoreKernelSpec &spec)
    : KernelPhases(b, loc, module, spec) {
  i32 = kb.i32T();
  f32 = kb.f32T();
  i16 = kb.i16T();
  words = kb.vecT(i32, 4);
  fp8 = spec.keyFormat == ElementFormat::fp8e4m3;
  bf16Mma = spec.keyFormat == ElementFormat::bf16;
  prescale = !bf16Mma && spec.queryFormat == ElementFormat::bf16;
  H = spec.heads;
  Dh = spec.headDim;
  R = spec.rows;
  keyBytes = fp8 ? 1 : 2;
  chunkElems = fp8 ? 64 : 32; // 4 threads x 16 bytes
  chunks = Dh / chunkElems;
  ksteps = chunkElems / 16;
  nTiles = H / 8;
  qStride = Dh + 8; // 16-bit elements per staged query row
  threads = spec.warps * 32;
  vectors = H * Dh / 8;
  qPerThread = (vectors + threads - 1) / threads;
  tilesPerCta = spec.warps * spec.tilesPerWarp;
  ctaEntries = tilesPerCta * 16 * spec.mTiles;
  // `unit` divides the CTA's entries, the page size and, sparse, the block
  // size, so a unit's entries lie in one page.
  unit = std::gcd(ctaEntries, spec.sparse
                                  ? std::gcd(spec.blockSize, spec.pageSize)
                                  : spec.pageSize);
  units = ctaEntries / unit;
  mTiles = spec.mTiles;
  threadRows = 2 * mTiles;
  perRow = 2 + chunks + (spec.scales ? 1 : 0);
}

/// Builds the kernel, phase after phase; returns its launch shape.
LaunchShape ScoreKernel::build() {
  OpBuilder::InsertionGuard guard(b);
  declareKernel();
  loadBeforeWait();
  boundCtaRange();
  if (spec.fillPastLength && !spec.sparse)
    fillPastLength();
  kb.ifThen(active, [&] { scoreCta(); });
  return launchShape();
}

/// The `gpu.func` and its parameters (those of disabled features absent),
/// in the order the launch plan passes them.
void ScoreKernel::declareKernel() {
  Type ptr = kb.ptrT(Global);
  SmallVector<Type> params = {ptr, ptr, ptr};
  if (spec.scales)
    params.push_back(ptr);
  params.append({ptr, ptr});
  if (spec.sparse)
    params.append({ptr, ptr, ptr});
  if (spec.prefetchPreviousTiles)
    params.push_back(ptr);
  params.append({ptr, i32, ptr});
  func = beginKernel(b, loc, module, spec.name, params, threads);
  // One M tile: two CTAs per SM (at most 128 registers) keep twice the
  // loads in flight; two M tiles need the whole register file.
  if (spec.mTiles == 1)
    func->setAttr("nvvm.minctasm", b.getI32IntegerAttr(2));

  unsigned a = 0;
  q = func.getArgument(a++), w = func.getArgument(a++);
  keys = func.getArgument(a++);
  scales = spec.scales ? func.getArgument(a++) : Value();
  table = func.getArgument(a++), lengths = func.getArgument(a++);
  blocks = spec.sparse ? func.getArgument(a++) : Value();
  counts = spec.sparse ? func.getArgument(a++) : Value();
  skip = spec.sparse ? func.getArgument(a++) : Value();
  previous = spec.prefetchPreviousTiles ? func.getArgument(a++) : Value();
  out = func.getArgument(a++), pages = func.getArgument(a++);
  errors = func.getArgument(a++);
}

/// Before the grid wait, while the kernel before ends: the row's length and
/// queries (inputs of the step) into registers and, for sparse rows, the
/// query staging and the L2 prefetches, whose inputs the select kernel
/// does not write (its block list and counts are read after the wait).
void ScoreKernel::loadBeforeWait() {
  OpBuilder::InsertionGuard beforeWait(b);
  setInsertionBeforeGridWait(b, func);
  tid = kb.threadIdX();
  lane = kb.laneId();
  warp = kb.warpId();
  // A sparse grid spans the row's full width (a warm-up step scores every
  // block) but its rows hold fewer selected entries; with the rows in x,
  // the CTAs that have entries come first in launch order and the idle
  // ones last, instead of idle CTAs of a row delaying the busy ones of the
  // next.
  rowId = spec.sparse ? kb.blockIdX() : kb.blockIdY();
  ctaIndex = spec.sparse ? kb.blockIdY() : kb.blockIdX();
  visible = kb.loadAt(i32, lengths, rowId, true);
  Value qVectors = kb.mul(rowId, kb.i32(vectors));
  for (int64_t u = 0; u < qPerThread; ++u) {
    Value v = kb.add(tid, kb.i32(u * threads));
    Value ok = kb.cmp(CmpIPredicate::slt, v, kb.i32(vectors));
    Value at = kb.add(qVectors, kb.select(ok, v, kb.i32(0)));
    qLoaded.push_back(kb.loadAt(words, q, at, true));
    qInRange.push_back(ok);
  }
  // Sparse rows stage the queries here too, while the select kernel runs,
  // instead of between the wait and the first key loads. A dense kernel's
  // wait rarely waits: there the staging would only delay its dependents'
  // launch.
  if (spec.sparse) {
    staged = stageQueries();
    prefetchBlockTableRow();
  }
}

/// The request's block-table row into L2 while the select kernel runs: the
/// page lookups after the wait follow the block list, and would otherwise
/// go to DRAM one after the other.
void ScoreKernel::prefetchBlockTableRow() {
  const int64_t lines = llvm::divideCeil(spec.tablePages * 4, 128);
  Value rowTable =
      kb.gep(table, i32,
             kb.mul(kb.divU(rowId, kb.i32(R)), kb.i32(spec.tablePages)));
  forEachThreadStrided(kb, kb.i32(lines), threads, [&](Value line) {
    kb.prefetchL2(kb.gep(rowTable, kb.i8T(), kb.mul(line, kb.i32(128))));
  });
  if (previous)
    prefetchFromPreviousList(rowTable);
}

/// Decoding selects nearly the same blocks step after step: before the
/// wait, each warp prefetches the key lines (and scales) of its first
/// tiles where the previous step's list put them (`previous`, stable since
/// that step's update kernel, which ends before this step's prediction
/// starts). The lines are requested while the select kernel runs instead
/// of after it. Every index is clamped: a stale or foreign list only
/// prefetches lines of the request's own visible pages.
void ScoreKernel::prefetchFromPreviousList(Value rowTable) {
  const int64_t MB = spec.maxBlocks, bs = spec.blockSize;
  const int64_t rowBytes = Dh * keyBytes;
  const int64_t linesPerRow = llvm::divideCeil(rowBytes, 128);
  const int64_t tileEntries = 16 * spec.mTiles;
  const int64_t lines = spec.prefetchTiles * tileEntries * linesPerRow;
  Value listRequest = kb.divU(rowId, kb.i32(R));
  Value listBase = kb.mul(listRequest, kb.i32(1 + MB));
  Value count = kb.minS(
      kb.maxS(kb.loadAt(i32, previous, listBase), kb.i32(0)), kb.i32(MB));
  Value listed = kb.mul(count, kb.i32(bs));
  Value lastSlot =
      kb.sub(kb.minS(visible, kb.i32(spec.outWidth())), kb.i32(1));
  for (int64_t first = 0; first < lines; first += 32) {
    Value k = kb.add(lane, kb.i32(first));
    Value tile = kb.divU(k, kb.i32(tileEntries * linesPerRow));
    Value within = kb.remU(k, kb.i32(tileEntries * linesPerRow));
    Value line = kb.remU(within, kb.i32(linesPerRow));
    Value entry =
        kb.add(tileStartOf(tile, warp), kb.divU(within, kb.i32(linesPerRow)));
    Value inList =
        kb.andI(kb.cmp(CmpIPredicate::slt, k, kb.i32(lines)),
                kb.andI(kb.cmp(CmpIPredicate::slt, entry, listed),
                        kb.cmp(CmpIPredicate::sgt, visible, kb.i32(0))));
    kb.ifThen(inList, [&] {
      prefetchListedEntry(rowTable, listBase, lastSlot, entry, within, line);
    });
  }
}

/// Line `line` of the key row (and the scales) of list position `entry`
/// (`within` its line's index in the tile) of the previous step's list,
/// clamped to the request's visible slots and its valid pages.
void ScoreKernel::prefetchListedEntry(Value rowTable, Value listBase,
                                      Value lastSlot, Value entry,
                                      Value within, Value line) {
  const int64_t MB = spec.maxBlocks, bs = spec.blockSize;
  const int64_t rowBytes = Dh * keyBytes;
  Value at = kb.minS(kb.divU(entry, kb.i32(bs)), kb.i32(MB - 1));
  Value block =
      kb.loadAt(i32, previous, kb.add(listBase, kb.add(at, kb.i32(1))));
  Value slot = kb.add(kb.mul(block, kb.i32(bs)), kb.remU(entry, kb.i32(bs)));
  slot = kb.minS(kb.maxS(slot, kb.i32(0)), lastSlot);
  Value page = kb.loadAt(i32, rowTable, kb.divU(slot, kb.i32(spec.pageSize)));
  Value pageOk = kb.andI(kb.cmp(CmpIPredicate::sge, page, kb.i32(0)),
                         kb.cmp(CmpIPredicate::slt, page, pages));
  kb.ifThen(pageOk, [&] {
    Value slotIndex = kb.add(kb.mul(kb.extS64(page), kb.i64(spec.pageSize)),
                             kb.extS64(kb.remU(slot, kb.i32(spec.pageSize))));
    kb.prefetchL2(kb.gep(keys, kb.i8T(),
                         kb.add(kb.mul(slotIndex, kb.i64(rowBytes)),
                                kb.extS64(kb.mul(line, kb.i32(128))))));
    // A tile's scales (16-slot runs within a page: 64 aligned bytes) lie
    // in one line: its first row's lane asks for it.
    if (scales)
      kb.ifThen(kb.cmp(CmpIPredicate::eq, within, kb.i32(0)),
                [&] { kb.prefetchL2(kb.gep(scales, f32, slotIndex)); });
  });
}

/// The row's queries in shared memory as the MMAs read them (ends with a
/// barrier), and this thread's head weights. Every MMA of the CTA reads
/// the same queries, so they are staged once per CTA.
StagedQueries ScoreKernel::stageQueries() {
  Value quad = kb.andI(lane, kb.i32(3));
  Value qs = kb.sharedArray(spec.name + "_q", i16, H * qStride);
  Value unscale = kb.f32(1.0);
  if (!prescale)
    copyQueries(qs);
  else
    unscale = prescaleQueries(qs);
  kb.barrier();
  Value descriptorBase;
  if (spec.wgmma)
    descriptorBase = stageWgmmaOperand(qs);
  SmallVector<Value> weights = loadHeadWeights(quad);
  return StagedQueries{qs, unscale, descriptorBase, weights};
}

/// The staged index (in 16-byte vectors) of query vector `v`: natural
/// order, rows `qStride` elements apart so that the B loads of the eight
/// heads of an MMA hit different banks.
Value ScoreKernel::stagedIndex(Value v) {
  Value h = kb.divU(v, kb.i32(Dh / 8)), c = kb.remU(v, kb.i32(Dh / 8));
  return kb.add(kb.mul(h, kb.i32(qStride / 8)), c);
}

/// Queries of the MMA's element type: copies.
void ScoreKernel::copyQueries(Value qs) {
  for (int64_t u = 0; u < qPerThread; ++u)
    kb.ifThen(qInRange[u], [&] {
      kb.storeAt(qLoaded[u], qs, stagedIndex(kb.add(tid, kb.i32(u * threads))));
    });
}

/// bf16 queries of f16 MMAs: an exact power-of-two prescale puts the row's
/// largest |q| in [2^14, 2^15), so that the conversion to f16 loses no
/// more than bf16 already did; returns the factor that undoes it. Every
/// thread keeps its vectors in registers between the maximum and the
/// conversion.
Value ScoreKernel::prescaleQueries(Value qs) {
  SmallVector<Value> mine;
  Value localMax = kb.f32(0.0);
  for (int64_t u = 0; u < qPerThread; ++u) {
    Value vec = kb.select(qInRange[u], qLoaded[u],
                          kb.splat(words, b.getI32IntegerAttr(0)));
    mine.push_back(vec);
    for (int64_t e = 0; e < 8; ++e)
      localMax = kb.maxF(localMax, kb.absF(bf16Element(kb, vec, e)));
  }
  Value maxAbs = blockMaxF(kb, spec.name + "_qmax", localMax, threads);
  Value exponent = kb.andI(kb.shrU(kb.bitcast(maxAbs, i32), kb.i32(23)),
                           kb.i32(255));
  exponent = kb.select(kb.cmp(CmpIPredicate::eq, exponent, kb.i32(0)),
                       kb.i32(127 - 14), exponent);
  // scale = 2^(141 - e): largest |q| * scale in [2^14, 2^15).
  Value scaleExp = kb.minS(kb.maxS(kb.sub(kb.i32(268), exponent),
                                   kb.i32(1)),
                           kb.i32(254));
  Value scale = kb.bitcast(kb.shl(scaleExp, kb.i32(23)), f32);
  Value unscaleExp =
      kb.minS(kb.maxS(kb.sub(kb.i32(254), scaleExp), kb.i32(1)),
              kb.i32(254));
  Value unscale = kb.bitcast(kb.shl(unscaleExp, kb.i32(23)), f32);
  for (int64_t u = 0; u < qPerThread; ++u) {
    Value v = kb.add(tid, kb.i32(u * threads));
    kb.ifThen(qInRange[u], [&] {
      auto half = [&](int64_t x) {
        return kb.zext(
            kb.bitcast(kb.truncF16(kb.mul(bf16Element(kb, mine[u], x), scale)),
                       i16),
            i32);
      };
      SmallVector<Value> packed;
      for (int64_t e = 0; e < 8; e += 2)
        packed.push_back(kb.orI(half(e), kb.shl(half(e + 1), kb.i32(16))));
      Value vec = LLVM::UndefOp::create(b, loc, words);
      for (int64_t x = 0; x < 4; ++x)
        vec = LLVM::InsertElementOp::create(b, loc, vec, packed[x],
                                            kb.i32(x));
      kb.storeAt(vec, qs, stagedIndex(v));
    });
  }
  return unscale;
}

/// The queries again in the layout wgmma reads B from shared memory, and
/// the matrix descriptor of its first k-step. The layout is K-major
/// without swizzle: per k-step of 16 (permuted) key elements, 8-head x
/// 8-element core matrices of 128 contiguous bytes, the two K halves 128
/// bytes apart (leading byte offset), 8-head groups 256 bytes apart
/// (stride byte offset).
Value ScoreKernel::stageWgmmaOperand(Value qs) {
  Value qw = kb.sharedArray(spec.name + "_qw", i32, H * Dh / 2);
  const int64_t perKstep = H * 8; // 32-bit pairs
  forEachThreadStrided(kb, kb.i32(H * Dh / 2), threads, [&](Value u) {
    Value S = kb.divU(u, kb.i32(perKstep));
    Value rem = kb.remU(u, kb.i32(perKstep));
    Value n = kb.shrU(rem, kb.i32(3)), pair = kb.andI(rem, kb.i32(7));
    Value kHalf = kb.shrU(pair, kb.i32(2)), quad = kb.andI(pair, kb.i32(3));
    // Logical k = 2 * pair of k-step S = (chunk, s): the key elements
    // thread quad of the mma.sync A layout holds there.
    Value chunk = kb.divU(S, kb.i32(ksteps)), s = kb.remU(S, kb.i32(ksteps));
    Value elem = kb.add(
        kb.add(kb.mul(chunk, kb.i32(chunkElems)),
               kb.mul(quad, kb.i32(chunkElems / 4))),
        kb.add(kb.mul(s, kb.i32(4)), kb.mul(kHalf, kb.i32(2))));
    Value from = kb.divU(kb.add(kb.mul(n, kb.i32(qStride)), elem),
                         kb.i32(2));
    Value to = kb.add(
        kb.add(kb.mul(S, kb.i32(perKstep)),
               kb.mul(kb.shrU(n, kb.i32(3)), kb.i32(64))),
        kb.add(kb.add(kb.mul(kHalf, kb.i32(32)),
                      kb.mul(kb.andI(n, kb.i32(7)), kb.i32(4))),
               quad));
    kb.storeAt(kb.loadAt(i32, qs, from), qw, to);
  });
  // Generic-proxy stores read by the tensor cores' async proxy.
  LLVM::InlineAsmOp::create(b, loc, TypeRange{}, ValueRange{},
                            "fence.proxy.async.shared::cta;", "",
                            /*has_side_effects=*/true, false,
                            LLVM::tailcallkind::TailCallKind::None,
                            LLVM::AsmDialectAttr(), ArrayAttr());
  kb.barrier();
  Value address = LLVM::PtrToIntOp::create(b, loc, kb.i64T(), qw);
  // Bits 0-13: address / 16; 16-29: leading byte offset / 16 (128 B);
  // 32-45: stride byte offset / 16 (256 B); swizzle 0.
  return kb.orI(
      kb.shrU(kb.andI(address, kb.i64(0x3ffff)), kb.i64(4)),
      kb.i64((int64_t(128 >> 4) << 16) | (int64_t(256 >> 4) << 32)));
}

/// Head weights of this thread's accumulator columns (`quad` its lane in
/// the MMA's group of four): 2 quad and 2 quad + 1 of every 8-head tile.
SmallVector<Value> ScoreKernel::loadHeadWeights(Value quad) {
  SmallVector<Value> weights;
  Value wBase = kb.mul(rowId, kb.i32(H));
  for (int64_t nt = 0; nt < nTiles; ++nt)
    for (int64_t j = 0; j < 2; ++j)
      weights.push_back(kb.loadAt(
          f32, w,
          kb.add(wBase, kb.add(kb.mul(quad, kb.i32(2)), kb.i32(nt * 8 + j))),
          true));
  return weights;
}

/// The row's length check (a bad one is reported once per row) and the
/// CTA's part of the row: `active` when its first entry lies below the
/// row's entry count `total`.
void ScoreKernel::boundCtaRange() {
  g = kb.shrU(lane, kb.i32(2)), t = kb.andI(lane, kb.i32(3));
  request = kb.divU(rowId, kb.i32(R)), row = kb.remU(rowId, kb.i32(R));
  lengthOk =
      kb.andI(kb.cmp(CmpIPredicate::sge, visible, kb.i32(0)),
              kb.cmp(CmpIPredicate::sle, visible, kb.i32(spec.outWidth())));
  kb.ifThen(
      kb.andI(kb.not1(lengthOk),
              kb.andI(kb.cmp(CmpIPredicate::eq, ctaIndex, kb.i32(0)),
                      kb.cmp(CmpIPredicate::eq, tid, kb.i32(0)))),
      [&] { recordError(kb, errors, ErrorBadLength, visible, request, row); });
  total = spec.sparse ? kb.mul(kb.loadAt(i32, counts, request, true),
                               kb.i32(spec.blockSize))
                      : visible;
  ctaStart = kb.mul(ctaIndex, kb.i32(tilesPerCta * 16 * spec.mTiles));
  active = kb.andI(lengthOk, kb.cmp(CmpIPredicate::slt, ctaStart, total));
}

/// Dense rows with `fillPastLength`: -inf at the CTA's entries at or after
/// the length (the op's scores of invisible slots).
void ScoreKernel::fillPastLength() {
  Value from = kb.maxS(ctaStart, visible);
  Value to =
      kb.minS(kb.add(ctaStart, kb.i32(ctaEntries)), kb.i32(spec.outWidth()));
  Value outBase = kb.mul(rowId, kb.i32(spec.outWidth()));
  kb.ifThen(kb.andI(lengthOk, kb.cmp(CmpIPredicate::slt, from, to)), [&] {
    forEachThreadStrided(kb, kb.sub(to, from), threads, [&](Value i) {
      kb.storeAt(kb.f32Bits(0xff800000u), out,
                 kb.add(outBase, kb.add(from, i)));
    });
  });
}

/// An active CTA: its pages, the queries (unless staged before the wait),
/// then its tiles.
void ScoreKernel::scoreCta() {
  lookupUnitPages();
  // The staging's barrier also publishes the unit pages; staged before
  // the wait, they need their own.
  if (!staged)
    staged = stageQueries();
  else
    kb.barrier();
  runTiles();
}

/// The CTA's entries [ctaStart, ctaStart + ctaEntries) in units of `unit`
/// entries that lie in one page: each unit's first slot and page (-1: out
/// of range or a bad page) are looked up once per CTA into shared memory,
/// so the key loads of a tile wait for no block-list or block-table load.
void ScoreKernel::lookupUnitPages() {
  unitSlot = kb.sharedArray(spec.name + "_unit_slot", i32, units);
  unitPage = kb.sharedArray(spec.name + "_unit_page", i32, units);
  forEachThreadStrided(kb, kb.i32(units), threads,
                       [&](Value u) { lookupUnitPage(u); });
}

/// Unit `u`'s first slot (through the block list, sparse) and its page; a
/// bad page is reported, and a sparse request's `skip` flag set.
void ScoreKernel::lookupUnitPage(Value u) {
  Value first = kb.add(ctaStart, kb.mul(u, kb.i32(unit)));
  Value inRange = kb.cmp(CmpIPredicate::slt, first, total);
  Value slot = first;
  if (spec.sparse) {
    Value bs = kb.i32(spec.blockSize);
    Value block = kb.ifThenElse(
        {i32}, inRange,
        [&]() -> SmallVector<Value> {
          return {kb.loadAt(i32, blocks,
                            kb.add(kb.mul(request, kb.i32(spec.maxBlocks)),
                                   kb.divU(first, bs)),
                            true)};
        },
        [&]() -> SmallVector<Value> { return {kb.i32(0)}; })[0];
    slot = kb.add(kb.mul(block, bs), kb.remU(first, bs));
    inRange = kb.andI(inRange, kb.cmp(CmpIPredicate::slt, slot, visible));
  }
  Value page = kb.ifThenElse(
      {i32}, inRange,
      [&]() -> SmallVector<Value> {
        return {kb.loadAt(i32, table,
                          kb.add(kb.mul(request, kb.i32(spec.tablePages)),
                                 kb.divU(slot, kb.i32(spec.pageSize))),
                          true)};
      },
      [&]() -> SmallVector<Value> { return {kb.i32(-1)}; })[0];
  Value pageOk = kb.andI(kb.cmp(CmpIPredicate::sge, page, kb.i32(0)),
                         kb.cmp(CmpIPredicate::slt, page, pages));
  kb.ifThen(kb.andI(inRange, kb.not1(pageOk)), [&] {
    recordError(kb, errors, ErrorBadPage, page, request, row);
    if (skip)
      kb.storeAt(kb.i32(1), skip, request);
  });
  kb.storeAt(slot, unitSlot, u);
  kb.storeAt(kb.select(kb.andI(inRange, pageOk), page, kb.i32(-1)), unitPage,
             u);
}

/// The main loop over the warp's tiles of 16 * mTiles entries: the next
/// tile's key loads are issued before this tile's MMAs, so that they are
/// in flight while the tensor cores work.
void ScoreKernel::runTiles() {
  zeroWords = kb.splat(words, b.getI32IntegerAttr(0));
  // wgmma is issued by the four warps of a warpgroup together: they skip
  // a tile only when all four have nothing in it.
  groupWarp = spec.wgmma ? kb.andI(warp, kb.i32(~3)) : warp;
  SmallVector<Value> first = fetchTile(tileStartOf(kb.i32(0), warp));
  kb.forLoopWith(
      kb.i32(0), kb.i32(spec.tilesPerWarp), kb.i32(1), first,
      [&](Value j, ValueRange current) -> SmallVector<Value> {
        Value nextJ = kb.add(j, kb.i32(1));
        SmallVector<Value> next = fetchTile(tileStartOf(nextJ, warp));
        Value start = tileStartOf(j, groupWarp);
        kb.ifThen(kb.cmp(CmpIPredicate::slt, start, total),
                  [&] { computeTile(current); });
        return next;
      });
}

/// The first entry of warp `w`'s tile `j` of the CTA (16 * mTiles entries;
/// the CTA's warps take its tiles in turn).
Value ScoreKernel::tileStartOf(Value j, Value w) {
  Value tile =
      kb.add(kb.mul(kb.add(kb.mul(ctaIndex, kb.i32(spec.tilesPerWarp)), j),
                    kb.i32(spec.warps)),
             w);
  return kb.mul(tile, kb.i32(16 * spec.mTiles));
}

/// The raw data of every thread row of the tile at `start`.
SmallVector<Value> ScoreKernel::fetchTile(Value start) {
  SmallVector<Value> all;
  for (int64_t r = 0; r < threadRows; ++r) {
    SmallVector<Value> raw = fetchRow(kb.add(start, kb.add(g, kb.i32(8 * r))));
    all.append(raw.begin(), raw.end());
  }
  return all;
}

/// One thread row's raw data: whether `entry` is valid, the entry, this
/// thread's 16 bytes of each chunk of its key row and its scale (zeros
/// when not valid). Entries past the CTA's range (the prefetch after its
/// last tile) load nothing.
SmallVector<Value> ScoreKernel::fetchRow(Value entry) {
  Value local = kb.sub(entry, ctaStart);
  Value inCta = kb.cmp(CmpIPredicate::ult, local, kb.i32(ctaEntries));
  Value u = kb.select(inCta, kb.divU(local, kb.i32(unit)), kb.i32(0));
  Value within = kb.remU(local, kb.i32(unit));
  Value slot = kb.add(kb.loadAt(i32, unitSlot, u), within);
  Value page = kb.loadAt(i32, unitPage, u);
  Value valid =
      kb.andI(kb.andI(inCta, kb.cmp(CmpIPredicate::slt, entry, total)),
              kb.cmp(CmpIPredicate::sge, page, kb.i32(0)));
  if (spec.sparse)
    valid = kb.andI(valid, kb.cmp(CmpIPredicate::slt, slot, visible));
  Value offset = kb.remU(slot, kb.i32(spec.pageSize));
  Value slotIndex = kb.add(kb.mul(kb.extS64(page), kb.i64(spec.pageSize)),
                           kb.extS64(offset));
  SmallVector<Type> types(chunks, words);
  if (spec.scales)
    types.push_back(f32);
  SmallVector<Value> loaded = kb.ifThenElse(
      types, valid,
      [&]() -> SmallVector<Value> { return loadKeyRow(slotIndex); },
      [&]() -> SmallVector<Value> {
        SmallVector<Value> v(chunks, zeroWords);
        if (spec.scales)
          v.push_back(kb.f32(0.0));
        return v;
      });
  SmallVector<Value> raw = {valid, entry};
  raw.append(loaded.begin(), loaded.end());
  return raw;
}

/// This thread's 16-byte vector of each chunk of key row `slotIndex`, and
/// its scale.
SmallVector<Value> ScoreKernel::loadKeyRow(Value slotIndex) {
  Value rowByte = kb.add(kb.mul(slotIndex, kb.i64(Dh * keyBytes)),
                         kb.extS64(kb.mul(t, kb.i32(16))));
  SmallVector<Value> v;
  for (int64_t c = 0; c < chunks; ++c) {
    Value at = kb.add(rowByte, kb.i64(c * chunkElems * keyBytes));
    v.push_back(kb.load(words, kb.gep(keys, kb.i8T(), at), 16, true));
  }
  if (spec.scales)
    v.push_back(kb.loadAt(f32, scales, slotIndex, true));
  return v;
}

/// The MMAs and the epilogue of one tile from its raw rows.
void ScoreKernel::computeTile(ValueRange raw) {
  // acc[mt][nt] = the 16 x 8 tile of (entries, heads nt*8 .. nt*8+7).
  Accumulators acc(mTiles, SmallVector<SmallVector<Value, 4>>(
                               nTiles, SmallVector<Value, 4>(4, kb.f32(0.0))));
  if (spec.wgmma)
    mmaWgmma(raw, acc);
  else
    mmaSync(raw, acc);
  epilogue(raw, acc);
}

/// Thread row r's A registers of chunk c, in k-step order (two per k-step:
/// k 2t..2t+1 and 2t+8..2t+9 of the mma.sync A layout); fp8 keys become
/// f16 pairs here.
SmallVector<Value> ScoreKernel::chunkRegs(ValueRange raw, int64_t r,
                                          int64_t c) {
  SmallVector<Value> regs;
  Value vec = rowPart(raw, r, 2 + c);
  for (int64_t x = 0; x < 4; ++x) {
    Value word = kb.extract(vec, x);
    if (fp8) {
      auto [lo, hi] = fp8QuadToF16(kb, word);
      regs.append({lo, hi});
    } else {
      regs.push_back(word);
    }
  }
  return regs;
}

/// The tile's dot products by one warpgroup-wide wgmma chain (A from
/// registers, B the staged queries), into acc[0].
void ScoreKernel::mmaWgmma(ValueRange raw, Accumulators &acc) {
  const int64_t kstepBytes = H * 32;
  // A registers of every k-step (two thread rows, one M tile), pinned
  // before the fence so that no conversion lands between the fence and the
  // wgmma that reads it.
  SmallVector<SmallVector<Value, 4>> aRegs;
  for (int64_t c = 0; c < chunks; ++c) {
    SmallVector<SmallVector<Value>> regs = {chunkRegs(raw, 0, c),
                                            chunkRegs(raw, 1, c)};
    for (int64_t s = 0; s < ksteps; ++s)
      aRegs.push_back({regs[0][2 * s], regs[1][2 * s], regs[0][2 * s + 1],
                       regs[1][2 * s + 1]});
  }
  for (SmallVector<Value, 4> &regs : aRegs)
    for (Value &v : regs)
      v = pinRegister(kb, v, "r");
  NVVM::WgmmaFenceAlignedOp::create(b, loc);
  SmallVector<Value> d;
  for (int64_t S = 0; S < chunks * ksteps; ++S)
    d = wgmmaRegA(kb, bf16Mma, H, d, aRegs[S],
                  kb.add(staged->descriptor, kb.i64(S * kstepBytes / 16)),
                  /*first=*/S == 0);
  NVVM::WgmmaGroupSyncAlignedOp::create(b, loc);
  NVVM::WgmmaWaitGroupSyncOp::create(b, loc, 0);
  for (int64_t nt = 0; nt < nTiles; ++nt)
    for (int64_t j = 0; j < 4; ++j)
      acc[0][nt][j] = pinRegister(kb, d[4 * nt + j], "f");
}

/// The tile's dot products by mma.sync per warp, chunk by chunk: each
/// chunk's B registers (loaded from the staged queries) serve every M
/// tile.
void ScoreKernel::mmaSync(ValueRange raw, Accumulators &acc) {
  for (int64_t c = 0; c < chunks; ++c) {
    // This chunk's A registers of every thread row.
    SmallVector<SmallVector<Value>> regs;
    for (int64_t r = 0; r < threadRows; ++r)
      regs.push_back(chunkRegs(raw, r, c));
    for (int64_t nt = 0; nt < nTiles; ++nt) {
      // This thread's B registers: head nt*8+g, the same bytes of the
      // chunk as its A registers (two vectors for fp8).
      Value head = kb.add(g, kb.i32(nt * 8));
      Value base = kb.add(kb.mul(head, kb.i32(qStride)),
                          kb.add(kb.i32(c * chunkElems),
                                 kb.mul(t, kb.i32(chunkElems / 4))));
      SmallVector<Value> qRegs;
      for (int64_t v = 0; v < (fp8 ? 2 : 1); ++v) {
        Value vec = kb.load(
            words, kb.gep(staged->queries, i16, kb.add(base, kb.i32(v * 8))),
            16);
        for (int64_t x = 0; x < 4; ++x)
          qRegs.push_back(kb.extract(vec, x));
      }
      for (int64_t mt = 0; mt < mTiles; ++mt) {
        const SmallVector<Value> &top = regs[2 * mt];
        const SmallVector<Value> &bottom = regs[2 * mt + 1];
        for (int64_t s = 0; s < ksteps; ++s)
          acc[mt][nt] = kb.mma16816(
              bf16Mma,
              {top[2 * s], bottom[2 * s], top[2 * s + 1], bottom[2 * s + 1]},
              {qRegs[2 * s], qRegs[2 * s + 1]}, acc[mt][nt]);
      }
    }
  }
}

/// The epilogue: ReLU(dot * scale) * w summed over the heads (the group's
/// four threads hold a row's heads), one store per entry.
void ScoreKernel::epilogue(ValueRange raw, const Accumulators &acc) {
  Value outBase = kb.mul(rowId, kb.i32(spec.outWidth()));
  for (int64_t r = 0; r < threadRows; ++r) {
    int64_t mt = r / 2, half = r % 2;
    // dot * unscale * scale (exact powers of two aside, one rounding more
    // than the CPU's dot * scale: within the f32 tolerance).
    Value factor = prescale ? staged->unscale : Value();
    if (spec.scales)
      factor = factor ? kb.mul(factor, rowPart(raw, r, 2 + chunks))
                      : rowPart(raw, r, 2 + chunks);
    Value sum = kb.f32(0.0);
    for (int64_t nt = 0; nt < nTiles; ++nt) {
      for (int64_t j = 0; j < 2; ++j) {
        Value dot = acc[mt][nt][2 * half + j];
        if (factor)
          dot = kb.mul(dot, factor);
        Value relu = kb.maxF(dot, kb.f32(0.0));
        sum = LLVM::FMAOp::create(b, loc, staged->weights[2 * nt + j], relu,
                                  sum);
      }
    }
    sum = kb.add(sum, kb.shflXor(sum, 1));
    sum = kb.add(sum, kb.shflXor(sum, 2));
    // Thread t of the group writes row r = t (and r = t + 4, ...).
    Value valid = rowPart(raw, r, 0), entry = rowPart(raw, r, 1);
    Value mine = kb.cmp(CmpIPredicate::eq, t, kb.i32(r % 4));
    // Every entry of the row is written: one on a bad page (and, sparse,
    // past the visible length) as NaN, never selected and never folded
    // into the state, so that the top-K reads no stale or unwritten score.
    Value write = kb.cmp(CmpIPredicate::slt, entry, total);
    Value value = kb.select(valid, sum, kb.f32Bits(0x7fc00000u));
    kb.ifThen(kb.andI(mine, write),
              [&] { kb.storeAt(value, out, kb.add(outBase, entry)); });
  }
}

/// Sparse grids put the rows in x (see loadBeforeWait).
LaunchShape ScoreKernel::launchShape() const {
  LaunchShape shape;
  const int64_t ctasPerRow = (spec.outWidth() + ctaEntries - 1) / ctaEntries;
  const int64_t rows = spec.batch * spec.rows;
  shape.grid = {spec.sparse ? rows : ctasPerRow,
                spec.sparse ? ctasPerRow : rows, 1};
  shape.blockThreads = threads;
  return shape;
}

} // namespace

LaunchShape mlir::spin::gpu_codegen::buildScoreKernel(
    OpBuilder &b, Location loc, gpu::GPUModuleOp module,
    const ScoreKernelSpec &spec) {
  return ScoreKernel(b, loc, module, spec).build();
}
