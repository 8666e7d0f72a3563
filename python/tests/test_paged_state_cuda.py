"""Paged SPIN state (docs/GPU-ABI.md, "Paged state"): V, D and the MTP
scores in pages that follow the KV pages, addressed through each step's
``state_block_table``.

Without a GPU (CI, with the compiler): the programs' manifests, the state's
size as a function of the pages allocated (``state_bytes``), and the
Python API's errors.

On a GPU (``-m cuda``): requests whose state pages are scattered in a pool
that starts as garbage (and whose pages are reused after other requests
finish, table entries past their pages -1) step exactly as on the compact
layout (top-K, sparsity, row status, and V and D entry by entry); a bad
state page is skipped and reported without touching any other state; a
paged program refuses a state pool and state tensors of two page counts.
The serving loop's --paged runs (test_serving_loop_cuda.py) check the
same layout against the numpy reference under CUDA graphs.
"""

import os
import sys

import numpy as np
import pytest

spin = pytest.importorskip("spin", reason="the spin extension is not built")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cuda_test_support import cuda, needs_compiler, needs_cuda  # noqa: E402
from paged_state_cases import (BATCH, MAX_PAGES, MTP_UPDATES, SHAPE,  # noqa: E402
                               make_indexer)

needs_compiler = needs_compiler(spin)

CAPACITY = MAX_PAGES * SHAPE["page_size"]


def expected_state_bytes(pages, slots, layers, rows, page, capacity, block):
    """The paged layout's bytes from docs/GPU-ABI.md's table, written out:
    per page of a layer V, D (f32) and the MTP scores (f32 per draft row:
    rows 1.., row 0 being folded at its step); per slot `it` (i64),
    `valid`, the prediction record (4 x i32) and block scores (i32 per
    block), and with MTP the buffered rows, positions, lengths (i32) and
    mask (i8 per block)."""
    blocks = -(-capacity // block)
    per_page = page * (4 + 4 + 4 * (rows - 1))
    per_slot = 8 + 4 + 16 + 4 * blocks
    if rows > 1:
        per_slot += 4 + 4 * rows + 4 * rows + blocks
    return layers * (pages * per_page + slots * per_slot)


@needs_compiler
def test_paged_programs_take_a_state_table_and_pages(tmp_path):
    indexer = make_indexer(spin, True, chips=["sm_90a"], cache_dir=str(tmp_path))
    manifest = spin.read_manifest(indexer.artifact(0, MAX_PAGES, BATCH))
    assert manifest["state"]["page_size"] == SHAPE["page_size"]
    assert manifest["state"]["capacity"] == CAPACITY
    args = {a["name"]: a for a in manifest["arguments"]}
    assert args["state_block_table"]["role"] == "input"
    assert args["state_block_table"]["shape"] == [BATCH, MAX_PAGES]
    assert args["valid"]["role"] == "state" and args["valid"]["dtype"] == "i32"
    compact = make_indexer(spin, False, chips=["sm_90a"], cache_dir=str(tmp_path))
    plain = spin.read_manifest(compact.artifact(0, MAX_PAGES, BATCH))
    assert "page_size" not in plain["state"]
    assert "valid" not in {a["name"] for a in plain["arguments"]}


@needs_compiler
def test_paged_state_grows_with_the_pages_not_with_the_capacity(tmp_path):
    """state_bytes of the paged layout: the formula of docs/GPU-ABI.md at
    several page counts, linear in the pages (the per-page part does not
    depend on the capacity or the slots), and far below the compact
    layout's slots x capacity at an engine's sizes."""
    indexer = make_indexer(spin, True, chips=["sm_90a"], cache_dir=str(tmp_path))
    compact = make_indexer(spin, False, chips=["sm_90a"], cache_dir=str(tmp_path))
    rows, page, block = SHAPE["rows"], SHAPE["page_size"], SHAPE["block_size"]
    for pages, slots, layers in ((1, 1, 1), (40, 6, 1), (1000, 64, 3)):
        got = indexer.state_bytes(CAPACITY, layers, slots, batch=BATCH, pages=pages)
        assert got == expected_state_bytes(pages, slots, layers, rows, page, CAPACITY, block)
    one = indexer.state_bytes(CAPACITY, 2, 8, batch=BATCH, pages=100)
    two = indexer.state_bytes(CAPACITY, 2, 8, batch=BATCH, pages=200)
    assert two - one == 2 * 100 * page * (4 + 4 * rows)
    # 64 requests averaging a quarter of the capacity: a quarter of the
    # compact layout's per-KV-slot memory (plus per-slot records).
    paged = indexer.state_bytes(CAPACITY, 1, 64, batch=BATCH, pages=64 * MAX_PAGES // 4)
    full = compact.state_bytes(CAPACITY, 1, 64, batch=BATCH)
    assert paged < 0.3 * full


@needs_compiler
def test_paged_state_errors_name_the_value(tmp_path):
    with pytest.raises(ValueError, match="paged_state is for SPIN indexers on cuda"):
        spin.Indexer(device="cpu", paged_state=True)
    with pytest.raises(TypeError, match="paged_state must be a bool"):
        spin.Indexer(device="cpu", paged_state=1)
    indexer = make_indexer(spin, True, chips=["sm_90a"], cache_dir=str(tmp_path))
    with pytest.raises(ValueError, match="needs pages=.*got None"):
        indexer.state_bytes(CAPACITY, 1, 4, batch=BATCH)
    with pytest.raises(ValueError, match="needs pages=.*got 0"):
        indexer.state_bytes(CAPACITY, 1, 4, batch=BATCH, pages=0)
    with pytest.raises(ValueError, match="use new_state_tensors"):
        indexer.new_state(CAPACITY, 1, 4)
    compact = make_indexer(spin, False, chips=["sm_90a"], cache_dir=str(tmp_path))
    with pytest.raises(ValueError, match="pages= is for Indexers made with paged_state"):
        compact.state_bytes(CAPACITY, 1, 4, batch=BATCH, pages=10)


# -- on the GPU ----------------------------------------------------------------


class Run:
    """The same steps on a paged and a compact state: requests in slots,
    lengths growing by accepted drafts + 1, KV pages drawn from the key
    cache, private state pages from a shuffled pool (garbage at first,
    stale after reuse), table entries past a request's pages -1."""

    def __init__(self, rng, slots=6, pages=40, mtp_update="prefix"):
        import torch
        self.torch, self.rng = torch, rng
        self.paged = make_indexer(spin, True, mtp_update=mtp_update)
        self.compact = make_indexer(spin, False, mtp_update=mtp_update)
        s = SHAPE
        self.R, self.K, self.P = s["rows"], s["topk"], s["page_size"]
        self.slots, self.pages = slots, pages
        self.kv_pages = 3 * MAX_PAGES
        self.paged_state = self.paged.new_state_tensors(CAPACITY, 1, slots, batch=BATCH,
                                                        pages=pages)
        self.compact_state = self.compact.new_state_tensors(CAPACITY, 1, slots, batch=BATCH)
        assert self.paged_state.nbytes == self.paged.state_bytes(CAPACITY, 1, slots,
                                                                 batch=BATCH, pages=pages)
        for name, t in self.paged_state.tensors.items():
            if name.split(".")[-1] in ("v", "d", "obs_z"):
                t.copy_(torch.from_numpy(rng.normal(0, 50, size=tuple(t.shape))
                                         .astype(np.float32)))
        keys = rng.integers(-4, 5, size=(self.kv_pages, self.P, s["head_dim"]))
        self.keys = torch.from_numpy(keys.astype(np.float32)).cuda().to(torch.float8_e4m3fn)
        self.scales = torch.from_numpy(np.exp2(rng.integers(-2, 3, size=(self.kv_pages, self.P)))
                                       .astype(np.float32)).cuda()
        self.free = list(rng.permutation(pages))
        self.live = {}  # request -> dict(slot, n, kv, pages, fresh, accepted)
        self.next_id = 1

    def admit(self):
        used = {v["slot"] for v in self.live.values()}
        free = [s for s in range(self.slots) if s not in used]
        if not free:
            return
        request = self.next_id * 1_000_003
        self.next_id += 1
        self.live[request] = dict(
            slot=int(self.rng.choice(free)), n=int(self.rng.integers(1, CAPACITY // 2)),
            kv=self.rng.choice(self.kv_pages, MAX_PAGES, replace=False).astype(np.int32),
            pages=[], fresh=True, accepted=0)

    def finish(self, request):
        self.free.extend(self.live.pop(request)["pages"])

    def plan(self):
        """Up to BATCH live requests in random rows (the rest padding), each
        with state pages for its longest row; finished and new requests."""
        for request in [r for r, v in self.live.items()
                        if v["n"] + 2 * self.R > CAPACITY or self.rng.random() < 0.05]:
            self.finish(request)
        while len(self.live) < self.slots and self.rng.random() < 0.7:
            self.admit()
        rows = {}
        for row, request in zip(self.rng.permutation(BATCH), sorted(self.live)):
            v = self.live[request]
            need = -(-(v["n"] + self.R - 1) // self.P)
            if need - len(v["pages"]) > len(self.free):
                continue
            while len(v["pages"]) < need:
                v["pages"].append(int(self.free.pop()))
            rows[int(row)] = request
        return rows

    def inputs(self, rows, bad=None):
        torch, R, B = self.torch, self.R, BATCH
        s = SHAPE
        slots = np.full(B, -1, np.int32)
        table = np.zeros((B, MAX_PAGES), np.int32)
        state_table = np.full((B, MAX_PAGES), -1, np.int32)
        lengths = np.zeros((B, R), np.int32)
        reset = np.zeros(B, bool)
        accepted = np.zeros(B, np.int32)
        ids = self.rng.integers(0, 2 ** 62, size=B).astype(np.int64)
        for row, request in rows.items():
            v = self.live[request]
            slots[row], table[row], reset[row] = v["slot"], v["kv"], v["fresh"]
            state_table[row, :len(v["pages"])] = v["pages"]
            lengths[row] = v["n"] + np.arange(R)
            accepted[row] = 0 if v["fresh"] else v["accepted"]
            ids[row] = request
        if bad is not None:
            state_table[bad] = self.pages  # one past the pool
        q = self.rng.integers(-4, 5, size=(B, R, s["heads"], s["head_dim"]))
        w = self.rng.integers(-4, 5, size=(B, R, s["heads"])) / 4
        dev = lambda a: torch.from_numpy(np.ascontiguousarray(a)).cuda()  # noqa: E731
        return {"q": dev(q.astype(np.float32)).to(torch.bfloat16),
                "w": dev(w.astype(np.float32)), "keys": self.keys, "scales": self.scales,
                "block_table": dev(table), "lengths": dev(lengths),
                "positions": dev(lengths - 1), "request_ids": dev(ids), "slots": dev(slots),
                "reset": dev(reset), "accepted": dev(accepted)}, dev(state_table)

    def outputs(self):
        t = self.torch
        return {"topk": t.zeros((BATCH, self.R, self.K), dtype=t.int32, device="cuda"),
                "sparsity": t.zeros((BATCH, self.R), dtype=t.float32, device="cuda"),
                "status": t.full((BATCH,), 77, dtype=t.int32, device="cuda")}

    def step(self, rows, bad=None):
        inputs, state_table = self.inputs(rows, bad)
        got, want = self.outputs(), self.outputs()
        self.paged.run_batch(dict(inputs, state_block_table=state_table), self.paged_state,
                             got)
        self.compact.run_batch(inputs, self.compact_state, want)
        self.torch.cuda.synchronize()
        return got, want

    def advance(self, rows):
        for request in rows.values():
            v = self.live[request]
            v["accepted"] = int(self.rng.integers(0, self.R))
            v["n"] += v["accepted"] + 1
            v["fresh"] = self.rng.random() < 0.03  # now and then a new turn

    def state_rows(self, request):
        """V and D of the request's slot from both layouts, up to the
        length it has seen (the paged one gathered through its pages)."""
        v = self.live[request]
        n = v["n"] + self.R - 1
        pages = self.torch.tensor(v["pages"], dtype=self.torch.long, device="cuda")
        out = {}
        for field in ("v", "d"):
            compact = self.compact_state.tensors[f"state.0.{field}"][v["slot"], :n]
            paged = self.paged_state.tensors[f"state.0.{field}"].index_select(0, pages)
            out[field] = (paged.reshape(-1)[:n].cpu().numpy(), compact.cpu().numpy())
        return out


@cuda
@needs_cuda
@pytest.mark.parametrize("mtp_update", MTP_UPDATES)
def test_paged_state_steps_equal_the_compact_layout(rng, mtp_update):
    run = Run(rng, mtp_update=mtp_update)
    stepped = reused = 0
    seen_pages = set()
    for step in range(60):
        rows = run.plan()
        got, want = run.step(rows)
        for key in ("topk", "sparsity", "status"):
            assert np.array_equal(got[key].cpu().numpy(), want[key].cpu().numpy()), \
                f"step {step}: {key} differs from the compact layout"
        status = got["status"].cpu().numpy()
        assert sorted(np.flatnonzero(status == 0).tolist()) == sorted(rows)
        for row, request in rows.items():
            for field, (paged, compact) in run.state_rows(request).items():
                assert np.array_equal(paged, compact), \
                    f"step {step}: {field} of request {request} differs"
            pages = run.live[request]["pages"]
            reused += len(seen_pages.intersection(pages)) if run.live[request]["fresh"] else 0
            seen_pages.update(pages)
        stepped += len(rows)
        run.advance(rows)
    run.paged.check()
    assert stepped > 100 and reused > 0


@cuda
@needs_cuda
@pytest.mark.parametrize("mtp_update,case", [
    ("prefix", "accepted 0"), ("prefix", "accepted 1"), ("prefix", "reset"),
    ("row0", "accepted 0"), ("row0", "reset")])
def test_a_bad_state_page_is_skipped_and_reported(rng, mtp_update, case):
    """A state-table entry outside the pool: the row's status is 7
    (spin.abi.row_status names it), check() names the entry, the other rows
    step as on the compact layout, and no state of the bad row's slot or of
    any page changes (its own pages included): the commit of its buffered
    rows waits too, whether rows 1..a are replayed (a > 0) or only `it`
    advances (a = 0, or row0's commit). A reset flag is still applied to
    the slot's own fields (`it`, `valid`, the prediction record, the
    buffered rows), as for any skipped row; no page is touched."""
    run = Run(rng, mtp_update=mtp_update)
    for _ in range(3):
        rows = run.plan()
        run.step(rows)
        run.advance(rows)
    # The bad row: a request that has stepped (its buffered rows wait for
    # their commit), beside at least one other row.
    for _ in range(20):
        rows = run.plan()
        stepped = sorted(r for r, req in rows.items() if not run.live[req]["fresh"])
        if len(rows) >= 2 and stepped:
            break
        run.step(rows)
        run.advance(rows)
    assert len(rows) >= 2 and stepped, "no plan of two rows with a stepped one in 23 steps"
    bad_row = stepped[0]
    bad = run.live[rows[bad_row]]
    if case == "reset":
        bad["fresh"] = True
    else:
        bad["accepted"] = int(case.split()[1])
    bad_slot = bad["slot"]
    before = {name: t.clone() for name, t in run.paged_state.tensors.items()}
    assert before["state.0.obs_rows"][bad_slot].item() > 0
    inputs, state_table = run.inputs(rows, bad=bad_row)
    got = run.outputs()
    run.paged.run_batch(dict(inputs, state_block_table=state_table), run.paged_state, got)
    run.torch.cuda.synchronize()
    status = got["status"].cpu().numpy()
    assert status[bad_row] == 7 and spin.abi.row_status(7) == "BadStatePage"
    assert all(status[r] == 0 for r in rows if r != bad_row)
    with pytest.raises(RuntimeError, match=f"state block-table entry {run.pages} is outside"):
        run.paged.check()
    touched_pages = {p for r, req in rows.items() if r != bad_row
                     for p in run.live[req]["pages"]}
    untouched = [p for p in range(run.pages) if p not in touched_pages]
    index = run.torch.tensor(untouched, dtype=run.torch.long, device="cuda")
    reset_fields = ("it", "valid", "pred_at", "obs_rows") if case == "reset" else ()
    for name, t in run.paged_state.tensors.items():
        field = name.split(".")[-1]
        if field in ("v", "d", "obs_z"):
            assert run.torch.equal(t.index_select(0, index), before[name].index_select(0, index)), \
                f"{name}: a page no good row owns changed"
        elif field in reset_fields:
            assert not t[bad_slot].any(), f"{name}: the bad row's reset was not applied"
        else:
            assert run.torch.equal(t[bad_slot], before[name][bad_slot]), \
                f"{name}: the bad row's slot changed"


@cuda
@needs_cuda
def test_paged_programs_refuse_pools_and_mixed_page_counts(rng):
    import torch
    run = Run(rng)
    program = run.paged.program(0, MAX_PAGES, BATCH)
    assert program.page_size == SHAPE["page_size"]
    rows = run.plan()
    inputs, state_table = run.inputs(rows)
    inputs = dict(inputs, state_block_table=state_table)
    pool = program.new_state(slots=4)
    with pytest.raises(ValueError, match="keeps its state in pages"):
        program.run_batch(inputs, pool, run.outputs())
    with pytest.raises(ValueError, match="give pages="):
        program.new_state_tensors(slots=4)
    state = program.new_state_tensors(slots=4, pages=16)
    state.tensors["state.0.d"] = torch.zeros((17, SHAPE["page_size"]), device="cuda")
    with pytest.raises(ValueError, match="'state.0.d' has 17 pages but 'state.0.v' has 16"):
        program.run_batch(inputs, state, run.outputs())
    state = program.new_state_tensors(slots=4, pages=16)
    with pytest.raises(ValueError, match="missing input 'state_block_table'"):
        program.run_batch({k: v for k, v in inputs.items() if k != "state_block_table"},
                          state, run.outputs())
