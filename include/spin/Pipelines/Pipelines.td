//===- Pipelines.td - spin pass pipelines' options ----------*- tablegen -*-===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
// The options of the spin pipelines with typed options derived from their
// passes (see PipelineBase.td); Pipelines.h includes the generated structs.
// An option added to a forwarded pass's Passes.td appears in the pipeline,
// spin-opt, spin-exec and the Python `pipeline_options` without further
// code.
//
//===----------------------------------------------------------------------===//

#ifndef SPIN_PIPELINES_PIPELINES_TD
#define SPIN_PIPELINES_PIPELINES_TD

include "spin/Pipelines/PipelineBase.td"
include "spin/Conversion/Passes.td"
include "spin/Dialect/Spin/Transforms/Passes.td"

def SparsifyPipeline : PassPipeline<"spin-sparsify-pipeline"> {
  let summary = "Raise dense indexers, rewrite them into SPIN pipelines, fuse, "
                "and schedule state work asynchronously";
  let forwards = [SpinRaiseIndexer, SpinSparsifyIndexer];
  // Remarks are for debugging the raising pass on its own.
  let unforwarded = ["report-failures"];
  let options = [
    Option<"fuse", "fuse", "bool", "true", "Run spin-fuse">,
    Option<"scheduleAsync", "schedule-async", "bool", "true",
           "Run spin-schedule-async">,
  ];
}

def LowerToCPU : PassPipeline<"spin-lower-to-cpu"> {
  let summary = "Lower spin programs to the LLVM dialect for CPU execution";
  let forwards = [ConvertSpinToSCF];
}

#endif // SPIN_PIPELINES_PIPELINES_TD
