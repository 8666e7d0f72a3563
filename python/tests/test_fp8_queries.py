"""fp8 e4m3 queries on the CPU path (``spin.Indexer(key_format="fp8",
query_format="fp8")`` and graphs with f8E4M3FN queries) against the
independent numpy reference (test/reference/spin_reference.py,
``q_format="fp8"``), on fresh random inputs (the ``rng`` fixture prints its
seed; replay with ``SPIN_TEST_SEED``).

SPIN_SPEC §1: fp8 e4m3 queries are taken only with fp8 e4m3 keys, with their
exact values (the caller folds a query scale into ``w``); products and sums
in f32. The comparisons follow the differential tests (test/python,
bench/gpu_check.py):

* exact inputs -- every f32 operation exact -- compare top-K indices, scores
  and the SPIN state bit for bit, sparsity to 1e-6. Two schemes: small
  integers (q and keys in [-4, 4], -0.0 included, w multiples of 1/4,
  power-of-two scales), and the whole e4m3 range (every finite pattern:
  +-448, subnormals, -0.0) with one nonzero query element per head and one
  nonzero weight per row, so that each score is one product of two fp8
  values (exact in f32) times a power of two;
* noninteger inputs (the whole e4m3 range everywhere, float w and scales):
  scores to 1e-5 of the row's largest |score|, and a top-K may differ from
  the reference's only where the reference's scores of the two differing
  slots agree to 1e-5 relative (floor 1e-7 of the row's largest |score|);
* NaN query patterns (0x7F, 0xFF) make every visible score of their row NaN
  (the ReLU and the head sum propagate NaN), which is never selected and
  never enters the state, and change no other request's outputs.

Plus the argument errors of fp8 queries (they name the offending value) and
the defaults, which are unchanged.
"""

import os
import shlex

import numpy as np
import pytest

spin = pytest.importorskip("spin", reason="the spin extension is not built")
import spin_reference as ref  # noqa: E402

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None

if not spin.has_compiler:  # pragma: no cover - a runtime-only build
    pytest.skip("the CPU path needs spin built with the compiler", allow_module_level=True)

S = BS = 16          # page size = SPIN block size
MB = 8               # block-table width: 128 slots
P = 20               # physical pages
K = 24

SHAPES = [(h, d, r) for h in (8, 64) for d in (64, 128) for r in (1, 2, 3)]

# fp8 e4m3: every finite pattern, and the bits of exactly representable values.
_TABLE = ref.fp8_e4m3_to_f32(np.arange(256, dtype=np.uint8))
FINITE = np.array([b for b in range(256) if not np.isnan(_TABLE[b])], np.uint8)
NAN_BITS = (0x7F, 0xFF)
EDGE = np.array([0x7E, 0xFE, 0x01, 0x81, 0x07, 0x87, 0x08, 0x88, 0x80, 0x00],
                np.uint8)  # +-448, +-2^-9, +-7*2^-9, +-2^-6, -0.0, +0.0
assert FINITE.size == 254 and list(_TABLE[EDGE[:2]]) == [448.0, -448.0]


def fp8_bits(values):
    """Bit patterns of exactly representable values (+0.0 for 0)."""
    values = np.asarray(values, np.float32)
    lookup = {float(_TABLE[b]): b for b in range(0x7F)}
    lookup.update({float(_TABLE[b]): b for b in range(0x81, 0xFF)})
    return np.vectorize(lambda v: lookup[float(v)], otypes=[np.uint8])(values)


def small_int_bits(rng, shape):
    """q / key bits of integers in [-4, 4], about a third of the zeros -0.0."""
    bits = fp8_bits(rng.integers(-4, 5, size=shape))
    negzero = (bits == 0) & (rng.random(shape) < 0.3)
    bits[negzero] = 0x80
    return bits


def full_range_bits(rng, shape):
    """Any finite pattern (uniform over the 254), with every edge value."""
    bits = rng.choice(FINITE, size=shape)
    flat = bits.reshape(-1)
    flat[rng.choice(flat.size, size=min(EDGE.size, flat.size), replace=False)] = EDGE[
        :min(EDGE.size, flat.size)]
    return bits


def make_table(rng, batch):
    return np.stack([rng.permutation(P)[:MB] for _ in range(batch)]).astype(np.int32)


def row_lengths(rng, batch, rows, step=0):
    """[B, R] lengths: row r of request b sees base_b + r slots (MTP rows)."""
    base = rng.integers(20, MB * S - rows - 8, size=batch) + step
    return (base[:, None] + np.arange(rows)[None, :]).astype(np.int32)


def scores_graph(B, R, H, Dh):
    """A dense graph with fp8 queries and keys that returns its scores and
    their top-K."""
    q = f"tensor<{B}x{R}x{H}x{Dh}xf8E4M3FN>"
    w = f"tensor<{B}x{R}x{H}xf32>"
    k = f"tensor<?x{S}x{Dh}xf8E4M3FN>"
    sc = f"tensor<?x{S}xf32>"
    bt = f"tensor<{B}x{MB}xi32>"
    n = f"tensor<{B}x{R}xi32>"
    z = f"tensor<{B}x{R}x{MB * S}xf32>"
    t = f"tensor<{B}x{R}x{K}xi32>"
    return f"""
func.func @scores(%q: {q} {{spin.input = "q"}}, %w: {w} {{spin.input = "w"}},
                  %k: {k} {{spin.input = "keys"}}, %sc: {sc} {{spin.input = "scales"}},
                  %bt: {bt} {{spin.input = "block_table"}},
                  %n: {n} {{spin.input = "lengths"}}) -> ({z}, {t}) {{
  %z = spin.dense_indexer q(%q : {q}) w(%w : {w}) keys(%k : {k}) scales(%sc : {sc})
      block_table(%bt : {bt}) lengths(%n : {n}) -> {z}
  %t = spin.topk %z lengths(%n : {n}) {{k = {K} : i64}} : {z} -> {t}
  return %z, %t : {z}, {t}
}}"""


_PROGRAMS = {}


def run_scores(B, R, H, Dh, **inputs):
    key = (B, R, H, Dh)
    if key not in _PROGRAMS:
        _PROGRAMS[key] = spin.compile(scores_graph(B, R, H, Dh), "scores")
    state = spin.new_state(capacity_slots=MB * S, max_requests=1, rows=R, block_size=BS)
    out = _PROGRAMS[key].run(state, **inputs)
    return out["scores"], out["topk"]


def row_scale(z):
    f = z[np.isfinite(z)]
    return float(np.max(np.abs(f))) if f.size else 0.0


def assert_topk_tolerant(got, want, z, lengths, rel=1e-5, what=""):
    """A top-K that may differ from the reference's only between slots whose
    reference scores agree to ``rel`` (floor rel * 1e-2 of the row's largest
    |score|): same -1 padding, eligible distinct slots."""
    B, R, _ = got.shape
    for b in range(B):
        for r in range(R):
            o, e, zr, n = got[b, r], want[b, r], z[b, r], int(lengths[b, r])
            where = f"{what} request {b} row {r}"
            assert np.array_equal(o < 0, e < 0), f"{where}: padding differs: {o} vs {e}"
            valid = o[o >= 0]
            assert np.all(valid < n), f"{where}: a slot >= N = {n} selected"
            assert np.unique(valid).size == valid.size, f"{where}: duplicate slots"
            zo, ze = zr[valid].astype(np.float64), zr[e[e >= 0]].astype(np.float64)
            tol = rel * np.maximum(np.abs(zo), np.abs(ze)) + rel * 1e-2 * row_scale(zr)
            same = (zo == ze) | (np.abs(zo - ze) <= tol)
            assert np.all(same), (f"{where}: top-K differs beyond {rel} at ranks "
                                  f"{np.nonzero(~same)[0][:6]}: {valid[~same][:6]} vs "
                                  f"{e[e >= 0][~same][:6]}")


# ---------------------------------------------------------------------------
# Scores: the whole e4m3 range
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("H,Dh,R", SHAPES)
def test_full_range_single_products_are_exact(rng, H, Dh, R):
    """Every finite e4m3 pattern as a query element (and as a key element):
    one nonzero query element per head (the others +0.0 or -0.0) and one
    nonzero weight (+-1, +-0.5) per row make each score a single product of
    two fp8 values times a power-of-two scale: exact in f32, so the CPU
    path's scores and top-K equal the reference's bit for bit."""
    B = 2
    q = np.where(rng.random((B, R, H, Dh)) < 0.5, 0x80, 0x00).astype(np.uint8)
    # spread the 254 finite patterns (and the edge values) over the heads
    values = np.concatenate([EDGE, rng.permutation(FINITE)])
    picks = np.resize(values, B * R * H)
    rng.shuffle(picks[EDGE.size:])
    for i, (b, r, h) in enumerate(np.ndindex(B, R, H)):
        q[b, r, h, rng.integers(Dh)] = picks[i]
    keys = full_range_bits(rng, (P, S, Dh))
    scales = (2.0 ** rng.integers(-2, 3, size=(P, S))).astype(np.float32)
    w = np.zeros((B, R, H), np.float32)
    for b, r in np.ndindex(B, R):
        w[b, r, rng.integers(H)] = rng.choice([-1.0, -0.5, 0.5, 1.0])
    table = make_table(rng, B)
    n = row_lengths(rng, B, R)
    n[0, 0] = MB * S                              # a full row
    z, t = run_scores(B, R, H, Dh, q=q, w=w, keys=keys, scales=scales,
                      block_table=table, lengths=n)
    want = ref.dense_scores(q, w, ref.fp8_e4m3_to_f32(keys), scales, table, n,
                            q_format="fp8")
    np.testing.assert_array_equal(z, want)
    np.testing.assert_array_equal(t, ref.topk(want, n, K))
    # the same with the decoded queries: the fp8 values entered exactly
    np.testing.assert_array_equal(
        want, ref.dense_scores(ref.fp8_e4m3_to_f32(q), w, ref.fp8_e4m3_to_f32(keys),
                               scales, table, n))
    assert np.count_nonzero(z[np.isfinite(z)]) > 0


@pytest.mark.parametrize("H,Dh,R", [(8, 64, 1), (64, 128, 3), (64, 64, 2), (8, 128, 2)])
def test_full_range_noninteger_scores_within_tolerance(rng, H, Dh, R):
    """Any finite patterns everywhere (sums of products that f32 rounds),
    float weights and scales: scores to 1e-5 of the row's largest |score|,
    -inf past each row's length; top-K to the differential tests' rule."""
    B = 2
    q = full_range_bits(rng, (B, R, H, Dh))
    keys = full_range_bits(rng, (P, S, Dh))
    scales = rng.uniform(0.01, 2.0, size=(P, S)).astype(np.float32)
    w = rng.standard_normal((B, R, H)).astype(np.float32)
    table = make_table(rng, B)
    n = row_lengths(rng, B, R)
    z, t = run_scores(B, R, H, Dh, q=q, w=w, keys=keys, scales=scales,
                      block_table=table, lengths=n)
    want = ref.dense_scores(q, w, ref.fp8_e4m3_to_f32(keys), scales, table, n,
                            q_format="fp8")
    for b, r in np.ndindex(B, R):
        e, g = want[b, r].astype(np.float64), z[b, r].astype(np.float64)
        assert np.all(np.isneginf(g[n[b, r]:])), (b, r)
        tol = 1e-5 * row_scale(want[b, r])
        with np.errstate(invalid="ignore"):   # -inf - -inf past the length
            close = np.isfinite(e) & (np.abs(e - g) <= tol)
        bad = np.nonzero(~((e == g) | close))[0]
        assert bad.size == 0, (f"request {b} row {r}: scores differ at {bad[:6]}: "
                               f"{g[bad[:6]]} vs {e[bad[:6]]}")
    assert_topk_tolerant(t, ref.topk(want, n, K), want, n)


@pytest.mark.parametrize("nan_bits", NAN_BITS)
def test_nan_query_pattern_scores_are_nan(rng, nan_bits):
    """A NaN pattern in one query element (of a head whose weight is 0)
    makes every visible score of its row NaN and its top-K all -1, as in the
    reference; the other rows are unaffected."""
    B, R, H, Dh = 2, 2, 8, 64
    q = small_int_bits(rng, (B, R, H, Dh))
    q[1, 0, 3, 17] = nan_bits
    keys = small_int_bits(rng, (P, S, Dh))
    scales = np.ones((P, S), np.float32)
    w = (rng.integers(-4, 5, size=(B, R, H)) / 4).astype(np.float32)
    w[1, 0, 3] = 0.0
    table = make_table(rng, B)
    n = row_lengths(rng, B, R)
    z, t = run_scores(B, R, H, Dh, q=q, w=w, keys=keys, scales=scales,
                      block_table=table, lengths=n)
    want = ref.dense_scores(q, w, ref.fp8_e4m3_to_f32(keys), scales, table, n,
                            q_format="fp8")
    np.testing.assert_array_equal(z, want)          # NaN == NaN here
    assert np.all(np.isnan(z[1, 0, :n[1, 0]])) and np.all(np.isneginf(z[1, 0, n[1, 0]:]))
    assert np.all(t[1, 0] == -1)
    np.testing.assert_array_equal(t, ref.topk(want, n, K))
    assert not np.any(np.isnan(z[0])) and not np.any(np.isnan(z[1, 1]))


# ---------------------------------------------------------------------------
# spin.Indexer: dense and SPIN steps, MTP rows, over several steps
# ---------------------------------------------------------------------------

class Steps:
    """One Indexer with fp8 queries and keys against the reference over
    several steps of a batch (MTP rows committed between steps)."""

    def __init__(self, H, Dh, R, dense, *, explore=0.0):
        self.H, self.Dh, self.R, self.dense = H, Dh, R, dense
        self.B = 3
        self.ids = [5, 9, 12]
        self.indexer = spin.Indexer(heads=H, head_dim=Dh, block_size=BS, topk=K,
                                    sparsity=0.5, explore=explore, seed=3, rows=R,
                                    key_format="fp8", query_format="fp8", dense=dense)
        self.state = self.indexer.new_state(capacity_slots=MB * S, max_requests=4)
        for i in self.ids:
            self.state.add(i)
        self.ref_states = [ref.LayerState(MB * S, BS) for _ in self.ids]
        self.explore = explore

    def step(self, keys, scales, table, q, w, n, accepted=None):
        R = self.R
        if accepted is not None and not self.dense:
            for i, a in zip(self.ids, accepted):
                self.state.commit(i, int(a))
        t, sp = self.indexer(q, w, keys, table, n, n - 1, self.state, scales=scales,
                             request_ids=np.asarray(self.ids, np.int64),
                             return_sparsity=True)
        kv = ref.fp8_e4m3_to_f32(keys)
        if self.dense:
            z = ref.dense_scores(q, w, kv, scales, table, n, q_format="fp8")
            rt, rsp = ref.topk(z, n, K), np.zeros((self.B, R), np.float32)
        else:
            rt, _, rsp, z = ref.spin_step(
                self.ref_states, self.ids, 0, q, w, kv, scales, table, n, n - 1,
                k=K, bs=BS, sparsity=0.5, explore=self.explore, seed=3,
                accepted=None if accepted is None else [int(a) for a in accepted],
                q_format="fp8")
        return np.asarray(t), np.asarray(sp), rt, rsp, z

    def exact_steps(self, rng, keys, scales, table, base, steps, draw):
        """`steps` steps of the queries and weights `draw(step)` returns,
        each row group growing by R (random accepted counts committed
        between MTP steps): top-K and sparsity equal the reference's at
        every step, and the state after the last."""
        R, accepted = self.R, None
        for step in range(steps):
            q, w = draw(step)
            if step and R > 1:
                accepted = rng.integers(0, R, size=self.B)
            n = (base[:, None] + step * R + np.arange(R)[None, :]).astype(np.int32)
            t, sp, rt, rsp, _ = self.step(keys, scales, table, q, w, n, accepted)
            np.testing.assert_array_equal(t, rt, err_msg=f"step {step}")
            np.testing.assert_allclose(sp, rsp, atol=1e-6, err_msg=f"step {step}")
        self.check_state()

    def check_state(self):
        if self.dense:
            return
        for i, st in zip(self.ids, self.ref_states):
            assert self.state.iteration(i) == st.it, i
            v, d = self.state.ema(i)
            np.testing.assert_array_equal(v, st.V, err_msg=f"V of request {i}")
            np.testing.assert_array_equal(d, st.D, err_msg=f"D of request {i}")


@pytest.mark.parametrize("dense", [True, False], ids=["dense", "spin"])
@pytest.mark.parametrize("H,Dh,R", SHAPES)
def test_indexer_exact_small_integers_match_reference(rng, H, Dh, R, dense):
    """Small-integer fp8 queries and keys (-0.0 included), w multiples of
    1/4, power-of-two scales: top-K, sparsity and the SPIN state equal the
    reference's over four steps (MTP rows committed between steps)."""
    run = Steps(H, Dh, R, dense, explore=0.25)
    keys = small_int_bits(rng, (P, S, Dh))
    scales = (2.0 ** rng.integers(-2, 3, size=(P, S))).astype(np.float32)
    table = make_table(rng, run.B)
    base = row_lengths(rng, run.B, 1)[:, 0] - R

    def draw(step):
        q = small_int_bits(rng, (run.B, R, H, Dh))
        return q, (rng.integers(-4, 5, size=(run.B, R, H)) / 4).astype(np.float32)

    run.exact_steps(rng, keys, scales, table, base, 4, draw)


@pytest.mark.parametrize("dense", [True, False], ids=["dense", "spin"])
@pytest.mark.parametrize("H,Dh,R", [(8, 64, 1), (64, 128, 2), (8, 128, 3)])
def test_indexer_full_range_single_products_match_reference(rng, H, Dh, R, dense):
    """The whole e4m3 range through spin.Indexer (numpy uint8 queries): one
    nonzero query element per head and one nonzero weight per row, so every
    score is exact; top-K, sparsity and state equal the reference's."""
    run = Steps(H, Dh, R, dense)
    keys = full_range_bits(rng, (P, S, Dh))
    scales = (2.0 ** rng.integers(-2, 3, size=(P, S))).astype(np.float32)
    table = make_table(rng, run.B)
    base = row_lengths(rng, run.B, 1)[:, 0] - 3 * R

    def draw(step):
        q = np.where(rng.random((run.B, R, H, Dh)) < 0.5, 0x80, 0x00).astype(np.uint8)
        vals = rng.choice(FINITE, size=(run.B, R, H))
        vals.reshape(-1)[:EDGE.size] = EDGE[:vals.size]
        for b, r, h in np.ndindex(run.B, R, H):
            q[b, r, h, rng.integers(Dh)] = vals[b, r, h]
        w = np.zeros((run.B, R, H), np.float32)
        for b, r in np.ndindex(run.B, R):
            w[b, r, rng.integers(H)] = rng.choice([-1.0, -0.5, 0.5, 1.0, 2.0])
        return q, w

    run.exact_steps(rng, keys, scales, table, base, 3, draw)


@pytest.mark.parametrize("H,Dh,R", [(8, 64, 1), (64, 128, 1), (8, 64, 3)])
def test_indexer_noninteger_dense_topk_within_tolerance(rng, H, Dh, R):
    """Any finite patterns, float w and scales, through the dense Indexer:
    the top-K to the differential tests' tolerance rule."""
    run = Steps(H, Dh, R, True)
    keys = full_range_bits(rng, (P, S, Dh))
    scales = rng.uniform(0.01, 2.0, size=(P, S)).astype(np.float32)
    table = make_table(rng, run.B)
    for step in range(2):
        q = full_range_bits(rng, (run.B, R, H, Dh))
        w = rng.standard_normal((run.B, R, H)).astype(np.float32)
        n = row_lengths(rng, run.B, R, step)
        t, _, rt, _, z = run.step(keys, scales, table, q, w, n)
        assert_topk_tolerant(t, rt, z, n, what=f"step {step}")


@pytest.mark.parametrize("nan_bits", NAN_BITS)
def test_indexer_nan_query_is_isolated(rng, nan_bits):
    """SPIN steps where one request's query has a NaN pattern at one step:
    its top-K is all -1 (NaN never selected), NaN never enters its state,
    and every output and state equals the reference's (the other requests'
    included)."""
    H, Dh, R = 8, 64, 1
    run = Steps(H, Dh, R, False)
    keys = small_int_bits(rng, (P, S, Dh))
    scales = (2.0 ** rng.integers(-2, 3, size=(P, S))).astype(np.float32)
    table = make_table(rng, run.B)
    base = row_lengths(rng, run.B, 1)[:, 0] - 4
    for step in range(4):
        q = small_int_bits(rng, (run.B, R, H, Dh))
        if step == 2:
            q[1, 0, rng.integers(H), rng.integers(Dh)] = nan_bits
        w = (rng.integers(-4, 5, size=(run.B, R, H)) / 4).astype(np.float32)
        n = (base[:, None] + step).astype(np.int32)
        t, sp, rt, rsp, _ = run.step(keys, scales, table, q, w, n)
        np.testing.assert_array_equal(t, rt, err_msg=f"step {step}")
        np.testing.assert_allclose(sp, rsp, atol=1e-6, err_msg=f"step {step}")
        if step == 2:
            assert np.all(t[1] == -1)
            assert np.any(t[0] >= 0) and np.any(t[2] >= 0)
    run.check_state()
    for i in run.ids:
        v, d = run.state.ema(i)
        assert np.all(np.isfinite(v)) and np.all(np.isfinite(d))


def test_torch_uint8_and_float8_queries(rng):
    """CPU torch tensors: uint8 bit patterns give the numpy result, and so
    does torch.float8_e4m3fn where torch has it (from 2.1; skipped before)."""
    if torch is None:
        pytest.skip("torch is not installed")
    H, Dh = 8, 64
    q = small_int_bits(rng, (2, 1, H, Dh))
    keys = small_int_bits(rng, (P, S, Dh))
    scales = np.ones((P, S), np.float32)
    w = (rng.integers(-4, 5, size=(2, 1, H)) / 4).astype(np.float32)
    table = make_table(rng, 2)
    n = row_lengths(rng, 2, 1)
    ix = spin.Indexer(heads=H, head_dim=Dh, block_size=BS, topk=K, key_format="fp8",
                      query_format="fp8", dense=True)
    state = ix.new_state(capacity_slots=MB * S, max_requests=2)
    ids = np.array([0, 1], np.int64)
    want = ix(q, w, keys, table, n, n - 1, state, scales=scales, request_ids=ids)
    np.testing.assert_array_equal(
        want, ref.topk(ref.dense_scores(q, w, ref.fp8_e4m3_to_f32(keys), scales, table, n,
                                        q_format="fp8"), n, K))
    T = torch.from_numpy
    got = ix(T(q), T(w), T(keys), T(table), T(n), T(n - 1), state, scales=T(scales),
             request_ids=T(ids))
    assert isinstance(got, torch.Tensor)
    np.testing.assert_array_equal(got.numpy(), want)
    fp8 = getattr(torch, "float8_e4m3fn", None)
    if fp8 is None:
        pytest.skip(f"torch {torch.__version__} has no float8_e4m3fn")
    got = ix(T(q).view(fp8), T(w), T(keys).view(fp8), T(table), T(n), T(n - 1), state,
             scales=T(scales), request_ids=T(ids))
    np.testing.assert_array_equal(got.numpy(), want)


# ---------------------------------------------------------------------------
# Bad inputs and defaults
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("key_format", ["bf16", "f16", "f32"])
def test_fp8_queries_need_fp8_keys(key_format):
    with pytest.raises(ValueError, match=(r"query_format='fp8' needs key_format='fp8'.*"
                                          rf"got key_format='{key_format}'")):
        spin.Indexer(heads=8, head_dim=64, key_format=key_format, query_format="fp8")


@pytest.mark.parametrize("query_format,key_format,message", [
    ("e4m3", "fp8", r"query_format must be None or one of .*got 'e4m3'"),
    ("FP8", "fp8", r"got 'FP8'"),
    (8, "fp8", r"got 8"),
    ("f16", "bf16", r"query_format='f16' is not taken with key_format='bf16'"),
    ("f32", "fp8", r"query_format='f32' is not taken with key_format='fp8'.*'bf16'.*'fp8'"),
    ("bf16", "f32", r"query_format='bf16' is not taken with key_format='f32'"),
])
def test_bad_query_format_names_the_value(query_format, key_format, message):
    with pytest.raises(ValueError, match=message):
        spin.Indexer(heads=8, head_dim=64, key_format=key_format, query_format=query_format)


def test_wrong_query_dtype_names_q(rng):
    H, Dh = 8, 64
    ix = spin.Indexer(heads=H, head_dim=Dh, block_size=BS, topk=K, key_format="fp8",
                      query_format="fp8", dense=True)
    state = ix.new_state(capacity_slots=MB * S, max_requests=2)
    q = small_int_bits(rng, (1, 1, H, Dh))
    keys = small_int_bits(rng, (P, S, Dh))
    scales = np.ones((P, S), np.float32)
    w = np.ones((1, 1, H), np.float32)
    table = make_table(rng, 1)
    n = np.array([[40]], np.int32)

    def call(q, keys=keys, scales=scales):
        return ix(q, w, keys, table, n, n - 1, state, scales=scales,
                  request_ids=np.array([0], np.int64))

    call(q)
    # fp8 queries are never rounded from floats: decoded values are refused
    with pytest.raises(TypeError, match="q has dtype float32, expected uint8 fp8 e4m3"):
        call(ref.fp8_e4m3_to_f32(q))
    with pytest.raises(TypeError, match="q has dtype uint16, expected uint8 fp8 e4m3"):
        call(q.astype(np.uint16))
    with pytest.raises(TypeError, match="q has dtype int8, expected uint8"):
        call(q.view(np.int8))
    with pytest.raises(ValueError, match=r"q has shape \(1, 1, 8, 32\)"):
        call(np.ascontiguousarray(q[..., :32]))
    with pytest.raises(ValueError, match="scales is required with key_format='fp8'"):
        call(q, scales=None)
    with pytest.raises(TypeError, match="keys has dtype float32, expected uint8 fp8 e4m3"):
        call(q, keys=ref.fp8_e4m3_to_f32(keys))
    if torch is not None:
        with pytest.raises(TypeError, match="q has dtype float32, expected uint8 fp8"):
            call(torch.from_numpy(ref.fp8_e4m3_to_f32(q)))
        with pytest.raises(TypeError, match="q has dtype torch.bfloat16, expected uint8 fp8"):
            call(torch.from_numpy(ref.fp8_e4m3_to_f32(q)).to(torch.bfloat16))
    # the default query format of fp8 keys stays bf16: fp8 bits are refused
    bf16q = spin.Indexer(heads=H, head_dim=Dh, block_size=BS, topk=K, key_format="fp8",
                         dense=True)
    with pytest.raises(TypeError, match="q has dtype uint8, expected float32 or uint16 bf16"):
        bf16q(q, w, keys, table, n, n - 1, bf16q.new_state(capacity_slots=MB * S),
              scales=scales, request_ids=np.array([0], np.int64))


@pytest.mark.parametrize("key_format", ["bf16", "f16", "f32", "fp8"])
def test_defaults_are_unchanged(key_format, tmp_path):
    """Without query_format an Indexer is what it was: the keys' own query
    type (bf16 with fp8 keys), the same graph and the same GPU cache keys;
    naming that type changes nothing."""
    plain = spin.Indexer(heads=8, head_dim=64, key_format=key_format)
    assert plain.query_format == {"fp8": "bf16"}.get(key_format, key_format)
    graph = spin._spin.build_indexer_graph(heads=8, head_dim=64, rows=1, topk=512,
                                           page_size=64, max_pages=4,
                                           key_format=key_format, layer=0)
    assert plain._graph(0, 4) == graph
    named = spin.Indexer(heads=8, head_dim=64, key_format=key_format,
                         query_format=plain.query_format)
    assert named.query_format == plain.query_format and named._graph(0, 4) == graph
    if key_format != "f32":
        a = spin.Indexer(heads=8, head_dim=64, key_format=key_format, device="cuda",
                         chips=["sm_90a"], cache_dir=str(tmp_path))
        assert "query_format" not in a._spec(0, 4, 2)


def test_fp8_query_graph_and_gpu_cache_entry(tmp_path):
    """The fp8-query graph differs from the default one in q's type only; a
    CUDA Indexer's cache key names the query format, its artifact (compiled
    here, no GPU needed) takes q as fp8e4m3, and the prebuild command that
    a runtime-only build names builds the same entry."""
    from spin import cache
    kw = dict(heads=8, head_dim=64, block_size=64, topk=64, rows=2, key_format="fp8")
    fp8 = spin.Indexer(**kw, query_format="fp8")
    bf16 = spin.Indexer(**kw)
    assert fp8._graph(0, 4).replace("xf8E4M3FN>", "xbf16>") == \
        bf16._graph(0, 4).replace("xf8E4M3FN>", "xbf16>")
    assert fp8._graph(0, 4, 3).count("tensor<3x2x8x64xf8E4M3FN>") == 2
    gpu = spin.Indexer(**kw, query_format="fp8", device="cuda", chips=["sm_90a"],
                       cache_dir=str(tmp_path / "a"))
    spec = gpu._spec(0, 4, 2)
    assert spec["query_format"] == "fp8"
    path = gpu.artifact(0, 4, 2)
    args = {a["name"]: a for a in spin.read_manifest(path)["arguments"]}
    assert args["q"]["dtype"] == "fp8e4m3" and args["keys"]["dtype"] == "fp8e4m3"
    assert args["q"]["shape"] == [2, 2, 8, 64]
    other = spin.Indexer(**kw, device="cuda", chips=["sm_90a"], cache_dir=str(tmp_path / "a"))
    assert os.path.basename(other.artifact(0, 4, 2)) != os.path.basename(path)
    command = cache.prebuild_command(gpu, 1, 4, [2], ["sm_90a"], str(tmp_path / "b"))
    assert "--query-format fp8" in command
    words = shlex.split(command)
    assert cache.main(words[3:]) == 0
    rebuilt = spin.Indexer(**kw, query_format="fp8", device="cuda", chips=["sm_90a"],
                           cache_dir=str(tmp_path / "b"))
    assert os.path.basename(rebuilt.artifact(0, 4, 2)) == os.path.basename(path)


@pytest.mark.parametrize("key_format,query_format,message", [
    ("bf16", "fp8", "query format 'fp8' needs fp8 keys, got key format 'bf16'"),
    ("f16", "fp8", "query format 'fp8' needs fp8 keys, got key format 'f16'"),
    ("fp8", "f16", "query format 'f16' is not taken with key format 'fp8' (its queries "
                   "are bf16 or fp8)"),
    ("bf16", "int8", "query format 'int8' is not taken with key format 'bf16'"),
])
def test_graph_builder_rejects_bad_query_formats(key_format, query_format, message):
    """build_indexer_graph names the offending query format."""
    with pytest.raises(Exception) as info:
        spin._spin.build_indexer_graph(heads=8, head_dim=64, rows=1, topk=8, page_size=16,
                                       max_pages=4, key_format=key_format, layer=0,
                                       query_format=query_format)
    assert message in str(info.value)


def test_graph_builder_fp8_queries():
    """With query_format='fp8' the builder's graph takes q as f8E4M3FN (fp8
    keys), and naming the keys' own query format changes nothing."""
    kw = dict(heads=8, head_dim=64, rows=2, topk=8, page_size=16, max_pages=4,
              key_format="fp8", layer=0)
    fp8 = spin._spin.build_indexer_graph(query_format="fp8", **kw)
    plain = spin._spin.build_indexer_graph(**kw)
    assert "tensor<?x2x8x64xf8E4M3FN>" in fp8 and "xbf16>" not in fp8
    assert fp8.replace("x2x8x64xf8E4M3FN>", "x2x8x64xbf16>") == plain
    assert spin._spin.build_indexer_graph(query_format="bf16", **kw) == plain
