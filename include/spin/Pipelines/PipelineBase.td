//===- PipelineBase.td - pass pipeline declarations ---------*- tablegen -*-===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
// A pass pipeline's options are mostly those of the passes it runs. Declaring
// the pipeline here, by naming those passes, lets spin-tblgen
// (-gen-pipeline-options) derive its PassPipelineOptions struct from the
// passes' Option<>s instead of repeating their names, types, defaults,
// descriptions and enum value lists by hand.
//
//===----------------------------------------------------------------------===//

#ifndef SPIN_PIPELINES_PIPELINEBASE_TD
#define SPIN_PIPELINES_PIPELINEBASE_TD

include "mlir/Pass/PassBase.td"

// The options of the pass pipeline registered as `pipelineArg`. The generated
// struct is named after the def with an `Options` suffix (def FooPipeline:
// FooPipelineOptions). It holds, in this order:
//   * every option of each pass in `forwards`, under the pass's flag and C++
//     name, except the flags listed in `unforwarded`;
//   * the pipeline's own `options` (for example switches for its stages).
// and for each forwarded pass P a `toPOptions()` returning P's generated
// options struct. Two options with the same flag or C++ name are an error.
class PassPipeline<string pipelineArg> {
  // The pipeline's registered name (as in --spin-sparsify-pipeline).
  string argument = pipelineArg;

  // One line on what the pipeline does.
  string summary = "";

  // The passes whose options the pipeline forwards.
  list<PassBase> forwards = [];

  // Flags of options of `forwards` the pipeline does not take (the pipeline
  // sets them itself, or they make no sense for it).
  list<string> unforwarded = [];

  // Options of the pipeline's own (typed Option<>s, as in PassBase.td).
  list<Option> options = [];
}

#endif // SPIN_PIPELINES_PIPELINEBASE_TD
