"""fp8 key caches in the serving engines' fused page layout (docs/GPU-ABI.md,
"Fused fp8 key pages"): one uint8 tensor whose pages hold their key rows
and then their f32 scales, read in place by the scoring kernels.

On a GPU (``-m cuda``): dense and SPIN steps (MTP rows, bf16 and fp8
queries) on a fused key cache in the engines' shape [pages, page_size, 1,
head_dim + 4] give exactly the top-K, sparsity, row status and state of the
same steps on separate keys and scales (whose kernels the gpu_check and
the differential tests compare with the numpy reference); the SPIN steps
take the engines' other conventions too (int64 positions of one per token,
1-D sequence lengths). Bad fused caches are refused with the value named.
"""

import os
import sys

import numpy as np
import pytest

spin = pytest.importorskip("spin", reason="the spin extension is not built")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from spin import ops  # noqa: E402

from cuda_test_support import cuda, needs_cuda  # noqa: E402
from fused_pages_cases import BATCH, CONFIGS, MAX_PAGES, make_indexer  # noqa: E402


def key_cache(torch, rng, pages, page_size, head_dim):
    """Random fp8 keys (small integers: exact in e4m3, scores with ties)
    and power-of-two scales, separate and fused (engine shape)."""
    keys = rng.integers(-6, 7, size=(pages, page_size, head_dim)).astype(np.float32)
    keys = torch.from_numpy(keys).cuda().to(torch.float8_e4m3fn)
    scales = torch.from_numpy(np.exp2(rng.integers(-3, 3, size=(pages, page_size)))
                              .astype(np.float32)).cuda()
    fused = spin.fuse_fp8_pages(keys, scales).view(pages, page_size, 1, head_dim + 4)
    return keys, scales, fused


def queries(torch, rng, config, rows):
    h, d = config["heads"], config["head_dim"]
    q = torch.from_numpy(rng.integers(-4, 5, size=(BATCH, rows, h, d)).astype(np.float32))
    q = q.cuda().to(torch.float8_e4m3fn if config.get("query_format") == "fp8"
                    else torch.bfloat16)
    w = torch.from_numpy((rng.integers(-4, 5, size=(BATCH, rows, h)) / 4).astype(np.float32))
    return q, w.cuda()


@cuda
@needs_cuda
@pytest.mark.parametrize("name", [n for n in CONFIGS if CONFIGS[n].get("dense")])
def test_dense_steps_on_fused_pages_equal_separate_keys(rng, name):
    import torch
    config = CONFIGS[name]
    rows, page = config.get("rows", 1), config["page_size"]
    fused_ix, plain_ix = make_indexer(spin, name, True), make_indexer(spin, name, False)
    pages = 3 * MAX_PAGES
    capacity = MAX_PAGES * page
    fused_state = fused_ix.new_state(capacity, 1, BATCH)
    plain_state = plain_ix.new_state(capacity, 1, BATCH)
    ids = list(range(BATCH))
    for step in range(6):
        keys, scales, fused = key_cache(torch, rng, pages, page, config["head_dim"])
        q, w = queries(torch, rng, config, rows)
        table = torch.from_numpy(np.stack([rng.choice(pages, MAX_PAGES, replace=False)
                                           for _ in range(BATCH)]).astype(np.int32)).cuda()
        n = rng.integers(0, MAX_PAGES * page + 1, size=BATCH)
        n[0] = MAX_PAGES * page  # a full row
        lengths = np.minimum(n[:, None] + np.arange(rows) - rows + 1, MAX_PAGES * page)
        lengths = torch.from_numpy(np.maximum(lengths, 0).astype(np.int32)).cuda()
        got = fused_ix(q, w, fused, table, lengths, lengths - 1, fused_state, request_ids=ids)
        want = plain_ix(q, w, keys, table, lengths, lengths - 1, plain_state, request_ids=ids,
                        scales=scales)
        torch.cuda.synchronize()
        assert torch.equal(got, want), f"{name} step {step}: top-K differs"
        assert (got[0] >= 0).all(), "the full row has K entries"
    fused_ix.check()


class SpinRun:
    """The same SPIN device-batch steps on a fused key cache and on separate
    keys and scales: requests in slots, lengths growing by accepted drafts
    + 1, new turns now and then, padding rows."""

    def __init__(self, torch, rng, name, slots=6):
        self.torch, self.rng, self.config = torch, rng, CONFIGS[name]
        c = self.config
        self.R, self.S, self.K = c["rows"], c["page_size"], c["topk"]
        self.capacity = MAX_PAGES * self.S
        self.fused_ix, self.plain_ix = make_indexer(spin, name, True), make_indexer(spin, name, False)
        self.fused_state = self.fused_ix.new_state_tensors(self.capacity, 1, slots, batch=BATCH)
        self.plain_state = self.plain_ix.new_state_tensors(self.capacity, 1, slots, batch=BATCH)
        self.pages = 3 * MAX_PAGES
        self.keys, self.scales, self.fused = key_cache(torch, rng, self.pages, self.S,
                                                       c["head_dim"])
        self.slots = slots
        self.live = {}

    def plan(self):
        for slot in [s for s, v in self.live.items()
                     if v["n"] + 2 * self.R > self.capacity or self.rng.random() < 0.05]:
            del self.live[slot]
        for slot in range(self.slots):
            if slot not in self.live and self.rng.random() < 0.5:
                self.live[slot] = dict(n=int(self.rng.integers(1, self.capacity // 2)),
                                       kv=self.rng.choice(self.pages, MAX_PAGES, replace=False),
                                       fresh=True, accepted=0)
        chosen = self.rng.permutation(sorted(self.live))[:BATCH]
        return {int(row): int(slot) for row, slot in zip(self.rng.permutation(BATCH), chosen)}

    def step(self, rows):
        torch, R = self.torch, self.R
        slots = np.full(BATCH, -1, np.int32)
        table = np.zeros((BATCH, MAX_PAGES), np.int32)
        total = np.zeros(BATCH, np.int64)  # the engine's sequence length
        reset = np.zeros(BATCH, bool)
        accepted = np.zeros(BATCH, np.int32)
        for row, slot in rows.items():
            v = self.live[slot]
            slots[row], table[row], reset[row] = slot, v["kv"], v["fresh"]
            total[row] = v["n"] + R - 1
            accepted[row] = 0 if v["fresh"] else v["accepted"]
        lengths = total[:, None] - R + 1 + np.arange(R)
        dev = lambda a: torch.from_numpy(np.ascontiguousarray(a)).cuda()  # noqa: E731
        q, w = queries(torch, self.rng, self.config, R)
        common = {"q": q, "w": w, "block_table": dev(table), "slots": dev(slots),
                  "reset": dev(reset), "accepted": dev(accepted),
                  "request_ids": dev(np.arange(BATCH, dtype=np.int64))}
        plain = dict(common, keys=self.keys, scales=self.scales,
                     lengths=dev(np.maximum(lengths, 0).astype(np.int32)),
                     positions=dev(np.maximum(lengths - 1, 0).astype(np.int32)))
        # The engine's own tensors: the fused cache, one int64 position per
        # token, one length per request.
        engine = dict(common, kv_cache=self.fused, lengths=dev(total),
                      positions=dev(np.maximum(lengths - 1, 0).reshape(-1)))
        outs = []
        for ix, state, inputs in ((self.fused_ix, self.fused_state, engine),
                                  (self.plain_ix, self.plain_state, plain)):
            out = {"topk": torch.zeros((BATCH, R, self.K), dtype=torch.int32, device="cuda"),
                   "sparsity": torch.zeros((BATCH, R), dtype=torch.float32, device="cuda"),
                   "status": torch.full((BATCH,), 77, dtype=torch.int32, device="cuda")}
            if ix is self.plain_ix and ops.AVAILABLE:
                # Only the top-K buffer, as docs/Serving.md's sketch gives
                # it, and no reset tensor on steps without a reset: the op
                # path makes the rest as the direct call would (the status
                # in a buffer of its own, returned).
                out = {"topk": out["topk"]}
                if not reset.any():
                    inputs = {k: v for k, v in inputs.items() if k != "reset"}
            out = ix.run_batch(inputs, state, out)
            outs.append(out)
        torch.cuda.synchronize()
        for v in (self.live[s] for s in rows.values()):
            v["accepted"] = int(self.rng.integers(0, R))
            v["n"] += v["accepted"] + 1
            v["fresh"] = self.rng.random() < 0.05
        return outs


@cuda
@needs_cuda
@pytest.mark.parametrize("name", [n for n in CONFIGS if not CONFIGS[n].get("dense")])
def test_spin_steps_on_fused_pages_equal_separate_keys(rng, name):
    import torch
    run = SpinRun(torch, rng, name)
    stepped = 0
    for step in range(40):
        rows = run.plan()
        got, want = run.step(rows)
        for key in ("topk", "sparsity", "status"):
            assert torch.equal(got[key], want[key]), f"{name} step {step}: {key} differs"
        assert sorted(np.flatnonzero(got["status"].cpu().numpy() == 0).tolist()) == sorted(rows)
        stepped += len(rows)
    for field, tensor in run.fused_state.tensors.items():
        assert torch.equal(tensor, run.plain_state.tensors[field]), f"state {field} differs"
    assert stepped > 60
    run.fused_ix.check()


@cuda
@needs_cuda
def test_bad_fused_caches_are_refused_by_name(rng):
    import torch
    run = SpinRun(torch, rng, "spin-r2")
    rows = run.plan()
    S, D = run.S, run.config["head_dim"]
    out = {"topk": torch.zeros((BATCH, run.R, run.K), dtype=torch.int32, device="cuda")}
    base = {"q": queries(torch, rng, run.config, run.R)[0],
            "w": torch.zeros((BATCH, run.R, run.config["heads"]), device="cuda"),
            "block_table": torch.zeros((BATCH, MAX_PAGES), dtype=torch.int32, device="cuda"),
            "slots": torch.full((BATCH,), -1, dtype=torch.int32, device="cuda"),
            "lengths": torch.zeros((BATCH, run.R), dtype=torch.int32, device="cuda"),
            "positions": torch.zeros((BATCH, run.R), dtype=torch.int32, device="cuda")}
    assert rows is not None
    with pytest.raises(ValueError, match=f"kv_cache has shape \\(24, {S}, 1, {D + 5}\\): "
                                         f"expected \\[pages, ...\\] with {S * (D + 4)} bytes"):
        run.fused_ix.run_batch(dict(base, kv_cache=torch.zeros((24, S, 1, D + 5), dtype=torch.uint8,
                                                              device="cuda")),
                               run.fused_state, out)
    with pytest.raises(TypeError, match="kv_cache has dtype torch.float32"):
        run.fused_ix.run_batch(dict(base, kv_cache=torch.zeros((24, S * (D + 4) // 4),
                                                              device="cuda")),
                               run.fused_state, out)
    with pytest.raises(ValueError, match="not inputs\\['keys'\\]"):
        run.fused_ix.run_batch(dict(base, keys=run.keys, scales=run.scales),
                               run.fused_state, out)
    with pytest.raises(ValueError, match="kv_cache is not contiguous"):
        run.fused_ix.run_batch(dict(base, kv_cache=run.fused[::2]), run.fused_state, out)
    program = run.fused_ix.program(0, MAX_PAGES, BATCH)
    flat = run.fused.view(run.pages, -1)
    with pytest.raises(ValueError, match="input 'kv_cache' starts at address .* not a "
                                         "multiple of 16 bytes"):
        program.run_batch(dict(base, kv_cache=flat.view(-1)[8:8 + 4 * flat.shape[1]]
                               .view(4, -1)), run.fused_state, out)
