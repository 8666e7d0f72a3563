"""Hand-computed checks of the SPIN reference (docs/SPIN_SPEC.md).

Run with: /usr/bin/python3 -m pytest -q test/reference
Every expected value below is worked out by hand in the comments.
"""

import math
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import spin_reference as sr  # noqa: E402

F32 = np.float32
NINF = -np.inf


def bits32(x):
    return np.asarray(x, dtype=np.float32).view(np.uint32)


# ---------------------------------------------------------------------------
# Element formats (SPEC §1)
# ---------------------------------------------------------------------------

def test_fp8_known_patterns():
    v = sr.fp8_e4m3_to_f32(np.array(
        [0x38, 0x7E, 0x01, 0x80, 0x00, 0x7F, 0xFF, 0x08, 0x07, 0xC0, 0x39,
         0xFE], dtype=np.uint8))
    assert v.dtype == np.float32
    assert v[0] == 1.0                      # e=7, m=0
    assert v[1] == 448.0                    # e=15, m=6: 1.75 * 2^8
    assert v[2] == 2.0 ** -9                # smallest subnormal
    assert v[3] == 0.0 and np.signbit(v[3])  # -0.0
    assert v[4] == 0.0 and not np.signbit(v[4])
    assert np.isnan(v[5]) and np.isnan(v[6])  # 0x7F / 0xFF
    assert v[7] == 2.0 ** -6                # smallest normal
    assert v[8] == 7 * 2.0 ** -9            # largest subnormal
    assert v[9] == -2.0
    assert v[10] == 1.125
    assert v[11] == -448.0


def test_fp8_table_properties():
    t = sr.fp8_e4m3_to_f32(np.arange(256, dtype=np.uint8))
    assert np.count_nonzero(np.isnan(t)) == 2      # no infinities, 2 NaNs
    assert not np.any(np.isinf(t))
    finite = t[~np.isnan(t)]
    # 254 patterns, +0/-0 collapse -> 253 distinct values, symmetric.
    assert np.unique(finite).size == 253
    assert np.array_equal(t[0x80:0xFF], -t[0x00:0x7F])
    # monotone in the positive half
    assert np.all(np.diff(t[0x00:0x7F]) > 0)
    with pytest.raises(TypeError):
        sr.fp8_e4m3_to_f32(np.array([1], dtype=np.int32))


def test_bf16_decode_and_round_to_nearest_even():
    assert sr.bf16_to_f32(np.array([0x3F80], np.uint16))[0] == 1.0
    assert sr.bf16_to_f32(np.array([0xC000], np.uint16))[0] == -2.0
    assert np.isinf(sr.bf16_to_f32(np.array([0x7F80], np.uint16))[0])
    x = np.array([0x3F808000,   # 1 + 2^-8: tie, 0x3F80 even -> stays
                  0x3F818000,   # tie, 0x3F81 odd -> rounds up to 0x3F82
                  0x3F808001,   # above the tie -> 0x3F81
                  0x3F807FFF,   # below the tie -> 0x3F80
                  0x7F7FFFFF,   # max f32 -> overflows to +inf
                  0x7F800000,   # +inf
                  0xBF800000],  # -1
                 dtype=np.uint32).view(np.float32)
    got = sr.f32_to_bf16_bits(x)
    assert got.dtype == np.uint16
    assert list(got) == [0x3F80, 0x3F82, 0x3F81, 0x3F80, 0x7F80, 0x7F80,
                         0xBF80]
    nan = sr.f32_to_bf16_bits(np.array([np.nan], np.float32))
    assert np.isnan(sr.bf16_to_f32(nan))[0]


def test_bf16_round_trip_all_patterns():
    allbits = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    f = sr.bf16_to_f32(allbits)
    back = sr.f32_to_bf16_bits(f)
    ok = ~np.isnan(f)
    assert np.array_equal(back[ok], allbits[ok])
    assert np.all(np.isnan(sr.bf16_to_f32(back[~ok])))


# ---------------------------------------------------------------------------
# Scores and top-K (SPEC §1, §3.8-§3.9)
# ---------------------------------------------------------------------------

def _one_request(q, w, keys, n):
    """Shapes for one request with one row; identity block table."""
    q = np.asarray(q, np.float32)[None, None]          # [1,1,H,Dh]
    w = np.asarray(w, np.float32)[None, None]          # [1,1,H]
    keys = np.asarray(keys, np.float32)                # [P,S,Dh]
    bt = np.arange(keys.shape[0], dtype=np.int32)[None]
    lengths = np.array([[n]], np.int32)
    return q, w, keys, bt, lengths


def test_dense_scores_one_head_negative_weight_and_relu():
    # q = [1, 2], w = -2, one page of 4 slots:
    #   k0 = [1, 1]     dot 3   -> -2 * 3 = -6
    #   k1 = [-1, 0]    dot -1  -> ReLU 0 -> -2 * 0 = -0
    #   k2 = [0.5, .25] dot 1   -> -2
    #   k3 (invisible, N = 3)   -> -inf
    q, w, keys, bt, n = _one_request([[1, 2]], [-2],
                                     [[[1, 1], [-1, 0], [.5, .25], [9, 9]]],
                                     3)
    z = sr.dense_scores(q, w, keys, None, bt, n)
    assert z.dtype == np.float32 and z.shape == (1, 1, 4)
    assert list(z[0, 0]) == [-6.0, 0.0, -2.0, NINF]


def test_dense_scores_two_heads_with_scales():
    # heads: q0 = [1, 2] (w0 = 1.5), q1 = [-1, 1] (w1 = -0.5)
    # k0 = [1, 1]:  d0 = 3, d1 = 0       -> 1.5*3 - 0.5*0 = 4.5
    # k1 = [2, -1]: d0 = 0, d1 = -3 -> 0  -> 0
    # k2 = [-1, 3]: d0 = 5, d1 = 4       -> 7.5 - 2 = 5.5
    keys = [[[1, 1], [2, -1], [-1, 3]]]
    q, w, keys, bt, n = _one_request([[1, 2], [-1, 1]], [1.5, -0.5], keys, 3)
    z = sr.dense_scores(q, w, keys, None, bt, n)
    assert list(z[0, 0]) == [4.5, 0.0, 5.5]
    # per-slot scales [2, 1, 0.5] multiply the dot before the ReLU:
    # k0: 6, 0 -> 9;  k2: 2.5, 2 -> 3.75 - 1 = 2.75
    scales = np.array([[2, 1, 0.5]], np.float32)
    z = sr.dense_scores(q, w, keys, scales, bt, n)
    assert list(z[0, 0]) == [9.0, 0.0, 2.75]
    # a negative scale flips the sign before the ReLU: k0 * -1 -> d0 = -3 -> 0
    scales = np.array([[-1, 1, 1]], np.float32)
    z = sr.dense_scores(q, w, keys, scales, bt, n)
    assert list(z[0, 0]) == [0.0, 0.0, 5.5]


def test_dense_scores_paging_through_block_table():
    # 3 pages of S = 2 slots, Dh = 1, q = 1, w = 1 -> z = ReLU(key).
    keys = np.array([[[10], [11]],
                     [[np.nan], [np.nan]],     # never referenced
                     [[20], [21]]], np.float32)
    q = np.ones((2, 1, 1, 1), np.float32)
    w = np.ones((2, 1, 1), np.float32)
    # request 0: logical page 0 -> physical 2, logical 1 -> physical 0
    # request 1: only page 0 visible (N = 1); its second entry is garbage
    bt = np.array([[2, 0], [0, -1]], np.int32)
    lengths = np.array([[4], [1]], np.int32)
    z = sr.dense_scores(q, w, keys, None, bt, lengths)
    assert list(z[0, 0]) == [20, 21, 10, 11]
    assert list(z[1, 0]) == [10, NINF, NINF, NINF]
    # fp8 keys with scales: 0x38 = 1.0, 0x40 = 2.0 scaled by 0.25 and 4
    k8 = sr.fp8_e4m3_to_f32(np.array([[[0x38], [0x40]]], np.uint8))
    sc = np.array([[0.25, 4.0]], np.float32)
    z = sr.dense_scores(q[:1], w[:1], k8, sc, np.array([[0]], np.int32),
                        np.array([[2]], np.int32))
    assert list(z[0, 0]) == [0.25, 8.0]
    with pytest.raises(ValueError):      # a visible page outside [0, P)
        sr.dense_scores(q[:1], w[:1], keys, None, np.array([[2, 3]]),
                        np.array([[3]]))


def test_sparse_scores_masks_blocks():
    keys = np.arange(1, 9, dtype=np.float32).reshape(2, 4, 1)  # z = 1..8
    q = np.ones((1, 1, 1, 1), np.float32)
    w = np.ones((1, 1, 1), np.float32)
    bt = np.array([[0, 1]], np.int32)
    mask = np.array([[True, False, False, True]])                 # bs = 2
    z = sr.sparse_scores(q, w, keys, None, bt, np.array([[7]]), mask, 2)
    assert list(z[0, 0]) == [1, 2, NINF, NINF, NINF, NINF, 7, NINF]


# fp8 e4m3 queries (SPEC §1: only with fp8 e4m3 keys; q enters with its exact
# fp8 value, the caller folds any query scale into w). The reference takes
# them as uint8 bit patterns with q_format="fp8".

def test_decode_queries_formats():
    bits = np.array([[[[0x7E, 0x01, 0x80, 0x07, 0xFE, 0x38]]]], np.uint8)
    got = sr.decode_queries(bits, "fp8")
    assert got.dtype == np.float32 and got.shape == bits.shape
    assert list(got.ravel()) == [448.0, 2.0 ** -9, 0.0, 7 * 2.0 ** -9, -448.0, 1.0]
    assert np.signbit(got.ravel()[2])                      # 0x80 is -0.0
    assert np.array_equal(got, sr.fp8_e4m3_to_f32(bits))  # the one decoder
    # f32 (the default) takes decoded values as they are.
    vals = np.array([1.5, -2.0], np.float64)
    assert list(sr.decode_queries(vals)) == [1.5, -2.0]
    # bit patterns are never read as integer values by mistake
    with pytest.raises(TypeError, match="q_format='fp8'"):
        sr.decode_queries(bits)
    with pytest.raises(TypeError, match="uint8"):
        sr.decode_queries(got, "fp8")
    with pytest.raises(ValueError, match="q_format"):
        sr.decode_queries(bits, "e4m3")
    with pytest.raises(TypeError):
        sr.dense_scores(bits, np.ones((1, 1, 6), np.float32),
                        np.ones((1, 1, 1), np.float32), None,
                        np.array([[0]], np.int32), np.array([[1]], np.int32))


def test_dense_scores_fp8_queries_edge_values():
    # H = 2, Dh = 3, w = [1, 0.5]; one page of 4 slots, N = 4.
    #   head 0 q = [448 (0x7E), 2^-9 (0x01), -0.0 (0x80)]
    #   head 1 q = [7 * 2^-9 (0x07, largest subnormal), -448 (0xFE), 1 (0x38)]
    # keys (fp8-exact values) and scales [1, 0.5, 2, 4]:
    #   k0 = [1, 0, 5]       h0: 448                  -> 448
    #                        h1: 7*2^-9 + 5            -> 5.013671875
    #   k1 = [-1, 448, 2]    h0: -448 + 0.875 - 0      -> * 0.5 < 0 -> 0
    #                        h1: -7*2^-9 - 200704 + 2  -> 0
    #   k2 = [2^-9, -.5, 0]  h0: 0.875 - 2^-10         -> * 2 = 1.748046875
    #                        h1: 7*2^-18 + 224         -> * 2 = 448 + 7*2^-17
    #   k3 = [.25, 0, -3]    h0: 112 + 0 + (-0 * -3)   -> * 4 = 448
    #                        h1: 7*2^-11 - 3           -> 0
    # z = h0 + 0.5 * h1:
    #   z0 = 448 + 2.5068359375 = 450.5068359375 (exact in f32)
    #   z1 = 0
    #   z2 = 1.748046875 + 224 + 7*2^-18 = 225.748046875 + 1.75 ulp(225)
    #        -> rounded once to f32: 225.748046875 + 2^-15
    #   z3 = 448
    qbits = np.array([[[[0x7E, 0x01, 0x80], [0x07, 0xFE, 0x38]]]], np.uint8)
    w = np.array([[[1.0, 0.5]]], np.float32)
    keys = np.array([[[1, 0, 5], [-1, 448, 2], [2.0 ** -9, -0.5, 0],
                      [0.25, 0, -3]]], np.float32)
    scales = np.array([[1, 0.5, 2, 4]], np.float32)
    bt = np.array([[0]], np.int32)
    n = np.array([[4]], np.int32)
    z = sr.dense_scores(qbits, w, keys, scales, bt, n, q_format="fp8")
    assert z.dtype == np.float32
    assert z[0, 0, 0] == 450.5068359375
    assert z[0, 0, 1] == 0.0
    assert z[0, 0, 2] == F32(225.748046875 + 2.0 ** -15)
    assert z[0, 0, 2] != F32(225.748046875)   # the subnormal x subnormal term
    assert z[0, 0, 3] == 448.0
    # the same as passing the decoded values
    dec = sr.fp8_e4m3_to_f32(qbits)
    assert np.array_equal(z, sr.dense_scores(dec, w, keys, scales, bt, n))
    # sparse: only block 1 (slots 2, 3; bs = 2) selected
    mask = np.array([[False, True]])
    zs = sr.sparse_scores(qbits, w, keys, scales, bt, n, mask, 2, q_format="fp8")
    assert list(zs[0, 0]) == [NINF, NINF, z[0, 0, 2], 448.0]
    assert list(sr.topk(z, n, 3)[0, 0]) == [0, 3, 2]


def test_dense_scores_fp8_queries_negative_zero_and_extremes():
    # Every query element -0.0 (0x80): every dot is +-0, ReLU 0, z = 0 for
    # any key and weight (a zero, never a NaN or a negative score).
    keys = np.array([[[448, -448], [-3, 2.0 ** -9]]], np.float32)
    bt, n = np.array([[0]], np.int32), np.array([[2]], np.int32)
    q = np.full((1, 1, 2, 2), 0x80, np.uint8)
    w = np.array([[[-2.0, 3.0]]], np.float32)
    z = sr.dense_scores(q, w, keys, None, bt, n, q_format="fp8")
    assert list(z[0, 0]) == [0.0, 0.0]
    # 448 x 448 with scale 1 (no overflow: the products and sums are f32):
    #   q = [448, 448], k0 = [448, -448] -> 0; k1 = [-3, 2^-9] -> -1344 + 0.875
    #   q = [-448, 448]: k0 -> -401408 ... -> 0; k1 -> 1344 + 0.875 = 1344.875
    q = np.array([[[[0x7E, 0x7E], [0xFE, 0x7E]]]], np.uint8)
    w = np.array([[[1.0, 1.0]]], np.float32)
    z = sr.dense_scores(q, w, keys, None, bt, n, q_format="fp8")
    assert list(z[0, 0]) == [0.0, 1344.875]
    # q = [448, 448] against k = [448, 448]: 2 * 448^2 = 401408
    z = sr.dense_scores(np.array([[[[0x7E, 0x7E]]]], np.uint8),
                        np.array([[[0.5]]], np.float32),
                        np.array([[[448, 448]]], np.float32), None,
                        np.array([[0]], np.int32), np.array([[1]], np.int32),
                        q_format="fp8")
    assert z[0, 0, 0] == 200704.0


def test_dense_scores_fp8_queries_whole_range():
    # One head, Dh = 1, key 1 (slot 0) and -1 (slot 1), w = 1: z = ReLU(q)
    # and ReLU(-q) for every one of the 256 patterns; 0x7F and 0xFF are NaN.
    bits = np.arange(256, dtype=np.uint8).reshape(256, 1, 1, 1)
    keys = np.array([[[1.0], [-1.0]]], np.float32)
    bt = np.zeros((256, 1), np.int32)
    n = np.full((256, 1), 2, np.int32)
    w = np.ones((256, 1, 1), np.float32)
    z = sr.dense_scores(bits, w, keys, None, bt, n, q_format="fp8")
    v = sr.fp8_e4m3_to_f32(bits.ravel())
    finite = ~np.isnan(v)
    assert finite.sum() == 254
    assert np.array_equal(z[finite, 0, 0], np.maximum(v[finite], 0))
    assert np.array_equal(z[finite, 0, 1], np.maximum(-v[finite], 0))
    assert z[0x7E, 0, 0] == 448.0 and z[0xFE, 0, 1] == 448.0
    assert z[0x01, 0, 0] == 2.0 ** -9 and z[0x81, 0, 1] == 2.0 ** -9
    assert np.all(np.isnan(z[[0x7F, 0xFF], 0, :]))


@pytest.mark.parametrize("nan_bits", [0x7F, 0xFF])
def test_fp8_query_nan_pattern_makes_the_row_nan(nan_bits):
    # Row 0: one NaN element in head 1, whose weight is 0: NaN * k is NaN
    # for every key (even a zero one), the ReLU and the head sum propagate it
    # (NaN * 0 = NaN), so every visible score of the row is NaN; slots past
    # N stay -inf and the top-K selects nothing (NaN is never selected).
    # Row 1 of the same request (no NaN) is unaffected.
    q = np.array([[[[0x38, 0x38], [nan_bits, 0x00]],
                   [[0x38, 0x38], [0x38, 0x00]]]], np.uint8)
    w = np.array([[[1.0, 0.0], [1.0, 0.0]]], np.float32)
    keys = np.array([[[1, 2], [0, 0], [-1, 3]]], np.float32)
    bt, n = np.array([[0]], np.int32), np.array([[2, 3]], np.int32)
    z = sr.dense_scores(q, w, keys, None, bt, n, q_format="fp8")
    assert np.all(np.isnan(z[0, 0, :2])) and z[0, 0, 2] == NINF
    assert list(z[0, 1]) == [3.0, 0.0, 2.0]
    assert list(sr.topk(z, n, 3)[0, 0]) == [-1, -1, -1]
    assert list(sr.topk(z, n, 3)[0, 1]) == [0, 2, 1]


def test_spin_step_takes_fp8_query_bits():
    # spin_step with q_format="fp8" equals spin_step on the decoded values:
    # selections, sparsity, scores and the EMA state alike (a NaN pattern
    # included: its row selects nothing and never enters the state).
    rng = np.random.default_rng(7)
    B, R, H, Dh, P, S, bs = 2, 1, 2, 4, 6, 4, 4
    keys = rng.integers(-4, 5, size=(P, S, Dh)).astype(np.float32)
    scales = (2.0 ** rng.integers(-1, 2, size=(P, S))).astype(np.float32)
    bt = np.array([[0, 1, 2], [3, 4, 5]], np.int32)
    w = np.ones((B, R, H), np.float32)
    qbits = rng.integers(0, 256, size=(3, B, R, H, Dh)).astype(np.uint8)
    qbits[qbits == 0x7F] = 0x7E
    qbits[qbits == 0xFF] = 0xFE
    qbits[1, 1, 0, 0, 0] = 0x7F                    # step 1, request 2
    runs = []
    for fmt in ("fp8", "f32"):
        states = [sr.LayerState(12, bs) for _ in range(B)]
        out = []
        for step in range(3):
            q = qbits[step] if fmt == "fp8" else sr.fp8_e4m3_to_f32(qbits[step])
            n = np.array([[9 + step], [12]], np.int32)
            out.append(sr.spin_step(states, [1, 2], 0, q, w, keys, scales, bt, n,
                                    n - 1, k=4, bs=bs, sparsity=0.5, q_format=fmt))
        runs.append((out, states))
    (a, sa), (b, sb) = runs
    for (ia, ma, pa, za), (ib, mb, pb, zb) in zip(a, b):
        assert np.array_equal(ia, ib) and np.array_equal(ma, mb)
        assert np.array_equal(pa, pb)
        assert np.array_equal(za, zb, equal_nan=True)
    idx, _, _, z = a[1]
    assert list(idx[1, 0]) == [-1, -1, -1, -1]
    assert np.all(np.isnan(z[1, 0][~np.isneginf(z[1, 0])]))
    for x, y in zip(sa, sb):
        assert np.array_equal(x.V, y.V) and np.array_equal(x.D, y.D)
        assert np.all(np.isfinite(x.V)) and np.all(np.isfinite(x.D))


def test_topk_ties_padding_nan_and_infinities():
    z = np.array([[[1, 3, 3, np.nan, NINF, 2, 100]]], np.float32)
    # N = 6: slot 6 is invisible; NaN (slot 3) never selected;
    # 3 at slots 1 and 2 -> lower index first; -inf is an ordinary value.
    got = sr.topk(z, np.array([[6]]), 7)
    assert got.dtype == np.int32
    assert list(got[0, 0]) == [1, 2, 5, 0, 4, -1, -1]
    assert list(sr.topk(z, np.array([[6]]), 2)[0, 0]) == [1, 2]
    # +inf is the largest ordinary value
    z2 = np.array([[[0, np.inf, 5]]], np.float32)
    assert list(sr.topk(z2, np.array([[3]]), 3)[0, 0]) == [1, 2, 0]
    # with a block mask (bs = 2): only blocks 0 and 2 eligible
    mask = np.array([[True, False, True, False]])
    got = sr.topk(z, np.array([[7]]), 4, mask=mask, bs=2)
    assert list(got[0, 0]) == [1, 5, 0, 4]   # block 2 = slots 4, 5
    # N = 0 -> all padding
    assert list(sr.topk(z, np.array([[0]]), 2)[0, 0]) == [-1, -1]


# ---------------------------------------------------------------------------
# Budget, forced blocks, warm-up, exploration (SPEC §3.4-§3.7)
# ---------------------------------------------------------------------------

def test_budget_formula():
    # B = 10, rho = 0.7: (1 - 0.7) * 10 = 3.0000000000000004 -> ceil(. - 1e-9) = 3
    assert sr.budget(10, 64, 64, 0.7) == 3
    # B = 100, K = 2048, bs = 64, rho = 0.9: max(32, 10) = 32
    assert sr.budget(100, 2048, 64, 0.9) == 32
    assert sr.budget(10, 1, 64, 0.0) == 10        # dense
    assert sr.budget(10, 64, 64, 1.0) == 1        # only ceil(K/bs)
    assert sr.budget(10, 2048, 64, 0.5) == 10     # capped at B
    assert sr.budget(7, 2, 2, 0.5) == 4           # ceil(3.5) = 4
    assert sr.budget(0, 64, 64, 0.5) == 0


def _state_with(V, D=None, it=1, capacity=None, bs=2, level="slot"):
    V = np.asarray(V, np.float32)
    st = sr.LayerState(capacity or V.size, bs, level)
    st.V[:V.size] = V
    if D is not None:
        D = np.asarray(D, np.float32)
        st.D[:D.size] = D
    st.it = it
    return st


def test_forced_blocks_b1_and_b2():
    st = _state_with(np.zeros(8))
    opts = dict(topk_k=1, bs=4, sparsity=0.9)
    # B = 1: only block 0, which is both sink and newest
    assert list(sr.select_row(st, 0, 0, 2, 3, **opts)) == [0]
    # B = 2 with m = min(2, max(1, ceil(0.2 - 1e-9) = 1)) = 1 < |F|:
    # both forced blocks are still selected
    assert list(sr.select_row(st, 0, 0, 7, 5, **opts)) == [0, 1]
    # B = 0: nothing
    assert list(sr.select_row(st, 0, 0, 0, 0, **opts)) == []


def test_warmup_selects_all_blocks():
    st = _state_with(np.zeros(16), it=0)
    for red in ("a1", "a0"):
        sel = sr.select_row(st, 1, 2, 15, 13, topk_k=1, bs=2, sparsity=0.99,
                            reduction=red)
        assert list(sel) == list(range(7))
    stb = _state_with(np.zeros(16), it=0, level="block")
    sel = sr.select_row(stb, 1, 2, 15, 13, topk_k=1, bs=2, sparsity=0.99,
                        reduction="a2")
    assert list(sel) == list(range(7))


def test_a1_exploit_ties_to_lower_block():
    # bs = 2, N = 12 (B = 6), D = 0, V >= 0 -> zhat = V
    V = [0, 0, 1, 4, 4, 1, 2, 3, 0, 0, 9, 9]
    st = _state_with(V, capacity=12)
    # pooled max: [0, 4, 4, 3, 0, 9]; m = max(1, ceil(0.5*6)) = 3
    # forced {0, 5}; exploit 1 among blocks 1..4: tie 4/4 -> block 1
    sel = sr.select_row(st, 0, 0, 11, 12, topk_k=2, bs=2, sparsity=0.5)
    assert list(sel) == [0, 1, 5]
    # rho = 1/3 -> m = ceil(4 - 1e-9) = 4: blocks 1, 2
    sel = sr.select_row(st, 0, 0, 11, 12, topk_k=2, bs=2, sparsity=1 / 3)
    assert list(sel) == [0, 1, 2, 5]
    # the diagonal state counts too: D[11 - 8] = D[3] = 7 raises block 4
    st.D[3] = 7
    sel = sr.select_row(st, 0, 0, 11, 12, topk_k=2, bs=2, sparsity=0.5)
    assert list(sel) == [0, 4, 5]


def test_splitmix64():
    assert sr.splitmix64(0) == 0xE220A8397B1DCDAF
    # the next outputs of the splitmix64 generator seeded with 0
    assert sr.splitmix64(0x9E3779B97F4A7C15) == 0x6E789E6AA1B965F4
    assert sr.splitmix64((2 * 0x9E3779B97F4A7C15) % 2 ** 64) == \
        0x06C45D188009454F
    # signed ids are read as their 64 bits
    assert sr.explore_hash(-1, 0, 0, 0, 0) == \
        sr.explore_hash(2 ** 64 - 1, 0, 0, 0, 0)
    h = sr.splitmix64(sr.splitmix64(sr.splitmix64(sr.splitmix64(
        sr.splitmix64(5) ^ 7) ^ 3) ^ 2) ^ 9)
    assert sr.explore_hash(5, 7, 3, 2, 9) == h


def _explore_case(seed, request_id=11, layer=3, it=4):
    # B = 40 blocks of 2 slots; V = slot index -> pooled S increases with j.
    st = _state_with(np.arange(80), capacity=80, it=it)
    # m = max(1, ceil(0.5 * 40)) = 20; e = min(floor(0.25 * 20), 18) = 5;
    # x = 20 - 2 - 5 = 13 -> exploit blocks 26..38, forced {0, 39}
    sel = sr.select_row(st, request_id, layer, 79, 80, topk_k=2, bs=2,
                        sparsity=0.5, explore=0.25, seed=seed)
    return st, sel


def test_exploration_count_no_collision_and_hash_rank():
    exploit = set(range(26, 39))
    forced = {0, 39}
    for seed in range(6):
        st, sel = _explore_case(seed)
        sel = set(int(j) for j in sel)
        assert len(sel) == 20
        assert forced <= sel and exploit <= sel
        explored = sel - forced - exploit
        assert len(explored) == 5
        # exactly the 5 smallest hashes among the remaining blocks
        rest = [j for j in range(40) if j not in forced | exploit]
        ranked = sorted(rest, key=lambda j: (
            sr.explore_hash(seed, 11, 3, 4, j), j))
        assert explored == set(ranked[:5])


def test_exploration_determinism_and_seed_dependence():
    a = [tuple(_explore_case(s)[1]) for s in range(8)]
    b = [tuple(_explore_case(s)[1]) for s in range(8)]
    assert a == b                      # same seed, same blocks
    assert len(set(a)) > 1             # seeds change the explored blocks
    # request id, layer and iteration are hash inputs as well
    assert len({tuple(_explore_case(0, request_id=r)[1])
                for r in range(6)}) > 1
    assert len({tuple(_explore_case(0, it=i)[1]) for i in range(1, 7)}) > 1


def test_exploration_budget_clamped():
    # m = 3, gamma = 1: e = min(3, 3 - 2) = 1, x = 0
    st = _state_with(np.arange(12), capacity=12)
    sel = sr.select_row(st, 0, 0, 11, 12, topk_k=2, bs=2, sparsity=0.5,
                        explore=1.0, seed=1)
    assert len(sel) == 3 and 0 in sel and 5 in sel


# ---------------------------------------------------------------------------
# Exploration by block age (SPEC §7.1)
# ---------------------------------------------------------------------------

# Ten 16-slot blocks, every slot of block j scoring Z_BLOCKS[j], the query
# fixed at p = 159 (N = 160) so that D[p - i] follows V[i]. Budget: m =
# max(ceil(16/16), ceil(0.5 * 10)) = 5, forced {0, 9}, e = floor(0.25 * 5)
# = 1, x = 2. With decay 0.5 the warm-up leaves V = z / 2 per block.
Z_BLOCKS = [1, 10, 9, 1, 8, 7, 1, 1, 1, 1]


def _static_steps(policy, steps):
    """Warm-up, then ``steps`` sparse steps; returns the state and, per
    sparse step, the explored block (selected minus forced and exploited)."""
    z = np.repeat(np.asarray(Z_BLOCKS, dtype=np.float32), 16)
    st = sr.LayerState(160, 16)
    sr.ema_update(st, z, 159, 160, np.ones(10, bool), 16, 0.5)
    explored = []
    for _ in range(steps):
        sel = sr.select_row(st, 5, 0, 159, 160, topk_k=16, bs=16, sparsity=0.5,
                            explore=0.25, explore_policy=policy)
        chosen = set(int(j) for j in sel)
        assert len(chosen) == 5 and {0, 9, 1, 2} <= chosen  # forced + exploit
        (extra,) = chosen - {0, 9, 1, 2}
        explored.append(extra)
        mask = np.zeros(10, bool)
        mask[sel] = True
        sr.ema_update(st, z, 159, 160, mask, 16, 0.5)
    return st, explored


def test_last_observed_after_warmup_update_and_reset():
    z = np.repeat(np.asarray(Z_BLOCKS, dtype=np.float32), 16)
    st = sr.LayerState(160, 16)
    assert st.last == [0] * 10
    # warm-up over N = 100 (7 blocks): it was 0, so the scored blocks get 1
    sr.ema_update(st, z, 99, 100, np.ones(10, bool), 16, 0.5)
    assert st.last == [1] * 7 + [0] * 3
    # it = 1: blocks 0 and 6 scored -> 2; blocks beyond N never, masked or not
    mask = np.zeros(10, bool)
    mask[[0, 6, 8]] = True
    sr.ema_update(st, z, 99, 100, mask, 16, 0.5)
    assert st.last == [2, 1, 1, 1, 1, 1, 2, 0, 0, 0]
    # ages at it = 2: it + 1 - last; the never-scored ones are the oldest
    assert sr.block_ages(st, 10) == [1, 2, 2, 2, 2, 2, 1, 3, 3, 3]
    # a block whose every score is -inf or NaN was still scored
    bad = np.full(160, -np.inf, np.float32)
    bad[16:32] = np.nan
    mask[:] = False
    mask[[1, 2]] = True
    sr.ema_update(st, bad, 99, 100, mask, 16, 0.5)
    assert st.last[1] == 3 and st.last[2] == 3
    sr.reset(st)
    assert st.last == [0] * 10 and st.it == 0


def test_block_age_explores_round_robin_by_hand():
    # Step 1 (it = 1): every age is 1 -> the lowest candidate, block 3.
    # Step 2: block 3 has age 1, blocks 4..8 age 2 -> block 4; then 5, 6,
    # 7, 8; step 7 (it = 7): block 3 (last 2) has age 6, the oldest -> 3.
    st, explored = _static_steps("block-age", 8)
    assert explored == [3, 4, 5, 6, 7, 8, 3, 4]
    # Block 8 is never exploited and is explored at the 6th sparse step:
    # within ceil((B - |F|) / e) = 8 and ceil(B / e) = 10.
    assert explored.index(8) + 1 <= math.ceil((10 - 2) / 1) <= math.ceil(10 / 1)
    assert st.last == [9, 9, 9, 8, 9, 4, 5, 6, 7, 9]


def test_staleness_score_by_hand():
    # Warm-up: V = [.5, 5, 4.5, .5, 4, 3.5, .5, .5, .5, .5], all last = 1.
    # Step 1 (it = 1), ages 1: keys = S; block 4 (S = 4) beats the lower
    #   block 3 (S = .5): an old high-score block over an old low-score one.
    #   V[4] = 2 + 4 = 6, last[4] = 2.
    # Step 2 (it = 2): exploit 1 (7.5), 2 (6.75); keys: block 3: 2 * .5 = 1,
    #   block 4: 1 * 6 = 6, block 5: 2 * 3.5 = 7 -> block 5 (older beats the
    #   younger, higher-scored block 4). V[5] = 1.75 + 3.5 = 5.25.
    # Step 3 (it = 3): block 3: 3 * .5, block 4: 2 * 6 = 12, block 5:
    #   1 * 5.25 -> block 4; V[4] = 3 + 4 = 7.
    # Step 4 (it = 4): block 4: 1 * 7, block 5: 2 * 5.25 = 10.5 -> block 5.
    _, explored = _static_steps("staleness-score", 4)
    assert explored == [4, 5, 4, 5]
    # block-age would have taken block 3 first (lowest index among equals)
    assert _static_steps("block-age", 1)[1] == [3]


def test_staleness_keys_rounding_nan_and_negative():
    keys = sr.staleness_keys([3, 2, 5, 1], np.array([0.1, -4.0, np.nan, np.inf],
                                                    dtype=np.float32))
    assert keys.dtype == np.float32
    # f32(3) * f32(0.1) = 0.3000000044703... rounded once to f32: f32(0.3)
    assert keys[0] == np.float32(0.3)
    assert keys[1] == 0.0 and keys[2] == 0.0 and keys[3] == np.inf


def test_commit_marks_the_blocks_each_replayed_row_sees():
    # bs = 16: row 0 sees N = 48 (blocks 0-2), row 1 N = 49 (blocks 0-3);
    # the union mask has blocks 0, 2 and 3.
    def buffered():
        st = sr.LayerState(160, 16)
        st.it = 4
        z = np.ones(160, np.float32)
        mask = np.zeros(10, bool)
        mask[[0, 2, 3]] = True
        sr.observe(st, [z, z], [(47, 48), (48, 49)], mask, 16, alpha=0.5)
        return st
    st = buffered()
    # observe folds row 0 at once, with the commit's it + 1
    assert st.last[:5] == [5, 0, 5, 0, 0] and st.it == 4
    sr.commit(st, 0, 0.5, "prefix")        # row 0 only: block 3 unseen
    assert st.last[:5] == [5, 0, 5, 0, 0] and st.it == 5
    st = buffered()
    sr.commit(st, 1, 0.5, "prefix")        # rows 0 and 1
    assert st.last[:5] == [5, 0, 5, 5, 0]
    st = buffered()
    sr.commit(st, 1, 0.5, "row0")          # row-0 update: row 1 discarded
    assert st.last[:5] == [5, 0, 5, 0, 0]


def test_age_policies_keep_the_random_budget():
    # Same m, forced, e and exploit for every policy: only the explored
    # blocks differ.
    for policy in sr.EXPLORE_POLICIES:
        st, explored = _static_steps(policy, 3)
        assert len(explored) == 3
    with pytest.raises(ValueError, match="explore_policy"):
        _static_steps("oldest", 1)


# ---------------------------------------------------------------------------
# Prediction, pooling, A0 / A2 (SPEC §3.2-§3.3, "Block-reduction variants")
# ---------------------------------------------------------------------------

def test_predict_slot_and_block():
    st = _state_with([1, 5, 0, 2], D=[3, 0, 4, 0], capacity=4)
    # p = 3, N = 3: zhat[i] = max(V[i], D[3 - i]) = [max(1,0), max(5,4), max(0,0)]
    assert list(sr.predict(st, 3, 3)) == [1, 5, 0]
    stb = _state_with([1, 0, 2], D=[0, 6, 0], capacity=8, level="block")
    # bs = 2, p = 5 (pb = 2), N = 5 -> 3 blocks: max(Vb[j], Db[2 - j])
    assert list(sr.predict(stb, 5, 5)) == [1, 6, 2]
    with pytest.raises(ValueError):      # N > p + 1
        sr.predict(st, 1, 3)


def test_pool_kinds():
    zhat = np.array([1, 5, 2, 3, 4, -1, 0.5, 7, 2.5], np.float32)
    # bs = 6: block 0 = [1,5,2,3,4,-1], block 1 = [0.5, 7, 2.5] (N = 9)
    assert list(sr.pool(zhat, 9, 6, "max")) == [5, 7]
    assert list(sr.pool(zhat, 9, 6, "mean")) == [F32(14) / F32(6),
                                                 F32(10) / F32(3)]
    # top4: (5+4+3+2)/4 = 3.5; block 1 has 3 values -> their mean
    assert list(sr.pool(zhat, 9, 6, "top4")) == [3.5, F32(10) / F32(3)]
    # N = 8 hides slot 8: block 1 = [0.5, 7]
    assert list(sr.pool(zhat, 8, 6, "mean")) == [F32(14) / F32(6), 3.75]
    # sequential float32 sum: 1e8 + 1 = 1e8, - 1e8 = 0, + 1 = 1 -> 1/4
    seq = np.array([1e8, 1, -1e8, 1], np.float32)
    assert sr.pool(seq, 4, 4, "mean")[0] == 0.25
    # top4 order is descending: 1e8 + 1 + 1 - 1e8 = 0 -> 0/4
    assert sr.pool(seq, 4, 4, "top4")[0] == 0.0
    assert sr.pool(zhat, 0, 6, "max").size == 0


def test_a0_selection():
    # bs = 2, N = 12 (B = 6), zhat = V; K = 2: tie 8 at slots 5, 7, 9
    # -> slots 5, 7 -> blocks 2, 3; plus forced {0, 5}
    V = [0, 1, 0, 0, 0, 8, 0, 8, 0, 8, 0, 0]
    st = _state_with(V, capacity=12)
    sel = sr.select_row(st, 0, 0, 11, 12, topk_k=2, bs=2, sparsity=0.99,
                        reduction="a0")
    assert list(sel) == [0, 2, 3, 5]
    # K larger than N: every slot -> every block
    sel = sr.select_row(st, 0, 0, 11, 12, topk_k=64, bs=2, sparsity=0.99,
                        reduction="a0")
    assert list(sel) == list(range(6))


def test_a2_selection_and_block_ema():
    # Vb = [9, 1, 2, 0, 0, 0], Db[2] = 5; p = 11 (pb = 5), N = 12 (B = 6)
    # S[j] = max(Vb[j], Db[5 - j]) = [9, 1, 2, 5, 0, 0]
    st = _state_with([9, 1, 2, 0, 0, 0], D=[0, 0, 5], capacity=12,
                     level="block")
    assert list(sr.predict(st, 11, 12)) == [9, 1, 2, 5, 0, 0]
    # m = 3 -> forced {0, 5} + best of 1..4 = block 3
    sel = sr.select_row(st, 0, 0, 11, 12, topk_k=2, bs=2, sparsity=0.5,
                        reduction="a2")
    assert list(sel) == [0, 3, 5]
    # block EMA, alpha = 0.5, p = 5 (pb = 2), N = 6, z by slot:
    # block 0 [1, 3] -> max 3; block 1 [nan, 2] -> 2 (non-finite skipped);
    # block 2 [inf, nan] -> nothing finite -> skipped
    s2 = sr.LayerState(8, 2, "block")
    s2.it = 1
    z = np.array([1, 3, np.nan, 2, np.inf, np.nan], np.float32)
    sr.ema_update(s2, z, 5, 6, np.ones(3, bool), 2, 0.5, pooling="max")
    assert list(s2.V[:3]) == [1.5, 1.0, 0.0]      # Vb[j] = 0.5 * pooled
    assert list(s2.D[:3]) == [0.0, 1.0, 1.5]      # Db[2 - j]
    assert s2.it == 2
    s3 = sr.LayerState(8, 2, "block")
    sr.ema_update(s3, z, 5, 6, np.ones(3, bool), 2, 0.5, pooling="mean")
    assert list(s3.V[:3]) == [1.0, 1.0, 0.0]      # mean(1, 3) = 2


# ---------------------------------------------------------------------------
# EMA, MTP commit, reset (SPEC §2, §3.10, §4)
# ---------------------------------------------------------------------------

def test_ema_two_steps():
    st = sr.LayerState(4, 2)
    # step 1: p = 2, N = 3, all blocks, z = [2, 4, 8], alpha = 0.5
    # V[i] = z/2 = [1, 2, 4, 0]; D[2 - i]: D[2] = 1, D[1] = 2, D[0] = 4
    sr.ema_update(st, np.array([2, 4, 8, NINF], np.float32), 2, 3,
                  np.array([True, True]), 2, 0.5)
    assert list(st.V) == [1, 2, 4, 0] and list(st.D) == [4, 2, 1, 0]
    assert st.it == 1
    # step 2: p = 3, N = 4, only block 1 (slots 2, 3); z[2] = 6, z[3] = NaN
    # slot 2: V[2] = 2 + 3 = 5, D[1] = 1 + 3 = 4; slot 3 skipped (NaN)
    sr.ema_update(st, np.array([100, 100, 6, np.nan], np.float32), 3, 4,
                  np.array([False, True]), 2, 0.5)
    assert list(st.V) == [1, 2, 5, 0] and list(st.D) == [4, 4, 1, 0]
    assert st.it == 2


def test_ema_float32_rounding_without_fma():
    st = sr.LayerState(2, 2)
    st.V[:] = [F32(0.3), 0]
    st.D[:] = [0, F32(0.7)]
    z = np.array([F32(1.1), NINF], np.float32)
    sr.ema_update(st, z, 1, 1, np.array([True]), 2, 0.1)
    a32, b32 = F32(0.1), F32(0.9)          # 1 - 0.1 in f64, then rounded
    assert F32(1.0 - 0.1) == b32
    exp_v = F32(F32(a32 * F32(0.3)) + F32(b32 * F32(1.1)))
    exp_d = F32(F32(a32 * F32(0.7)) + F32(b32 * F32(1.1)))
    assert bits32(st.V[0]) == bits32(exp_v)
    assert bits32(st.D[1]) == bits32(exp_d)   # offset p - i = 1
    # an inf observation is skipped
    sr.ema_update(st, np.array([np.inf], np.float32), 1, 1, np.array([True]),
                  2, 0.1)
    assert bits32(st.V[0]) == bits32(exp_v)


def _mtp_state():
    st = sr.LayerState(6, 2)
    st.it = 1
    rows = [(3, 4), (4, 5), (5, 6)]
    zs = [np.array([4, 0, 0, 8, NINF, NINF], np.float32),
          np.array([0, 0, 0, 4, 12, NINF], np.float32),
          np.full(6, 16, np.float32)]
    sr.observe(st, zs, rows, np.ones(3, bool), 2, alpha=0.5)
    return st


def test_row0_at_the_step_commits_what_the_deferred_replay_commits():
    # docs/SPIN_SPEC.md §7.2 against §4's literal order (every row deferred,
    # rows 0..a replayed at the commit), written out here: after every
    # commit V, D, it and the block marks agree bit for bit, for random
    # rows, masks, non-finite scores and accepted counts, slot and block
    # states, prefix and row-0 updates.
    rng = np.random.default_rng(1234)
    for level, update in (("slot", "prefix"), ("slot", "row0"),
                          ("block", "prefix")):
        C, bs, R = 48, 4, 3
        new = sr.LayerState(C, bs, level)
        old = sr.LayerState(C, bs, level)
        for step in range(40):
            n0 = int(rng.integers(1, C - R))
            rows = [(n0 + r - 1 + int(rng.integers(0, 2)) * (r == 0), n0 + r)
                    for r in range(R)]
            rows = [(min(p, C - 1), n) for p, n in rows]
            zs = [rng.standard_normal(C).astype(np.float32) for _ in range(R)]
            for z in zs:
                z[rng.random(C) < 0.05] = np.nan
            mask = rng.random(C // bs) < 0.6
            sr.observe(new, zs, rows, mask, bs, "max", alpha=0.75)
            a = int(rng.integers(0, R))
            sr.commit(new, a, 0.75, update)
            for z, (p, n) in zip(zs, rows[:(a + 1) if update == "prefix" else 1]):
                sr._apply_ema(old, z, p, n, mask, bs, 0.75, "max")
            old.it += 1
            where = f"{level}/{update} step {step}"
            assert np.array_equal(new.V, old.V), where
            assert np.array_equal(new.D, old.D), where
            assert new.it == old.it and new.last == old.last, where


def test_mtp_commit_prefix_and_row0():
    # row 0 (p = 3): V = [2,0,0,4,0,0], D[3-i] -> D = [4,0,0,2,0,0]
    # row 1 (p = 4) from there: V = [1,0,0,4,6,0]; D[4-i]:
    #   D[4] = 0, D[3] = 1, D[2] = 0, D[1] = 2, D[0] = 2 + 6 = 8
    # row 2 (p = 5, z = 16): V = [8.5,8,8,10,11,8]; D[5-i]:
    #   D[5]=8, D[4]=8, D[3]=8.5, D[2]=8, D[1]=9, D[0]=12
    st = _mtp_state()
    # observe has folded row 0 (docs/SPIN_SPEC.md §7.2); it is unchanged
    assert st.obs_rows == 3 and st.it == 1
    assert list(st.V) == [2, 0, 0, 4, 0, 0]
    assert list(st.D) == [4, 0, 0, 2, 0, 0]
    sr.commit(st, 1, 0.5, "prefix")
    assert list(st.V) == [1, 0, 0, 4, 6, 0]
    assert list(st.D) == [8, 2, 0, 1, 0, 0]
    assert st.it == 2 and st.obs_rows == 0

    st = _mtp_state()
    sr.commit(st, 2, 0.5, "row0")          # accepted ignored: row 0 only
    assert list(st.V) == [2, 0, 0, 4, 0, 0]
    assert list(st.D) == [4, 0, 0, 2, 0, 0]
    assert st.it == 2

    st = _mtp_state()
    sr.commit(st, 0, 0.5, "prefix")         # prefix with a = 0 == row 0
    assert list(st.V) == [2, 0, 0, 4, 0, 0]

    st = _mtp_state()
    sr.commit(st, 2, 0.5, "prefix")
    assert list(st.V) == [8.5, 8, 8, 10, 11, 8]
    assert list(st.D) == [12, 9, 8, 8.5, 8, 8]

    # nothing buffered -> nothing happens
    sr.commit(st, 0, 0.5)
    assert st.it == 2 and list(st.V) == [8.5, 8, 8, 10, 11, 8]

    st = _mtp_state()
    with pytest.raises(ValueError):         # accepted must be < obs_rows
        sr.commit(st, 3, 0.5, "prefix")
    with pytest.raises(ValueError):         # commit before observing again
        sr.observe(st, [np.zeros(6)], [(3, 4)], np.ones(3, bool), 2,
                   alpha=0.5)


def test_reset():
    st = _mtp_state()
    st.V[:] = 3
    st.D[:] = 4
    st.it = 9
    sr.reset(st)
    assert not st.V.any() and not st.D.any()
    assert st.it == 0 and st.obs_rows == 0


def test_select_union_and_row0():
    V = [0, 0, 5, 0, 0, 0, 0, 0, 6, 0, 0, 0, 0, 0]
    st = _state_with(V, capacity=14)
    opts = dict(topk_k=2, bs=2, sparsity=0.6)
    # row (11, 12): B = 6, m = ceil(2.4) = 3 -> {0, 5} + block 4 (V[8] = 6)
    # row (13, 14): B = 7, m = ceil(2.8) = 3 -> {0, 6} + block 4
    assert list(sr.select_row(st, 0, 0, 11, 12, **opts)) == [0, 4, 5]
    assert list(sr.select_row(st, 0, 0, 13, 14, **opts)) == [0, 4, 6]
    rows = [(11, 12), (13, 14)]
    m = sr.select(st, 0, 0, rows, "union", num_blocks=8, **opts)
    assert list(np.nonzero(m)[0]) == [0, 4, 5, 6]
    m = sr.select(st, 0, 0, rows, "row0", num_blocks=8, **opts)
    assert list(np.nonzero(m)[0]) == [0, 4, 5]


# ---------------------------------------------------------------------------
# Metrics (SPEC §5)
# ---------------------------------------------------------------------------

def test_block_sparsity():
    mask = np.array([True, False, True, False, True, True])
    assert sr.block_sparsity(mask, 9, 2) == pytest.approx(0.4)  # 3 of 5
    assert sr.block_sparsity(mask, 0, 2) == 0.0
    assert sr.block_sparsity(mask, 1, 2) == 0.0                 # 1 of 1


def test_miss_rate_recall_pearson():
    dense = np.array([[1, 2, 3, -1], [-1, -1, -1, -1], [4, 5, 6, 7]])
    spin = np.array([[2, 3, 4, 5], [1, 2, 3, 4], [4, 5, 6, -1]])
    mr = sr.miss_rate(dense, spin)
    assert mr.shape == (3,)
    assert mr[0] == pytest.approx(1 / 3) and mr[1] == 0.0
    assert mr[2] == pytest.approx(0.25)
    z = np.array([5, 1, 4, 3, 9], np.float32)
    pred = np.array([0, 0, 1, 1, 2], np.float32)   # top-2: 4, then 2 (tie)
    # T* (N = 5, K = 2) = {4, 0}; TopK(pred) = {4, 2} -> recall 1/2
    assert sr.topk_recall(pred, z, 2, 5) == 0.5
    # N = 4 hides slot 4: T* = {0, 2}; TopK(pred) = {2, 3} -> 1/2
    assert sr.topk_recall(pred, z, 2, 4) == 0.5
    assert sr.pearson([1, 2, 3], [2, 4, 6]) == pytest.approx(1.0)
    assert sr.pearson([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert sr.pearson([1, 0, -1, 0], [0, 1, 0, -1]) == pytest.approx(0.0)
    assert math.isnan(sr.pearson([1, 1], [1, 2]))


# ---------------------------------------------------------------------------
# A whole decode step (SPEC §3, §4)
# ---------------------------------------------------------------------------

def _step_inputs(key_vals, lengths, positions, S=4, MB=4):
    """Dh = 1, H = 1, q = 1, w = 1 -> z[i] = ReLU(key[i])."""
    P = MB
    keys = np.zeros((P, S, 1), np.float32)
    kv = np.asarray(key_vals, np.float32)
    keys.reshape(-1)[:kv.size] = kv
    # reversed block table, to exercise paging
    bt = np.arange(P - 1, -1, -1, dtype=np.int32)[None]
    keys = keys[::-1].copy()
    lengths = np.asarray(lengths, np.int32)
    positions = np.asarray(positions, np.int32)
    Bq, R = lengths.shape
    q = np.ones((Bq, R, 1, 1), np.float32)
    w = np.ones((Bq, R, 1), np.float32)
    return q, w, keys, np.repeat(bt, Bq, axis=0), lengths, positions


def test_spin_step_decode_by_hand():
    # slots:   0  1  2  3  4  5  6  7  8  9 10 11 12
    kv = [0, 0, 0, -4, 0, 5, 0, 0, 0, 0, 3, 0, 1]   # z = ReLU(key)
    st = sr.LayerState(16, 2)
    opts = dict(k=2, bs=2, sparsity=0.5, alpha=0.5)
    # step 1 (warm-up): p = 11, N = 12 -> all 6 blocks scored
    q, w, keys, bt, n, p = _step_inputs(kv, [[12]], [[11]])
    idx, mask, sp, z = sr.spin_step([st], [7], 0, q, w, keys, None, bt, n, p,
                                    **opts)
    assert list(mask[0]) == [True] * 6 + [False] * 2
    assert list(idx[0, 0]) == [5, 10] and sp[0, 0] == 0.0
    assert st.it == 1
    # V = z / 2; D[11 - i] = z[i] / 2
    # step 2: p = 12, N = 13 (B = 7), m = max(1, ceil(3.5)) = 4
    # zhat[i] = max(V[i], D[12 - i]) = max(z[i], z[i-1]) / 2:
    #   2.5 at slots 5, 6; 1.5 at 10, 11; 0 elsewhere (V[12] = D[0] = 0)
    # block max: [0, 0, 2.5, 2.5, 0, 1.5, 0] -> forced {0, 6} + blocks 2, 3
    q, w, keys, bt, n, p = _step_inputs(kv, [[13]], [[12]])
    idx, mask, sp, z = sr.spin_step([st], [7], 0, q, w, keys, None, bt, n, p,
                                    **opts)
    assert list(np.nonzero(mask[0])[0]) == [0, 2, 3, 6]
    # scored slots 0,1,4,5,6,7,12 -> top-2: slot 5 (5), slot 12 (1)
    assert list(idx[0, 0]) == [5, 12]
    assert sp[0, 0] == F32(1 - 4 / 7)
    assert z[0, 0, 10] == NINF and z[0, 0, 5] == 5
    dense = sr.topk(sr.dense_scores(q, w, keys, None, bt, n), n, 2)
    assert list(dense[0, 0]) == [5, 10]
    assert sr.miss_rate(dense, idx)[0, 0] == 0.5
    # EMA only on scored slots: V[5] = 2.5/2 + 5/2 = 3.75, V[10] unchanged
    assert st.V[5] == 3.75 and st.V[10] == 1.5 and st.V[12] == 0.5
    # D[12 - 12] = D[0] = 0/2 + 1/2 ... D[0] was z[11]/2 = 0 -> 0.5
    assert st.D[0] == 0.5
    assert st.it == 2


def test_spin_step_dense_equals_dense_topk():
    rng = np.random.default_rng(0)
    kv = rng.integers(-8, 9, size=16)
    st = [sr.LayerState(16, 4), sr.LayerState(16, 4)]
    q, w, keys, bt, n, p = _step_inputs(kv, [[16], [9]], [[15], [10]])
    for _ in range(3):
        idx, mask, sp, z = sr.spin_step(st, [1, 2], 0, q, w, keys, None, bt,
                                        n, p, k=3, bs=4, sparsity=0.0)
        dense = sr.dense_scores(q, w, keys, None, bt, n)
        assert np.array_equal(idx, sr.topk(dense, n, 3))
        assert np.array_equal(z, dense) and not sp.any()
    assert st[0].it == 3 and st[1].it == 3


def test_spin_step_mtp_commit_then_observe():
    kv = [1, 2, 3, 4, 5, 6, 7, 8]
    st = sr.LayerState(8, 2)
    # verification step with 2 rows: (p=5, N=6), (p=6, N=7); warm-up
    q, w, keys, bt, n, p = _step_inputs(kv, [[6, 7]], [[5, 6]], S=2, MB=4)
    idx, mask, sp, z = sr.spin_step([st], [0], 0, q, w, keys, None, bt, n, p,
                                    k=2, bs=2, sparsity=0.5)
    assert mask[0].all()                         # warm-up: every block
    assert list(idx[0, 0]) == [5, 4] and list(idx[0, 1]) == [6, 5]
    # row 0 is folded at its step (V[i] = z[i] / 2 for i < 6), it unchanged
    assert st.it == 0 and st.obs_rows == 2
    assert list(st.V) == [0.5, 1, 1.5, 2, 2.5, 3, 0, 0]
    # next step commits row 0 only (accepted = 0): nothing left to replay
    ref = st.copy()
    sr.commit(ref, 0, 0.5)
    q, w, keys, bt, n, p = _step_inputs(kv, [[7, 8]], [[6, 7]], S=2, MB=4)
    idx, mask, sp, z = sr.spin_step([st], [0], 0, q, w, keys, None, bt, n, p,
                                    k=2, bs=2, sparsity=0.5, accepted=[0])
    assert list(ref.V) == [0.5, 1, 1.5, 2, 2.5, 3, 0, 0]
    # the commit happened before selection: it = 1, new rows buffered, and
    # the new row 0 (p = 6, N = 7) folded on top of the committed state
    assert st.it == 1 and st.obs_rows == 2
    sr.ema_update(ref, z[0, 0], 6, 7, mask[0], 2, 0.5)
    assert np.array_equal(st.V, ref.V) and np.array_equal(st.D, ref.D)
    # row (6, 7): B = 4, m = 2 -> {0, 3}; row (7, 8): B = 4 -> {0, 3}
    assert list(np.nonzero(mask[0])[0]) == [0, 3]
    assert list(idx[0, 0]) == [6, 1] and list(idx[0, 1]) == [7, 6]
    assert sp[0, 0] == F32(0.5) and sp[0, 1] == F32(0.5)
    with pytest.raises(ValueError):              # buffered rows need R > 1
        q1, w1, k1, bt1, n1, p1 = _step_inputs(kv, [[8]], [[7]], S=2, MB=4)
        sr.spin_step([st], [0], 0, q1, w1, k1, None, bt1, n1, p1, k=2, bs=2,
                     sparsity=0.5)
