"""The GPU probes of bench/prototypes/ compile for sm_90a (they run only on
the GPU machine; this keeps them from rotting between runs). Skipped where
no CUDA compiler is installed."""

import os
import re
import shutil
import subprocess

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PROTOTYPES = os.path.join(os.path.dirname(HERE), "prototypes")
NVCC = shutil.which("nvcc") or (
    "/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else None)


@pytest.mark.skipif(NVCC is None, reason="no nvcc (CUDA toolkit) on this machine")
def test_ws_score_compiles_for_sm90a_with_no_spills_where_registers_allow(tmp_path):
    proc = subprocess.run(
        [NVCC, "-O3", "-std=c++17", "-gencode", "arch=compute_90a,code=sm_90a",
         "-Xptxas", "-v", "-c", os.path.join(PROTOTYPES, "ws_score.cu"),
         "-o", str(tmp_path / "ws_score.o")],
        capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    # ptxas -v: per kernel "Compiling entry function 'NAME'", then its spill line.
    kernels = re.findall(r"Compiling entry function '(\w+)'.*?\n.*?"
                         r"(\d+) bytes spill stores, (\d+) bytes spill loads",
                         proc.stderr, re.S)
    names = {name for name, _, _ in kernels}
    # cp.async copies: R in {1, 2, 4} with two multiplying warpgroups, R in
    # {1, 2} with three; the copy engine: the same with two, R in {1, 2}
    # with four.
    assert len(names) == 10, proc.stderr[-2000:]
    for name, stores, loads in kernels:
        # Two multiplying warpgroups (232 registers each), and one row with
        # four (104).
        if "ELi2EEv6Params" in name or name.startswith("_Z9tmaKernelILi1ELi4E"):
            assert (stores, loads) == ("0", "0"), name
    assert "wgmma.mma_async instructions are serialized" not in proc.stderr
