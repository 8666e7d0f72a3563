#!/usr/bin/env python3
#===- bench/gpu_check.py - GPU artifacts against the numpy reference -----===#
#
# The H200 correctness check. For every configuration of
# gpu-artifacts/index.json (written by bench/gpu_artifacts.py):
#
#   * fresh random inputs (seeded; the seed is printed, rerun one
#     configuration with --seed S --only NAME);
#   * the artifact runs through spin.load on CUDA torch tensors for several
#     decode steps (SPIN: 10 steps with growing lengths and positions, the
#     first step of every request a warm-up, ragged lengths and position
#     gaps, the batch drawn from a larger request pool in a new order every
#     step, requests added on first use, a release + a new request reusing
#     the slot, a host state.reset() mid-sequence, the reset input
#     mid-sequence where the graph has one);
#   * test/reference/spin_reference.py runs in lockstep (one LayerState per
#     request, the same request ids);
#   * MTP configurations (R = d + 1 rows): row r of a request sees N + r
#     slots at position N - 1 + gap + r; after every step each request of
#     the batch commits 0..d accepted drafts (state.commit), replayed at its
#     next step, and its length grows by accepted + 1; top-K and sparsity
#     are checked row by row;
#   * "exact" inputs (integer q / keys in [-4, 4], w multiples of 1/4,
#     power-of-two fp8 scales, decay 0.5: every f32 operation is exact):
#     top-K indices must be equal, sparsity equal to 1e-6, and the state
#     (state.ema V / D and state.iteration) equal, bit for bit;
#   * "ties" inputs: exact ones whose keys are each one of a few vectors
#     (fp8 scales 1), so that scores tie in long runs; checked as exact;
#   * "noninteger" inputs (normal floats): a top-K may differ from the
#     reference's only where the reference's scores of the two differing
#     slots agree to 1e-5 relative (bf16 / f16 keys) or 1e-3 (fp8); the state
#     to 1e-4 / 1e-3 of the vector's largest magnitude. A SPIN request whose
#     top-K differs beyond that at a step where the reference's selection had
#     a near-tie at its boundary (the last exploited block's and the first
#     left-out block's predicted scores agreeing to the scores' tolerance:
#     the device's state, fed by scores within that tolerance, may rank the
#     two the other way) is noted and not compared after that step: from
#     then on the two runs observe different blocks;
#   * graphs that also return their dense scores: every entry against the
#     reference's (-inf past each row's length), exact for exact inputs,
#     else to the top-K's tolerance times the row's largest |score|;
#   * multi-layer graphs (L identical layers launching shared kernels):
#     every layer has its own q, w and key cache (+ scales) and its own
#     state, the batch, block tables, lengths and positions are shared; the
#     reference runs layer l with l in its exploration hash, and every
#     layer's top-K, sparsity and state is compared as above. The last
#     layer gets layer 0's inputs, so that only the layer in the hash tells
#     them apart (the check requires their selections to differ somewhere);
#   * where the configuration says so, a last step with one block-table entry
#     outside [0, pages): program.check() must raise an error naming the
#     value (and the request), every other request's top-K, sparsity and
#     state must still be right, and the offending request's state must be
#     left as it was (docs/GPU-ABI.md, "The error record").
#
# One line per configuration (PASS / FAIL + what differed, SKIP for a
# configuration spin-compile rejected), then a summary; the exit status is 1
# if any configuration failed.
#
#   python3 bench/gpu_check.py gpu-artifacts              on the GPU machine
#   python3 bench/gpu_check.py gpu-artifacts --dry-run    no torch / GPU:
#       inputs + reference only; the "device" is the reference itself
#       (--backend ref) or the compiled CPU path build/bin/spin-exec
#       (--backend cpu; a multi-layer graph, which spin-exec cannot run,
#       runs whole through the spin package's CPU path), which checks the
#       inputs and the comparisons
#
# Needs numpy (+ torch and the spin package of build-gpu/python on
# PYTHONPATH on the GPU machine). No MLIR.
#
#===----------------------------------------------------------------------===#

import argparse
import faulthandler
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
import traceback
import zlib

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "test", "reference"))
import spin_reference as sr  # noqa: E402

# Tolerances of the noninteger scheme (relative), per key format.
TOPK_REL = {"bf16": 1e-5, "f16": 1e-5, "fp8": 1e-3}
# fp8 queries multiply on e4m3 tensor cores, whose accumulator keeps fewer
# bits than f32 (products exact, sums aligned to the largest addend with
# about 2^-13 of it kept), so a score's error is relative to the row's
# largest |score| rather than to its own value: noninteger inputs allow
# this fraction of the row's largest |score| (measured on the H200: see
# docs/GPU-ABI.md "fp8 queries"). Exact inputs stay exact.
FP8_QUERY_ROW_REL = 4e-3
# The largest |GPU - reference| / (row's largest |score|) of each
# configuration's returned scores, for the report.
SCORE_ERRORS = {}
STATE_REL = {"bf16": 1e-4, "f16": 1e-4, "fp8": 1e-3}
SPARSITY_TOL = 1e-6
MAX_SHOWN = 6          # differing ranks / entries shown per problem
MAX_PROBLEMS = 4       # problems printed per failing configuration


# ---------------------------------------------------------------------------
# Element formats (encode here, decode with the reference)
# ---------------------------------------------------------------------------

_FP8_POS_BITS = np.arange(0x00, 0x7F, dtype=np.uint8)          # 0 .. 448
_FP8_POS_VALS = sr.fp8_e4m3_to_f32(_FP8_POS_BITS).astype(np.float64)
assert np.all(np.diff(_FP8_POS_VALS) > 0)


def fp8_bits(x):
    """Nearest fp8 e4m3fn bit patterns (saturating at +-448, +0.0 -> 0x00)."""
    x = np.asarray(x, dtype=np.float32)
    a = np.minimum(np.abs(x.astype(np.float64)), 448.0)
    hi = np.clip(np.searchsorted(_FP8_POS_VALS, a), 1, _FP8_POS_VALS.size - 1)
    lo = hi - 1
    pick = np.where(a - _FP8_POS_VALS[lo] <= _FP8_POS_VALS[hi] - a, lo, hi)
    bits = _FP8_POS_BITS[pick]
    neg = (x < 0) & (bits != 0)
    return np.where(neg, bits | np.uint8(0x80), bits).astype(np.uint8)


def encode(values, fmt):
    """(stored array, decoded float32): bf16 -> uint16 bits, f16 -> float16,
    fp8 -> uint8 bits, f32 -> float32."""
    values = np.ascontiguousarray(values, dtype=np.float32)
    if fmt == "bf16":
        bits = sr.f32_to_bf16_bits(values)
        return bits, sr.bf16_to_f32(bits)
    if fmt == "f16":
        half = values.astype(np.float16)
        return half, half.astype(np.float32)
    if fmt == "fp8":
        bits = fp8_bits(values)
        return bits, sr.fp8_e4m3_to_f32(bits)
    if fmt == "f32":
        return values.copy(), values.copy()
    raise ValueError(fmt)


def encode_exactly(values, fmt, what):
    stored, decoded = encode(values, fmt)
    if not np.array_equal(decoded, values):
        raise AssertionError(f"test bug: {what} is not exact in {fmt}")
    return stored


# ---------------------------------------------------------------------------
# The test plan of one configuration (inputs only; independent of outputs)
# ---------------------------------------------------------------------------

class Request:
    def __init__(self, rid, table, n, gap):
        self.rid, self.table, self.n, self.gap = int(rid), table, int(n), int(gap)
        self.stepped = 0

    @property
    def p(self):
        return self.n - 1 + self.gap


class Step:
    """One decode step: batch request ids, encoded and decoded inputs, the
    host-side events before it (add / release / host reset) and, for MTP,
    the commits after it."""

    def __init__(self):
        self.events = []        # ("add" | "release" | "reset", rid)
        self.commits = []       # MTP: (rid, accepted drafts) after the step
        self.rids = []
        self.q_stored = self.q = self.w = None
        self.layers = None      # per layer (q_stored, q, w); [0] is q_stored, q, w
        self.block_table = self.lengths = self.positions = None
        self.reset = None       # bool [B] (reset input) or None
        self.bad = None         # {"index", "rid", "value", "page"}
        self.valid_table = None  # the block table without the bad entry


class Plan:
    pass


def _unique_ids(rng, count, taken):
    out = []
    while len(out) < count:
        rid = int(rng.integers(1, 2 ** 62))
        if rid not in taken:
            taken.add(rid)
            out.append(rid)
    return out


def is_exact(c):
    """Whether a configuration's inputs keep every f32 operation exact."""
    return c["scheme"] in ("exact", "ties")


def num_layers(c):
    return c.get("layers", 1)


def layer_name(name, layer):
    """A per-layer input or output's name in a multi-layer artifact (as
    bench/gpu_artifacts.py's check_manifest verified): "q", "q_1", ..."""
    return name if layer == 0 else f"{name}_{layer}"


def twin_layer(c):
    """The layer given layer 0's inputs (None for a single-layer graph)."""
    return num_layers(c) - 1 if num_layers(c) > 1 else None


def make_plan(cfg, rng):
    c = cfg
    spin = c["mode"] == "spin"
    exact = is_exact(c)
    B, H, Dh, S, MB, K = (c["batch"], c["heads"], c["head_dim"], c["page_size"],
                          c["table_pages"], c["topk"])
    P, NS, T = c["pages"], c["capacity"], c["steps"]
    R = c.get("rows", 1)
    bs = c["block_size"] if spin else S
    L = num_layers(c)
    if L > 1 and c["bad_table"]:
        raise AssertionError("test bug: no bad-table step for multi-layer configurations")
    plan = Plan()
    plan.cfg = c

    def draw_keys():
        """(stored keys, decoded keys, scales or None) of one layer."""
        shape = (P, S, Dh)
        if c["scheme"] == "ties":
            # Every slot's key is one of a few integer vectors: each row's
            # scores take at most that many values, so the top-K's
            # candidates are long runs of equal scores (its tie rule) and
            # the SPIN block maxima tie.
            base = rng.integers(-4, 5, size=(c["distinct_keys"], Dh)).astype(np.float32)
            kv = base[rng.integers(0, c["distinct_keys"], size=shape[:2])]
        elif exact:
            kv = rng.integers(-4, 5, size=shape).astype(np.float32)
        else:
            kv = rng.standard_normal(shape).astype(np.float32)
        stored, decoded = encode(kv, c["key_format"])
        scales = None
        if c["key_format"] == "fp8":
            if c["scheme"] == "ties":
                scales = np.ones(shape[:2], dtype=np.float32)
            elif exact:
                scales = np.exp2(rng.integers(-2, 3, size=shape[:2])).astype(np.float32)
            else:
                scales = rng.uniform(0.5, 2.0, size=shape[:2]).astype(np.float32)
        return stored, decoded, scales

    # Key cache (and scales) of every layer, shared by every step; the twin
    # layer's are copies of layer 0's (its own buffers on the device).
    plan.keys_stored, plan.keys, plan.scales = draw_keys()
    plan.layers = [(plan.keys_stored, plan.keys, plan.scales)]
    for layer in range(1, L):
        if layer == twin_layer(c):
            plan.layers.append(tuple(None if a is None else a.copy() for a in plan.layers[0]))
        else:
            plan.layers.append(draw_keys())

    # Requests: ids, fixed random block tables over the shared pages, ragged
    # initial lengths (tiny, around a block, near the capacity, anywhere) and
    # query-position gaps; n0 + gap + T <= NS keeps p < capacity throughout
    # (MTP: lengths grow by up to R per step and the last row sees n + R - 1).
    taken = set()
    hi = NS - T * R - (R - 1)

    def new_request(rid, kind=None):
        """kind: "zero" (N = 0), "long" (upper half), "tiny" (< 2 blocks),
        "full" (near the capacity), "edge" (around a block boundary), or
        None: one of them at random, mostly longer than K."""
        table = rng.permutation(P)[:MB].astype(np.int32)
        if kind == "zero":
            return Request(rid, table, 0, int(rng.integers(1, 8)))
        if kind is None:
            kind = rng.choice(["tiny", "edge", "full", "long", "any"],
                              p=[0.1, 0.1, 0.2, 0.3, 0.3])
        if kind == "tiny":
            n = int(rng.integers(1, min(2 * bs, hi) + 1))
        elif kind == "edge":
            edge = bs * int(rng.integers(1, max(2, hi // bs)))
            n = int(rng.integers(max(1, edge - 2), min(edge + 2, hi) + 1))
        elif kind == "full":
            n = int(rng.integers(max(1, hi - 40), hi + 1))
        elif kind == "long":
            n = int(rng.integers(max(1, min(2 * K, hi // 2)), hi + 1))
        else:
            n = int(rng.integers(1, hi + 1))
        room = hi - n
        gap = 0 if (room <= 0 or rng.random() < 0.7) else int(rng.integers(1, min(40, room) + 1))
        return Request(rid, table, n, gap)

    pool_size = B + (c["extra_requests"] if spin else 0)
    ids = _unique_ids(rng, pool_size + 1, taken)
    if c["extreme_ids"]:
        special = [-1, -2 ** 63, 2 ** 63 - 1, 0]
        for i in range(min(len(special), pool_size)):
            taken.discard(ids[i])
            ids[i] = special[i]
            taken.add(special[i])
    spare_id = ids.pop()
    kinds = ["long", "tiny", "full"]
    if c["zero_length"]:
        kinds[1] = "zero"
    pool = [new_request(rid, kinds[i] if i < len(kinds) else None)
            for i, rid in enumerate(ids)]

    added = set()
    t_churn = T // 2 if (spin and c["extra_requests"] > 0) else None
    t_reset = T // 2 + 1 if spin else None
    want_reset = spin and (c["host_reset"] or c["reset_input"])
    plan.resets = []
    plan.steps = []
    plan.all_ids = [r.rid for r in pool]

    def draw_queries(n):
        """(stored q, decoded q, w) of one layer for n requests."""
        qshape = (n, R, H, Dh)
        if exact:
            qv = rng.integers(-4, 5, size=qshape).astype(np.float32)
            w = (rng.integers(-4, 5, size=(n, R, H)) / 4.0).astype(np.float32)
        else:
            # Normal floats rounded to bf16 (tiny ones flushed), so that q is
            # exact in both bf16 and f16 and every backend sees the same q.
            qv = rng.standard_normal(qshape).astype(np.float32)
            qv = sr.bf16_to_f32(sr.f32_to_bf16_bits(qv))
            qv[np.abs(qv) < 2.0 ** -14] = 0.0
            if c.get("q_format") == "fp8":
                qv = sr.fp8_e4m3_to_f32(fp8_bits(qv))
            w = (0.5 * rng.standard_normal((n, R, H))).astype(np.float32)
        return encode_exactly(qv, c["q_format"], "q"), qv, w

    def build_step(step, batch):
        step.rids = [r.rid for r in batch]
        step.q_stored, step.q, step.w = draw_queries(len(batch))
        step.layers = [(step.q_stored, step.q, step.w)]
        for layer in range(1, L):
            if layer == twin_layer(c):
                step.layers.append(tuple(a.copy() for a in step.layers[0]))
            else:
                step.layers.append(draw_queries(len(batch)))
        step.block_table = np.stack([r.table for r in batch]).astype(np.int32)
        step.valid_table = step.block_table
        step.lengths = np.array([[r.n + i for i in range(R)] for r in batch],
                                dtype=np.int32)
        step.positions = np.array([[r.p + i for i in range(R)] for r in batch],
                                  dtype=np.int32)
        for r in batch:
            assert 0 <= r.n <= r.p + 1 and r.p + R <= NS, "test bug: row outside the capacity"
        if spin:
            for r in batch:
                if r.rid not in added:
                    step.events.append(("add", r.rid))
                    added.add(r.rid)

    for t in range(T):
        step = Step()
        forced = []
        if t == t_churn:
            # Release a request that has run (not in this batch) and start a
            # new one, which may get the freed slot: it must start fresh.
            old = [r for r in pool if r.stepped > 0]
            victim = old[int(rng.integers(len(old)))]
            step.events.append(("release", victim.rid))
            added.discard(victim.rid)
            pool.remove(victim)
            fresh = new_request(spare_id)
            pool.append(fresh)
            plan.all_ids.append(fresh.rid)
            forced.append(fresh)
        if len(pool) == B:
            batch = list(pool)
        else:
            rest = [r for r in pool if r not in forced]
            pick = rng.choice(len(rest), size=B - len(forced), replace=False)
            batch = forced + [rest[i] for i in pick]
        batch = [batch[i] for i in rng.permutation(len(batch))]
        if want_reset and t >= t_reset:
            # Mid-sequence reset of a request that has run at least twice
            # (at t_reset, else at the first later step that has one).
            cands = [i for i, r in enumerate(batch) if r.stepped >= 2]
            if cands:
                i = cands[int(rng.integers(len(cands)))]
                if c["host_reset"]:
                    step.events.append(("reset", batch[i].rid))
                if c["reset_input"]:
                    step.reset = np.zeros(B, dtype=bool)
                    step.reset[i] = True
                plan.resets.append((t, batch[i].rid))
                want_reset = False
        if spin and c["reset_input"] and step.reset is None:
            step.reset = np.zeros(B, dtype=bool)
            if t == 0:
                step.reset[0] = True   # a reset of a fresh state: a no-op
        build_step(step, batch)
        # Host events first (release/add before the step, resets after the
        # adds so that a reset never precedes its request's add).
        step.events.sort(key=lambda e: {"release": 0, "add": 1, "reset": 2}[e[0]])
        plan.steps.append(step)
        for i, r in enumerate(batch):
            grow = 1
            if R > 1:
                # Every count 0..d occurs in the first steps, then at random.
                grow = 1 + ((t + i) % R if t < R else int(rng.integers(0, R)))
                if c["mode"] == "spin":   # a dense graph has no state to commit
                    step.commits.append((r.rid, grow - 1))
            r.n += grow
            r.stepped += 1

    if want_reset:
        raise AssertionError("test bug: no request to reset mid-sequence")

    # The last step with one bad block-table entry (after the main checks).
    plan.bad_step = None
    if c["bad_table"] and R > 1:
        raise AssertionError("test bug: no bad-table step for MTP configurations (its "
                             "commit of the previous rows is not 'left as it was')")
    if c["bad_table"]:
        if len(pool) == B:
            batch = list(pool)
        else:
            pick = rng.choice(len(pool), size=B, replace=False)
            batch = [pool[i] for i in pick]
        batch = [batch[i] for i in rng.permutation(len(batch))]
        step = Step()
        build_step(step, batch)
        cands = [i for i, r in enumerate(batch) if r.n >= 1]
        b = cands[int(rng.integers(len(cands)))]
        r = batch[b]
        last_page = (r.n - 1) // S
        if spin:   # pages of the forced blocks 0 and B-1: always scored
            page = 0 if rng.random() < 0.5 else last_page
        else:
            page = int(rng.integers(0, last_page + 1))
        value = (P + int(rng.integers(0, 1000)) if c["bad_table"] == "too-large"
                 else -int(rng.integers(1, 1000)))
        bt = step.block_table.copy()
        bt[b, page] = value
        step.block_table = bt
        step.bad = {"index": b, "rid": r.rid, "value": value, "page": page}
        plan.bad_step = step
    return plan


# ---------------------------------------------------------------------------
# The reference, in lockstep over the plan
# ---------------------------------------------------------------------------

def selection_boundary_gap(state, p, n, kw):
    """The relative gap between the predicted scores of the last block a
    row's selection exploits and the first it leaves out (SPIN_SPEC §3
    steps 2-6, as the reference's select_row ranks them); inf where the
    budget takes every candidate or none, or at a warm-up."""
    n, bs = int(n), int(kw["bs"])
    blocks = sr.num_blocks_of(n, bs)
    if state.it == 0 or blocks == 0:
        return math.inf
    scores = sr.pool(sr.predict(state, p, n), n, bs, kw.get("pooling", "max"))
    forced = set(sr._forced_blocks(blocks))
    m = sr.budget(blocks, kw["topk_k"], bs, kw["sparsity"])
    e = max(0, min(int(math.floor(float(kw.get("explore", 0.0)) * m)), m - len(forced)))
    x = max(0, m - len(forced) - e)
    ranked = sorted((float(scores[j]) for j in range(blocks) if j not in forced),
                    reverse=True)
    if not 0 < x < len(ranked):
        return math.inf
    last, first_out = ranked[x - 1], ranked[x]
    return abs(last - first_out) / max(abs(last), abs(first_out), 1e-30)


class recording_selection_gaps:
    """While active, records every reference selection's boundary gap
    (selection_boundary_gap) by request id, the smallest of its rows."""

    def __init__(self):
        self.gaps = {}

    def __enter__(self):
        self._select_row = sr.select_row
        original = self._select_row

        def select_row(state, request_id, layer, p, n, **kw):
            if kw.get("reduction", "a1") == "a1":
                gap = selection_boundary_gap(state, p, n, kw)
                self.gaps[request_id] = min(gap, self.gaps.get(request_id, math.inf))
            return original(state, request_id, layer, p, n, **kw)

        sr.select_row = select_row
        return self

    def __exit__(self, *exc):
        sr.select_row = self._select_row


class Outputs:
    """Per step (topk [B,1,K] int32, sparsity [B,1] f32 or None, error text
    or None); states {rid: (V, D, it)} after the main steps; the bad step's
    outputs and states (or None); per step the returned scores (graphs that
    return them; the bad step's in bad_scores). A multi-layer run's are
    those of each layer, in `layers` (its own fields unused but `note`)."""

    def __init__(self):
        self.steps = []
        self.scores = []
        self.bad_scores = None
        self.states = None
        self.bad = None
        self.bad_states = None
        self.note = None
        self.layers = None
        # Reference only: per step {request id: the smallest boundary gap
        # of its rows' selections} (noninteger SPIN configurations).
        self.gaps = []


def by_layer(c, outs):
    """One layer's Outputs as they are, several wrapped in one Outputs."""
    if num_layers(c) == 1:
        return outs[0]
    out = Outputs()
    out.layers = outs
    return out


def layer_outputs(c, out):
    """The per-layer Outputs of a run (by_layer's inverse)."""
    return [out] if num_layers(c) == 1 else out.layers


def _snapshot(states):
    return {rid: (st.V.copy(), st.D.copy(), int(st.it)) for rid, st in states.items()}


def run_reference(plan):
    """The reference over the plan, every layer (does not change the plan)."""
    return by_layer(plan.cfg, [run_reference_layer(plan, layer)
                               for layer in range(num_layers(plan.cfg))])


def run_reference_layer(plan, layer):
    """Layer `layer` of the reference over the plan: the layers share the
    requests' events and commits but not their inputs or state, so each
    runs on its own."""
    c = plan.cfg
    spin = c["mode"] == "spin"
    _, keys, scales = plan.layers[layer]
    out = Outputs()
    out.z, out.masks, out.warm = [], [], []
    states = {}
    recorded = {}   # MTP: rid -> the accepted count of its last step

    def apply_events(step):
        for kind, rid in step.events:
            if kind == "add":
                states[rid] = sr.LayerState(c["capacity"], c["block_size"])
            elif kind == "release":
                del states[rid]
                recorded.pop(rid, None)
            elif kind == "reset":
                sr.reset(states[rid])
                recorded.pop(rid, None)

    def compute(step):
        _, q, w = step.layers[layer]
        if not spin:
            z = sr.dense_scores(q, w, keys, scales, step.valid_table, step.lengths)
            idx = sr.topk(z, step.lengths, c["topk"])
            return idx, None, z, None, np.ones(len(step.rids), bool)
        sts = [states[rid] for rid in step.rids]
        # A pending MTP step is committed first: then it is no warm-up.
        warm = np.array([bool((step.reset is not None and step.reset[b])
                              or (st.it == 0 and st.pending is None))
                         for b, st in enumerate(sts)])
        idx, mask, sp, z = sr.spin_step(
            sts, step.rids, layer, q, w, keys, scales, step.valid_table, step.lengths,
            step.positions, k=c["topk"],
            bs=c["block_size"], sparsity=c["sparsity"], explore=c["explore"],
            seed=c["seed"], alpha=c["ema_decay"], pooling=c["pooling"],
            reduction="a1", reset_flags=step.reset,
            mtp_mask=c.get("mtp_mask", "union"), mtp_update=c.get("mtp_update", "prefix"),
            accepted=[recorded.get(rid, 0) for rid in step.rids])
        return idx, sp, z, mask, warm

    for step in plan.steps:
        apply_events(step)
        with recording_selection_gaps() as recording:
            idx, sp, z, mask, warm = compute(step)
        out.gaps.append(recording.gaps)
        recorded.update(step.commits)
        out.steps.append((idx, sp, None))
        out.z.append(z)
        out.masks.append(mask)
        out.warm.append(warm)
    out.states = _snapshot(states)
    if plan.bad_step is not None:
        # The reference scores the offending request with its valid table;
        # its outputs are ignored and its state restored (the ABI: the
        # request is skipped and its state left as it was).
        step = plan.bad_step
        apply_events(step)
        victim = step.bad["rid"]
        before = states[victim].copy() if spin else None
        idx, sp, z, mask, warm = compute(step)
        if spin:
            states[victim] = before
        out.bad = (idx, sp, None)
        out.bad_z = z
        out.bad_mask = mask
        out.bad_states = _snapshot(states)
    return out


# ---------------------------------------------------------------------------
# Backends: the GPU (torch), the CPU path (spin-exec), the reference itself
# ---------------------------------------------------------------------------

class TorchBackend:
    name = "cuda"

    def __init__(self):
        import torch
        import spin
        self.torch, self.spin = torch, spin
        if not torch.cuda.is_available():
            raise RuntimeError("torch.cuda.is_available() is False (without a GPU, "
                               "use --dry-run)")
        self.device = torch.device("cuda", torch.cuda.current_device())

    def describe(self):
        t = self.torch
        return (f"torch {t.__version__}, {t.cuda.get_device_name(self.device)} "
                f"(cc {'.'.join(map(str, t.cuda.get_device_capability(self.device)))}), "
                f"spin from {os.path.dirname(self.spin.__file__)}")

    def tensor(self, array, fmt=None):
        t = self.torch
        a = np.ascontiguousarray(array)
        if fmt == "bf16":
            x = t.from_numpy(a.view(np.int16)).view(t.bfloat16)
        elif fmt == "fp8":
            x = t.from_numpy(a.view(np.uint8)).view(t.float8_e4m3fn)
        else:   # f16, f32, i32, i64, bool: numpy's dtype is torch's
            x = t.from_numpy(a)
        return x.to(self.device).contiguous()

    def healthy(self):
        try:
            t = self.torch
            x = t.ones(4, device=self.device) + 1
            t.cuda.synchronize(self.device)
            return bool((x == 2).all().item())
        except Exception:  # noqa: BLE001 - any driver error means unusable
            return False

    def run(self, plan, art_dir):
        c = plan.cfg
        spin_mode = c["mode"] == "spin"
        program = self.spin.load(art_dir, self.device)
        assert program.chip.startswith("sm_90"), program.chip
        state = program.new_state(slots=len(plan.all_ids) + 2) if spin_mode else None
        L = num_layers(c)
        keys = [self.tensor(k, c["key_format"]) for k, _, _ in plan.layers]
        scales = [None if sc is None else self.tensor(sc) for _, _, sc in plan.layers]
        outs = [Outputs() for _ in range(L)]

        def step_once(step):
            for kind, rid in step.events:
                if kind == "add":
                    state.add(rid)
                elif kind == "release":
                    state.release(rid)
                elif kind == "reset":
                    state.reset(rid)
            inputs = {"block_table": self.tensor(step.block_table),
                      "lengths": self.tensor(step.lengths)}
            for layer, (q_stored, _, w) in enumerate(step.layers):
                inputs[layer_name("q", layer)] = self.tensor(q_stored, c["q_format"])
                inputs[layer_name("w", layer)] = self.tensor(w)
                inputs[layer_name("keys", layer)] = keys[layer]
                if scales[layer] is not None:
                    inputs[layer_name("scales", layer)] = scales[layer]
            if spin_mode:
                inputs["positions"] = self.tensor(step.positions)
                inputs["request_ids"] = self.tensor(np.array(step.rids, dtype=np.int64))
                if step.reset is not None:
                    inputs["reset"] = self.tensor(step.reset.astype(np.bool_))
                res = program(inputs, state, request_ids=step.rids)
            else:
                res = program(inputs)
            error = None
            try:
                program.check()
            except RuntimeError as e:
                error = str(e)
            for rid, accepted in step.commits:
                state.commit(rid, accepted)
            per_layer = []
            for layer in range(L):
                topk = res[layer_name("topk", layer)].cpu().numpy()
                sp = res[layer_name("sparsity", layer)].cpu().numpy() if spin_mode else None
                scores = (res[layer_name("scores", layer)].cpu().numpy()
                          if c.get("return_scores") else None)
                per_layer.append(((topk, sp, error), scores))
            return per_layer

        def states(layer):
            if not spin_mode:
                return None
            snap = {}
            for rid in plan.live_ids:
                v, d = state.ema(rid, layer)
                snap[rid] = (v, d, int(state.iteration(rid, layer)))
            return snap

        for step in plan.steps:
            for out, (outputs, scores) in zip(outs, step_once(step)):
                out.steps.append(outputs)
                out.scores.append(scores)
        plan.live_ids = live_ids(plan, len(plan.steps))
        for layer, out in enumerate(outs):
            out.states = states(layer)
        if plan.bad_step is not None:
            for out, (outputs, scores) in zip(outs, step_once(plan.bad_step)):
                out.bad, out.bad_scores = outputs, scores
            plan.live_ids = live_ids(plan, len(plan.steps), with_bad=True)
            for layer, out in enumerate(outs):
                out.bad_states = states(layer)
        self.torch.cuda.synchronize(self.device)
        return by_layer(c, outs)


def live_ids(plan, upto, with_bad=False):
    live = []
    steps = plan.steps[:upto] + ([plan.bad_step] if with_bad and plan.bad_step else [])
    for step in steps:
        for kind, rid in step.events:
            if kind == "add" and rid not in live:
                live.append(rid)
            elif kind == "release" and rid in live:
                live.remove(rid)
    return live


class RefBackend:
    """The reference as the device (dry run): exercises every code path of
    the check; it can only pass."""
    name = "ref"

    def describe(self):
        return "the numpy reference itself (dry run)"

    def healthy(self):
        return True

    def run(self, plan, art_dir):
        ref = run_reference(plan)
        return by_layer(plan.cfg, [self.copy(plan, r) for r in layer_outputs(plan.cfg, ref)])

    @staticmethod
    def copy(plan, ref):
        out = Outputs()
        out.steps = [(i.copy(), None if s is None else s.copy(), e) for i, s, e in ref.steps]
        if plan.cfg.get("return_scores"):
            out.scores = [z.copy() for z in ref.z]
            out.bad_scores = None if plan.bad_step is None else ref.bad_z.copy()
        out.states = ref.states
        if plan.bad_step is not None:
            b = plan.bad_step.bad
            i, s, _ = ref.bad
            who = (f"request {b['rid']} (batch index {b['index']})"
                   if plan.cfg["mode"] == "spin" else f"batch index {b['index']}")
            msg = (f"a step of {plan.cfg['function']} found bad input on the device: "
                   f"{who}, row 0: block-table entry {b['value']} is outside [0, pages) "
                   f"of the key cache")
            out.bad = (i, s, msg)
            out.bad_states = ref.bad_states
        return out


class CpuBackend:
    """The compiled CPU path (build/bin/spin-exec) over the main steps (dry
    run): checks the inputs, the reference and the comparisons against an
    independent implementation. No state read-back, no bad-table step.
    spin-exec runs one layer, so a multi-layer graph runs whole through the
    spin package's CPU path instead (spin.compile of the artifact's graph),
    with its state read back."""
    name = "cpu"

    def __init__(self, exe):
        self.exe = exe
        sys.path.insert(0, os.path.join(ROOT, "test", "python"))
        import trace_io
        self.tio = trace_io
        self.python_dir = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(exe))),
                                       "python")

    def describe(self):
        return f"the CPU path {self.exe} (dry run)"

    def healthy(self):
        return True

    def run(self, plan, art_dir):
        if num_layers(plan.cfg) > 1:
            return self.run_graph(plan, art_dir)
        return self.run_layer(plan)

    def run_graph(self, plan, art_dir):
        c = plan.cfg
        if self.python_dir not in sys.path:
            sys.path.insert(0, self.python_dir)
        import spin
        L, R = num_layers(c), c.get("rows", 1)
        with open(os.path.join(art_dir, "graph.mlir")) as f:
            graph = f.read()
        options = {"sparsity": float(c["sparsity"]), "block_size": c["block_size"],
                   "ema_decay": float(c["ema_decay"]), "explore": float(c["explore"]),
                   "seed": int(c["seed"]), "pooling": c["pooling"], "reduction": "A1",
                   "reset_input": bool(c["reset_input"])}
        if R > 1:
            options.update(mtp_mask=c["mtp_mask"], mtp_update=c["mtp_update"])
        program = spin.compile(graph, c["function"], options)
        state = spin.new_state(c["capacity"], layers=L, max_requests=len(plan.all_ids) + 2,
                               rows=R, block_size=c["block_size"])
        outs = [Outputs() for _ in range(L)]
        try:
            for step in plan.steps:
                for kind, rid in step.events:
                    getattr(state, kind)(rid)
                inputs = {"block_table": step.block_table, "lengths": step.lengths,
                          "positions": step.positions,
                          "request_ids": np.array(step.rids, dtype=np.int64)}
                if step.reset is not None:
                    inputs["reset"] = step.reset.astype(np.bool_)
                for layer, (q_stored, _, w) in enumerate(step.layers):
                    k_stored, _, scales = plan.layers[layer]
                    inputs[layer_name("q", layer)] = q_stored
                    inputs[layer_name("w", layer)] = w
                    inputs[layer_name("keys", layer)] = k_stored
                    if scales is not None:
                        inputs[layer_name("scales", layer)] = scales
                res = program.run(state, **inputs)
                for rid, accepted in step.commits:
                    state.commit(rid, accepted)
                for layer, out in enumerate(outs):
                    out.steps.append((res[layer_name("topk", layer)],
                                      res[layer_name("sparsity", layer)], None))
            for layer, out in enumerate(outs):
                out.states = {}
                for rid in live_ids(plan, len(plan.steps)):
                    v, d = state.ema(rid, layer)
                    out.states[rid] = (np.array(v), np.array(d),
                                       int(state.iteration(rid, layer)))
        finally:
            state.close()
        out = by_layer(c, outs)
        out.note = "the whole graph on the spin package's CPU path (spin-exec runs one layer)"
        return out

    def run_layer(self, plan):
        c = plan.cfg
        spin_mode = c["mode"] == "spin"
        R = c.get("rows", 1)
        cpu_q = {"bf16": "bf16", "fp8": "bf16", "f16": "f16"}[c["key_format"]]
        steps = []
        recorded = {}   # MTP: rid -> accepted count not yet passed to spin-exec
        for step in plan.steps:
            reset = np.zeros(len(step.rids), dtype=np.uint8)
            for kind, rid in step.events:
                if kind == "reset":
                    reset[step.rids.index(rid)] = 1
                if kind in ("reset", "release"):
                    recorded.pop(rid, None)
            if step.reset is not None:
                reset |= step.reset.astype(np.uint8)
            accepted = None
            if R > 1:
                # spin-exec commits before the step (-1: nothing to commit);
                # a reset drops the buffered rows and their commit.
                accepted = np.array([-1 if reset[b] else recorded.pop(rid, -1)
                                     for b, rid in enumerate(step.rids)], dtype=np.int32)
                for rid in step.rids:
                    recorded.pop(rid, None)
                recorded.update(step.commits)
            q = encode_exactly(step.q, cpu_q, "q (CPU format)")
            steps.append(dict(q=q.view("<u2") if cpu_q == "bf16" else q.astype("<f2"),
                              w=step.w, block_table=step.block_table,
                              lengths=step.lengths, positions=step.positions,
                              request_ids=np.array(step.rids, dtype=np.int64),
                              accepted=accepted, reset=reset if spin_mode else None))
        keys = plan.keys_stored
        keys = {"bf16": lambda k: k.view("<u2"), "f16": lambda k: k.astype("<f2"),
                "fp8": lambda k: k.view("|u1")}[c["key_format"]](keys)
        argv = ["--heads", c["heads"], "--head-dim", c["head_dim"], "--rows", R,
                "--topk", c["topk"], "--page-size", c["page_size"],
                "--max-pages", c["table_pages"], "--key-format", c["key_format"],
                "--num-slots", len(plan.all_ids) + 1]
        if spin_mode:
            argv += ["--block-size", c["block_size"], "--sparsity", repr(float(c["sparsity"])),
                     "--ema-decay", repr(float(c["ema_decay"])),
                     "--explore", repr(float(c["explore"])), "--seed", c["seed"],
                     "--pooling", c["pooling"], "--reduction", "A1",
                     "--mtp-mask", c.get("mtp_mask", "union"),
                     "--mtp-update", c.get("mtp_update", "prefix")]
        else:
            argv += ["--dense", "--block-size", c["page_size"]]
        with tempfile.TemporaryDirectory(prefix="gpu-check-cpu-") as d:
            self.tio.write_trace(d, keys, plan.scales, steps)
            proc = self.tio.run_spin_exec(self.exe, d, argv)
            if proc.returncode != 0:
                raise RuntimeError(f"spin-exec failed (exit {proc.returncode}): "
                                   f"{proc.stderr.strip()[-2000:]}")
            out = Outputs()
            for t in range(len(steps)):
                topk, sp = self.tio.read_step_outputs(d, t)
                out.steps.append((topk, sp if spin_mode else None, None))
        out.note = "no state read-back or bad-table step on the CPU backend"
        return out


# ---------------------------------------------------------------------------
# Comparison
# ---------------------------------------------------------------------------

def _ranks(a, b):
    return [int(j) for j in np.nonzero(a != b)[0]]


def _row_scale(z):
    f = z[np.isfinite(z)]
    return float(np.max(np.abs(f))) if f.size else 0.0


def _score(z, i):
    return "%.9g" % float(z[i]) if 0 <= i < z.size else "n/a"


def compare_row(c, where, ref_idx, got_idx, ref_sp, got_sp, z, n, mask=None):
    """Problems of one row (a list of strings)."""
    problems = []
    bs = c.get("block_size") or c["page_size"]
    if got_sp is not None and ref_sp is not None:
        if not abs(float(got_sp) - float(ref_sp)) <= SPARSITY_TOL:
            blocks = ""
            if mask is not None:
                nb = sr.num_blocks_of(n, bs)
                blocks = f" (reference blocks {np.nonzero(mask[:nb])[0].tolist()} of {nb})"
            problems.append(f"{where}: sparsity {float(got_sp)!r} != reference "
                            f"{float(ref_sp)!r}{blocks}")
    if np.array_equal(ref_idx, got_idx):
        return problems
    ranks = _ranks(ref_idx, got_idx)
    detail = ", ".join(f"rank {j}: ref slot {int(ref_idx[j])} (z {_score(z, int(ref_idx[j]))})"
                       f" got {int(got_idx[j])} (z {_score(z, int(got_idx[j]))})"
                       for j in ranks[:MAX_SHOWN])
    if is_exact(c):
        problems.append(f"{where}: top-K differs at {len(ranks)} rank(s) {ranks[:MAX_SHOWN]}"
                        f"{' ...' if len(ranks) > MAX_SHOWN else ''}: {detail}")
        return problems
    # Noninteger: equal padding, eligible distinct slots, and equal scores
    # (to the tolerance) rank by rank.
    rel = TOPK_REL[c["key_format"]]
    if not np.array_equal(ref_idx < 0, got_idx < 0):
        problems.append(f"{where}: -1 padding differs ({int((ref_idx < 0).sum())} in the "
                        f"reference, {int((got_idx < 0).sum())} here): {detail}")
        return problems
    valid = got_idx[got_idx >= 0]
    if np.any(valid >= n):
        problems.append(f"{where}: slot >= N = {n} selected: {valid[valid >= n][:MAX_SHOWN]}")
        return problems
    if np.unique(valid).size != valid.size:
        problems.append(f"{where}: duplicate slots in the top-K")
        return problems
    zo = z[valid].astype(np.float64)
    ze = z[ref_idx[ref_idx >= 0]].astype(np.float64)
    row_rel = FP8_QUERY_ROW_REL if c.get("q_format") == "fp8" else rel * 1e-2
    tol = rel * np.maximum(np.abs(zo), np.abs(ze)) + row_rel * _row_scale(z)
    with np.errstate(invalid="ignore"):
        same = (zo == ze) | (np.abs(zo - ze) <= tol)
    if not np.all(same):
        bad = [int(j) for j in np.nonzero(~same)[0]]
        detail = ", ".join(f"rank {j}: ref slot {int(ref_idx[j])} (z {ze[j]:.9g}) got "
                           f"{int(valid[j])} (ref z {zo[j]:.9g})" for j in bad[:MAX_SHOWN])
        problems.append(f"{where}: top-K differs beyond {rel:g} relative at {len(bad)} "
                        f"rank(s) {bad[:MAX_SHOWN]}: {detail}")
    return problems


def compare_scores(c, where, ref, got):
    """Problems of a returned score tensor [B, R, NS] against the reference's
    (-inf past each row's length): exact for the exact scheme, else to the
    top-K's relative tolerance of the row's largest |score| (a score is a
    sum over heads that may cancel: its own magnitude says nothing of the
    rounding in it); `where(b, r)` names a row."""
    got = np.asarray(got)
    if got.shape != ref.shape or got.dtype != np.float32:
        return [f"{where(None, None)}: scores have shape {got.shape} {got.dtype}, "
                f"expected {ref.shape} float32"]
    problems = []
    rel = TOPK_REL[c["key_format"]]
    for b in range(ref.shape[0]):
        for r in range(ref.shape[1]):
            e, g = ref[b, r].astype(np.float64), got[b, r].astype(np.float64)
            scale = _row_scale(ref[b, r])
            finite = np.isfinite(e) & np.isfinite(g)
            if scale > 0 and np.any(finite):
                worst = float(np.max(np.abs(e[finite] - g[finite]))) / scale
                name = c.get("name", "")
                SCORE_ERRORS[name] = max(SCORE_ERRORS.get(name, 0.0), worst)
            if is_exact(c):
                bad = np.nonzero(~(e == g))[0]
            else:
                # -inf (past the length) only matches -inf.
                tol = (FP8_QUERY_ROW_REL if c.get("q_format") == "fp8" else rel) * scale
                with np.errstate(invalid="ignore"):
                    close = np.isfinite(e) & (np.abs(e - g) <= tol)
                bad = np.nonzero(~((e == g) | close))[0]
            if bad.size:
                shown = ", ".join(f"[{int(i)}] {float(got[b, r, i])!r} (ref "
                                  f"{float(ref[b, r, i])!r})" for i in bad[:MAX_SHOWN])
                problems.append(f"{where(b, r)}: scores differ at {bad.size} "
                                f"entr{'y' if bad.size == 1 else 'ies'}: {shown}")
    return problems


def compare_state(c, rid, ref, got, what):
    V, D, it = ref
    gv, gd, git = got
    problems = []
    if git != it:
        problems.append(f"{what} request {rid}: iteration {git} != reference {it}")
    for name, r, g in (("V", V, gv), ("D", D, gd)):
        g = np.asarray(g, dtype=np.float32)
        if g.shape != r.shape:
            problems.append(f"{what} request {rid}: {name} has shape {g.shape}, "
                            f"reference {r.shape}")
            continue
        if is_exact(c):
            bad = np.nonzero(~((g == r) | (np.isnan(g) & np.isnan(r))))[0]
        else:
            tol = STATE_REL[c["key_format"]] * max(float(np.max(np.abs(r))), 1e-30)
            with np.errstate(invalid="ignore"):
                bad = np.nonzero(~(np.abs(g.astype(np.float64) - r) <= tol))[0]
        if bad.size:
            shown = ", ".join(f"[{int(i)}] {float(g[i])!r} (ref {float(r[i])!r})"
                              for i in bad[:MAX_SHOWN])
            problems.append(f"{what} request {rid}: {name} differs at {bad.size} "
                            f"entr{'y' if bad.size == 1 else 'ies'}: {shown}")
    return problems


def _names_value(message, value):
    return re.search(r"(?<![\d.+-])%s(?![\d.])" % re.escape(str(int(value))),
                     message) is not None


def twin_differences(plan, ref):
    """(requests whose selection differs between layer 0 and its twin, the
    requests stepped), over the reference's main steps."""
    c = plan.cfg
    layers = layer_outputs(c, ref)
    a, b = layers[0], layers[twin_layer(c)]
    differ = sum(int(np.sum(np.any(ma != mb, axis=1))) for ma, mb in zip(a.masks, b.masks))
    return differ, sum(len(s.rids) for s in plan.steps)


def compare(plan, ref, dev):
    """Problems of a run against the reference, layer by layer."""
    c = plan.cfg
    if num_layers(c) == 1:
        return compare_layer(plan, ref, dev)
    problems = []
    if dev.layers is None or len(dev.layers) != num_layers(c):
        return [f"{num_layers(c)} layers' outputs expected"]
    for layer, (r, d) in enumerate(zip(ref.layers, dev.layers)):
        note = d.note
        problems += [f"layer {layer}: {p}" for p in compare_layer(plan, r, d)]
        if d.note != note:
            added = d.note[len(note) + 2:] if note else d.note
            dev.note = (f"{dev.note}; " if dev.note else "") + f"layer {layer}: {added}"
    if twin_differences(plan, ref)[0] == 0:
        # Else a select kernel hashing the wrong layer could pass.
        problems.append(f"test bug: layers 0 and {twin_layer(c)} (the same inputs) select "
                        f"the same blocks in every step: exploration does not test the "
                        f"layer in its hash")
    return problems


def compare_layer(plan, ref, dev):
    """Problems of one layer's outputs against the reference's."""
    c = plan.cfg
    spin = c["mode"] == "spin"
    B, K, R = c["batch"], c["topk"], c.get("rows", 1)
    problems = []
    # Noninteger SPIN runs: the requests whose selection differed from the
    # reference's at a near-tie of predicted block scores, {rid: text}.
    diverged = {}

    def near_tie(t, rid):
        """The reference's selection of `rid` at step `t` had two blocks at
        its boundary whose predicted scores agree to the scores' own
        tolerance: the device's scores, which differ from the reference's
        within that tolerance, fed a state that may rank them the other
        way, and from then on the two runs observe different blocks."""
        if is_exact(c) or not spin or t is None or t >= len(ref.gaps):
            return None
        gap = ref.gaps[t].get(rid, math.inf)
        limit = (FP8_QUERY_ROW_REL if c.get("q_format") == "fp8"
                 else TOPK_REL[c["key_format"]])
        return gap if gap <= limit else None

    def check_step(t, step, r_out, d_out, z, mask, warm, skip=None, scores=None):
        r_idx, r_sp, _ = r_out
        g_idx, g_sp, err = d_out
        label = f"step {t}" if t is not None else "bad-table step"
        if err is not None and skip is None:
            problems.append(f"{label}: program.check() raised: {err}")
        if c.get("return_scores") and scores is not None:
            kept = [b for b in range(B) if b != skip]
            problems.extend(compare_scores(
                c, lambda b, r: (f"{label}" if b is None else
                                 f"{label}, batch index {kept[b]}"
                                 + (f" row {r}" if R > 1 else "")
                                 + f" (N={int(step.lengths[kept[b], r])})"),
                z[kept], np.asarray(scores)[kept]))
        g_idx = np.asarray(g_idx)
        if g_idx.shape != (B, R, K) or g_idx.dtype != np.int32:
            problems.append(f"{label}: topk has shape {g_idx.shape} {g_idx.dtype}, "
                            f"expected ({B}, {R}, {K}) int32")
            return
        if spin:
            g_sp = np.asarray(g_sp)
            if g_sp.shape != (B, R) or g_sp.dtype != np.float32:
                problems.append(f"{label}: sparsity has shape {g_sp.shape} {g_sp.dtype}, "
                                f"expected ({B}, {R}) float32")
                return
        for b in range(B):
            rid = step.rids[b]
            if b == skip or rid in diverged:
                continue
            found = []
            for i in range(R):
                n, p = int(step.lengths[b, i]), int(step.positions[b, i])
                where = (f"{label}, batch index {b}" + (f" row {i}" if R > 1 else "")
                         + f" (request {rid}, N={n}, p={p}"
                         + (f", warm-up={bool(warm[b])}" if spin else "") + ")")
                found.extend(compare_row(
                    c, where, r_idx[b, i], g_idx[b, i],
                    None if r_sp is None else r_sp[b, i],
                    None if g_sp is None else g_sp[b, i], z[b, i], n,
                    None if mask is None else mask[b]))
            gap = near_tie(t, rid) if found else None
            if gap is not None:
                diverged[rid] = (f"request {rid} selected another block at a near-tie "
                                 f"(relative gap {gap:.1e}) at step {t}: not compared after it")
            else:
                problems.extend(found)

    for t, step in enumerate(plan.steps):
        if t >= len(dev.steps):
            problems.append(f"step {t}: no output")
            break
        check_step(t, step, ref.steps[t], dev.steps[t], ref.z[t], ref.masks[t], ref.warm[t],
                   scores=dev.scores[t] if t < len(dev.scores) else None)
        if c.get("return_scores") and (t >= len(dev.scores) or dev.scores[t] is None) \
                and dev.note is None:
            problems.append(f"step {t}: the scores were not read back")

    if spin and dev.states is not None:
        for rid, r in ref.states.items():
            if rid in diverged:
                continue
            if rid not in dev.states:
                problems.append(f"state of request {rid} not read back")
                continue
            problems.extend(compare_state(c, rid, r, dev.states[rid],
                                          f"state after {len(plan.steps)} steps:"))

    if plan.bad_step is not None and dev.bad is not None:
        step, bad = plan.bad_step, plan.bad_step.bad
        err = dev.bad[2]
        what = (f"bad-table step (request {bad['rid']}, batch index {bad['index']}, "
                f"entry {bad['value']} at page {bad['page']}, pages {c['pages']})")
        if err is None:
            problems.append(f"{what}: program.check() raised nothing")
        else:
            if not _names_value(err, bad["value"]):
                problems.append(f"{what}: the error does not name the value "
                                f"{bad['value']}: {err}")
            # A stateful step knows its request ids; a dense one only the
            # batch index.
            who = (f"request {bad['rid']}" if spin else f"batch index {bad['index']}")
            if not re.search(re.escape(who) + r"(?![\d.])", err):
                problems.append(f"{what}: the error does not name {who}: {err}")
        check_step(None, step, ref.bad, dev.bad, ref.bad_z,
                   None, np.zeros(B, bool), skip=bad["index"], scores=dev.bad_scores)
        if spin and dev.bad_states is not None:
            for rid, r in ref.bad_states.items():
                if rid in diverged:
                    continue
                got = dev.bad_states.get(rid)
                if got is None:
                    problems.append(f"{what}: state of request {rid} not read back")
                    continue
                label = ("bad-table step: the offending request's state (the ABI: "
                         "left as it was):" if rid == bad["rid"]
                         else "state after the bad-table step:")
                problems.extend(compare_state(c, rid, r, got, label))
        # After check() the error record is clear: a later check must pass
        # (verified by the next configuration's first step).
    if diverged:
        text = "; ".join(diverged.values())
        dev.note = f"{dev.note}; {text}" if dev.note else text
    return problems


# ---------------------------------------------------------------------------
# Driver
# ---------------------------------------------------------------------------

def config_seed(seed, name):
    return [int(seed), zlib.crc32(name.encode())]


def plan_stats(plan, ref):
    c = plan.cfg
    R = c.get("rows", 1)
    rows = sum(len(s.rids) for s in plan.steps) * R
    parts = [f"{len(plan.steps)} steps", f"{rows} rows"]
    if num_layers(c) > 1:
        differ, total = twin_differences(plan, ref)
        parts.insert(0, f"{num_layers(c)} layers (layer {twin_layer(c)} = layer 0's inputs: "
                        f"{differ}/{total} selections differ)")
        ref = ref.layers[0]
    if c["name"] in SCORE_ERRORS:
        parts.append(f"score error <= {SCORE_ERRORS[c['name']]:.2e} of the row's largest")
    commits = [a for s in plan.steps for _, a in s.commits]
    if commits:
        parts.append(f"{len(commits)} commits of {min(commits)}..{max(commits)} drafts")
    if c["mode"] == "spin":
        warm = int(sum(int(np.sum(w)) for w in ref.warm))
        sps = [float(ref.steps[t][1][b, 0]) for t in range(len(plan.steps))
               for b in range(len(plan.steps[t].rids)) if not ref.warm[t][b]]
        parts.append(f"{warm} warm-up")
        if sps:
            parts.append(f"mean sparsity {np.mean(sps):.2f}")
    for t, rid in plan.resets:
        parts.append(f"{'reset input' if c.get('reset_input') else 'state.reset'} of "
                     f"request {rid} at step {t}")
    if plan.bad_step is not None:
        parts.append("+ bad-table step")
    return ", ".join(parts)


def select_configs(configs, only):
    if not only:
        return configs
    wanted = [w for w in only.split(",") if w]
    exact = [c for c in configs if c["name"] in wanted]
    if len(exact) == len(wanted):
        return exact
    return [c for c in configs if any(w in c["name"] for w in wanted)]


def run_all(args, index, configs, backend):
    results = []     # (name, status, message)
    for i, c in enumerate(configs):
        name = c["name"]
        tag = f"[{i + 1:2d}/{len(configs)}]"
        if not c.get("compiled", False) and backend.name != "cpu":
            msg = (c.get("compile_error") or "not compiled").splitlines()
            msg = " / ".join(m.strip() for m in msg if m.strip())
            print(f"{tag} {name}: SKIP (spin-compile rejected it: {msg})", flush=True)
            results.append((name, "SKIP", msg))
            continue
        t0 = time.time()
        art = os.path.join(args.artifacts, c["dir"])
        # The name first: if a kernel hangs, the last line says which.
        print(f"{tag} {name}: ", end="", flush=True)
        if args.config_timeout > 0:
            # A hung kernel blocks in the driver where no Python exception
            # reaches: dump the stacks and exit instead of waiting forever.
            faulthandler.dump_traceback_later(args.config_timeout, exit=True)
        seed = config_seed(args.seed, name)
        try:
            plan = make_plan(c, np.random.default_rng(seed))
            ref = run_reference(plan)
            dev = backend.run(plan, art)
            problems = compare(plan, ref, dev)
            stats = plan_stats(plan, ref)
            if dev.note:
                stats += f"; {dev.note}"
        except Exception as e:  # noqa: BLE001 - report and go on
            problems = [f"exception: {type(e).__name__}: {e}"]
            stats = "".join(traceback.format_exception(type(e), e, e.__traceback__)[-3:])
            stats = stats.strip().replace("\n", "\n      ")
        faulthandler.cancel_dump_traceback_later()
        dt = time.time() - t0
        if problems:
            print(f"FAIL ({dt:.1f} s): {len(problems)} problem(s); first: {problems[0]}",
                  flush=True)
            for p in problems[1:MAX_PROBLEMS]:
                print(f"      {p}", flush=True)
            if len(problems) > MAX_PROBLEMS:
                print(f"      ... and {len(problems) - MAX_PROBLEMS} more", flush=True)
            if problems[0].startswith("exception"):
                print(f"      {stats}", flush=True)
            results.append((name, "FAIL", problems[0]))
        else:
            print(f"PASS ({dt:.1f} s; {stats})", flush=True)
            results.append((name, "PASS", stats))
        if problems and not backend.healthy():
            rest = [x["name"] for x in configs[i + 1:]]
            print(f"the CUDA context is unusable after {name}: the remaining "
                  f"{len(rest)} configuration(s) run in a fresh process", flush=True)
            if rest:
                results.extend(respawn(args, rest))
            break
    return results


def respawn(args, names):
    with tempfile.NamedTemporaryFile(prefix="gpu-check-", suffix=".json",
                                     delete=False) as f:
        path = f.name
    cmd = [sys.executable, os.path.abspath(__file__), args.artifacts,
           "--seed", str(args.seed), "--only", ",".join(names), "--results-json", path,
           "--no-summary", "--config-timeout", str(args.config_timeout)]
    subprocess.run(cmd)
    try:
        with open(path) as f:
            got = [tuple(x) for x in json.load(f)]
    except (OSError, ValueError):
        got = []
    finally:
        if os.path.exists(path):
            os.unlink(path)
    seen = {g[0] for g in got}
    for n in names:
        if n not in seen:
            got.append((n, "FAIL", "the fresh process did not report it (crashed?)"))
    return got


def main(argv=None):
    p = argparse.ArgumentParser(
        description="GPU artifacts (gpu-artifacts/) against the numpy reference.")
    p.add_argument("artifacts", nargs="?", default=os.path.join(ROOT, "gpu-artifacts"))
    p.add_argument("--seed", type=int, default=None,
                   help="input seed (default: random; printed)")
    p.add_argument("--only", default="",
                   help="comma-separated configuration names or name substrings")
    p.add_argument("--dry-run", action="store_true",
                   help="no torch / GPU: inputs + reference, the device replaced by "
                        "--backend")
    p.add_argument("--backend", choices=("ref", "cpu"), default="ref",
                   help="dry-run device: the reference itself (ref) or spin-exec (cpu)")
    p.add_argument("--spin-exec", default=os.path.join(
        os.environ.get("SPIN_BUILD_DIR", os.path.join(ROOT, "build")), "bin", "spin-exec"))
    p.add_argument("--config-timeout", type=float, default=0,
                   help="abort (with a traceback) if one configuration takes longer "
                        "than this many seconds, e.g. a hung kernel (default: off)")
    p.add_argument("--list", action="store_true")
    p.add_argument("--results-json", default=None, help=argparse.SUPPRESS)
    p.add_argument("--no-summary", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)

    index_path = os.path.join(args.artifacts, "index.json")
    try:
        with open(index_path) as f:
            index = json.load(f)
    except (OSError, ValueError) as e:
        print(f"error: cannot read {index_path}: {e} (run bench/gpu_artifacts.py "
              "on the build machine first)", file=sys.stderr)
        return 2
    configs = select_configs(index["configs"], args.only)
    if args.list:
        for c in configs:
            print(("   " if c.get("compiled") else "NC ") + c["name"])
        return 0
    if not configs:
        print(f"error: no configuration matches --only {args.only!r}", file=sys.stderr)
        return 2
    if args.seed is None:
        args.seed = int.from_bytes(os.urandom(4), "little")

    if args.dry_run:
        backend = CpuBackend(args.spin_exec) if args.backend == "cpu" else RefBackend()
    else:
        backend = TorchBackend()
    if not args.no_summary:
        print(f"gpu_check: {len(configs)} configuration(s) from {index_path} "
              f"(compiler {str(index.get('compiler_version'))[:12]}); device: "
              f"{backend.describe()}")
        print(f"gpu_check: seed {args.seed} (rerun: python3 bench/gpu_check.py "
              f"{args.artifacts} --seed {args.seed} [--only NAME])", flush=True)
    t0 = time.time()
    results = run_all(args, index, configs, backend)
    if args.results_json:
        with open(args.results_json, "w") as f:
            json.dump(results, f)
    counts = {k: sum(1 for r in results if r[1] == k) for k in ("PASS", "FAIL", "SKIP")}
    if not args.no_summary:
        print(f"\nsummary: {counts['PASS']} passed, {counts['FAIL']} failed, "
              f"{counts['SKIP']} skipped (not compiled) of {len(results)} "
              f"configuration(s) in {time.time() - t0:.0f} s; seed {args.seed}; "
              f"backend {backend.name}")
        for name, status, msg in results:
            if status != "PASS":
                print(f"  {status} {name}: {msg[:300]}")
    return 1 if counts["FAIL"] else 0


if __name__ == "__main__":
    sys.exit(main())
