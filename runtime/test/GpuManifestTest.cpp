//===- GpuManifestTest.cpp - tests of manifest.json validation ------------===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
// No GPU needed: the manifest is read and validated before the driver is
// touched. Each invalid case edits the valid toy manifest in one place and
// checks that the error names the file, the field and the value.
//
//===----------------------------------------------------------------------===//

#include "GpuTestUtils.h"

#include "spin/Runtime/GpuProgram.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

using namespace spin::runtime;
using spin::runtime::testing::inputsDir;
using spin::runtime::testing::readFile;
using spin::runtime::testing::TempDir;

namespace {

std::string toyManifest() {
  return readFile(inputsDir() + "/toy_step/manifest.json");
}

/// `text` with the first occurrence of `from` replaced by `to`.
std::string edit(std::string text, const std::string &from,
                 const std::string &to) {
  size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << "no '" << from << "' to edit";
  if (at != std::string::npos)
    text.replace(at, from.size(), to);
  return text;
}

TEST(GpuManifest, ReadsTheToyArtifact) {
  std::string dir = inputsDir() + "/toy_step";
  StatusOr<GpuManifest> m = GpuManifest::read(dir);
  ASSERT_TRUE(m.ok()) << m.message();
  EXPECT_EQ(m->directory, dir);
  EXPECT_EQ(m->function, "toy_step");
  EXPECT_EQ(m->compilerVersion, "hand-written");
  ASSERT_EQ(m->options.size(), 1u);
  EXPECT_EQ(m->options[0].first, "note");
  ASSERT_EQ(m->ptx.size(), 1u);
  EXPECT_EQ(m->ptx[0].first, "sm_90");
  EXPECT_EQ(m->ptx[0].second, "sm_90.ptx");
  EXPECT_EQ(m->ptxVersion, 80);
  // Hand-written kernels do not wait for their predecessors: plain launches.
  EXPECT_EQ(m->programmaticLaunch, 0);
  EXPECT_EQ(m->batch, 4);
  EXPECT_EQ(m->rows, 1);
  ASSERT_TRUE(m->state);
  EXPECT_EQ(m->state->layers, 1);
  EXPECT_EQ(m->state->capacity, 8);
  EXPECT_EQ(m->state->blockSize, 4);
  EXPECT_EQ(m->state->maxRows, 1);
  EXPECT_TRUE(m->stateful());
  EXPECT_FALSE(m->commits());

  ASSERT_EQ(m->arguments.size(), 7u);
  EXPECT_EQ(m->arguments[0].role, ArgSpec::Role::Input);
  EXPECT_EQ(m->arguments[0].layer, -1);
  EXPECT_EQ(m->arguments[0].shape, (std::vector<int64_t>{-1, 8}));
  EXPECT_EQ(m->arguments[2].role, ArgSpec::Role::Slots);
  EXPECT_EQ(m->arguments[3].role, ArgSpec::Role::State);
  EXPECT_EQ(m->arguments[3].name, "v");
  EXPECT_EQ(m->arguments[3].layer, 0);
  EXPECT_EQ(m->arguments[3].blockSize, 4);
  EXPECT_EQ(m->arguments[4].dtype, DType::i64);
  EXPECT_EQ(m->arguments[6].role, ArgSpec::Role::Output);

  ASSERT_EQ(m->scratch.size(), 1u);
  EXPECT_EQ(m->scratch[0].bytes, 256);
  EXPECT_EQ(m->streams, 2);
  EXPECT_EQ(m->events, 1);
  ASSERT_EQ(m->kernels.size(), 2u);
  EXPECT_EQ(m->kernels[1].name, "spin_test_scale");
  EXPECT_EQ(m->kernels[1].sharedBytes, 16384);
  EXPECT_EQ(m->kernels[0].block, (std::array<uint32_t, 3>{32, 1, 1}));

  ASSERT_EQ(m->launches.size(), 2u);
  const GpuLaunchSpec &step = m->launches[0], &scale = m->launches[1];
  EXPECT_EQ(step.kernel, 0u);
  EXPECT_EQ(step.stream, 0);
  EXPECT_EQ(step.record, 0);
  ASSERT_EQ(step.args.size(), 9u);
  EXPECT_EQ(step.args[1].kind, GpuLaunchArg::Kind::Argument);
  EXPECT_EQ(step.args[1].index, 2);
  EXPECT_EQ(step.args[7].kind, GpuLaunchArg::Kind::Dim);
  EXPECT_EQ(step.args[7].index, 3);
  EXPECT_EQ(step.args[7].dim, 1);
  EXPECT_EQ(step.args[8].kind, GpuLaunchArg::Kind::Errors);
  EXPECT_EQ(scale.kernel, 1u);
  EXPECT_EQ(scale.stream, 1);
  EXPECT_EQ(scale.wait, (std::vector<int64_t>{0}));
  EXPECT_EQ(scale.record, -1);
  EXPECT_EQ(scale.args[2].kind, GpuLaunchArg::Kind::I32);
  EXPECT_EQ(scale.args[2].value, 3);

  StatusOr<GpuManifest> mtp = GpuManifest::read(inputsDir() + "/toy_mtp");
  ASSERT_TRUE(mtp.ok()) << mtp.message();
  EXPECT_TRUE(mtp->commits());
  EXPECT_EQ(mtp->rows, 2);
  EXPECT_EQ(mtp->streams, 1);
  EXPECT_TRUE(mtp->launches[0].wait.empty());
}

TEST(GpuManifest, ReadsTheObservationFieldsOfAnMtpProgram) {
  // Compiled MTP programs bind every observation field with the pool's
  // sizes left to run time.
  TempDir dir;
  dir.write("sm_90.ptx", "// not loaded");
  StatusOr<GpuManifest> m = GpuManifest::parse(
      spin::runtime::testing::toyMtpManifestWithObservations(), dir.path());
  ASSERT_TRUE(m.ok()) << m.message();
  EXPECT_TRUE(m->commits());
  ASSERT_TRUE(m->state);
  EXPECT_EQ(m->state->maxRows, 2);
  std::vector<std::string> fields;
  for (const ArgSpec &a : m->arguments)
    if (a.role == ArgSpec::Role::State)
      fields.push_back(a.name);
  EXPECT_EQ(fields, (std::vector<std::string>{"it", "obs_rows", "obs_pos",
                                              "obs_len", "obs_mask", "obs_z"}));
  EXPECT_EQ(m->arguments[9].dtype, DType::f32);
  EXPECT_EQ(m->arguments[9].shape, (std::vector<int64_t>{-1, -1, -1}));
  EXPECT_EQ(m->arguments[8].dtype, DType::i8);
  EXPECT_EQ(m->launches[0].args[4].index, 10);
}

TEST(GpuManifest, ReportsMissingDirectoriesAndFiles) {
  EXPECT_EQ(GpuManifest::read("/nonexistent/spin-artifact").message(),
            "GPU artifact /nonexistent/spin-artifact is not a directory");
  TempDir dir;
  EXPECT_EQ(GpuManifest::read(dir.path()).message(),
            "GPU artifact " + dir.path() +
                " has no manifest.json (cannot open " + dir.path() +
                "/manifest.json)");
  // The PTX file the manifest names must be there.
  dir.write("manifest.json", toyManifest());
  EXPECT_EQ(GpuManifest::read(dir.path()).message(),
            dir.path() +
                "/manifest.json: ptx.sm_90: PTX file \"sm_90.ptx\" is "
                "not in " +
                dir.path());
  dir.write("sm_90.ptx", "// empty");
  EXPECT_TRUE(GpuManifest::read(dir.path()).ok());
}

struct BadCase {
  const char *from;
  const char *to;
  /// The message after "DIR/manifest.json: ".
  const char *message;
};

/// Every validation branch: the toy manifest with one edit.
const BadCase kBadCases[] = {
    // Syntax and identity.
    {"\"version\": 1,", "\"version\": 1,,",
     "JSON error at byte 50: unexpected ',', expected a member name (a "
     "string)"},
    {"\"spin-gpu-artifact\"", "\"onnx\"",
     "format: expected \"spin-gpu-artifact\", got \"onnx\" (not a spin GPU "
     "artifact)"},
    {"\"version\": 1", "\"version\": 2",
     "version: version 2 is not supported: this runtime reads version 1"},
    {"\"version\": 1", "\"version\": \"1\"",
     "version: expected an integer, got a string"},
    {"\"function\": \"toy_step\",", "",
     "the manifest: missing member "
     "\"function\""},
    {"\"options\": {\"note\"", "\"options\": {\"note\": [], \"x\"",
     "options.note: expected a string, number or boolean, got an array"},
    // PTX.
    {"\"ptx\": {\"sm_90\": \"sm_90.ptx\"}", "\"ptx\": {}",
     "ptx: expected an object mapping chips to PTX files, got an empty "
     "object"},
    {"\"sm_90\": \"sm_90.ptx\"", "\"ampere\": \"sm_90.ptx\"",
     "ptx.ampere: chips are named sm_XY or sm_XYa (sm_90a, sm_100a), got "
     "\"ampere\""},
    {"\"sm_90\": \"sm_90.ptx\"", "\"sm_90\": \"../sm_90.ptx\"",
     "ptx.sm_90: expected a file name in the artifact directory, got "
     "\"../sm_90.ptx\""},
    {"\"sm_90\": \"sm_90.ptx\"", "\"sm_90\": 90",
     "ptx.sm_90: expected a file name, got an integer"},
    {"\"ptx_version\": 80", "\"ptx_version\": -1",
     "ptx_version: -1 is outside [0, 1000]"},
    {"\"ptx_version\": 80", "\"ptx_version\": 80, \"programmatic_launch\": 2",
     "programmatic_launch: 2 is outside [0, 1]"},
    // Shapes and state.
    {"\"batch\": 4", "\"batch\": 0", "batch: 0 is outside [1, 2147483647]"},
    {"\"batch\": 4,", "", "the manifest: missing member \"batch\""},
    {"\"max_rows\": 1}", "\"max_rows\": 1, \"slots\": 4}",
     "state.slots: unknown member (expected one of layers, capacity, "
     "block_size, max_rows, page_size)"},
    {"\"max_rows\": 1}", "\"max_rows\": 1, \"page_size\": 3}",
     "state.page_size: 3 does not divide the capacity (8)"},
    {"\"max_rows\": 1}", "\"max_rows\": 1, \"page_size\": -4}",
     "state.page_size: -4 is outside [0, 2147483647]"},
    {"\"rows\": 1", "\"rows\": 2",
     "state.max_rows: 1 is less than the step's rows (2)"},
    {"\"state\": {\"layers\": 1, \"capacity\": 8, \"block_size\": 4, "
     "\"max_rows\": 1},",
     "",
     "arguments[3]: state arguments need the manifest's \"state\" section, "
     "with layers"},
    // Arguments.
    {"{\"role\": \"input\", \"name\": \"x\"",
     "{\"role\": \"weights\", \"name\": \"x\"",
     "arguments[0].role: unknown role \"weights\" (expected input, "
     "positions, request_ids, accepted, reset, slots, state or output)"},
    {"\"dtype\": \"f32\", \"shape\": [-1, 8], \"block_size\": 0",
     "\"dtype\": \"float\", \"shape\": [-1, 8], \"block_size\": 0",
     "arguments[0].dtype: unknown element type \"float\" (expected f32, f16, "
     "bf16, fp8e4m3, i1, i8, i32 or i64)"},
    {"\"shape\": [-1, 8], \"block_size\": 0",
     "\"shape\": [-1, 0], \"block_size\": 0",
     "arguments[0].shape[1]: sizes are positive, or -1 for a run-time size"},
    {"\"shape\": [-1, 8], \"block_size\": 0", "\"shape\": []",
     "arguments[0].shape: rank 0 is not supported: arguments are tensors"},
    {"\"shape\": [-1, 8], \"block_size\": 0", "\"shape\": [-2, 8]",
     "arguments[0].shape[0]: -2 is outside [-1, 9223372036854775807]"},
    {"\"name\": \"x\", \"layer\": -1", "\"nam\": \"x\", \"layer\": -1",
     "arguments[0].nam: unknown member (expected one of role, name, layer, "
     "dtype, shape, block_size)"},
    {"\"name\": \"x\", \"layer\": -1", "\"name\": \"\", \"layer\": -1",
     "arguments[0].name: must not be empty"},
    {"\"name\": \"slots\", \"dtype\": \"i32\"",
     "\"name\": \"slots\", \"dtype\": \"i64\"",
     "arguments[2].dtype: slots is i32 in the step ABI, got i64"},
    {"\"name\": \"request_ids\", \"dtype\": \"i64\", \"shape\": [-1]",
     "\"name\": \"request_ids\", \"dtype\": \"i64\", \"shape\": [-1, 1]",
     "arguments[1].shape: request_ids has rank 1 in the step ABI, got [?, 1]"},
    {"\"name\": \"v\", \"layer\": 0", "\"name\": \"w\", \"layer\": 0",
     "arguments[3].name: unknown state field \"w\" (expected v, d, it, "
     "obs_rows, obs_pos, obs_len, obs_mask, obs_z, pred_at, pred_keys or valid)"},
    {"\"name\": \"it\", \"layer\": 0, \"dtype\": \"i64\"",
     "\"name\": \"it\", \"layer\": 0, \"dtype\": \"i32\"",
     "arguments[4].dtype: state field \"it\" is i64 in the step ABI, got i32"},
    {"\"name\": \"it\", \"layer\": 0", "\"name\": \"it\", \"layer\": 1",
     "arguments[4].layer: 1 is out of range: the state has 1 layer"},
    {"\"name\": \"it\", \"layer\": 0", "\"name\": \"it\", \"layer\": -1",
     "arguments[4].layer: state arguments need a layer >= 0, got -1"},
    {"\"name\": \"it\", \"layer\": 0", "\"name\": \"v\", \"layer\": 0",
     "arguments[4].dtype: state field \"v\" is f32 in the step ABI, got i64"},
    {"\"name\": \"z\"", "\"name\": \"y\"",
     "arguments[6].name: \"y\" is also the name of arguments[5]"},
    {"{\"role\": \"output\", \"name\": \"z\"",
     "{\"role\": \"slots\", \"name\": \"z\"",
     "arguments[6].dtype: slots is i32 in the step ABI, got f32"},
    {"{\"role\": \"slots\", \"name\": \"slots\", \"dtype\": \"i32\", "
     "\"shape\": [-1]},",
     "", "arguments: the step binds state but has no slots argument"},
    // Scratch, streams, events.
    {"{\"name\": \"unused\", \"bytes\": 256}",
     "{\"name\": \"unused\", \"bytes\": 0}",
     "scratch[0].bytes: 0 is outside [1, 9223372036854775807]"},
    {"\"streams\": 2", "\"streams\": 3", "streams: 3 is outside [1, 2]"},
    // Kernels.
    {"\"kernels\": [",
     "\"kernels\": [{\"name\": \"spin_test_step\", "
     "\"block\": [1, 1, 1]}, ",
     "kernels[1].name: kernel \"spin_test_step\" is listed twice"},
    {"\"block\": [32, 1, 1], \"shared_bytes\": 0",
     "\"block\": [32, 64, 1], \"shared_bytes\": 0",
     "kernels[0].block: 2048 threads per block, more than 1024"},
    {"\"block\": [32, 1, 1], \"shared_bytes\": 0",
     "\"block\": [32, 1], \"shared_bytes\": 0",
     "kernels[0].block: expected 3 sizes (x, y, z), got 2"},
    {"\"block\": [32, 1, 1], \"shared_bytes\": 0",
     "\"block\": [32, 1, 1], \"shared_bytes\": -4",
     "kernels[0].shared_bytes: -4 is outside [0, 2147483647]"},
    // Launches.
    {"{\"kernel\": \"spin_test_step\"", "{\"kernel\": \"spin_score\"",
     "launches[0].kernel: kernel \"spin_score\" is not in the manifest's "
     "\"kernels\""},
    {"\"grid\": [1, 1, 1], \"stream\": 0", "\"grid\": [0, 1, 1], \"stream\": 0",
     "launches[0].grid[0]: 0 is outside [1, 2147483647]"},
    {"\"grid\": [1, 1, 1], \"stream\": 0",
     "\"grid\": [1, 70000, 1], "
     "\"stream\": 0",
     "launches[0].grid[1]: 70000 is outside [1, 65535]"},
    {"\"grid\": [1, 1, 1], \"stream\": 0", "\"grd\": [1, 1, 1], \"stream\": 0",
     "launches[0].grd: unknown member (expected one of kernel, grid, stream, "
     "wait, record, args)"},
    {"\"stream\": 1,", "\"stream\": 2,",
     "launches[1].stream: 2 is out of range: the program has 2 streams"},
    {"\"wait\": [0], \"record\": -1", "\"wait\": [1], \"record\": -1",
     "launches[1].wait[0]: event 1 is out of range: the program has 1 event"},
    {"\"wait\": [], \"record\": 0", "\"wait\": [], \"record\": -1",
     "launches[1].wait[0]: event 0 is not recorded by an earlier launch of "
     "the step"},
    {"\"wait\": [], \"record\": 0", "\"wait\": [], \"record\": 1",
     "launches[0].record: event 1 is out of range: the program has 1 event "
     "(-1: none)"},
    {"{\"kind\": \"argument\", \"index\": 0}",
     "{\"kind\": \"argument\", \"index\": 7}",
     "launches[0].args[0].index: 7 is out of range: the step has 7 "
     "arguments"},
    {"{\"kind\": \"argument\", \"index\": 0}",
     "{\"kind\": \"scratch\", \"index\": 1}",
     "launches[0].args[0].index: 1 is out of range: the program has 1 "
     "scratch buffer"},
    {"{\"kind\": \"argument\", \"index\": 0}",
     "{\"kind\": \"argument\", \"index\": 0, \"dim\": 1}",
     "launches[0].args[0].dim: unknown member (expected one of kind, index)"},
    {"{\"kind\": \"argument\", \"index\": 0}", "{\"kind\": \"pointer\"}",
     "launches[0].args[0].kind: unknown kind \"pointer\" (expected argument, "
     "scratch, errors, dim, i32, status, layer or tensor_map)"},
    {"{\"kind\": \"i32\", \"value\": 3}", "{\"kind\": \"layer\", \"value\": -1}",
     "launches[1].args[2].value: -1 is outside [0, 2147483647]"},
    {"{\"kind\": \"errors\"}", "{\"kind\": \"status\", \"index\": -1}",
     "launches[0].args[8].index: -1 is outside [0, 1023]"},
    {"{\"kind\": \"errors\"}", "{\"kind\": \"status\"}",
     "launches[0].args[8]: missing member \"index\""},
    {"{\"kind\": \"dim\", \"argument\": 0, \"dim\": 1}",
     "{\"kind\": \"dim\", \"argument\": 0, \"dim\": 2}",
     "launches[0].args[5].dim: 2 is out of range: argument \"x\" has rank 2"},
    {"{\"kind\": \"dim\", \"argument\": 0, \"dim\": 1}",
     "{\"kind\": \"dim\", \"argument\": 9, \"dim\": 1}",
     "launches[0].args[5].argument: 9 is out of range: the step has 7 "
     "arguments"},
    {"{\"kind\": \"i32\", \"value\": 3}",
     "{\"kind\": \"i32\", \"value\": 2147483648}",
     "launches[1].args[2].value: 2147483648 is outside [-2147483648, "
     "2147483647]"},
    {"{\"kind\": \"errors\"}", "{\"kind\": \"errors\", \"index\": 0}",
     "launches[0].args[8].index: unknown member (expected one of kind)"},
    {"\"args\": [{\"kind\": \"argument\", \"index\": 5}",
     "\"argz\": [{\"kind\": \"argument\", \"index\": 5}",
     "launches[1].argz: unknown member (expected one of kernel, grid, "
     "stream, wait, record, args)"},
};

// Status outputs are counted from the launches that write them and named
// "status", "status_1", ...
TEST(GpuManifest, CountsTheRowStatusOutputs) {
  TempDir dir;
  dir.write("sm_90.ptx", "// not loaded");
  const std::string base = toyManifest();
  StatusOr<GpuManifest> none = GpuManifest::parse(base, dir.path());
  ASSERT_TRUE(none.ok()) << none.message();
  EXPECT_EQ(none->statusOutputs, 0);
  StatusOr<GpuManifest> m = GpuManifest::parse(
      edit(base, "{\"kind\": \"errors\"}", "{\"kind\": \"status\", \"index\": 2}"),
      dir.path());
  ASSERT_TRUE(m.ok()) << m.message();
  EXPECT_EQ(m->statusOutputs, 3);
  EXPECT_EQ(m->launches[0].args[8].kind, LaunchArgKind::Status);
  EXPECT_EQ(statusOutputName(0), "status");
  EXPECT_EQ(statusOutputName(2), "status_2");
  EXPECT_FALSE(m->layerArgument);
  // A layer launch argument makes the layer a run-time argument.
  StatusOr<GpuManifest> layered = GpuManifest::parse(
      edit(base, "{\"kind\": \"i32\", \"value\": 3}",
           "{\"kind\": \"layer\", \"value\": 3}"),
      dir.path());
  ASSERT_TRUE(layered.ok()) << layered.message();
  EXPECT_TRUE(layered->layerArgument);
  EXPECT_EQ(layered->launches[1].args[2].kind, LaunchArgKind::Layer);
  EXPECT_EQ(layered->launches[1].args[2].value, 3);
}

TEST(GpuManifest, NamesTheFieldOfEveryError) {
  TempDir dir;
  dir.write("sm_90.ptx", "// not loaded");
  const std::string base = toyManifest();
  ASSERT_TRUE(GpuManifest::parse(base, dir.path()).ok());
  for (const BadCase &c : kBadCases) {
    std::string text = edit(base, c.from, c.to);
    StatusOr<GpuManifest> m = GpuManifest::parse(text, dir.path());
    EXPECT_FALSE(m.ok()) << "accepted the edit '" << c.from << "' -> '" << c.to
                         << "'";
    EXPECT_EQ(m.message(), dir.path() + "/manifest.json: " + c.message)
        << "for the edit '" << c.from << "' -> '" << c.to << "'";
  }
}

TEST(GpuManifest, RejectsNonObjects) {
  EXPECT_EQ(GpuManifest::parse("[1]", "/a").message(),
            "/a/manifest.json: expected an object at the top level, got an "
            "array");
  EXPECT_EQ(GpuManifest::parse("", "/a").message(),
            "/a/manifest.json: JSON error at byte 0: unexpected end of input, "
            "expected a value");
}

TEST(GpuManifest, IgnoresExtraTopLevelMetadata) {
  TempDir dir;
  dir.write("sm_90.ptx", "// not loaded");
  std::string text =
      edit(toyManifest(), "\"version\": 1,",
           "\"version\": 1, \"created_by\": {\"tool\": \"spin-compile\"},");
  EXPECT_TRUE(GpuManifest::parse(text, dir.path()).ok());
}

/// A dense (stateless) program as spin-compile writes it: a state section
/// with no layers.
const char *kDenseManifest = R"({
  "format": "spin-gpu-artifact", "version": 1, "function": "dense",
  "ptx": {"sm_90a": "sm_90a.ptx"}, "batch": 2, "rows": 1,
  "state": {"layers": 0, "capacity": 0, "block_size": 0, "max_rows": 1},
  "arguments": [
    {"role": "input", "name": "x", "dtype": "bf16", "shape": [2, 1, 4]},
    {"role": "input", "name": "keys", "dtype": "fp8e4m3", "shape": [-1, 64, 4]},
    {"role": "output", "name": "topk", "dtype": "i32", "shape": [2, 1, 8]}
  ],
  "streams": 2, "events": 0,
  "kernels": [{"name": "k", "block": [128, 1, 1], "shared_bytes": 0}],
  "launches": [{"kernel": "k", "grid": [2, 1, 1], "stream": 0, "wait": [],
                "record": -1,
                "args": [{"kind": "argument", "index": 0},
                         {"kind": "argument", "index": 1},
                         {"kind": "dim", "argument": 1, "dim": 0},
                         {"kind": "argument", "index": 2},
                         {"kind": "errors"}]}]
})";

TEST(GpuManifest, ReadsStatelessPrograms) {
  TempDir dir;
  dir.write("sm_90a.ptx", "// not loaded");
  StatusOr<GpuManifest> m = GpuManifest::parse(kDenseManifest, dir.path());
  ASSERT_TRUE(m.ok()) << m.message();
  EXPECT_FALSE(m->state);
  EXPECT_FALSE(m->stateful());
  EXPECT_FALSE(m->commits());
  EXPECT_EQ(m->arguments.size(), 3u);
  EXPECT_EQ(m->arguments[1].dtype, DType::fp8e4m3);

  // Without layers the sizes only need to be non-negative integers.
  EXPECT_EQ(GpuManifest::parse(
                edit(kDenseManifest, "\"capacity\": 0", "\"capacity\": -1"),
                dir.path())
                .message(),
            dir.path() + "/manifest.json: state.capacity: -1 is outside [0, "
                         "2147483647]");
  // With layers they must be positive.
  EXPECT_EQ(
      GpuManifest::parse(edit(kDenseManifest, "\"layers\": 0", "\"layers\": 1"),
                         dir.path())
          .message(),
      dir.path() + "/manifest.json: state.capacity: 0 is outside [1, "
                   "2147483647]");
  // State arguments need layers.
  std::string stateful =
      edit(kDenseManifest, "\"arguments\": [",
           "\"arguments\": [{\"role\": \"state\", \"name\": \"v\", "
           "\"layer\": 0, \"dtype\": \"f32\", \"shape\": [-1, -1]}, ");
  EXPECT_EQ(GpuManifest::parse(stateful, dir.path()).message(),
            dir.path() + "/manifest.json: arguments[0]: state arguments need "
                         "the manifest's \"state\" section, with layers");
}

/// The tensor maps of the copying warpgroup's scoring kernel: a key cache
/// of 128-byte rows and its f32 scales, in boxes of `rows` rows of a page;
/// what has no tensor map is named.
TEST(GpuManifest, ReadsTensorMapParameters) {
  TempDir dir;
  dir.write("sm_90a.ptx", "// not loaded");
  std::string keys128 =
      edit(edit(kDenseManifest, "\"shape\": [-1, 64, 4]",
                "\"shape\": [-1, 64, 128]"),
           "{\"kind\": \"errors\"}",
           "{\"kind\": \"errors\"}, {\"kind\": \"tensor_map\", "
           "\"argument\": 1, \"rows\": 64}");
  StatusOr<GpuManifest> m = GpuManifest::parse(keys128, dir.path());
  ASSERT_TRUE(m.ok()) << m.message();
  const GpuLaunchArg &map = m->launches[0].args.back();
  EXPECT_EQ(map.kind, GpuLaunchArg::Kind::TensorMap);
  EXPECT_EQ(map.index, 1);
  EXPECT_EQ(map.value, 64);
  // What it reads it writes.
  StatusOr<GpuManifest> again =
      GpuManifest::parse(m->toJson(), dir.path());
  ASSERT_TRUE(again.ok()) << again.message();
  EXPECT_EQ(again->launches[0].args.back().value, 64);

  const std::string at = dir.path() + "/manifest.json: launches[0].args[5]";
  // Rows of 4 bytes (the manifest's keys) have no tensor map.
  EXPECT_EQ(GpuManifest::parse(edit(keys128, "[-1, 64, 128]", "[-1, 64, 4]"),
                               dir.path())
                .message(),
            at + ".argument: argument \"keys\" has no tensor map (it needs a "
                 "key cache [pages, page, 128] of a one-byte type or its "
                 "scales [pages, page] of f32)");
  EXPECT_EQ(GpuManifest::parse(edit(keys128, "\"rows\": 64", "\"rows\": 48"),
                               dir.path())
                .message(),
            at + ".rows: 48 does not divide the page size 64 of argument "
                 "\"keys\"");
  EXPECT_EQ(GpuManifest::parse(edit(keys128, "\"rows\": 64", "\"rows\": 0"),
                               dir.path())
                .message(),
            at + ".rows: 0 is outside [1, 256]");
  EXPECT_EQ(GpuManifest::parse(
                edit(keys128, "\"argument\": 1, \"rows\"",
                     "\"argument\": 3, \"rows\""),
                dir.path())
                .message(),
            at + ".argument: 3 is out of range: the step has 3 arguments");
  EXPECT_EQ(GpuManifest::parse(edit(keys128, "\"rows\": 64",
                                    "\"rows\": 64, \"dim\": 0"),
                               dir.path())
                .message(),
            at + ".dim: unknown member (expected one of kind, argument, rows)");
}

TEST(GpuManifest, PicksThePtxForTheDevice) {
  GpuManifest m;
  m.directory = "/art";
  m.ptx = {{"sm_90a", "a.ptx"}, {"sm_100a", "b.ptx"}, {"sm_103a", "c.ptx"}};
  EXPECT_EQ(*m.ptxFor(9, 0), "sm_90a");
  EXPECT_EQ(*m.ptxFor(10, 0), "sm_100a");
  EXPECT_EQ(*m.ptxFor(10, 3), "sm_103a");
  // Arch-specific PTX is not forward compatible.
  EXPECT_EQ(m.ptxFor(12, 0).message(),
            "/art/manifest.json has no PTX for this device (compute "
            "capability 12.0: sm_120a, or a portable sm_XY with XY <= 120); "
            "available: sm_90a, sm_100a, sm_103a");
  // A portable target is, up to the device's capability; the newest wins.
  m.ptx.emplace_back("sm_80", "p80.ptx");
  m.ptx.emplace_back("sm_90", "p90.ptx");
  m.ptx.emplace_back("sm_110", "p110.ptx");
  EXPECT_EQ(*m.ptxFor(9, 0), "sm_90a");
  EXPECT_EQ(*m.ptxFor(12, 0), "sm_110");
  EXPECT_EQ(*m.ptxFor(10, 1), "sm_90");
  EXPECT_EQ(*m.ptxFor(8, 9), "sm_80");
  EXPECT_FALSE(m.ptxFor(7, 5).ok());
}

} // namespace

//===----------------------------------------------------------------------===//
// Writing
//===----------------------------------------------------------------------===//

namespace {

/// Every field `parse` fills, compared one by one.
void expectSameManifest(const GpuManifest &a, const GpuManifest &b) {
  EXPECT_EQ(a.function, b.function);
  EXPECT_EQ(a.compilerVersion, b.compilerVersion);
  EXPECT_EQ(a.options, b.options);
  EXPECT_EQ(a.ptx, b.ptx);
  EXPECT_EQ(a.ptxVersion, b.ptxVersion);
  EXPECT_EQ(a.programmaticLaunch, b.programmaticLaunch);
  EXPECT_EQ(a.batch, b.batch);
  EXPECT_EQ(a.rows, b.rows);
  ASSERT_EQ(a.state.has_value(), b.state.has_value());
  if (a.state) {
    EXPECT_EQ(a.state->layers, b.state->layers);
    EXPECT_EQ(a.state->capacity, b.state->capacity);
    EXPECT_EQ(a.state->blockSize, b.state->blockSize);
    EXPECT_EQ(a.state->maxRows, b.state->maxRows);
  }
  ASSERT_EQ(a.arguments.size(), b.arguments.size());
  for (size_t i = 0; i < a.arguments.size(); ++i) {
    const ArgSpec &x = a.arguments[i], &y = b.arguments[i];
    EXPECT_EQ(x.role, y.role) << i;
    EXPECT_EQ(x.name, y.name) << i;
    EXPECT_EQ(x.layer, y.layer) << i;
    EXPECT_EQ(x.dtype, y.dtype) << i;
    EXPECT_EQ(x.shape, y.shape) << i;
    EXPECT_EQ(x.blockSize, y.blockSize) << i;
  }
  ASSERT_EQ(a.scratch.size(), b.scratch.size());
  for (size_t i = 0; i < a.scratch.size(); ++i) {
    EXPECT_EQ(a.scratch[i].name, b.scratch[i].name);
    EXPECT_EQ(a.scratch[i].bytes, b.scratch[i].bytes);
  }
  EXPECT_EQ(a.streams, b.streams);
  EXPECT_EQ(a.events, b.events);
  ASSERT_EQ(a.kernels.size(), b.kernels.size());
  for (size_t i = 0; i < a.kernels.size(); ++i) {
    EXPECT_EQ(a.kernels[i].name, b.kernels[i].name);
    EXPECT_EQ(a.kernels[i].block, b.kernels[i].block);
    EXPECT_EQ(a.kernels[i].sharedBytes, b.kernels[i].sharedBytes);
  }
  ASSERT_EQ(a.launches.size(), b.launches.size());
  for (size_t l = 0; l < a.launches.size(); ++l) {
    const GpuLaunchSpec &x = a.launches[l], &y = b.launches[l];
    EXPECT_EQ(x.kernel, y.kernel) << l;
    EXPECT_EQ(x.grid, y.grid) << l;
    EXPECT_EQ(x.stream, y.stream) << l;
    EXPECT_EQ(x.wait, y.wait) << l;
    EXPECT_EQ(x.record, y.record) << l;
    ASSERT_EQ(x.args.size(), y.args.size()) << l;
    for (size_t i = 0; i < x.args.size(); ++i) {
      EXPECT_EQ(x.args[i].kind, y.args[i].kind) << l << "." << i;
      EXPECT_EQ(x.args[i].index, y.args[i].index) << l << "." << i;
      EXPECT_EQ(x.args[i].dim, y.args[i].dim) << l << "." << i;
      EXPECT_EQ(x.args[i].value, y.args[i].value) << l << "." << i;
    }
  }
}

} // namespace

TEST(GpuManifest, WritesWhatItReads) {
  // The hand-written artifacts cover every launch-parameter kind, state and
  // observation fields, events and both streams: what toJson writes parses
  // back to the same manifest, and writing that again gives the same text.
  for (const char *name : {"toy_step", "toy_mtp"}) {
    std::string dir = inputsDir() + "/" + name;
    StatusOr<GpuManifest> read = GpuManifest::read(dir);
    ASSERT_TRUE(read.ok()) << read.message();
    std::string text = read->toJson();
    StatusOr<GpuManifest> again = GpuManifest::parse(text, dir);
    ASSERT_TRUE(again.ok()) << name << ": " << again.message() << "\n" << text;
    expectSameManifest(*read, *again);
    EXPECT_EQ(again->toJson(), text) << name;
  }
}

TEST(GpuManifest, ReadsAndWritesThePagedStateLayout) {
  // page_size is optional (0: the compact layout, not written); a paged
  // program's is read and written back.
  TempDir dir;
  dir.write("sm_90.ptx", "// not loaded");
  StatusOr<GpuManifest> compact = GpuManifest::parse(toyManifest(), dir.path());
  ASSERT_TRUE(compact.ok()) << compact.message();
  EXPECT_EQ(compact->state->pageSize, 0);
  EXPECT_EQ(compact->toJson().find("page_size"), std::string::npos);
  std::string text = edit(toyManifest(), "\"max_rows\": 1}",
                          "\"max_rows\": 1, \"page_size\": 4}");
  StatusOr<GpuManifest> paged = GpuManifest::parse(text, dir.path());
  ASSERT_TRUE(paged.ok()) << paged.message();
  EXPECT_EQ(paged->state->pageSize, 4);
  StatusOr<GpuManifest> again = GpuManifest::parse(paged->toJson(), dir.path());
  ASSERT_TRUE(again.ok()) << again.message();
  EXPECT_EQ(again->state->pageSize, 4);
}

TEST(GpuManifest, WritesStatelessProgramsWithoutAStateSection) {
  StatusOr<GpuManifest> m = GpuManifest::read(inputsDir() + "/toy_step");
  ASSERT_TRUE(m.ok()) << m.message();
  GpuManifest stateless = *m;
  stateless.state.reset();
  std::string text = stateless.toJson();
  EXPECT_EQ(text.find("\"state\": {"), std::string::npos) << text;
  EXPECT_NE(text.find("\"format\": \"spin-gpu-artifact\""), std::string::npos);
  // Without the section its state arguments are refused, by name.
  StatusOr<GpuManifest> back =
      GpuManifest::parse(text, inputsDir() + "/toy_step");
  ASSERT_FALSE(back.ok());
  EXPECT_NE(back.message().find("state arguments need the manifest's "
                                "\"state\" section"),
            std::string::npos)
      << back.message();
}

TEST(GpuManifest, WrittenStringsAreEscaped) {
  StatusOr<GpuManifest> m = GpuManifest::read(inputsDir() + "/toy_step");
  ASSERT_TRUE(m.ok()) << m.message();
  m->options.emplace_back("quote\"and\\slash", "tab\tnewline\n\x01");
  StatusOr<GpuManifest> back =
      GpuManifest::parse(m->toJson(), inputsDir() + "/toy_step");
  ASSERT_TRUE(back.ok()) << back.message();
  ASSERT_EQ(back->options.size(), m->options.size());
  EXPECT_EQ(back->options.back(), m->options.back());
}
