//===- GpuManifest.cpp - read and validate manifest.json ------------------===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
// Strict reading of docs/GPU-ABI.md's manifest: every member of an
// argument, kernel, launch and launch parameter must be known (a typo is an
// error, not a silently defaulted field); only the top level may carry
// extra metadata. Every error names the file and the field's path.
//
//===----------------------------------------------------------------------===//

#include "spin/Runtime/GpuProgram.h"

#include "spin/Runtime/Json.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <locale>
#include <set>
#include <sstream>
#include <sys/stat.h>

namespace spin::runtime {

namespace {

namespace k = manifest::key;

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
/// The whole i64 range: fields whose range is checked after reading.
constexpr int64_t kAnyMin = std::numeric_limits<int64_t>::min();
constexpr int64_t kAnyMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kInt32Min = std::numeric_limits<int32_t>::min();

std::string str(int64_t value) { return std::to_string(value); }

std::string quoted(const std::string &text) { return "\"" + text + "\""; }

std::string plural(int64_t n, const char *what) {
  return str(n) + " " + what + (n == 1 ? "" : "s");
}

std::string join(const std::string &path, const std::string &key) {
  return path.empty() ? key : path + "." + key;
}

std::string at(const std::string &path, size_t index) {
  return path + "[" + std::to_string(index) + "]";
}

/// Typed access to the members of the manifest with errors that name the
/// file and the field.
class Reader {
public:
  explicit Reader(std::string file) : file(std::move(file)) {}

  Status error(const std::string &path, const std::string &what) const {
    return Status::error(file + ": " + (path.empty() ? "" : path + ": ") +
                         what);
  }

  /// `value` must be an object whose members are all in `allowed`.
  Status object(const JsonValue &value, const std::string &path,
                std::initializer_list<const char *> allowed) const {
    if (!value.isObject())
      return error(path.empty() ? "the manifest" : path,
                   std::string("expected an object, got ") + value.describe());
    for (const auto &[key, member] : value.asObject()) {
      bool known = std::any_of(allowed.begin(), allowed.end(),
                               [&](const char *a) { return key == a; });
      if (!known) {
        std::string list;
        for (const char *a : allowed)
          list += (list.empty() ? "" : ", ") + std::string(a);
        return error(join(path, key),
                     "unknown member (expected one of " + list + ")");
      }
    }
    return Status::success();
  }

  /// The member `key` of object `obj`; null if absent and optional.
  Status member(const JsonValue &obj, const std::string &path, const char *key,
                bool required, const JsonValue *&out) const {
    out = obj.find(key);
    if (!out && required)
      return error(path.empty() ? "the manifest" : path,
                   "missing member " + quoted(key));
    return Status::success();
  }

  Status integer(const JsonValue &obj, const std::string &path, const char *key,
                 int64_t &out, int64_t min, int64_t max,
                 std::optional<int64_t> fallback = std::nullopt) const {
    const JsonValue *v = nullptr;
    if (Status s = member(obj, path, key, !fallback, v); !s.ok())
      return s;
    if (!v) {
      out = *fallback;
      return Status::success();
    }
    return integerValue(*v, join(path, key), out, min, max);
  }

  Status integerValue(const JsonValue &v, const std::string &path, int64_t &out,
                      int64_t min, int64_t max) const {
    if (!v.isInt())
      return error(path,
                   std::string("expected an integer, got ") + v.describe());
    out = v.asInt();
    if (out < min || out > max)
      return error(path, str(out) + " is outside [" + str(min) + ", " +
                             str(max) + "]");
    return Status::success();
  }

  Status string(const JsonValue &obj, const std::string &path, const char *key,
                std::string &out,
                std::optional<std::string> fallback = std::nullopt) const {
    const JsonValue *v = nullptr;
    if (Status s = member(obj, path, key, !fallback, v); !s.ok())
      return s;
    if (!v) {
      out = *fallback;
      return Status::success();
    }
    if (!v->isString())
      return error(join(path, key),
                   std::string("expected a string, got ") + v->describe());
    out = v->asString();
    if (out.empty() && !fallback)
      return error(join(path, key), "must not be empty");
    return Status::success();
  }

  Status array(const JsonValue &obj, const std::string &path, const char *key,
               bool required, const std::vector<JsonValue> *&out) const {
    static const std::vector<JsonValue> empty;
    const JsonValue *v = nullptr;
    if (Status s = member(obj, path, key, required, v); !s.ok())
      return s;
    if (!v) {
      out = &empty;
      return Status::success();
    }
    if (!v->isArray())
      return error(join(path, key),
                   std::string("expected an array, got ") + v->describe());
    out = &v->asArray();
    return Status::success();
  }

  /// Three positive integers, each at most the matching `limits` entry.
  Status dims3(const JsonValue &obj, const std::string &path, const char *key,
               const std::array<int64_t, 3> &limits,
               std::array<uint32_t, 3> &out) const {
    const std::vector<JsonValue> *values = nullptr;
    if (Status s = array(obj, path, key, true, values); !s.ok())
      return s;
    if (values->size() != 3)
      return error(join(path, key),
                   "expected 3 sizes (x, y, z), got " + str(values->size()));
    for (size_t i = 0; i < 3; ++i) {
      int64_t size = 0;
      if (Status s = integerValue((*values)[i], at(join(path, key), i), size, 1,
                                  limits[i]);
          !s.ok())
        return s;
      out[i] = static_cast<uint32_t>(size);
    }
    return Status::success();
  }

  const std::string file;
};

bool fileExists(const std::string &path) {
  struct stat info;
  return ::stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode);
}

/// Reads one argument of `arguments`.
Status readArgument(const Reader &r, const JsonValue &value,
                    const std::string &path, ArgSpec &arg) {
  if (Status s =
          r.object(value, path,
                   {k::Role, k::Name, k::Layer, k::Dtype, k::Shape, k::BlockSize});
      !s.ok())
    return s;
  std::string role, dtype;
  if (Status s = r.string(value, path, k::Role, role); !s.ok())
    return s;
  std::optional<ArgSpec::Role> parsedRole = argRoleFromName(role);
  if (!parsedRole)
    return r.error(join(path, k::Role),
                   "unknown role " + quoted(role) + " (expected " +
                       argRoleList() +
                       ")");
  arg.role = *parsedRole;
  if (Status s = r.string(value, path, k::Name, arg.name); !s.ok())
    return s;
  if (Status s = r.string(value, path, k::Dtype, dtype); !s.ok())
    return s;
  std::optional<DType> parsedType = dtypeFromName(dtype);
  if (!parsedType)
    return r.error(join(path, k::Dtype),
                   "unknown element type " + quoted(dtype) +
                       " (expected f32, f16, bf16, fp8e4m3, i1, i8, i32 or "
                       "i64)");
  arg.dtype = *parsedType;
  if (Status s = r.integer(value, path, k::Layer, arg.layer, -1,
                           std::numeric_limits<int32_t>::max(), -1);
      !s.ok())
    return s;
  if (Status s =
          r.integer(value, path, k::BlockSize, arg.blockSize, 0, kInt32Max, 0);
      !s.ok())
    return s;
  const std::vector<JsonValue> *shape = nullptr;
  if (Status s = r.array(value, path, k::Shape, true, shape); !s.ok())
    return s;
  if (shape->empty())
    return r.error(join(path, k::Shape),
                   "rank 0 is not supported: arguments are tensors");
  arg.shape.clear();
  for (size_t d = 0; d < shape->size(); ++d) {
    int64_t size = 0;
    if (Status s = r.integerValue((*shape)[d], at(join(path, k::Shape), d), size,
                                  -1, std::numeric_limits<int64_t>::max());
        !s.ok())
      return s;
    if (size == 0)
      return r.error(at(join(path, k::Shape), d),
                     "sizes are positive, or -1 for a run-time size");
    arg.shape.push_back(size);
  }

  // The ABI fixes the element type and rank of everything but the graph's
  // own inputs and outputs.
  auto expect = [&](DType dtype, size_t rank, const std::string &what,
                    std::optional<DType> alternative = std::nullopt) -> Status {
    if (arg.dtype != dtype && arg.dtype != alternative)
      return r.error(join(path, k::Dtype), what + " is " + dtypeName(dtype) +
                                              " in the step ABI, got " +
                                              dtypeName(arg.dtype));
    if (arg.shape.size() != rank)
      return r.error(join(path, k::Shape), what + " has rank " + str(rank) +
                                              " in the step ABI, got " +
                                              shapeString(arg.shape));
    return Status::success();
  };
  if (std::optional<RoleLayout> layout = roleLayout(arg.role))
    return expect(layout->dtype, layout->rank, argRoleName(arg.role),
                  layout->alternative);
  switch (arg.role) {
  case ArgSpec::Role::State: {
    if (arg.layer < 0)
      return r.error(join(path, k::Layer),
                     "state arguments need a layer >= 0, got " +
                         str(arg.layer));
    std::optional<StateField> field = stateFieldFromName(arg.name);
    if (field && stateFieldInfo(*field).group != StateGroup::Staleness)
      return expect(stateFieldInfo(*field).dtype, stateFieldInfo(*field).rank(),
                    "state field " + quoted(arg.name));
    return r.error(join(path, k::Name),
                   "unknown state field " + quoted(arg.name) +
                       " (expected " + stateFieldList(StateGroup::Staleness) + ")");
  }
  default:
    return Status::success();
  }
  return Status::success();
}

/// The `argument` member of a launch argument: a step argument's index.
Status readArgumentIndex(const Reader &r, const JsonValue &value,
                         const std::string &path, int64_t numArgs,
                         int64_t &index) {
  if (Status s = r.integer(value, path, k::Argument, index, kAnyMin, kAnyMax);
      !s.ok())
    return s;
  if (index < 0 || index >= numArgs)
    return r.error(join(path, k::Argument),
                   str(index) + " is out of range: the step has " +
                       plural(numArgs, "argument"));
  return Status::success();
}

Status readLaunchArg(const Reader &r, const JsonValue &value,
                     const std::string &path, const GpuManifest &m,
                     GpuLaunchArg &arg) {
  if (!value.isObject())
    return r.error(path,
                   std::string("expected an object, got ") + value.describe());
  std::string kind;
  if (Status s = r.string(value, path, k::Kind, kind); !s.ok())
    return s;
  const int64_t numArgs = static_cast<int64_t>(m.arguments.size());
  std::optional<LaunchArgKind> known = launchArgKindFromName(kind);
  if (!known)
    return r.error(join(path, k::Kind),
                   "unknown kind " + quoted(kind) + " (expected " +
                       launchArgKindList() +
                       ")");
  arg.kind = *known;
  switch (*known) {
  case LaunchArgKind::Argument:
  case LaunchArgKind::Scratch: {
    if (Status s = r.object(value, path, {k::Kind, k::Index}); !s.ok())
      return s;
    bool isArgument = *known == LaunchArgKind::Argument;
    int64_t count =
        isArgument ? numArgs : static_cast<int64_t>(m.scratch.size());
    if (Status s = r.integer(value, path, k::Index, arg.index, kAnyMin, kAnyMax);
        !s.ok())
      return s;
    if (arg.index < 0 || arg.index >= count)
      return r.error(
          join(path, k::Index),
          str(arg.index) + " is out of range: the " +
              (isArgument ? "step has " + plural(count, "argument")
                          : "program has " + plural(count, "scratch buffer")));
    return Status::success();
  }
  case LaunchArgKind::Errors:
    return r.object(value, path, {k::Kind});
  case LaunchArgKind::Dim: {
    if (Status s = r.object(value, path, {k::Kind, k::Argument, k::Dim}); !s.ok())
      return s;
    if (Status s = readArgumentIndex(r, value, path, numArgs, arg.index);
        !s.ok())
      return s;
    const ArgSpec &of = m.arguments[static_cast<size_t>(arg.index)];
    int64_t rank = static_cast<int64_t>(of.shape.size());
    if (Status s = r.integer(value, path, k::Dim, arg.dim, kAnyMin, kAnyMax);
        !s.ok())
      return s;
    if (arg.dim < 0 || arg.dim >= rank)
      return r.error(join(path, k::Dim),
                     str(arg.dim) + " is out of range: argument " +
                         quoted(of.name) + " has rank " + str(rank));
    return Status::success();
  }
  case LaunchArgKind::I32: {
    if (Status s = r.object(value, path, {k::Kind, k::Value}); !s.ok())
      return s;
    int64_t v = 0;
    if (Status s = r.integer(value, path, k::Value, v, kInt32Min, kInt32Max);
        !s.ok())
      return s;
    arg.value = static_cast<int32_t>(v);
    return Status::success();
  }
  case LaunchArgKind::Status:
    if (Status s = r.object(value, path, {k::Kind, k::Index}); !s.ok())
      return s;
    return r.integer(value, path, k::Index, arg.index, 0, kMaxStatusOutputs - 1);
  case LaunchArgKind::Layer: {
    if (Status s = r.object(value, path, {k::Kind, k::Value}); !s.ok())
      return s;
    int64_t v = 0;
    if (Status s = r.integer(value, path, k::Value, v, 0, kInt32Max); !s.ok())
      return s;
    arg.value = static_cast<int32_t>(v);
    return Status::success();
  }
  case LaunchArgKind::TensorMap: {
    if (Status s = r.object(value, path, {k::Kind, k::Argument, k::Rows});
        !s.ok())
      return s;
    if (Status s = readArgumentIndex(r, value, path, numArgs, arg.index);
        !s.ok())
      return s;
    const ArgSpec &of = m.arguments[static_cast<size_t>(arg.index)];
    // Keys: a page's rows of 128 bytes, one span of the copy engine's
    // 128-byte swizzle each; scales: a page's f32 values.
    bool keys = of.shape.size() == 3 && dtypeSize(of.dtype) == 1 &&
                of.shape[2] == 128;
    bool scales = of.shape.size() == 2 && of.dtype == DType::f32;
    if (!keys && !scales)
      return r.error(join(path, k::Argument),
                     "argument " + quoted(of.name) +
                         " has no tensor map (it needs a key cache [pages, "
                         "page, 128] of a one-byte type or its scales "
                         "[pages, page] of f32)");
    int64_t rows = 0;
    if (Status s = r.integer(value, path, k::Rows, rows, 1, keys ? 256 : 64);
        !s.ok())
      return s;
    if (of.shape[1] > 0 && of.shape[1] % rows != 0)
      return r.error(join(path, k::Rows),
                     str(rows) + " does not divide the page size " +
                         str(of.shape[1]) + " of argument " + quoted(of.name));
    arg.value = static_cast<int32_t>(rows);
    return Status::success();
  }
  }
  return Status::success();
}

/// Reads the members of one manifest into `m`, section by section.
struct ManifestParser {
  ManifestParser(const Reader &r, const JsonValue &root, GpuManifest &m)
      : r(r), root(root), m(m) {}

  Status readIdentity();
  Status readPtx();
  Status readShapes();
  Status readArguments();
  Status readScratch();
  Status readKernels();
  Status readLaunches();

  const Reader &r;
  const JsonValue &root;
  GpuManifest &m;
  /// Kernel name -> index in m.kernels, for the launches.
  std::map<std::string, size_t> kernelIndex;
};

/// The format, version, function, compiler version and options.
Status ManifestParser::readIdentity() {
  std::string format;
  if (Status s = r.string(root, "", k::Format, format); !s.ok())
    return s;
  if (format != manifest::kFormat)
    return r.error(k::Format, "expected " + quoted(manifest::kFormat) +
                                  ", got " + quoted(format) +
                                  " (not a spin GPU artifact)");
  int64_t version = 0;
  if (Status s = r.integer(root, "", k::Version, version, kAnyMin, kAnyMax);
      !s.ok())
    return s;
  if (version != manifest::kVersion)
    return r.error(k::Version, "version " + str(version) +
                                   " is not supported: this runtime reads "
                                   "version " +
                                   str(manifest::kVersion));
  if (Status s = r.string(root, "", k::Function, m.function); !s.ok())
    return s;
  if (Status s = r.string(root, "", k::CompilerVersion, m.compilerVersion,
                          std::string());
      !s.ok())
    return s;
  if (const JsonValue *options = root.find(k::Options)) {
    if (!options->isObject())
      return r.error(k::Options, std::string("expected an object, got ") +
                                    options->describe());
    for (const auto &[key, value] : options->asObject()) {
      std::string text;
      if (value.isString())
        text = value.asString();
      else if (value.isInt())
        text = str(value.asInt());
      else if (value.isBool())
        text = value.asBool() ? "true" : "false";
      else if (value.isNumber()) {
        std::ostringstream os;
        os.imbue(std::locale::classic());
        os << value.asDouble();
        text = os.str();
      } else
        return r.error(join(k::Options, key),
                       std::string("expected a string, number or boolean, "
                                   "got ") +
                           value.describe());
      m.options.emplace_back(key, text);
    }
  }
  return Status::success();
}

/// The PTX module of each chip; every file must exist in the directory.
Status ManifestParser::readPtx() {
  const JsonValue *ptx = nullptr;
  if (Status s = r.member(root, "", k::Ptx, true, ptx); !s.ok())
    return s;
  if (!ptx->isObject() || ptx->asObject().empty())
    return r.error(k::Ptx, "expected an object mapping chips to PTX files, "
                          "got " +
                              std::string(ptx->isObject() ? "an empty object"
                                                          : ptx->describe()));
  for (const auto &[chip, value] : ptx->asObject()) {
    std::string path = join(k::Ptx, chip);
    if (chip.rfind("sm_", 0) != 0 || chip.size() < 5)
      return r.error(path, "chips are named sm_XY or sm_XYa (sm_90a, "
                           "sm_100a), got " +
                               quoted(chip));
    if (!value.isString())
      return r.error(path, std::string("expected a file name, got ") +
                               value.describe());
    const std::string &name = value.asString();
    if (name.empty() || name == "." || name == ".." ||
        name.find('/') != std::string::npos)
      return r.error(path, "expected a file name in the artifact directory, "
                           "got " +
                               quoted(name));
    if (!fileExists(m.directory + "/" + name))
      return r.error(path,
                     "PTX file " + quoted(name) + " is not in " + m.directory);
    m.ptx.emplace_back(chip, name);
  }
  if (Status s = r.integer(root, "", k::ProgrammaticLaunch,
                           m.programmaticLaunch, 0, 1, 0);
      !s.ok())
    return s;
  if (Status s = r.integer(root, "", k::PtxVersion, m.ptxVersion, 0, 1000, 0);
      !s.ok())
    return s;
  return Status::success();
}

/// The batch, rows and state section.
Status ManifestParser::readShapes() {
  if (Status s = r.integer(root, "", k::Batch, m.batch, 1, kInt32Max); !s.ok())
    return s;
  if (Status s = r.integer(root, "", k::Rows, m.rows, 1, kInt32Max); !s.ok())
    return s;
  if (const JsonValue *state = root.find(k::State)) {
    if (Status s = r.object(*state, k::State,
                            {k::Layers, k::Capacity, k::BlockSize, k::MaxRows,
                             k::PageSize});
        !s.ok())
      return s;
    // A stateless (dense) program may write a section with no layers; its
    // other sizes are then meaningless (non-negative integers).
    GpuStateSpec spec;
    if (Status s =
            r.integer(*state, k::State, k::Layers, spec.layers, 0, kInt32Max);
        !s.ok())
      return s;
    const int64_t least = spec.layers == 0 ? 0 : 1;
    if (Status s = r.integer(*state, k::State, k::Capacity, spec.capacity, least,
                             kInt32Max);
        !s.ok())
      return s;
    if (Status s = r.integer(*state, k::State, k::BlockSize, spec.blockSize,
                             least, kInt32Max);
        !s.ok())
      return s;
    if (Status s = r.integer(*state, k::State, k::MaxRows, spec.maxRows, least,
                             kInt32Max);
        !s.ok())
      return s;
    if (Status s = r.integer(*state, k::State, k::PageSize, spec.pageSize, 0,
                             kInt32Max, 0);
        !s.ok())
      return s;
    if (spec.pageSize > 0 && spec.capacity % spec.pageSize != 0)
      return r.error("state.page_size",
                     str(spec.pageSize) + " does not divide the capacity (" +
                         str(spec.capacity) + ")");
    if (spec.layers > 0) {
      if (spec.maxRows < m.rows)
        return r.error("state.max_rows", str(spec.maxRows) +
                                             " is less than the step's rows (" +
                                             str(m.rows) + ")");
      m.state = spec;
    }
  }
  return Status::success();
}

/// The step function's arguments, with the contract's roles and fields.
Status ManifestParser::readArguments() {
  const std::vector<JsonValue> *arguments = nullptr;
  if (Status s = r.array(root, "", k::Arguments, true, arguments); !s.ok())
    return s;
  std::map<std::string, size_t> names;
  std::set<std::pair<std::string, int64_t>> stateFields;
  std::map<ArgSpec::Role, size_t> singletons;
  for (size_t i = 0; i < arguments->size(); ++i) {
    std::string path = at(k::Arguments, i);
    ArgSpec arg;
    if (Status s = readArgument(r, (*arguments)[i], path, arg); !s.ok())
      return s;
    if (arg.role == ArgSpec::Role::State) {
      if (!stateFields.emplace(arg.name, arg.layer).second)
        return r.error(path, "state field " + quoted(arg.name) + " of layer " +
                                 str(arg.layer) + " appears twice");
      if (!m.state)
        return r.error(path, "state arguments need the manifest's \"state\" "
                             "section, with layers");
      if (arg.layer >= m.state->layers)
        return r.error(join(path, k::Layer),
                       str(arg.layer) + " is out of range: the state has " +
                           plural(m.state->layers, "layer"));
    } else {
      auto [previous, inserted] = names.emplace(arg.name, i);
      if (!inserted)
        return r.error(join(path, k::Name),
                       quoted(arg.name) + " is also the name of arguments[" +
                           str(previous->second) + "]");
      if (arg.role != ArgSpec::Role::Input &&
          arg.role != ArgSpec::Role::Output) {
        auto [first, once] = singletons.emplace(arg.role, i);
        if (!once)
          return r.error(join(path, k::Role),
                         std::string("a second ") + argRoleName(arg.role) +
                             " argument (the first is arguments[" +
                             str(first->second) + "])");
      }
    }
    m.arguments.push_back(std::move(arg));
  }
  if (m.stateful() && !singletons.count(ArgSpec::Role::Slots))
    return r.error(k::Arguments, "the step binds state but has no slots "
                                "argument");
  if (!m.stateful() && singletons.count(ArgSpec::Role::Slots))
    return r.error(k::Arguments, "a slots argument without state arguments");
  if (m.commits() && !m.stateful())
    return r.error(k::Arguments, "an accepted argument needs state arguments "
                                "to commit to");
  return Status::success();
}

/// Scratch buffers, streams and events.
Status ManifestParser::readScratch() {
  const std::vector<JsonValue> *scratch = nullptr;
  if (Status s = r.array(root, "", k::Scratch, false, scratch); !s.ok())
    return s;
  for (size_t i = 0; i < scratch->size(); ++i) {
    std::string path = at(k::Scratch, i);
    GpuScratchSpec buffer;
    if (Status s = r.object((*scratch)[i], path, {k::Name, k::Bytes}); !s.ok())
      return s;
    if (Status s = r.string((*scratch)[i], path, k::Name, buffer.name); !s.ok())
      return s;
    if (Status s = r.integer((*scratch)[i], path, k::Bytes, buffer.bytes, 1,
                             std::numeric_limits<int64_t>::max());
        !s.ok())
      return s;
    m.scratch.push_back(std::move(buffer));
  }
  if (Status s = r.integer(root, "", k::Streams, m.streams, 1, 2, 1); !s.ok())
    return s;
  if (Status s = r.integer(root, "", k::Events, m.events, 0, 1024, 0); !s.ok())
    return s;
  return Status::success();
}

/// The kernels of the PTX module.
Status ManifestParser::readKernels() {
  const std::vector<JsonValue> *kernels = nullptr;
  if (Status s = r.array(root, "", k::Kernels, true, kernels); !s.ok())
    return s;
  if (kernels->empty())
    return r.error(k::Kernels, "the program has no kernels");
  for (size_t i = 0; i < kernels->size(); ++i) {
    std::string path = at(k::Kernels, i);
    const JsonValue &value = (*kernels)[i];
    GpuKernelSpec kernel;
    if (Status s = r.object(value, path, {k::Name, k::Block, k::SharedBytes});
        !s.ok())
      return s;
    if (Status s = r.string(value, path, k::Name, kernel.name); !s.ok())
      return s;
    if (Status s =
            r.dims3(value, path, k::Block, {1024, 1024, 64}, kernel.block);
        !s.ok())
      return s;
    int64_t threads =
        int64_t(kernel.block[0]) * kernel.block[1] * kernel.block[2];
    if (threads > 1024)
      return r.error(join(path, k::Block),
                     str(threads) + " threads per block, more than 1024");
    if (Status s = r.integer(value, path, k::SharedBytes, kernel.sharedBytes, 0,
                             kInt32Max, 0);
        !s.ok())
      return s;
    if (!kernelIndex.emplace(kernel.name, i).second)
      return r.error(join(path, k::Name),
                     "kernel " + quoted(kernel.name) + " is listed twice");
    m.kernels.push_back(std::move(kernel));
  }
  return Status::success();
}

/// The launches of the step, in order.
Status ManifestParser::readLaunches() {
  const std::vector<JsonValue> *launches = nullptr;
  if (Status s = r.array(root, "", k::Launches, true, launches); !s.ok())
    return s;
  if (launches->empty())
    return r.error(k::Launches, "the step launches no kernel");
  std::vector<bool> recorded(static_cast<size_t>(m.events), false);
  for (size_t i = 0; i < launches->size(); ++i) {
    std::string path = at(k::Launches, i);
    const JsonValue &value = (*launches)[i];
    GpuLaunchSpec launch;
    if (Status s =
            r.object(value, path,
                     {k::Kernel, k::Grid, k::Stream, k::Wait, k::Record, k::Args});
        !s.ok())
      return s;
    std::string kernel;
    if (Status s = r.string(value, path, k::Kernel, kernel); !s.ok())
      return s;
    auto found = kernelIndex.find(kernel);
    if (found == kernelIndex.end())
      return r.error(join(path, k::Kernel),
                     "kernel " + quoted(kernel) +
                         " is not in the manifest's \"kernels\"");
    launch.kernel = found->second;
    if (Status s = r.dims3(value, path, k::Grid, {kInt32Max, 65535, 65535},
                           launch.grid);
        !s.ok())
      return s;
    int64_t stream = 0;
    if (Status s = r.integer(value, path, k::Stream, stream, 0,
                             std::numeric_limits<int64_t>::max(), 0);
        !s.ok())
      return s;
    if (stream >= m.streams)
      return r.error(join(path, k::Stream),
                     str(stream) + " is out of range: the program has " +
                         plural(m.streams, "stream"));
    launch.stream = static_cast<int>(stream);
    const std::vector<JsonValue> *wait = nullptr;
    if (Status s = r.array(value, path, k::Wait, false, wait); !s.ok())
      return s;
    for (size_t w = 0; w < wait->size(); ++w) {
      std::string waitPath = at(join(path, k::Wait), w);
      int64_t event = 0;
      if (Status s =
              r.integerValue((*wait)[w], waitPath, event, kAnyMin, kAnyMax);
          !s.ok())
        return s;
      if (event < 0 || event >= m.events)
        return r.error(waitPath, "event " + str(event) +
                                     " is out of range: the program has " +
                                     plural(m.events, "event"));
      // A step must be capturable on its own: it may only wait for events
      // it recorded itself.
      if (!recorded[static_cast<size_t>(event)])
        return r.error(waitPath, "event " + str(event) +
                                     " is not recorded by an earlier launch "
                                     "of the step");
      launch.wait.push_back(event);
    }
    if (Status s = r.integer(value, path, k::Record, launch.record, kAnyMin,
                             kAnyMax, -1);
        !s.ok())
      return s;
    if (launch.record < -1 || launch.record >= m.events)
      return r.error(join(path, k::Record),
                     "event " + str(launch.record) +
                         " is out of range: the program has " +
                         plural(m.events, "event") + " (-1: none)");
    if (launch.record >= 0)
      recorded[static_cast<size_t>(launch.record)] = true;
    const std::vector<JsonValue> *args = nullptr;
    if (Status s = r.array(value, path, k::Args, true, args); !s.ok())
      return s;
    for (size_t a = 0; a < args->size(); ++a) {
      GpuLaunchArg arg;
      if (Status s =
              readLaunchArg(r, (*args)[a], at(join(path, k::Args), a), m, arg);
          !s.ok())
        return s;
      if (arg.kind == LaunchArgKind::Status)
        m.statusOutputs = std::max(m.statusOutputs, arg.index + 1);
      if (arg.kind == LaunchArgKind::Layer)
        m.layerArgument = true;
      launch.args.push_back(arg);
    }
    m.launches.push_back(std::move(launch));
  }
  return Status::success();
}

} // namespace

StatusOr<GpuManifest> GpuManifest::read(const std::string &directory) {
  std::string file = directory + "/manifest.json";
  struct stat info;
  if (::stat(directory.c_str(), &info) != 0 || !S_ISDIR(info.st_mode))
    return Status::error("GPU artifact " + directory + " is not a directory");
  std::ifstream in(file, std::ios::binary);
  if (!in)
    return Status::error("GPU artifact " + directory +
                         " has no manifest.json (cannot open " + file + ")");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad())
    return Status::error("cannot read " + file);
  return parse(text.str(), directory);
}

StatusOr<GpuManifest> GpuManifest::parse(const std::string &json,
                                         const std::string &directory) {
  Reader r(directory + "/manifest.json");
  StatusOr<JsonValue> parsed = parseJson(json);
  if (!parsed.ok())
    return r.error("", parsed.message());
  const JsonValue &root = *parsed;
  if (!root.isObject())
    return r.error("", std::string("expected an object at the top level, "
                                   "got ") +
                           root.describe());

  GpuManifest m;
  m.directory = directory;
  ManifestParser parser(r, root, m);
  for (Status (ManifestParser::*section)() :
       {&ManifestParser::readIdentity, &ManifestParser::readPtx,
        &ManifestParser::readShapes, &ManifestParser::readArguments,
        &ManifestParser::readScratch, &ManifestParser::readKernels,
        &ManifestParser::readLaunches})
    if (Status s = (parser.*section)(); !s.ok())
      return s;
  return m;
}

//===----------------------------------------------------------------------===//
// Writing
//===----------------------------------------------------------------------===//

namespace {

void writeArgument(JsonWriter &w, const ArgSpec &arg) {
  w.beginObject()
      .member(k::Role, argRoleName(arg.role))
      .member(k::Name, arg.name)
      .member(k::Layer, arg.layer)
      .member(k::Dtype, dtypeName(arg.dtype));
  w.key(k::Shape).beginArray();
  for (int64_t size : arg.shape)
    w.value(size);
  w.end().member(k::BlockSize, arg.blockSize).end();
}

void writeLaunchArg(JsonWriter &w, const GpuLaunchArg &arg) {
  w.beginObject().member(k::Kind, launchArgKindName(arg.kind));
  switch (arg.kind) {
  case LaunchArgKind::Argument:
  case LaunchArgKind::Scratch:
    w.member(k::Index, arg.index);
    break;
  case LaunchArgKind::Errors:
    break;
  case LaunchArgKind::Dim:
    w.member(k::Argument, arg.index).member(k::Dim, arg.dim);
    break;
  case LaunchArgKind::I32:
    w.member(k::Value, int64_t(arg.value));
    break;
  case LaunchArgKind::Status:
    w.member(k::Index, arg.index);
    break;
  case LaunchArgKind::Layer:
    w.member(k::Value, int64_t(arg.value));
    break;
  case LaunchArgKind::TensorMap:
    w.member(k::Argument, arg.index).member(k::Rows, int64_t(arg.value));
    break;
  }
  w.end();
}

void writeLaunch(JsonWriter &w, const GpuManifest &m,
                 const GpuLaunchSpec &launch) {
  w.beginObject().member(k::Kernel, m.kernels[launch.kernel].name);
  w.key(k::Grid).beginArray();
  for (uint32_t size : launch.grid)
    w.value(int64_t(size));
  w.end().member(k::Stream, int64_t(launch.stream));
  w.key(k::Wait).beginArray();
  for (int64_t event : launch.wait)
    w.value(event);
  w.end().member(k::Record, launch.record);
  w.key(k::Args).beginArray();
  for (const GpuLaunchArg &arg : launch.args)
    writeLaunchArg(w, arg);
  w.end().end();
}

} // namespace

std::string GpuManifest::toJson() const {
  JsonWriter w;
  w.beginObject()
      .member(k::Format, manifest::kFormat)
      .member(k::Version, manifest::kVersion)
      .member(k::Function, function)
      .member(k::CompilerVersion, compilerVersion);
  w.key(k::Options).beginObject();
  for (const auto &[key, value] : options)
    w.member(key, value);
  w.end().key(k::Ptx).beginObject();
  for (const auto &[chip, file] : ptx)
    w.member(chip, file);
  w.end()
      .member(k::PtxVersion, ptxVersion)
      .member(k::ProgrammaticLaunch, programmaticLaunch)
      .member(k::Batch, batch)
      .member(k::Rows, rows);
  if (state) {
    w.key(k::State)
        .beginObject()
        .member(k::Layers, state->layers)
        .member(k::Capacity, state->capacity)
        .member(k::BlockSize, state->blockSize)
        .member(k::MaxRows, state->maxRows);
    if (state->pageSize > 0)
      w.member(k::PageSize, state->pageSize);
    w.end();
  }
  w.key(k::Arguments).beginArray();
  for (const ArgSpec &arg : arguments)
    writeArgument(w, arg);
  w.end().key(k::Scratch).beginArray();
  for (const GpuScratchSpec &buffer : scratch)
    w.beginObject()
        .member(k::Name, buffer.name)
        .member(k::Bytes, buffer.bytes)
        .end();
  w.end().member(k::Streams, streams).member(k::Events, events);
  w.key(k::Kernels).beginArray();
  for (const GpuKernelSpec &kernel : kernels) {
    w.beginObject().member(k::Name, kernel.name).key(k::Block).beginArray();
    for (uint32_t size : kernel.block)
      w.value(int64_t(size));
    w.end().member(k::SharedBytes, kernel.sharedBytes).end();
  }
  w.end().key(k::Launches).beginArray();
  for (const GpuLaunchSpec &launch : launches)
    writeLaunch(w, *this, launch);
  w.end().end();
  return w.text();
}

StatusOr<std::string> GpuManifest::ptxFor(int major, int minor) const {
  const int cc = major * 10 + minor;
  const std::string exact = "sm_" + std::to_string(cc) + "a";
  std::string portable, available;
  int portableCc = -1;
  for (const auto &[chip, file] : ptx) {
    if (chip == exact)
      return chip;
    available += (available.empty() ? "" : ", ") + chip;
    // A portable target: sm_ followed by digits only.
    std::string digits = chip.substr(3);
    if (digits.empty() || digits.size() > 4 ||
        !std::all_of(digits.begin(), digits.end(),
                     [](char c) { return c >= '0' && c <= '9'; }))
      continue;
    int target = std::stoi(digits);
    if (target <= cc && target > portableCc) {
      portableCc = target;
      portable = chip;
    }
  }
  if (portableCc >= 0)
    return portable;
  return Status::error(directory +
                       "/manifest.json has no PTX for this "
                       "device (compute capability " +
                       std::to_string(major) + "." + std::to_string(minor) +
                       ": " + exact + ", or a portable sm_XY with XY <= " +
                       std::to_string(cc) + "); available: " + available);
}

bool GpuManifest::commits() const {
  return std::any_of(arguments.begin(), arguments.end(), [](const ArgSpec &a) {
    return a.role == ArgSpec::Role::Accepted;
  });
}

bool GpuManifest::stateful() const {
  return std::any_of(arguments.begin(), arguments.end(), [](const ArgSpec &a) {
    return a.role == ArgSpec::Role::State;
  });
}

} // namespace spin::runtime
