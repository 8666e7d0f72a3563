//===- SpinOptFuzzer.cpp - fuzz spin-opt's parser, verifiers, pipelines ---===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
// spin-opt, spin-compile and `spin.compile` take model graphs as text from
// users: any text must give a module or diagnostics, and any module that
// verifies must go through the pipelines to lowered IR or to a diagnostic,
// never to a crash. An input is two option bytes followed by MLIR text:
//
//   byte 0: spin-sparsify-pipeline and spin-lower-to-cpu options
//     bits 0-1  sparsity 0.4, 0.5, 0.95, 1.5 (out of range: refused)
//     bits 2-3  block-size 64, 16, 32, 0 (refused)
//     bits 4-5  one of four presets of the other sparsify options
//               (optionsFrom)
//     bit  6    fuse=false schedule-async=false
//     bit  7    spin-lower-to-cpu with state in globals
//   byte 1: spin-configure-gpu-kernels and convert-spin-to-gpu options
//     bits 0-2  warps-per-cta 8, 4, 1, 2, 16, 32, 0, 6 (0 is refused,
//               and 6 with wgmma)
//     bit  3    wgmma=true
//     bits 4-5  m-tiles 0, 1, 2, 3 (3: refused)
//     bit  6    tiles-per-warp=12 sm-count=1, and capacity=4096
//     bit  7    lower the sparsified module (when sparsification
//               succeeded) instead of the parsed one
//
// The options go through the textual pass pipeline parser, as spin-opt's
// command line does. For each input the target parses and verifies the
// module (the dialects spin-opt registers), prints it and parses the text
// back, then runs on separate clones: the sparsify pipeline, the CPU
// lowering (spin-lower-to-cpu) and the GPU conversion
// (spin-configure-gpu-kernels, convert-spin-to-gpu). Nothing is JIT-compiled
// or sent to a GPU. Diagnostics are expected and dropped; the target aborts
// when a verified module does not print back to text that parses and
// verifies, or when a pass succeeds but leaves IR that does not verify.
//
//===----------------------------------------------------------------------===//

#include "spin/InitAllSpin.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassInstrumentation.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

using namespace mlir;

#if defined(__SANITIZE_ADDRESS__)
#define SPIN_FUZZ_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SPIN_FUZZ_ASAN 1
#endif
#endif

#ifdef SPIN_FUZZ_ASAN
// LLVM's BumpPtrAllocator poisons the unused rest of each slab when it is
// compiled with ASan, as its inline code in spin is, and unpoisons what it
// hands out; its copies inside the uninstrumented libMLIR hand out memory
// from the same slabs without unpoisoning it, so a copy into a uniqued
// attribute made there reads as a use-after-poison. Ignoring manual
// poisoning keeps every other ASan check (heap, stack, globals).
extern "C" const char *__asan_default_options() {
  return "allow_user_poisoning=0";
}
#endif

namespace {

/// Keeps the text of the diagnostics while `keep` is set, so that an
/// abort can say what the verifier found; drops them otherwise.
struct Diagnostics {
  bool keep = false;
  std::string text;
};

[[noreturn]] void fail(const std::string &what, const std::string &detail) {
  std::fprintf(stderr, "spin-opt fuzzer: %s\n%s\n", what.c_str(),
               detail.c_str());
  std::abort();
}

/// Verifies the IR after every pass that succeeded. The pass manager's own
/// verifier is off: it would turn invalid IR into an ordinary pipeline
/// failure, which this target accepts.
struct VerifyAfterEachPass : public PassInstrumentation {
  explicit VerifyAfterEachPass(Diagnostics &diagnostics)
      : diagnostics(diagnostics) {}

  void runAfterPass(Pass *pass, Operation *op) override {
    // Adaptors (no argument) only run nested pass managers, whose passes
    // are checked one by one.
    if (pass->getArgument().empty())
      return;
    diagnostics.keep = true;
    diagnostics.text.clear();
    if (failed(verify(op)))
      fail("'" + pass->getArgument().str() +
               "' succeeded but left IR that does not verify",
           diagnostics.text);
    diagnostics.keep = false;
  }

  Diagnostics &diagnostics;
};

/// The pass options two header bytes select (see the file comment).
struct Options {
  std::string sparsify, cpu, gpu;
  bool lowerSparsified = false;
};

Options optionsFrom(uint8_t byte0, uint8_t byte1) {
  static const char *const sparsity[] = {"0.4", "0.5", "0.95", "1.5"};
  static const char *const blockSize[] = {"64", "16", "32", "0"};
  static const char *const preset[] = {
      "",
      " pooling=mean explore=0.25 seed=7 ema-decay=0.25 report-sparsity=true",
      " reduction=A2 mtp-mask=row0 mtp-update=row0 page-size=16",
      " explore=0.5 explore-policy=block-age pooling=top4 reset-input=true",
  };
  static const char *const warps[] = {"8", "4", "1", "2", "16", "32", "0", "6"};
  static const char *const mTiles[] = {"0", "1", "2", "3"};

  Options options;
  options.sparsify = std::string("spin-sparsify-pipeline{sparsity=") +
                     sparsity[byte0 & 3] + " block-size=" +
                     blockSize[(byte0 >> 2) & 3] + preset[(byte0 >> 4) & 3] +
                     ((byte0 & 0x40) ? " fuse=false schedule-async=false" : "") +
                     "}";
  options.cpu = (byte0 & 0x80) ? "spin-lower-to-cpu{state-storage=globals "
                                 "num-slots=2 capacity=16 max-rows=4}"
                               : "spin-lower-to-cpu";
  bool tuned = byte1 & 0x40;
  options.gpu = std::string("spin-configure-gpu-kernels{warps-per-cta=") +
                warps[byte1 & 7] + ((byte1 & 8) ? " wgmma=true" : "") +
                " m-tiles=" + mTiles[(byte1 >> 4) & 3] +
                (tuned ? " tiles-per-warp=12 sm-count=1" : "") +
                "},convert-spin-to-gpu" + (tuned ? "{capacity=4096}" : "");
  options.lowerSparsified = byte1 & 0x80;
  return options;
}

const DialectRegistry &registry() {
  static const DialectRegistry *registry = [] {
    auto *made = new DialectRegistry;
    spin::registerSpinDialects(*made);
    spin::registerSpinPasses();
    return made;
  }();
  return *registry;
}

/// Runs `pipeline` on a clone of `module`; the clone when it succeeded.
OwningOpRef<ModuleOp> runOnClone(ModuleOp module, const std::string &pipeline,
                                 Diagnostics &diagnostics) {
  MLIRContext *context = module.getContext();
  PassManager pm(context, ModuleOp::getOperationName(),
                 OpPassManager::Nesting::Implicit);
  if (failed(parsePassPipeline(pipeline, pm, llvm::nulls())))
    return nullptr;
  pm.enableVerifier(false);
  pm.addInstrumentation(std::make_unique<VerifyAfterEachPass>(diagnostics));
  OwningOpRef<ModuleOp> clone = module.clone();
  if (failed(pm.run(*clone)))
    return nullptr;
  return clone;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2)
    return 0;
  Options options = optionsFrom(data[0], data[1]);
  llvm::StringRef text(reinterpret_cast<const char *>(data) + 2, size - 2);

  // A context per input: nothing (uniqued attributes, loaded dialects)
  // carries over from one input to the next, so every crash reproduces
  // from its input alone.
  MLIRContext context(registry(), MLIRContext::Threading::DISABLED);
  Diagnostics diagnostics;
  ScopedDiagnosticHandler handler(&context, [&](Diagnostic &diagnostic) {
    if (diagnostics.keep)
      diagnostics.text += diagnostic.str() + "\n";
    return success();
  });

  OwningOpRef<ModuleOp> module;
  {
    // The copy is NUL-terminated, as the lexer expects of a file's buffer.
    llvm::SourceMgr sourceMgr;
    sourceMgr.AddNewSourceBuffer(
        llvm::MemoryBuffer::getMemBufferCopy(text, "input.mlir"),
        llvm::SMLoc());
    module = parseSourceFile<ModuleOp>(sourceMgr, ParserConfig(&context));
  }
  if (!module)
    return 0;

  // What the printer writes for a verified module must read back.
  std::string printed;
  {
    llvm::raw_string_ostream os(printed);
    module->print(os);
  }
  diagnostics.keep = true;
  if (!parseSourceString<ModuleOp>(printed, ParserConfig(&context)))
    fail("the printed form of a verified module does not parse back",
         diagnostics.text + "--- printed:\n" + printed);
  diagnostics.keep = false;

  OwningOpRef<ModuleOp> sparsified =
      runOnClone(*module, options.sparsify, diagnostics);
  ModuleOp lowered =
      options.lowerSparsified && sparsified ? *sparsified : *module;
  (void)runOnClone(lowered, options.cpu, diagnostics);
  (void)runOnClone(lowered, options.gpu, diagnostics);
  return 0;
}
