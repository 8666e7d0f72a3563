// spin-opt registers the spin dialect and the upstream dialects the project
// uses, and reports unparsable input with a diagnostic and a failing exit code.
// RUN: spin-opt --help | FileCheck %s --check-prefix=HELP
// RUN: not spin-opt %s --split-input-file 2>&1 | FileCheck %s --check-prefix=ERR

// HELP: Available Dialects: {{.*}}arith{{.*}}func{{.*}}linalg{{.*}}spin{{.*}}tensor

// ERR: error: unregistered operation 'spin.not_an_op' found in dialect ('spin')
func.func @unknown_op() {
  "spin.not_an_op"() : () -> ()
  return
}

// -----

// ERR: error: unknown  type `not_a_type` in dialect `spin`
func.func @unknown_type(%x: !spin.not_a_type) {
  return
}
