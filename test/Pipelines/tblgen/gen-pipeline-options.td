// -gen-pipeline-options: a pipeline's struct holds the options of the passes
// it forwards (but the unforwarded ones) and its own, converts to each pass's
// options struct and visits every option by flag.
//
// RUN: spin-tblgen -gen-pipeline-options %tblgen_includes %s | FileCheck %s

include "spin/Pipelines/PipelineBase.td"

def PassA : Pass<"pass-a"> {
  let options = [
    Option<"size", "size", "int64_t", "64", "A size">,
    Option<"verbose", "verbose", "bool", "false", "Say more">,
  ];
}

def PassB : Pass<"pass-b"> {
  let options = [
    Option<"kind", "kind", "::Kind", "::Kind::x", "A kind",
           [{::llvm::cl::values(clEnumValN(::Kind::x, "x", "the x"))}]>,
  ];
}

def TestPipeline : PassPipeline<"test-pipeline"> {
  let summary = "A and B";
  let forwards = [PassA, PassB];
  let unforwarded = ["verbose"];
  let options = [Option<"last", "last", "bool", "true", "Run the last stage">];
}

// CHECK:      #ifdef GEN_PIPELINE_OPTIONS_DECL
// CHECK:      struct PassAOptions;
// CHECK-NEXT: struct PassBOptions;
// CHECK:      /// Options of `test-pipeline`.
// CHECK-NEXT: struct TestPipelineOptions
// CHECK-NEXT:     : public ::mlir::PassPipelineOptions<TestPipelineOptions> {
// CHECK:        return "test-pipeline";
// CHECK:        return R"PO(A and B)PO";
// CHECK:        // pass-a
// CHECK-NEXT:   ::mlir::detail::PassOptions::Option<int64_t> size{*this, "size", ::llvm::cl::desc(R"PO(A size)PO"), ::llvm::cl::init(64)};
// CHECK-NEXT:   // pass-b
// CHECK-NEXT:   ::mlir::detail::PassOptions::Option<::Kind> kind{*this, "kind", ::llvm::cl::desc(R"PO(A kind)PO"), ::llvm::cl::init(::Kind::x), ::llvm::cl::values(clEnumValN(::Kind::x, "x", "the x"))};
// CHECK-NEXT:   // test-pipeline's own
// CHECK-NEXT:   ::mlir::detail::PassOptions::Option<bool> last{*this, "last", ::llvm::cl::desc(R"PO(Run the last stage)PO"), ::llvm::cl::init(true)};
// CHECK:        PassAOptions toPassAOptions() const;
// CHECK:        PassBOptions toPassBOptions() const;
// CHECK:        template <typename Fn>
// CHECK-NEXT:   void forEachOption(Fn &&fn) {
// CHECK-NEXT:     fn(::llvm::StringRef("size"), size);
// CHECK-NEXT:     fn(::llvm::StringRef("kind"), kind);
// CHECK-NEXT:     fn(::llvm::StringRef("last"), last);
// CHECK-NEXT:   }
// CHECK:      #endif // GEN_PIPELINE_OPTIONS_DECL

// CHECK:      #ifdef GEN_PIPELINE_OPTIONS_DEF
// CHECK:      PassAOptions TestPipelineOptions::toPassAOptions() const {
// CHECK-NEXT:   PassAOptions options;
// CHECK-NEXT:   options.size = size.getValue();
// CHECK-NEXT:   return options;
// CHECK-NEXT: }
// CHECK:      PassBOptions TestPipelineOptions::toPassBOptions() const {
// CHECK-NEXT:   PassBOptions options;
// CHECK-NEXT:   options.kind = kind.getValue();
// CHECK-NEXT:   return options;
// CHECK-NEXT: }
// CHECK:      #endif // GEN_PIPELINE_OPTIONS_DEF
