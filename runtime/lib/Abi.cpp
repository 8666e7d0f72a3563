//===- Abi.cpp - the compiler-runtime contract's tables -------------------===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
//===----------------------------------------------------------------------===//

#include "spin/Runtime/Abi.h"

#include <algorithm>
#include <iterator>

namespace spin::runtime {

namespace {

constexpr const char *kDTypeNames[] = {"f32", "f16", "bf16", "fp8e4m3",
                                       "i1",  "i8",  "i32",  "i64"};
constexpr int64_t kDTypeSizes[] = {4, 2, 2, 1, 1, 1, 4, 8};

constexpr const char *kRoleNames[] = {
#define SPIN_ARG_ROLE(E, NAME) NAME,
#include "spin/Runtime/Abi.def"
};

constexpr const char *kOutputNames[] = {
#define SPIN_OUTPUT(E, NAME) NAME,
#include "spin/Runtime/Abi.def"
};

constexpr const char *kLaunchArgNames[] = {
#define SPIN_LAUNCH_ARG(E, NAME) NAME,
#include "spin/Runtime/Abi.def"
};

struct DeviceErrorEntry {
  int32_t code;
  std::string_view what;
};
constexpr DeviceErrorEntry kDeviceErrors[] = {
#define SPIN_DEVICE_ERROR(E, CODE, WHAT) {CODE, WHAT},
#include "spin/Runtime/Abi.def"
};

/// The index of `name` in `names`, if any.
template <size_t N>
std::optional<size_t> indexOf(const char *const (&names)[N],
                              std::string_view name) {
  for (size_t i = 0; i < N; ++i)
    if (name == names[i])
      return i;
  return std::nullopt;
}

/// "a, b, c or d", for messages.
std::string orList(const std::vector<const char *> &names) {
  std::string list;
  for (size_t i = 0; i < names.size(); ++i)
    list += std::string(i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") +
            names[i];
  return list;
}

} // namespace

int64_t dtypeSize(DType dtype) {
  return kDTypeSizes[static_cast<size_t>(dtype)];
}

const char *dtypeName(DType dtype) {
  return kDTypeNames[static_cast<size_t>(dtype)];
}

std::optional<DType> dtypeFromName(std::string_view name) {
  if (std::optional<size_t> i = indexOf(kDTypeNames, name))
    return static_cast<DType>(*i);
  return std::nullopt;
}

const StateFieldInfo &stateFieldInfo(StateField field) {
  return kStateFields[static_cast<size_t>(field)];
}

std::optional<StateField> stateFieldFromName(std::string_view name) {
  for (const StateFieldInfo &info : kStateFields)
    if (name == info.name)
      return info.field;
  return std::nullopt;
}

std::string stateFieldList(std::optional<StateGroup> excluded) {
  std::vector<const char *> names;
  for (const StateFieldInfo &info : kStateFields)
    if (info.group != excluded)
      names.push_back(info.name);
  return orList(names);
}

int64_t StateSizes::of(StateDim dim) const {
  switch (dim) {
  case StateDim::None:
    return 1;
  case StateDim::Slots:
    return slots;
  case StateDim::Capacity:
    return capacity;
  case StateDim::MaxRows:
    return maxRows;
  case StateDim::Drafts:
    return std::max<int64_t>(maxRows - 1, 0);
  case StateDim::Blocks:
    return blocks;
  case StateDim::Prediction:
    return kPredictionRecordSize;
  }
  return 0;
}

bool isPagedField(StateField field, const StateSizes &sizes) {
  const StateFieldInfo &info = stateFieldInfo(field);
  return sizes.pageSize > 0 &&
         std::find(info.dims.begin(), info.dims.end(), StateDim::Capacity) !=
             info.dims.end();
}

std::vector<int64_t> stateFieldShape(StateField field,
                                     const StateSizes &sizes) {
  const StateFieldInfo &info = stateFieldInfo(field);
  const bool paged = isPagedField(field, sizes);
  std::vector<int64_t> shape;
  for (size_t d = 0; d < info.rank(); ++d) {
    StateDim dim = info.dims[d];
    if (paged && dim == StateDim::Slots)
      shape.push_back(sizes.pages);
    else if (paged && dim == StateDim::Capacity)
      shape.push_back(sizes.pageSize);
    else
      shape.push_back(sizes.of(dim));
  }
  return shape;
}

const char *argRoleName(ArgRole role) {
  return kRoleNames[static_cast<size_t>(role)];
}

std::optional<ArgRole> argRoleFromName(std::string_view name) {
  if (std::optional<size_t> i = indexOf(kRoleNames, name))
    return static_cast<ArgRole>(*i);
  return std::nullopt;
}

std::string argRoleList() {
  return orList({std::begin(kRoleNames), std::end(kRoleNames)});
}

std::optional<RoleLayout> roleLayout(ArgRole role) {
  switch (role) {
  case ArgRole::Positions:
    return RoleLayout{DType::i32, 2, std::nullopt};
  case ArgRole::RequestIds:
    return RoleLayout{DType::i64, 1, std::nullopt};
  case ArgRole::Accepted:
  case ArgRole::Slots:
    return RoleLayout{DType::i32, 1, std::nullopt};
  case ArgRole::Reset:
    return RoleLayout{DType::i1, 1, DType::i8};
  case ArgRole::Input:
  case ArgRole::State:
  case ArgRole::Output:
    return std::nullopt;
  }
  return std::nullopt;
}

const char *outputName(OutputKind kind) {
  return kOutputNames[static_cast<size_t>(kind)];
}

std::string stateTensorName(int64_t layer, std::string_view field) {
  return "state." + std::to_string(layer) + "." + std::string(field);
}

std::string statusOutputName(int64_t index) {
  return index == 0 ? "status" : "status_" + std::to_string(index);
}

const char *launchArgKindName(LaunchArgKind kind) {
  return kLaunchArgNames[static_cast<size_t>(kind)];
}

std::optional<LaunchArgKind> launchArgKindFromName(std::string_view name) {
  if (std::optional<size_t> i = indexOf(kLaunchArgNames, name))
    return static_cast<LaunchArgKind>(*i);
  return std::nullopt;
}

std::string launchArgKindList() {
  return orList({std::begin(kLaunchArgNames), std::end(kLaunchArgNames)});
}

std::string describeDeviceError(int32_t code, int32_t value) {
  for (const DeviceErrorEntry &entry : kDeviceErrors) {
    if (entry.code != code)
      continue;
    size_t hole = entry.what.find("{}");
    return std::string(entry.what.substr(0, hole)) + std::to_string(value) +
           std::string(entry.what.substr(hole + 2));
  }
  return "unknown error code " + std::to_string(code) + " (value " +
         std::to_string(value) + ")";
}

} // namespace spin::runtime
