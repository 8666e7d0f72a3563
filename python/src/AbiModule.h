//===- AbiModule.h - the compiler-runtime contract for Python ----*- C++ -*-===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
//===----------------------------------------------------------------------===//

#ifndef SPIN_PYTHON_SRC_ABIMODULE_H
#define SPIN_PYTHON_SRC_ABIMODULE_H

#include <pybind11/pybind11.h>

namespace spin::python {

/// Adds the submodule `abi` to the extension `m`.
void bindAbi(pybind11::module_ &m);

} // namespace spin::python

#endif // SPIN_PYTHON_SRC_ABIMODULE_H
