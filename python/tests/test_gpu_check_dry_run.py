"""The H200 correctness check's harness without a GPU: bench/gpu_artifacts.py
compiles some of its configurations, and bench/gpu_check.py --dry-run
--backend cpu runs their inputs through the compiled CPU path
(build/bin/spin-exec) against the numpy reference, with the comparisons the
GPU run makes. The long-row configurations are those whose top-K spans a
cluster of 4 or 8 CTAs on the GPU; this keeps them (and the check itself)
valid between GPU runs."""

import os
import re
import subprocess
import sys

import pytest

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_BUILD = os.environ.get("SPIN_BUILD_DIR", os.path.join(_ROOT, "build"))
_COMPILER = os.path.join(_BUILD, "bin", "spin-compile")
_EXEC = os.path.join(_BUILD, "bin", "spin-exec")

pytestmark = pytest.mark.skipif(
    not (os.path.exists(_COMPILER) and os.path.exists(_EXEC)),
    reason="needs build/bin/spin-compile and build/bin/spin-exec")


@pytest.mark.parametrize("only, count", [("long-", 4), ("mtp-bf16-h8-d64-p64-bs16-b3-k16-r3", 1)])
def test_gpu_check_passes_on_the_cpu_path(tmp_path, rng, only, count):
    out = tmp_path / "gpu-artifacts"
    built = subprocess.run(
        [sys.executable, os.path.join(_ROOT, "bench", "gpu_artifacts.py"), "--out", str(out),
         "--compiler", _COMPILER, "--only", only],
        capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stdout + built.stderr
    seed = int(rng.integers(2**31))
    checked = subprocess.run(
        [sys.executable, os.path.join(_ROOT, "bench", "gpu_check.py"), str(out), "--dry-run",
         "--backend", "cpu", "--spin-exec", _EXEC, "--seed", str(seed)],
        capture_output=True, text=True, timeout=600)
    log = checked.stdout + checked.stderr
    assert checked.returncode == 0, log[-6000:]
    assert len(re.findall(r"^\[ *\d+/\d+\] \S+: PASS", checked.stdout, re.M)) == count, log
    assert re.search(rf"^summary: {count} passed, 0 failed, 0 skipped", checked.stdout, re.M), log
