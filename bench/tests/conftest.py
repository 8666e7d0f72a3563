"""Fixtures of the bench scripts' tests: the scripts' CPU-side logic, run
here without a GPU (the scripts themselves run on the GPU machine or, for
the artifact builders, on the build machine).

Run with:  /usr/bin/python3 -m pytest -q bench/tests
"""

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
    """Loads bench/NAME.py once per session: `bench_script("bench_gpu")`."""
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
