"""Fixtures of the Python API tests: the built package and the reference."""

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


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "cuda: needs a CUDA device through torch (skipped when "
                   "torch.cuda.is_available() is False); select with -m cuda")
