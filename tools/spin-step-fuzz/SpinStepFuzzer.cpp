//===- SpinStepFuzzer.cpp - fuzz a compiled CPU decode step ---------------===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
// One LLVMFuzzerTestOneInput over the runtime's step API with compiled
// programs: the input is read as a sequence of operations on a fresh state
// pool (admit, release, reset, commit, step) whose steps take fuzzed batch
// sizes, request ids, shapes, element types, values (NaN and infinities
// included), block tables, lengths and positions. Two small SPIN programs
// are compiled once: f32 keys with MTP (R = 2), and fp8 keys with scales and
// fp8 queries (R = 1).
//
// What must hold, beyond "no crash and no sanitizer report":
//  * a refused operation leaves every state array byte-identical;
//  * an accepted step returns, per row, distinct slots below the row's
//    length, then -1 padding.
// A violation aborts, so libFuzzer keeps the input.
//
//===----------------------------------------------------------------------===//

#include "spin/ExecutionEngine/CpuExecutable.h"
#include "spin/Runtime/StatePool.h"
#include "spin/Runtime/StepProgram.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace rt = ::spin::runtime;

namespace {

/// Reads the fuzzer's bytes front to back; zeros once they run out.
class Bytes {
public:
  Bytes(const uint8_t *data, size_t size) : data(data), size(size) {}
  bool empty() const { return at >= size; }
  uint8_t u8() { return at < size ? data[at++] : 0; }
  int8_t i8() { return static_cast<int8_t>(u8()); }
  float f32() {
    // Small integers mostly (so that scores tie and selections are real),
    // any bit pattern now and then (NaN, infinities, huge values).
    uint8_t kind = u8();
    if (kind < 224)
      return static_cast<float>(static_cast<int>(kind % 9) - 4);
    uint32_t bits = 0;
    for (int i = 0; i < 4; ++i)
      bits = bits << 8 | u8();
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }

private:
  const uint8_t *data;
  size_t size;
  size_t at = 0;
};

struct Program {
  std::shared_ptr<mlir::spin::CpuExecutable> exe;
  mlir::spin::IndexerConfig config;
  bool fp8 = false;
};

constexpr int64_t kHeads = 2, kHeadDim = 8, kPageSize = 4, kMaxPages = 6,
                  kTopK = 4, kSlots = 4, kMaxBatch = 4, kMaxPool = 8;

/// Never destroyed: a JIT torn down by static destructors after main
/// returns compiles its at-exit code after LLVM's own statics are gone.
std::vector<Program> &programs() {
  static auto *all = new std::vector<Program>();
  return *all;
}

void die(const std::string &what) {
  std::fprintf(stderr, "spin-step-fuzz: %s\n", what.c_str());
  std::abort();
}

Program compileProgram(const std::string &keys, const std::string &queries,
                       int64_t rows) {
  Program p;
  p.config.heads = kHeads;
  p.config.headDim = kHeadDim;
  p.config.rows = rows;
  p.config.topk = kTopK;
  p.config.pageSize = kPageSize;
  p.config.maxPages = kMaxPages;
  p.config.keyFormat = keys;
  p.config.queryFormat = queries;
  p.fp8 = keys == "fp8";
  rt::StatusOr<std::string> source = mlir::spin::buildIndexerGraph(p.config);
  if (!source.ok())
    die(source.message());
  mlir::spin::SparsifyPipelineOptions sparsify;
  sparsify.sparsity = 0.5;
  sparsify.explore = 0.25;
  sparsify.blockSize = kPageSize;
  auto exe = mlir::spin::CpuExecutable::compile(*source, "indexer_layer",
                                                &sparsify);
  if (!exe.ok())
    die(exe.message());
  p.exe = *exe;
  return p;
}

/// The bytes of every state array of layer 0.
std::vector<uint8_t> snapshot(rt::StatePool &pool) {
  rt::LayerBuffers l = pool.layer(0);
  std::vector<uint8_t> out;
  auto add = [&](const void *p, size_t bytes) {
    auto *b = static_cast<const uint8_t *>(p);
    out.insert(out.end(), b, b + bytes);
  };
  size_t n = l.numSlots, c = l.capacity, r = l.maxRows, nb = l.numBlocks;
  add(l.v, n * c * 4);
  add(l.d, n * c * 4);
  add(l.it, n * 8);
  add(l.obsRows, n * 4);
  add(l.obsPos, n * r * 4);
  add(l.obsLen, n * r * 4);
  add(l.obsMask, n * nb);
  add(l.obsZ, n * (r - 1) * c * 4); // draft rows 1..: SPIN_SPEC §7.2
  return out;
}

/// One fuzzed step: inputs mostly of the right shapes and types, each
/// mutation flag of `bad` breaking one of them.
void step(const Program &prog, rt::StatePool &pool, Bytes &in) {
  const int64_t B = in.u8() % (kMaxBatch + 1);
  const int64_t R = prog.config.rows, H = kHeads, D = kHeadDim, S = kPageSize;
  const int64_t P = in.u8() % 9, MB = kMaxPages;
  // Flag 16 drops the scales, which only fp8 programs take.
  const uint8_t bad = (in.u8() < 200 ? 0 : in.u8() & 127) &
                      static_cast<uint8_t>(prog.fp8 ? 127 : 127 & ~16);
  std::vector<int64_t> ids(B);
  for (int64_t &id : ids)
    id = in.u8() % 7;
  std::vector<float> q(B * R * H * D), w(B * R * H), keys(P * S * D),
      scales(P * S);
  std::vector<uint8_t> q8(q.size()), keys8(keys.size());
  for (float &x : q)
    x = in.f32();
  for (uint8_t &x : q8)
    x = in.u8();
  for (float &x : w)
    x = in.f32();
  for (float &x : keys)
    x = in.f32();
  for (uint8_t &x : keys8)
    x = in.u8();
  for (float &x : scales)
    x = in.f32();
  std::vector<int32_t> table(B * MB), lengths(B * R), positions(B * R);
  for (int32_t &x : table)
    x = in.u8() < 240 ? static_cast<int32_t>(in.u8() % (P + 1)) : in.i8();
  for (int64_t b = 0; b < B; ++b) {
    int32_t n = in.u8() < 240 ? in.u8() % (MB * S + 1) : in.i8() * 4;
    for (int64_t r = 0; r < R; ++r) {
      lengths[b * R + r] = n + static_cast<int32_t>(r);
      positions[b * R + r] =
          in.u8() < 240 ? n + static_cast<int32_t>(r) - 1 + in.u8() % 3 : in.i8();
    }
  }
  rt::DType keyType = prog.fp8 ? rt::DType::fp8e4m3 : rt::DType::f32;
  rt::DType queryType = prog.fp8 ? rt::DType::fp8e4m3 : rt::DType::f32;
  std::map<std::string, rt::TensorRef> inputs = {
      {"q", {prog.fp8 ? static_cast<void *>(q8.data()) : q.data(),
             {B, R, (bad & 1) ? H + 1 : H, D}, queryType}},
      {"w", {w.data(), {B, R, H}, (bad & 2) ? rt::DType::i32 : rt::DType::f32}},
      {"keys", {prog.fp8 ? static_cast<void *>(keys8.data()) : keys.data(),
                {P, S, D}, keyType}},
      {"block_table",
       {table.data(), {B, (bad & 4) ? MB - 1 : MB}, rt::DType::i32}},
      {"lengths", {lengths.data(), {B, R}, rt::DType::i32}},
      {"positions",
       {positions.data(), (bad & 8) ? std::vector<int64_t>{B * R}
                                    : std::vector<int64_t>{B, R},
        rt::DType::i32}},
      {"request_ids", {ids.data(), {B}, rt::DType::i64}}};
  if (prog.fp8 && !(bad & 16))
    inputs["scales"] = {scales.data(), {P, S}, rt::DType::f32};
  if (bad & 32)
    inputs.erase("lengths");
  std::vector<int32_t> topk(B * R * kTopK, 12345);
  std::vector<float> sparsity(B * R);
  std::map<std::string, rt::TensorRef> outputs = {
      {"topk", {topk.data(), {B, R, (bad & 64) ? kTopK + 1 : kTopK},
                rt::DType::i32}},
      {"sparsity", {sparsity.data(), {B, R}, rt::DType::f32}}};

  std::vector<uint8_t> before = snapshot(pool);
  rt::Status s = prog.exe->program().run(pool, inputs, outputs);
  if (!s.ok()) {
    if (s.message().empty())
      die("a refused step gave no message");
    if (snapshot(pool) != before)
      die("a refused step changed the state: " + s.message());
    return;
  }
  if (bad)
    die("a step with broken inputs (flags " + std::to_string(bad) +
        ") was accepted");
  for (int64_t row = 0; row < B * R; ++row) {
    std::set<int32_t> seen;
    bool padding = false;
    for (int64_t k = 0; k < kTopK; ++k) {
      int32_t slot = topk[row * kTopK + k];
      if (slot == -1) {
        padding = true;
        continue;
      }
      if (padding || slot < 0 || slot >= lengths[row] || !seen.insert(slot).second)
        die("row " + std::to_string(row) + ": bad top-K entry " +
            std::to_string(slot) + " at rank " + std::to_string(k) +
            " (length " + std::to_string(lengths[row]) + ")");
    }
  }
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  // Compiled programs stay in memory; nothing is written to a disk cache.
  setenv("SPIN_CACHE_DIR", "off", 1);
  programs().push_back(compileProgram("f32", "", 2));
  programs().push_back(compileProgram("fp8", "fp8", 1));
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (programs().empty())
    LLVMFuzzerInitialize(nullptr, nullptr);
  Bytes in(data, size);
  const Program &prog = programs()[in.u8() % programs().size()];
  rt::StatePoolOptions options;
  options.numLayers = 1;
  options.numSlots = kSlots;
  options.capacity = kMaxPages * kPageSize;
  options.maxRows = prog.config.rows;
  options.blockSize = kPageSize;
  auto created = rt::StatePool::create(options);
  if (!created.ok())
    die(created.message());
  rt::StatePool &pool = **created;
  for (int op = 0; op < 24 && !in.empty(); ++op) {
    uint8_t kind = in.u8() % 6;
    int64_t id = in.u8() % kMaxPool;
    std::vector<uint8_t> before = snapshot(pool);
    rt::Status s = rt::Status::success();
    switch (kind) {
    case 0:
      s = pool.acquire(id).status();
      break;
    case 1:
      s = pool.release(id);
      break;
    case 2:
      s = pool.reset(id);
      break;
    case 3:
      s = pool.commit(id, in.i8());
      break;
    default:
      step(prog, pool, in);
      continue;
    }
    if (!s.ok() && snapshot(pool) != before)
      die("a refused pool operation changed the state: " + s.message());
  }
  return 0;
}
