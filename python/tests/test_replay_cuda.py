"""spin-replay --device cuda.

Everywhere: the errors (no CUDA device, a scores trace) and the prebuild of
the GPU programs into a cache directory (needs the compiler). On a GPU
(tests marked ``cuda``): the replay of python/tests/cuda_replay_cases.py's
traces (one row per step, and MTP) on the GPU against the CPU replay's
reports, which
python/tests/prebuild_cuda_cache.py stored in $SPIN_CACHE_DIR beside the
programs (the GPU machine's runtime-only build cannot compile or run the
CPU path).
"""

import json
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "python", "spin"))

import traces  # noqa: E402
import replay  # noqa: E402
import cuda_replay_cases as rc  # noqa: E402

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None
HAVE_CUDA = torch is not None and torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not HAVE_CUDA, reason="torch.cuda.is_available() is False")


def _has_compiler():
    try:
        import spin
        return bool(getattr(spin, "has_compiler", False))
    except ImportError:
        return False


needs_compiler = pytest.mark.skipif(not _has_compiler(),
                                    reason="spin was built without the compiler")


@pytest.mark.skipif(HAVE_CUDA, reason="checks the error without a CUDA device")
def test_cuda_replay_without_a_gpu_is_a_clear_error(tmp_path, capsys):
    trace = rc.make_trace(traces, str(tmp_path / "trace"))
    assert replay.main([trace, "--device", "cuda", "--sparsity", "0.5", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "--device cuda needs torch with a CUDA device" in err


def test_scores_trace_replays_on_the_cpu_only(tmp_path, capsys):
    trace = traces.generate(str(tmp_path / "scores"), layers=1, steps=4, batch=1,
                            context=64, heads=8, head_dim=32, topk=8, kind="scores")
    assert replay.main([trace, "--device", "cuda", "--quiet"]) == 2
    assert "a scores trace replays on the CPU only" in capsys.readouterr().err
    with pytest.raises(ValueError, match="scores trace replays on the CPU only"):
        replay.prebuild_cuda(trace, replay.configs([0.5]), ["sm_90a"], str(tmp_path / "c"))


def test_unknown_device_is_rejected(tmp_path):
    trace = rc.make_trace(traces, str(tmp_path / "trace"))
    with pytest.raises(ValueError, match="device must be 'cpu' or 'cuda'"):
        replay.replay(trace, replay.configs([0.5]), device="gpu")


@needs_compiler
@pytest.mark.parametrize("case", sorted(rc.CASES))
def test_prebuild_compiles_every_program_the_replay_needs(tmp_path, case):
    trace_dir = rc.make_trace(traces, str(tmp_path / "trace"), case)
    cache = tmp_path / "cache"
    replay.prebuild_cuda(trace_dir, rc.run_configs(replay, case), ["sm_90a"], str(cache),
                         seed=rc.SEED)
    programs = sorted(p for p in os.listdir(cache) if p.startswith("indexer-gpu-"))
    trace = traces.load_trace(trace_dir)
    sizes = replay._batch_sizes(trace)
    assert len(sizes) > 1  # joins and leaves: several batch sizes
    # (dense + one per configuration) x layers x batch sizes
    configs = len(rc.run_configs(replay, case))
    assert len(programs) == (1 + configs) * trace.header["layers"] * len(sizes)
    for p in programs:
        assert os.path.exists(os.path.join(cache, p, "sm_90a.ptx"))
    # A second prebuild finds them all.
    replay.prebuild_cuda(trace_dir, rc.run_configs(replay, case), ["sm_90a"], str(cache),
                         seed=rc.SEED)
    assert sorted(p for p in os.listdir(cache) if p.startswith("indexer-gpu-")) == programs


@pytest.mark.cuda
@needs_cuda
@pytest.mark.parametrize("case", sorted(rc.CASES))
def test_cuda_replay_matches_the_cpu_replay(tmp_path, case):
    cache = os.environ.get("SPIN_CACHE_DIR")
    if not cache or not os.path.exists(rc.cpu_report_path(cache, case)):
        pytest.fail("SPIN_CACHE_DIR must hold the programs and the CPU report written by "
                    "python/tests/prebuild_cuda_cache.py")
    with open(rc.cpu_report_path(cache, case)) as f:
        cpu = json.load(f)
    trace_dir = rc.make_trace(traces, str(tmp_path / "trace"), case)
    gpu = replay.replay(trace_dir, rc.run_configs(replay, case), seed=rc.SEED,
                        diagnostics=False, device="cuda", cache_dir=cache)
    assert gpu["device"] == "cuda" and cpu["device"] == "cpu"
    assert len(gpu["runs"]) == len(cpu["runs"]) == len(rc.run_configs(replay, case))
    for g, c in zip(gpu["runs"], cpu["runs"]):
        assert g["config"] == c["config"]
        go, co = g["overall"], c["overall"]
        # The same rows are sparse rows; selections follow scores that differ
        # from the CPU's only in f32 summation order, so the statistics agree
        # to within a near-tie or two.
        assert go["rows"] == co["rows"] > 0
        assert abs(go["sparsity"] - co["sparsity"]) <= 0.02
        assert abs(go["miss_mean"] - co["miss_mean"]) <= 0.02
    assert replay.format_report(gpu)  # renders
