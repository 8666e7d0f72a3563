"""Independent reference implementation of SPIN (Shadow Predictive Indexer).

Written from ``docs/SPIN_SPEC.md`` (the semantics, including the exploration
policies of its §7.1) and ``docs/Runtime-ABI.md`` (the state layout, for
naming) only; it does not share code or structure with
the compiler's lowerings.  It exists so that tests can check the CPU and GPU
code of the compiler bit for bit on *selections* (block masks, top-K indices,
EMA state) and with a tolerance on scores.

Only numpy is used (tested with numpy 1.24 under Debian's /usr/bin/python3).

Conventions (the same letters as the dialect, see docs/Rationale.md):
``B`` requests, ``R`` query rows per request, ``H`` heads, ``Dh`` head dim,
``P`` physical pages of ``S`` slots, ``MB`` block-table width,
``NS = MB * S`` slots, ``bs`` the SPIN block size (divides ``S``),
``NB = NS / bs`` SPIN blocks.

Numerical rules fixed here (where the spec leaves the arithmetic open):

* Scores (SPEC §1) are computed in float64 and returned as float32.  The
  compiled code accumulates in f32, so tests compare scores with a tolerance
  and compare selections only on inputs whose arithmetic is exact.
  The ReLU propagates NaN (``max(NaN, 0) = NaN``); NaN scores are never
  selected by :func:`topk`.
* Queries enter as decoded values (float arrays; ``q_format="f32"``) or,
  with ``q_format="fp8"`` (fp8 e4m3 queries, SPEC §1: only with fp8 e4m3
  keys), as uint8 fp8 e4m3 bit patterns decoded exactly by
  :func:`fp8_e4m3_to_f32`.  A NaN pattern (0x7F, 0xFF) in a query element
  makes that head's dot product NaN for every slot, so every visible score
  of the row is NaN (ReLU and the head sum propagate it, even for w = 0).
* All state arithmetic (SPEC §2, §3.10, §4) is float32 with every operation
  rounded, no fused multiply-add: ``V = a32 * V + b32 * z`` with
  ``a32 = float32(alpha)`` and ``b32 = float32(1.0 - alpha)`` (the
  subtraction in float64).  Observations whose score is not finite (NaN,
  +-inf) are skipped by the EMA (project rule).
* Pooling (SPEC §3.3) is float32: max; mean = sequential float32 sum
  (starting from +0.0) in increasing slot order divided by the count; top4 =
  sequential float32 sum (starting from +0.0) of the up-to-4 largest values in
  descending order, divided by their count.  A block with no visible slot
  pools to -inf.
* Integer/hash rules (SPEC §3.4-§3.7) use Python integers (exact), uint64
  arithmetic masked to 64 bits.  Block ages (SPEC §7.1) are Python integers;
  the staleness-score key is ``float32(age) * float32(max(S, 0))`` rounded
  once to float32, a NaN score counting as 0.
"""

import math

import numpy as np

__all__ = [
    "fp8_e4m3_to_f32", "bf16_to_f32", "f32_to_bf16_bits", "f16_to_f32",
    "Q_FORMATS", "decode_queries", "dense_scores", "sparse_scores", "topk",
    "splitmix64", "explore_hash", "budget", "num_blocks_of",
    "EXPLORE_POLICIES", "block_ages", "staleness_keys",
    "LayerState", "predict", "pool", "select_row", "select",
    "ema_update", "observe", "commit", "reset", "block_sparsity",
    "spin_step", "miss_rate", "topk_recall", "pearson",
]

_F32 = np.float32
_NEG_INF32 = np.float32(-np.inf)
_MASK64 = (1 << 64) - 1


# ---------------------------------------------------------------------------
# Element formats (SPEC §1: keys are bf16, f16, f32 or fp8 e4m3 + f32 scale)
# ---------------------------------------------------------------------------

def _build_fp8_e4m3fn_table():
    """256-entry decode table for OCP fp8 E4M3FN, from the format definition.

    Bit layout ``s eeee mmm``; exponent bias 7; no infinities.
    * ``e == 0``: subnormal (or zero), value ``(-1)^s * m * 2^-9``
      (that is ``m/8 * 2^(1-7)``);
    * ``1 <= e <= 15``: normal, value ``(-1)^s * (1 + m/8) * 2^(e-7)``;
    * ``e == 15 and m == 7`` (0x7F, 0xFF): NaN.  Largest finite: 0x7E = 448.
    """
    table = np.empty(256, dtype=np.float32)
    for bits in range(256):
        sign = -1.0 if bits & 0x80 else 1.0
        exp = (bits >> 3) & 0xF
        man = bits & 0x7
        if exp == 0xF and man == 0x7:
            value = float("nan")
        elif exp == 0:
            value = sign * man * 2.0 ** -9
        else:
            value = sign * (1.0 + man / 8.0) * 2.0 ** (exp - 7)
        table[bits] = value  # every value is exact in float32
    return table


_FP8_E4M3FN_TABLE = _build_fp8_e4m3fn_table()


def fp8_e4m3_to_f32(bits):
    """Decode fp8 E4M3FN bit patterns (uint8 array) to float32 (SPEC §1)."""
    bits = np.asarray(bits)
    if bits.dtype != np.uint8:
        raise TypeError("fp8_e4m3_to_f32 expects uint8 bit patterns")
    return _FP8_E4M3FN_TABLE[bits]


def bf16_to_f32(bits):
    """Decode bfloat16 bit patterns (uint16 array) to float32 (SPEC §1).

    A bf16 value is the upper half of the float32 with the same bits.
    """
    bits = np.asarray(bits)
    if bits.dtype != np.uint16:
        raise TypeError("bf16_to_f32 expects uint16 bit patterns")
    return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32)


def f32_to_bf16_bits(x):
    """Round float32 values to bfloat16 (nearest, ties to even); uint16 bits.

    NaN stays NaN (quiet bit set, sign kept); overflow rounds to +-inf.
    """
    x = np.ascontiguousarray(np.asarray(x, dtype=np.float32))
    u = x.view(np.uint32).astype(np.uint64)
    lsb = (u >> np.uint64(16)) & np.uint64(1)
    rounded = (u + np.uint64(0x7FFF) + lsb) >> np.uint64(16)
    nan_bits = (u >> np.uint64(16)) | np.uint64(0x0040)
    out = np.where(np.isnan(x), nan_bits, rounded)
    return out.astype(np.uint16)


def f16_to_f32(bits):
    """Decode IEEE binary16 bit patterns (uint16 array) to float32 (SPEC §1)."""
    bits = np.ascontiguousarray(np.asarray(bits, dtype=np.uint16))
    return bits.view(np.float16).astype(np.float32)


#: How queries are passed to the scoring functions: ``"f32"`` decoded values
#: (float arrays: bf16 / f16 callers decode with :func:`bf16_to_f32` /
#: :func:`f16_to_f32` first), ``"fp8"`` uint8 fp8 e4m3 bit patterns.
Q_FORMATS = ("f32", "fp8")


def decode_queries(q, q_format="f32"):
    """Queries as float32 values (SPEC §1: q enters the score with its exact
    value).

    ``q_format="f32"``: ``q`` holds the values already (any float array; a
    uint8 array is refused, since bit patterns read as integers would be
    wrong values).  ``q_format="fp8"``: ``q`` holds fp8 e4m3 bit patterns
    (uint8), decoded exactly (-0.0, subnormals and 448 included; 0x7F and
    0xFF are NaN).
    """
    if q_format not in Q_FORMATS:
        raise ValueError("q_format must be one of %r, got %r" % (Q_FORMATS, q_format))
    q = np.asarray(q)
    if q_format == "fp8":
        if q.dtype != np.uint8:
            raise TypeError("q_format='fp8' takes uint8 fp8 e4m3 bit patterns, "
                            "got %s" % q.dtype)
        return fp8_e4m3_to_f32(q)
    if q.dtype == np.uint8:
        raise TypeError("q is uint8: pass q_format='fp8' for fp8 e4m3 bit "
                        "patterns, or decoded values")
    return np.asarray(q, dtype=np.float32)


# ---------------------------------------------------------------------------
# The dense / sparse indexer and top-K (SPEC §1, §3.8-§3.9)
# ---------------------------------------------------------------------------

def _gather_keys(keys, scales, block_table_row, n):
    """Keys [n, Dh] (float64) and scales [n] of slots 0..n-1 of one request.

    Logical slot ``i`` lives in physical page ``block_table[i // S]`` at
    offset ``i % S`` (SPEC §1, paged cache).  Only visible pages are read.
    """
    P, S, Dh = keys.shape
    if n == 0:
        return np.zeros((0, Dh)), np.zeros((0,))
    slots = np.arange(n)
    pages = np.asarray(block_table_row, dtype=np.int64)[slots // S]
    if np.any(pages < 0) or np.any(pages >= P):
        raise ValueError("block-table entry of a visible page out of [0, P)")
    offs = slots % S
    k = keys[pages, offs, :].astype(np.float64)
    if scales is None:
        sc = np.ones(n)
    else:
        sc = np.asarray(scales)[pages, offs].astype(np.float64)
    return k, sc


def _scores_impl(q, w, keys, scales, block_table, lengths, mask, bs,
                 q_format="f32"):
    q = decode_queries(q, q_format)
    w = np.asarray(w, dtype=np.float32)
    keys = np.asarray(keys, dtype=np.float32)
    block_table = np.asarray(block_table)
    lengths = np.asarray(lengths)
    Bq, R, H, Dh = q.shape
    P, S, Dk = keys.shape
    if Dk != Dh:
        raise ValueError("key head dim differs from the query's")
    MB = block_table.shape[1]
    NS = MB * S
    if mask is not None:
        mask = np.asarray(mask, dtype=bool)
        if NS % bs != 0 or mask.shape != (Bq, NS // bs):
            raise ValueError("mask must be [B, NS / bs]")
    z = np.full((Bq, R, NS), -np.inf, dtype=np.float32)
    for b in range(Bq):
        nmax = int(lengths[b].max()) if R else 0
        if nmax < 0 or nmax > NS:
            raise ValueError("visible length out of [0, MB*S]")
        k, sc = _gather_keys(keys, scales, block_table[b], nmax)
        # [R, H, n] in float64; ReLU(dot * scale) (NaN propagates), then
        # the weighted head sum.
        dots = np.einsum("rhd,nd->rhn", q[b].astype(np.float64), k)
        act = np.maximum(dots * sc[None, None, :], 0.0)
        zb = np.einsum("rh,rhn->rn", w[b].astype(np.float64), act)
        for r in range(R):
            n = int(lengths[b, r])
            if n < 0:
                raise ValueError("negative visible length")
            row = zb[r, :n].astype(np.float32)
            if mask is not None:
                row = np.where(mask[b][np.arange(n) // bs], row, _NEG_INF32)
            z[b, r, :n] = row
    return z


def dense_scores(q, w, keys, scales, block_table, lengths, *, q_format="f32"):
    """Dense indexer scores (SPEC §1).

    ``z[b,r,i] = sum_h w[b,r,h] * max(dot(q[b,r,h,:], key(i)) * scale(i), 0)``
    for ``i < N = lengths[b,r]``, ``-inf`` for ``i >= N``.

    q [B,R,H,Dh]: decoded f32 values, or with ``q_format="fp8"`` uint8 fp8
    e4m3 bit patterns (see :func:`decode_queries`; SPEC §1 takes fp8 queries
    only with fp8 keys, the caller folding any query scale into w),
    w f32 [B,R,H], keys f32 [P,S,Dh] (decoded),
    scales f32 [P,S] or None (1.0), block_table int [B,MB], lengths int [B,R].
    Computed in float64, returned as float32 [B,R,NS].
    """
    return _scores_impl(q, w, keys, scales, block_table, lengths, None, None,
                        q_format)


def sparse_scores(q, w, keys, scales, block_table, lengths, mask, bs, *,
                  q_format="f32"):
    """Sparse indexer (SPEC §3.8): dense scores restricted to selected blocks.

    Slot ``i`` is scored iff ``i < N`` and ``mask[b, i // bs]``; every other
    slot is ``-inf``.  mask bool [B, NB] with ``NB = NS / bs``.  ``q`` as in
    :func:`dense_scores`.
    """
    return _scores_impl(q, w, keys, scales, block_table, lengths, mask, bs,
                        q_format)


def _topk_indices(values, eligible, k):
    """Indices of the k largest eligible values, ties to the lower index,
    padded with -1 (SPEC §1).  NaN is never eligible."""
    values = np.asarray(values)
    idx = np.nonzero(np.asarray(eligible, dtype=bool) & ~np.isnan(values))[0]
    # Stable sort of the negated values over increasing indices: descending
    # score, ties keep the lower index first.  -inf/+inf are ordinary values.
    order = idx[np.argsort(-values[idx].astype(np.float64), kind="stable")]
    out = np.full(k, -1, dtype=np.int32)
    take = order[:k]
    out[:take.size] = take
    return out


def topk(z, lengths, k, mask=None, bs=None):
    """Top-K per row (SPEC §1 TopK, §3.9, §4 per-row top-K over the union).

    z [B,R,NS]; returns int32 [B,R,k]: slot indices by score descending,
    ties to the lower index, padded with -1.  Slot ``i`` of row (b, r) is
    eligible iff ``i < lengths[b,r]``, ``mask[b, i // bs]`` (when a mask is
    given) and ``z`` is not NaN.
    """
    z = np.asarray(z)
    lengths = np.asarray(lengths)
    Bz, R, NS = z.shape
    out = np.full((Bz, R, k), -1, dtype=np.int32)
    slots = np.arange(NS)
    for b in range(Bz):
        for r in range(R):
            elig = slots < int(lengths[b, r])
            if mask is not None:
                if bs is None:
                    raise ValueError("topk with a mask needs bs")
                elig &= np.asarray(mask[b], dtype=bool)[slots // bs]
            out[b, r] = _topk_indices(z[b, r], elig, k)
    return out


# ---------------------------------------------------------------------------
# Integer rules: budget, exploration hash (SPEC §3.4-§3.7)
# ---------------------------------------------------------------------------

def splitmix64(x):
    """The splitmix64 finalizer ``mix`` on uint64 (SPEC §3.7).

    ``x += 0x9e3779b97f4a7c15; x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9;
    x = (x ^ (x >> 27)) * 0x94d049bb133111eb; return x ^ (x >> 31)``,
    all modulo 2^64.  ``splitmix64(0) == 0xe220a8397b1dcdaf``.
    """
    x = (int(x) + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def explore_hash(seed, request_id, layer, iteration, block):
    """``h = mix(mix(mix(mix(mix(seed) ^ request_id) ^ layer) ^ it) ^ j)``
    (SPEC §3.7).  Signed inputs are read as their 64-bit two's complement."""
    h = splitmix64(int(seed) & _MASK64)
    h = splitmix64(h ^ (int(request_id) & _MASK64))
    h = splitmix64(h ^ (int(layer) & _MASK64))
    h = splitmix64(h ^ (int(iteration) & _MASK64))
    return splitmix64(h ^ (int(block) & _MASK64))


def num_blocks_of(n, bs):
    """``B = ceil(N / bs)`` (SPEC §3.1)."""
    return -(-int(n) // int(bs))


def budget(num_blocks, k, bs, sparsity):
    """Block budget (SPEC §3.4).

    ``m = min(B, max(ceil(K / bs), ceil((1 - rho) * B - 1e-9)))``; the first
    ceiling is integer, the last one is computed in float64 exactly as
    written (``(1.0 - rho) * B - 1e-9``).
    """
    B = int(num_blocks)
    need = -(-int(k) // int(bs))
    frac = math.ceil((1.0 - float(sparsity)) * float(B) - 1e-9)
    return min(B, max(need, int(frac)))


#: Exploration policies (SPEC §3.7 random; §7.1 staleness-score, block-age).
EXPLORE_POLICIES = ("random", "staleness-score", "block-age")
_I32_MAX = 2 ** 31 - 1


def block_ages(state, num_blocks):
    """Block ages (SPEC §7.1): ``age[j] = it + 1 - last[j]`` for the first
    ``num_blocks`` blocks, as Python integers.  A block scored by the last
    update has age 1; a never-scored one ``it + 1``."""
    return [state.it + 1 - state.last[j] for j in range(int(num_blocks))]


def staleness_keys(ages, S):
    """Staleness-score keys (SPEC §7.1): ``float32(age) * max(S[j], 0)`` in
    float32 (one rounding), a NaN predicted score counting as 0."""
    keys = np.zeros(len(ages), dtype=np.float32)
    for j, age in enumerate(ages):
        s = _F32(S[j])
        positive = _F32(0.0) if (np.isnan(s) or s < 0) else s
        keys[j] = _F32(_F32(age) * positive)
    return keys


def _forced_blocks(B):
    """Forced blocks F = {0, B-1} (SPEC §3.5); {0} when B == 1, {} when 0."""
    if B <= 0:
        return []
    if B == 1:
        return [0]
    return [0, B - 1]


# ---------------------------------------------------------------------------
# State (SPEC §2, Runtime-ABI "State pool")
# ---------------------------------------------------------------------------

class LayerState:
    """SPIN state of ONE request for ONE indexer layer (SPEC §2).

    ``level == "slot"`` (A0/A1): ``V[i]`` vertical EMA by absolute slot,
    ``D[o]`` diagonal EMA by offset ``o = p - i``.
    ``level == "block"`` (A2): ``V[j]`` is the block EMA ``Vb[j]`` and
    ``D[o]`` is ``Db[o]`` with ``o = p // bs - j`` (first NBcap entries used).
    Both are float32 vectors of length ``capacity`` (the ABI's ``C``).
    ``it`` counts decode iterations since the last reset (0 = warm-up next).
    ``pending`` holds the buffered, uncommitted MTP observations (the ABI's
    ``obs_*`` fields), or None.
    ``last`` (SPEC §7.1, the ABI's ``last_observed``): for every block ``j``
    of ``block_size`` slots (``ceil(capacity / block_size)`` entries), 0 if
    the block was never scored since the last reset, else ``it + 1`` of the
    update that last scored it.  Kept for every state here (it changes
    nothing for the random policy); the ABI has it only where a policy reads
    it.
    """

    def __init__(self, capacity, block_size, level="slot"):
        if level not in ("slot", "block"):
            raise ValueError("level must be 'slot' or 'block'")
        self.capacity = int(capacity)
        self.block_size = int(block_size)
        self.level = level
        self.V = np.zeros(self.capacity, dtype=np.float32)
        self.D = np.zeros(self.capacity, dtype=np.float32)
        self.it = 0
        self.pending = None
        self.last = [0] * num_blocks_of(self.capacity, self.block_size)

    @property
    def obs_rows(self):
        """Number of buffered MTP rows (0 = none), as in the ABI."""
        return 0 if self.pending is None else len(self.pending["rows"])

    def copy(self):
        other = LayerState(self.capacity, self.block_size, self.level)
        other.V = self.V.copy()
        other.D = self.D.copy()
        other.it = self.it
        other.last = list(self.last)
        if self.pending is not None:
            other.pending = {
                "rows": [(z.copy(), p, n) for (z, p, n) in self.pending["rows"]],
                "mask": self.pending["mask"].copy(),
                "bs": self.pending["bs"],
                "pooling": self.pending["pooling"],
            }
        return other

    def __repr__(self):
        return ("LayerState(level=%r, capacity=%d, block_size=%d, it=%d, "
                "obs_rows=%d)" % (self.level, self.capacity, self.block_size,
                                  self.it, self.obs_rows))


def _check_row(state, p, n):
    """SPEC §2: ``N <= p + 1 <= C`` (``p < C``), so offsets stay in range."""
    p, n = int(p), int(n)
    if n < 0 or p < 0 or p >= state.capacity or n > p + 1:
        raise ValueError("need 0 <= N <= p + 1 <= C (p=%d, N=%d, C=%d)"
                         % (p, n, state.capacity))
    return p, n


def reset(state):
    """Reset (SPEC §2, ABI ``reset``): zero V and D, ``it = 0``, drop any
    buffered MTP rows, forget every block's last observation (SPEC §7.1)."""
    state.V[:] = 0
    state.D[:] = 0
    state.it = 0
    state.pending = None
    state.last = [0] * len(state.last)


# ---------------------------------------------------------------------------
# Prediction and pooling (SPEC §3.2-§3.3, A2 in §3)
# ---------------------------------------------------------------------------

def predict(state, p, N, bs=None):
    """Predicted scores (SPEC §3.2; A2 block level in §3 "Block-reduction").

    Slot level: float32 array of length N, ``zhat[i] = max(V[i], D[p - i])``.
    Block level: float32 array of length ``ceil(N / bs)``,
    ``S[j] = max(Vb[j], Db[p // bs - j])`` (bs defaults to the state's).
    """
    p, n = _check_row(state, p, N)
    if state.level == "slot":
        i = np.arange(n)
        return np.maximum(state.V[i], state.D[p - i]).astype(np.float32)
    bs = state.block_size if bs is None else int(bs)
    j = np.arange(num_blocks_of(n, bs))
    return np.maximum(state.V[j], state.D[p // bs - j]).astype(np.float32)


def _pool_values(vals, kind):
    """Pool one block's float32 values (SPEC §3.3); -inf when empty."""
    vals = np.asarray(vals, dtype=np.float32)
    if vals.size == 0:
        return _NEG_INF32
    if kind == "max":
        return _F32(np.max(vals))
    if kind == "mean":
        chosen = vals
    elif kind == "top4":
        # Up to 4 largest, in descending order.
        chosen = np.sort(vals)[::-1][:4]
    else:
        raise ValueError("pooling must be 'max', 'mean' or 'top4'")
    acc = _F32(0.0)
    for v in chosen:  # sequential float32 sum
        acc = _F32(acc + v)
    return _F32(acc / _F32(chosen.size))


def pool(zhat, N, bs, kind="max"):
    """Block scores (SPEC §3.3): pool ``zhat`` over the visible slots
    ``[j*bs, min((j+1)*bs, N))`` of every block ``j < ceil(N / bs)``.

    kind: "max" | "mean" | "top4" (float32 arithmetic, see module docstring).
    """
    zhat = np.asarray(zhat, dtype=np.float32)
    n, bs = int(N), int(bs)
    B = num_blocks_of(n, bs)
    out = np.empty(B, dtype=np.float32)
    for j in range(B):
        out[j] = _pool_values(zhat[j * bs:min((j + 1) * bs, n)], kind)
    return out


# ---------------------------------------------------------------------------
# Selection (SPEC §3 steps 1-7, A0/A2, §4 MTP masks)
# ---------------------------------------------------------------------------

def _rank_desc(scores, candidates, count):
    """The ``count`` candidates with the highest score, ties lower index."""
    cands = np.asarray(sorted(candidates), dtype=np.int64)
    if count <= 0 or cands.size == 0:
        return []
    vals = np.asarray(scores, dtype=np.float64)[cands]
    order = np.argsort(-vals, kind="stable")
    return [int(c) for c in cands[order[:count]]]


def select_row(state, request_id, layer, p, N, *, topk_k, bs, sparsity,
               explore=0.0, seed=0, reduction="a1", pooling="max",
               explore_policy="random"):
    """Selected blocks of one row (SPEC §3 steps 1-7); sorted int64 array.

    1. ``B = ceil(N / bs)``; none when ``B == 0``.
    5. Warm-up (``it == 0``): all ``B`` blocks (every reduction).
    A1 (default): 2-3. ``S = pool(max(V[i], D[p-i]))``; 4. budget ``m``;
       5. forced ``F = {0, B-1}``; 6. ``e = min(floor(gamma*m), m-|F|)``
       (>= 0), exploit ``x = m - |F| - e`` highest ``S`` among non-forced
       blocks (ties lower index); 7. explore ``e`` blocks among those not yet
       selected: the smallest hashes ("random"), the largest ages
       ("block-age") or the largest :func:`staleness_keys`
       ("staleness-score"), ties to the lower index (SPEC §7.1).
    A2: as A1 with ``S[j] = max(Vb[j], Db[p // bs - j])`` (block state).
    A0: the top-``K`` slots by ``zhat`` among ``i < N`` (ties lower index),
       every block holding one, plus ``F``; no budget, no exploration.
    """
    if explore_policy not in EXPLORE_POLICIES:
        raise ValueError("explore_policy must be one of %s" % (EXPLORE_POLICIES,))
    p, n = _check_row(state, p, N)
    bs = int(bs)
    B = num_blocks_of(n, bs)
    if B == 0:
        return np.zeros(0, dtype=np.int64)
    if state.it == 0:
        return np.arange(B, dtype=np.int64)
    forced = _forced_blocks(B)

    if reduction == "a0":
        if state.level != "slot":
            raise ValueError("A0 needs a slot-level state")
        zhat = predict(state, p, n)
        slots = _topk_indices(zhat, np.ones(n, dtype=bool), int(topk_k))
        chosen = set(forced) | {int(s) // bs for s in slots if s >= 0}
        return np.asarray(sorted(chosen), dtype=np.int64)

    if reduction == "a1":
        if state.level != "slot":
            raise ValueError("A1 needs a slot-level state")
        S = pool(predict(state, p, n), n, bs, pooling)
    elif reduction == "a2":
        if state.level != "block":
            raise ValueError("A2 needs a block-level state")
        S = predict(state, p, n, bs)
    else:
        raise ValueError("reduction must be 'a0', 'a1' or 'a2'")

    m = budget(B, topk_k, bs, sparsity)
    nf = len(forced)
    e = max(0, min(int(math.floor(float(explore) * m)), m - nf))
    x = max(0, m - nf - e)
    selected = set(forced)
    others = [j for j in range(B) if j not in selected]
    selected.update(_rank_desc(S, others, x))
    if e > 0:
        rest = [j for j in range(B) if j not in selected]
        if explore_policy == "random":
            keyed = sorted((explore_hash(seed, request_id, layer, state.it, j), j)
                           for j in rest)
        elif explore_policy == "block-age":
            ages = block_ages(state, B)
            keyed = sorted((-ages[j], j) for j in rest)
        else:
            keys = staleness_keys(block_ages(state, B), S)
            keyed = sorted((-float(keys[j]), j) for j in rest)
        selected.update(j for (_, j) in keyed[:e])
    return np.asarray(sorted(selected), dtype=np.int64)


def select(state, request_id, layer, rows, mtp_mask="union", *, num_blocks,
           **opts):
    """Block mask of one request for one step (SPEC §3, §4).

    rows: ``[(p_r, N_r), ...]``.  Every row runs :func:`select_row` against
    the same state; the mask is the union ("union", SPEC §4 default) or row
    0's selection ("row0"). A warm-up step (``it == 0``) selects every block
    of every row under both policies.  Returns bool [num_blocks].  ``opts`` are
    :func:`select_row`'s keyword options.
    """
    mask = np.zeros(int(num_blocks), dtype=bool)
    if mtp_mask not in ("union", "row0"):
        raise ValueError("mtp_mask must be 'union' or 'row0'")
    # A warm-up step selects every block for every row (SPEC §4), whatever
    # the sharing policy; otherwise "row0" uses row 0's selection only.
    use = rows if mtp_mask == "union" or state.it == 0 else rows[:1]
    for (p, n) in use:
        sel = select_row(state, request_id, layer, p, n, **opts)
        if sel.size and sel[-1] >= mask.size:
            raise ValueError("selected block beyond num_blocks")
        mask[sel] = True
    return mask


# ---------------------------------------------------------------------------
# EMA update, MTP observe/commit (SPEC §3.10, §4)
# ---------------------------------------------------------------------------

def _ema_coefficients(alpha):
    a32 = _F32(alpha)
    b32 = _F32(1.0 - float(alpha))  # 1 - alpha in float64, then rounded
    return a32, b32


def _block_observations(z_row, n, mask, bs, pooling):
    """A2 observations: (block, pooled z) for every scored block, pooling the
    finite observed scores of its visible slots; blocks with none skipped."""
    z_row = np.asarray(z_row, dtype=np.float32)
    out = []
    for j in range(num_blocks_of(n, bs)):
        if not mask[j]:
            continue
        vals = z_row[j * bs:min((j + 1) * bs, n)]
        vals = vals[np.isfinite(vals)]
        if vals.size == 0:
            continue
        out.append((j, _pool_values(vals, pooling)))
    return out


def _apply_ema(state, z_row, p, n, mask, bs, alpha, pooling):
    """One row's EMA (SPEC §3.10) without touching ``it``; every scored block
    ``j < ceil(n / bs)`` is marked observed at ``it + 1`` (SPEC §7.1),
    whatever its scores."""
    p, n = _check_row(state, p, n)
    bs = int(bs)
    mask = np.asarray(mask, dtype=bool)
    for j in range(num_blocks_of(n, bs)):
        if mask[j]:
            state.last[j] = min(state.it + 1, _I32_MAX)
    a32, b32 = _ema_coefficients(alpha)
    if state.level == "slot":
        z_row = np.asarray(z_row, dtype=np.float32)
        i = np.arange(n)
        scored = mask[i // bs] & np.isfinite(z_row[:n])
        i = i[scored]
        zi = z_row[i]
        o = p - i  # distinct within one row
        # float32 products and sum, each rounded (no FMA).
        state.V[i] = (a32 * state.V[i]) + (b32 * zi)
        state.D[o] = (a32 * state.D[o]) + (b32 * zi)
    else:
        pb = p // bs
        for j, zj in _block_observations(z_row, n, mask, bs,
                                         pooling or "max"):
            state.V[j] = _F32(_F32(a32 * state.V[j]) + _F32(b32 * zj))
            o = pb - j
            state.D[o] = _F32(_F32(a32 * state.D[o]) + _F32(b32 * zj))


def ema_update(state, z_row, p, N, mask, bs, alpha, pooling=None):
    """EMA update of one decode row, then ``it += 1`` (SPEC §3.10).

    Slot level: every scored slot ``i`` (``mask[i // bs]`` and ``i < N``)
    with a finite score updates ``V[i]`` and ``D[p - i]``:
    ``X = a32 * X + b32 * z[i]`` in float32.
    Block level (A2): every scored block ``j < ceil(N / bs)`` pools its
    finite observed scores with ``pooling`` (default "max") and updates
    ``Vb[j]`` and ``Db[p // bs - j]`` the same way.
    z_row: the row's scores by slot (length >= N); mask bool [>= ceil(N/bs)].
    """
    _apply_ema(state, z_row, p, N, mask, bs, alpha, pooling)
    state.it += 1


def observe(state, rows_z, rows, mask, bs, pooling=None, *, alpha):
    """An MTP step's observations (SPEC §4, ABI ``obs_*``): row 0 folded into
    the state at once, every row buffered for :func:`commit`.

    rows_z: per row the scores by slot; rows: ``[(p_r, N_r), ...]``; mask:
    the step's scored blocks.  Row 0 is the verified token, which every
    commit replays first whatever the accepted count, so folding it now
    (``alpha`` as in :func:`ema_update`, ``it`` unchanged) leaves every state
    after the commit, and every selection, as SPEC §4's deferred replay of
    rows ``0..a`` does (docs/SPIN_SPEC.md §7.2).  Raises if rows are already
    buffered (commit first).
    """
    if state.pending is not None:
        raise ValueError("observations already buffered; commit them first")
    if len(rows_z) != len(rows):
        raise ValueError("one score row per (p, N) row")
    buffered = []
    for z, (p, n) in zip(rows_z, rows):
        p, n = _check_row(state, p, n)
        buffered.append((np.array(z, dtype=np.float32), p, n))
    if not buffered:
        return
    mask = np.array(mask, dtype=bool)
    z0, p0, n0 = buffered[0]
    _apply_ema(state, z0, p0, n0, mask, bs, alpha, pooling)
    state.pending = {"rows": buffered, "mask": mask,
                     "bs": int(bs), "pooling": pooling}


def commit(state, accepted, alpha, mtp_update="prefix"):
    """Replay buffered MTP rows (SPEC §4); no-op when nothing is buffered.

    "prefix": rows ``1..accepted`` in order (:func:`observe` folded row 0),
    each from the state the previous one left (requires ``0 <= accepted <
    obs_rows``); "row0": none (row 0 alone is kept).  Then ``it += 1`` once
    and the buffer is cleared.
    """
    if state.pending is None:
        return
    rows = state.pending["rows"]
    if mtp_update == "prefix":
        a = int(accepted)
        if a < 0 or a >= len(rows):
            raise ValueError("need 0 <= accepted < obs_rows")
        replay = rows[1:a + 1]
    elif mtp_update == "row0":
        replay = []
    else:
        raise ValueError("mtp_update must be 'prefix' or 'row0'")
    for z, p, n in replay:
        _apply_ema(state, z, p, n, state.pending["mask"], state.pending["bs"],
                   alpha, state.pending["pooling"])
    state.it += 1
    state.pending = None


# ---------------------------------------------------------------------------
# Realized sparsity (SPEC §4, §5)
# ---------------------------------------------------------------------------

def block_sparsity(mask, N, bs):
    """Realized block sparsity of a row (SPEC §5):
    ``1 - (selected blocks among j < ceil(N/bs)) / ceil(N/bs)``; 0.0 when
    ``N == 0``.  Returned as a Python float (float64 arithmetic)."""
    B = num_blocks_of(N, bs)
    if B == 0:
        return 0.0
    sel = int(np.count_nonzero(np.asarray(mask, dtype=bool)[:B]))
    return 1.0 - sel / B


# ---------------------------------------------------------------------------
# One compiled decode step for a batch
# ---------------------------------------------------------------------------

def spin_step(states, request_ids, layer, q, w, keys, scales, block_table,
              lengths, positions, *, k, bs, sparsity, explore=0.0, seed=0,
              alpha=0.5, pooling="max", reduction="a1", mtp_mask="union",
              mtp_update="prefix", accepted=None, reset_flags=None,
              explore_policy="random", q_format="f32"):
    """One decode step of one layer for a batch, as the compiled graph does.

    ``states[b]`` is the LayerState of request ``request_ids[b]``.
    ``reset_flags`` (optional bool [B], the ABI's ``spin.reset``) resets a
    request's state before the step.
    R == 1 (SPEC §3): select, sparse score, top-K over the mask,
    ema_update.  R > 1 (MTP, SPEC §4): commit the buffered rows with
    ``accepted[b]`` (if any), select over all rows with ``mtp_mask``, score,
    top-K per row over the mask, observe.  ``pooling`` is the A1 prediction
    pooling and the A2 observation pooling.  ``q`` is decoded f32 values or,
    with ``q_format="fp8"``, uint8 fp8 e4m3 bit patterns (as in
    :func:`dense_scores`).

    Returns (topk int32 [B,R,k], mask bool [B,NB], sparsity f32 [B,R]
    measured on the mask, scores f32 [B,R,NS]).
    """
    q = decode_queries(q, q_format)
    lengths = np.asarray(lengths)
    positions = np.asarray(positions)
    Bq, R = q.shape[:2]
    S = np.asarray(keys).shape[1]
    NS = np.asarray(block_table).shape[1] * S
    if S % bs != 0:
        raise ValueError("bs must divide the page size")
    NB = NS // bs
    opts = dict(topk_k=k, bs=bs, sparsity=sparsity, explore=explore,
                seed=seed, reduction=reduction, pooling=pooling,
                explore_policy=explore_policy)
    mask = np.zeros((Bq, NB), dtype=bool)
    for b in range(Bq):
        st = states[b]
        if reset_flags is not None and reset_flags[b]:
            reset(st)
        if R > 1:
            if st.pending is not None:
                if accepted is None:
                    raise ValueError("buffered MTP rows need accepted counts")
                commit(st, accepted[b], alpha, mtp_update)
        elif st.pending is not None:
            raise ValueError("a decode step cannot commit buffered MTP rows")
        rows = [(int(positions[b, r]), int(lengths[b, r])) for r in range(R)]
        mask[b] = select(st, request_ids[b], layer, rows, mtp_mask,
                         num_blocks=NB, **opts)
    z = sparse_scores(q, w, keys, scales, block_table, lengths, mask, bs)
    idx = topk(z, lengths, k, mask=mask, bs=bs)
    sp = np.zeros((Bq, R), dtype=np.float32)
    for b in range(Bq):
        for r in range(R):
            sp[b, r] = block_sparsity(mask[b], lengths[b, r], bs)
        st = states[b]
        if R == 1:
            ema_update(st, z[b, 0], positions[b, 0], lengths[b, 0], mask[b],
                       bs, alpha, pooling)
        else:
            rows = [(int(positions[b, r]), int(lengths[b, r]))
                    for r in range(R)]
            observe(st, [z[b, r] for r in range(R)], rows, mask[b], bs,
                    pooling, alpha=alpha)
    return idx, mask, sp, z


# ---------------------------------------------------------------------------
# Metrics (SPEC §5)
# ---------------------------------------------------------------------------

def miss_rate(dense_topk, spin_topk):
    """Miss rate per row (SPEC §5): ``|T* \\ T| / |T*|`` ignoring -1 padding;
    0 when ``T*`` is empty.  Inputs [..., k]; returns float64 [...]."""
    dense_topk = np.asarray(dense_topk)
    spin_topk = np.asarray(spin_topk)
    lead = dense_topk.shape[:-1]
    dt = dense_topk.reshape(-1, dense_topk.shape[-1])
    st = spin_topk.reshape(-1, spin_topk.shape[-1])
    out = np.zeros(dt.shape[0], dtype=np.float64)
    for r in range(dt.shape[0]):
        truth = {int(x) for x in dt[r] if x >= 0}
        got = {int(x) for x in st[r] if x >= 0}
        if truth:
            out[r] = len(truth - got) / len(truth)
    return out.reshape(lead)


def topk_recall(prediction, z, k, N):
    """Top-K recall of a predictor for one row (SPEC §5):
    ``|TopK(prediction) ∩ T*| / |T*|`` with ``T* = TopK(z, K)``, both over
    ``i < N`` with the spec's tie rule; 0 when ``T*`` is empty."""
    n = int(N)
    elig = np.ones(n, dtype=bool)
    truth = {int(x) for x in _topk_indices(np.asarray(z)[:n], elig, k) if x >= 0}
    pred = {int(x) for x in _topk_indices(np.asarray(prediction)[:n], elig, k)
            if x >= 0}
    if not truth:
        return 0.0
    return len(truth & pred) / len(truth)


def pearson(a, b):
    """Pearson correlation of two score vectors (SPEC §5), in float64;
    NaN when either vector is constant."""
    a = np.asarray(a, dtype=np.float64).ravel()
    b = np.asarray(b, dtype=np.float64).ravel()
    if a.shape != b.shape:
        raise ValueError("pearson needs equally long vectors")
    da = a - a.mean()
    db = b - b.mean()
    den = math.sqrt(float(np.dot(da, da)) * float(np.dot(db, db)))
    if den == 0.0:
        return float("nan")
    return float(np.dot(da, db)) / den
