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


@pytest.mark.parametrize("only, count", [("long-", 16), ("mtp-bf16-h8-d64-p64-bs16-b3-k16-r3", 1),
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


def test_multilayer_gpu_check_passes_on_ref_and_cpu(tmp_path, rng):
    """The multi-layer configurations (ml3-*: 3 layers launching shared
    kernels) compile, their manifests pass gpu_artifacts.py's checks (kernels
    shared, the layer passed to the select kernel), and every layer's results
    and state match the reference on both dry-run backends: the reference
    itself, and (spin-exec running one layer) the whole graph on the spin
    package's CPU path."""
    out = tmp_path / "gpu-artifacts"
    built = subprocess.run(
        [sys.executable, os.path.join(_ROOT, "bench", "gpu_artifacts.py"), "--out", str(out),
         "--compiler", _COMPILER, "--only", "ml3-"],
        capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stdout + built.stderr
    assert "NOT compiled" not in built.stdout + built.stderr, built.stdout + built.stderr
    seed = int(rng.integers(2**31))
    for backend in ("ref", "cpu"):
        checked = subprocess.run(
            [sys.executable, os.path.join(_ROOT, "bench", "gpu_check.py"), str(out),
             "--dry-run", "--backend", backend, "--spin-exec", _EXEC, "--seed", str(seed)],
            capture_output=True, text=True, timeout=600)
        log = checked.stdout + checked.stderr
        assert checked.returncode == 0, log[-6000:]
        passed = re.findall(r"^\[ *\d+/\d+\] ml3-\S+: PASS \(.*3 layers", checked.stdout, re.M)
        assert len(passed) == 3, log
        assert re.search(r"^summary: 3 passed, 0 failed, 0 skipped", checked.stdout, re.M), log


def _gpu_artifacts_module():
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "gpu_artifacts_under_test", os.path.join(_ROOT, "bench", "gpu_artifacts.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _multilayer_config(name_part):
    c = next(c for c in _gpu_artifacts_module().all_configs() if c["name"].startswith("ml3-")
             and name_part in c["name"])
    return dict(c, function="indexer")


@pytest.mark.parametrize("name_part", ["ml3-spin-fp8", "ml3-mtp"])
def test_multilayer_check_catches_a_wrong_layer_in_the_hash(rng, monkeypatch, name_part):
    """A device whose select hashes layer 0 for every layer fails the check
    in the other layers (the last of which has layer 0's inputs), and passes
    in layer 0; without exploration the check says the configuration does
    not test the layer."""
    gc = _gpu_check_module()
    c = _multilayer_config(name_part)
    plan = gc.make_plan(c, np.random.default_rng(int(rng.integers(2**31))))
    ref = gc.run_reference(plan)
    assert gc.compare(plan, ref, gc.RefBackend().run(plan, None)) == []

    real = gc.sr.spin_step
    monkeypatch.setattr(gc.sr, "spin_step",
                        lambda states, rids, layer, *a, **kw: real(states, rids, 0, *a, **kw))
    wrong = gc.run_reference(plan)
    monkeypatch.undo()
    problems = gc.compare(plan, ref, wrong)
    assert problems, "a wrong layer in the exploration hash went unnoticed"
    assert not any(p.startswith("layer 0:") for p in problems), problems
    assert any(p.startswith(f"layer {c['layers'] - 1}:") for p in problems), problems

    quiet = dict(c, explore=0.0)
    plan = gc.make_plan(quiet, np.random.default_rng(1))
    problems = gc.compare(plan, gc.run_reference(plan), gc.run_reference(plan))
    assert len(problems) == 1 and "test bug" in problems[0], problems


def test_multilayer_torch_backend_plumbing(tmp_path, rng):
    """TorchBackend.run (the H200 path) binds every layer's inputs by name,
    reads every layer's outputs and state: here with numpy arrays for CUDA
    tensors and the spin package's CPU program for the loaded artifact."""
    gc = _gpu_check_module()
    import types
    import spin

    ga = _gpu_artifacts_module()
    c = _multilayer_config("ml3-mtp")

    class Result:
        def __init__(self, a):
            self.a = a

        def cpu(self):
            return self

        def numpy(self):
            return self.a

    class FakeProgram:
        chip = "sm_90a"

        def __init__(self):
            options = {"sparsity": c["sparsity"], "block_size": c["block_size"],
                       "ema_decay": c["ema_decay"], "explore": c["explore"],
                       "seed": c["seed"], "pooling": c["pooling"],
                       "reset_input": c["reset_input"], "mtp_mask": c["mtp_mask"],
                       "mtp_update": c["mtp_update"]}
            self.program = spin.compile(ga.graph_text(c), "indexer", options)

        def new_state(self, slots):
            return spin.new_state(c["capacity"], layers=c["layers"], max_requests=slots,
                                  rows=c["rows"], block_size=c["block_size"])

        def __call__(self, inputs, state, request_ids):
            assert list(request_ids) == inputs["request_ids"].tolist()
            return {k: Result(v) for k, v in self.program.run(state, **inputs).items()}

        def check(self):
            pass

    backend = object.__new__(gc.TorchBackend)
    backend.torch = types.SimpleNamespace(
        cuda=types.SimpleNamespace(synchronize=lambda device: None))
    backend.spin = types.SimpleNamespace(load=lambda art_dir, device: FakeProgram())
    backend.device = None
    backend.tensor = lambda array, fmt=None: np.ascontiguousarray(array)
    plan = gc.make_plan(c, np.random.default_rng(int(rng.integers(2**31))))
    dev = backend.run(plan, str(tmp_path))
    assert len(dev.layers) == c["layers"] and all(d.states for d in dev.layers)
    assert gc.compare(plan, gc.run_reference(plan), dev) == []


def test_a_noninteger_selection_that_flips_at_a_near_tie_is_not_a_failure():
    """Noninteger SPIN runs: where the reference's selection had two blocks
    at its boundary whose predicted scores agree to the scores' tolerance
    (seed 415534905 gives one at step 2 of this configuration, where the
    H200's e4m3 wgmma picked the other block), a different top-K of that
    request is noted and the request left out from then on; the same
    change where the boundary is clear is still a failure."""
    gc = _gpu_check_module()
    sys.path.insert(0, os.path.join(_ROOT, "bench"))
    import copy
    import gpu_artifacts
    name = "nonint-mtp-fp8-h64-d128-p64-bs64-b3-k512-r4-sp0.5-top4-row0-qfp8"
    (c,) = [x for x in gpu_artifacts.all_configs() if x["name"] == name]
    plan = gc.make_plan(c, np.random.default_rng(gc.config_seed(415534905, name)))
    ref = gc.run_reference(plan)
    limit = gc.FP8_QUERY_ROW_REL
    ties = [(t, rid) for t, gaps in enumerate(ref.gaps) for rid, g in gaps.items() if g <= limit]
    clear = [(t, rid) for t, gaps in enumerate(ref.gaps) for rid, g in gaps.items()
             if limit < g < float("inf")]
    assert ties and clear, (ties, clear)

    def device_with_row0_shifted(t, rid):
        dev = copy.deepcopy(ref)
        dev.gaps = []
        idx, sp, err = dev.steps[t]
        b = list(plan.steps[t].rids).index(rid)
        idx = idx.copy()
        idx[b, 0, :-1] = idx[b, 0, 1:].copy()   # the best slot's block not selected
        dev.steps[t] = (idx, sp, err)
        return dev

    assert gc.compare(plan, ref, copy.deepcopy(ref)) == []
    t, rid = ties[0]
    dev = device_with_row0_shifted(t, rid)
    assert gc.compare(plan, ref, dev) == []
    assert f"request {rid} selected another block at a near-tie" in dev.note
    t, rid = clear[0]
    problems = gc.compare(plan, ref, device_with_row0_shifted(t, rid))
    assert problems and f"request {rid}" in problems[0], problems
