//===- ReplayMain.cpp - run a fuzz target over files, without libFuzzer ---===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
// Links with a fuzz target's LLVMFuzzerTestOneInput so that any compiler
// (gcc included) can replay the in-tree corpora as a regression test: each
// argument is a file or a directory of files; a crash or sanitizer report
// fails the test, like it would under libFuzzer.
//
//===----------------------------------------------------------------------===//

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <dirent.h>
#include <fstream>
#include <iterator>
#include <string>
#include <sys/stat.h>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

namespace {

bool isDirectory(const std::string &path) {
  struct stat info;
  return ::stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
}

/// `path` itself, or the regular files in it (sorted, not recursive).
std::vector<std::string> filesOf(const std::string &path) {
  if (!isDirectory(path))
    return {path};
  std::vector<std::string> files;
  if (DIR *dir = ::opendir(path.c_str())) {
    while (const dirent *entry = ::readdir(dir)) {
      std::string name = entry->d_name;
      if (name != "." && name != ".." && !isDirectory(path + "/" + name))
        files.push_back(path + "/" + name);
    }
    ::closedir(dir);
  }
  std::sort(files.begin(), files.end());
  return files;
}

} // namespace

int main(int argc, char **argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s FILE_OR_DIR...\n", argv[0]);
    return 2;
  }
  size_t count = 0;
  for (int i = 1; i < argc; ++i) {
    for (const std::string &file : filesOf(argv[i])) {
      std::ifstream in(file, std::ios::binary);
      if (!in) {
        std::fprintf(stderr, "error: cannot read %s\n", file.c_str());
        return 1;
      }
      std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                                 std::istreambuf_iterator<char>());
      LLVMFuzzerTestOneInput(bytes.data(), bytes.size());
      ++count;
    }
  }
  std::printf("replayed %zu inputs\n", count);
  return count > 0 ? 0 : 1;
}
