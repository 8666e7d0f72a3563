"""pytest fixtures of the spin-exec differential suite.

Run with:  /usr/bin/python3 -m pytest -q test/python

* ``spin_exec``: path of ``$SPIN_BUILD_DIR/bin/spin-exec`` (default build
  dir /work/main/build); every test that needs it is skipped, with the
  reason, when it is missing.
* ``seed``: a fresh random seed per test (from os.urandom), printed and
  included in every assertion message; set ``SPIN_TEST_SEED`` to replay one,
  e.g. ``SPIN_TEST_SEED=1234 /usr/bin/python3 -m pytest test/python -k NAME``.
"""

import os
import sys

import numpy as np
import pytest

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

import trace_io  # noqa: E402


@pytest.fixture(scope="session")
def spin_exec():
    exe = trace_io.find_spin_exec()
    if exe is None:
        pytest.skip("spin-exec not found at %s (set SPIN_BUILD_DIR to the build "
                    "directory that holds bin/spin-exec)"
                    % trace_io.spin_exec_path())
    return exe


@pytest.fixture
def seed(request):
    env = os.environ.get("SPIN_TEST_SEED")
    if env is not None and env.strip() != "":
        value = int(env, 0)
    else:
        value = int.from_bytes(os.urandom(8), "little") >> 1
    print("SPIN_TEST_SEED=%d  (%s)" % (value, request.node.nodeid))
    request.node.user_properties.append(("SPIN_TEST_SEED", value))
    return value


@pytest.fixture
def rng(seed):
    """numpy Generator seeded from ``seed``."""
    return np.random.default_rng(seed)
