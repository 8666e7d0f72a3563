"""examples/multi_rank.py on two processes (issue 29): tensor-parallel
replicas compared bit for bit after every step through all_gather, and
data-parallel ranks each checked against the numpy reference. On the CPU
the ranks talk over gloo (CI); with two GPUs the same runs use NCCL, one GPU
per rank; with one GPU both ranks share it and talk over gloo."""

import os
import socket
import sys

import pytest

spin = pytest.importorskip("spin", reason="the spin extension is not built")
torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(ROOT, "examples")


def _example():
    # Imported by name: the spawned ranks unpickle its worker function.
    if EXAMPLES not in sys.path:
        sys.path.insert(0, EXAMPLES)
    import multi_rank
    return multi_rank


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


NEEDS_COMPILER = pytest.mark.skipif(not spin.has_compiler,
                                    reason="spin built without the compiler (the CPU path needs it)")
ONE_GPU = pytest.mark.skipif(not torch.cuda.is_available(),
                             reason="torch.cuda.is_available() is False")
# (device, one_gpu): the CPU over gloo; one GPU per rank over NCCL; both
# ranks on one GPU over gloo.
DEVICES = [pytest.param("cpu", False, id="cpu", marks=NEEDS_COMPILER),
           pytest.param("cuda", False, id="cuda", marks=[pytest.mark.cuda, pytest.mark.skipif(
               not (torch.cuda.is_available() and torch.cuda.device_count() >= 2),
               reason="needs two CUDA devices")]),
           pytest.param("cuda", True, id="one-gpu", marks=[pytest.mark.cuda, ONE_GPU])]


@pytest.fixture(autouse=True)
def _python_path(monkeypatch):
    # The spawned ranks import spin as this process does.
    import spin as module
    package_dir = os.path.dirname(os.path.dirname(module.__file__))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [package_dir, EXAMPLES] + [p for p in [os.environ.get("PYTHONPATH")] if p]))


@pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not available")
@pytest.mark.parametrize("device,one_gpu", DEVICES)
@pytest.mark.parametrize("mode", ["tp", "dp"])
def test_ranks_pass(mode, device, one_gpu):
    results = _example().launch(mode, device, ranks=2, steps=6, port=_free_port(),
                                one_gpu=one_gpu)
    assert [r for r, _, _ in results] == [0, 1]
    for rank, ok, message in results:
        assert ok, f"rank {rank}:\n{message}"


def test_one_gpu_is_refused_on_the_cpu():
    with pytest.raises(ValueError, match="one_gpu applies to device 'cuda' only"):
        _example().launch("tp", "cpu", one_gpu=True)


@pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not available")
@pytest.mark.parametrize("mode,needle,device,one_gpu", [
    pytest.param("tp", "differs from rank 0", "cpu", False, id="tp-cpu", marks=NEEDS_COMPILER),
    pytest.param("dp", "differed from the reference", "cpu", False, id="dp-cpu",
                 marks=NEEDS_COMPILER),
    pytest.param("tp", "differs from rank 0", "cuda", True, id="tp-one-gpu",
                 marks=[pytest.mark.cuda, ONE_GPU])])
def test_a_broken_run_is_caught(mode, needle, device, one_gpu):
    """The checks can fail: ranks exploring with different seeds (tp), a
    reference with another sparsity (dp)."""
    results = _example().launch(mode, device, ranks=2, steps=6, port=_free_port(), skew=1,
                                one_gpu=one_gpu)
    assert not all(ok for _, ok, _ in results)
    assert any(needle in message for _, ok, message in results if not ok), results
