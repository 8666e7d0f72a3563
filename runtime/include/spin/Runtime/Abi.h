//===- Abi.h - the compiler-runtime contract ---------------------*- C++ -*-===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
// Enums and tables for every name and layout that the compiler (lib/) and
// the runtime (runtime/) share, generated from Abi.def: element types, state
// fields with their element types and shapes, argument roles and their
// attributes, result kinds, kernel-parameter kinds, device error codes and
// the members of manifest.json. Both sides include this header and nothing
// else spells those names. No MLIR, no CUDA.
//
//===----------------------------------------------------------------------===//

#ifndef SPIN_RUNTIME_ABI_H
#define SPIN_RUNTIME_ABI_H

#include <array>
#include <cstdint>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace spin::runtime {

//===----------------------------------------------------------------------===//
// Element types
//===----------------------------------------------------------------------===//

/// Element types crossing the step ABI.
enum class DType { f32, f16, bf16, fp8e4m3, i1, i8, i32, i64 };

/// Bytes per element (i1 is stored as one byte).
int64_t dtypeSize(DType dtype);
const char *dtypeName(DType dtype);
/// The element type `dtypeName` prints as `name` ("f32", "bf16",
/// "fp8e4m3", "i1", ...), if any.
std::optional<DType> dtypeFromName(std::string_view name);

//===----------------------------------------------------------------------===//
// State fields
//===----------------------------------------------------------------------===//

/// A per-layer array of the state pool (docs/Runtime-ABI.md, "State pool").
enum class StateField {
#define SPIN_STATE_FIELD(E, NAME, DTYPE, D0, D1, D2, GROUP) E,
#include "spin/Runtime/Abi.def"
};

/// The sizes a state field's dimensions are made of.
enum class StateDim { None, Slots, Capacity, MaxRows, Drafts, Blocks, Prediction };

/// Which programs bind a state field.
enum class StateGroup {
  Core,        ///< every stateful program (V, D, iterations)
  Observation, ///< programs that buffer MTP rows until their commit
  Prediction,  ///< GPU programs: the prediction cache
  Staleness,   ///< CPU programs of the staleness / block-age policies
  Paged        ///< GPU programs whose state follows the KV pages
};

/// The entries of the GPU prediction record (`pred_at`: p, N, it, valid).
constexpr int64_t kPredictionRecordSize = 4;

/// What the contract fixes about one state field.
struct StateFieldInfo {
  StateField field;
  const char *name;
  DType dtype;
  std::array<StateDim, 3> dims; ///< StateDim::None past the rank
  StateGroup group;

  size_t rank() const {
    size_t r = 0;
    while (r < dims.size() && dims[r] != StateDim::None)
      ++r;
    return r;
  }
};

/// Every state field, in pool layout order.
inline constexpr StateFieldInfo kStateFields[] = {
#define SPIN_STATE_FIELD(E, NAME, DTYPE, D0, D1, D2, GROUP)                    \
  {StateField::E, NAME, DType::DTYPE,                                          \
   {StateDim::D0, StateDim::D1, StateDim::D2}, StateGroup::GROUP},
#include "spin/Runtime/Abi.def"
};

inline constexpr size_t kNumStateFields = std::size(kStateFields);

const StateFieldInfo &stateFieldInfo(StateField field);
inline const char *stateFieldName(StateField field) {
  return stateFieldInfo(field).name;
}
std::optional<StateField> stateFieldFromName(std::string_view name);
/// "v, d, it, ... or last_observed", for messages; without the fields of
/// `excluded` (the state a GPU program may not bind) when given.
std::string stateFieldList(std::optional<StateGroup> excluded = std::nullopt);

/// The run-time sizes of a pool's state dimensions.
struct StateSizes {
  int64_t slots = 0;
  int64_t capacity = 0;
  int64_t maxRows = 0;
  int64_t blocks = 0;
  /// The paged layout (docs/GPU-ABI.md, "Paged state"): the state's pages
  /// and their size in KV slots; pageSize 0 is the compact layout.
  int64_t pages = 0;
  int64_t pageSize = 0;

  int64_t of(StateDim dim) const;
};

/// Whether `field` is paged in a layout of `sizes`: a per-KV-slot field
/// (with a Capacity dim) of the paged layout.
bool isPagedField(StateField field, const StateSizes &sizes);

/// The shape of `field` in a pool of `sizes` (paged fields: the Slots dim
/// is the page count, the Capacity dim the page size).
std::vector<int64_t> stateFieldShape(StateField field, const StateSizes &sizes);

/// The input that names the state pages of each batch row in the paged
/// layout (docs/GPU-ABI.md, "Paged state"): i32 [batch, block-table width].
inline constexpr char kStateBlockTableName[] = "state_block_table";

/// The name of the caller's tensor holding state field `field` of `layer`
/// in a step on state tensors: "state.<layer>.<field>".
std::string stateTensorName(int64_t layer, std::string_view field);

//===----------------------------------------------------------------------===//
// Step-function arguments and results
//===----------------------------------------------------------------------===//

/// The role of one argument of a compiled step function
/// (docs/Runtime-ABI.md, "The step function").
enum class ArgRole {
#define SPIN_ARG_ROLE(E, NAME) E,
#include "spin/Runtime/Abi.def"
};

/// The role's name in manifests and messages ("input", "positions", ...);
/// arguments of the roles other than input, state and output are named by
/// it too.
const char *argRoleName(ArgRole role);
std::optional<ArgRole> argRoleFromName(std::string_view name);
/// "input, positions, ... or output", for messages.
std::string argRoleList();

/// The contract's element type and rank of an argument of `role`, for the
/// roles the runtime fills or checks itself (positions, request ids,
/// accepted counts, resets, slots); nullopt for inputs, outputs and state
/// fields. Resets may also be passed as i8 (`alternative`).
struct RoleLayout {
  DType dtype;
  size_t rank;
  std::optional<DType> alternative;
};
std::optional<RoleLayout> roleLayout(ArgRole role);

/// The kinds of step results.
enum class OutputKind {
#define SPIN_OUTPUT(E, NAME) E,
#include "spin/Runtime/Abi.def"
};
const char *outputName(OutputKind kind);

//===----------------------------------------------------------------------===//
// GPU launches and the error record
//===----------------------------------------------------------------------===//

/// The kind of one kernel parameter of a launch (docs/GPU-ABI.md).
enum class LaunchArgKind {
#define SPIN_LAUNCH_ARG(E, NAME) E,
#include "spin/Runtime/Abi.def"
};
const char *launchArgKindName(LaunchArgKind kind);

/// The most per-row status outputs a manifest may name (one per SPIN
/// selection of the step).
inline constexpr int64_t kMaxStatusOutputs = 1024;

/// The name of status output `index` (docs/GPU-ABI.md, "Row status"):
/// "status", then "status_1", ... (the selections in launch order, as the
/// top-K results are named).
std::string statusOutputName(int64_t index);
std::optional<LaunchArgKind> launchArgKindFromName(std::string_view name);
/// "argument, scratch, errors, dim or i32", for messages.
std::string launchArgKindList();

/// The codes generated kernels write into the error record.
enum class DeviceError : int32_t {
#define SPIN_DEVICE_ERROR(E, CODE, WHAT) E = CODE,
#include "spin/Runtime/Abi.def"
};
/// What the runtime reports for `code` with the recorded `value`.
std::string describeDeviceError(int32_t code, int32_t value);

//===----------------------------------------------------------------------===//
// manifest.json
//===----------------------------------------------------------------------===//

namespace manifest {
/// The value of the top-level "format" member.
inline constexpr const char kFormat[] = "spin-gpu-artifact";
/// The manifest version this runtime reads and the compiler writes.
inline constexpr int64_t kVersion = 1;

/// The members of manifest.json, at every level.
namespace key {
#define SPIN_MANIFEST_KEY(E, KEY) inline constexpr const char E[] = KEY;
#include "spin/Runtime/Abi.def"
} // namespace key

/// Every member name with its C++ name, for the Python module.
struct KeyEntry {
  const char *symbol;
  const char *key;
};
inline constexpr KeyEntry kKeys[] = {
#define SPIN_MANIFEST_KEY(E, KEY) {#E, KEY},
#include "spin/Runtime/Abi.def"
};
} // namespace manifest

} // namespace spin::runtime

#endif // SPIN_RUNTIME_ABI_H
