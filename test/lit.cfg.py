# -*- Python -*-
"""lit configuration of the spin test suite."""

import os

import lit.formats
from lit.llvm import llvm_config
from lit.llvm.subst import ToolSubst

config.name = "SPIN"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir"]
config.excludes = ["CMakeLists.txt", "README.md", "lit.cfg.py", "lit.site.cfg.py", "Unit"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.spin_obj_root, "test")

config.substitutions.append(("%PATH%", config.environment["PATH"]))
config.substitutions.append(("%spin_src_root", config.spin_src_root))

# Captured FileCheck variables live only until the next CHECK-LABEL.
config.environment["FILECHECK_OPTS"] = "--enable-var-scope"

llvm_config.with_system_environment(["HOME", "INCLUDE", "LIB", "TMP", "TEMP"])
llvm_config.use_default_substitutions()

tool_dirs = [config.spin_tools_dir, config.llvm_tools_dir]
tools = ["spin-opt", "spin-compile", "not", "count", "mlir-runner"]
llvm_config.add_tool_substitutions(tools, tool_dirs)

# Execution tests (`*_runner.mlir`) link the runner utilities into the JIT.
config.substitutions.append((
    "%mlir_runner_utils",
    ",".join(os.path.join(config.llvm_lib_dir, name) for name in
             ("libmlir_runner_utils.so", "libmlir_c_runner_utils.so"))))

# PTX validation: `ptxas` from a CUDA toolkit (no GPU needed). Tests that run
# it say `REQUIRES: ptxas` and are skipped where there is none.
import shutil
ptxas = shutil.which("ptxas") or (
    "/usr/local/cuda/bin/ptxas" if os.path.exists("/usr/local/cuda/bin/ptxas")
    else None)
if ptxas:
    config.available_features.add("ptxas")
    config.substitutions.append(("%ptxas", ptxas))
