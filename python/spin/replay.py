"""Offline replay of recorded indexer traces through SPIN (``spin-replay``).

Given a trace (docs/trace-format.md), replays every layer and decode step
through the compiled CPU path -- ``spin.Indexer`` with one ``State`` per run,
and the dense reference ``spin.Indexer(dense=True)`` -- for each requested
configuration (target sparsity x pooling x reduction x exploration x MTP
policies), and reports per layer and overall:

* top-K miss rate ``|T* \\ T| / |T*|`` (SPIN_SPEC §5), mean and p99 over the
  sparse (non-warm-up) rows, T* being the compiled dense top-K;
* realized block sparsity averaged over the same rows;

plus the predictor diagnostics of the paper's Table 1 from dense scores
computed in numpy (float64): Pearson correlation and top-K recall of
prev-iter, prev-iter offset 1, prev-layer, prev-layer best-of-5 and random.

A scores trace (``"kind": "scores"``) is replayed through a generated SPIN
graph on its dense scores z (``score_graph``, any reduction, compiled with
``spin.compile`` and run with ``Program.run``) against the top-K of z, and
its diagnostics use z directly.

Exploration policies (``--explore-policy``): ``random`` (SPIN_SPEC §3.7),
``staleness-score`` and ``block-age`` (SPIN_SPEC §7.1), each with the same
exploration fraction of the block budget, and ``none`` (no exploration).
Requests may join and leave mid-trace (per-step ``request_ids``,
docs/trace-format.md): each step replays the batch indices that hold a
request, a request's first step is its dense warm-up, and its state is
released after its last step.

The module imports the compiled ``spin`` package lazily (``import spin``
must find the build, e.g. ``<build>/python`` on ``sys.path``), so the metric
helpers and the diagnostics work with numpy alone.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import sys
import time
from dataclasses import dataclass, asdict
from typing import Dict, List, Optional, Sequence

import numpy as np

try:  # inside the built package
    from . import traces as _traces  # type: ignore
except ImportError:  # imported as a top-level module from python/spin
    import traces as _traces  # type: ignore

TraceError = _traces.TraceError
load_trace = _traces.load_trace

PREDICTORS = ("prev-iter", "prev-iter-offset1", "prev-layer", "prev-layer-best5", "random")
#: --explore-policy values: the compiler's three policies and "none".
EXPLORE_POLICIES = ("none", "random", "staleness-score", "block-age")


# ----------------------------------------------------------------------------
# metric helpers (SPIN_SPEC §5)


def miss_rate(truth: Sequence[int], got: Sequence[int]) -> Optional[float]:
    """|T* \\ T| / |T*| for one row; -1 padding ignored; None if T* is empty."""
    t = {int(i) for i in np.asarray(truth).ravel() if i >= 0}
    if not t:
        return None
    g = {int(i) for i in np.asarray(got).ravel() if i >= 0}
    return len(t - g) / len(t)


def recall(prediction: np.ndarray, truth: Sequence[int], k: int) -> Optional[float]:
    """|TopK(prediction) ∩ T*| / |T*|; NaN entries of ``prediction`` (slots
    the predictor knows nothing about) are never picked."""
    t = {int(i) for i in np.asarray(truth).ravel() if i >= 0}
    if not t:
        return None
    p = np.where(np.isnan(prediction), -np.inf, prediction)
    picked = _traces.topk_indices(p, k)
    picked = {int(i) for i in picked if np.isfinite(p[i])}
    return len(picked & t) / len(t)


def pearson(a: np.ndarray, b: np.ndarray) -> Optional[float]:
    """Pearson correlation over the entries where both are finite; None when
    fewer than two such entries or either side is constant."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    ok = np.isfinite(a) & np.isfinite(b)
    if ok.sum() < 2:
        return None
    a, b = a[ok] - a[ok].mean(), b[ok] - b[ok].mean()
    den = math.sqrt(float((a * a).sum()) * float((b * b).sum()))
    if den == 0.0:
        return None
    return float((a * b).sum() / den)


def summarize(values: Sequence[float]) -> Dict[str, Optional[float]]:
    """mean and p99 (numpy's linear interpolation) of a list, with its size."""
    v = np.asarray([x for x in values if x is not None], dtype=np.float64)
    if v.size == 0:
        return {"mean": None, "p99": None, "rows": 0}
    return {"mean": float(v.mean()), "p99": float(np.percentile(v, 99)), "rows": int(v.size)}


# ----------------------------------------------------------------------------
# predictor diagnostics (paper Table 1)


def _shift(prev: np.ndarray, n: int, offset: int) -> np.ndarray:
    """Prediction of length n from a previous score vector shifted by offset."""
    out = np.full(n, np.nan)
    src = prev[: max(0, n - offset)]
    out[offset: offset + src.size] = src
    return out


def _pad(prev: np.ndarray, n: int) -> np.ndarray:
    return _shift(prev, n, 0)


class Diagnostics:
    """Accumulates Table 1 statistics row by row."""

    def __init__(self, layers: int, topk: int, seed: int = 0):
        self.k = topk
        self.rng = np.random.default_rng(seed)
        self.stats = {(l, p, m): [] for l in range(layers) for p in PREDICTORS
                      for m in ("pearson", "recall")}

    def _add(self, layer, name, pred, z, truth):
        self.stats[(layer, name, "pearson")].append(pearson(pred, z))
        self.stats[(layer, name, "recall")].append(recall(pred, truth, self.k))

    def row(self, layer: int, z: np.ndarray, prev_iter: Optional[np.ndarray],
            prev_layers: Sequence[np.ndarray]) -> None:
        """One row: its dense scores z, the same row's scores at the previous
        step (None at the first step) and at the preceding layers (nearest
        first) of the same step."""
        n = z.size
        truth = _traces.topk_indices(z, self.k)
        self._add(layer, "random", self.rng.random(n), z, truth)
        if prev_iter is not None:
            self._add(layer, "prev-iter", _pad(prev_iter, n), z, truth)
            self._add(layer, "prev-iter-offset1", _shift(prev_iter, n, 1), z, truth)
        if prev_layers:
            self._add(layer, "prev-layer", _pad(prev_layers[0], n), z, truth)
            best_p, best_r = None, None
            for z_prev in prev_layers[:5]:
                pred = _pad(z_prev, n)
                p, r = pearson(pred, z), recall(pred, truth, self.k)
                best_p = p if best_p is None or (p is not None and p > best_p) else best_p
                best_r = r if best_r is None or (r is not None and r > best_r) else best_r
            self.stats[(layer, "prev-layer-best5", "pearson")].append(best_p)
            self.stats[(layer, "prev-layer-best5", "recall")].append(best_r)

    def result(self) -> dict:
        layers = sorted({l for l, _, _ in self.stats})
        per_layer = []
        for l in layers:
            per_layer.append({"layer": l, "predictors": {
                p: {m: summarize(self.stats[(l, p, m)])["mean"] for m in ("pearson", "recall")}
                | {"rows": summarize(self.stats[(l, p, "recall")])["rows"]}
                for p in PREDICTORS}})
        overall = {p: {m: summarize([x for l in layers for x in self.stats[(l, p, m)]])["mean"]
                       for m in ("pearson", "recall")}
                   | {"rows": summarize([x for l in layers
                                         for x in self.stats[(l, p, "recall")]])["rows"]}
                   for p in PREDICTORS}
        return {"per_layer": per_layer, "overall": overall}


# ----------------------------------------------------------------------------
# replay


@dataclass(frozen=True)
class Config:
    sparsity: float
    pooling: str = "max"
    reduction: str = "A1"
    explore: float = 0.0
    mtp_mask: str = "union"
    mtp_update: str = "prefix"
    #: random, staleness-score or block-age (SPIN_SPEC §3.7, §7.1); always
    #: random when nothing is explored.
    explore_policy: str = "random"

    def label(self, rows: int) -> str:
        s = f"rho={self.sparsity:g} {self.reduction}"
        if self.reduction != "A0":
            s += f"-{self.pooling}"
        s += f" explore={self.explore:g}"
        if self.explore_policy != "random":
            s += f" {self.explore_policy}"
        if rows > 1:
            s += f" mtp={self.mtp_mask}/{self.mtp_update}"
        return s


def configs(sparsities: Sequence[float], poolings=("max",), reductions=("A1",),
            explores=(0.0,), mtp_masks=("union",), mtp_updates=("prefix",),
            rows: int = 1, explore_policies=("random",)) -> List[Config]:
    """Every combination; A0 has no pooling and no exploration (the compiler
    refuses explore > 0 with A0), single-row traces no MTP policies, and a
    run that explores nothing (explore 0, policy "none", or A0) no policy, so
    those axes collapse instead of repeating identical runs."""
    out = []
    for s, r, p, e, pol, m, u in itertools.product(sparsities, reductions, poolings,
                                                   explores, explore_policies, mtp_masks,
                                                   mtp_updates):
        if pol not in EXPLORE_POLICIES:
            raise ValueError(f"explore policy {pol!r} is not one of "
                             f"{', '.join(EXPLORE_POLICIES)}")
        if pol == "none":
            e = 0.0
        if r == "A0":  # no pooling, and no block budget to explore with
            p, e = "max", 0.0
        if float(e) == 0.0:
            pol = "random"
        if rows == 1:
            m, u = "union", "prefix"
        c = Config(float(s), p, r, float(e), m, u, pol)
        if c not in out:
            out.append(c)
    return out


def _import_spin():
    try:
        import spin  # noqa: F401
        if not hasattr(spin, "Indexer"):
            raise ImportError("the 'spin' found is not the built package "
                              f"({getattr(spin, '__file__', '?')})")
    except ImportError as e:
        raise RuntimeError(f"cannot import the built spin package ({e}); set SPIN_BUILD_DIR "
                           "to the build directory (its python/ holds spin/_spin*.so)") from None
    return spin


_POLICY_ATTR = {"random": "random", "staleness-score": "staleness_score",
                "block-age": "block_age"}


def score_graph(layer: int, rows: int, slots: int, topk: int, block_size: int,
                sparsity: float, explore: float = 0.0, seed: int = 0, pooling: str = "max",
                decay: float = 0.5, mtp_mask: str = "union", mtp_update: str = "prefix",
                reduction: str = "A1", explore_policy: str = "random") -> str:
    """MLIR of one SPIN step of ``layer`` on given dense scores z [B, R, NS]
    (NS = ``slots``), for ``spin.compile(text, "score_layer", None)``.
    Outputs: top-K [B, R, K] and realized block sparsity [B, R].

    ``reduction`` A1 pools the slot predictions (``pooling``) and ranks
    blocks; A0 ranks the slot predictions themselves (no pooling, no
    exploration); A2 keeps a block-level state (predictions per block, the
    observed z pooled per block with ``pooling``). ``explore_policy``
    ``staleness-score`` and ``block-age`` need a state made with
    ``last_observed=True``."""
    if slots % block_size:
        raise ValueError(f"block size {block_size} must divide NS = {slots}")
    if reduction not in ("A0", "A1", "A2"):
        raise ValueError(f"reduction must be A0, A1 or A2, got {reduction!r}")
    if explore_policy not in _POLICY_ATTR:
        raise ValueError(f"explore_policy must be one of {', '.join(_POLICY_ATTR)}, "
                         f"got {explore_policy!r}")
    if reduction == "A0" and (explore or explore_policy != "random"):
        raise ValueError("reduction A0 has no block budget to explore with: explore must be "
                         "0 and explore_policy random")
    R, NS, NB, K, bs = int(rows), int(slots), int(slots) // int(block_size), int(topk), \
        int(block_size)
    params = [f"layer = {int(layer)}"]
    if reduction == "A2":
        params.append("level = block")
    if explore_policy != "random":
        params.append("last_observed = true")
    st = f"!spin.state<{', '.join(params)}>"
    z, n, m = f"tensor<?x{R}x{NS}xf32>", f"tensor<?x{R}xi32>", f"tensor<?x{NB}xi1>"
    blocks = f"tensor<?x{R}x{NB}xf32>"
    args = [f'%z: {z} {{spin.input = "scores"}}', f'%n: {n} {{spin.input = "lengths"}}',
            f"%p: {n} {{spin.positions}}", "%ids: tensor<?xi64> {spin.request_ids}"]
    if R > 1:
        args.append("%acc: tensor<?xi32> {spin.accepted}")
    out = [f"func.func @score_layer({', '.join(args)}) -> "
           f"(tensor<?x{R}x{K}xi32>, tensor<?x{R}xf32> {{spin.sparsity}}) {{",
           f"  %s = spin.layer_state %ids : tensor<?xi64> -> {st}"]
    s = "%s"
    if R > 1:
        out.append(f"  %c = spin.commit %s accepted(%acc : tensor<?xi32>) {{block_size = {bs} : "
                   f"i64, decay = {float(decay)!r} : f64, mtp_update = "
                   f"#spin.mtp_update<{mtp_update}>}} : {st}")
        s = "%c"
    # Predict; A1 pools the slot predictions, A2 predicts per block.
    if reduction == "A2":
        out.append(f"  %S = spin.predict {s} positions(%p : {n}) lengths(%n : {n}) "
                   f"{{block_size = {bs} : i64}} : {st} -> {blocks}")
        ranked = blocks
    else:
        out.append(f"  %zh = spin.predict {s} positions(%p : {n}) lengths(%n : {n}) : "
                   f"{st} -> {z}")
        if reduction == "A1":
            out.append(f"  %S = spin.pool %zh lengths(%n : {n}) {{pooling = "
                       f"#spin.pooling<{pooling}>, block_size = {bs} : i64}} : {z} -> "
                       f"{blocks}")
            ranked = blocks
        else:  # A0 ranks the slot predictions themselves
            ranked = z
    scores = "%S" if reduction != "A0" else "%zh"
    attrs = (f"topk = {K} : i64, block_size = {bs} : i64, sparsity = {float(sparsity)!r} : "
             f"f64, explore = {float(explore)!r} : f64, seed = {int(seed)} : i64, "
             f"mtp_mask = #spin.mtp_mask<{mtp_mask}>, reduction = "
             f"#spin.reduction<{reduction.lower()}>")
    if explore_policy != "random":
        attrs += f", explore_policy = #spin.explore_policy<{_POLICY_ATTR[explore_policy]}>"
    out += [
        f"  %m = spin.select_blocks {s} scores({scores} : {ranked}) lengths(%n : {n}) "
        f"{{{attrs}}} : {st} -> {m}",
        f"  %t = spin.topk %z lengths(%n : {n}) mask(%m : {m}) {{k = {K} : i64, "
        f"block_size = {bs} : i64}} : {z} -> tensor<?x{R}x{K}xi32>"]
    # A block-level state pools the observed scores per block.
    update_pool = f", pooling = #spin.pooling<{pooling}>" if reduction == "A2" else ""
    if R > 1:
        out.append(f"  %s1 = spin.observe {s} scores(%z : {z}) positions(%p : {n}) "
                   f"lengths(%n : {n}) mask(%m : {m}) {{block_size = {bs} : i64, "
                   f"decay = {float(decay)!r} : f64{update_pool}}} : {st}")
    else:
        out.append(f"  %s1 = spin.ema_update {s} scores(%z : {z}) positions(%p : {n}) "
                   f"lengths(%n : {n}) mask(%m : {m}) {{decay = {float(decay)!r} : f64, "
                   f"block_size = {bs} : i64{update_pool}}} : {st}")
    out += [f"  %r = spin.block_sparsity %m lengths(%n : {n}) {{block_size = {bs} : i64}} : "
            f"{m} -> tensor<?x{R}xf32>",
            f"  return %t, %r : tensor<?x{R}x{K}xi32>, tensor<?x{R}xf32>", "}"]
    return "\n".join(out) + "\n"


def dense_topk(z: np.ndarray, lengths: np.ndarray, k: int) -> np.ndarray:
    """[B, R, K] int32 top-K of z [B, R, NS] per row: slots >= N and -inf
    (and NaN) slots excluded, ties to the lower index, -1 padded."""
    B, R = lengths.shape
    out = np.full((B, R, k), -1, dtype=np.int32)
    for b in range(B):
        for r in range(R):
            row = z[b, r, : int(lengths[b, r])]
            top = _traces.topk_indices(np.where(np.isnan(row), -np.inf, row), k)
            top = top[row[top] > -np.inf]   # -inf and NaN never picked
            out[b, r, : top.size] = top
    return out


def _rows(arrays, keep, batch):
    """The per-request arrays of a step restricted to the batch indices in
    ``keep`` (paged caches are shared and stay whole)."""
    if keep.size == batch:
        return arrays
    return {n: a if n in ("keys", "scales") else np.ascontiguousarray(a[keep])
            for n, a in arrays.items()}


def _batch_sizes(trace) -> List[int]:
    """The distinct numbers of requests the trace's steps hold."""
    return sorted({int(n) for n in trace.active.sum(axis=1) if n > 0})


class _CudaArrays:
    """numpy trace arrays -> contiguous CUDA torch tensors of the dtypes the
    CUDA Indexer takes (bf16 as torch.bfloat16 from the bits the compiled
    path rounds to, fp8 as uint8 bits), block tables padded to the state's
    width. Arrays the trace shares between steps and layers (keys, scales)
    are uploaded once."""

    def __init__(self, key_format: str, pages: int):
        import torch
        if not torch.cuda.is_available():
            raise RuntimeError("--device cuda needs torch with a CUDA device "
                               "(torch.cuda.is_available() is False)")
        self.torch, self.key_format, self.pages = torch, key_format, pages
        self.shared = {}

    def _bf16(self, array):
        bits = _traces.f32_to_bf16_bits(array) if array.dtype == np.float32 else array
        bits = np.ascontiguousarray(bits, dtype=np.uint16).view(np.int16)
        return self.torch.from_numpy(bits).view(self.torch.bfloat16)

    def _one(self, name, array):
        torch = self.torch
        if name == "block_table" and array.shape[1] < self.pages:
            pad = np.zeros((array.shape[0], self.pages - array.shape[1]), np.int32)
            array = np.concatenate([array, pad], axis=1)
        if name in ("q", "keys") and self.key_format in ("bf16", "fp8") and \
                array.dtype in (np.uint16, np.float32):
            tensor = self._bf16(array)
        else:
            tensor = torch.from_numpy(np.ascontiguousarray(array))
        return tensor.to("cuda").contiguous()

    def __call__(self, arrays):
        out = {}
        for name, array in arrays.items():
            if name in ("keys", "scales"):
                key = (name, id(array))
                if key not in self.shared:
                    # Hold the array too: its id stays unique while it lives.
                    self.shared[key] = (array, self._one(name, array))
                out[name] = self.shared[key][1]
            else:
                out[name] = self._one(name, array)
        return out


class _InputsEngine:
    """Replays an inputs trace: spin.Indexer per configuration, dense
    reference from spin.Indexer(dense=True), diagnostics' z in numpy. With
    ``device="cuda"`` the Indexers run the GPU programs (compiled for
    ``chips`` into ``cache_dir``, or found there)."""

    def __init__(self, spin, trace, run_configs, seed, device="cpu", cache_dir=None,
                 chips=None, build_only=False):
        h = trace.header
        self.trace, L, T, S = trace, h["layers"], h["steps"], h["page_size"]
        mb_max = max(trace.files[(l, t, "_mb")] for l in range(L) for t in range(T))
        capacity = mb_max * S
        live = trace.max_live_requests()
        common = dict(heads=h["heads"], head_dim=h["head_dim"], block_size=S, topk=h["topk"],
                      key_format=h["key_format"], rows=h["rows"],
                      query_format=h.get("query_format"))
        self.device = device
        # The GPU check comes first: without a GPU only prebuilding makes sense.
        self.upload = (_CudaArrays(h["key_format"], mb_max)
                       if device != "cpu" and not build_only else None)
        if device != "cpu":
            common.update(device=device, cache_dir=cache_dir, chips=chips)
            if build_only:
                common.update(max_pages=mb_max, batch_sizes=_batch_sizes(trace), layers=L)
        self.dense = spin.Indexer(dense=True, **common)
        if build_only:
            for c in run_configs:
                spin.Indexer(sparsity=c.sparsity, explore=c.explore, seed=seed,
                             explore_policy=c.explore_policy, pooling=c.pooling,
                             reduction=c.reduction, mtp_mask=c.mtp_mask,
                             mtp_update=c.mtp_update, **common)
            return
        self.dense_state = self.dense.new_state(capacity_slots=capacity, layers=L,
                                                max_requests=live)
        self.runs = []
        for c in run_configs:
            ix = spin.Indexer(sparsity=c.sparsity, explore=c.explore, seed=seed,
                              explore_policy=c.explore_policy, pooling=c.pooling,
                              reduction=c.reduction, mtp_mask=c.mtp_mask,
                              mtp_update=c.mtp_update, **common)
            self.runs.append((ix, ix.new_state(capacity_slots=capacity, layers=L,
                                               max_requests=live)))
        self.states = [st for _, st in self.runs] + [self.dense_state]

    def step(self, layer, t, keep, want_z):
        """For the batch indices ``keep``: (truth [b, R, K], [(top, sparsity)
        per run], z rows or None), b = len(keep)."""
        h = self.trace.header
        a = _rows(self.trace.step(layer, t), keep, h["batch"])
        ids, fmt = np.ascontiguousarray(self.trace.ids[t, keep]), h["key_format"]
        d = self.upload(a) if self.upload else a
        args = (d["q"], d["w"], d["keys"], d["block_table"], d["lengths"], d["positions"])
        kw = {"scales": d["scales"]} if "scales" in d else {}
        truth, _ = self.dense(*args, self.dense_state, request_ids=ids, layer=layer,
                              return_sparsity=True, **kw)
        results = [ix(*args, st, request_ids=ids, layer=layer, return_sparsity=True, **kw)
                   for ix, st in self.runs]
        if self.upload:
            truth = truth.cpu().numpy()
            results = [(top.cpu().numpy(), sp.cpu().numpy()) for top, sp in results]
        zs = None
        if want_z:
            B, R = a["lengths"].shape
            q = _traces.to_f64(a["q"], "q", fmt)
            w = a["w"].astype(np.float64)
            zs = [[_traces.dense_scores(q[b, r], w[b, r], a["keys"], a["block_table"][b],
                                        int(a["lengths"][b, r]), fmt, a.get("scales"))
                   for r in range(R)] for b in range(B)]
        return truth, results, zs


class _ScoresEngine:
    """Replays a scores trace: a generated SPIN graph on the given z per
    configuration (spin.compile + Program.run), dense reference = top-K of z."""

    def __init__(self, spin, trace, run_configs, seed):
        h = trace.header
        self.spin, self.trace, self.seed = spin, trace, seed
        L, T, R = h["layers"], h["steps"], h["rows"]
        ns_max = max(trace.files[(l, t, "_ns")] for l in range(L) for t in range(T))
        live = trace.max_live_requests()
        self.configs = list(run_configs)
        self.states = [spin.new_state(capacity_slots=ns_max, layers=L, max_requests=live,
                                      rows=R, block_size=h["page_size"],
                                      last_observed=c.explore_policy != "random")
                       for c in run_configs]
        self.programs = {}

    def program(self, layer, ns, c):
        h = self.trace.header
        key = (layer, ns, h["rows"], c, self.seed)
        if key not in self.programs:
            text = score_graph(layer, h["rows"], ns, h["topk"], h["page_size"], c.sparsity,
                               c.explore, self.seed, c.pooling, 0.5, c.mtp_mask, c.mtp_update,
                               c.reduction, c.explore_policy)
            self.programs[key] = self.spin.compile(text, "score_layer", None)
        return self.programs[key]

    def step(self, layer, t, keep, want_z):
        h = self.trace.header
        a = _rows(self.trace.step(layer, t), keep, h["batch"])
        ids = np.ascontiguousarray(self.trace.ids[t, keep])
        z, n, p = a["z"], a["lengths"], a["positions"]
        truth = dense_topk(z, n, h["topk"])
        results = []
        for c, st in zip(self.configs, self.states):
            out = self.program(layer, z.shape[2], c).run(st, scores=z, lengths=n,
                                                         positions=p, request_ids=ids)
            results.append((out["topk"], out["sparsity"]))
        zs = None
        if want_z:
            zs = [[z[b, r, : int(n[b, r])].astype(np.float64) for r in range(n.shape[1])]
                  for b in range(n.shape[0])]
        return truth, results, zs


def prebuild_cuda(trace, run_configs: Sequence[Config], chips: Sequence[str],
                  cache_dir: str, *, seed: int = 0) -> None:
    """Compiles the GPU programs that ``replay(trace, run_configs,
    device="cuda", cache_dir=cache_dir)`` runs, for ``chips``, into
    ``cache_dir`` (needs the compiler, no GPU): for GPU machines whose
    runtime-only build cannot compile."""
    spin = _import_spin()
    if isinstance(trace, str):
        trace = load_trace(trace)
    if trace.header.get("kind", "inputs") == "scores":
        raise ValueError(_SCORES_ON_CPU)
    _InputsEngine(spin, trace, run_configs, seed, "cuda", cache_dir, list(chips),
                  build_only=True)


_SCORES_ON_CPU = ("a scores trace replays on the CPU only: its graph starts from the "
                  "scores, and the GPU path compiles graphs that score keys")


def replay(trace, run_configs: Sequence[Config], *, seed: int = 0,
           diagnostics: bool = True, heatmap_layer: int = 0,
           heatmap_request: Optional[int] = None, progress=None,
           device: str = "cpu", cache_dir: Optional[str] = None) -> dict:
    """Replays ``trace`` (a path or a loaded Trace) for each configuration;
    returns the report dictionary (what ``--json`` writes). An inputs trace
    runs spin.Indexer against spin.Indexer(dense=True); a scores trace
    (``"kind": "scores"``) runs a generated SPIN graph on its z against the
    top-K of z. Each step replays the batch indices that hold a request.
    The heat-map follows ``heatmap_request`` (default: the trace's first
    request). ``device="cuda"`` runs an inputs trace's Indexers on the GPU
    (the configurations the GPU path compiles: bf16/fp8 keys, one row, A1,
    random exploration), with the programs compiled into or found in
    ``cache_dir`` (default: the Indexer's cache)."""
    spin = _import_spin()
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
    if isinstance(trace, str):
        trace = load_trace(trace)
    h = trace.header
    L, T, B, R, K = h["layers"], h["steps"], h["batch"], h["rows"], h["topk"]
    if not 0 <= heatmap_layer < L:
        raise ValueError(f"heatmap layer {heatmap_layer} is outside the trace's {L} layers")
    kind = h.get("kind", "inputs")
    if device == "cuda" and kind == "scores":
        raise ValueError(_SCORES_ON_CPU)
    # A request's first step is its warm-up after prefill; its state is
    # released after its last step. The heat-map follows one request.
    first, last = trace.first_steps(), trace.last_steps()
    if heatmap_request is None:
        heat_id = int(trace.ids[tuple(np.argwhere(trace.active)[0])]) \
            if trace.active.any() else None
    elif int(heatmap_request) in last:
        heat_id = int(heatmap_request)
    else:
        raise ValueError(f"heat-map request {heatmap_request} is not in the trace "
                         f"(its requests: {', '.join(str(r) for r in sorted(last))})")
    if kind == "scores":
        engine = _ScoresEngine(spin, trace, run_configs, seed)
    else:
        engine = _InputsEngine(spin, trace, run_configs, seed, device, cache_dir)
    runs = [{"config": c, "state": st, "miss": [[] for _ in range(L)],
             "sparsity": [[] for _ in range(L)], "heat": []}
            for c, st in zip(run_configs, engine.states)]
    diag = Diagnostics(L, K, seed) if diagnostics else None
    heat_dense = []
    prev_z = [{} for _ in range(L)]   # per layer: request id -> its rows' z at its last step
    started = time.time()
    next_report = 1
    for t in range(T):
        keep = np.flatnonzero(trace.active[t])
        step_ids = [int(x) for x in trace.ids[t, keep]]
        for b in keep[first[t, keep]]:
            for st in engine.states:
                st.add(int(trace.ids[t, b]))
        # A new turn (trace header 'resets'): the state starts over, and
        # this step is the request's dense warm-up.
        for b in np.flatnonzero(trace.resets[t] & ~first[t]):
            for run in runs:
                run["state"].reset(int(trace.ids[t, b]))
        warmup = (first[t] | trace.resets[t])[keep]
        heat_row = step_ids.index(heat_id) if heat_id in step_ids else None
        cur_z = []
        for layer in range(L):
            if keep.size == 0:
                break  # nobody in the batch: nothing to replay at this step
            truth, results, zs = engine.step(layer, t, keep, diag is not None)
            if layer == heatmap_layer:
                heat_dense.append(np.asarray(truth[heat_row, 0]).copy()
                                  if heat_row is not None else np.zeros(0, np.int32))
            for run, (top, sp) in zip(runs, results):
                if layer == heatmap_layer:
                    run["heat"].append(np.asarray(top[heat_row, 0]).copy()
                                       if heat_row is not None else np.zeros(0, np.int32))
                for b in range(keep.size):
                    if warmup[b]:
                        continue  # warm-up: dense selection, not a sparse row
                    for r in range(R):
                        m = miss_rate(truth[b, r], top[b, r])
                        if m is not None:
                            run["miss"][layer].append(m)
                            run["sparsity"][layer].append(float(sp[b, r]))
            if diag is not None:
                cur_z.append(zs)
                for b, rid in enumerate(step_ids):
                    prev_rows = prev_z[layer].get(rid)
                    for r in range(R):
                        prev = prev_rows[r] if prev_rows is not None else None
                        before = [cur_z[l][b][r] for l in range(layer - 1, -1, -1)]
                        diag.row(layer, zs[b][r], prev, before)
        if keep.size == 0:
            heat_dense.append(np.zeros(0, np.int32))
            for run in runs:
                run["heat"].append(np.zeros(0, np.int32))
        if R > 1:
            for run in runs:
                for b in keep:
                    run["state"].commit(int(trace.ids[t, b]), int(trace.accepted[t, b]))
        if diag is not None:
            for layer in range(len(cur_z)):
                for b, rid in enumerate(step_ids):
                    prev_z[layer][rid] = cur_z[layer][b]
        for rid in step_ids:
            if last[rid] == t:
                for st in engine.states:
                    st.release(rid)
                for layer_z in prev_z:
                    layer_z.pop(rid, None)
        if progress is not None and (t + 1) * 10 >= next_report * T:
            while (t + 1) * 10 >= next_report * T:
                next_report += 1
            progress(f"spin-replay: step {t + 1}/{T} ({100 * (t + 1) // T}%), "
                     f"{time.time() - started:.1f} s")
    report = {"trace": os.path.abspath(trace.path), "kind": kind, "device": device,
              "header": {k: v for k, v in h.items() if k != "accepted"},
              "seed": seed, "runs": []}
    for run in runs:
        c = run["config"]
        per_layer = []
        for layer in range(L):
            m = summarize(run["miss"][layer])
            per_layer.append({"layer": layer, "miss_mean": m["mean"], "miss_p99": m["p99"],
                              "sparsity": summarize(run["sparsity"][layer])["mean"],
                              "rows": m["rows"]})
        all_m = summarize([x for l in run["miss"] for x in l])
        overall = {"miss_mean": all_m["mean"], "miss_p99": all_m["p99"],
                   "sparsity": summarize([x for l in run["sparsity"] for x in l])["mean"],
                   "rows": all_m["rows"]}
        report["runs"].append({"config": asdict(c), "label": c.label(R),
                               "per_layer": per_layer, "overall": overall})
    for st in engine.states:
        st.close()
    if diag is not None:
        report["diagnostics"] = diag.result()
    report["heatmap"] = {"layer": heatmap_layer, "request_id": heat_id, "row": 0,
                         "dense_topk": [v[v >= 0].tolist() for v in heat_dense],
                         "spin_topk": {runs[i]["config"].label(R): [v[v >= 0].tolist()
                                                                    for v in runs[i]["heat"]]
                                       for i in range(len(runs))}}
    return report


# ----------------------------------------------------------------------------
# output


def _f(x, width=8, digits=4):
    return f"{'-':>{width}}" if x is None else f"{x:>{width}.{digits}f}"


def format_report(report: dict, per_layer: bool = True) -> str:
    h = report["header"]
    scores = h.get("kind", "inputs") == "scores"
    ids = h.get("request_ids")
    if isinstance(ids, list) and any(isinstance(x, list) for x in ids):
        count = len({r for row in ids for r in row if r is not None})
        batch = f"{h['batch']} batch indices ({count} requests joining and leaving)"
    else:
        batch = f"{h['batch']} requests"
    shape = f"{h['layers']} layers x {h['steps']} steps x {batch} x {h['rows']} rows"
    if scores:
        lines = [f"trace {report['trace']}: scores trace, {shape}, K={h['topk']} "
                 f"block {h['page_size']}"]
    else:
        lines = [f"trace {report['trace']}: {shape}, H={h['heads']} D={h['head_dim']} "
                 f"K={h['topk']} page {h['page_size']}, {h['key_format']} keys"
                 + (", fp8 queries" if h.get("query_format") == "fp8" else "")]
    if "diagnostics" in report:
        d = report["diagnostics"]
        source = "the trace's z" if scores else "dense scores in float64"
        lines += ["", f"Predictor diagnostics (paper Table 1; {source})",
                  f"{'predictor':<20}{'pearson':>9}{'recall@K':>10}{'rows':>8}"]
        for p in PREDICTORS:
            o = d["overall"][p]
            lines.append(f"{p:<20}{_f(o['pearson'], 9)}{_f(o['recall'], 10)}{o['rows']:>8}")
    truth = "top-K of z" if scores else "compiled dense top-K"
    width = max([50] + [len(run["label"]) + 2 for run in report["runs"]])
    lines += ["", f"SPIN replay (miss vs {truth}, sparse rows only)",
              f"{'config':<{width}}{'layer':>6}{'miss mean':>11}{'miss p99':>10}"
              f"{'sparsity':>10}{'rows':>7}"]
    for run in report["runs"]:
        rows = (run["per_layer"] if per_layer and len(run["per_layer"]) > 1 else []) + \
            [dict(run["overall"], layer="all")]
        for i, r in enumerate(rows):
            lines.append(f"{run['label'] if i == 0 else '':<{width}}{r['layer']:>6}"
                         f"{_f(r['miss_mean'], 11)}{_f(r['miss_p99'], 10)}"
                         f"{_f(r['sparsity'], 10)}{r['rows']:>7}")
    return "\n".join(lines)


def write_plots(report: dict, directory: str) -> List[str]:
    """miss rate vs sparsity per policy, and a Figure-1 style top-K heat-map.
    Needs matplotlib; raises RuntimeError with a clear message without it."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise RuntimeError("--plots needs matplotlib, which is not importable by "
                           f"{sys.executable}; install it or drop --plots "
                           "(--json has the same numbers)") from None
    os.makedirs(directory, exist_ok=True)
    written = []
    groups: Dict[str, list] = {}
    for run in report["runs"]:
        c = run["config"]
        key = f"{c['reduction']}" + ("" if c["reduction"] == "A0" else f"-{c['pooling']}") + \
            f" explore={c['explore']:g}" + \
            ("" if c.get("explore_policy", "random") == "random" else f" {c['explore_policy']}") + \
            (f" {c['mtp_mask']}/{c['mtp_update']}" if report["header"]["rows"] > 1 else "")
        groups.setdefault(key, []).append((c["sparsity"], run["overall"]))
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for key, pts in groups.items():
        pts.sort(key=lambda x: x[0])
        xs = [p[0] for p in pts]
        axes[0].plot(xs, [p[1]["miss_mean"] for p in pts], marker="o", label=key)
        axes[1].plot(xs, [p[1]["miss_p99"] for p in pts], marker="o", label=key)
    for ax, title in zip(axes, ("mean top-K miss", "p99 top-K miss")):
        ax.set_xlabel("target block sparsity")
        ax.set_ylabel(title)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    p = os.path.join(directory, "miss_vs_sparsity.png")
    fig.savefig(p, dpi=120)
    plt.close(fig)
    written.append(p)
    hm = report["heatmap"]
    steps = len(hm["dense_topk"])
    width = 1 + max((max(r) for r in hm["dense_topk"] if r), default=0)
    panels = [("dense top-K", hm["dense_topk"])]
    if hm["spin_topk"]:
        label, sel = next(iter(hm["spin_topk"].items()))
        panels.append((f"SPIN top-K ({label})", sel))
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4), squeeze=False)
    for ax, (title, rows) in zip(axes[0], panels):
        img = np.zeros((steps, width))
        for t, r in enumerate(rows):
            r = [i for i in r if i < width]
            img[t, r] = 1.0
        ax.imshow(img, aspect="auto", interpolation="nearest", cmap="Greys")
        ax.set_title(f"{title}\nlayer {hm['layer']}, request {hm['request_id']}", fontsize=8)
        ax.set_xlabel("KV slot")
        ax.set_ylabel("decode step")
    fig.tight_layout()
    p = os.path.join(directory, "topk_heatmap.png")
    fig.savefig(p, dpi=120)
    plt.close(fig)
    written.append(p)
    return written


def _json_clean(x):
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _json_clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_json_clean(v) for v in x]
    if isinstance(x, np.generic):
        return _json_clean(x.item())
    return x


# ----------------------------------------------------------------------------
# command line


def _list(kind, allowed=None):
    def parse(text):
        items = [s.strip() for s in text.split(",") if s.strip()]
        if not items:
            raise argparse.ArgumentTypeError("empty list")
        out = []
        for s in items:
            if kind is float:
                try:
                    v = float(s)
                except ValueError:
                    raise argparse.ArgumentTypeError(f"{s!r} is not a number") from None
                if not 0.0 <= v <= 1.0:
                    raise argparse.ArgumentTypeError(f"{s} is not in [0, 1]")
                out.append(v)
            else:
                if allowed and s not in allowed:
                    raise argparse.ArgumentTypeError(
                        f"{s!r} is not one of {', '.join(allowed)}")
                out.append(s)
        return out
    return parse


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="spin-replay",
        description="Replay a recorded indexer trace through SPIN (compiled CPU path) and "
                    "report top-K miss rates, realized sparsity and the paper's Table 1 "
                    "predictor diagnostics. Trace format: docs/trace-format.md.")
    p.add_argument("trace", help="trace directory (header.json + layer_XXX/step_XXXXX/*.npy)")
    p.add_argument("--sparsity", type=_list(float), default=[0.2, 0.4, 0.5],
                   help="target block sparsities, comma list (default 0.2,0.4,0.5)")
    p.add_argument("--pooling", type=_list(str, ("max", "mean", "top4")), default=["max"],
                   help="block pooling, comma list of max,mean,top4 (default max)")
    p.add_argument("--reduction", type=_list(str, ("A0", "A1", "A2")), default=["A1"],
                   help="block reduction, comma list of A0,A1,A2 (default A1)")
    p.add_argument("--explore", type=_list(float), default=None,
                   help="exploration fraction(s) of the block budget, comma list "
                        "(default 0.05; 'none' runs always explore 0)")
    p.add_argument("--explore-policy", type=_list(str, EXPLORE_POLICIES), default=["random"],
                   help="exploration policies, comma list of none,random,staleness-score,"
                        "block-age (default random; staleness-score and block-age are "
                        "SPIN_SPEC §7.1), each with the same --explore fractions")
    p.add_argument("--seed", type=int, default=0, help="exploration / random-predictor seed")
    p.add_argument("--mtp-mask", type=_list(str, ("union", "row0")), default=["union"],
                   help="MTP mask policy, comma list of union,row0 (default union)")
    p.add_argument("--mtp-update", type=_list(str, ("prefix", "row0")), default=["prefix"],
                   help="MTP update policy, comma list of prefix,row0 (default prefix)")
    p.add_argument("--no-diagnostics", action="store_true",
                   help="skip the Table 1 predictor diagnostics (numpy dense scores)")
    p.add_argument("--heatmap-layer", type=int, default=0,
                   help="layer of the top-K heat-map (row 0; default 0)")
    p.add_argument("--heatmap-request", type=int, default=None,
                   help="request of the top-K heat-map (default: the trace's first)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="where the Indexers run (default cpu); cuda runs an inputs trace "
                        "on the GPU path (bf16/fp8 keys, A1, random exploration; MTP "
                        "rows included)")
    p.add_argument("--cache-dir", metavar="DIR", default=None,
                   help="GPU program cache (default: $SPIN_CACHE_DIR or ~/.cache/spin)")
    p.add_argument("--json", metavar="PATH", help="write the report as JSON")
    p.add_argument("--plots", metavar="DIR", help="write PNG plots (needs matplotlib)")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    policies = args.explore_policy
    if policies == ["none"] and args.explore and any(e > 0 for e in args.explore):
        parser.error("--explore-policy none conflicts with a nonzero --explore")
    explores = args.explore if args.explore is not None else [0.05]
    if args.plots:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            parser.exit(2, f"spin-replay: error: --plots needs matplotlib, which is not "
                           f"importable by {sys.executable}; install it or drop --plots\n")
    try:
        trace = load_trace(args.trace)
        run_configs = configs(args.sparsity, args.pooling, args.reduction, explores,
                              args.mtp_mask, args.mtp_update, rows=trace.header["rows"],
                              explore_policies=policies)
        progress = None if args.quiet else (lambda s: print(s, file=sys.stderr, flush=True))
        report = replay(trace, run_configs, seed=args.seed,
                        diagnostics=not args.no_diagnostics,
                        heatmap_layer=args.heatmap_layer,
                        heatmap_request=args.heatmap_request, progress=progress,
                        device=args.device, cache_dir=args.cache_dir)
    except (TraceError, ValueError, RuntimeError) as e:
        print(f"spin-replay: error: {e}", file=sys.stderr)
        return 2
    print(format_report(report))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(_json_clean(report), f, indent=1)
            f.write("\n")
        print(f"\nwrote {args.json}")
    if args.plots:
        for p in write_plots(report, args.plots):
            print(f"wrote {p}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
