//===- Status.cpp - error values of the spin runtime ----------------------===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
//===----------------------------------------------------------------------===//

#include "spin/Runtime/Status.h"

#include <cstdio>
#include <cstdlib>

namespace spin::runtime {

Status Status::error(std::string message) {
  Status status;
  status.isOk = false;
  status.text =
      message.empty() ? std::string("unknown error") : std::move(message);
  return status;
}

void detail::failedStatusOrAccess(const std::string &message) {
  std::fprintf(stderr, "spin runtime: value() of a failed StatusOr: %s\n",
               message.c_str());
  std::abort();
}

} // namespace spin::runtime
