//===- bench/prototypes/ws_score.cu - warp-specialised scoring probe -----===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
// A design probe for issue 26, not product code: the dense indexer's
// scoring (fp8 e4m3 keys with an f32 scale per slot, fp8 e4m3 queries,
// H = 64, Dh = 128, 64-slot pages, R query rows per request) in the shape
// docs/benchmarks-kernels.md proposes for the compiler's next scoring
// kernel, written by hand so that one run on the GPU machine says whether
// the shape is worth generating:
//
//   * one warpgroup copies: per 64-slot tile, the page from the block table,
//     the tile's 8 KiB of keys (16-byte cp.async into the 128-byte swizzled
//     layout wgmma reads) and its 64 scales into a ring of STAGES tiles,
//     completing on the stage's "full" mbarrier (cp.async.mbarrier.arrive);
//   * two warpgroups multiply: keys as wgmma's A (M = 64 slots) and the
//     request's R x H queries as B (N = R x 64), both from shared memory,
//     one chain of four k32 steps per tile, then each row's ReLU, head
//     weights, head sum and key scale, and the stage's "empty" mbarrier;
//   * setmaxnreg moves registers from the copier to the multipliers
//     (WS_MATH_WG=3: three multiplying warpgroups instead of two).
//
// WS_COPY=tma replaces the cp.async copier by the copy engine (the shape of
// DeepGEMM's sm_90 paged logits kernel): each multiplying warpgroup (four
// by default for R <= 2, WS_MATH_WG=2 for two) has a ring of its own, which
// one lane of warp k of warpgroup 0 fills, a tile at a time, with one
// tensor copy of the page's keys through a tensor map (the copy engine
// writes the 128-byte swizzle) and one bulk copy of its scales, both
// completing on the stage's mbarrier by their byte count.
//
// The host program fills random inputs, runs the kernel, checks sampled
// scores against a double-precision host reference and times it as
// bench_gpu.py times ours (L2 flushed by a 256 MiB memset before each
// repetition, CUDA events, the median).
//
//   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -o ws_score ws_score.cu
//   [WS_COPY=tma|cp.async] [WS_MATH_WG=n] ./ws_score B N R reps tiles_per_cta...
//
//===----------------------------------------------------------------------===//

#include <cuda.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#define CHECK(call)                                                            \
  do {                                                                         \
    cudaError_t e = (call);                                                    \
    if (e != cudaSuccess) {                                                    \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,      \
                   cudaGetErrorString(e));                                     \
      std::exit(1);                                                            \
    }                                                                          \
  } while (0)

constexpr int H = 64, DH = 128, PAGE = 64, STAGES = 8;
constexpr int TILE_BYTES = PAGE * DH; // 8 KiB of fp8 keys

//===----------------------------------------------------------------------===//
// PTX helpers
//===----------------------------------------------------------------------===//

__device__ __forceinline__ uint32_t smemAddr(const void *p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbarInit(uint64_t *bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smemAddr(bar)),
               "r"(count));
}
__device__ __forceinline__ void mbarArrive(uint64_t *bar) {
  asm volatile("{\n.reg .b64 s;\nmbarrier.arrive.shared::cta.b64 s, [%0];\n}"
               ::"r"(smemAddr(bar)) : "memory");
}
__device__ __forceinline__ void mbarWait(uint64_t *bar, uint32_t parity) {
  asm volatile("{\n.reg .pred done;\nwait_%=:\n"
               "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
               "@!done bra wait_%=;\n}" ::"r"(smemAddr(bar)),
               "r"(parity) : "memory");
}
/// Arrives on `bar` once every cp.async this thread issued so far is done.
__device__ __forceinline__ void cpAsyncArrive(uint64_t *bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];"
               ::"r"(smemAddr(bar)) : "memory");
}
__device__ __forceinline__ void cpAsync16(void *dst, const void *src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smemAddr(dst)),
               "l"(src) : "memory");
}
__device__ __forceinline__ void cpAsync4(void *dst, const void *src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(smemAddr(dst)),
               "l"(src) : "memory");
}
__device__ __forceinline__ void fenceProxyAsync() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
template <int N> __device__ __forceinline__ void setMaxRegIncrease() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(N));
}
template <int N> __device__ __forceinline__ void setMaxRegDecrease() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(N));
}

/// The tensor-memory-access copies (WS_COPY=tma): one thread moves a
/// whole tile, completing on an mbarrier that expects its bytes.
__device__ __forceinline__ void mbarExpect(uint64_t *bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
               ::"r"(smemAddr(bar)), "r"(bytes) : "memory");
}
/// Box (0, 0, page) of the key map: the page's 64 rows of 128 bytes,
/// written in the 128-byte swizzled layout the map declares.
__device__ __forceinline__ void tmaKeys(void *dst, const CUtensorMap *map,
                                        int page, uint64_t *bar) {
  asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile"
               ".mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];"
               ::"r"(smemAddr(dst)), "l"(map), "r"(0), "r"(0), "r"(page),
               "r"(smemAddr(bar)) : "memory");
}
/// `bytes` contiguous bytes (a multiple of 16, both ends 16-aligned).
__device__ __forceinline__ void bulkCopy(void *dst, const void *src,
                                         uint32_t bytes, uint64_t *bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx"
               "::bytes [%0], [%1], %2, [%3];"
               ::"r"(smemAddr(dst)), "l"(src), "r"(bytes),
               "r"(smemAddr(bar)) : "memory");
}

/// A K-major shared-memory matrix descriptor, 128-byte swizzle: rows of
/// 128 bytes, eight-row groups 1024 bytes apart (the base 1024-aligned).
__device__ __forceinline__ uint64_t descriptor(const void *p) {
  uint64_t d = 0;
  d |= (smemAddr(p) >> 4) & 0x3FFF;
  // Leading byte offset 0: swizzled K-major layouts do not use it.
  d |= uint64_t(1024 >> 4) << 32;  // stride byte offset
  d |= uint64_t(1) << 62;          // 128-byte swizzle
  return d;
}
/// Byte of (row, 16-byte chunk) in a 128-byte swizzled tile.
__host__ __device__ __forceinline__ uint32_t swizzled(uint32_t row,
                                                      uint32_t chunk) {
  return row * 128 + ((chunk ^ (row & 7)) << 4);
}

__device__ __forceinline__ void wgmmaFence() {
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void wgmmaCommit() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void wgmmaWait0() {
  asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
}

__device__ __forceinline__ void wgmma_64(float* d, uint64_t da, uint64_t db, int scaleD) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 "
               "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1;\n}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
               : "l"(da), "l"(db), "r"(scaleD));
}

__device__ __forceinline__ void wgmma_128(float* d, uint64_t da, uint64_t db, int scaleD) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 "
               "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1;\n}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
               : "l"(da), "l"(db), "r"(scaleD));
}

__device__ __forceinline__ void wgmma_256(float* d, uint64_t da, uint64_t db, int scaleD) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3 "
               "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, %128, %129, p, 1, 1;\n}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
               : "l"(da), "l"(db), "r"(scaleD));
}

__device__ __forceinline__ void fenceOperand(float &x) {
  asm volatile("" : "+f"(x)::"memory");
}

template <int R> __device__ __forceinline__ void wgmmaRows(float *d, uint64_t da,
                                                           uint64_t db,
                                                           int scaleD) {
  if constexpr (R == 1)
    wgmma_64(d, da, db, scaleD);
  else if constexpr (R == 2)
    wgmma_128(d, da, db, scaleD);
  else
    wgmma_256(d, da, db, scaleD);
}

//===----------------------------------------------------------------------===//
// The kernel
//===----------------------------------------------------------------------===//

struct Params {
  const uint8_t *q;      // [B, R, H, DH] e4m3
  const float *w;        // [B, R, H]
  const uint8_t *keys;   // [pages, PAGE, DH] e4m3
  const float *scales;   // [pages * PAGE]
  const int32_t *table;  // [B, maxPages]
  const int32_t *lengths;// [B, R]
  float *out;            // [B, R, maxPages * PAGE]
  int maxPages, tilesPerCta;
};

/// Shared memory: the queries (R x H rows of 128 bytes, swizzled), the ring's
/// key tiles and scales, and the mbarriers.
template <int R> struct Shared {
  static constexpr int qBytes = R * H * DH;
  static constexpr int keysAt = qBytes;                        // 1024-aligned
  static constexpr int scalesAt = keysAt + STAGES * TILE_BYTES;
  static constexpr int barsAt = scalesAt + STAGES * PAGE * 4;
  static constexpr int bytes = barsAt + 2 * STAGES * 8 + 1024; // + alignment
};

/// MATH multiplying warpgroups beside the copying one. The registers after
/// setmaxnreg: 40 for the copier and 232 each with two, 24 and 160 with
/// three (at most 64K a CTA).
template <int MATH> struct Registers {
  static constexpr int threads = 128 * (1 + MATH);
  static constexpr int copier = MATH == 2 ? 40 : 24;
  static constexpr int math = MATH == 2 ? 232 : 160;
  static_assert(128 * copier + 128 * MATH * math <= 65536, "registers");
};

/// The head weights of this thread's accumulator columns and each row's
/// length.
template <int R>
__device__ __forceinline__ void loadRowInputs(const Params &p, int b, int t,
                                              float (&wts)[R][16],
                                              int (&len)[R]) {
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e)
        wts[r][2 * j + e] = p.w[(size_t(b) * R + r) * H + 8 * j + 2 * t + e];
    len[r] = p.lengths[b * R + r];
  }
}

/// Each row's epilogue of a tile: ReLU, head weights and the head sum of
/// the thread's two slots (slot0, slot0 + 8), times their key scales.
template <int R>
__device__ __forceinline__ void storeTile(const Params &p, int b, int slot0,
                                          const float *acc,
                                          const float (&wts)[R][16],
                                          const int (&len)[R], float scale0,
                                          float scale1, int t) {
  const int width = p.maxPages * PAGE, slot1 = slot0 + 8;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    float s0 = 0.f, s1 = 0.f;
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        s0 = fmaf(wts[r][2 * j + e], fmaxf(acc[4 * (8 * r + j) + e], 0.f), s0);
        s1 = fmaf(wts[r][2 * j + e], fmaxf(acc[4 * (8 * r + j) + 2 + e], 0.f),
                  s1);
      }
    s0 += __shfl_xor_sync(0xffffffffu, s0, 1);
    s0 += __shfl_xor_sync(0xffffffffu, s0, 2);
    s1 += __shfl_xor_sync(0xffffffffu, s1, 1);
    s1 += __shfl_xor_sync(0xffffffffu, s1, 2);
    float *o = p.out + (size_t(b) * R + r) * width;
    if (t == 0) {
      o[slot0] = slot0 < len[r] ? s0 * scale0 : -INFINITY;
      o[slot1] = slot1 < len[r] ? s1 * scale1 : -INFINITY;
    }
  }
}

/// The tile's wgmma chain: keys (A, M = 64 slots) by the R x H queries
/// (B), four k32 steps, then the stage's scales of the thread's slots and
/// the chain's end.
template <int R>
__device__ __forceinline__ void multiplyTile(float *acc, const uint8_t *keysTile,
                                             const uint8_t *qs,
                                             const float *scales, int slot,
                                             float &scale0, float &scale1) {
#pragma unroll
  for (int x = 0; x < R * 32; ++x)
    fenceOperand(acc[x]);
  wgmmaFence();
#pragma unroll
  for (int k = 0; k < DH / 32; ++k)
    wgmmaRows<R>(acc, descriptor(keysTile + 32 * k), descriptor(qs + 32 * k),
                 k > 0);
  wgmmaCommit();
#pragma unroll
  for (int x = 0; x < R * 32; ++x)
    fenceOperand(acc[x]);
  scale0 = scales[slot];
  scale1 = scales[slot + 8];
  wgmmaWait0();
}

/// The dynamic shared memory from its first 1024-byte boundary (the
/// 128-byte swizzle's alignment).
__device__ __forceinline__ uint8_t *alignedShared(uint8_t *raw) {
  return reinterpret_cast<uint8_t *>(
      (reinterpret_cast<uintptr_t>(raw) + 1023) & ~uintptr_t(1023));
}

/// The tiles of request `b` that CTA tiles `first` .. hold below its rows'
/// longest length (at most tilesPerCta).
template <int R>
__device__ __forceinline__ int ctaTiles(const Params &p, int b, int first) {
  int maxLen = 0;
  for (int r = 0; r < R; ++r)
    maxLen = max(maxLen, p.lengths[b * R + r]);
  const int tiles = (maxLen + PAGE - 1) / PAGE;
  return min(p.tilesPerCta, tiles - first);
}

/// The queries into the swizzled B layout (row n = r * H + h), by all
/// threads, published to the tensor cores.
template <int R>
__device__ __forceinline__ void stageQueries(const Params &p, int b,
                                             uint8_t *qs) {
  const uint8_t *qb = p.q + size_t(b) * R * H * DH;
  for (int c = threadIdx.x; c < R * H * 8; c += blockDim.x) {
    int row = c / 8, chunk = c % 8;
    *reinterpret_cast<uint4 *>(qs + swizzled(row, chunk)) =
        *reinterpret_cast<const uint4 *>(qb + row * DH + chunk * 16);
  }
  fenceProxyAsync();
}

template <int R, int MATH>
__global__ void __launch_bounds__(Registers<MATH>::threads, 1)
    scoreKernel(Params p) {
  extern __shared__ uint8_t rawShared[];
  uint8_t *smem = alignedShared(rawShared);
  using S = Shared<R>;
  uint8_t *qs = smem;
  uint8_t *ring = smem + S::keysAt;
  float *ringScales = reinterpret_cast<float *>(smem + S::scalesAt);
  uint64_t *full = reinterpret_cast<uint64_t *>(smem + S::barsAt);
  uint64_t *empty = full + STAGES;

  const int b = blockIdx.y, first = blockIdx.x * p.tilesPerCta;
  const int count = ctaTiles<R>(p, b, first);
  if (count <= 0)
    return; // (the prototype's inputs have full lengths)

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  if (tid == 0) {
    for (int s = 0; s < STAGES; ++s) {
      mbarInit(&full[s], 128);
      mbarInit(&empty[s], 4);
    }
  }
  stageQueries<R>(p, b, qs);
  __syncthreads();

  if (warp < 4) {
    // The copier.
    setMaxRegDecrease<Registers<MATH>::copier>();
    const int32_t *row = p.table + size_t(b) * p.maxPages;
    for (int i = 0; i < count; ++i) {
      const int s = i % STAGES;
      if (i >= STAGES)
        mbarWait(&empty[s], ((i / STAGES) - 1) & 1);
      const int page = row[first + i];
      const uint8_t *src = p.keys + size_t(page) * TILE_BYTES;
      uint8_t *dst = ring + s * TILE_BYTES;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        int c = tid + 128 * k, r = c / 8, chunk = c % 8;
        cpAsync16(dst + swizzled(r, chunk), src + r * DH + chunk * 16);
      }
      if (tid < PAGE)
        cpAsync4(ringScales + s * PAGE + tid,
                 p.scales + size_t(page) * PAGE + tid);
      cpAsyncArrive(&full[s]);
    }
    // Not left with copies in flight when the warp exits.
    asm volatile("cp.async.wait_all;" ::: "memory");
    return;
  }

  // The multipliers: warpgroup 1 + k takes tiles k, k + MATH, ...
  setMaxRegIncrease<Registers<MATH>::math>();
  const int group = warp / 4 - 1, wi = warp % 4;
  const int g = lane / 4, t = lane % 4;
  float wts[R][16];
  int len[R];
  loadRowInputs<R>(p, b, t, wts, len);

  float acc[R * 32];
  for (int i = group; i < count; i += MATH) {
    const int s = i % STAGES;
    mbarWait(&full[s], (i / STAGES) & 1);
    fenceProxyAsync();
    float scale0, scale1;
    multiplyTile<R>(acc, ring + s * TILE_BYTES, qs, ringScales + s * PAGE,
                    16 * wi + g, scale0, scale1);
    if (lane == 0)
      mbarArrive(&empty[s]);

    storeTile<R>(p, b, (first + i) * PAGE + 16 * wi + g, acc, wts, len, scale0,
                 scale1, t);
  }
}

/// WS_COPY=tma: MATH multiplying warpgroups, each with a ring of
/// TMA_STAGES tiles of its own that warp k of warpgroup 0 fills for
/// multiplier k (one lane: the key tile through the tensor map, swizzled
/// by the copy engine, and its 256 bytes of scales by a bulk copy).
constexpr int TMA_STAGES = 4;
template <int R, int MATH> struct TmaShared {
  static constexpr int qBytes = R * H * DH;
  static constexpr int rings = MATH * TMA_STAGES;
  static constexpr int keysAt = qBytes; // 1024-aligned
  static constexpr int scalesAt = keysAt + rings * TILE_BYTES;
  static constexpr int barsAt = scalesAt + rings * PAGE * 4;
  static constexpr int bytes = barsAt + 2 * rings * 8 + 1024;
};
/// Registers after setmaxnreg, within the launch's allocation (65536 over
/// the threads, in steps of 8): 40 for the copiers, the rest to the
/// multipliers.
template <int MATH> struct TmaRegisters {
  static constexpr int threads = 128 * (1 + MATH);
  static constexpr int launch = (65536 / threads) / 8 * 8;
  static constexpr int copier = 40;
  static constexpr int math =
      ((launch * threads - 128 * copier) / (128 * MATH)) / 8 * 8;
};

template <int R, int MATH>
__global__ void __launch_bounds__(TmaRegisters<MATH>::threads, 1)
    tmaKernel(Params p, const __grid_constant__ CUtensorMap keyMap) {
  extern __shared__ uint8_t rawShared[];
  uint8_t *smem = alignedShared(rawShared);
  using S = TmaShared<R, MATH>;
  uint8_t *qs = smem;
  uint64_t *full = reinterpret_cast<uint64_t *>(smem + S::barsAt);
  uint64_t *empty = full + S::rings;

  const int b = blockIdx.y, first = blockIdx.x * p.tilesPerCta;
  const int count = ctaTiles<R>(p, b, first);
  if (count <= 0)
    return; // (the prototype's inputs have full lengths)

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  if (tid == 0) {
    for (int s = 0; s < S::rings; ++s) {
      mbarInit(&full[s], 1);
      mbarInit(&empty[s], 4);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  stageQueries<R>(p, b, qs);
  __syncthreads();

  if (warp < 4) {
    setMaxRegDecrease<TmaRegisters<MATH>::copier>();
    if (warp >= MATH || lane != 0)
      return;
    // Warp k fills multiplier k's ring with tiles k, k + MATH, ...
    const int32_t *row = p.table + size_t(b) * p.maxPages;
    uint64_t *ringFull = full + warp * TMA_STAGES;
    uint64_t *ringEmpty = empty + warp * TMA_STAGES;
    for (int i = warp, j = 0; i < count; i += MATH, ++j) {
      const int s = j % TMA_STAGES;
      if (j >= TMA_STAGES)
        mbarWait(&ringEmpty[s], ((j / TMA_STAGES) - 1) & 1);
      const int page = row[first + i];
      const int ring = warp * TMA_STAGES + s;
      mbarExpect(&ringFull[s], TILE_BYTES + PAGE * 4);
      tmaKeys(smem + S::keysAt + ring * TILE_BYTES, &keyMap, page,
              &ringFull[s]);
      bulkCopy(smem + S::scalesAt + ring * PAGE * 4,
               p.scales + size_t(page) * PAGE, PAGE * 4, &ringFull[s]);
    }
    return;
  }

  setMaxRegIncrease<TmaRegisters<MATH>::math>();
  const int group = warp / 4 - 1, wi = warp % 4;
  const int g = lane / 4, t = lane % 4;
  float wts[R][16];
  int len[R];
  loadRowInputs<R>(p, b, t, wts, len);
  float acc[R * 32];
  for (int i = group, j = 0; i < count; i += MATH, ++j) {
    const int s = j % TMA_STAGES, ring = group * TMA_STAGES + s;
    mbarWait(&full[ring], (j / TMA_STAGES) & 1);
    float scale0, scale1;
    multiplyTile<R>(acc, smem + S::keysAt + ring * TILE_BYTES, qs,
                    reinterpret_cast<const float *>(smem + S::scalesAt) +
                        ring * PAGE,
                    16 * wi + g, scale0, scale1);
    __syncwarp();
    if (lane == 0)
      mbarArrive(&empty[ring]);
    storeTile<R>(p, b, (first + i) * PAGE + 16 * wi + g, acc, wts, len, scale0,
                 scale1, t);
  }
}

//===----------------------------------------------------------------------===//
// Host: inputs, reference, timing
//===----------------------------------------------------------------------===//

/// The value of an e4m3 byte (no NaN among the inputs).
static double e4m3(uint8_t v) {
  int sign = v >> 7, exp = (v >> 3) & 15, mant = v & 7;
  double m = exp == 0 ? std::ldexp(mant / 8.0, -6)
                      : std::ldexp(1.0 + mant / 8.0, exp - 7);
  return sign ? -m : m;
}
/// Random e4m3 bytes with no NaN and |v| <= 8 (exponent field <= 9): the
/// exponent field of a random byte folded into [0, 9].
static void fillE4m3(std::vector<uint8_t> &v, uint64_t seed) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < v.size(); i += 8) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    for (size_t k = 0; k < 8 && i + k < v.size(); ++k) {
      uint8_t b = uint8_t(x >> (8 * k));
      uint8_t exp = ((b >> 3) & 15) % 10;
      v[i + k] = uint8_t((b & 0x87) | (exp << 3));
    }
  }
}

/// The key cache as a tensor map for the copy engine: [pages][PAGE][DH]
/// bytes, boxes of one page, 128-byte swizzle.
static CUtensorMap keyTensorMap(const uint8_t *keys, int pages) {
  void *fn = nullptr;
  cudaDriverEntryPointQueryResult found;
  CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000,
                                         cudaEnableDefault, &found));
  if (!fn || found != cudaDriverEntryPointSuccess) {
    std::fprintf(stderr, "cuTensorMapEncodeTiled not found\n");
    std::exit(1);
  }
  CUtensorMap map;
  cuuint64_t dims[3] = {DH, PAGE, cuuint64_t(pages)};
  cuuint64_t strides[2] = {DH, TILE_BYTES};
  cuuint32_t box[3] = {DH, PAGE, 1}, elementStrides[3] = {1, 1, 1};
  CUresult r = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn)(
      &map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 3, const_cast<uint8_t *>(keys),
      dims, strides, box, elementStrides, CU_TENSOR_MAP_INTERLEAVE_NONE,
      CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    std::fprintf(stderr, "cuTensorMapEncodeTiled failed: %d\n", int(r));
    std::exit(1);
  }
  return map;
}

template <int R, int MATH, bool TMA>
static int run(int B, int N, const std::vector<int> &tileCounts, int reps) {
  const int maxPages = N / PAGE, pages = B * maxPages;
  std::mt19937 rng(12345);
  std::vector<uint8_t> q(size_t(B) * R * H * DH), keys(size_t(pages) * TILE_BYTES);
  fillE4m3(q, 1);
  fillE4m3(keys, 2);
  std::uniform_real_distribution<float> unit(0.f, 1.f);
  std::vector<float> w(size_t(B) * R * H), scales(size_t(pages) * PAGE);
  for (auto &v : w) v = 2.f * unit(rng) - 1.f;
  for (auto &v : scales) v = 0.5f + unit(rng);
  std::vector<int32_t> table(size_t(B) * maxPages), lengths(size_t(B) * R);
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), rng);
  for (int b = 0; b < B; ++b)
    for (int r = 0; r < R; ++r)
      lengths[b * R + r] = N - (R - 1) + r; // as bench_gpu.py's MTP rows

  auto upload = [](const auto &host) {
    using T = typename std::decay_t<decltype(host)>::value_type;
    T *dev = nullptr;
    CHECK(cudaMalloc(&dev, host.size() * sizeof(T)));
    CHECK(cudaMemcpy(dev, host.data(), host.size() * sizeof(T),
                     cudaMemcpyHostToDevice));
    return dev;
  };
  Params p{};
  p.q = upload(q);
  p.w = upload(w);
  p.keys = upload(keys);
  p.scales = upload(scales);
  p.table = upload(table);
  p.lengths = upload(lengths);
  float *out = nullptr;
  CHECK(cudaMalloc(&out, size_t(B) * R * N * sizeof(float)));
  p.out = out;
  p.maxPages = maxPages;
  int smem = 0;
  if constexpr (TMA)
    smem = TmaShared<R, MATH>::bytes;
  else
    smem = Shared<R>::bytes;
  int threads = 0;
  CUtensorMap map{};
  if constexpr (TMA) {
    threads = TmaRegisters<MATH>::threads;
    map = keyTensorMap(p.keys, pages);
    CHECK(cudaFuncSetAttribute(tmaKernel<R, MATH>,
                               cudaFuncAttributeMaxDynamicSharedMemorySize,
                               smem));
  } else {
    threads = Registers<MATH>::threads;
    CHECK(cudaFuncSetAttribute(scoreKernel<R, MATH>,
                               cudaFuncAttributeMaxDynamicSharedMemorySize,
                               smem));
  }
  // Timing: L2 flushed before each repetition, the median.
  void *flush = nullptr;
  CHECK(cudaMalloc(&flush, 256 << 20));
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  int status = 0;
  for (int tilesPerCta : tileCounts) {
    p.tilesPerCta = tilesPerCta;
    CHECK(cudaMemset(out, 0, size_t(B) * R * N * sizeof(float)));

    dim3 grid((maxPages + tilesPerCta - 1) / tilesPerCta, B);
    auto launch = [&] {
      if constexpr (TMA)
        tmaKernel<R, MATH><<<grid, threads, smem>>>(p, map);
      else
        scoreKernel<R, MATH><<<grid, threads, smem>>>(p);
    };
    launch();
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());

    // Sampled slots against a double-precision reference.
    std::vector<float> got(size_t(B) * R * N);
    CHECK(cudaMemcpy(got.data(), out, got.size() * sizeof(float),
                     cudaMemcpyDeviceToHost));
    double worst = 0, largest = 0;
    int bad = 0;
    for (int n = 0; n < 4096; ++n) {
      int b = rng() % B, r = rng() % R, slot = rng() % N;
      float have = got[(size_t(b) * R + r) * N + slot];
      if (slot >= lengths[b * R + r]) {
        bad += !(std::isinf(have) && have < 0);
        continue;
      }
      int page = table[size_t(b) * maxPages + slot / PAGE];
      const uint8_t *k = &keys[size_t(page) * TILE_BYTES + (slot % PAGE) * DH];
      double sum = 0;
      for (int h = 0; h < H; ++h) {
        const uint8_t *qh = &q[((size_t(b) * R + r) * H + h) * DH];
        double dot = 0;
        for (int d = 0; d < DH; ++d)
          dot += e4m3(qh[d]) * e4m3(k[d]);
        sum += std::max(dot, 0.0) * w[(size_t(b) * R + r) * H + h];
      }
      sum *= scales[size_t(page) * PAGE + slot % PAGE];
      worst = std::max(worst, std::fabs(sum - have));
      largest = std::max(largest, std::fabs(sum));
    }
    double relative = worst / std::max(largest, 1e-30);
    // fp8 wgmma sums its products with fewer bits than f32 (about 3e-4 of
    // the largest score against the exact sum here and in bench_gpu.py).
    bool ok = bad == 0 && relative < 2e-3;

    std::vector<float> times;
    for (int i = 0; i < reps; ++i) {
      CHECK(cudaMemsetAsync(flush, 0, 256 << 20));
      CHECK(cudaEventRecord(start));
      launch();
      CHECK(cudaEventRecord(stop));
      CHECK(cudaEventSynchronize(stop));
      float ms = 0;
      CHECK(cudaEventElapsedTime(&ms, start, stop));
      times.push_back(ms * 1000.f);
    }
    std::sort(times.begin(), times.end());
    float median = times[times.size() / 2];
    double bytes = double(B) * N * (DH + 4);
    std::printf("%s B=%d N=%dK R=%d math warpgroups=%d tiles/CTA=%d grid=%dx%d: "
                "%.1f us (min %.1f), "
                "%.0f GB/s of key bytes; sampled error %.1e of the largest, "
                "%d bad -inf; %s\n",
                TMA ? "tma" : "cp.async", B, N / 1024, R, MATH, tilesPerCta, grid.x, grid.y, median,
                times[0],
                bytes / median / 1e3, relative, bad, ok ? "ok" : "MISMATCH");
    status |= ok ? 0 : 1;
  }
  for (void *ptr : {(void *)p.q, (void *)p.w, (void *)p.keys, (void *)p.scales,
                    (void *)p.table, (void *)p.lengths, (void *)out, flush})
    CHECK(cudaFree(ptr));
  return status;
}

int main(int argc, char **argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s B N R reps tiles_per_cta...\n", argv[0]);
    return 2;
  }
  int B = std::atoi(argv[1]), N = std::atoi(argv[2]), R = std::atoi(argv[3]);
  int reps = std::atoi(argv[4]);
  std::vector<int> tiles;
  for (int i = 5; i < argc; ++i)
    tiles.push_back(std::atoi(argv[i]));
  if (tiles.empty())
    tiles.push_back(64);
  if (B <= 0 || N <= 0 || N % PAGE || reps <= 0 ||
      *std::min_element(tiles.begin(), tiles.end()) <= 0) {
    std::fprintf(stderr, "B, N (a multiple of %d), reps and tiles must be "
                         "positive\n", PAGE);
    return 2;
  }
  // WS_COPY=tma: the copy engine fills the rings (WS_MATH_WG=4, the
  // default for R <= 2, or 2); cp.async (default): WS_MATH_WG=2 or 3
  // (R <= 2: 160 registers hold R = 4's accumulators and weights only with
  // spills).
  const char *copy = std::getenv("WS_COPY");
  const bool tma = copy && std::string(copy) == "tma";
  if (copy && !tma && std::string(copy) != "cp.async") {
    std::fprintf(stderr, "WS_COPY must be tma or cp.async (got %s)\n", copy);
    return 2;
  }
  const char *math = std::getenv("WS_MATH_WG");
  const int groups = math ? std::atoi(math) : tma && R <= 2 ? 4 : 2;
  if (tma ? groups != 2 && groups != 4 : groups != 2 && groups != 3) {
    std::fprintf(stderr, "WS_MATH_WG must be %s (got %s)\n",
                 tma ? "2 or 4" : "2 or 3", math);
    return 2;
  }
  if (groups > 2 && R == 4) {
    std::fprintf(stderr, "WS_MATH_WG=%d takes R = 1 or 2\n", groups);
    return 2;
  }
  switch (R * 100 + groups * 10 + tma) {
  case 120: return run<1, 2, false>(B, N, tiles, reps);
  case 130: return run<1, 3, false>(B, N, tiles, reps);
  case 220: return run<2, 2, false>(B, N, tiles, reps);
  case 230: return run<2, 3, false>(B, N, tiles, reps);
  case 420: return run<4, 2, false>(B, N, tiles, reps);
  case 121: return run<1, 2, true>(B, N, tiles, reps);
  case 141: return run<1, 4, true>(B, N, tiles, reps);
  case 221: return run<2, 2, true>(B, N, tiles, reps);
  case 241: return run<2, 4, true>(B, N, tiles, reps);
  case 421: return run<4, 2, true>(B, N, tiles, reps);
  default:
    std::fprintf(stderr, "R must be 1, 2 or 4 (got %d)\n", R);
    return 2;
  }
}
