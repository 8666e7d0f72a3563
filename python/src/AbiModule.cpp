//===- AbiModule.cpp - the compiler-runtime contract for Python -----------===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
// `spin._spin.abi`: the tables of spin/Runtime/Abi.h as plain Python data,
// so that the package and the bench scripts take state-field, role, result
// and manifest names from the one contract instead of spelling them.
//
//===----------------------------------------------------------------------===//

#include "AbiModule.h"

#include "spin/Runtime/Abi.h"
#include "spin/Runtime/Semantics.h"
#include "spin/Runtime/StepProgram.h"

#include <pybind11/stl.h>

namespace py = pybind11;
namespace rt = ::spin::runtime;

namespace {

const char *stateDimName(rt::StateDim dim) {
  switch (dim) {
  case rt::StateDim::None:
    return "none";
  case rt::StateDim::Slots:
    return "slots";
  case rt::StateDim::Capacity:
    return rt::manifest::key::Capacity;
  case rt::StateDim::MaxRows:
    return rt::manifest::key::MaxRows;
  case rt::StateDim::Drafts:
    return "drafts";
  case rt::StateDim::Blocks:
    return "blocks";
  case rt::StateDim::Prediction:
    return "prediction";
  }
  return "?";
}

const char *stateGroupName(rt::StateGroup group) {
  switch (group) {
  case rt::StateGroup::Core:
    return "core";
  case rt::StateGroup::Observation:
    return "observation";
  case rt::StateGroup::Prediction:
    return "prediction";
  case rt::StateGroup::Staleness:
    return "staleness";
  case rt::StateGroup::Paged:
    return "paged";
  }
  return "?";
}

} // namespace

void spin::python::bindAbi(py::module_ &m) {
  py::module_ abi = m.def_submodule(
      "abi", "The compiler-runtime contract (spin/Runtime/Abi.def).");
  py::list fields;
  for (const rt::StateFieldInfo &info : rt::kStateFields) {
    py::list dims;
    for (size_t d = 0; d < info.rank(); ++d)
      dims.append(stateDimName(info.dims[d]));
    py::dict field;
    field["name"] = info.name;
    field["dtype"] = rt::dtypeName(info.dtype);
    field["dims"] = py::tuple(dims);
    field["group"] = stateGroupName(info.group);
    fields.append(field);
  }
  abi.attr("state_fields") = py::tuple(fields);
  abi.attr("prediction_record_size") = rt::kPredictionRecordSize;

  py::dict roles;
#define SPIN_ARG_ROLE(E, NAME) roles[#E] = NAME;
#include "spin/Runtime/Abi.def"
  abi.attr("roles") = roles;
  py::dict outputs;
#define SPIN_OUTPUT(E, NAME) outputs[#E] = NAME;
#include "spin/Runtime/Abi.def"
  abi.attr("outputs") = outputs;
  // The row status codes (docs/GPU-ABI.md, "Row status"): the device errors
  // that skip a row, and what each means.
  py::dict errors;
#define SPIN_DEVICE_ERROR(E, CODE, WHAT) errors[py::int_(CODE)] = #E;
#include "spin/Runtime/Abi.def"
  abi.attr("device_errors") = errors;
  py::dict keys;
  for (const rt::manifest::KeyEntry &entry : rt::manifest::kKeys)
    keys[entry.symbol] = entry.key;
  abi.attr("manifest_keys") = keys;
  abi.attr("manifest_format") = rt::manifest::kFormat;
  abi.attr("manifest_version") = rt::manifest::kVersion;
  // SPIN's integer rules (spin/Runtime/Semantics.h), for scripts that must
  // agree with the compiled code.
  abi.def("block_budget", &rt::blockBudget, py::arg("blocks"),
          py::arg("block_size"), py::arg("topk"), py::arg("sparsity"),
          "SPIN_SPEC §3.4's block budget m of `blocks` blocks.");
  abi.def("is_paged_cache_input", &rt::isPagedCacheInput, py::arg("name"),
          "Whether input `name` is a key cache (keys, scales, kv_cache, or "
          "their _k forms), whose size 0 is its pages, not the batch.");
}
