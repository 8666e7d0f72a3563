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

} // namespace spin::runtime::testing

#endif // SPIN_RUNTIME_TEST_GPUTESTUTILS_H
