//===- CpuExecutable.cpp - JIT-compiled spin graphs on the CPU ------------===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
//===----------------------------------------------------------------------===//

#include "spin/ExecutionEngine/CpuExecutable.h"

#include "spin/Dialect/Spin/IR/SpinAbi.h"

#include "GraphFrontEnd.h"
#include "spin/Dialect/Spin/Transforms/GraphInputs.h"
#include "spin/Dialect/Spin/IR/SpinOps.h"
#include "spin/InitAllSpin.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/ExecutionEngine/ExecutionEngine.h"
#include "mlir/ExecutionEngine/OptUtils.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdlib>
#include <functional>
#include <map>
#include <mutex>
#include <optional>

using namespace mlir;
using namespace mlir::spin;
using ::spin::runtime::ArgSpec;
using ::spin::runtime::DType;
using ::spin::runtime::Status;
using ::spin::runtime::StatusOr;

#include "SpinCompilerVersion.h"

/// Part of every cache key: a hash of the compiler's sources, so that any
/// change to the compiler invalidates cached programs.
static constexpr const char *kCompilerVersion =
    "spin-cpu-" SPIN_COMPILER_SOURCE_HASH;

struct CpuExecutable::Impl {
  MLIRContext context;
  std::unique_ptr<ExecutionEngine> engine;
};

CpuExecutable::CpuExecutable() : impl_(std::make_unique<Impl>()) {
  DialectRegistry registry;
  registerSpinDialects(registry);
  impl_->context.appendDialectRegistry(registry);
  impl_->context.loadAllAvailableDialects();
}
CpuExecutable::~CpuExecutable() = default;

//===----------------------------------------------------------------------===//
// The generated indexer graph
//===----------------------------------------------------------------------===//

/// Checks the sizes and layer of `c`, and returns the element types of its
/// queries and keys: fp8 keys come with bf16 queries (and per-slot scales),
/// other key formats with queries of their own type.
static StatusOr<std::pair<Type, Type>> indexerElementTypes(Builder &b,
                                                           const IndexerConfig &c) {
  for (auto [name, value] :
       {std::pair<const char *, int64_t>{"heads", c.heads},
        {"head_dim", c.headDim}, {"rows", c.rows}, {"topk", c.topk},
        {"page_size", c.pageSize}, {"max_pages", c.maxPages}})
    if (value <= 0)
      return Status::error(std::string("indexer config: ") + name +
                           " must be positive, got " + std::to_string(value));
  if (c.layer < 0)
    return Status::error("indexer config: layer must be non-negative, got " +
                         std::to_string(c.layer));
  if (c.batch < 0)
    return Status::error("indexer config: batch must be non-negative (0 for "
                         "a dynamic batch), got " + std::to_string(c.batch));
  if (!c.queryFormat.empty()) {
    std::string own = c.keyFormat == "fp8" ? "bf16" : c.keyFormat;
    if (c.queryFormat == "fp8" && c.keyFormat != "fp8")
      return Status::error("indexer config: query format 'fp8' needs fp8 "
                           "keys, got key format '" + c.keyFormat + "'");
    if (c.queryFormat == "fp8")
      return std::make_pair(Type(b.getType<Float8E4M3FNType>()),
                            Type(b.getType<Float8E4M3FNType>()));
    if (c.queryFormat != own)
      return Status::error("indexer config: query format '" + c.queryFormat +
                           "' is not taken with key format '" + c.keyFormat +
                           "' (its queries are " + own +
                           (c.keyFormat == "fp8" ? " or fp8)" : ")"));
  }
  if (c.keyFormat == "bf16")
    return std::make_pair(Type(b.getBF16Type()), Type(b.getBF16Type()));
  if (c.keyFormat == "f16")
    return std::make_pair(Type(b.getF16Type()), Type(b.getF16Type()));
  if (c.keyFormat == "f32")
    return std::make_pair(Type(b.getF32Type()), Type(b.getF32Type()));
  if (c.keyFormat == "fp8")
    return std::make_pair(Type(b.getBF16Type()), Type(b.getType<Float8E4M3FNType>()));
  return Status::error("indexer config: key format '" + c.keyFormat +
                       "' is not one of bf16, f16, f32, fp8");
}

StatusOr<OwningOpRef<ModuleOp>>
mlir::spin::buildIndexerModule(MLIRContext &context, const IndexerConfig &c) {
  context.loadDialect<func::FuncDialect, SpinDialect>();
  OpBuilder b(&context);
  StatusOr<std::pair<Type, Type>> elementTypes = indexerElementTypes(b, c);
  if (!elementTypes.ok())
    return elementTypes.status();
  auto [query, key] = *elementTypes;
  bool scales = c.keyFormat == "fp8";

  // Per-request tensors lead with the batch, the key cache and its scales
  // with the page count (always dynamic).
  int64_t batch = c.batch ? c.batch : ShapedType::kDynamic;
  int64_t pages = ShapedType::kDynamic;
  Type f32 = b.getF32Type(), i32 = b.getI32Type();
  auto tensor = [](ArrayRef<int64_t> shape, Type element) {
    return RankedTensorType::get(shape, element);
  };
  RankedTensorType qT = tensor({batch, c.rows, c.heads, c.headDim}, query);
  RankedTensorType wT = tensor({batch, c.rows, c.heads}, f32);
  RankedTensorType kT = tensor({pages, c.pageSize, c.headDim}, key);
  RankedTensorType sT = tensor({pages, c.pageSize}, f32);
  RankedTensorType bT = tensor({batch, c.maxPages}, i32);
  RankedTensorType nT = tensor({batch, c.rows}, i32);
  RankedTensorType zT = tensor({batch, c.rows, c.maxPages * c.pageSize}, f32);
  RankedTensorType tT = tensor({batch, c.rows, c.topk}, i32);

  // The inputs in signature order, each marked with its name.
  SmallVector<std::pair<StringRef, Type>> inputs = {
      {"q", qT}, {"w", wT}, {"keys", kT}};
  if (scales)
    inputs.push_back({"scales", sT});
  inputs.append({{"block_table", bT}, {"lengths", nT}});
  SmallVector<Type> inputTypes;
  for (auto &[name, type] : inputs)
    inputTypes.push_back(type);

  Location loc = b.getUnknownLoc();
  OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
  b.setInsertionPointToEnd(module->getBody());
  auto func = func::FuncOp::create(b, loc, "indexer_layer",
                                   b.getFunctionType(inputTypes, {tT}));
  StringRef inputAttr = roleAttrName(ArgSpec::Role::Input);
  for (auto [i, input] : llvm::enumerate(inputs))
    func.setArgAttr(i, inputAttr, b.getStringAttr(input.first));

  Block *body = func.addEntryBlock();
  b.setInsertionPointToStart(body);
  auto arg = [&](StringRef name) -> Value {
    for (auto [i, input] : llvm::enumerate(inputs))
      if (input.first == name)
        return body->getArgument(i);
    return nullptr;
  };
  auto scores = DenseIndexerOp::create(
      b, loc, zT, arg("q"), arg("w"), arg("keys"), arg("scales"),
      arg("block_table"), arg("lengths"));
  scores->setAttr(attr::kLayer, b.getI64IntegerAttr(c.layer));
  auto indices = TopKOp::create(b, loc, tT, scores, arg("lengths"),
                                /*mask=*/Value(), c.topk,
                                /*block_size=*/IntegerAttr());
  func::ReturnOp::create(b, loc, indices.getResult());

  DiagnosticCollector diagnostics(context);
  if (failed(verify(*module)))
    return diagnostics.fail("the generated indexer graph does not verify");
  return module;
}

StatusOr<std::string> mlir::spin::buildIndexerGraph(const IndexerConfig &c) {
  MLIRContext context(MLIRContext::Threading::DISABLED);
  StatusOr<OwningOpRef<ModuleOp>> module = buildIndexerModule(context, c);
  if (!module.ok())
    return module.status();
  std::string text;
  llvm::raw_string_ostream os(text);
  (*module)->print(os);
  return text;
}

/// The runtime's name for an element type of the step ABI.
/// The SPIN block size each state layer is used with in `func`.
static std::map<int64_t, int64_t> stateBlockSizes(func::FuncOp func) {
  std::map<int64_t, int64_t> sizes;
  func.walk([&](Operation *op) {
    auto blockSize = op->getAttrOfType<IntegerAttr>("block_size");
    if (!blockSize)
      return;
    for (Value operand : op->getOperands())
      if (auto state = dyn_cast<StateType>(operand.getType()))
        sizes[state.getLayer()] = blockSize.getInt();
  });
  return sizes;
}

/// The role of argument `i` of `func` among those marked by a unit
/// attribute and named by their role (positions, request ids, accepted
/// counts, resets, slots), if it has one.
static std::optional<ArgSpec::Role> markedRole(func::FuncOp func, unsigned i) {
  for (ArgSpec::Role role :
       {ArgSpec::Role::Positions, ArgSpec::Role::RequestIds,
        ArgSpec::Role::Accepted, ArgSpec::Role::Reset, ArgSpec::Role::Slots})
    if (func.getArgAttr(i, roleAttrName(role)))
      return role;
  return std::nullopt;
}

/// Reads what every argument of the bufferized function means.
static StatusOr<std::vector<ArgSpec>>
readSignature(func::FuncOp func, ArrayRef<std::string> resultNames,
              const std::map<int64_t, int64_t> &blockSizes) {
  std::vector<ArgSpec> signature;
  size_t output = 0;
  for (BlockArgument arg : func.getArguments()) {
    unsigned i = arg.getArgNumber();
    auto type = dyn_cast<MemRefType>(arg.getType());
    if (!type)
      return Status::error("argument " + std::to_string(i) + " of @" +
                           func.getSymName().str() + " is not a memref");
    ArgSpec spec;
    std::optional<DType> dtype = runtimeDType(type.getElementType());
    if (!dtype)
      return Status::error("argument " + std::to_string(i) +
                           " has an element type the runtime cannot pass");
    spec.dtype = *dtype;
    for (int64_t size : type.getShape())
      spec.shape.push_back(ShapedType::isDynamic(size) ? -1 : size);
    if (auto name = func.getArgAttrOfType<StringAttr>(
            i, roleAttrName(ArgSpec::Role::Input))) {
      spec.role = ArgSpec::Role::Input;
      spec.name = name.str();
    } else if (auto field = func.getArgAttrOfType<StringAttr>(
                   i, roleAttrName(ArgSpec::Role::State))) {
      spec.role = ArgSpec::Role::State;
      spec.name = field.str();
      // The dialect's verifier requires the layer; a function that skipped
      // verification must still not reach a null attribute here.
      auto layer = func.getArgAttrOfType<IntegerAttr>(i, kLayerAttrName);
      if (!layer)
        return Status::error("state argument " + std::to_string(i) + " ('" +
                             spec.name + "') of @" + func.getSymName().str() +
                             " has no integer " + kLayerAttrName.str() +
                             " attribute: its layer is unknown");
      spec.layer = layer.getInt();
      if (auto it = blockSizes.find(spec.layer); it != blockSizes.end())
        spec.blockSize = it->second;
    } else if (std::optional<ArgSpec::Role> role = markedRole(func, i)) {
      spec.role = *role;
      spec.name = ::spin::runtime::argRoleName(*role);
    } else if (func.getArgAttr(i, "bufferize.result")) {
      if (output >= resultNames.size())
        return Status::error("more out-parameters than graph results");
      spec.role = ArgSpec::Role::Output;
      spec.name = resultNames[output++];
    } else {
      return Status::error("argument " + std::to_string(i) + " of @" +
                           func.getSymName().str() +
                           " has no spin role attribute (spin.input, ...)");
    }
    signature.push_back(std::move(spec));
  }
  return signature;
}

StatusOr<std::shared_ptr<CpuExecutable>>
CpuExecutable::compile(const std::string &source, const std::string &function,
                       const SparsifyPipelineOptions *sparsify) {

  std::shared_ptr<CpuExecutable> exe(new CpuExecutable());
  MLIRContext &context = exe->impl_->context;

  DiagnosticCollector diagnostics(context);
  auto fail = [&](const std::string &what) { return diagnostics.fail(what); };
  StatusOr<OwningOpRef<ModuleOp>> loaded =
      loadGraph(context, diagnostics, source, function, sparsify);
  if (!loaded.ok())
    return loaded.status();
  OwningOpRef<ModuleOp> module = std::move(*loaded);
  auto func = module->lookupSymbol<func::FuncOp>(function);
  nameGraphInputs(func);
  {
    llvm::raw_string_ostream os(exe->graphIR_);
    module->print(os);
  }
  std::vector<std::string> resultNames = graphResultNames(func);

  std::map<int64_t, int64_t> blockSizes = stateBlockSizes(func);
  LowerToCPUOptions lowering;
  PassManager toBuffers(&context);
  buildLowerSpinToBuffersPipeline(toBuffers, lowering);
  if (failed(toBuffers.run(*module)))
    return fail("spin-lower-to-cpu (to buffers) failed");
  StatusOr<std::vector<ArgSpec>> signature =
      readSignature(func, resultNames, blockSizes);
  if (!signature.ok())
    return signature.status();
  func->setAttr("llvm.emit_c_interface", UnitAttr::get(&context));
  PassManager toLLVM(&context);
  buildLowerBuffersToLLVMPipeline(toLLVM);
  if (failed(toLLVM.run(*module)))
    return fail("spin-lower-to-cpu (to LLVM) failed");

  {
    llvm::raw_string_ostream os(exe->loweredIR_);
    module->print(os);
  }
  if (Status s = exe->jit(*module, function, std::move(*signature)); !s.ok())
    return fail(s.message());
  return exe;
}

Status CpuExecutable::jit(ModuleOp module, const std::string &function,
                          std::vector<ArgSpec> signature) {
  static std::once_flag nativeTarget;
  std::call_once(nativeTarget, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
  });
  // The options hold a function_ref: the std::function it refers to must
  // outlive ExecutionEngine::create (a temporary would dangle).
  std::function<llvm::Error(llvm::Module *)> optimize =
      makeOptimizingTransformer(/*optLevel=*/3, /*sizeLevel=*/0,
                                /*targetMachine=*/nullptr);
  ExecutionEngineOptions engineOptions;
  engineOptions.transformer = optimize;
  auto engine = ExecutionEngine::create(module, engineOptions);
  if (!engine)
    return Status::error("JIT compilation failed: " +
                         llvm::toString(engine.takeError()));
  auto packed = (*engine)->lookupPacked("_mlir_ciface_" + function);
  if (!packed)
    return Status::error("JIT lookup failed: " +
                         llvm::toString(packed.takeError()));
  impl_->engine = std::move(*engine);
  program_ = std::make_unique<::spin::runtime::StepProgram>(
      reinterpret_cast<::spin::runtime::PackedFunction>(*packed),
      std::move(signature));
  return Status::success();
}

//===----------------------------------------------------------------------===//
// Caches
//===----------------------------------------------------------------------===//

/// FNV-1a, 64 bits: stable across processes and builds (unlike hash_value).
static uint64_t fnv1a(llvm::StringRef data) {
  uint64_t hash = 0xcbf29ce484222325ULL;
  for (unsigned char c : data) {
    hash ^= c;
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

/// The on-disk cache directory: $SPIN_CACHE_DIR, else $XDG_CACHE_HOME/spin,
/// else $HOME/.cache/spin; empty (no disk cache) when none can be made.
/// SPIN_CACHE_DIR=off turns the disk cache off.
static std::string cacheDirectory() {
  llvm::SmallString<256> dir;
  if (const char *env = std::getenv("SPIN_CACHE_DIR")) {
    if (llvm::StringRef(env) == "off")
      return "";
    dir = env;
  } else if (const char *xdg = std::getenv("XDG_CACHE_HOME")) {
    dir = xdg;
    llvm::sys::path::append(dir, "spin");
  } else if (const char *home = std::getenv("HOME")) {
    dir = home;
    llvm::sys::path::append(dir, ".cache", "spin");
  } else {
    return "";
  }
  if (llvm::sys::fs::create_directories(dir))
    return "";
  return std::string(dir);
}

/// One line per argument: role name layer dtype rank dims...
static std::string serializeSignature(const std::vector<ArgSpec> &signature) {
  std::string text;
  llvm::raw_string_ostream os(text);
  for (const ArgSpec &arg : signature) {
    os << ::spin::runtime::argRoleName(arg.role) << " " << arg.name << " "
       << arg.layer << " " << arg.blockSize << " "
       << static_cast<int>(arg.dtype) << " " << arg.shape.size();
    for (int64_t size : arg.shape)
      os << " " << size;
    os << "\n";
  }
  return text;
}

static std::optional<std::vector<ArgSpec>> parseSignature(llvm::StringRef text) {
  std::vector<ArgSpec> signature;
  llvm::SmallVector<llvm::StringRef> lines;
  text.split(lines, '\n', -1, /*KeepEmpty=*/false);
  for (llvm::StringRef line : lines) {
    llvm::SmallVector<llvm::StringRef> words;
    line.split(words, ' ');
    if (words.size() < 6)
      return std::nullopt;
    ArgSpec arg;
    std::optional<ArgSpec::Role> role =
        ::spin::runtime::argRoleFromName(words[0].str());
    int64_t layer, blockSize, dtype, rank;
    if (!role || words[2].getAsInteger(10, layer) ||
        words[3].getAsInteger(10, blockSize) ||
        words[4].getAsInteger(10, dtype) || words[5].getAsInteger(10, rank) ||
        dtype < 0 || dtype > static_cast<int64_t>(DType::i64) || rank < 0 ||
        static_cast<int64_t>(words.size()) != 6 + rank)
      return std::nullopt;
    arg.role = *role;
    arg.name = words[1].str();
    arg.layer = layer;
    arg.blockSize = blockSize;
    arg.dtype = static_cast<DType>(dtype);
    for (int64_t d = 0; d < rank; ++d) {
      int64_t size;
      if (words[6 + d].getAsInteger(10, size))
        return std::nullopt;
      arg.shape.push_back(size);
    }
    signature.push_back(std::move(arg));
  }
  return signature;
}

/// A cache entry: a header that names the key and checks the payload, then
/// the full key, the graph IR, the lowered LLVM-dialect module and the
/// signature.
static constexpr llvm::StringLiteral kCacheMagic = "spin-cpu-cache 2";

std::shared_ptr<CpuExecutable>
CpuExecutable::loadCacheEntry(const std::string &path, const std::string &key,
                              uint64_t keyHash, const std::string &function) {
  auto buffer = llvm::MemoryBuffer::getFile(path);
  if (!buffer)
    return nullptr;
  llvm::StringRef text = (*buffer)->getBuffer();
  // magic \n key \n checksum \n sizes \n payload
  llvm::SmallVector<llvm::StringRef, 5> header;
  text.split(header, '\n', /*MaxSplit=*/4);
  uint64_t storedHash, checksum;
  size_t graphSize, moduleSize, signatureSize;
  if (header.size() != 5 || header[0] != kCacheMagic ||
      header[1].getAsInteger(16, storedHash) || storedHash != keyHash ||
      header[2].getAsInteger(16, checksum))
    return nullptr;
  llvm::SmallVector<llvm::StringRef, 4> sizes;
  header[3].split(sizes, ' ');
  llvm::StringRef payload = header[4];
  size_t keySize;
  if (sizes.size() != 4 || sizes[0].getAsInteger(10, keySize) ||
      sizes[1].getAsInteger(10, graphSize) ||
      sizes[2].getAsInteger(10, moduleSize) ||
      sizes[3].getAsInteger(10, signatureSize) ||
      payload.size() != keySize + graphSize + moduleSize + signatureSize ||
      fnv1a(payload) != checksum || payload.substr(0, keySize) != key)
    return nullptr;
  payload = payload.drop_front(keySize);
  std::optional<std::vector<ArgSpec>> signature =
      parseSignature(payload.substr(graphSize + moduleSize));
  if (!signature)
    return nullptr;
  std::shared_ptr<CpuExecutable> exe(new CpuExecutable());
  ScopedDiagnosticHandler quiet(&exe->impl_->context,
                                [](Diagnostic &) { return success(); });
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(
      payload.substr(graphSize, moduleSize), &exe->impl_->context);
  // The signature must describe the cached function's arguments.
  auto entry =
      module ? module->lookupSymbol<LLVM::LLVMFuncOp>("_mlir_ciface_" + function)
             : nullptr;
  if (!entry || entry.getNumArguments() != signature->size() ||
      !exe->jit(*module, function, std::move(*signature)).ok())
    return nullptr;
  exe->graphIR_ = payload.substr(0, graphSize).str();
  exe->loweredIR_ = payload.substr(graphSize, moduleSize).str();
  exe->fromDiskCache_ = true;
  return exe;
}

void CpuExecutable::writeCacheEntry(const std::string &path,
                                    const std::string &key,
                                    uint64_t keyHash) const {
  std::string signature = serializeSignature(program_->signature());
  std::string payload = key + graphIR_ + loweredIR_ + signature;
  std::string text;
  llvm::raw_string_ostream os(text);
  os << kCacheMagic << "\n"
     << llvm::format_hex_no_prefix(keyHash, 16) << "\n"
     << llvm::format_hex_no_prefix(fnv1a(payload), 16) << "\n"
     << key.size() << " " << graphIR_.size() << " " << loweredIR_.size() << " "
     << signature.size() << "\n"
     << payload;
  // Write to a unique temporary name and rename: readers never see a torn
  // entry, and concurrent writers of the same entry write the same bytes.
  llvm::SmallString<256> temp;
  int fd;
  if (llvm::sys::fs::createUniqueFile(path + ".%%%%%%.tmp", fd, temp))
    return;
  {
    llvm::raw_fd_ostream out(fd, /*shouldClose=*/true);
    out << text;
    if (out.has_error()) {
      out.clear_error();
      llvm::sys::fs::remove(temp);
      return;
    }
  }
  if (llvm::sys::fs::rename(temp, path))
    llvm::sys::fs::remove(temp);
}

/// Guards memoryCache().
static std::mutex &cacheMutex() {
  static std::mutex mutex;
  return mutex;
}

void CpuExecutable::clearMemoryCache() {
  std::lock_guard<std::mutex> lock(cacheMutex());
  memoryCache().clear();
}

std::map<uint64_t, std::pair<std::string, std::weak_ptr<CpuExecutable>>> &
CpuExecutable::memoryCache() {
  static std::map<uint64_t, std::pair<std::string, std::weak_ptr<CpuExecutable>>> cache;
  return cache;
}

StatusOr<std::shared_ptr<CpuExecutable>>
CpuExecutable::compileCached(const std::string &source,
                             const std::string &function,
                             const SparsifyPipelineOptions *sparsify) {
  std::string options = "dense";
  if (sparsify) {
    options.clear();
    llvm::raw_string_ostream os(options);
    sparsify->print(os);
  }
  std::string key = std::string(kCompilerVersion) + "\n" + function + "\n" +
                    options + "\n" + source;
  uint64_t hash = fnv1a(key);
  std::mutex &mutex = cacheMutex();
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto &cache = memoryCache();
    auto it = cache.find(hash);
    if (it != cache.end() && it->second.first == key)
      if (auto exe = it->second.second.lock())
        return exe;
  }
  // On disk: a valid entry for this key is reused; a missing, corrupt or
  // stale one is (re)built and written.
  std::string dir = cacheDirectory();
  std::string path;
  if (!dir.empty()) {
    llvm::SmallString<256> file(dir);
    llvm::sys::path::append(file, llvm::formatv("{0:x16}.spincache", hash).str());
    path = std::string(file);
    if (auto exe = loadCacheEntry(path, key, hash, function)) {
      std::lock_guard<std::mutex> lock(mutex);
      memoryCache()[hash] = {key, exe};
      return exe;
    }
  }
  StatusOr<std::shared_ptr<CpuExecutable>> exe = compile(source, function, sparsify);
  if (exe.ok()) {
    if (!path.empty())
      (*exe)->writeCacheEntry(path, key, hash);
    std::lock_guard<std::mutex> lock(mutex);
    memoryCache()[hash] = {key, *exe};
  }
  return exe;
}
