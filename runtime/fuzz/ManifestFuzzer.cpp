//===- ManifestFuzzer.cpp - fuzz the GPU manifest reader ------------------===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
// manifest.json comes from disk next to PTX that a server loads: any text
// must give a manifest or a Status, never a crash. Beyond "no crash", an
// accepted manifest must survive its own writer: toJson() parses back to the
// same text, so reading and writing agree on every field the fuzzer reaches.
//
//===----------------------------------------------------------------------===//

#include "spin/Runtime/GpuProgram.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unistd.h>

using namespace spin::runtime;

namespace {

/// An artifact directory holding empty PTX files for the chips the corpus
/// and the dictionary name, so that inputs get past the PTX existence check
/// into the argument, kernel and launch sections.
const std::string &artifactDirectory() {
  static const std::string directory = [] {
    char pattern[] = "/tmp/spin-fuzz-manifest-XXXXXX";
    const char *made = ::mkdtemp(pattern);
    if (!made) {
      std::perror("mkdtemp");
      std::abort();
    }
    for (const char *chip : {"sm_80", "sm_90", "sm_90a", "sm_100a", "sm_103a"}) {
      std::string path = std::string(made) + "/" + chip + ".ptx";
      if (FILE *f = std::fopen(path.c_str(), "w"))
        std::fclose(f);
    }
    return std::string(made);
  }();
  return directory;
}

[[noreturn]] void fail(const char *what, const std::string &detail) {
  std::fprintf(stderr, "manifest fuzzer: %s\n%s\n", what, detail.c_str());
  std::abort();
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string text(reinterpret_cast<const char *>(data), size);
  StatusOr<GpuManifest> manifest = GpuManifest::parse(text, artifactDirectory());
  if (!manifest.ok()) {
    if (manifest.message().empty())
      fail("an error without a message", text);
    return 0;
  }
  // Queries a loader makes on an accepted manifest.
  for (auto [major, minor] : {std::pair{8, 0}, {9, 0}, {10, 0}, {10, 3}, {12, 0}})
    (void)manifest->ptxFor(major, minor);
  (void)manifest->commits();
  (void)manifest->stateful();

  std::string written = manifest->toJson();
  StatusOr<GpuManifest> again = GpuManifest::parse(written, artifactDirectory());
  if (!again.ok())
    fail("toJson() of an accepted manifest is rejected", again.message());
  if (again->toJson() != written)
    fail("toJson() does not round-trip", written);
  return 0;
}
