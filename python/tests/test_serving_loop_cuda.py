"""examples/serving_loop.py: an engine's decode loop with one CUDA graph per
batch bucket replayed for changing batches (docs/Serving.md).

Without a GPU (CI): the loop's scheduler keeps its invariants over
thousands of steps; Indexer(reset_input=True) takes reset flags on the CPU
with state.reset's semantics; the loop's programs compile with reset flags.

On a GPU (``-m cuda``): the example's --check run over 1000 graph replays
(SPIN_SERVING_STEPS; SPIN_SERVING_ARGS adds options) for each of its
checked configurations: every step's
top-K of the graphs and of eager steps equals the numpy reference, and no
step synchronises with the host.
"""

import os
import re
import sys

import numpy as np
import pytest

spin = pytest.importorskip("spin", reason="the spin extension is not built")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "examples"))
import serving_loop  # noqa: E402

from cuda_test_support import cuda, needs_compiler, needs_cuda  # noqa: E402

needs_compiler = needs_compiler(spin)


def test_the_scheduler_moves_requests_through_every_bucket():
    """Per step: the bucket holds the rows, rows and slots are distinct, a
    request's reset flag is set exactly at its first step in a slot and at
    new turns, lengths stay within the capacity; over the run every bucket
    is used, requests sit steps out, arrive, finish and start new turns."""
    shape = serving_loop.Shape()
    rows = 3
    s = serving_loop.Scheduler(shape, rows, serving_loop.BUCKETS, seed=5)
    used, sat_out, slot_of = set(), 0, {}
    for step in range(3000):
        plan = s.plan(step)
        assert plan.bucket in serving_loop.BUCKETS and len(plan.rows) <= plan.bucket
        assert all(0 <= r < plan.bucket for r in plan.rows)
        slots = [slot for slot, _, _ in plan.rows.values()]
        assert len(set(slots)) == len(slots)
        admitted = {slot for slot, _, _ in plan.admitted}
        for slot, fresh, request in plan.rows.values():
            first = slot_of.get(request) != slot
            assert not first or fresh, f"step {step}: request {request} new in slot {slot}"
            assert slot not in admitted or fresh
            slot_of[request] = slot
        for slot, n, table in plan.admitted:
            assert 1 <= n < shape.capacity
            assert len(set(table.tolist())) == shape.max_pages
        # A stepped row's lengths reach at most its bound before the step
        # (now bound - rows) plus rows - 1.
        assert all(s.live[request]["bound"] - 1 <= shape.capacity
                   for _, _, request in plan.rows.values())
        used.add(plan.bucket)
        sat_out += len(s.live) - len(plan.rows)
    assert used == set(serving_loop.BUCKETS)
    assert sat_out > 0 and s.admissions > 100 and s.turns > 10


def test_the_scheduler_gives_each_request_private_state_pages():
    """--paged: a stepped row's state table names distinct pages of the
    pool, enough for its longest row (its bound before the step plus rows -
    1), -1 past them; no page belongs to two live requests; pages come back
    when a request finishes and are handed out again (stale state); the
    pool's size bounds what is in use, and a request waits when it runs
    out."""
    shape = serving_loop.Shape()
    rows = 2
    s = serving_loop.Scheduler(shape, rows, serving_loop.BUCKETS, seed=9, paged=True)
    owner, reused = {}, 0
    for step in range(3000):
        plan = s.plan(step)
        assert set(plan.state_tables) == set(plan.rows)
        for row, table in plan.state_tables.items():
            request = plan.rows[row][2]
            pages = [int(p) for p in table if p >= 0]
            assert table.tolist() == pages + [-1] * (shape.max_pages - len(pages))
            assert len(set(pages)) == len(pages)
            assert all(0 <= p < shape.state_pages for p in pages)
            longest = s.live[request]["bound"] - rows + rows - 1
            assert len(pages) * shape.page >= min(longest, shape.capacity)
            for p in pages:
                if owner.get(p) not in (None, request):
                    assert owner[p] not in s.live, f"page {p} shared by live requests"
                    reused += 1
                owner[p] = request
        in_use = sum(len(v.get("pages", [])) for v in s.live.values())
        assert in_use + len(s.free_pages) == shape.state_pages
    assert reused > 100 and 0 < s.pages_peak <= shape.state_pages


@needs_compiler
def test_reset_flags_on_the_cpu_equal_state_reset(rng):
    """A reset_input Indexer's reset flags restart exactly the flagged rows,
    as state.reset does for a plain Indexer."""
    H, D, S, K, MB = 4, 16, 16, 24, 8
    common = dict(heads=H, head_dim=D, block_size=S, topk=K, sparsity=0.5, explore=0.25,
                  seed=3, key_format="f32")
    flagged = spin.Indexer(reset_input=True, **common)
    plain = spin.Indexer(**common)
    states = [ix.new_state(capacity_slots=MB * S, max_requests=2) for ix in (flagged, plain)]
    for st in states:
        st.add(10), st.add(11)
    keys = rng.integers(-3, 4, size=(32, S, D)).astype(np.float32)
    table = np.stack([rng.permutation(32)[:MB] for _ in range(2)]).astype(np.int32)
    ids = np.array([10, 11], np.int64)
    for step in range(6):
        q = rng.integers(-3, 4, size=(2, 1, H, D)).astype(np.float32)
        w = rng.integers(-2, 3, size=(2, 1, H)).astype(np.float32)
        n = np.array([[60 + step], [90 + step]], np.int32)
        reset = np.array([step == 4, step == 2])
        for request, flag in zip((10, 11), reset):
            if flag:
                states[1].reset(request)
        args = (q, w, keys, table, n, n - 1)
        got = flagged(*args, states[0], request_ids=ids, reset=reset)
        want = plain(*args, states[1], request_ids=ids)
        np.testing.assert_array_equal(got, want, err_msg=f"step {step}")
    assert states[0].iteration(10) == states[1].iteration(10) == 2
    assert states[0].iteration(11) == 4
    with pytest.raises(ValueError, match="reset_input=True"):
        plain(*args, states[1], request_ids=ids, reset=reset)
    with pytest.raises(ValueError, match="dense indexer"):
        spin.Indexer(dense=True, reset_input=True, **common)
    with pytest.raises(TypeError, match="reset_input must be a bool"):
        spin.Indexer(reset_input=1, **common)


@needs_compiler
@pytest.mark.parametrize("queries,dtype", [("bf16", "bf16"), ("fp8", "fp8e4m3")])
def test_the_loop_programs_take_slots_and_reset_flags(tmp_path, queries, dtype):
    """The loop's programs (two buckets here) are device-batch programs with
    reset flags, taking the queries in the format asked for; the cache's
    prebuild command names reset_input (and fp8 queries)."""
    from spin import cache
    indexer = serving_loop.make_indexer(2, 1, "max", buckets=(1, 2), chips=["sm_90a"],
                                        cache_dir=str(tmp_path), queries=queries)
    for batch in (1, 2):
        manifest = spin.read_manifest(indexer.artifact(0, serving_loop.Shape().max_pages, batch))
        roles = {a["role"]: a for a in manifest["arguments"]}
        assert roles["slots"]["dtype"] == "i32" and "accepted" in roles
        assert roles["reset"]["shape"] == [batch]
        q = [a for a in manifest["arguments"] if a["name"] == "q"]
        assert [a["shape"][0] for a in q] == [batch] and q[0]["dtype"] == dtype
    command = cache.prebuild_command(indexer, 1, 8, [1, 2], ["sm_90a"], str(tmp_path))
    assert "--reset-input" in command.split()
    assert (re.search(r"--query-format[ =]fp8\b", command) is not None) == (queries == "fp8")


def test_the_loop_refuses_an_unknown_query_format():
    with pytest.raises(SystemExit):
        serving_loop.main(["--queries", "f16"])


@cuda
@needs_cuda
@pytest.mark.parametrize("rows,layers,pooling,queries", serving_loop.CHECKED)
def test_the_serving_loop_matches_the_reference_without_host_syncs(rows, layers, pooling,
                                                                   queries):
    steps = os.environ.get("SPIN_SERVING_STEPS", "1000")
    extra = os.environ.get("SPIN_SERVING_ARGS", "").split()  # e.g. --sleep-every 0
    assert serving_loop.main(["--rows", str(rows), "--layers", str(layers),
                              "--pooling", pooling, "--queries", queries, "--steps", steps,
                              "--check"] + extra) == 0


@cuda
@needs_cuda
@pytest.mark.parametrize("rows,layers,pooling,queries", serving_loop.CHECKED_PAGED)
def test_the_serving_loop_on_paged_state_matches_the_reference(rows, layers, pooling,
                                                              queries):
    """The same loop with state pages that follow the KV pages: scattered in
    a shared pool that starts as garbage, reused after requests finish,
    table entries past a request's pages -1; MTP with one draft on fp8
    queries."""
    steps = os.environ.get("SPIN_SERVING_STEPS", "1000")
    extra = os.environ.get("SPIN_SERVING_ARGS", "").split()
    assert serving_loop.main(["--rows", str(rows), "--layers", str(layers),
                              "--pooling", pooling, "--queries", queries, "--steps", steps,
                              "--check", "--paged"] + extra) == 0


def test_shared_workspaces_are_for_cuda():
    with pytest.raises(ValueError, match="shared_workspace is for cuda"):
        spin.Indexer(device="cpu", shared_workspace=True)
    with pytest.raises(TypeError, match="shared_workspace must be a bool"):
        spin.Indexer(device="cpu", shared_workspace="yes")


@cuda
@needs_cuda
def test_the_buckets_share_one_workspace():
    """The loop's Indexer (shared_workspace=True): loading the smallest
    bucket's program loads the larger ones first, and all seven programs
    then hold exactly the scratch buffers of the largest alone (same count,
    same bytes); loading smallest first instead makes new, larger buffers
    (the workspace keeps the latest of each name, the small program its
    own). The steps themselves are checked by the --check runs above, which
    use this Indexer."""
    rows, layers, pooling, queries = serving_loop.CHECKED[0]
    indexer = serving_loop.make_indexer(rows, layers, pooling, queries=queries)
    shape = serving_loop.Shape()
    buckets = sorted(serving_loop.BUCKETS)
    workspace = indexer.workspace()
    assert isinstance(workspace, spin.CudaWorkspace) and workspace.buffers == 0
    indexer.program(0, shape.max_pages, buckets[0])
    assert all((0, shape.max_pages, b, workspace.device.index) in indexer._programs
               for b in buckets)
    largest = spin.CudaWorkspace()
    spin.load(indexer.artifact(0, shape.max_pages, buckets[-1]), workspace=largest)
    assert largest.buffers > 0
    assert (workspace.buffers, workspace.bytes) == (largest.buffers, largest.bytes)
    upward = spin.CudaWorkspace()
    small = spin.load(indexer.artifact(0, shape.max_pages, buckets[0]), workspace=upward)
    first = upward.bytes
    spin.load(indexer.artifact(0, shape.max_pages, buckets[-1]), workspace=upward)
    assert first < upward.bytes <= largest.bytes and upward.buffers == largest.buffers
    assert small is not None
    with pytest.raises(TypeError, match="workspace must be a spin.CudaWorkspace"):
        spin.load(indexer.artifact(0, shape.max_pages, buckets[0]), workspace=object())
