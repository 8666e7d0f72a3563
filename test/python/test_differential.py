"""Differential tests: the compiled CPU path (`build/bin/spin-exec`) against
the independent numpy reference (test/reference/spin_reference.py).

Every test generates fresh random inputs (seeded by the ``seed`` fixture,
replay with ``SPIN_TEST_SEED=<seed>``), writes a trace directory, runs
spin-exec over all its steps with a persistent state pool, and compares EVERY
step with ``spin_reference.spin_step`` (one ``LayerState`` per request id,
carried across steps):

* top-K indices exactly equal, realized sparsity equal to 1e-6;
* to make selections exact rather than tolerance-dependent, the "exact"
  tests keep all arithmetic exact in f32: q and key components are small
  integers in [-4, 4] (exact in bf16, f16, f32 and fp8 e4m3), w multiples of
  1/4 in [-1, 1], fp8 scales powers of two, EMA decay 0.5.  Dot products,
  ReLU head sums and the EMA products are then exact in both
  implementations, and equal scores are real ties (which tests the tie
  rules: descending score, ties to the lower slot / block index);
* the "noninteger" tests use normal floats; scores then differ by f32
  rounding, and a top-K may differ from the reference's only where the
  reference's scores of the two differing slots agree to 1e-5 relative.

Project rules tested here (SPEC §1, §3, reference module docstring):
* NaN scores are never selected by top-K (a row whose every score is NaN
  outputs only -1), +-inf scores are ordinary values;
* non-finite scores (NaN, +-inf) never enter the EMA state;
* the ReLU propagates NaN (max(NaN, 0) = NaN);
* a NaN in one request's inputs never changes another request's outputs.
"""

import dataclasses
import math
import os
import re
import sys

import numpy as np
import pytest

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

import trace_io as tio  # noqa: E402
from trace_io import sr  # noqa: E402

if tio.find_spin_exec() is None:
    pytest.skip("spin-exec not found at %s (set SPIN_BUILD_DIR to the build "
                "directory that holds bin/spin-exec)" % tio.spin_exec_path(),
                allow_module_level=True)


# ---------------------------------------------------------------------------
# Configuration (one spin-exec invocation)
# ---------------------------------------------------------------------------

@dataclasses.dataclass
class Cfg:
    heads: int = 8
    head_dim: int = 16
    rows: int = 1
    topk: int = 24
    page_size: int = 64
    max_pages: int = 4
    key_format: str = "bf16"
    block_size: int = 16
    sparsity: float = 0.5
    ema_decay: float = 0.5
    explore: float = 0.0
    explore_seed: int = 0
    explore_policy: str = "random"
    pooling: str = "max"
    reduction: str = "A1"
    mtp_mask: str = "union"
    mtp_update: str = "prefix"
    num_slots: int = 8
    dense: bool = False

    @property
    def capacity(self):
        return self.max_pages * self.page_size

    def argv(self):
        args = ["--dense"] if self.dense else []
        args += [
            "--heads", self.heads, "--head-dim", self.head_dim,
            "--rows", self.rows, "--topk", self.topk,
            "--page-size", self.page_size, "--max-pages", self.max_pages,
            "--key-format", self.key_format, "--block-size", self.block_size,
            "--sparsity", repr(float(self.sparsity)),
            "--ema-decay", repr(float(self.ema_decay)),
            "--explore", repr(float(self.explore)),
            "--seed", int(self.explore_seed),
            "--explore-policy", self.explore_policy,
            "--pooling", self.pooling, "--reduction", self.reduction,
            "--mtp-mask", self.mtp_mask, "--mtp-update", self.mtp_update,
            "--num-slots", self.num_slots,
        ]
        return [str(a) for a in args]


# ---------------------------------------------------------------------------
# Requests and traces
# ---------------------------------------------------------------------------

class Req:
    """One request: id, its block table (fixed over the sequence), visible
    length ``n`` and the gap ``p - (n - 1) >= 0`` of its query position."""

    def __init__(self, rid, table, n, gap=0):
        self.rid = int(rid)
        self.table = np.asarray(table, dtype=np.int32)
        self.n = int(n)
        self.gap = int(gap)

    @property
    def p(self):
        return self.n - 1 + self.gap

    def rows(self, R):
        """MTP rows (p, N), (p+1, N+1), ... (one row for R == 1)."""
        return [(self.p + r, self.n + r) for r in range(R)]


def int_values(rng, shape, lo=-4, hi=4):
    return rng.integers(lo, hi + 1, size=shape).astype(np.float32)


def quarter_weights(rng, shape):
    return (rng.integers(-4, 5, size=shape) / 4.0).astype(np.float32)


def unique_ids(rng, count, lo=1, hi=2 ** 62):
    ids = set()
    while len(ids) < count:
        ids.add(int(rng.integers(lo, hi)))
    ids = list(ids)
    rng.shuffle(ids)
    return ids


def make_requests(rng, cfg, num_pages, ns, gaps=None):
    """Requests with random 62-bit ids and random-permutation block tables
    over a shared pool of ``num_pages`` pages."""
    assert num_pages >= cfg.max_pages
    ids = unique_ids(rng, len(ns))
    reqs = []
    for i, n in enumerate(ns):
        table = rng.permutation(num_pages)[:cfg.max_pages]
        gap = 0 if gaps is None else gaps[i]
        reqs.append(Req(ids[i], table, n, gap))
    return reqs


class Trace:
    """A trace under construction: the encoded arrays for spin-exec and the
    decoded float32 arrays for the reference."""

    def __init__(self, cfg, rng, num_pages, exact=True, key_values=None,
                 scales=None, value_range=(-4, 4)):
        self.cfg = cfg
        self.rng = rng
        self.exact = exact
        self.value_range = value_range
        shape = (num_pages, cfg.page_size, cfg.head_dim)
        if key_values is None:
            if exact:
                key_values = int_values(rng, shape, *value_range)
            else:
                key_values = rng.standard_normal(shape).astype(np.float32)
        self.keys_stored, self.keys = tio.encode_keys(key_values, cfg.key_format)
        if cfg.key_format == "fp8":
            if scales is None:
                if exact:
                    scales = np.exp2(rng.integers(-2, 3, size=shape[:2]))
                else:
                    scales = rng.uniform(0.5, 2.0, size=shape[:2])
            self.scales = np.asarray(scales, dtype=np.float32)
        else:
            assert scales is None
            self.scales = None
        self.steps = []       # encoded, for spin-exec
        self.ref_steps = []   # decoded, for the reference
        self.entries = []     # the step entries (for messages)

    @property
    def num_pages(self):
        return self.keys.shape[0]

    def new_q(self, B):
        c = self.cfg
        shape = (B, c.rows, c.heads, c.head_dim)
        if self.exact:
            return int_values(self.rng, shape, *self.value_range)
        return self.rng.standard_normal(shape).astype(np.float32)

    def new_w(self, B):
        c = self.cfg
        shape = (B, c.rows, c.heads)
        if self.exact:
            return quarter_weights(self.rng, shape)
        return (0.5 * self.rng.standard_normal(shape)).astype(np.float32)

    def add_step(self, entries, q=None, w=None, block_table=None):
        """entries: list of dicts ``{"req": Req, "rows": [(p, N)] * R,
        optional "accepted": int, optional "reset": bool}``."""
        c = self.cfg
        B = len(entries)
        for e in entries:
            assert len(e["rows"]) == c.rows
        q = self.new_q(B) if q is None else np.asarray(q, dtype=np.float32)
        w = self.new_w(B) if w is None else np.asarray(w, dtype=np.float32)
        q_stored, q_dec = tio.encode_q(q, c.key_format)
        if block_table is None:
            block_table = np.stack([e["req"].table for e in entries]).astype(np.int32)
        lengths = np.array([[n for (_, n) in e["rows"]] for e in entries],
                           dtype=np.int32).reshape(B, c.rows)
        positions = np.array([[p for (p, _) in e["rows"]] for e in entries],
                             dtype=np.int32).reshape(B, c.rows)
        rids = np.array([e["req"].rid for e in entries], dtype=np.int64)
        accepted = None
        if any("accepted" in e for e in entries):
            accepted = np.array([e.get("accepted", -1) for e in entries],
                                dtype=np.int32)
        reset = None
        if any("reset" in e for e in entries):
            reset = np.array([1 if e.get("reset") else 0 for e in entries],
                             dtype=np.uint8)
        self.steps.append(dict(q=q_stored, w=w, block_table=block_table,
                               lengths=lengths, positions=positions,
                               request_ids=rids, accepted=accepted,
                               reset=reset))
        self.ref_steps.append(dict(q=q_dec, w=w, block_table=block_table,
                                   lengths=lengths, positions=positions,
                                   request_ids=rids, accepted=accepted,
                                   reset=reset))
        self.entries.append(entries)

    def write(self, trace_dir):
        tio.write_trace(trace_dir, self.keys_stored, self.scales, self.steps)


def decode_steps(trace, reqs, num_steps, *, grow=1, present=1.0,
                 shuffle=True, resets=None):
    """Plain decode steps (R == 1): each step a random non-empty subset of
    the requests (probability ``present`` each) in random order; N and p of
    every stepped request grow by ``grow`` afterwards.  resets: {step:
    set of rids} to reset before that step."""
    rng = trace.rng
    for t in range(num_steps):
        chosen = [r for r in reqs if rng.random() < present]
        if not chosen:
            chosen = [reqs[int(rng.integers(len(reqs)))]]
        if shuffle:
            chosen = [chosen[i] for i in rng.permutation(len(chosen))]
        entries = []
        for r in chosen:
            e = {"req": r, "rows": r.rows(1)}
            if resets is not None:
                e["reset"] = r.rid in resets.get(t, ())
            entries.append(e)
        trace.add_step(entries)
        for r in chosen:
            r.n += grow
    for r in reqs:
        assert r.p < trace.cfg.capacity + grow, "test bug: capacity exceeded"


# ---------------------------------------------------------------------------
# Reference
# ---------------------------------------------------------------------------

class RefStep:
    def __init__(self, topk, mask, sparsity, z, warm):
        self.topk = topk
        self.mask = mask
        self.sparsity = sparsity
        self.z = z
        self.warm = warm   # [B] bool: warm-up selection (it == 0)


def run_reference(cfg, trace):
    level = "block" if cfg.reduction == "A2" else "slot"
    states = {}
    out = []
    for st in trace.ref_steps:
        rids = [int(x) for x in st["request_ids"]]
        B = len(rids)
        if cfg.dense:
            z = sr.dense_scores(st["q"], st["w"], trace.keys, trace.scales,
                                st["block_table"], st["lengths"])
            idx = sr.topk(z, st["lengths"], cfg.topk)
            out.append(RefStep(idx, None, np.zeros((B, cfg.rows), np.float32),
                               z, np.ones(B, bool)))
            continue
        sts = [states.setdefault(r, sr.LayerState(cfg.capacity, cfg.block_size,
                                                  level)) for r in rids]
        warm = []
        for b, s in enumerate(sts):
            if st["reset"] is not None and st["reset"][b]:
                warm.append(True)
            elif cfg.rows > 1 and s.pending is not None:
                warm.append(s.it + 1 == 0)
            else:
                warm.append(s.it == 0)
        idx, mask, sp, z = sr.spin_step(
            sts, rids, 0, st["q"], st["w"], trace.keys, trace.scales,
            st["block_table"], st["lengths"], st["positions"],
            k=cfg.topk, bs=cfg.block_size, sparsity=cfg.sparsity,
            explore=cfg.explore, seed=cfg.explore_seed, alpha=cfg.ema_decay,
            pooling=cfg.pooling, reduction=cfg.reduction.lower(),
            mtp_mask=cfg.mtp_mask, mtp_update=cfg.mtp_update,
            accepted=st["accepted"], reset_flags=st["reset"],
            explore_policy=cfg.explore_policy)
        out.append(RefStep(idx, mask, sp, z, np.array(warm, bool)))
    return out


def ref_dense_topk(cfg, trace, t):
    st = trace.ref_steps[t]
    z = sr.dense_scores(st["q"], st["w"], trace.keys, trace.scales,
                        st["block_table"], st["lengths"])
    return sr.topk(z, st["lengths"], cfg.topk), z


# ---------------------------------------------------------------------------
# Running and comparing
# ---------------------------------------------------------------------------

class Run:
    def __init__(self, ctx, cfg, trace, outs, refs, trace_dir):
        self.ctx = ctx
        self.cfg = cfg
        self.trace = trace
        self.outs = outs
        self.refs = refs
        self.trace_dir = trace_dir


def context(seed, cfg, trace_dir, what=""):
    return ("[SPIN_TEST_SEED=%d] %s\n  spin-exec --trace %s %s"
            % (seed, what, trace_dir, " ".join(cfg.argv())))


def execute(exe, trace_dir, cfg, ctx, num_steps):
    proc = tio.run_spin_exec(exe, trace_dir, cfg.argv())
    assert proc.returncode == 0, (
        "%s\nspin-exec failed (exit %d)\nstdout:\n%s\nstderr:\n%s"
        % (ctx, proc.returncode, proc.stdout[-4000:], proc.stderr[-4000:]))
    outs = []
    for t in range(num_steps):
        try:
            outs.append(tio.read_step_outputs(trace_dir, t))
        except (OSError, ValueError) as err:
            raise AssertionError("%s\ncannot read the outputs of step %d: %s"
                                 % (ctx, t, err))
    return outs


def _fmt_row(a):
    return np.array2string(np.asarray(a), max_line_width=10 ** 6,
                           threshold=10 ** 6)


def describe_row(run, t, b, r, out_idx):
    cfg, ref = run.cfg, run.refs[t]
    st = run.trace.ref_steps[t]
    n = int(st["lengths"][b, r])
    p = int(st["positions"][b, r])
    rid = int(st["request_ids"][b])
    ref_idx = ref.topk[b, r]
    lines = ["step %d, batch index %d, row %d: request %d, p=%d, N=%d, "
             "warm-up=%s" % (t, b, r, rid, p, n, bool(ref.warm[b]))]
    if ref.mask is not None:
        nb = sr.num_blocks_of(n, cfg.block_size)
        lines.append("  reference blocks: %s of %d"
                     % (np.nonzero(ref.mask[b][:nb])[0].tolist(), nb))
    lines.append("  reference top-K: %s" % _fmt_row(ref_idx))
    lines.append("  spin-exec top-K: %s" % _fmt_row(out_idx))
    diff = [j for j in range(len(ref_idx)) if ref_idx[j] != out_idx[j]]
    if diff:
        j = diff[0]
        zr = ref.z[b, r]

        def score(i):
            return "%r" % float(zr[i]) if 0 <= i < zr.size else "n/a"
        lines.append("  first difference at rank %d: reference slot %d "
                     "(ref score %s), spin-exec slot %d (ref score %s)"
                     % (j, ref_idx[j], score(int(ref_idx[j])), out_idx[j],
                        score(int(out_idx[j]))))
    return "\n".join(lines)


def check_shapes(run, t, out_idx, out_sp):
    st = run.trace.ref_steps[t]
    B = st["lengths"].shape[0]
    R = run.cfg.rows
    assert out_idx.shape == (B, R, run.cfg.topk) and out_idx.dtype == np.int32, (
        "%s\nstep %d: out_topk has shape %s dtype %s, want (%d, %d, %d) int32"
        % (run.ctx, t, out_idx.shape, out_idx.dtype, B, R, run.cfg.topk))
    assert out_sp.shape == (B, R) and out_sp.dtype == np.float32, (
        "%s\nstep %d: out_sparsity has shape %s dtype %s, want (%d, %d) float32"
        % (run.ctx, t, out_sp.shape, out_sp.dtype, B, R))


def compare_exact(run):
    """Top-K exactly equal and sparsity to 1e-6 at every step; the message
    describes the first mismatching row in detail."""
    bad = []
    first = None
    for t, ((oi, osp), ref) in enumerate(zip(run.outs, run.refs)):
        check_shapes(run, t, oi, osp)
        B, R = osp.shape
        for b in range(B):
            for r in range(R):
                ok_idx = np.array_equal(oi[b, r], ref.topk[b, r])
                ok_sp = abs(float(osp[b, r]) - float(ref.sparsity[b, r])) <= 1e-6
                if not (ok_idx and ok_sp):
                    bad.append((t, b, r))
                    if first is None:
                        first = describe_row(run, t, b, r, oi[b, r])
                        first += ("\n  sparsity: reference %r, spin-exec %r"
                                  % (float(ref.sparsity[b, r]), float(osp[b, r])))
    assert not bad, ("%s\n%d mismatching rows (step, batch, row): %s\nfirst:\n%s"
                     % (run.ctx, len(bad), bad[:20], first))


def _row_scale(z):
    f = z[np.isfinite(z)]
    return float(np.max(np.abs(f))) if f.size else 0.0


def compare_tolerant(run, rel=1e-5):
    """Non-integer inputs: the top-K may differ from the reference's only
    where the reference's scores of the two differing slots (same rank)
    agree to ``rel`` relative (with a floor of rel * 1e-2 * the row's
    largest |score| for scores near zero); -1 padding and sparsity must
    match, every selected slot is eligible and distinct."""
    problems = []
    for t, ((oi, osp), ref) in enumerate(zip(run.outs, run.refs)):
        check_shapes(run, t, oi, osp)
        st = run.trace.ref_steps[t]
        B, R = osp.shape
        for b in range(B):
            for r in range(R):
                o, e, z = oi[b, r], ref.topk[b, r], ref.z[b, r]
                n = int(st["lengths"][b, r])
                msg = None
                if abs(float(osp[b, r]) - float(ref.sparsity[b, r])) > 1e-6:
                    msg = "sparsity %r != reference %r" % (float(osp[b, r]),
                                                           float(ref.sparsity[b, r]))
                elif not np.array_equal(o < 0, e < 0):
                    msg = "padding differs"
                else:
                    valid = o[o >= 0]
                    if np.any(valid >= n):
                        msg = "slot >= N selected"
                    elif np.unique(valid).size != valid.size:
                        msg = "duplicate slot"
                    else:
                        zo = z[valid].astype(np.float64)
                        ze = z[e[e >= 0]].astype(np.float64)
                        floor = rel * 1e-2 * _row_scale(z)
                        tol = rel * np.maximum(np.abs(zo), np.abs(ze)) + floor
                        with np.errstate(invalid="ignore"):
                            err = np.abs(zo - ze)
                        same = (zo == ze) | (err <= tol)
                        if not np.all(same):
                            j = int(np.nonzero(~same)[0][0])
                            msg = ("rank %d: spin-exec slot %d (ref score %r) vs "
                                   "reference slot %d (ref score %r)"
                                   % (j, valid[j], zo[j], e[j], ze[j]))
                if msg is not None:
                    problems.append("%s\n  %s" % (describe_row(run, t, b, r, o), msg))
    assert not problems, "%s\n%d bad rows; first:\n%s" % (
        run.ctx, len(problems), problems[0])


def run_trace(exe, tmp_path, seed, cfg, trace, what="", name="trace",
              mode="exact"):
    """Write the trace, run spin-exec and the reference, compare every step."""
    trace_dir = str(tmp_path / name)
    trace.write(trace_dir)
    ctx = context(seed, cfg, trace_dir, what)
    outs = execute(exe, trace_dir, cfg, ctx, len(trace.steps))
    refs = run_reference(cfg, trace)
    run = Run(ctx, cfg, trace, outs, refs, trace_dir)
    if mode == "exact":
        compare_exact(run)
    elif mode == "tolerant":
        compare_tolerant(run)
    elif mode is not None:
        raise ValueError(mode)
    return run


def assert_warmups_dense(run):
    """Every warm-up row (it == 0) selects all blocks: it equals the dense
    top-K (reference dense indexer) and its realized sparsity is 0."""
    seen = 0
    for t, ((oi, osp), ref) in enumerate(zip(run.outs, run.refs)):
        dense, _ = ref_dense_topk(run.cfg, run.trace, t)
        for b in np.nonzero(ref.warm)[0]:
            seen += 1
            # With row-0 sharing the reference uses row 0's warm-up
            # selection (its ceil(N_0 / bs) blocks) for every row, so only
            # row 0 is dense then.
            rows = range(run.cfg.rows) if run.cfg.mtp_mask == "union" else [0]
            for r in rows:
                assert np.array_equal(oi[b, r], dense[b, r]), (
                    "%s\nwarm-up row is not the dense top-K\n%s\n  dense top-K: %s"
                    % (run.ctx, describe_row(run, t, b, r, oi[b, r]),
                       _fmt_row(dense[b, r])))
                assert float(osp[b, r]) == 0.0, (
                    "%s\nwarm-up row step %d batch %d row %d: sparsity %r != 0"
                    % (run.ctx, t, b, r, float(osp[b, r])))
    return seen


# ---------------------------------------------------------------------------
# Shapes and key formats
# ---------------------------------------------------------------------------

# (H, Dh, block size, page size, key format, max pages, N range)
SHAPE_CASES = [
    (1, 16, 16, 64, "bf16", 4, (1, 200)),
    (8, 64, 64, 64, "f16", 5, (1, 300)),
    (32, 128, 16, 64, "f32", 2, (1, 100)),
    (64, 128, 64, 64, "fp8", 3, (1, 140)),
    (8, 16, 16, 16, "fp8", 12, (1, 180)),
    (32, 64, 64, 64, "bf16", 4, (1, 220)),
    (64, 16, 16, 64, "f16", 2, (1, 110)),
    (1, 128, 64, 64, "f32", 6, (1, 350)),
    (8, 128, 16, 64, "bf16", 3, (1, 170)),
    (64, 64, 16, 16, "f32", 6, (1, 80)),
    (1, 64, 16, 16, "fp8", 16, (1, 240)),
    (32, 16, 64, 64, "f16", 5, (1, 280)),
]


@pytest.mark.parametrize("H,Dh,bs,S,fmt,MB,nrange", SHAPE_CASES,
                         ids=["H%d-D%d-b%d-S%d-%s" % c[:5] for c in SHAPE_CASES])
def test_shapes_and_formats(spin_exec, tmp_path, seed, rng, H, Dh, bs, S, fmt,
                            MB, nrange):
    steps = 6
    cfg = Cfg(heads=H, head_dim=Dh, page_size=S, max_pages=MB, key_format=fmt,
              block_size=bs, topk=int(rng.integers(1, 2 * bs)),
              sparsity=0.5, num_slots=6)
    B = int(rng.integers(1, 5))
    hi = min(nrange[1], cfg.capacity - steps)
    ns = rng.integers(nrange[0], hi + 1, size=B)
    gaps = [int(rng.integers(0, cfg.capacity - steps - n + 1)) if rng.random() < 0.3
            else 0 for n in ns]
    trace = Trace(cfg, rng, num_pages=MB + 2)
    reqs = make_requests(rng, cfg, trace.num_pages, ns, gaps)
    decode_steps(trace, reqs, steps, present=0.8)
    run = run_trace(spin_exec, tmp_path, seed, cfg, trace, "shapes/formats")
    assert assert_warmups_dense(run) >= 1


@pytest.mark.parametrize("B", [1, 2, 3, 4, 5, 12])
def test_ragged_batch(spin_exec, tmp_path, seed, rng, B):
    """B requests, each with its own length, position gap and a random
    permutation block table over a shared page pool; the batch composition
    and order change from step to step (state follows the request id)."""
    fmt = tio.KEY_FORMATS[B % 4]
    cfg = Cfg(heads=4, head_dim=16, page_size=64, max_pages=5, key_format=fmt,
              block_size=16, topk=20, sparsity=0.6, num_slots=B + 1)
    steps = 10 if B <= 5 else 4
    ns = rng.integers(1, cfg.capacity - steps - 20, size=B)
    gaps = [int(rng.integers(0, 20)) for _ in range(B)]
    trace = Trace(cfg, rng, num_pages=7)
    reqs = make_requests(rng, cfg, trace.num_pages, ns, gaps)
    decode_steps(trace, reqs, steps, present=0.75)
    run_trace(spin_exec, tmp_path, seed, cfg, trace, "ragged B=%d" % B)


@pytest.mark.parametrize("bs,S,pooling", [(16, 64, "mean"), (64, 64, "top4"),
                                          (16, 16, "max")])
def test_short_and_partial_lengths(spin_exec, tmp_path, seed, rng, bs, S,
                                   pooling):
    """N < one block (one forced block), N around block boundaries (not a
    multiple of the block, exactly a multiple), growing across them; partial
    blocks with fewer than 4 visible slots (top4 / mean pooling)."""
    cfg = Cfg(heads=8, head_dim=16, page_size=S, max_pages=max(4, 4 * bs // S),
              block_size=bs, topk=int(rng.integers(4, bs + 1)), sparsity=0.7,
              key_format="bf16", num_slots=8, pooling=pooling)
    ns = [1, 2, bs - 3, bs - 1, bs, bs + 1, 2 * bs - 2, 3 * bs]
    trace = Trace(cfg, rng, num_pages=cfg.max_pages + 1)
    reqs = make_requests(rng, cfg, trace.num_pages, ns)
    decode_steps(trace, reqs, 5, present=1.0)
    run_trace(spin_exec, tmp_path, seed, cfg, trace, "short/partial lengths")


def test_zero_length_row(spin_exec, tmp_path, seed, rng):
    """N = 0 is a valid row (ABI: 0 <= N): no slot, all -1, sparsity 0."""
    cfg = Cfg(heads=2, head_dim=16, page_size=16, max_pages=4, block_size=16,
              topk=8, num_slots=4)
    trace = Trace(cfg, rng, num_pages=5)
    reqs = make_requests(rng, cfg, trace.num_pages, [0, 5, 20])
    reqs[0].gap = 3
    decode_steps(trace, reqs, 3, present=1.0)
    run = run_trace(spin_exec, tmp_path, seed, cfg, trace, "N = 0")
    for t, (oi, _) in enumerate(run.outs):
        for b, e in enumerate(trace.entries[t]):
            if e["rows"][0][1] == 0:
                assert np.all(oi[b] == -1), run.ctx


@pytest.mark.parametrize("bs,beyond", [(16, False), (64, False), (16, True)])
def test_k_larger_than_eligible(spin_exec, tmp_path, seed, rng, bs, beyond):
    """K larger than the eligible set: the tail is padded with -1 (also K
    larger than the capacity MB * S)."""
    cfg = Cfg(heads=4, head_dim=16, page_size=64, max_pages=4, block_size=bs,
              topk=3 * bs + 5 if not beyond else 2 * 4 * 64 + 3,
              sparsity=0.9, num_slots=4)
    trace = Trace(cfg, rng, num_pages=6)
    ns = [1, int(rng.integers(2, bs)), int(rng.integers(bs, 3 * bs)),
          int(rng.integers(3 * bs, 4 * bs - 8))]
    reqs = make_requests(rng, cfg, trace.num_pages, ns)
    decode_steps(trace, reqs, 6)
    run = run_trace(spin_exec, tmp_path, seed, cfg, trace, "K > eligible")
    padded = sum(int(np.count_nonzero(oi == -1)) for oi, _ in run.outs)
    assert padded > 0, run.ctx


def test_unused_block_table_entries_ignored(spin_exec, tmp_path, seed, rng):
    """ABI: only the block-table entries of visible pages must be in [0, P);
    the others (here -1 and P + 100) are never read."""
    cfg = Cfg(heads=4, head_dim=16, page_size=16, max_pages=8, block_size=16,
              topk=12, num_slots=4)
    trace = Trace(cfg, rng, num_pages=9)
    reqs = make_requests(rng, cfg, trace.num_pages, [5, 20, 40])
    for t in range(4):
        entries = [{"req": r, "rows": r.rows(1)} for r in reqs]
        bt = np.stack([r.table for r in reqs]).astype(np.int32)
        for i, r in enumerate(reqs):
            vis = -(-r.n // cfg.page_size)
            bt[i, vis:] = np.where(np.arange(cfg.max_pages - vis) % 2 == 0, -1,
                                   trace.num_pages + 100)
        trace.add_step(entries, block_table=bt)
        for r in reqs:
            r.n += 1
    run_trace(spin_exec, tmp_path, seed, cfg, trace, "unused block-table entries")


def test_ties(spin_exec, tmp_path, seed, rng):
    """Many equal scores (keys and q in {-1, 0, 1}, one head, w = 1): the
    top-K and the block ranking break ties towards the lower index."""
    cfg = Cfg(heads=1, head_dim=16, page_size=16, max_pages=8, block_size=16,
              topk=10, sparsity=0.5, num_slots=4, key_format="bf16")
    trace = Trace(cfg, rng, num_pages=9, value_range=(-1, 1))
    reqs = make_requests(rng, cfg, trace.num_pages, [40, 70, 100])
    for t in range(8):
        B = len(reqs)
        w = np.ones((B, 1, 1), np.float32)
        if t % 3 == 2:
            w[0] = 0.0          # every score 0: all ties
        trace.add_step([{"req": r, "rows": r.rows(1)} for r in reqs], w=w)
        for r in reqs:
            r.n += 1
    run_trace(spin_exec, tmp_path, seed, cfg, trace, "ties")


# ---------------------------------------------------------------------------
# Sparsify options
# ---------------------------------------------------------------------------

SPARSITIES = [0.0, 0.2, 0.5, 0.9, 1.0]
POOLINGS = ["max", "mean", "top4"]
OPTION_CASES = [(x, red, POOLINGS[(i + j) % 3])
                for j, red in enumerate(["A0", "A1", "A2"])
                for i, x in enumerate(SPARSITIES)]


@pytest.mark.parametrize("sparsity,reduction,pooling", OPTION_CASES,
                         ids=["x%s-%s-%s" % c for c in OPTION_CASES])
def test_sparsify_options(spin_exec, tmp_path, seed, rng, sparsity, reduction,
                          pooling):
    fmt = tio.KEY_FORMATS[int(rng.integers(4))]
    cfg = Cfg(heads=4, head_dim=16, page_size=64, max_pages=4, block_size=16,
              topk=int(rng.integers(4, 24)), sparsity=sparsity,
              reduction=reduction, pooling=pooling, key_format=fmt,
              num_slots=5)
    steps = 8
    trace = Trace(cfg, rng, num_pages=6)
    ns = rng.integers(1, cfg.capacity - steps - 10, size=4)
    gaps = [int(rng.integers(0, 8)) for _ in ns]
    reqs = make_requests(rng, cfg, trace.num_pages, ns, gaps)
    decode_steps(trace, reqs, steps, present=0.9)
    run_trace(spin_exec, tmp_path, seed, cfg, trace,
              "options sparsity=%s reduction=%s pooling=%s (key %s)"
              % (sparsity, reduction, pooling, fmt))


def _explore_counts(run):
    """Number of rows where the reference explored at least one block."""
    cfg = run.cfg
    count = 0
    for t, ref in enumerate(run.refs):
        st = run.trace.ref_steps[t]
        for b in range(len(ref.warm)):
            if ref.warm[b]:
                continue
            n = int(st["lengths"][b, 0])
            B = sr.num_blocks_of(n, cfg.block_size)
            m = sr.budget(B, cfg.topk, cfg.block_size, cfg.sparsity)
            nf = min(B, 2)
            e = max(0, min(int(math.floor(cfg.explore * m)), m - nf))
            count += e > 0 and B > m
    return count


@pytest.mark.parametrize("explore", [0.0, 0.05, 0.25, 1.0])
@pytest.mark.parametrize("which", [0, 1, 2])
def test_explore(spin_exec, tmp_path, seed, rng, explore, which):
    """Exploration (SPEC §3.7) with several seeds: a random 63-bit seed, a
    seed >= 2^63 (the seed is uint64) and seed 0.  Enough blocks that
    floor(0.05 * m) >= 1."""
    eseed = [int(rng.integers(1, 2 ** 63)),
             int(rng.integers(2 ** 63, 2 ** 64, dtype=np.uint64)), 0][which]
    cfg = Cfg(heads=1, head_dim=16, page_size=64, max_pages=12, block_size=16,
              topk=16, sparsity=0.3, explore=explore, explore_seed=eseed,
              num_slots=4, key_format="bf16")
    steps = 6
    trace = Trace(cfg, rng, num_pages=13)
    ns = rng.integers(450, cfg.capacity - steps, size=3)
    reqs = make_requests(rng, cfg, trace.num_pages, ns)
    decode_steps(trace, reqs, steps)
    run = run_trace(spin_exec, tmp_path, seed, cfg, trace,
                    "explore=%s seed=%d" % (explore, eseed))
    if explore > 0:
        assert _explore_counts(run) > 0, run.ctx + "\ntest bug: nothing explored"


def test_explore_determinism(spin_exec, tmp_path, seed, rng):
    """Same exploration seed -> identical outputs across two runs; a
    different seed -> the selections differ on at least one step."""
    s1 = int(rng.integers(0, 2 ** 63))
    s2 = s1 ^ (1 << int(rng.integers(0, 63)))
    cfg = Cfg(heads=2, head_dim=16, page_size=16, max_pages=24, block_size=16,
              topk=16, sparsity=0.5, explore=0.25, explore_seed=s1,
              num_slots=3, key_format="f16")
    steps = 16
    trace = Trace(cfg, rng, num_pages=25)
    ns = rng.integers(200, cfg.capacity - steps, size=2)
    reqs = make_requests(rng, cfg, trace.num_pages, ns)
    decode_steps(trace, reqs, steps, shuffle=False)
    run1 = run_trace(spin_exec, tmp_path, seed, cfg, trace, "seed s1", "run1")
    run2 = run_trace(spin_exec, tmp_path, seed, cfg, trace, "seed s1 again", "run2")
    for t in range(steps):
        assert np.array_equal(run1.outs[t][0], run2.outs[t][0]), (
            "%s\nsame seed, different top-K at step %d" % (run1.ctx, t))
        assert np.array_equal(run1.outs[t][1], run2.outs[t][1]), run1.ctx
    cfg2 = dataclasses.replace(cfg, explore_seed=s2)
    run3 = run_trace(spin_exec, tmp_path, seed, cfg2, trace, "seed s2", "run3")
    differ = [t for t in range(steps)
              if not np.array_equal(run1.outs[t][0], run3.outs[t][0])]
    assert differ, ("%s\nseeds %d and %d gave identical selections on all %d "
                    "steps" % (run1.ctx, s1, s2, steps))


# (policy, reduction, pooling, key format, explore)
AGE_CASES = [
    ("block-age", "A1", "max", "bf16", 0.25),
    ("staleness-score", "A1", "mean", "f16", 0.25),
    ("block-age", "A2", "top4", "fp8", 0.5),
    ("staleness-score", "A2", "max", "f32", 0.5),
    ("staleness-score", "A1", "top4", "bf16", 1.0),
    ("block-age", "A1", "mean", "f32", 0.2),
]


def _masks_differ(run, other_refs):
    """Steps at which the reference's masks of ``run`` differ from
    ``other_refs`` (same trace, another configuration)."""
    return [t for t, (a, b) in enumerate(zip(run.refs, other_refs))
            if a.mask is not None and not np.array_equal(a.mask, b.mask)]


@pytest.mark.parametrize("policy,reduction,pooling,fmt,explore", AGE_CASES,
                         ids=["%s-%s-%s-%s-e%g" % c for c in AGE_CASES])
def test_age_policies(spin_exec, tmp_path, seed, rng, policy, reduction, pooling,
                      fmt, explore):
    """staleness-score and block-age exploration (SPEC §7.1) against the
    reference: ragged batches with changing membership (absent requests
    age), resets mid-sequence (last_observed cleared), growing lengths
    (never-scored blocks appear), exact arithmetic so that age and score
    ties are real ties."""
    cfg = Cfg(heads=2, head_dim=16, page_size=16, max_pages=14, block_size=16,
              topk=16, sparsity=0.5, explore=explore, explore_policy=policy,
              explore_seed=int(rng.integers(0, 2 ** 63)), reduction=reduction,
              pooling=pooling, key_format=fmt, num_slots=4)
    steps = 16
    trace = Trace(cfg, rng, num_pages=15)
    ns = [int(rng.integers(120, 160)), int(rng.integers(60, 120)),
          int(rng.integers(160, cfg.capacity - steps - 2))]
    reqs = make_requests(rng, cfg, trace.num_pages, ns)
    resets = {7: {reqs[1].rid}, 11: {reqs[0].rid}}
    decode_steps(trace, reqs, steps, present=0.8, resets=resets)
    run = run_trace(spin_exec, tmp_path, seed, cfg, trace,
                    "explore-policy=%s" % policy)
    assert _explore_counts(run) > 0, run.ctx + "\ntest bug: nothing explored"
    # The policy decides something here: random exploration of the same
    # trace selects other blocks at some step.
    random = run_reference(dataclasses.replace(cfg, explore_policy="random"), trace)
    assert _masks_differ(run, random), (
        run.ctx + "\ntest bug: %s selected the same blocks as random at every "
        "step" % policy)


AGE_MTP_CASES = [(2, "union", "prefix", "block-age", "A1"),
                 (3, "row0", "row0", "staleness-score", "A2"),
                 (1, "union", "row0", "staleness-score", "A1"),
                 (3, "union", "prefix", "block-age", "A2")]


@pytest.mark.parametrize("d,mask,update,policy,reduction", AGE_MTP_CASES,
                         ids=["d%d-%s-%s-%s-%s" % c for c in AGE_MTP_CASES])
def test_age_policies_mtp(spin_exec, tmp_path, seed, rng, d, mask, update, policy,
                          reduction):
    """The age policies under MTP: each committed row marks the union blocks
    it sees (SPEC §7.1), rows rank with their own scores and shared ages."""
    cfg = Cfg(heads=2, head_dim=16, rows=d + 1, page_size=16, max_pages=14,
              block_size=16, topk=12, sparsity=0.6, explore=0.5,
              explore_policy=policy, mtp_mask=mask, mtp_update=update,
              reduction=reduction, num_slots=4, key_format="bf16",
              explore_seed=int(rng.integers(0, 2 ** 63)))
    steps = d + 8
    trace = Trace(cfg, rng, num_pages=15)
    ns = [16 * int(rng.integers(5, 8)) - int(rng.integers(1, d + 1)),
          int(rng.integers(90, 120)),
          int(rng.integers(100, cfg.capacity - steps * (d + 1) - d - 8))]
    reqs = make_requests(rng, cfg, trace.num_pages, ns)
    mtp_steps(trace, reqs, steps, d, present=0.85)
    run = run_trace(spin_exec, tmp_path, seed, cfg, trace,
                    "MTP d=%d %s/%s explore-policy=%s %s" % (d, mask, update, policy,
                                                             reduction))
    assert assert_warmups_dense(run) == 3
    random = run_reference(dataclasses.replace(cfg, explore_policy="random"), trace)
    assert _masks_differ(run, random), run.ctx + "\ntest bug: policy changed nothing"


def test_forced_blocks(spin_exec, tmp_path, seed, rng):
    """Target sparsity 1.0 with K <= bs: after the warm-up only the forced
    blocks (0 and B-1) are scored, even though the middle blocks hold the
    largest scores (their keys are positive, q positive)."""
    bs = 16
    cfg = Cfg(heads=1, head_dim=16, page_size=16, max_pages=8, block_size=bs,
              topk=6, sparsity=1.0, num_slots=4, key_format="f32")
    P = 9
    keys = int_values(rng, (P, 16, 16), -4, 0)
    trace = Trace(cfg, rng, num_pages=P, key_values=keys)
    reqs = make_requests(rng, cfg, P, [int(rng.integers(2 * bs + 1, 7 * bs))
                                       for _ in range(3)])
    for r in reqs:            # the middle pages of each request: large keys
        n_pages = -(-r.n // 16)
        for j in range(1, n_pages - 1):
            trace.keys[r.table[j]] = 4.0
    trace.keys_stored, trace.keys = tio.encode_keys(trace.keys, "f32")
    for t in range(5):
        B = len(reqs)
        q = np.full((B, 1, 1, 16), 1.0, np.float32)
        w = np.ones((B, 1, 1), np.float32)
        trace.add_step([{"req": r, "rows": r.rows(1)} for r in reqs], q=q, w=w)
        # stay within the same pages
    run = run_trace(spin_exec, tmp_path, seed, cfg, trace, "forced blocks")
    for t in range(1, 5):
        oi, osp = run.outs[t]
        for b, r in enumerate(reqs):
            B = sr.num_blocks_of(r.n, bs)
            sel = oi[b, 0][oi[b, 0] >= 0] // bs
            assert set(sel.tolist()) <= {0, B - 1}, (run.ctx, t, b, oi[b, 0])
            assert abs(float(osp[b, 0]) - (1.0 - 2.0 / B)) <= 1e-6, (run.ctx, t, b)


# ---------------------------------------------------------------------------
# Long sequences, warm-up, reset
# ---------------------------------------------------------------------------

LONG_CASES = [
    dict(reduction="A1", pooling="max", key_format="bf16", explore=0.0),
    dict(reduction="A2", pooling="mean", key_format="fp8", explore=0.25),
    dict(reduction="A0", pooling="top4", key_format="f32", explore=0.0),
]


@pytest.mark.parametrize("opts", LONG_CASES,
                         ids=["%(reduction)s-%(pooling)s-%(key_format)s" % c
                              for c in LONG_CASES])
def test_long_sequence(spin_exec, tmp_path, seed, rng, opts):
    """32 decode steps; N and p grow by one per step and the state evolves."""
    cfg = Cfg(heads=2, head_dim=16, page_size=16, max_pages=10, block_size=16,
              topk=12, sparsity=0.6, num_slots=3,
              explore_seed=int(rng.integers(0, 2 ** 63)), **opts)
    steps = 32
    trace = Trace(cfg, rng, num_pages=11)
    ns = [int(rng.integers(1, 20)), int(rng.integers(40, 90)),
          int(rng.integers(90, cfg.capacity - steps - 5))]
    gaps = [0, 0, int(rng.integers(0, 5))]
    reqs = make_requests(rng, cfg, trace.num_pages, ns, gaps)
    decode_steps(trace, reqs, steps, present=1.0)
    run = run_trace(spin_exec, tmp_path, seed, cfg, trace, "32-step sequence")
    assert assert_warmups_dense(run) == 3


def test_warmup_equals_dense(spin_exec, tmp_path, seed, rng):
    """The first step of a request selects every block (whatever the target
    sparsity): its output is the dense top-K."""
    cfg = Cfg(heads=8, head_dim=64, page_size=64, max_pages=4, block_size=16,
              topk=20, sparsity=0.9, num_slots=5, key_format="fp8")
    trace = Trace(cfg, rng, num_pages=6)
    ns = rng.integers(1, cfg.capacity - 3, size=5)
    reqs = make_requests(rng, cfg, trace.num_pages, ns)
    decode_steps(trace, reqs, 2)
    run = run_trace(spin_exec, tmp_path, seed, cfg, trace, "warm-up")
    assert assert_warmups_dense(run) >= 5


def test_reset_mid_sequence(spin_exec, tmp_path, seed, rng):
    """reset.npy: a reset request's next step is a warm-up again (dense),
    and its state restarts from zero; other requests are unaffected."""
    cfg = Cfg(heads=4, head_dim=16, page_size=16, max_pages=12, block_size=16,
              topk=10, sparsity=0.5, num_slots=4, key_format="f16",
              pooling="mean", explore=0.5,
              explore_seed=int(rng.integers(0, 2 ** 63)))
    steps = 14
    trace = Trace(cfg, rng, num_pages=13)
    ns = rng.integers(60, cfg.capacity - steps - 1, size=3)
    reqs = make_requests(rng, cfg, trace.num_pages, ns)
    resets = {0: {reqs[2].rid},                       # reset at first sight
              5: {reqs[0].rid},
              6: {reqs[1].rid},
              9: {reqs[0].rid, reqs[1].rid}}
    decode_steps(trace, reqs, steps, present=1.0, resets=resets)
    run = run_trace(spin_exec, tmp_path, seed, cfg, trace, "reset")
    assert assert_warmups_dense(run) == 3 + 4


# ---------------------------------------------------------------------------
# MTP (speculative decoding)
# ---------------------------------------------------------------------------

def mtp_steps(trace, reqs, num_steps, d, reset_at=None, present=1.0):
    """Verification steps with R = d + 1 rows (positions p..p+d, lengths
    N..N+d).  Each request goes through every acceptance count 0..d (in a
    random order, then random ones); the next step of a request (possibly
    several steps later when ``present`` < 1) carries the accepted count of
    its previous step and advances by accepted + 1."""
    rng = trace.rng
    pending = {}                  # rid -> accepted count to report next
    schedule = {r.rid: list(rng.permutation(d + 1)) for r in reqs}
    for t in range(num_steps):
        order = [reqs[i] for i in rng.permutation(len(reqs))
                 if t == 0 or rng.random() < present]
        if not order:
            order = [reqs[0]]
        entries = []
        for r in order:
            e = {"req": r, "rows": r.rows(d + 1),
                 "accepted": pending.get(r.rid, -1)}
            if reset_at is not None:
                e["reset"] = (t, r.rid) in reset_at
                if e["reset"]:
                    # spin-exec resets before committing: the reset request
                    # has nothing to commit, so accepted must be -1.
                    e["accepted"] = -1
            entries.append(e)
        trace.add_step(entries)
        for r in order:
            sched = schedule[r.rid]
            a = int(sched.pop(0)) if sched else int(rng.integers(0, d + 1))
            pending[r.rid] = a
            r.n += a + 1
    for r in reqs:
        assert r.p + d < trace.cfg.capacity + 4 * (d + 1), "test bug"


MTP_CASES = [(1, "union", "prefix"), (2, "union", "prefix"),
             (3, "union", "prefix"), (4, "union", "prefix"),
             (3, "row0", "prefix"), (3, "union", "row0"),
             (2, "row0", "row0"), (4, "row0", "prefix")]


@pytest.mark.parametrize("d,mask,update", MTP_CASES,
                         ids=["d%d-%s-%s" % c for c in MTP_CASES])
def test_mtp(spin_exec, tmp_path, seed, rng, d, mask, update):
    red = ["A1", "A2", "A0"][d % 3]
    cfg = Cfg(heads=4, head_dim=16, rows=d + 1, page_size=16, max_pages=12,
              block_size=16, topk=12, sparsity=0.6, mtp_mask=mask,
              mtp_update=update, reduction=red, num_slots=4,
              key_format=tio.KEY_FORMATS[d % 4],
              # spin-sparsify-indexer rejects explore > 0 with A0
              explore=0.25 if d in (1, 3) else 0.0,
              explore_seed=int(rng.integers(0, 2 ** 63)))
    steps = d + 5
    trace = Trace(cfg, rng, num_pages=13)
    # one request starts just below a block boundary (its rows straddle it),
    # one has a position gap
    ns = [16 * int(rng.integers(1, 4)) - int(rng.integers(1, d + 1)),
          int(rng.integers(10, 60)),
          int(rng.integers(10, cfg.capacity - steps * (d + 1) - d - 8))]
    gaps = [0, 0, int(rng.integers(1, 6))]
    reqs = make_requests(rng, cfg, trace.num_pages, ns, gaps)
    mtp_steps(trace, reqs, steps, d, present=0.85)
    run = run_trace(spin_exec, tmp_path, seed, cfg, trace,
                    "MTP d=%d mask=%s update=%s reduction=%s" % (d, mask, update, red))
    assert assert_warmups_dense(run) == 3


def test_mtp_reset(spin_exec, tmp_path, seed, rng):
    """A reset drops the buffered rows of a request (accepted = -1 in that
    step: nothing to commit); that verification step is a warm-up."""
    d = 3
    cfg = Cfg(heads=2, head_dim=16, rows=d + 1, page_size=16, max_pages=10,
              block_size=16, topk=10, sparsity=0.7, num_slots=3)
    steps = 8
    trace = Trace(cfg, rng, num_pages=11)
    ns = rng.integers(20, cfg.capacity - steps * (d + 1) - d - 1, size=2)
    reqs = make_requests(rng, cfg, trace.num_pages, ns)
    mtp_steps(trace, reqs, steps, d,
              reset_at={(4, reqs[0].rid), (6, reqs[1].rid)})
    run = run_trace(spin_exec, tmp_path, seed, cfg, trace, "MTP reset")
    assert assert_warmups_dense(run) == 4


# ---------------------------------------------------------------------------
# Dense mode
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("fmt,rows", [("bf16", 1), ("f16", 3), ("f32", 1),
                                      ("fp8", 2)])
def test_dense_mode(spin_exec, tmp_path, seed, rng, fmt, rows):
    """--dense: the dense indexer + top-K over all N slots of every row,
    every step (no state); realized sparsity 0."""
    cfg = Cfg(heads=16, head_dim=32, rows=rows, page_size=64, max_pages=3,
              block_size=64, topk=int(rng.integers(1, 100)), dense=True,
              key_format=fmt, num_slots=4)
    trace = Trace(cfg, rng, num_pages=5)
    ns = rng.integers(0, cfg.capacity - 3 * rows - 3, size=4)
    reqs = make_requests(rng, cfg, trace.num_pages, ns,
                         [int(rng.integers(0, 3)) for _ in ns])
    if rows == 1:
        decode_steps(trace, reqs, 3)
    else:
        mtp_steps(trace, reqs, 3, rows - 1)
        for st in trace.steps:          # no state in dense mode: see
            st["accepted"][:] = -1      # test_dense_replays_mtp_trace
    run_trace(spin_exec, tmp_path, seed, cfg, trace, "dense")


def test_dense_replays_mtp_trace(spin_exec, tmp_path, seed, rng):
    """The same MTP trace (with its accepted counts) runs with and without
    --dense: the dense run has no SPIN state, so accepted is irrelevant to it
    and must not be rejected; its top-K is the reference dense top-K (the
    ground truth of the miss-rate metrics, SPEC §5)."""
    d = 2
    cfg = Cfg(heads=4, head_dim=16, rows=d + 1, page_size=16, max_pages=8,
              block_size=16, topk=12, sparsity=0.5, num_slots=3)
    trace = Trace(cfg, rng, num_pages=9)
    ns = rng.integers(10, cfg.capacity - 4 * (d + 1) - d - 1, size=2)
    reqs = make_requests(rng, cfg, trace.num_pages, ns)
    mtp_steps(trace, reqs, 4, d)
    run_trace(spin_exec, tmp_path, seed, cfg, trace, "MTP SPIN", "spin")
    dense = dataclasses.replace(cfg, dense=True)
    run_trace(spin_exec, tmp_path, seed, dense, trace, "same trace --dense",
              "dense")


@pytest.mark.parametrize("fmt", ["f16", "f32"])
def test_dense_mode_noninteger(spin_exec, tmp_path, seed, rng, fmt):
    cfg = Cfg(heads=64, head_dim=128, page_size=64, max_pages=2, block_size=64,
              topk=40, dense=True, key_format=fmt, num_slots=4)
    trace = Trace(cfg, rng, num_pages=3, exact=False)
    ns = rng.integers(1, cfg.capacity - 2, size=3)
    reqs = make_requests(rng, cfg, trace.num_pages, ns)
    decode_steps(trace, reqs, 2)
    run_trace(spin_exec, tmp_path, seed, cfg, trace, "dense non-integer",
              mode="tolerant")


@pytest.mark.parametrize("fmt", ["bf16", "fp8"])
def test_spin_noninteger(spin_exec, tmp_path, seed, rng, fmt):
    """Normal floats: a warm-up and a few SPIN steps, compared up to score
    near-ties (1e-5 relative)."""
    cfg = Cfg(heads=8, head_dim=64, page_size=64, max_pages=4, block_size=16,
              topk=20, sparsity=0.5, key_format=fmt, num_slots=4)
    trace = Trace(cfg, rng, num_pages=6, exact=False)
    ns = rng.integers(30, cfg.capacity - 5, size=3)
    reqs = make_requests(rng, cfg, trace.num_pages, ns)
    decode_steps(trace, reqs, 4)
    run_trace(spin_exec, tmp_path, seed, cfg, trace, "SPIN non-integer",
              mode="tolerant")


# ---------------------------------------------------------------------------
# Non-finite inputs
# ---------------------------------------------------------------------------

def test_nan_q_isolated(spin_exec, tmp_path, seed, rng):
    """A NaN in one request's q (one element of one head) makes every score
    of that row NaN (ReLU and the head sum propagate NaN): NaN is never
    selected (all -1), NaN never enters the EMA state, and the other
    requests' outputs are exactly those of the same trace without the NaN."""
    cfg = Cfg(heads=4, head_dim=16, page_size=16, max_pages=8, block_size=16,
              topk=10, sparsity=0.6, num_slots=4, key_format="bf16")
    steps = 8
    nan_step, nan_b = 3, 1
    trace = Trace(cfg, rng, num_pages=9)
    ns = rng.integers(30, cfg.capacity - steps - 1, size=3)
    reqs = make_requests(rng, cfg, trace.num_pages, ns)
    clean = Trace(cfg, rng, num_pages=9, key_values=trace.keys)
    for t in range(steps):
        entries = [{"req": r, "rows": r.rows(1)} for r in reqs]
        q = trace.new_q(len(reqs))
        w = trace.new_w(len(reqs))
        clean.add_step(entries, q=q.copy(), w=w)
        if t == nan_step:
            q[nan_b, 0, int(rng.integers(4)), int(rng.integers(16))] = np.nan
        trace.add_step(entries, q=q, w=w)
        for r in reqs:
            r.n += 1
    run = run_trace(spin_exec, tmp_path, seed, cfg, trace, "NaN in q", "nan")
    ref_clean = run_trace(spin_exec, tmp_path, seed, cfg, clean, "clean", "clean")
    oi, _ = run.outs[nan_step]
    assert np.all(oi[nan_b] == -1), ("%s\nNaN scores were selected: %s"
                                     % (run.ctx, _fmt_row(oi[nan_b])))
    for t in range(steps):
        for b in range(len(reqs)):
            if b == nan_b:
                continue
            assert np.array_equal(run.outs[t][0][b], ref_clean.outs[t][0][b]), (
                "%s\nrequest %d at step %d changed by a NaN in another request"
                % (run.ctx, reqs[b].rid, t))


@pytest.mark.parametrize("fmt", tio.KEY_FORMATS)
def test_nonfinite_keys_and_q(spin_exec, tmp_path, seed, rng, fmt):
    """NaN and +-inf keys (fp8: the NaN pattern 0x7F only) and an inf in a
    q: NaN scores are never selected, +-inf scores are ordinary values (K
    large enough that -inf slots show in the tail), non-finite scores never
    enter the EMA state (the later steps' selections match the reference)."""
    cfg = Cfg(heads=2, head_dim=16, page_size=16, max_pages=6, block_size=16,
              topk=48, sparsity=0.5, num_slots=4, key_format=fmt)
    P = 7
    keys = int_values(rng, (P, 16, 16))
    specials = [np.nan, np.inf, -np.inf] if fmt != "fp8" else [np.nan]
    for _ in range(10):
        keys[int(rng.integers(P)), int(rng.integers(16)), int(rng.integers(16))] = \
            specials[int(rng.integers(len(specials)))]
    trace = Trace(cfg, rng, num_pages=P, key_values=keys)
    ns = rng.integers(20, cfg.capacity - 8, size=3)
    reqs = make_requests(rng, cfg, P, ns)
    for t in range(6):
        B = len(reqs)
        q = trace.new_q(B)
        if t in (1, 3):
            q[2, 0, 0, int(rng.integers(16))] = np.inf if t == 1 else -np.inf
        trace.add_step([{"req": r, "rows": r.rows(1)} for r in reqs], q=q)
        for r in reqs:
            r.n += 1
    run_trace(spin_exec, tmp_path, seed, cfg, trace, "non-finite (%s)" % fmt)


# ---------------------------------------------------------------------------
# Exact decoding of every element format, EMA decay, budget rounding,
# capacity, request ids
# ---------------------------------------------------------------------------

def _random_key_bits(rng, shape, kind):
    """Random finite key bit patterns of a format (numpy values, decoded)."""
    if kind == "fp8":
        bits = rng.integers(0, 256, size=shape).astype(np.uint8)
        bits[(bits & 0x7F) == 0x7F] = 0x7E           # no NaN
        return sr.fp8_e4m3_to_f32(bits)
    if kind in ("bf16", "bf16-subnormal"):
        sign = rng.integers(0, 2, size=shape).astype(np.uint32) << 15
        man = rng.integers(0, 128, size=shape).astype(np.uint32)
        if kind == "bf16":
            exp = rng.integers(127 - 20, 127 + 21, size=shape).astype(np.uint32)
        else:                                        # mostly subnormal
            exp = np.where(rng.random(shape) < 0.7, 0,
                           rng.integers(1, 4, size=shape)).astype(np.uint32)
        bits = (sign | (exp << 7) | man).astype(np.uint16)
        return sr.bf16_to_f32(bits)
    if kind == "f16":
        bits = rng.integers(0, 0x7C00, size=shape).astype(np.uint16)  # finite
        bits |= (rng.integers(0, 2, size=shape) << 15).astype(np.uint16)
        return sr.f16_to_f32(bits)
    if kind == "f32":
        man = rng.uniform(1.0, 2.0, size=shape)
        exp = rng.integers(-10, 11, size=shape)
        sign = np.where(rng.random(shape) < 0.5, -1.0, 1.0)
        return (sign * np.ldexp(man, exp)).astype(np.float32)
    raise ValueError(kind)


DECODE_CASES = [("fp8", False), ("bf16", False), ("f16", False), ("f32", False),
                ("bf16-subnormal", False), ("fp8", True), ("f16", True)]


@pytest.mark.parametrize("kind,dense", DECODE_CASES,
                         ids=["%s%s" % (k, "-dense" if d else "")
                              for k, d in DECODE_CASES])
def test_key_decode_exact(spin_exec, tmp_path, seed, rng, kind, dense):
    """Random bit patterns of the key format (fp8: all 254 finite patterns
    incl. subnormals and +-448; f16: all finite incl. subnormals; bf16:
    exponents 2^-20..2^20, or mostly f32-subnormal values) with one-hot
    queries (+1 on head 0, -1 on head 1) and w = [1, 0.5]: every score is
    ReLU(k[d0]) + 0.5 * ReLU(-k[d1]), exact in both implementations, so the
    top-K checks the decoding of every pattern bit for bit."""
    fmt = "bf16" if kind.startswith("bf16") else kind
    cfg = Cfg(heads=2, head_dim=16, page_size=16, max_pages=8, block_size=16,
              topk=24, sparsity=0.5, key_format=fmt, num_slots=4, dense=dense)
    P = 9
    keys = _random_key_bits(rng, (P, 16, 16), kind)
    scales = np.exp2(rng.integers(-2, 3, size=(P, 16))) if fmt == "fp8" else None
    trace = Trace(cfg, rng, num_pages=P, key_values=keys, scales=scales)
    assert np.array_equal(trace.keys, keys), "test bug: keys not exact"
    ns = rng.integers(20, cfg.capacity - 6, size=3)
    reqs = make_requests(rng, cfg, P, ns)
    for t in range(4):
        B = len(reqs)
        q = np.zeros((B, 1, 2, 16), np.float32)
        for b in range(B):
            q[b, 0, 0, rng.integers(16)] = 1.0
            q[b, 0, 1, rng.integers(16)] = -1.0
        w = np.tile(np.array([1.0, 0.5], np.float32), (B, 1, 1))
        trace.add_step([{"req": r, "rows": r.rows(1)} for r in reqs], q=q, w=w)
        for r in reqs:
            r.n += 1
    run_trace(spin_exec, tmp_path, seed, cfg, trace, "decode %s" % kind)


@pytest.mark.parametrize("alpha,reduction", [(0.0, "A1"), (0.3, "A1"),
                                             (0.75, "A2"), (0.9, "A1"),
                                             (1.0, "A1")])
def test_ema_decay(spin_exec, tmp_path, seed, rng, alpha, reduction):
    """EMA decays other than 0.5: state arithmetic is float32 with every
    product and the sum rounded (no FMA), b = float32(1 - alpha) with the
    subtraction in double (reference docstring).  Mean pooling, so that the
    predicted block scores depend on every bit of the state."""
    cfg = Cfg(heads=2, head_dim=16, page_size=16, max_pages=10, block_size=16,
              topk=10, sparsity=0.6, ema_decay=alpha, pooling="mean",
              reduction=reduction, num_slots=3, key_format="f32")
    steps = 16
    trace = Trace(cfg, rng, num_pages=11)
    ns = rng.integers(40, cfg.capacity - steps - 1, size=3)
    reqs = make_requests(rng, cfg, trace.num_pages, ns)
    decode_steps(trace, reqs, steps)
    run_trace(spin_exec, tmp_path, seed, cfg, trace, "ema-decay %s" % alpha)


F32 = np.float32


def _ema_ref(alpha, v, z):
    """The reference's EMA step: f32(f32(a32 * v) + f32(b32 * z)) with
    b32 = f32(1 - alpha) (the subtraction in double)."""
    a32, b32 = F32(alpha), F32(1.0 - alpha)
    return F32(F32(a32 * F32(v)) + F32(b32 * F32(z)))


# Other plausible float32 EMA formulas; used only to choose inputs where the
# reference's rounding decides a block ranking (the reference stays the
# oracle).
_EMA_ALTERNATIVES = {
    "fma": lambda a, v, z: F32(np.float64(F32(a)) * np.float64(v)
                               + np.float64(F32(F32(1.0 - a) * F32(z)))),
    "one-minus-in-f32": lambda a, v, z: F32(F32(F32(a) * F32(v))
                                            + F32((F32(1) - F32(a)) * F32(z))),
    "lerp": lambda a, v, z: F32(F32(v) + F32(F32(1.0 - a) * F32(F32(z) - F32(v)))),
    "double": lambda a, v, z: F32(np.float64(F32(a)) * np.float64(v)
                                  + np.float64(F32(1.0 - a)) * np.float64(z)),
}


def _ema_tie_case(rng, alpha, alt, tries=4000):
    """(zx1, zx2, zy1) such that, with block X observed twice (zx1, then
    zx2) and block Y once (zy1): X ranks above Y after the first
    observation, the reference ties X and Y after X's second one, and the
    alternative formula ranks X strictly above Y (or below) there."""
    fn = _EMA_ALTERNATIVES[alt]
    if alt == "one-minus-in-f32" and F32(1) - F32(alpha) == F32(1.0 - alpha):
        return None                     # the same formula for this alpha
    for _ in range(tries):
        zx1 = F32(rng.uniform(1.0, 2.0) * 2.0 ** int(rng.integers(0, 6)))
        zx2 = F32(rng.uniform(0.0, 1.0 - alpha) * float(zx1) * 0.9)
        vx = _ema_ref(alpha, _ema_ref(alpha, 0.0, zx1), zx2)
        b32 = F32(1.0 - alpha)
        y0 = F32(vx / b32)
        for k in range(-4, 5):
            zy1 = F32(np.nextafter(y0, F32(np.inf) if k > 0 else F32(-np.inf),
                                   dtype=np.float32)) if k else y0
            for _ in range(abs(k) - 1):
                zy1 = np.nextafter(zy1, F32(np.inf) if k > 0 else F32(-np.inf),
                                   dtype=np.float32)
            if _ema_ref(alpha, 0.0, zy1) != vx or not zy1 < zx1:
                continue
            ax = fn(alpha, fn(alpha, 0.0, zx1), zx2)
            ay = fn(alpha, 0.0, zy1)
            if ax != ay and fn(alpha, 0.0, zx1) > ay:
                return float(zx1), float(zx2), float(zy1)
    return None


@pytest.mark.parametrize("alpha", [0.9, 0.3, 0.75])
@pytest.mark.parametrize("reduction", ["A1", "A2"])
def test_ema_rounding_ties(spin_exec, tmp_path, seed, rng, alpha, reduction):
    """The EMA arithmetic decides a block ranking bit for bit.

    4 blocks of 16 (N = 64, p = 63 at every step), budget m = 3: blocks 0
    and 3 are forced (scores 0), one of blocks 1 (Y) and 2 (X) is exploited.
    Step 0 (warm-up) observes zy1 in Y and zx1 in X; step 1 exploits X
    (zx1 > zy1) and observes zx2 there; at step 2 the reference's EMA values
    of X and Y are exactly equal, so Y (lower index) is exploited, while a
    different float32 EMA formula (FMA, 1 - alpha in f32, lerp, double
    accumulation; one request per formula) would rank them apart.  Scores
    are exact (one-hot q, w = 1, f32 keys), so only the state arithmetic
    can differ."""
    bs, nb = 16, 4
    cfg = Cfg(heads=1, head_dim=16, page_size=16, max_pages=nb, block_size=bs,
              topk=4, sparsity=0.25, ema_decay=alpha, reduction=reduction,
              key_format="f32", num_slots=8)
    cases = []
    for alt in _EMA_ALTERNATIVES:
        found = _ema_tie_case(rng, alpha, alt)
        if found is not None:
            cases.append((alt, found))
    assert cases, "test bug: no sensitive case for alpha %s" % alpha
    P = nb * len(cases)
    keys = np.zeros((P, bs, 16), np.float32)
    reqs = []
    ids = unique_ids(rng, len(cases))
    for c, (alt, (zx1, zx2, zy1)) in enumerate(cases):
        table = np.arange(c * nb, (c + 1) * nb, dtype=np.int32)
        ys, xs = int(rng.integers(bs)), int(rng.integers(bs))
        keys[table[1], ys, 0] = zy1          # step 0 column
        keys[table[2], xs, 0] = zx1
        keys[table[2], xs, 1] = zx2          # step 1 column
        keys[table[1], ys, 2] = 1.0          # step 2 column
        keys[table[2], xs, 2] = 1.0
        reqs.append(Req(ids[c], table, nb * bs))
    trace = Trace(cfg, rng, num_pages=P, key_values=keys)
    for t in range(3):
        B = len(reqs)
        q = np.zeros((B, 1, 1, 16), np.float32)
        q[:, 0, 0, t] = 1.0
        w = np.ones((B, 1, 1), np.float32)
        trace.add_step([{"req": r, "rows": r.rows(1)} for r in reqs], q=q, w=w)
    run = run_trace(spin_exec, tmp_path, seed, cfg, trace,
                    "EMA rounding ties alpha=%s %s (cases %s)"
                    % (alpha, reduction, cases))
    # self-check of the construction: the reference exploited X at step 1
    # and Y at step 2
    for b in range(len(reqs)):
        assert run.refs[1].mask[b].tolist() == [True, False, True, True], run.ctx
        assert run.refs[2].mask[b].tolist() == [True, True, False, True], run.ctx


@pytest.mark.parametrize("pooling", ["mean", "top4"])
@pytest.mark.parametrize("reduction", ["A1", "A2"])
def test_pooling_sum_order(spin_exec, tmp_path, seed, rng, pooling, reduction):
    """Mean / top4 pooling sum sequentially in float32 (mean: increasing
    slot order; top4: the 4 largest in descending order), starting from +0.

    4 blocks of 16, budget 3 (blocks 0 and 3 forced).  After the warm-up
    (EMA decay 0.5, so the state is exactly z / 2), block Y (1) holds
    [2^24, 0, 0, ...] and block X (2) holds [2^24, 1, 1, ...] (as z: 2^25
    and 2).  Sequentially 2^24 + 1 rounds back to 2^24 every time, so X and
    Y tie and Y (lower index) is exploited; summing in any other order
    (reversed, pairwise, by SIMD lanes) gives X > Y.  For A2 the same values
    are pooled as observations."""
    bs, nb = 16, 4
    cfg = Cfg(heads=1, head_dim=16, page_size=16, max_pages=nb, block_size=bs,
              topk=4, sparsity=0.25, ema_decay=0.5, pooling=pooling,
              reduction=reduction, key_format="f32", num_slots=4)
    keys = np.zeros((nb, bs, 16), np.float32)
    keys[1, 0, 0] = 2.0 ** 25
    keys[2, :, 0] = 2.0
    keys[2, 0, 0] = 2.0 ** 25
    keys[1:3, :, 1] = 1.0            # step 1: reveal the exploited block
    trace = Trace(cfg, rng, num_pages=nb, key_values=keys)
    req = Req(unique_ids(rng, 1)[0], np.arange(nb), nb * bs)
    for t in range(2):
        q = np.zeros((1, 1, 1, 16), np.float32)
        q[0, 0, 0, t] = 1.0
        trace.add_step([{"req": req, "rows": req.rows(1)}], q=q,
                       w=np.ones((1, 1, 1), np.float32))
    run = run_trace(spin_exec, tmp_path, seed, cfg, trace,
                    "pooling %s sum order (%s)" % (pooling, reduction))
    assert run.refs[1].mask[0].tolist() == [True, True, False, True], (
        run.ctx + "\ntest bug: the reference did not tie")


def _budget_sensitive(rho, num_blocks):
    """Whether the budget's 1e-9 guard matters for B blocks, or float32
    arithmetic would give another integer."""
    exact = math.ceil((1.0 - rho) * num_blocks - 1e-9)
    naive = math.ceil((1.0 - rho) * num_blocks)
    f32 = math.ceil(float(np.float32(1.0) - np.float32(rho)) * num_blocks - 1e-9)
    return exact != naive or exact != f32


@pytest.mark.parametrize("rho", [0.1, 0.3, 0.4, 0.6, 0.7, 0.8])
def test_budget_rounding(spin_exec, tmp_path, seed, rng, rho):
    """Budget m = min(B, max(ceil(K/b), ceil((1 - rho) * B - 1e-9))) over B =
    1..40 blocks, including the B where (1 - rho) * B lands just above an
    integer in double (the 1e-9 guard) or where float32 would differ; the
    realized sparsity shows m exactly."""
    bs = 16
    cfg = Cfg(heads=1, head_dim=16, page_size=64, max_pages=11, block_size=bs,
              topk=4, sparsity=rho, num_slots=10, key_format="bf16")
    trace = Trace(cfg, rng, num_pages=12)
    sensitive = [B for B in range(3, 41) if _budget_sensitive(rho, B)]
    others = [int(x) for x in rng.choice(np.arange(1, 41), size=10 - min(
        5, len(sensitive)), replace=False)]
    targets = (sensitive[:5] if len(sensitive) <= 5 else
               [int(x) for x in rng.choice(sensitive, 5, replace=False)]) + others
    # N such that ceil(N / bs) == target for all 3 steps
    ns = [bs * (B - 1) + int(rng.integers(1, bs - 2)) for B in targets]
    reqs = make_requests(rng, cfg, trace.num_pages, ns)
    decode_steps(trace, reqs, 3, present=1.0)
    run_trace(spin_exec, tmp_path, seed, cfg, trace, "budget rho=%s (B %s)"
              % (rho, targets))


def test_full_capacity(spin_exec, tmp_path, seed, rng):
    """Rows up to the capacity: N == MB * S with p == C - 1, and p == C - 1
    with a smaller N (largest diagonal offsets)."""
    cfg = Cfg(heads=4, head_dim=16, page_size=16, max_pages=6, block_size=16,
              topk=12, sparsity=0.5, num_slots=3, pooling="top4")
    C = cfg.capacity
    steps = 4
    trace = Trace(cfg, rng, num_pages=7)
    reqs = make_requests(rng, cfg, trace.num_pages,
                         [C - steps + 1, C - steps - 30, 5],
                         [0, 30, C - 5 - steps])
    decode_steps(trace, reqs, steps, present=1.0)
    last = trace.entries[-1]
    assert any(e["rows"][0] == (C - 1, C) for e in last), "test bug"
    run_trace(spin_exec, tmp_path, seed, cfg, trace, "full capacity")


def test_request_id_extremes(spin_exec, tmp_path, seed, rng):
    """Request ids are i64; the exploration hash reads them as uint64 (two's
    complement): -1, INT64_MIN, INT64_MAX and 0 with exploration."""
    cfg = Cfg(heads=1, head_dim=16, page_size=16, max_pages=40, block_size=16,
              topk=16, sparsity=0.5, explore=0.25,
              explore_seed=int(rng.integers(0, 2 ** 63)), num_slots=4)
    trace = Trace(cfg, rng, num_pages=41)
    reqs = make_requests(rng, cfg, trace.num_pages,
                         [int(x) for x in rng.integers(300, 600, size=4)])
    for r, rid in zip(reqs, [-1, -2 ** 63, 2 ** 63 - 1, 0]):
        r.rid = rid
    decode_steps(trace, reqs, 5)
    run_trace(spin_exec, tmp_path, seed, cfg, trace, "extreme request ids")


# ---------------------------------------------------------------------------
# Invalid input
# ---------------------------------------------------------------------------

def _error_trace(rng, cfg, ns):
    trace = Trace(cfg, rng, num_pages=cfg.max_pages + 2)
    reqs = make_requests(rng, cfg, trace.num_pages, ns)
    return trace, reqs


def _names_value(message, trace_dir, value):
    """Whether ``message`` (minus the trace path) holds ``value`` as a whole
    token (a number not preceded or followed by digits or a sign)."""
    message = message.replace(str(trace_dir), "<trace>")
    if isinstance(value, (int, np.integer)):
        return re.search(r"(?<![\d.+-])%s(?![\d.])" % re.escape(str(int(value))),
                         message) is not None
    return str(value) in message


def _expect_failure(exe, tmp_path, seed, cfg, trace, needles, what):
    trace_dir = str(tmp_path / "trace")
    trace.write(trace_dir)
    ctx = context(seed, cfg, trace_dir, what)
    proc = tio.run_spin_exec(exe, trace_dir, cfg.argv())
    assert proc.returncode != 0, ("%s\nspin-exec accepted invalid input (%s)\n"
                                  "stdout: %s" % (ctx, what, proc.stdout[-2000:]))
    assert proc.stderr.strip(), "%s\nno message on stderr" % ctx
    print("spin-exec stderr (%s):\n%s" % (what, proc.stderr))
    assert any(_names_value(proc.stderr, trace_dir, n) for n in needles), (
        "%s\nthe message does not name the offending value (any of %s):\n%s"
        % (ctx, needles, proc.stderr[-2000:]))
    return proc


def test_error_length_beyond_capacity(spin_exec, tmp_path, seed, rng):
    cfg = Cfg(heads=2, head_dim=16, page_size=16, max_pages=4, block_size=16,
              topk=8, num_slots=4)
    trace, reqs = _error_trace(rng, cfg, [10, 20])
    trace.add_step([{"req": r, "rows": r.rows(1)} for r in reqs])
    bad = cfg.capacity + 1 + int(rng.integers(0, 50))
    reqs[1].n = bad
    trace.add_step([{"req": r, "rows": r.rows(1)} for r in reqs])
    _expect_failure(spin_exec, tmp_path, seed, cfg, trace, [bad],
                    "length %d > capacity %d" % (bad, cfg.capacity))


def test_error_length_beyond_position(spin_exec, tmp_path, seed, rng):
    cfg = Cfg(heads=2, head_dim=16, page_size=16, max_pages=8, block_size=16,
              topk=8, num_slots=4)
    trace, reqs = _error_trace(rng, cfg, [10, 20])
    n = int(rng.integers(60, 100))
    p = n - 1 - int(rng.integers(2, 20))
    entries = [{"req": reqs[0], "rows": reqs[0].rows(1)},
               {"req": reqs[1], "rows": [(p, n)]}]
    trace.add_step(entries)
    _expect_failure(spin_exec, tmp_path, seed, cfg, trace, [p, n],
                    "N=%d > p+1 (p=%d)" % (n, p))


@pytest.mark.parametrize("kind", ["negative", "too-large"])
def test_error_block_table_entry(spin_exec, tmp_path, seed, rng, kind):
    cfg = Cfg(heads=2, head_dim=16, page_size=16, max_pages=4, block_size=16,
              topk=8, num_slots=4)
    trace, reqs = _error_trace(rng, cfg, [10, 40])
    P = trace.num_pages
    bad = -int(rng.integers(1, 1000)) if kind == "negative" \
        else P + int(rng.integers(0, 1000))
    bt = np.stack([r.table for r in reqs]).astype(np.int32)
    bt[1, int(rng.integers(0, 3))] = bad       # a visible page of N = 40
    trace.add_step([{"req": r, "rows": r.rows(1)} for r in reqs], block_table=bt)
    _expect_failure(spin_exec, tmp_path, seed, cfg, trace, [bad],
                    "block-table entry %d outside [0, %d)" % (bad, P))


def test_error_duplicate_request(spin_exec, tmp_path, seed, rng):
    cfg = Cfg(heads=2, head_dim=16, page_size=16, max_pages=4, block_size=16,
              topk=8, num_slots=4)
    trace, reqs = _error_trace(rng, cfg, [10, 20, 30])
    trace.add_step([{"req": r, "rows": r.rows(1)} for r in reqs])
    dup = Req(reqs[0].rid, reqs[2].table, 25)
    trace.add_step([{"req": r, "rows": r.rows(1)} for r in (reqs[0], reqs[1], dup)])
    _expect_failure(spin_exec, tmp_path, seed, cfg, trace, [reqs[0].rid],
                    "duplicate request id %d" % reqs[0].rid)


def test_error_mtp_missing_accepted(spin_exec, tmp_path, seed, rng):
    d = 2
    cfg = Cfg(heads=2, head_dim=16, rows=d + 1, page_size=16, max_pages=4,
              block_size=16, topk=8, num_slots=4)
    trace, reqs = _error_trace(rng, cfg, [10, 20])
    trace.add_step([{"req": r, "rows": r.rows(d + 1), "accepted": -1} for r in reqs])
    for r in reqs:
        r.n += 1
    trace.add_step([{"req": reqs[0], "rows": reqs[0].rows(d + 1), "accepted": 0},
                    {"req": reqs[1], "rows": reqs[1].rows(d + 1), "accepted": -1}])
    _expect_failure(spin_exec, tmp_path, seed, cfg, trace, [reqs[1].rid, "-1"],
                    "buffered rows, accepted = -1 (request %d)" % reqs[1].rid)


@pytest.mark.parametrize("kind", ["equal-obs-rows", "large", "negative"])
def test_error_mtp_accepted_out_of_range(spin_exec, tmp_path, seed, rng, kind):
    d = 3
    cfg = Cfg(heads=2, head_dim=16, rows=d + 1, page_size=16, max_pages=4,
              block_size=16, topk=8, num_slots=4)
    trace, reqs = _error_trace(rng, cfg, [10, 20])
    trace.add_step([{"req": r, "rows": r.rows(d + 1), "accepted": -1} for r in reqs])
    for r in reqs:
        r.n += 1
    bad = {"equal-obs-rows": d + 1, "large": int(rng.integers(50, 10 ** 6)),
           "negative": -int(rng.integers(2, 10 ** 6))}[kind]
    trace.add_step([{"req": reqs[0], "rows": reqs[0].rows(d + 1), "accepted": 1},
                    {"req": reqs[1], "rows": reqs[1].rows(d + 1), "accepted": bad}])
    _expect_failure(spin_exec, tmp_path, seed, cfg, trace, [bad],
                    "accepted = %d with %d buffered rows" % (bad, d + 1))


@pytest.mark.parametrize("option,value", [("--sparsity", "1.5"),
                                          ("--pooling", "median"),
                                          ("--key-format", "int4")])
def test_error_bad_option(spin_exec, tmp_path, seed, rng, option, value):
    cfg = Cfg(heads=2, head_dim=16, page_size=16, max_pages=4, block_size=16,
              topk=8, num_slots=4)
    trace, reqs = _error_trace(rng, cfg, [10])
    trace.add_step([{"req": r, "rows": r.rows(1)} for r in reqs])
    trace_dir = str(tmp_path / "trace")
    trace.write(trace_dir)
    argv = cfg.argv()
    argv[argv.index(option) + 1] = value
    ctx = "[SPIN_TEST_SEED=%d] spin-exec --trace %s %s" % (seed, trace_dir,
                                                          " ".join(argv))
    proc = tio.run_spin_exec(spin_exec, trace_dir, argv)
    assert proc.returncode != 0, ctx + "\naccepted " + option + " " + value
    assert value in proc.stderr, ("%s\nmessage does not name %r:\n%s"
                                  % (ctx, value, proc.stderr[-2000:]))


def test_error_a0_with_explore(spin_exec, tmp_path, seed, rng):
    """spin-sparsify-indexer rejects exploration with reduction A0 (A0 has
    no block budget); the reference ignores explore for A0."""
    cfg = Cfg(heads=2, head_dim=16, page_size=16, max_pages=4, block_size=16,
              topk=8, num_slots=4, reduction="A0", explore=0.25)
    trace, reqs = _error_trace(rng, cfg, [10])
    trace.add_step([{"req": r, "rows": r.rows(1)} for r in reqs])
    _expect_failure(spin_exec, tmp_path, seed, cfg, trace, ["0.25"],
                    "A0 with explore 0.25")


def test_error_a0_with_age_policy(spin_exec, tmp_path, seed, rng):
    """An age-based exploration policy with reduction A0 is rejected too."""
    cfg = Cfg(heads=2, head_dim=16, page_size=16, max_pages=4, block_size=16,
              topk=8, num_slots=4, reduction="A0", explore_policy="block-age")
    trace, reqs = _error_trace(rng, cfg, [10])
    trace.add_step([{"req": r, "rows": r.rows(1)} for r in reqs])
    proc = _expect_failure(spin_exec, tmp_path, seed, cfg, trace, ["explore-policy"],
                           "A0 with explore-policy block-age")
    assert "'explore-policy' must be random" in proc.stderr


def test_error_pool_full(spin_exec, tmp_path, seed, rng):
    """More live requests than --num-slots: rejected (no request is ever
    released in a trace)."""
    cfg = Cfg(heads=2, head_dim=16, page_size=16, max_pages=4, block_size=16,
              topk=8, num_slots=2)
    trace, reqs = _error_trace(rng, cfg, [10, 20, 30])
    trace.add_step([{"req": r, "rows": r.rows(1)} for r in reqs[:2]])
    trace.add_step([{"req": r, "rows": r.rows(1)} for r in reqs[1:]])
    _expect_failure(spin_exec, tmp_path, seed, cfg, trace, [reqs[2].rid, 2],
                    "third request with --num-slots 2")


def test_error_mtp_without_accepted_file(spin_exec, tmp_path, seed, rng):
    """accepted.npy is optional, but a request with buffered rows cannot be
    stepped without it."""
    d = 2
    cfg = Cfg(heads=2, head_dim=16, rows=d + 1, page_size=16, max_pages=4,
              block_size=16, topk=8, num_slots=4)
    trace, reqs = _error_trace(rng, cfg, [10, 20])
    for _ in range(2):
        trace.add_step([{"req": r, "rows": r.rows(d + 1)} for r in reqs])
    _expect_failure(spin_exec, tmp_path, seed, cfg, trace,
                    [reqs[0].rid, reqs[1].rid], "MTP step without accepted.npy")


def test_error_position_beyond_capacity(spin_exec, tmp_path, seed, rng):
    cfg = Cfg(heads=2, head_dim=16, page_size=16, max_pages=4, block_size=16,
              topk=8, num_slots=4)
    trace, reqs = _error_trace(rng, cfg, [10, 20])
    bad = cfg.capacity + int(rng.integers(0, 40))
    trace.add_step([{"req": reqs[0], "rows": [(bad, 10)]},
                    {"req": reqs[1], "rows": reqs[1].rows(1)}])
    _expect_failure(spin_exec, tmp_path, seed, cfg, trace, [bad],
                    "position %d >= capacity %d" % (bad, cfg.capacity))


@pytest.mark.parametrize("field", ["length", "position"])
def test_error_negative(spin_exec, tmp_path, seed, rng, field):
    cfg = Cfg(heads=2, head_dim=16, page_size=16, max_pages=4, block_size=16,
              topk=8, num_slots=4)
    trace, reqs = _error_trace(rng, cfg, [10, 20])
    bad = -int(rng.integers(2, 1000))
    row = (12, bad) if field == "length" else (bad, 0)
    trace.add_step([{"req": reqs[1], "rows": reqs[1].rows(1)},
                    {"req": reqs[0], "rows": [row]}])
    _expect_failure(spin_exec, tmp_path, seed, cfg, trace, [bad],
                    "negative %s %d" % (field, bad))


def test_error_wrong_q_dtype(spin_exec, tmp_path, seed, rng):
    cfg = Cfg(heads=2, head_dim=16, page_size=16, max_pages=4, block_size=16,
              topk=8, num_slots=4, key_format="f16")
    trace, reqs = _error_trace(rng, cfg, [10])
    trace.add_step([{"req": r, "rows": r.rows(1)} for r in reqs])
    trace.steps[0]["q"] = trace.steps[0]["q"].astype("<f4")
    _expect_failure(spin_exec, tmp_path, seed, cfg, trace, ["<f4"],
                    "q.npy is <f4 with --key-format f16")


@pytest.mark.parametrize("name,dtype", [("request_ids", np.int64), ("reset", np.uint8),
                                        ("accepted", np.int32)])
def test_error_per_request_file_must_match_batch(spin_exec, tmp_path, name, dtype):
    """request_ids.npy, reset.npy and accepted.npy need one entry per request:
    a short file is refused before it is read (it used to crash)."""
    import subprocess
    trace = tmp_path / "trace"
    step = trace / "step_0000"
    step.mkdir(parents=True)
    np.save(trace / "keys.npy", np.zeros((4, 16, 16), np.float32))
    np.save(step / "q.npy", np.zeros((2, 1, 2, 16), np.float32))
    np.save(step / "w.npy", np.zeros((2, 1, 2), np.float32))
    np.save(step / "block_table.npy", np.array([[0, 1, 2, 3], [3, 2, 1, 0]], np.int32))
    np.save(step / "lengths.npy", np.array([[20], [30]], np.int32))
    np.save(step / "positions.npy", np.array([[19], [29]], np.int32))
    np.save(step / "request_ids.npy", np.array([1, 2], np.int64))
    np.save(step / f"{name}.npy", np.zeros(1, dtype))
    done = subprocess.run(
        [spin_exec, "--trace", str(trace), "--heads", "2", "--head-dim", "16",
         "--topk", "8", "--page-size", "16", "--max-pages", "4", "--key-format", "f32",
         "--block-size", "16"], capture_output=True, text=True)
    assert done.returncode != 0
    assert f"{name}.npy has shape [1], expected [2]" in done.stderr, done.stderr
