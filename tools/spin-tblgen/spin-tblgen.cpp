//===- spin-tblgen.cpp - spin's TableGen backends --------------------------===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
// -gen-pipeline-options: for each PassPipeline record (PipelineBase.td), a
// PassPipelineOptions struct whose options are those of the passes the
// pipeline forwards to (read from their Option<>s with mlir::tblgen::Pass)
// plus its own, a conversion to each forwarded pass's generated options
// struct, and forEachOption(fn), which visits every option with its real
// type so that drivers (spin-exec, the Python module) set options by name.
//
//===----------------------------------------------------------------------===//

#include "mlir/TableGen/Pass.h"

#include "llvm/ADT/StringSet.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/TableGen/Error.h"
#include "llvm/TableGen/Main.h"
#include "llvm/TableGen/Record.h"
#include "llvm/TableGen/TableGenBackend.h"

using namespace llvm;
using mlir::tblgen::Pass;
using mlir::tblgen::PassOption;

namespace {

/// One option of a pipeline and the pass it is forwarded to (null for the
/// pipeline's own).
struct PipelineOption {
  PassOption option;
  const Pass *pass;
};

/// A PassPipeline record with its forwarded passes and all its options, in
/// the order the struct declares them.
struct Pipeline {
  const Record *def;
  std::vector<Pass> passes;
  std::vector<PipelineOption> options;

  std::string structName() const { return (def->getName() + "Options").str(); }
};

//===----------------------------------------------------------------------===//
// Collect
//===----------------------------------------------------------------------===//

/// Where an option comes from, for diagnostics.
std::string originOf(const PipelineOption &option, const Pipeline &pipeline) {
  return option.pass ? option.pass->getDef()->getName().str()
                     : pipeline.def->getName().str();
}

/// Adds `option` to `pipeline`; a flag or C++ name already taken is an error
/// naming both origins.
void addOption(Pipeline &pipeline, PipelineOption option) {
  const PassOption &added = option.option;
  if (added.isListOption())
    PrintFatalError(pipeline.def, "option '" + added.getArgument() + "' of " +
                                      originOf(option, pipeline) +
                                      ": list options are not supported");
  for (const PipelineOption &other : pipeline.options) {
    std::string what;
    if (other.option.getArgument() == added.getArgument())
      what = ("option '" + added.getArgument() + "'").str();
    else if (other.option.getCppVariableName() == added.getCppVariableName())
      what = ("option C++ name '" + added.getCppVariableName() + "'").str();
    else
      continue;
    PrintFatalError(pipeline.def, what + " of " + originOf(option, pipeline) +
                                      " clashes with the one of " +
                                      originOf(other, pipeline));
  }
  pipeline.options.push_back(option);
}

/// Reads a PassPipeline record: the forwarded passes' options except the
/// unforwarded flags (each of which must name one), then its own.
Pipeline collectPipeline(const Record *def) {
  Pipeline pipeline{def, {}, {}};
  for (const Record *pass : def->getValueAsListOfDefs("forwards"))
    pipeline.passes.emplace_back(pass);
  std::vector<StringRef> unforwarded =
      def->getValueAsListOfStrings("unforwarded");
  StringSet<> skipped;
  for (const Pass &pass : pipeline.passes) {
    for (const PassOption &option : pass.getOptions()) {
      if (is_contained(unforwarded, option.getArgument()))
        skipped.insert(option.getArgument());
      else
        addOption(pipeline, {option, &pass});
    }
  }
  for (StringRef flag : unforwarded)
    if (!skipped.contains(flag))
      PrintFatalError(def, "unforwarded option '" + flag +
                               "' is not an option of a forwarded pass");
  for (const Record *option : def->getValueAsListOfDefs("options"))
    addOption(pipeline, {PassOption(option), nullptr});
  return pipeline;
}

//===----------------------------------------------------------------------===//
// Emit
//===----------------------------------------------------------------------===//

/// The option as a PassOptions::Option member, constructed as the pass's own
/// option is (flag, description, default, additional flags).
void emitOptionMember(const PassOption &option, raw_ostream &os) {
  os << "  ::mlir::detail::PassOptions::Option<" << option.getType() << "> "
     << option.getCppVariableName() << "{*this, \"" << option.getArgument()
     << "\", ::llvm::cl::desc(R\"PO(" << option.getDescription() << ")PO\")";
  if (std::optional<StringRef> init = option.getDefaultValue())
    os << ", ::llvm::cl::init(" << *init << ")";
  if (std::optional<StringRef> flags = option.getAdditionalFlags())
    os << ", " << *flags;
  os << "};\n";
}

/// `to<Pass>Options()`, declared in the struct (the pass's options struct
/// is only forward-declared there, so that the header stays light).
void emitConversionDecl(const Pass &pass, raw_ostream &os) {
  StringRef name = pass.getDef()->getName();
  os << "\n  /// The options of " << pass.getArgument()
     << " as this pipeline sets them.\n"
     << "  " << name << "Options to" << name << "Options() const;\n";
}

/// `to<Pass>Options()`'s definition: the forwarded options copied into the
/// pass's generated options struct; the unforwarded ones keep the pass's
/// defaults.
void emitConversionDef(const Pipeline &pipeline, const Pass &pass,
                       raw_ostream &os) {
  StringRef name = pass.getDef()->getName();
  os << name << "Options " << pipeline.structName() << "::to" << name
     << "Options() const {\n"
     << "  " << name << "Options options;\n";
  for (const PipelineOption &option : pipeline.options)
    if (option.pass == &pass)
      os << "  options." << option.option.getCppVariableName() << " = "
         << option.option.getCppVariableName() << ".getValue();\n";
  os << "  return options;\n}\n\n";
}

/// forEachOption(fn): fn(flag, option) on every option, in declaration
/// order, with the option's own type.
void emitVisitor(const Pipeline &pipeline, raw_ostream &os) {
  os << "\n  /// Calls `fn(flag, option)` on every option in declaration "
        "order; `option`\n"
     << "  /// is the PassOptions::Option<T> member itself.\n"
     << "  template <typename Fn>\n  void forEachOption(Fn &&fn) {\n";
  for (const PipelineOption &option : pipeline.options)
    os << "    fn(::llvm::StringRef(\"" << option.option.getArgument()
       << "\"), " << option.option.getCppVariableName() << ");\n";
  os << "  }\n";
}

/// The struct: its options grouped by the pass they go to, the conversions'
/// declarations and the visitor.
void emitPipelineDecl(const Pipeline &pipeline, raw_ostream &os) {
  std::string name = pipeline.structName();
  StringRef argument = pipeline.def->getValueAsString("argument");
  StringRef summary = pipeline.def->getValueAsString("summary");
  os << "/// Options of `" << argument << "`.\n"
     << "struct " << name << "\n    : public ::mlir::PassPipelineOptions<"
     << name << "> {\n"
     << "  static constexpr ::llvm::StringLiteral getPipelineArgument() {\n"
     << "    return \"" << argument << "\";\n  }\n"
     << "  static constexpr ::llvm::StringLiteral getPipelineSummary() {\n"
     << "    return R\"PO(" << summary << ")PO\";\n  }\n\n";
  const Pass *section = nullptr;
  for (const PipelineOption &option : pipeline.options) {
    if (option.pass != section || &option == &pipeline.options.front())
      os << "  // " << (option.pass ? option.pass->getArgument() : argument)
         << (option.pass ? "\n" : "'s own\n");
    section = option.pass;
    emitOptionMember(option.option, os);
  }
  for (const Pass &pass : pipeline.passes)
    emitConversionDecl(pass, os);
  emitVisitor(pipeline, os);
  os << "};\n\n";
}

/// GEN_PIPELINE_OPTIONS_DECL: the structs (and forward declarations of the
/// passes' options structs); GEN_PIPELINE_OPTIONS_DEF: the conversions.
void emitPipelineOptions(const RecordKeeper &records, raw_ostream &os) {
  emitSourceFileHeader("Pass pipeline options", os, records);
  std::vector<Pipeline> pipelines;
  for (const Record *def : records.getAllDerivedDefinitions("PassPipeline"))
    pipelines.push_back(collectPipeline(def));

  os << "#ifdef GEN_PIPELINE_OPTIONS_DECL\n";
  for (const Pipeline &pipeline : pipelines)
    for (const Pass &pass : pipeline.passes)
      os << "struct " << pass.getDef()->getName() << "Options;\n";
  os << "\n";
  for (const Pipeline &pipeline : pipelines)
    emitPipelineDecl(pipeline, os);
  os << "#undef GEN_PIPELINE_OPTIONS_DECL\n#endif // GEN_PIPELINE_OPTIONS_DECL\n\n";

  os << "#ifdef GEN_PIPELINE_OPTIONS_DEF\n";
  for (const Pipeline &pipeline : pipelines)
    for (const Pass &pass : pipeline.passes)
      emitConversionDef(pipeline, pass, os);
  os << "#undef GEN_PIPELINE_OPTIONS_DEF\n#endif // GEN_PIPELINE_OPTIONS_DEF\n";
}

TableGen::Emitter::Opt
    genPipelineOptions("gen-pipeline-options", emitPipelineOptions,
                       "Generate PassPipelineOptions structs of pipelines");

} // namespace

int main(int argc, char **argv) {
  InitLLVM init(argc, argv);
  cl::ParseCommandLineOptions(argc, argv);
  // No main function: the -gen-* option selects a registered backend.
  return TableGenMain(argv[0], TableGenMainFn());
}
