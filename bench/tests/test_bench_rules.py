"""bench/bench_gpu.py takes SPIN's block budget from the runtime's rule
(spin.abi.block_budget); it must agree with the independent numpy
reference on fresh random shapes and on the budget's edge cases."""

import pytest

spin_reference = pytest.importorskip("spin_reference")


def test_expected_sparsity_is_the_reference_budget(bench_script, rng):
    pytest.importorskip("spin")
    bench = bench_script("bench_gpu")
    page = bench.PAGE
    cases = [(page, 16, 0.5), (10 * page, 64, 0.7), (3 * page, 8 * page, 0.9),
             (3 * page + 1, 16, 1.0 / 3.0), (page * 1000, 2048, 0.0), (page * 7, 1, 1.0)]
    cases += [(int(rng.integers(1, 4096)) * page - int(rng.integers(0, page)),
               int(rng.integers(1, 4096)), float(rng.random())) for _ in range(200)]
    for slots, k, rho in cases:
        blocks = -(-slots // page)
        m = spin_reference.budget(blocks, k, page, rho)
        assert bench.expected_sparsity(slots, k, rho) == 1.0 - m / blocks, (slots, k, rho)
