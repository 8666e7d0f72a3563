"""Fixtures of the Python API tests: the built package and the reference."""

import importlib.util
import os
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BUILD = os.environ.get("SPIN_BUILD_DIR", os.path.join(ROOT, "build"))
sys.path.insert(0, os.path.join(BUILD, "python"))
sys.path.insert(0, os.path.join(ROOT, "test", "reference"))


@pytest.fixture
def rng(request):
    """A fresh seeded generator per test; the seed is printed on failure."""
    seed = int(os.environ.get("SPIN_TEST_SEED", int.from_bytes(os.urandom(4), "little")))
    print(f"{request.node.name}: SPIN_TEST_SEED={seed}")
    return np.random.default_rng(seed)


@pytest.fixture(scope="session")
def bench_script():
    """Loads bench/NAME.py (the GPU machine's scripts, whose CPU-side logic
    the tests check) once per session: `bench_script("bench_gpu")`."""
    loaded = {}

    def load(name):
        if name not in loaded:
            spec = importlib.util.spec_from_file_location(
                name, os.path.join(ROOT, "bench", name + ".py"))
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            loaded[name] = module
        return loaded[name]

    return load


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "cuda: needs a CUDA device through torch (skipped when "
                   "torch.cuda.is_available() is False); select with -m cuda")
