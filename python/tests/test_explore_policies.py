"""The staleness-score and block-age exploration policies (docs/SPIN_SPEC.md
§7.1) through the compiled CPU path, on hand-computed cases: a SPIN step
on given dense scores (``replay.score_graph``) compiled with
``spin.compile``, its state's ``last_observed`` read after each step.

The differential tests against the numpy reference (test/python,
``test_age_policies*``) cover random inputs; these pin the behaviour the
spec promises to numbers worked out by hand."""

import math
import os
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "python", "spin"))

import replay  # noqa: E402

spin = pytest.importorskip("spin")
if not getattr(spin, "has_compiler", False):
    pytest.skip("spin was built without the compiler", allow_module_level=True)

BS, NB = 16, 10
NS = BS * NB
REQUEST = 5


def _program(policy, explore=0.25, sparsity=0.5, topk=16):
    text = replay.score_graph(0, 1, NS, topk, BS, sparsity, explore, 0, "max",
                              explore_policy=policy)
    return spin.compile(text, "score_layer", None)


def _state():
    st = spin.new_state(capacity_slots=NS, layers=1, max_requests=2, rows=1,
                        block_size=BS, last_observed=True)
    st.add(REQUEST)
    return st


def _step(program, state, block_scores, n=NS, p=NS - 1):
    """One step with every slot of block j scoring block_scores[j]; returns
    the blocks it scored, read back from last_observed (it + 1 there)."""
    z = np.repeat(np.asarray(block_scores, dtype=np.float32), BS)[None, None, :]
    it = state.iteration(REQUEST)
    program.run(state, scores=np.ascontiguousarray(z),
                lengths=np.array([[n]], np.int32), positions=np.array([[p]], np.int32),
                request_ids=np.array([REQUEST], np.int64))
    last = state.last_observed(REQUEST)
    assert state.iteration(REQUEST) == it + 1
    return set(int(j) for j in np.flatnonzero(last == it + 1))


# Ten 16-slot blocks, the query fixed at p = 159 (N = 160) so that the
# diagonal EMA follows the vertical one. Budget: m = max(ceil(16/16),
# ceil(0.5 * 10)) = 5, forced {0, 9}, e = floor(0.25 * 5) = 1, x = 2.
# With decay 0.5 the warm-up leaves V = z / 2 per block; blocks 1 and 2
# stay the exploit picks throughout.
Z_BLOCKS = [1, 10, 9, 1, 8, 7, 1, 1, 1, 1]


def _explored(policy, steps):
    program, state = _program(policy), _state()
    assert _step(program, state, Z_BLOCKS) == set(range(NB))     # warm-up
    explored = []
    for _ in range(steps):
        scored = _step(program, state, Z_BLOCKS)
        assert len(scored) == 5 and {0, 9, 1, 2} <= scored, scored
        (extra,) = scored - {0, 9, 1, 2}
        explored.append(extra)
    return explored, state


def test_block_age_explores_round_robin_by_hand():
    # it = 1: all ages 1 -> the lowest candidate (3); then every step the
    # oldest candidate, ties to the lower block: 4, 5, 6, 7, 8; at it = 7
    # block 3 (scored at it = 1, last = 2) is the oldest again.
    explored, state = _explored("block-age", 8)
    assert explored == [3, 4, 5, 6, 7, 8, 3, 4]
    # block 8 is never exploited: explored at the 6th sparse step, within
    # ceil((B - |F|) / e) = 8 <= ceil(B / e) = 10
    assert explored.index(8) + 1 <= math.ceil((NB - 2) / 1) <= math.ceil(NB / 1)
    assert state.last_observed(REQUEST).tolist() == [9, 9, 9, 8, 9, 4, 5, 6, 7, 9]


def test_staleness_score_by_hand():
    # Warm-up: V = [.5, 5, 4.5, .5, 4, 3.5, .5, .5, .5, .5], every last = 1.
    # it = 1, ages 1: key = S; block 4 (S = 4, an old high-score block)
    #   beats block 3 (S = .5, an old low-score block with the lower index).
    # it = 2: block 3: 2 * .5 = 1, block 4: 1 * 6 = 6, block 5: 2 * 3.5 = 7
    #   -> block 5: older beats the younger, higher-scored block 4.
    # it = 3: block 4: 2 * 6 = 12 -> 4; it = 4: block 5: 2 * 5.25 -> 5.
    explored, _ = _explored("staleness-score", 4)
    assert explored == [4, 5, 4, 5]
    # the same trace under block-age starts with block 3
    assert _explored("block-age", 1)[0] == [3]


@pytest.mark.parametrize("blocks,explore", [(10, 0.25), (16, 0.3), (23, 0.5), (12, 0.75)])
def test_block_age_reaches_every_block_the_exploit_leaves(blocks, explore):
    # The x exploited blocks score far above the rest, so the exploit always
    # takes them; every other block must be explored within
    # ceil(candidates / e) sparse steps, candidates = B - |F| - x (and so
    # within ceil(B / e)). (10, .25): m = 5, e = 1, x = 2; (16, .3): m = 8,
    # e = 2, x = 4; (23, .5): m = 12, e = 6, x = 4; (12, .75): m = 6, e = 4,
    # x = 0.
    rng = np.random.default_rng(blocks)
    ns = BS * blocks
    m = max(1, math.ceil(0.5 * blocks - 1e-9))
    e = min(math.floor(explore * m), m - 2)
    x = m - 2 - e
    assert e >= 1, "test bug: nothing to explore"
    scores = rng.uniform(0.0, 1.0, blocks)
    hot = 1 + rng.choice(blocks - 2, size=x, replace=False)
    scores[hot] = 100.0
    text = replay.score_graph(0, 1, ns, 16, BS, 0.5, explore, 0, "max",
                              explore_policy="block-age")
    program = spin.compile(text, "score_layer", None)
    state = spin.new_state(capacity_slots=ns, layers=1, max_requests=1, rows=1,
                           block_size=BS, last_observed=True)
    state.add(REQUEST)
    z = np.repeat(scores.astype(np.float32), BS)[None, None, :]
    first_seen = {}
    bound = math.ceil((blocks - 2 - x) / e)
    for step in range(bound + 1):
        it = state.iteration(REQUEST)
        program.run(state, scores=np.ascontiguousarray(z),
                    lengths=np.array([[ns]], np.int32),
                    positions=np.array([[ns - 1]], np.int32),
                    request_ids=np.array([REQUEST], np.int64))
        scored = np.flatnonzero(state.last_observed(REQUEST) == it + 1)
        if step == 0:
            continue  # warm-up
        assert set(hot.tolist()) <= set(scored.tolist())
        for j in scored:
            first_seen.setdefault(int(j), step)
    cold = [j for j in range(1, blocks - 1) if j not in hot]
    late = {j: first_seen.get(j) for j in cold if first_seen.get(j) is None}
    assert not late, f"blocks never explored within {bound} steps: {sorted(late)}"
    assert max(first_seen[j] for j in cold) <= bound <= math.ceil(blocks / e)


def test_last_observed_warm_up_growth_and_reset():
    program, state = _program("block-age"), _state()
    # warm-up over N = 100: 7 visible blocks, observed at it = 0 -> 1
    _step(program, state, Z_BLOCKS, n=100, p=99)
    assert state.last_observed(REQUEST).tolist() == [1] * 7 + [0] * 3
    # N = 150 (10 blocks): blocks 7 and 8 were never scored (age it + 1 = 2),
    # older than all others (age 1): e = 1 picks block 7; forced 0 and 9.
    scored = _step(program, state, Z_BLOCKS, n=150, p=149)
    assert {0, 7, 9} <= scored and 8 not in scored
    state.reset(REQUEST)
    assert state.last_observed(REQUEST).tolist() == [0] * NB
    assert state.iteration(REQUEST) == 0
    assert _step(program, state, Z_BLOCKS) == set(range(NB))  # warm-up again


def test_age_programs_need_a_state_with_last_observed():
    program = _program("staleness-score")
    plain = spin.new_state(capacity_slots=NS, layers=1, max_requests=1, rows=1,
                           block_size=BS)
    plain.add(REQUEST)
    z = np.zeros((1, 1, NS), np.float32)
    with pytest.raises(ValueError, match=r"explores by block age .* needs per-block "
                                         r"last_observed state on layer 0, but the state "
                                         r"pool was created without it"):
        program.run(plain, scores=z, lengths=np.array([[NS]], np.int32),
                    positions=np.array([[NS - 1]], np.int32),
                    request_ids=np.array([REQUEST], np.int64))
    assert plain.iteration(REQUEST) == 0        # refused before anything ran
    with pytest.raises(ValueError, match="keeps no last_observed"):
        plain.last_observed(REQUEST)


def test_indexer_explore_policy_option():
    with pytest.raises(ValueError, match=r"explore_policy must be one of \('random', "
                                         r"'staleness-score', 'block-age'\)"):
        spin.Indexer(heads=4, head_dim=16, block_size=16, topk=16, key_format="f32",
                     explore_policy="oldest")
    ix = spin.Indexer(heads=4, head_dim=16, block_size=16, topk=16, key_format="f32",
                      sparsity=0.5, explore=0.5, explore_policy="block-age")
    st = ix.new_state(capacity_slots=128, max_requests=2)
    assert st.has_last_observed
    assert not spin.Indexer(heads=4, head_dim=16, block_size=16, topk=16,
                            key_format="f32").new_state(128).has_last_observed
    plain = spin.new_state(capacity_slots=128, max_requests=2, block_size=16)
    rng = np.random.default_rng(0)
    args = (rng.standard_normal((1, 1, 4, 16), dtype=np.float32),
            rng.random((1, 1, 4), dtype=np.float32),
            rng.standard_normal((8, 16, 16), dtype=np.float32),
            np.arange(8, dtype=np.int32)[None, :], np.array([[100]], np.int32),
            np.array([[99]], np.int32))
    plain.add(1)
    with pytest.raises(ValueError, match="explore_policy 'block-age' needs a state that "
                                         "keeps last_observed"):
        ix(*args, plain, request_ids=np.array([1]))
    st.add(1)
    ix(*args, st, request_ids=np.array([1]))
    assert st.last_observed(1).tolist() == [1] * 7 + [0]   # warm-up, N = 100
    assert "explore_policy = #spin.explore_policy<block_age>" in ix.program(0, 8).graph_ir


def test_cuda_indexer_refuses_age_policies():
    # Decided before any device or cache is touched (chips given: no GPU
    # needed to get this far).
    for policy in ("staleness-score", "block-age"):
        with pytest.raises(ValueError, match=rf"explore_policy='{policy}' is not supported "
                                             r"on cuda \(the GPU path explores randomly "
                                             r"only\); use device='cpu'"):
            spin.Indexer(heads=8, head_dim=32, block_size=16, topk=16, key_format="bf16",
                         device="cuda", chips=["sm_90a"], explore=0.25,
                         explore_policy=policy)
