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

#include <array>
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

/// One `wgmma.mma_async.m64n<N>k<K>.f32.<type>.<type>` as inline PTX:
/// `operandText` names the A and B operands (from `$first` on, then the
/// scale-d register, `inputs` with `inputConstraints` ending in it). `acc`
/// holds the thread's N/2 accumulators; `first` discards them (D = A * B).
SmallVector<Value> wgmmaAsm(KernelBuilder &kb, int64_t n, StringRef shapeType,
                            ArrayRef<Value> acc, bool first,
                            function_ref<std::string(int64_t)> operandText,
                            StringRef inputConstraints, ValueRange inputs) {
  OpBuilder &b = kb.builder();
  const int64_t count = n / 2;
  const int64_t next = count + (first ? 0 : count);
  const int64_t scaleD = next + static_cast<int64_t>(inputs.size()) - 1;
  std::string text = "{\n.reg .pred p;\nsetp.ne.b32 p, $" +
                     std::to_string(scaleD) +
                     ", 0;\nwgmma.mma_async.sync.aligned.m64n" +
                     std::to_string(n) + shapeType.str() + " {";
  for (int64_t i = 0; i < count; ++i)
    text += (i ? ", $" : "$") + std::to_string(i);
  text += "}, " + operandText(next) + ";\n}";
  std::string constraints;
  for (int64_t i = 0; i < count; ++i)
    constraints += "=f,";
  SmallVector<Value> operands;
  if (!first)
    for (int64_t i = 0; i < count; ++i) {
      constraints += std::to_string(i) + ",";
      operands.push_back(acc[i]);
    }
  constraints += inputConstraints.str();
  operands.append(inputs.begin(), inputs.end());
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

/// One `wgmma.mma_async.m64n<N>k<16|32>.f32` with A (four 32-bit registers:
/// f16 or bf16 pairs of the mma.sync m16n8k16 A layout, or e4m3 quads of
/// the m16n8k32 one, per warp) from registers and B from the shared-memory
/// matrix `descriptor`. `acc` holds the thread's N/2 accumulators; `first`
/// discards them (D = A * B).
SmallVector<Value> wgmmaRegA(KernelBuilder &kb, ElementFormat format,
                             int64_t n, ArrayRef<Value> acc, ArrayRef<Value> a,
                             Value descriptor, bool first) {
  const bool fp8 = format == ElementFormat::fp8e4m3;
  std::string type = fp8 ? "e4m3" : format == ElementFormat::bf16 ? "bf16"
                                                                   : "f16";
  SmallVector<Value> inputs(a);
  inputs.append({descriptor, kb.i32(first ? 0 : 1)});
  return wgmmaAsm(
      kb, n, (fp8 ? "k32.f32." : "k16.f32.") + type + "." + type, acc, first,
      [&](int64_t next) {
        // 8-bit operands take no transpose immediate (K-major only).
        return "{$" + std::to_string(next) + ", $" + std::to_string(next + 1) +
               ", $" + std::to_string(next + 2) + ", $" +
               std::to_string(next + 3) + "}, $" + std::to_string(next + 4) +
               (fp8 ? ", p, 1, 1" : ", p, 1, 1, 0");
      },
      "r,r,r,r,l,r", inputs);
}

/// One `wgmma.mma_async.m64n<N>k32.f32.e4m3.e4m3` with A and B both from
/// shared-memory matrix descriptors; `acc` and `first` as wgmmaRegA's.
SmallVector<Value> wgmmaSharedE4M3(KernelBuilder &kb, int64_t n,
                                   ArrayRef<Value> acc, Value descA,
                                   Value descB, bool first) {
  return wgmmaAsm(
      kb, n, "k32.f32.e4m3.e4m3", acc, first,
      [&](int64_t next) {
        return "$" + std::to_string(next) + ", $" + std::to_string(next + 1) +
               ", p, 1, 1";
      },
      "l,l,r", {descA, descB, kb.i32(first ? 0 : 1)});
}

/// A side-effecting inline PTX statement without results.
void ptxStatement(KernelBuilder &kb, StringRef text, StringRef constraints = "",
                  ValueRange operands = {}) {
  LLVM::InlineAsmOp::create(kb.builder(), kb.location(), TypeRange{}, operands,
                            text, constraints, /*has_side_effects=*/true,
                            /*is_align_stack=*/false,
                            LLVM::tailcallkind::TailCallKind::None,
                            LLVM::AsmDialectAttr(), ArrayAttr());
}

/// The 32-bit shared-window address of a shared-memory pointer.
Value sharedAddress(KernelBuilder &kb, Value ptr) {
  return LLVM::PtrToIntOp::create(kb.builder(), kb.location(), kb.i32T(), ptr);
}

/// The K-major descriptor of a 128-byte swizzled matrix at `ptr` (1024-byte
/// aligned): rows of 128 bytes, 8-row groups 1024 bytes apart (stride byte
/// offset); the leading byte offset is unused with this swizzle.
Value swizzledDescriptor(KernelBuilder &kb, Value ptr) {
  Value address = LLVM::PtrToIntOp::create(kb.builder(), kb.location(),
                                           kb.i64T(), ptr);
  return kb.orI(kb.shrU(kb.andI(address, kb.i64(0x3ffff)), kb.i64(4)),
                kb.i64((int64_t(1024 >> 4) << 32) | (int64_t(1) << 62)));
}

/// The byte of 16-byte chunk `chunk` of row `row` in a 128-byte swizzled
/// matrix: the chunk index XOR the row's place in its 8-row group.
Value swizzledByte(KernelBuilder &kb, Value row, Value chunk) {
  return kb.add(kb.mul(row, kb.i32(128)),
                kb.shl(kb.xorI(chunk, kb.andI(row, kb.i32(7))), kb.i32(4)));
}

/// `mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32`: A four registers
/// of e4m3 quads, B two, C and D four f32 (exact products, f32 sums).
SmallVector<Value, 4> mma16832E4M3(KernelBuilder &kb, ArrayRef<Value> a,
                                   ArrayRef<Value> bv, ArrayRef<Value> acc) {
  OpBuilder &b = kb.builder();
  SmallVector<Value> operands(a);
  operands.append(bv.begin(), bv.end());
  operands.append(acc.begin(), acc.end());
  Type f = kb.f32T();
  Type result = LLVM::LLVMStructType::getLiteral(b.getContext(), {f, f, f, f});
  auto op = LLVM::InlineAsmOp::create(
      b, kb.location(), result, operands,
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {$0, $1, $2, $3}, "
      "{$4, $5, $6, $7}, {$8, $9}, {$10, $11, $12, $13};",
      "=f,=f,=f,=f,r,r,r,r,r,r,0,1,2,3", /*has_side_effects=*/false,
      /*is_align_stack=*/false, LLVM::tailcallkind::TailCallKind::None,
      LLVM::AsmDialectAttr(), ArrayAttr());
  SmallVector<Value, 4> out;
  for (int64_t i = 0; i < 4; ++i)
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

/// The CTA's queries staged in shared memory (for mma.sync, rows of
/// `qStrideBytes`; for wgmma, in its B layout, with the descriptor of
/// the first k-step), the factor that undoes their prescale on the
/// accumulator (bf16 queries of f16 MMAs only), and the head weights: in
/// registers (weightsInRegisters), else in shared memory.
struct StagedQueries {
  Value queries, descriptor, weightTable, unscale;
  SmallVector<Value> weights;
};

/// One scoring kernel while it is built: the spec's derived sizes, the
/// kernel's parameters and the values its phases share. `build` runs the
/// phases in the order of the generated code.
///
/// A CTA scores `rowsPerCta` query rows of one request (all of them when
/// their queries fit in shared memory): every key tile it loads is
/// multiplied by the queries of all its rows, so MTP rows cost MMAs and
/// epilogues but no second read of the keys.
class ScoreKernel : KernelPhases<ScoreKernelSpec> {
public:
  ScoreKernel(OpBuilder &b, Location loc, gpu::GPUModuleOp module,
              const ScoreKernelSpec &spec);
  LaunchShape build();

private:
  void declareKernel();
  void loadBeforeWait();
  void loadRowLengths();
  void prefetchBlockTableRow();
  void prefetchFromPreviousList(Value rowTable);
  Value previousListRow();
  void prefetchListedEntry(Value rowTable, Value listBase, Value lastSlot,
                           Value entry, Value within, Value line);
  StagedQueries stageQueries();
  void storeQueryVector(Value vec, Value v);
  Value wgmmaWordIndex(Value head, Value byte);
  void copyQueries();
  Value prescaleQueries();
  Value wgmmaDescriptor();
  /// The head weights of this thread's accumulator columns stay in
  /// registers for up to 32 of them (two rows at H = 64), else they are
  /// read from shared memory in every epilogue.
  /// The copying warpgroup's multipliers load them after their setmaxnreg
  /// (multiplyTiles), where ptxas allocates up to its count.
  bool weightsInRegisters() const {
    return spec.copyWarpgroup || rowsPerCta * nTiles * 2 <= 32;
  }
  SmallVector<Value> loadHeadWeights(Value quad);
  Value stageHeadWeights();
  void boundCtaRange();
  void fillPastLength();
  void scoreCta();
  void lookupUnitPages();
  void lookupUnitPage(Value u);
  void runTiles();
  /// copyWarpgroup: the ring in dynamic shared memory, the warpgroups' roles.
  void setUpRing();
  Value ringTiles();
  /// The shared-window address of ring stage `s`'s mbarrier in `bars`.
  Value stageBarrier(Value bars, Value s);
  /// The tiles of multiplier `ring`'s ring (the CTA's ring tiles ring,
  /// ring + mathGroups, ... below `count`): one division a CTA, so that
  /// the loops over them count their places `j` in the ring's sequence.
  Value ringTrips(Value count, Value ring);
  /// Place `j` of multiplier `ring`'s sequence: its ring tile `tile` of the
  /// CTA, its stage among all rings' stages and its round through the ring.
  struct RingStage {
    Value tile, stage, round;
  };
  RingStage ringStage(Value j, Value ring);
  /// Ring tile `i`'s first entry in the CTA (`local`), first slot and page
  /// (-1: bad), from the unit lookups: 64 divides the unit, so a tile lies
  /// in one unit.
  struct TilePlace {
    Value local, firstSlot, page;
  };
  TilePlace ringTilePlace(Value i);
  void copyTiles(Value count);
  void multiplyTiles(Value count);
  Value tileStartOf(Value j, Value w);
  SmallVector<Value> fetchTile(Value start);
  SmallVector<Value> fetchRow(Value entry);
  /// Where a key row lies: `slotIndex` (compact layouts) or its page's
  /// first byte and its offset in the page (i64; fused fp8 pages).
  struct KeyRowPlace {
    Value slotIndex, pageByte, offset;
  };
  /// A thread row's entry: whether it is valid (in range, on a good page
  /// and visible to some row), its slot and where its key row lies.
  struct TileRow {
    Value valid, entry, slot;
    KeyRowPlace place;
  };
  TileRow locateRow(Value entry);
  KeyRowPlace keyRowPlace(Value page, Value offset);
  Value fusedPageByte(Value page);
  Type unitPageType();
  Value keyRowByte(const KeyRowPlace &place);
  Value scaleAddress(const KeyRowPlace &place);
  SmallVector<Value> loadKeyRow(const KeyRowPlace &place);
  /// acc[mt][nt]: the 16 x 8 tile of (entries, heads nt*8 .. nt*8+7) of one
  /// query row.
  using Accumulators = SmallVector<SmallVector<SmallVector<Value, 4>>>;
  /// A registers of every k-step of every M tile: aRegs[mt][S].
  using ARegisters = SmallVector<SmallVector<SmallVector<Value, 4>>>;
  void computeTile(ValueRange raw);
  Value rowPart(ValueRange raw, int64_t r, int64_t k) const {
    return raw[r * perRow + k];
  }
  SmallVector<Value> chunkRegs(ValueRange raw, int64_t r, int64_t c);
  ARegisters aRegisters(ValueRange raw);
  void mmaWgmma(ValueRange raw, const ARegisters &aRegs);
  /// Row `r` of a wgmma chain's accumulators `d` (N = rows x H), each
  /// pinned after the chain's wait.
  Accumulators chainRow(ArrayRef<Value> d, int64_t r);
  Accumulators mmaSync(const ARegisters &aRegs, int64_t qrow);
  /// Each thread row's factor (the unscale of bf16 queries of f16 MMAs
  /// times its key scale; none without either) and whether every valid
  /// row of the warp's tile has a finite positive one (`warpFast`; null
  /// without factors): one check a tile for all its rows' epilogues.
  struct RowFactors {
    SmallVector<Value> factors;
    Value warpFast;
  };
  RowFactors rowFactors(ValueRange raw);
  void epilogue(ValueRange raw, ArrayRef<Accumulators> accs, int64_t firstQ,
                const RowFactors &rf);
  /// Sums `v` (one value per index, each a partial sum of a group of four
  /// lanes) over the group: returns the sums a lane keeps and, per kept
  /// sum, the index it sums for each of the four lanes (reduceOverQuad).
  struct QuadSums {
    SmallVector<Value> sums;
    SmallVector<std::array<int64_t, 4>> index;
  };
  QuadSums reduceOverQuad(ArrayRef<Value> v);
  /// Whether bit `mask` of this lane's place in its group of four is set.
  Value quadBit(int64_t mask) {
    return kb.cmp(CmpIPredicate::ne, kb.andI(t, kb.i32(mask)), kb.i32(0));
  }
  /// The value of `valueOf(index[t])` in the lane of quad place t.
  Value quadSelect(const std::array<int64_t, 4> &index,
                   function_ref<Value(int64_t)> valueOf);
  LaunchShape launchShape() const;

  Type i32, f32, i16, words;
  /// fp8 keys; MMAs of bf16 (bf16 keys), of e4m3 (fp8 queries) or of f16.
  bool fp8, bf16Mma, fp8Mma, prescale;
  ElementFormat mmaFormat;
  int64_t H, Dh, R, keyBytes, chunkElems, chunks, ksteps, nTiles;
  /// Bytes of a query element, of a staged query row (mma.sync), and the
  /// query rows (of R) a CTA scores, and its groups of a request.
  int64_t qBytes, qStrideBytes, rowsPerCta, rowGroups;
  /// Query rows per wgmma chain (N = wgmmaRows * H).
  int64_t wgmmaRows;
  int64_t threads;
  /// 16-byte vectors of query elements of a head, of the CTA's rows, and
  /// each thread's share.
  int64_t vectorsPerHead, vectors, qPerThread;
  /// The CTA's entries, and the unit of entries that lie in one page.
  int64_t tilesPerCta, ctaEntries, unit, units;
  /// Thread rows of a tile (g + 8 * r for r < 2 * mTiles: m-tile r / 2,
  /// half r % 2) and the loop-carried values of one (valid, entry, slot,
  /// the chunks' 16-byte vectors and the scale).
  int64_t mTiles, threadRows, perRow;

  gpu::GPUFuncOp func;
  Value q, w, keys, scales, table, lengths, blocks, counts, skip, status,
      previous, slots;
  Value out, pages, errors;
  Value tid, lane, warp, request, firstRow, ctaIndex;
  /// Per query row of the CTA: its length and whether that is valid; the
  /// largest valid one, and whether any is.
  SmallVector<Value> visible, lengthOk;
  Value maxVisible, anyOk;
  SmallVector<Value> qLoaded, qInRange;
  std::optional<StagedQueries> staged;
  Value g, t, total, ctaStart, active;
  Value unitSlot, unitPage, zeroWords, groupWarp;
  /// copyWarpgroup: `mathGroups` multiplying warpgroups, each with a ring
  /// of kRingStages key tiles of its own; the registers setmaxnreg leaves
  /// the copiers and gives the multipliers; the queries (rows x heads rows
  /// of 128 bytes, swizzled), the rings' key tiles, their full and empty
  /// mbarriers, and the key cache's tensor map (a kernel parameter).
  static constexpr int64_t kRingStages = 4, kTileBytes = 64 * 128;
  static constexpr int64_t kCopierRegisters = 40;
  int64_t mathGroups = 0, mathRegisters = 0;
  /// copyWarpgroup: the wgmma chains of a tile, each of an equal share of
  /// the CTA's rows (multiplyTiles).
  int64_t wgmmaChains = 1;
  Value ringQueries, ringKeys, ringScales, fullBars, emptyBars, keyMap,
      scaleMap;
};

ScoreKernel::ScoreKernel(OpBuilder &b, Location loc, gpu::GPUModuleOp module,
                         const ScoreKernelSpec &spec)
    : KernelPhases(b, loc, module, spec) {
  i32 = kb.i32T();
  f32 = kb.f32T();
  i16 = kb.i16T();
  words = kb.vecT(i32, 4);
  fp8 = spec.keyFormat == ElementFormat::fp8e4m3;
  fp8Mma = spec.queryFormat == ElementFormat::fp8e4m3;
  bf16Mma = spec.keyFormat == ElementFormat::bf16;
  mmaFormat = fp8Mma    ? ElementFormat::fp8e4m3
              : bf16Mma ? ElementFormat::bf16
                        : ElementFormat::f16;
  prescale = !bf16Mma && spec.queryFormat == ElementFormat::bf16;
  H = spec.heads;
  Dh = spec.headDim;
  R = spec.rows;
  keyBytes = fp8 ? 1 : 2;
  chunkElems = fp8 ? 64 : 32; // 4 threads x 16 bytes
  chunks = Dh / chunkElems;
  ksteps = chunkElems / (fp8Mma ? 32 : 16);
  nTiles = H / 8;
  qBytes = fp8Mma ? 1 : 2;
  qStrideBytes = Dh * qBytes + 16;
  rowsPerCta = scoreRowsPerCta(spec);
  rowGroups = R / rowsPerCta;
  wgmmaRows = std::max<int64_t>(1, std::min(rowsPerCta, 64 / H));
  // copyWarpgroup: a copying warpgroup and as many multiplying ones as
  // the register budget of a tile's accumulators (N / 2 a thread), head
  // weights and epilogue allows without spills: four for N = 64 (96
  // registers a thread at launch), three for N = 128 (128), two above
  // (168). setmaxnreg moves registers within the launch's allocation
  // (65536 over the threads, in steps of 8); ptxas reports the launch's
  // share and allocates up to the increased count after the increase,
  // where the multipliers load their weights (four multipliers at N = 128
  // spill, even with the copier at 24).
  if (spec.copyWarpgroup) {
    const int64_t n = rowsPerCta * H;
    mathGroups = n <= 64 ? 4 : n <= 128 ? 3 : 2;
    // Chains of at most 128 columns: at N = 256 the first chain's
    // epilogue runs while the second one's MMAs do, which measured faster
    // than one chain; at N = 128 two chains measured slower than one.
    if (n > 128 && n % 128 == 0 && rowsPerCta % (n / 128) == 0)
      wgmmaChains = n / 128;
    threads = 128 * (1 + mathGroups);
    int64_t launch = 65536 / threads / 8 * 8;
    mathRegisters = (launch * threads - 128 * kCopierRegisters) /
                    (128 * mathGroups) / 8 * 8;
  } else {
    threads = spec.warps * 32;
  }
  vectorsPerHead = Dh * qBytes / 16;
  vectors = rowsPerCta * H * vectorsPerHead;
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
  perRow = 3 + chunks + (spec.scales ? 1 : 0);
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
  if (spec.sparse && spec.rowStatus)
    params.push_back(ptr);
  if (spec.prefetchPreviousTiles)
    params.append({ptr, ptr});
  params.append({ptr, i32, ptr});
  // The tensor maps of the key cache and its scales: 128-byte parameters,
  // addressed in the parameter space (spin-mark-tensor-map-parameters).
  SmallVector<int32_t> maps;
  if (spec.copyWarpgroup)
    for (int64_t m = 0; m < (spec.scales ? 2 : 1); ++m) {
      maps.push_back(static_cast<int32_t>(params.size()));
      params.push_back(kb.ptrT(0));
    }
  func = beginKernel(b, loc, module, spec.name, params, threads);
  if (!maps.empty())
    func->setAttr(kTensorMapParametersAttrName, b.getDenseI32ArrayAttr(maps));
  // One M tile of one query row: two CTAs per SM (at most 128 registers)
  // keep twice the loads in flight; two M tiles, or several rows' MMAs and
  // epilogues, need more registers.
  if (spec.mTiles == 1 && rowsPerCta == 1 && !spec.copyWarpgroup)
    func->setAttr("nvvm.minctasm", b.getI32IntegerAttr(2));
  // The copying warpgroup's setmaxnreg moves registers within the CTA's
  // launch allocation: with a bound declared, ptxas allocates the whole
  // share a thread (96 of 640 threads, 168 of 384) that the copiers' and
  // multipliers' counts add up to; without one it may allocate less, and
  // the multipliers' increase would then wait forever.
  if (spec.copyWarpgroup)
    func->setAttr("nvvm.minctasm", b.getI32IntegerAttr(1));

  unsigned a = 0;
  q = func.getArgument(a++), w = func.getArgument(a++);
  keys = func.getArgument(a++);
  scales = spec.scales ? func.getArgument(a++) : Value();
  table = func.getArgument(a++), lengths = func.getArgument(a++);
  blocks = spec.sparse ? func.getArgument(a++) : Value();
  counts = spec.sparse ? func.getArgument(a++) : Value();
  skip = spec.sparse ? func.getArgument(a++) : Value();
  status = spec.sparse && spec.rowStatus ? func.getArgument(a++) : Value();
  previous = spec.prefetchPreviousTiles ? func.getArgument(a++) : Value();
  slots = spec.prefetchPreviousTiles ? func.getArgument(a++) : Value();
  out = func.getArgument(a++), pages = func.getArgument(a++);
  errors = func.getArgument(a++);
  keyMap = spec.copyWarpgroup ? func.getArgument(a++) : Value();
  scaleMap =
      spec.copyWarpgroup && spec.scales ? func.getArgument(a++) : Value();
}

/// Before the grid wait, while the kernel before ends: the rows' lengths
/// and queries (inputs of the step) into registers and, for sparse rows,
/// the query staging and the L2 prefetches, whose inputs the select kernel
/// does not write (its block list and counts are read after the wait).
void ScoreKernel::loadBeforeWait() {
  OpBuilder::InsertionGuard beforeWait(b);
  setInsertionBeforeGridWait(b, func);
  tid = kb.threadIdX();
  lane = kb.laneId();
  // The copying warpgroup's ring places, stage barriers and descriptors
  // derive from the warp index: uniform, they leave the multipliers'
  // integer pipes to the epilogue (measured there; the other kernels keep
  // the plain index).
  warp = spec.copyWarpgroup ? kb.uniformWarpId() : kb.warpId();
  // A sparse grid spans the row's full width (a warm-up step scores every
  // block) but its rows hold fewer selected entries; with the rows in x,
  // the CTAs that have entries come first in launch order and the idle
  // ones last, instead of idle CTAs of a row delaying the busy ones of the
  // next.
  Value group = spec.sparse ? kb.blockIdX() : kb.blockIdY();
  ctaIndex = spec.sparse ? kb.blockIdY() : kb.blockIdX();
  request = kb.divU(group, kb.i32(rowGroups));
  firstRow = kb.mul(kb.remU(group, kb.i32(rowGroups)), kb.i32(rowsPerCta));
  loadRowLengths();
  // The CTA's rows are consecutive in q: [request, firstRow ..].
  Value qVectors = kb.mul(kb.add(kb.mul(request, kb.i32(R)), firstRow),
                          kb.i32(H * vectorsPerHead));
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
    if (spec.copyWarpgroup)
      setUpRing();
    staged = stageQueries();
    prefetchBlockTableRow();
  }
}

/// Each of the CTA's rows' length and whether it is valid (0 <= N <= the
/// table's slots); the largest valid length.
void ScoreKernel::loadRowLengths() {
  Value rowBase = kb.add(kb.mul(request, kb.i32(R)), firstRow);
  maxVisible = kb.i32(0);
  anyOk = kb.i1(false);
  for (int64_t r = 0; r < rowsPerCta; ++r) {
    Value n = kb.loadAt(i32, lengths, kb.add(rowBase, kb.i32(r)), true);
    Value ok = kb.andI(kb.cmp(CmpIPredicate::sge, n, kb.i32(0)),
                       kb.cmp(CmpIPredicate::sle, n, kb.i32(spec.outWidth())));
    visible.push_back(n);
    lengthOk.push_back(ok);
    maxVisible = kb.maxS(maxVisible, kb.select(ok, n, kb.i32(0)));
    anyOk = kb.orI(anyOk, ok);
  }
}

/// The request's block-table row into L2 while the select kernel runs: the
/// page lookups after the wait follow the block list, and would otherwise
/// go to DRAM one after the other.
void ScoreKernel::prefetchBlockTableRow() {
  const int64_t lines = llvm::divideCeil(spec.tablePages * 4, 128);
  Value rowTable =
      kb.gep(table, i32, kb.mul(request, kb.i32(spec.tablePages)));
  forEachThreadStrided(kb, kb.i32(lines), threads, [&](Value line) {
    kb.prefetchL2(kb.gep(rowTable, kb.i8T(), kb.mul(line, kb.i32(128))));
  });
  if (!previous)
    return;
  Value launched =
      kb.add(kb.mul(ctaIndex, kb.i32(spec.batch * rowGroups)), kb.blockIdX());
  Value prefetches =
      kb.cmp(CmpIPredicate::slt, launched, kb.i32(spec.prefetchCtas));
  // The copying warpgroup's CTA has more warps than the configured ones
  // whose tiles (tileStartOf) span its entries.
  if (spec.copyWarpgroup)
    prefetches = kb.andI(prefetches, kb.cmp(CmpIPredicate::ult, warp,
                                            kb.i32(spec.warps)));
  kb.ifThen(prefetches, [&] { prefetchFromPreviousList(rowTable); });
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
  Value listRow = previousListRow();
  Value listBase = kb.add(kb.i32(spec.batch), kb.mul(listRow, kb.i32(1 + MB)));
  Value found = kb.cmp(CmpIPredicate::sge, listRow, kb.i32(0));
  Value count = kb.ifThenElse({i32}, found, [&]() -> SmallVector<Value> {
    return {kb.minS(kb.maxS(kb.loadAt(i32, previous, listBase), kb.i32(0)),
                    kb.i32(MB))};
  }, [&]() -> SmallVector<Value> { return {kb.i32(0)}; })[0];
  Value listed = kb.mul(count, kb.i32(bs));
  Value lastSlot =
      kb.sub(kb.minS(maxVisible, kb.i32(spec.outWidth())), kb.i32(1));
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
                        kb.cmp(CmpIPredicate::sgt, maxVisible, kb.i32(0))));
    kb.ifThen(inList, [&] {
      prefetchListedEntry(rowTable, listBase, lastSlot, entry, within, line);
    });
  }
}

/// The batch row whose list the previous step kept for this row's state
/// slot (`previous` starts with each row's slot, -1 for none), or -1. A
/// decoding request mostly keeps its row: that row is checked first. An
/// engine that moves requests between rows gets the list of the row the
/// request had, which the warp finds with one vote per 32 rows, all their
/// slots loaded first.
Value ScoreKernel::previousListRow() {
  Value mine = kb.loadAt(i32, slots, request, true);
  Value live = kb.cmp(CmpIPredicate::sge, mine, kb.i32(0));
  Value stayed = kb.andI(
      live, kb.cmp(CmpIPredicate::eq, kb.loadAt(i32, previous, request), mine));
  return kb.ifThenElse({i32}, stayed, [&]() -> SmallVector<Value> {
    return {request};
  }, [&]() -> SmallVector<Value> {
    SmallVector<Value> held;
    for (int64_t first = 0; first < spec.batch; first += 32) {
      Value row = kb.add(lane, kb.i32(first));
      Value in = kb.cmp(CmpIPredicate::slt, row, kb.i32(spec.batch));
      held.push_back(kb.select(
          in, kb.loadAt(i32, previous, kb.select(in, row, kb.i32(0))),
          kb.i32(-1)));
    }
    Value found = kb.i32(-1);
    for (int64_t c = 0; c < static_cast<int64_t>(held.size()); ++c) {
      Value votes = kb.ballot(kb.andI(
          live, kb.cmp(CmpIPredicate::eq, held[c], mine)));
      Value first = kb.andI(kb.cmp(CmpIPredicate::slt, found, kb.i32(0)),
                            kb.cmp(CmpIPredicate::ne, votes, kb.i32(0)));
      found = kb.select(first, kb.add(kb.i32(c * 32), kb.cttz(votes)), found);
    }
    return {found};
  })[0];
}

/// Line `line` of the key row (and the scales) of list position `entry`
/// (`within` its line's index in the tile) of the previous step's list,
/// clamped to the request's visible slots and its valid pages.
void ScoreKernel::prefetchListedEntry(Value rowTable, Value listBase,
                                      Value lastSlot, Value entry,
                                      Value within, Value line) {
  const int64_t MB = spec.maxBlocks, bs = spec.blockSize;
  Value at = kb.minS(kb.divU(entry, kb.i32(bs)), kb.i32(MB - 1));
  Value block =
      kb.loadAt(i32, previous, kb.add(listBase, kb.add(at, kb.i32(1))));
  Value slot = kb.add(kb.mul(block, kb.i32(bs)), kb.remU(entry, kb.i32(bs)));
  slot = kb.minS(kb.maxS(slot, kb.i32(0)), lastSlot);
  Value page = kb.loadAt(i32, rowTable, kb.divU(slot, kb.i32(spec.pageSize)));
  Value pageOk = kb.andI(kb.cmp(CmpIPredicate::sge, page, kb.i32(0)),
                         kb.cmp(CmpIPredicate::slt, page, pages));
  kb.ifThen(pageOk, [&] {
    KeyRowPlace place =
        keyRowPlace(page, kb.remU(slot, kb.i32(spec.pageSize)));
    kb.prefetchL2(kb.gep(keys, kb.i8T(),
                         kb.add(keyRowByte(place),
                                kb.extS64(kb.mul(line, kb.i32(128))))));
    // A tile's scales (16-slot runs within a page: 64 aligned bytes) lie
    // in one line: its first row's lane asks for it.
    if (scales)
      kb.ifThen(kb.cmp(CmpIPredicate::eq, within, kb.i32(0)),
                [&] { kb.prefetchL2(scaleAddress(place)); });
  });
}

/// The CTA's queries in shared memory as the MMAs read them (ends with a
/// barrier), and the head weights. Every MMA of the CTA reads the same
/// queries, so they are staged once per CTA.
StagedQueries ScoreKernel::stageQueries() {
  StagedQueries s;
  if (spec.copyWarpgroup)
    s.queries = ringQueries;
  else if (spec.wgmma)
    s.queries = kb.sharedArray(spec.name + "_qw", i32,
                               rowsPerCta * H * Dh * qBytes / 4);
  else
    s.queries = kb.sharedArray(spec.name + "_q", words,
                               rowsPerCta * H * qStrideBytes / 16);
  staged = s;
  if (!prescale)
    copyQueries();
  else
    staged->unscale = prescaleQueries();
  if (!weightsInRegisters())
    staged->weightTable = stageHeadWeights();
  // Generic-proxy stores read by the tensor cores' async proxy.
  if (spec.wgmma)
    ptxStatement(kb, "fence.proxy.async.shared::cta;");
  kb.barrier();
  if (spec.copyWarpgroup)
    staged->descriptor = swizzledDescriptor(kb, ringQueries);
  else if (spec.wgmma)
    staged->descriptor = wgmmaDescriptor();
  if (weightsInRegisters() && !spec.copyWarpgroup)
    staged->weights = loadHeadWeights(kb.andI(lane, kb.i32(3)));
  return *staged;
}

/// Stores the CTA's query vector `v` (16 bytes of head `v / vectorsPerHead`
/// of its rows) where the MMAs read it: mma.sync rows `qStrideBytes` apart
/// (so that the B loads of the eight heads of an MMA hit different banks),
/// or each 32-bit word at its place in the wgmma B layout.
void ScoreKernel::storeQueryVector(Value vec, Value v) {
  Value head = kb.divU(v, kb.i32(vectorsPerHead));
  Value c = kb.remU(v, kb.i32(vectorsPerHead));
  if (spec.copyWarpgroup) {
    // Row `head` (of the rows' heads) of the swizzled B matrix, in memory
    // order (the keys' tiles are too).
    kb.store(vec, kb.gep(ringQueries, kb.i8T(), swizzledByte(kb, head, c)),
             16);
    return;
  }
  if (!spec.wgmma) {
    kb.storeAt(vec, staged->queries,
               kb.add(kb.mul(head, kb.i32(qStrideBytes / 16)), c));
    return;
  }
  for (int64_t x = 0; x < 4; ++x) {
    Value byte = kb.add(kb.mul(c, kb.i32(16)), kb.i32(4 * x));
    kb.storeAt(kb.extract(vec, x), staged->queries,
               wgmmaWordIndex(head, byte));
  }
}

/// The wgmma B layout of the staged queries, in 32-bit words: K-major
/// without swizzle, per k-step (16 f16/bf16 or 32 e4m3 logical elements,
/// 32 bytes a head) core matrices of 8 heads x 16 bytes, the two K halves
/// 128 bytes apart (leading byte offset), 8-head groups 256 bytes apart
/// (stride byte offset). Logical k is the key element order of the A
/// registers (see chunkRegs): the word at `byte` of a head's query row is
/// the one the same thread's A register holds in the same position.
Value ScoreKernel::wgmmaWordIndex(Value head, Value byte) {
  Value chunk, quad, s, kHalf;
  if (fp8Mma) {
    // Thread quad holds bytes [16 quad, 16 quad + 16) of a 64-byte chunk;
    // its word x is k-step x / 2, half x % 2.
    chunk = kb.divU(byte, kb.i32(64));
    Value within = kb.remU(byte, kb.i32(64));
    quad = kb.divU(within, kb.i32(16));
    Value x = kb.divU(kb.remU(within, kb.i32(16)), kb.i32(4));
    s = kb.divU(x, kb.i32(2));
    kHalf = kb.remU(x, kb.i32(2));
  } else {
    // Element pair (2 e, 2 e + 1) of chunk c: thread quad's pair of k-step
    // s, half kHalf (see the f16 A registers of chunkRegs).
    Value elem = kb.divU(byte, kb.i32(2));
    chunk = kb.divU(elem, kb.i32(chunkElems));
    Value within = kb.remU(elem, kb.i32(chunkElems));
    quad = kb.divU(within, kb.i32(chunkElems / 4));
    Value rem = kb.remU(within, kb.i32(chunkElems / 4));
    s = kb.divU(rem, kb.i32(4));
    kHalf = kb.divU(kb.remU(rem, kb.i32(4)), kb.i32(2));
  }
  const int64_t perKstep = rowsPerCta * H * 8; // words
  Value S = kb.add(kb.mul(chunk, kb.i32(ksteps)), s);
  return kb.add(
      kb.add(kb.mul(S, kb.i32(perKstep)),
             kb.mul(kb.shrU(head, kb.i32(3)), kb.i32(64))),
      kb.add(kb.add(kb.mul(kHalf, kb.i32(32)),
                    kb.mul(kb.andI(head, kb.i32(7)), kb.i32(4))),
             quad));
}

/// Queries of the MMA's element type: copies.
void ScoreKernel::copyQueries() {
  for (int64_t u = 0; u < qPerThread; ++u)
    kb.ifThen(qInRange[u], [&] {
      storeQueryVector(qLoaded[u], kb.add(tid, kb.i32(u * threads)));
    });
}

/// bf16 queries of f16 MMAs: an exact power-of-two prescale puts the row's
/// largest |q| in [2^14, 2^15), so that the conversion to f16 loses no
/// more than bf16 already did; returns the factor that undoes it. Every
/// thread keeps its vectors in registers between the maximum and the
/// conversion. (bf16 queries are scored a row per CTA: scoreRowsPerCta.)
Value ScoreKernel::prescaleQueries() {
  assert(rowsPerCta == 1 && "prescaled queries are scored a row per CTA");
  SmallVector<Value> mine;
  Value localMax = kb.f32(0.0);
  for (int64_t u = 0; u < qPerThread; ++u) {
    Value vec = kb.select(qInRange[u], qLoaded[u],
                          kb.splat(words, b.getI32IntegerAttr(0)));
    mine.push_back(vec);
    Value vecMax = kb.f32(0.0);
    for (int64_t e = 0; e < 8; ++e)
      vecMax = kb.maxF(vecMax, kb.absF(bf16Element(kb, vec, e)));
    localMax = kb.maxF(localMax, vecMax);
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
      storeQueryVector(kb.vectorOf(words, packed), v);
    });
  }
  return unscale;
}

/// The matrix descriptor of the staged queries' first k-step (of all the
/// CTA's rows). Bits 0-13: address / 16; 16-29: leading byte offset / 16
/// (128 B); 32-45: stride byte offset / 16 (256 B); swizzle 0.
Value ScoreKernel::wgmmaDescriptor() {
  Value address =
      LLVM::PtrToIntOp::create(b, loc, kb.i64T(), staged->queries);
  return kb.orI(
      kb.shrU(kb.andI(address, kb.i64(0x3ffff)), kb.i64(4)),
      kb.i64((int64_t(128 >> 4) << 16) | (int64_t(256 >> 4) << 32)));
}

/// Head weights of this thread's accumulator columns (`quad` its lane in
/// the MMA's group of four), row after row: 2 quad and 2 quad + 1 of every
/// 8-head tile.
SmallVector<Value> ScoreKernel::loadHeadWeights(Value quad) {
  SmallVector<Value> weights;
  Value wBase =
      kb.mul(kb.add(kb.mul(request, kb.i32(R)), firstRow), kb.i32(H));
  for (int64_t r = 0; r < rowsPerCta; ++r)
    for (int64_t nt = 0; nt < nTiles; ++nt)
      for (int64_t j = 0; j < 2; ++j)
        weights.push_back(kb.loadAt(
            f32, w,
            kb.add(wBase, kb.add(kb.mul(quad, kb.i32(2)),
                                 kb.i32(r * H + nt * 8 + j))),
            true));
  return weights;
}

/// The head weights of all the CTA's rows in shared memory (a multi-row
/// CTA would need rowsPerCta times the registers).
Value ScoreKernel::stageHeadWeights() {
  Value table = kb.sharedArray(spec.name + "_w", f32, rowsPerCta * H);
  Value wBase =
      kb.mul(kb.add(kb.mul(request, kb.i32(R)), firstRow), kb.i32(H));
  forEachThreadStrided(kb, kb.i32(rowsPerCta * H), threads, [&](Value i) {
    kb.storeAt(kb.loadAt(f32, w, kb.add(wBase, i), true), table, i);
  });
  return table;
}

/// The rows' length checks (a bad one is reported once per row, by the
/// dense kernel: the select kernel reports those of sparse steps, and knows
/// their padding rows, whose lengths mean nothing) and the CTA's part of
/// the rows: `active` when its first entry lies below the entry count
/// `total` (dense: the largest valid length; sparse: the request's
/// selected entries).
void ScoreKernel::boundCtaRange() {
  g = kb.shrU(lane, kb.i32(2)), t = kb.andI(lane, kb.i32(3));
  Value reporter = kb.andI(kb.cmp(CmpIPredicate::eq, ctaIndex, kb.i32(0)),
                           kb.cmp(CmpIPredicate::eq, tid, kb.i32(0)));
  for (int64_t r = 0; !spec.sparse && r < rowsPerCta; ++r)
    kb.ifThen(kb.andI(kb.not1(lengthOk[r]), reporter), [&] {
      recordError(kb, errors, ErrorBadLength, visible[r], request,
                  kb.add(firstRow, kb.i32(r)));
    });
  total = spec.sparse ? kb.mul(kb.loadAt(i32, counts, request, true),
                               kb.i32(spec.blockSize))
                      : maxVisible;
  ctaStart = kb.mul(ctaIndex, kb.i32(tilesPerCta * 16 * spec.mTiles));
  active = kb.andI(anyOk, kb.cmp(CmpIPredicate::slt, ctaStart, total));
}

/// Dense rows with `fillPastLength`: -inf at the CTA's entries at or after
/// each row's length (the op's scores of invisible slots).
void ScoreKernel::fillPastLength() {
  Value to =
      kb.minS(kb.add(ctaStart, kb.i32(ctaEntries)), kb.i32(spec.outWidth()));
  for (int64_t r = 0; r < rowsPerCta; ++r) {
    Value from = kb.maxS(ctaStart, visible[r]);
    Value outBase = kb.mul(
        kb.add(kb.add(kb.mul(request, kb.i32(R)), firstRow), kb.i32(r)),
        kb.i32(spec.outWidth()));
    kb.ifThen(kb.andI(lengthOk[r], kb.cmp(CmpIPredicate::slt, from, to)), [&] {
      forEachThreadStrided(kb, kb.sub(to, from), threads, [&](Value i) {
        kb.storeAt(kb.f32Bits(0xff800000u), out,
                   kb.add(outBase, kb.add(from, i)));
      });
    });
  }
}

/// An active CTA: its pages, the queries (unless staged before the wait),
/// then its tiles.
void ScoreKernel::scoreCta() {
  lookupUnitPages();
  // Sparse rows set the ring up before the wait, with their queries.
  if (spec.copyWarpgroup && !spec.sparse)
    setUpRing();
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
  unitPage = kb.sharedArray(spec.name + "_unit_page", unitPageType(), units);
  forEachThreadStrided(kb, kb.i32(units), threads,
                       [&](Value u) { lookupUnitPage(u); });
}

/// Unit `u`'s first slot (through the block list, sparse) and its page; a
/// bad page is reported (as the CTA's first row's), and a sparse request's
/// `skip` flag set.
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
    inRange = kb.andI(inRange, kb.cmp(CmpIPredicate::slt, slot, maxVisible));
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
    recordError(kb, errors, ErrorBadPage, page, request, firstRow);
    if (skip)
      kb.storeAt(kb.i32(1), skip, request);
    // After the select kernel's verdict (0: stepped), which the grid wait
    // orders before this.
    if (status)
      kb.storeAt(kb.i32(ErrorBadPage), status, request);
  });
  kb.storeAt(slot, unitSlot, u);
  Value ok = kb.andI(inRange, pageOk);
  if (spec.fusedPages)
    kb.storeAt(kb.select(ok, fusedPageByte(page), kb.i64(-1)), unitPage, u);
  else
    kb.storeAt(kb.select(ok, page, kb.i32(-1)), unitPage, u);
}

/// What a unit's shared-memory entry holds: its page (i32), or with fused
/// pages the page's first byte (i64), so that no row multiplies its page by
/// the page size.
Type ScoreKernel::unitPageType() {
  return spec.fusedPages ? kb.i64T() : i32;
}

/// The main loop over the warp's tiles of 16 * mTiles entries: the next
/// tile's key loads are issued before this tile's MMAs, so that they are
/// in flight while the tensor cores work.
void ScoreKernel::runTiles() {
  zeroWords = kb.splat(words, b.getI32IntegerAttr(0));
  // wgmma is issued by the four warps of a warpgroup together: they skip
  // a tile only when all four have nothing in it.
  groupWarp = spec.wgmma ? kb.andI(warp, kb.i32(~3)) : warp;
  if (spec.copyWarpgroup) {
    Value count = ringTiles();
    kb.ifThenElse(
        TypeRange{}, kb.cmp(CmpIPredicate::ult, warp, kb.i32(4)),
        [&]() -> SmallVector<Value> {
          copyTiles(count);
          return {};
        },
        [&]() -> SmallVector<Value> {
          multiplyTiles(count);
          return {};
        });
    return;
  }
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

/// copyWarpgroup: the dynamic shared memory from its first 1024-byte
/// boundary (the swizzled matrices need it): the queries, the rings' key
/// tiles, their scales and mbarriers; thread 0 initialises the mbarriers
/// (full: the copier's arrival with the tile's bytes expected; empty: the
/// four warps of the multiplying warpgroup arrive), which the query
/// staging's barrier publishes.
void ScoreKernel::setUpRing() {
  Value base = kb.dynamicShared();
  Value address = sharedAddress(kb, base);
  Value pad = kb.andI(kb.sub(kb.i32(0), address), kb.i32(1023));
  Value aligned = kb.gep(base, kb.i8T(), pad);
  const int64_t queryBytes = rowsPerCta * H * 128;
  const int64_t stages = mathGroups * kRingStages;
  ringQueries = aligned;
  ringKeys = kb.gep(aligned, kb.i8T(), kb.i32(queryBytes));
  ringScales = kb.gep(ringKeys, kb.i8T(), kb.i32(stages * kTileBytes));
  fullBars = kb.gep(ringScales, kb.i8T(), kb.i32(stages * 64 * 4));
  emptyBars = kb.gep(fullBars, kb.i8T(), kb.i32(stages * 8));
  kb.ifThen(kb.cmp(CmpIPredicate::eq, tid, kb.i32(0)), [&] {
    for (int64_t s = 0; s < stages; ++s) {
      ptxStatement(kb, "mbarrier.init.shared::cta.b64 [$0], 1;", "r",
                   {stageBarrier(fullBars, kb.i32(s))});
      ptxStatement(kb, "mbarrier.init.shared::cta.b64 [$0], 4;", "r",
                   {stageBarrier(emptyBars, kb.i32(s))});
    }
    // The copy engine (async proxy) sees the initialised barriers.
    ptxStatement(kb, "fence.mbarrier_init.release.cluster;");
  });
}

/// The CTA's 64-slot tiles that hold entries below `total`.
Value ScoreKernel::ringTiles() {
  Value left = kb.sub(total, ctaStart);
  Value tiles = kb.divU(kb.add(left, kb.i32(63)), kb.i32(64));
  return kb.minS(tiles, kb.i32(ctaEntries / 64));
}

Value ScoreKernel::stageBarrier(Value bars, Value s) {
  return sharedAddress(kb, kb.gep(bars, kb.i8T(), kb.mul(s, kb.i32(8))));
}

Value ScoreKernel::ringTrips(Value count, Value ring) {
  Value left = kb.maxS(kb.sub(count, ring), kb.i32(0));
  return kb.divU(kb.add(left, kb.i32(mathGroups - 1)), kb.i32(mathGroups));
}

ScoreKernel::RingStage ScoreKernel::ringStage(Value j, Value ring) {
  Value s = kb.add(kb.mul(ring, kb.i32(kRingStages)),
                   kb.remU(j, kb.i32(kRingStages)));
  return {kb.add(ring, kb.mul(j, kb.i32(mathGroups))), s,
          kb.divU(j, kb.i32(kRingStages))};
}

ScoreKernel::TilePlace ScoreKernel::ringTilePlace(Value i) {
  Value local = kb.mul(i, kb.i32(64));
  Value u = kb.divU(local, kb.i32(unit));
  Value firstSlot = kb.add(kb.loadAt(i32, unitSlot, u),
                           kb.remU(local, kb.i32(unit)));
  return {local, firstSlot, kb.loadAt(unitPageType(), unitPage, u)};
}

/// Waits until the mbarrier at shared address `bar` has completed the
/// phase of parity `parity`.
static void waitBarrier(KernelBuilder &kb, Value bar, Value parity) {
  ptxStatement(kb,
               "{\n.reg .pred done;\nspin_wait_${:uid}:\n"
               "mbarrier.try_wait.parity.shared::cta.b64 done, [$0], $1;\n"
               "@!done bra spin_wait_${:uid};\n}",
               "r,r", {bar, parity});
}

/// Warpgroup 0 (its registers moved to the multipliers): lane 0
/// of warp k < mathGroups fills multiplier k's ring with its tiles k,
/// k + mathGroups, ...: once the multiplier has released the stage, one
/// tensor copy of the tile's 64 key rows (the copy engine writes the
/// 128-byte swizzle) and one of their scales, completing the stage's full
/// mbarrier by their bytes.
/// A tile on a bad page copies page 0's rows, which the epilogue masks.
void ScoreKernel::copyTiles(Value count) {
  // `instruction operands;`, or with spec.evictFirst the same under an L2
  // evict-first policy: keys and scales pass through the L2 once a step,
  // so they leave it before the scores this kernel writes.
  auto withCachePolicy = [&](StringRef instruction,
                             StringRef operands) -> std::string {
    if (!spec.evictFirst)
      return (instruction + " " + operands + ";").str();
    return ("{\n.reg .b64 policy;\n"
            "createpolicy.fractional.L2::evict_first.b64 policy, 1.0;\n" +
            instruction + ".L2::cache_hint " + operands + ", policy;\n}")
        .str();
  };
  ptxStatement(kb, "setmaxnreg.dec.sync.aligned.u32 " +
                       std::to_string(kCopierRegisters) + ";");
  Value copier = kb.andI(kb.cmp(CmpIPredicate::ult, warp, kb.i32(mathGroups)),
                         kb.cmp(CmpIPredicate::eq, lane, kb.i32(0)));
  kb.ifThen(copier, [&] {
    kb.forLoop(kb.i32(0), ringTrips(count, warp), kb.i32(1), [&](Value j) {
      RingStage rs = ringStage(j, warp);
      Value s = rs.stage;
      kb.ifThen(kb.cmp(CmpIPredicate::sge, j, kb.i32(kRingStages)),
                [&] {
                  waitBarrier(kb, stageBarrier(emptyBars, s),
                              kb.andI(kb.sub(rs.round, kb.i32(1)), kb.i32(1)));
                });
      // The tile's page and its first row there.
      TilePlace place = ringTilePlace(rs.tile);
      Value page = kb.select(kb.cmp(CmpIPredicate::sge, place.page, kb.i32(0)),
                             place.page, kb.i32(0));
      Value row = kb.remU(place.firstSlot, kb.i32(spec.pageSize));
      Value full = stageBarrier(fullBars, s);
      ptxStatement(kb,
                   "mbarrier.arrive.expect_tx.shared::cta.b64 _, [$0], " +
                       std::to_string(kTileBytes + (spec.scales ? 256 : 0)) +
                       ";",
                   "r", {full});
      Value stage = sharedAddress(
          kb, kb.gep(ringKeys, kb.i8T(), kb.mul(s, kb.i32(kTileBytes))));
      ptxStatement(kb,
                   withCachePolicy("cp.async.bulk.tensor.3d.shared::cluster."
                                   "global.tile.mbarrier::complete_tx::bytes",
                                   "[$0], [$1, {$2, $3, $4}], [$5]"),
                   "r,l,r,r,r,r", {stage, keyMap, kb.i32(0), row, page, full});
      if (spec.scales)
        ptxStatement(
            kb,
            withCachePolicy("cp.async.bulk.tensor.2d.shared::cluster.global."
                            "tile.mbarrier::complete_tx::bytes",
                            "[$0], [$1, {$2, $3}], [$4]"),
            "r,l,r,r,r",
            {sharedAddress(kb, kb.gep(ringScales, kb.i8T(),
                                      kb.mul(s, kb.i32(256)))),
             scaleMap, kb.mul(row, kb.i32(4)), page, full});
    });
  });
}

/// Warpgroups 1 .. mathGroups: tiles k - 1, k - 1 + mathGroups, ... of
/// warpgroup k, from its own ring. Per tile: this thread's two slots
/// located, the stage awaited, `wgmmaChains` wgmma chains of four k32
/// steps (keys as A, M = 64 slots; as B the queries of the chain's rows,
/// N = rows x heads) committed one group each, the scales read from the
/// stage and checked while they run; then per chain its wait and its
/// rows' epilogue, the stage released after the last wait. A chain's
/// epilogue runs while the later chains' MMAs do. Warp w of the group
/// holds slots 16 w .. 16 w + 15 of the tile, as a warp tile of the other
/// shapes does.
void ScoreKernel::multiplyTiles(Value count) {
  ptxStatement(kb, "setmaxnreg.inc.sync.aligned.u32 " +
                       std::to_string(mathRegisters) + ";");
  staged->weights = loadHeadWeights(kb.andI(lane, kb.i32(3)));
  Value group = kb.sub(kb.divU(warp, kb.i32(4)), kb.i32(1));
  Value wi = kb.remU(warp, kb.i32(4));
  const int64_t chainRows = rowsPerCta / wgmmaChains;
  const int64_t n = chainRows * H;
  kb.forLoop(kb.i32(0), ringTrips(count, group), kb.i32(1), [&](Value j) {
    RingStage rs = ringStage(j, group);
    Value s = rs.stage;
    Value parity = kb.andI(rs.round, kb.i32(1));
    SmallVector<Value> raw;
    // Each thread row's entry, slot and validity from the tile's place,
    // not looked up a slot.
    TilePlace place = ringTilePlace(rs.tile);
    Value pageOk = kb.cmp(CmpIPredicate::sge, place.page, kb.i32(0));
    Value tileStart = kb.add(ctaStart, place.local);
    for (int64_t r = 0; r < threadRows; ++r) {
      Value within = kb.add(kb.mul(wi, kb.i32(16)), kb.add(g, kb.i32(8 * r)));
      Value entry = kb.add(tileStart, within);
      Value slot = kb.add(place.firstSlot, within);
      Value valid = kb.andI(pageOk, kb.cmp(CmpIPredicate::slt, entry, total));
      // A sparse row's last selected block may reach past every row's
      // length (as in locateRow).
      if (spec.sparse)
        valid = kb.andI(valid, kb.cmp(CmpIPredicate::slt, slot, maxVisible));
      raw.append({valid, entry, slot});
      raw.append(chunks, zeroWords);
      if (spec.scales)
        raw.push_back(within);
    }
    waitBarrier(kb, stageBarrier(fullBars, s), parity);
    Value keysDesc = swizzledDescriptor(
        kb, kb.gep(ringKeys, kb.i8T(), kb.mul(s, kb.i32(kTileBytes))));
    NVVM::WgmmaFenceAlignedOp::create(b, loc);
    SmallVector<SmallVector<Value>> d(wgmmaChains);
    for (int64_t c = 0; c < wgmmaChains; ++c) {
      // The chain's query rows start 128 bytes a head into the staged
      // queries (8 descriptor units of 16 bytes).
      Value queriesDesc =
          kb.add(staged->descriptor, kb.i64(c * chainRows * H * 8));
      for (int64_t k = 0; k < 4; ++k)
        d[c] = wgmmaSharedE4M3(kb, n, d[c], kb.add(keysDesc, kb.i64(2 * k)),
                               kb.add(queriesDesc, kb.i64(2 * k)),
                               /*first=*/k == 0);
      NVVM::WgmmaGroupSyncAlignedOp::create(b, loc);
    }
    // The stage's scale of each thread row (in place of its row index).
    if (spec.scales)
      for (int64_t r = 0; r < threadRows; ++r) {
        Value &scale = raw[r * perRow + 3 + chunks];
        scale = kb.load(f32,
                        kb.gep(ringScales, kb.i8T(),
                               kb.mul(kb.add(kb.mul(s, kb.i32(64)), scale),
                                      kb.i32(4))),
                        4);
      }
    RowFactors rf = rowFactors(raw);
    for (int64_t c = 0; c < wgmmaChains; ++c) {
      NVVM::WgmmaWaitGroupSyncOp::create(b, loc, wgmmaChains - 1 - c);
      if (c == wgmmaChains - 1) {
        // The warp's wgmma reads of the stage ended with its last wait;
        // lane 0 releases the stage once every lane is past it.
        kb.syncWarp();
        kb.ifThen(kb.cmp(CmpIPredicate::eq, lane, kb.i32(0)), [&] {
          ptxStatement(kb,
                       "{\n.reg .b64 state;\n"
                       "mbarrier.arrive.shared::cta.b64 state, [$0];\n}",
                       "r", {stageBarrier(emptyBars, s)});
        });
      }
      SmallVector<Accumulators> accs;
      for (int64_t q = 0; q < chainRows; ++q)
        accs.push_back(chainRow(d[c], q));
      epilogue(raw, accs, c * chainRows, rf);
    }
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

/// One thread row's raw data: whether `entry` is valid (in range, on a
/// good page and visible to some row), the entry, its slot, this thread's
/// 16 bytes of each chunk of its key row and its scale (zeros when not
/// valid). Entries past the CTA's range (the prefetch after its last tile)
/// load nothing.
SmallVector<Value> ScoreKernel::fetchRow(Value entry) {
  TileRow row = locateRow(entry);
  SmallVector<Type> types(chunks, words);
  if (spec.scales)
    types.push_back(f32);
  SmallVector<Value> loaded = kb.ifThenElse(
      types, row.valid,
      [&]() -> SmallVector<Value> { return loadKeyRow(row.place); },
      [&]() -> SmallVector<Value> {
        SmallVector<Value> v(chunks, zeroWords);
        if (spec.scales)
          v.push_back(kb.f32(0.0));
        return v;
      });
  SmallVector<Value> raw = {row.valid, row.entry, row.slot};
  raw.append(loaded.begin(), loaded.end());
  return raw;
}

/// Where thread row entry `entry` lies (the unit lookups of
/// lookupUnitPages) and whether it is valid.
ScoreKernel::TileRow ScoreKernel::locateRow(Value entry) {
  Value local = kb.sub(entry, ctaStart);
  Value inCta = kb.cmp(CmpIPredicate::ult, local, kb.i32(ctaEntries));
  Value u = kb.select(inCta, kb.divU(local, kb.i32(unit)), kb.i32(0));
  Value within = kb.remU(local, kb.i32(unit));
  Value slot = kb.add(kb.loadAt(i32, unitSlot, u), within);
  // Fused pages: the unit holds its page's first byte (unitPageType).
  Value page = kb.loadAt(unitPageType(), unitPage, u);
  Value valid = kb.andI(
      kb.andI(inCta, kb.cmp(CmpIPredicate::slt, entry, total)),
      kb.cmp(CmpIPredicate::sge, page,
             spec.fusedPages ? kb.i64(0) : kb.i32(0)));
  if (spec.sparse)
    valid = kb.andI(valid, kb.cmp(CmpIPredicate::slt, slot, maxVisible));
  Value offset = kb.remU(slot, kb.i32(spec.pageSize));
  KeyRowPlace place =
      spec.fusedPages ? KeyRowPlace{Value(), page, kb.extS64(offset)}
                      : keyRowPlace(page, offset);
  return {valid, entry, slot, place};
}

/// Key row `offset` of page `page` (i32): the compact layouts number the
/// rows of all pages in one sequence (`slotIndex`, of the keys and of the
/// scales alike); the fused fp8 pages (`spec.fusedPages`) put each page's
/// rows and then its scales in `pageBytes()` bytes, with `keys` and
/// `scales` the same pointer.
ScoreKernel::KeyRowPlace ScoreKernel::keyRowPlace(Value page, Value offset) {
  if (spec.fusedPages)
    return {Value(), fusedPageByte(page), kb.extS64(offset)};
  return {kb.add(kb.mul(kb.extS64(page), kb.i64(spec.pageSize)),
                 kb.extS64(offset)),
          Value(), Value()};
}

/// The first byte of fused page `page` (i32) from `keys`.
Value ScoreKernel::fusedPageByte(Value page) {
  return kb.mul(kb.extS64(page), kb.i64(spec.pageBytes()));
}

/// The byte offset of a key row from `keys`.
Value ScoreKernel::keyRowByte(const KeyRowPlace &place) {
  const int64_t rowBytes = Dh * keyBytes;
  if (place.slotIndex)
    return kb.mul(place.slotIndex, kb.i64(rowBytes));
  return kb.add(place.pageByte, kb.mul(place.offset, kb.i64(rowBytes)));
}

/// The address of a key row's scale.
Value ScoreKernel::scaleAddress(const KeyRowPlace &place) {
  if (place.slotIndex)
    return kb.gep(scales, f32, place.slotIndex);
  Value byte = kb.add(place.pageByte,
                      kb.add(kb.mul(place.offset, kb.i64(4)),
                             kb.i64(spec.pageSize * Dh * keyBytes)));
  return kb.gep(scales, kb.i8T(), byte);
}

/// This thread's 16-byte vector of each chunk of a key row, and its scale.
SmallVector<Value> ScoreKernel::loadKeyRow(const KeyRowPlace &place) {
  Value rowByte =
      kb.add(keyRowByte(place), kb.extS64(kb.mul(t, kb.i32(16))));
  SmallVector<Value> v;
  for (int64_t c = 0; c < chunks; ++c) {
    Value at = kb.add(rowByte, kb.i64(c * chunkElems * keyBytes));
    v.push_back(kb.load(words, kb.gep(keys, kb.i8T(), at), 16, true));
  }
  if (spec.scales)
    v.push_back(kb.load(f32, scaleAddress(place), 4, true));
  return v;
}

/// The MMAs and the epilogues of one tile from its raw rows: the A
/// registers once, then every query row of the CTA.
void ScoreKernel::computeTile(ValueRange raw) {
  ARegisters aRegs = aRegisters(raw);
  if (spec.wgmma) {
    mmaWgmma(raw, aRegs);
    return;
  }
  RowFactors rf = rowFactors(raw);
  for (int64_t r = 0; r < rowsPerCta; ++r)
    epilogue(raw, {mmaSync(aRegs, r)}, r, rf);
}

/// Thread row r's A registers of chunk c, in k-step order (two per k-step:
/// k 2t..2t+1 and 2t+8..2t+9 of the mma.sync m16n8k16 A layout, or
/// 4t..4t+3 and 4t+16..4t+19 of the m16n8k32 one); fp8 keys of f16 MMAs
/// become f16 pairs here, those of e4m3 MMAs stay as loaded.
SmallVector<Value> ScoreKernel::chunkRegs(ValueRange raw, int64_t r,
                                          int64_t c) {
  SmallVector<Value> regs;
  Value vec = rowPart(raw, r, 3 + c);
  for (int64_t x = 0; x < 4; ++x) {
    Value word = kb.extract(vec, x);
    if (fp8 && !fp8Mma) {
      auto [lo, hi] = fp8QuadToF16(kb, word);
      regs.append({lo, hi});
    } else {
      regs.push_back(word);
    }
  }
  return regs;
}

/// The tile's A registers: per M tile and k-step, {top[2s], bottom[2s],
/// top[2s + 1], bottom[2s + 1]} of its two thread rows.
ScoreKernel::ARegisters ScoreKernel::aRegisters(ValueRange raw) {
  ARegisters aRegs(mTiles);
  for (int64_t mt = 0; mt < mTiles; ++mt)
    for (int64_t c = 0; c < chunks; ++c) {
      SmallVector<Value> top = chunkRegs(raw, 2 * mt, c);
      SmallVector<Value> bottom = chunkRegs(raw, 2 * mt + 1, c);
      for (int64_t s = 0; s < ksteps; ++s)
        aRegs[mt].push_back(
            {top[2 * s], bottom[2 * s], top[2 * s + 1], bottom[2 * s + 1]});
    }
  return aRegs;
}

/// The tile's dot products by warpgroup-wide wgmma chains (A from
/// registers, B the staged queries), `wgmmaRows` query rows (N =
/// wgmmaRows * H) a chain, each followed by its rows' epilogues.
void ScoreKernel::mmaWgmma(ValueRange raw, const ARegisters &aRegs) {
  const int64_t kstepBytes = rowsPerCta * H * 32;
  RowFactors rf = rowFactors(raw);
  // The A registers are pinned before the first fence, so that no
  // conversion lands between a fence and the wgmma that reads it.
  SmallVector<SmallVector<Value, 4>> a = aRegs[0];
  for (SmallVector<Value, 4> &regs : a)
    for (Value &v : regs)
      v = pinRegister(kb, v, "r");
  for (int64_t first = 0; first < rowsPerCta; first += wgmmaRows) {
    const int64_t rows = std::min(wgmmaRows, rowsPerCta - first);
    const int64_t n = rows * H;
    // The group's heads start 256 bytes per 8 heads into each k-step.
    const int64_t groupBytes = first * H / 8 * 256;
    NVVM::WgmmaFenceAlignedOp::create(b, loc);
    SmallVector<Value> d;
    for (int64_t S = 0; S < chunks * ksteps; ++S)
      d = wgmmaRegA(kb, mmaFormat, n, d, a[S],
                    kb.add(staged->descriptor,
                           kb.i64((S * kstepBytes + groupBytes) / 16)),
                    /*first=*/S == 0);
    NVVM::WgmmaGroupSyncAlignedOp::create(b, loc);
    NVVM::WgmmaWaitGroupSyncOp::create(b, loc, 0);
    for (int64_t r = 0; r < rows; ++r)
      epilogue(raw, {chainRow(d, r)}, first + r, rf);
  }
}

ScoreKernel::Accumulators ScoreKernel::chainRow(ArrayRef<Value> d,
                                               int64_t r) {
  Accumulators acc(1, SmallVector<SmallVector<Value, 4>>(nTiles));
  for (int64_t nt = 0; nt < nTiles; ++nt)
    for (int64_t j = 0; j < 4; ++j)
      acc[0][nt].push_back(pinRegister(kb, d[4 * (r * nTiles + nt) + j], "f"));
  return acc;
}

/// Query row `qrow`'s dot products of the tile by mma.sync per warp, chunk
/// by chunk: each chunk's B registers (loaded from the staged queries)
/// serve every M tile.
ScoreKernel::Accumulators ScoreKernel::mmaSync(const ARegisters &aRegs,
                                               int64_t qrow) {
  Accumulators acc(mTiles, SmallVector<SmallVector<Value, 4>>(
                               nTiles, SmallVector<Value, 4>(4, kb.f32(0.0))));
  // A thread's query bytes of a chunk: one or two 16-byte vectors.
  const int64_t threadBytes = chunkElems / 4 * qBytes;
  for (int64_t c = 0; c < chunks; ++c) {
    for (int64_t nt = 0; nt < nTiles; ++nt) {
      // This thread's B registers: head nt*8+g of the row, the same bytes
      // of the chunk as its A registers.
      Value head = kb.add(g, kb.i32(qrow * H + nt * 8));
      Value base = kb.add(kb.mul(head, kb.i32(qStrideBytes)),
                          kb.add(kb.i32(c * chunkElems * qBytes),
                                 kb.mul(t, kb.i32(threadBytes))));
      SmallVector<Value> qRegs;
      for (int64_t v = 0; v < threadBytes / 16; ++v) {
        Value vec = kb.load(words,
                            kb.gep(staged->queries, kb.i8T(),
                                   kb.add(base, kb.i32(v * 16))),
                            16);
        for (int64_t x = 0; x < 4; ++x)
          qRegs.push_back(kb.extract(vec, x));
      }
      for (int64_t mt = 0; mt < mTiles; ++mt)
        for (int64_t s = 0; s < ksteps; ++s) {
          const SmallVector<Value, 4> &a = aRegs[mt][c * ksteps + s];
          SmallVector<Value, 2> bRegs = {qRegs[2 * s], qRegs[2 * s + 1]};
          acc[mt][nt] = fp8Mma ? mma16832E4M3(kb, a, bRegs, acc[mt][nt])
                               : kb.mma16816(bf16Mma, a, bRegs, acc[mt][nt]);
        }
    }
  }
  return acc;
}

ScoreKernel::RowFactors ScoreKernel::rowFactors(ValueRange raw) {
  RowFactors rf;
  Value allFast = kb.i1(true);
  for (int64_t r = 0; r < threadRows; ++r) {
    Value factor = staged->unscale;
    if (spec.scales)
      factor = factor ? kb.mul(factor, rowPart(raw, r, 3 + chunks))
                      : rowPart(raw, r, 3 + chunks);
    rf.factors.push_back(factor);
    if (factor) {
      // Finite and positive (subnormals included): its bits less one,
      // unsigned, below those of the largest finite f32.
      Value bits = kb.bitcast(factor, i32);
      Value finitePositive =
          kb.cmp(CmpIPredicate::ult, kb.sub(bits, kb.i32(1)),
                 kb.i32(0x7f7fffff));
      allFast = kb.andI(allFast, kb.orI(kb.not1(rowPart(raw, r, 0)),
                                        finitePositive));
    }
  }
  if (rf.factors[0])
    rf.warpFast = kb.cmp(CmpIPredicate::eq, kb.ballot(allFast), kb.i32(-1));
  return rf;
}

/// Sums over the four lanes of a group without a shuffle per value: at
/// each of the two butterfly steps a lane keeps one value of each pair
/// (the lower if its bit of the step is clear) and adds its partner's
/// copy of it, so the values halve each step; one left is summed by a
/// plain butterfly. Each sum is formed as the plain butterfly forms it
/// (the lane's own partial sum first, f32 addition commutes), so the
/// result is the same in every lane that holds it.
ScoreKernel::QuadSums ScoreKernel::reduceOverQuad(ArrayRef<Value> v) {
  QuadSums q;
  q.sums.assign(v.begin(), v.end());
  for (int64_t i = 0; i < static_cast<int64_t>(v.size()); ++i)
    q.index.push_back({i, i, i, i});
  for (int64_t mask : {1, 2}) {
    Value upper = quadBit(mask);
    QuadSums next;
    const int64_t size = q.sums.size();
    for (int64_t k = 0; k + 1 < size; k += 2) {
      Value lo = q.sums[k], hi = q.sums[k + 1];
      Value keep = kb.select(upper, hi, lo);
      Value send = kb.select(upper, lo, hi);
      next.sums.push_back(kb.add(keep, kb.shflXor(send, mask)));
      std::array<int64_t, 4> index;
      for (int64_t lane = 0; lane < 4; ++lane)
        index[lane] = (lane & mask) ? q.index[k + 1][lane] : q.index[k][lane];
      next.index.push_back(index);
    }
    if (size % 2) {
      Value last = q.sums.back();
      next.sums.push_back(kb.add(last, kb.shflXor(last, mask)));
      next.index.push_back(q.index.back());
    }
    q = std::move(next);
  }
  return q;
}

Value ScoreKernel::quadSelect(const std::array<int64_t, 4> &index,
                              function_ref<Value(int64_t)> valueOf) {
  auto pick = [&](Value bit, Value set, Value clear) {
    return set == clear ? set : kb.select(bit, set, clear);
  };
  SmallVector<Value, 4> values(4);
  for (int64_t lane = 0; lane < 4; ++lane) {
    for (int64_t prev = 0; prev < lane && !values[lane]; ++prev)
      if (index[prev] == index[lane])
        values[lane] = values[prev];
    if (!values[lane])
      values[lane] = valueOf(index[lane]);
  }
  Value bit0 = quadBit(1), bit1 = quadBit(2);
  return pick(bit1, pick(bit0, values[3], values[2]),
              pick(bit0, values[1], values[0]));
}

/// The epilogue of query rows firstQ .. firstQ + accs.size() - 1 of the
/// tile: ReLU(dot * scale) * w summed over the heads (the group's four
/// threads hold a row's heads), one store per entry below the row's entry
/// count. Several rows share one branch, so that their independent head
/// sums interleave: the copying warpgroup's multipliers, a warp or two of
/// them per scheduler, wait on the latency of one row's chain of FMAs
/// otherwise. The group's sums of its (query row, thread row) pairs end in
/// its lanes a quarter each (reduceOverQuad), and each lane stores its
/// own.
void ScoreKernel::epilogue(ValueRange raw, ArrayRef<Accumulators> accs,
                           int64_t firstQ, const RowFactors &rf) {
  const int64_t rows = accs.size();
  SmallVector<SmallVector<Value>> weights(rows);
  SmallVector<Value> outBases, rowTotals;
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t qrow = firstQ + i;
    outBases.push_back(kb.mul(
        kb.add(kb.add(kb.mul(request, kb.i32(R)), firstRow), kb.i32(qrow)),
        kb.i32(spec.outWidth())));
    // Dense rows write their visible entries (the others are -inf or left
    // as they are); sparse rows write every selected entry.
    rowTotals.push_back(spec.sparse ? total : visible[qrow]);
    weights[i].assign(
        staged->weights.begin() + std::min<size_t>(staged->weights.size(),
                                                   qrow * nTiles * 2),
        staged->weights.begin() + std::min<size_t>(staged->weights.size(),
                                                   (qrow + 1) * nTiles * 2));
    if (staged->weightTable) {
      Value quad = kb.andI(lane, kb.i32(3));
      for (int64_t nt = 0; nt < nTiles; ++nt)
        for (int64_t j = 0; j < 2; ++j)
          weights[i].push_back(kb.loadAt(
              f32, staged->weightTable,
              kb.add(kb.mul(quad, kb.i32(2)),
                     kb.i32(qrow * H + nt * 8 + j))));
    }
  }
  const SmallVector<Value> &factors = rf.factors;
  // A finite positive factor f leaves ReLU(dot * f) = ReLU(dot) * f, so
  // it multiplies the head sum once instead of every head's dot (a third
  // of the epilogue's instructions, which bound the rows of an MTP step);
  // a warp with a zero, negative or non-finite factor in its tile (or none
  // at all) multiplies every dot, as the CPU does. sums[i * threadRows +
  // r]: row firstQ + i, thread row r.
  auto headSums = [&](bool fold) -> SmallVector<Value> {
    SmallVector<Value> sums;
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t r = 0; r < threadRows; ++r) {
        int64_t mt = r / 2, half = r % 2;
        Value sum = kb.f32(0.0);
        for (int64_t nt = 0; nt < nTiles; ++nt)
          for (int64_t j = 0; j < 2; ++j) {
            Value dot = accs[i][mt][nt][2 * half + j];
            if (factors[r] && !fold)
              dot = kb.mul(dot, factors[r]);
            Value relu = kb.maxF(dot, kb.f32(0.0));
            sum = LLVM::FMAOp::create(b, loc, weights[i][2 * nt + j], relu,
                                      sum);
          }
        sums.push_back(sum);
      }
    return sums;
  };
  SmallVector<Value> sums;
  if (!rf.warpFast)
    sums = headSums(false);
  else
    sums = kb.ifThenElse(
        SmallVector<Type>(rows * threadRows, f32), rf.warpFast,
        [&]() -> SmallVector<Value> { return headSums(true); },
        [&]() -> SmallVector<Value> { return headSums(false); });
  QuadSums reduced = reduceOverQuad(sums);
  for (size_t e = 0; e < reduced.sums.size(); ++e) {
    const std::array<int64_t, 4> &index = reduced.index[e];
    auto of = [&](auto part) {
      return quadSelect(index, [&](int64_t x) {
        return part(x / threadRows, x % threadRows);
      });
    };
    Value sum = reduced.sums[e];
    if (rf.warpFast)
      sum = kb.select(rf.warpFast,
                      kb.mul(sum, of([&](int64_t, int64_t r) {
                        return factors[r];
                      })),
                      sum);
    Value valid = of([&](int64_t i, int64_t r) {
      Value v = rowPart(raw, r, 0);
      if (spec.sparse && rowsPerCta > 1)
        v = kb.andI(v, kb.cmp(CmpIPredicate::slt, rowPart(raw, r, 2),
                              visible[firstQ + i]));
      return v;
    });
    Value entry = of([&](int64_t, int64_t r) { return rowPart(raw, r, 1); });
    // Every entry of the row is written: one on a bad page (and, sparse,
    // past the row's visible length) as NaN, never selected and never
    // folded into the state, so that the top-K reads no stale or
    // unwritten score.
    Value write = kb.andI(
        of([&](int64_t i, int64_t) { return lengthOk[firstQ + i]; }),
        kb.cmp(CmpIPredicate::slt, entry,
               of([&](int64_t i, int64_t) { return rowTotals[i]; })));
    Value value = kb.select(valid, sum, kb.f32Bits(0x7fc00000u));
    Value outBase = of([&](int64_t i, int64_t) { return outBases[i]; });
    kb.ifThen(write,
              [&] { kb.storeAt(value, out, kb.add(outBase, entry)); });
  }
}

/// Sparse grids put the rows in x (see loadBeforeWait).
LaunchShape ScoreKernel::launchShape() const {
  LaunchShape shape;
  const int64_t ctasPerRow = (spec.outWidth() + ctaEntries - 1) / ctaEntries;
  const int64_t groups = spec.batch * rowGroups;
  shape.grid = {spec.sparse ? groups : ctasPerRow,
                spec.sparse ? ctasPerRow : groups, 1};
  shape.blockThreads = threads;
  if (spec.copyWarpgroup)
    shape.sharedBytes = 1024 + rowsPerCta * H * 128 +
                        mathGroups * kRingStages * (kTileBytes + 256 + 2 * 8);
  return shape;
}

} // namespace

int64_t mlir::spin::gpu_codegen::scoreRowsPerCta(int64_t rows, int64_t heads,
                                                 int64_t headDim,
                                                 int64_t queryBytes,
                                                 bool wgmma) {
  // f16/bf16 MMAs take twice the k-steps of e4m3 ones: with several rows
  // a CTA is bound by its MMAs and epilogues, not by the key reads it
  // saves, and the rows' registers halve the CTAs an SM holds, which
  // made several rows a CTA slower than one (commit c9ac52d has the
  // figures). They keep a CTA per row.
  if (queryBytes != 1)
    return 1;
  // A row's staged queries: the wgmma B layout, or rows padded by 16 bytes.
  const int64_t perRow =
      heads * (wgmma ? headDim * queryBytes : headDim * queryBytes + 16);
  constexpr int64_t kStagingBytes = 40 * 1024;
  for (int64_t r = rows; r > 1; --r)
    if (rows % r == 0 && r * perRow <= kStagingBytes)
      return r;
  return 1;
}

int64_t mlir::spin::gpu_codegen::scoreRowsPerCta(const ScoreKernelSpec &spec) {
  return scoreRowsPerCta(
      spec.rows, spec.heads, spec.headDim,
      spec.queryFormat == ElementFormat::fp8e4m3 ? 1 : 2, spec.wgmma);
}

LaunchShape mlir::spin::gpu_codegen::buildScoreKernel(
    OpBuilder &b, Location loc, gpu::GPUModuleOp module,
    const ScoreKernelSpec &spec) {
  return ScoreKernel(b, loc, module, spec).build();
}
