"""The H200 correctness check's harness without a GPU: bench/gpu_artifacts.py
compiles some of its configurations, and bench/gpu_check.py --dry-run
--backend cpu runs their inputs through the compiled CPU path
(build/bin/spin-exec) against the numpy reference, with the comparisons the
GPU run makes. The long-row configurations are those whose top-K spans a
cluster of 7 or 8 CTAs on the GPU (two with tied scores); this keeps them (and
the check itself) valid between GPU runs."""

import os
import re
import subprocess
import sys

import numpy as np
import pytest

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # bench/tests -> root
_BUILD = os.environ.get("SPIN_BUILD_DIR", os.path.join(_ROOT, "build"))
_COMPILER = os.path.join(_BUILD, "bin", "spin-compile")
_EXEC = os.path.join(_BUILD, "bin", "spin-exec")

pytestmark = pytest.mark.skipif(
    not (os.path.exists(_COMPILER) and os.path.exists(_EXEC)),
    reason="needs build/bin/spin-compile and build/bin/spin-exec")


@pytest.mark.parametrize("only, count", [("long-", 7), ("mtp-bf16-h8-d64-p64-bs16-b3-k16-r3", 1),
                                         ("scores-dense-bf16", 1)])
def test_gpu_check_passes_on_the_cpu_path(tmp_path, rng, only, count):
    out = tmp_path / "gpu-artifacts"
    built = subprocess.run(
        [sys.executable, os.path.join(_ROOT, "bench", "gpu_artifacts.py"), "--out", str(out),
         "--compiler", _COMPILER, "--only", only],
        capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stdout + built.stderr
    # The CPU backend runs its own graph, so the artifacts' compilation is
    # checked here.
    assert "NOT compiled" not in built.stdout + built.stderr, built.stdout + built.stderr
    seed = int(rng.integers(2**31))
    checked = subprocess.run(
        [sys.executable, os.path.join(_ROOT, "bench", "gpu_check.py"), str(out), "--dry-run",
         "--backend", "cpu", "--spin-exec", _EXEC, "--seed", str(seed)],
        capture_output=True, text=True, timeout=600)
    log = checked.stdout + checked.stderr
    assert checked.returncode == 0, log[-6000:]
    assert len(re.findall(r"^\[ *\d+/\d+\] \S+: PASS", checked.stdout, re.M)) == count, log
    assert re.search(rf"^summary: {count} passed, 0 failed, 0 skipped", checked.stdout, re.M), log


def _gpu_check_module():
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "gpu_check_under_test", os.path.join(_ROOT, "bench", "gpu_check.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("scheme", ["exact", "noninteger"])
def test_returned_scores_are_compared_entry_by_entry(rng, scheme):
    """compare_scores (the check of graphs that return their scores) accepts
    the reference's scores and rejects a changed entry, a finite value past a
    row's length, a wrong shape and (noninteger) an error beyond the
    tolerance."""
    gc = _gpu_check_module()
    c = {"key_format": "fp8", "scheme": scheme}
    ref = rng.standard_normal((3, 2, 64)).astype(np.float32)
    ref[1, 0, 40:] = -np.inf
    where = lambda b, r: f"row {b},{r}"
    assert gc.compare_scores(c, where, ref, ref.copy()) == []
    bad = ref.copy()
    bad[1, 0, 50] = 0.0                     # past the length: must be -inf
    problems = gc.compare_scores(c, where, ref, bad)
    assert len(problems) == 1 and "row 1,0" in problems[0] and "[50]" in problems[0]
    scale = float(np.max(np.abs(ref[2, 1])))
    bad = ref.copy()
    bad[2, 1, 3] += 2e-3 * scale if scheme == "noninteger" else 2.0 ** -20 * scale
    assert len(gc.compare_scores(c, where, ref, bad)) == 1
    assert "shape" in gc.compare_scores(c, where, ref, ref[:, :, :32].copy())[0]
    if scheme == "noninteger":
        close = ref.copy()
        close[2, 1, 3] += 5e-4 * scale      # within fp8's 1e-3 of the row's largest
        assert gc.compare_scores(c, where, ref, close) == []
