//===- GpuTestUtils.h - helpers of the GPU runtime tests --------*- C++ -*-===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
// Temporary artifact directories and the paths of the checked-in toy
// artifacts (runtime/test/Inputs/toy_step, toy_mtp: hand-written PTX).
//
//===----------------------------------------------------------------------===//

#ifndef SPIN_RUNTIME_TEST_GPUTESTUTILS_H
#define SPIN_RUNTIME_TEST_GPUTESTUTILS_H

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace spin::runtime::testing {

/// The directory of the checked-in test inputs.
inline std::string inputsDir() { return SPIN_TEST_INPUTS; }

/// A fresh directory under the system's temporary directory, removed with
/// everything in it when the object goes away.
class TempDir {
public:
  TempDir() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "spin-gpu-test-XXXXXX")
            .string();
    if (!::mkdtemp(pattern.data()))
      ADD_FAILURE() << "mkdtemp failed for " << pattern;
    dir = pattern;
  }
  TempDir(const TempDir &) = delete;
  TempDir &operator=(const TempDir &) = delete;
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
  }

  const std::string &path() const { return dir; }

  /// Writes `text` to `name` in the directory.
  void write(const std::string &name, const std::string &text) const {
    std::ofstream out(dir + "/" + name, std::ios::binary);
    out << text;
    ASSERT_TRUE(out.good()) << "cannot write " << dir << "/" << name;
  }

private:
  std::string dir;
};

/// The text of a file (empty if unreadable).
inline std::string readFile(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in),
                     std::istreambuf_iterator<char>());
}

/// The toy MTP artifact's manifest (Inputs/toy_mtp) with every observation
/// field of layer 1 bound, as compiled MTP programs bind them: after
/// `obs_rows`, with the pool's sizes left to run time (-1).
inline std::string toyMtpManifestWithObservations() {
  std::string text = readFile(inputsDir() + "/toy_mtp/manifest.json");
  auto replace = [&](const std::string &from, const std::string &to) {
    size_t at = text.find(from);
    if (at == std::string::npos)
      ADD_FAILURE() << "no '" << from << "' in toy_mtp/manifest.json";
    else
      text.replace(at, from.size(), to);
  };
  const std::string rows = "{\"role\": \"state\", \"name\": \"obs_rows\", "
                           "\"layer\": 1, \"dtype\": \"i32\", \"shape\": "
                           "[-1]},";
  replace(rows,
          rows +
              "\n{\"role\": \"state\", \"name\": \"obs_pos\", \"layer\": 1, "
              "\"dtype\": \"i32\", \"shape\": [-1, -1]},"
              "\n{\"role\": \"state\", \"name\": \"obs_len\", \"layer\": 1, "
              "\"dtype\": \"i32\", \"shape\": [-1, -1]},"
              "\n{\"role\": \"state\", \"name\": \"obs_mask\", \"layer\": 1, "
              "\"dtype\": \"i8\", \"shape\": [-1, -1]},"
              "\n{\"role\": \"state\", \"name\": \"obs_z\", \"layer\": 1, "
              "\"dtype\": \"f32\", \"shape\": [-1, -1, -1]},");
  // The output moved from argument 6 to 10.
  replace("{\"kind\": \"argument\", \"index\": 6}",
          "{\"kind\": \"argument\", \"index\": 10}");
  return text;
}

} // namespace spin::runtime::testing

#endif // SPIN_RUNTIME_TEST_GPUTESTUTILS_H
