#!/usr/bin/env python3
"""A serving engine's decode loop around spin's SPIN indexer, on CUDA.

Continuous batching as vLLM or SGLang run it: requests arrive and finish at
random steps and take any free state slot; at every step they move between
batch rows, some sit the step out, and some start a new turn (their state is
reset on the device by a flag). With MTP (``--rows R``, R > 1) a step
verifies R query rows per request, and the drafts accepted are drawn on the
GPU: the host never sees them. Every layer's indexer step for a batch bucket
(1, 2, 4, ..., 64 rows) is one CUDA graph, captured once at start-up and
replayed for whatever batch the engine writes into its persistent input
tensors before the replay (docs/Serving.md): the slot of each row (-1 pads
the bucket), the reset flags, the request ids; lengths, positions, block
tables and accepted counts are gathered on the GPU from per-slot tensors.

    python3 examples/serving_loop.py [--rows 2] [--layers 2] [--steps 1000]
        [--pooling max|mean|top4] [--queries bf16|fp8] [--max-batch 64]
        [--paged] [--check] [--seed N]

``--queries fp8`` writes the queries as fp8 e4m3 (torch.float8_e4m3fn), as
DeepSeek's indexer and the engines' fp8 indexer path do, scored on fp8
tensor cores (docs/GPU-ABI.md); the default is bf16.

``--paged`` keeps the SPIN state in pages that follow the KV pages
(docs/GPU-ABI.md, "Paged state"): each request gets state pages from a
shared pool as its length grows (scattered, and reused after other
requests finished, so they hold stale state; the pool starts filled with
garbage), named by a ``state_block_table`` whose entries past the request's
pages are -1.

``--check`` also steps a second state eagerly (no graph) on the same inputs,
and compares every step's top-K and sparsity of both with the independent
numpy reference of test/reference (integer inputs: the selections are
exact), and proves that no step waits for the device: torch's sync debug
mode is "error" while a step is issued, and every tenth step is issued
behind a 20 ms spinning kernel that must still be running when the step has
been issued. Without ``--check`` it times steps per second, graphs against
eager steps.

The indexer's GPU programs (one per layer and bucket) come from the disk
cache ($SPIN_CACHE_DIR): a build with the compiler fills it on first use; a
runtime-only build on a GPU machine needs it filled on a machine with the
compiler (python/tests/prebuild_cuda_cache.py --out DIR, then
SPIN_CACHE_DIR=DIR).
"""

import argparse
import dataclasses
import os
import sys
import time

import numpy as np

import spin

BUCKETS = (1, 2, 4, 8, 16, 32, 64)

#: (rows, layers, pooling, queries) of the runs bench/run_gpu_check.sh makes
#: with --check (python/tests/test_serving_loop_cuda.py;
#: prebuild_cuda_cache.py compiles their programs): one token a step, MTP
#: with one draft over two layers (max pooling: the predict kernel applies
#: the resets), MTP with two drafts (mean pooling: a reset kernel).
CHECKED = ((1, 1, "max", "bf16"), (2, 2, "max", "bf16"), (3, 1, "mean", "bf16"))
#: The same runs with --paged (state pages that follow the KV pages), MTP
#: with one draft on fp8 queries: DeepSeek's serving configuration (fp8
#: keys and queries, paged state, one draft).
CHECKED_PAGED = ((1, 1, "max", "bf16"), (2, 2, "max", "fp8"), (3, 1, "mean", "bf16"))


@dataclasses.dataclass(frozen=True)
class Shape:
    """The indexer's shape and the engine's sizes."""
    heads: int = 8
    head_dim: int = 64
    page: int = 64          # slots per KV page (and per page of the block table)
    block: int = 16         # SPIN block size
    topk: int = 32
    max_pages: int = 8      # block-table width: capacity = max_pages * page slots
    kv_pages: int = 256     # pages in each layer's key cache
    slots: int = 96         # state slots (requests holding state), > the largest bucket
    state_pages: int = 512  # --paged: state pages shared by all requests (each layer)
    sparsity: float = 0.5
    explore: float = 0.1

    @property
    def capacity(self):
        return self.max_pages * self.page


#: The query formats the loop writes (fp8: torch.float8_e4m3fn).
QUERIES = ("bf16", "fp8")


def buckets_up_to(max_batch):
    return [b for b in BUCKETS if b < max_batch] + [max_batch]


def make_indexer(rows, layers, pooling="max", shape=Shape(), buckets=BUCKETS,
                 chips=None, cache_dir=None, paged=False, queries="bf16"):
    """The loop's indexer: fp8 keys with f32 scales, ``queries`` (bf16 or
    fp8) queries, reset flags, and the layer as a run-time argument (one
    program per bucket serves every layer, and all buckets share one
    workspace of scratch buffers), with ``paged`` state pages; the programs
    are compiled (or found in the cache) now, for ``chips`` (default: the
    device's)."""
    return spin.Indexer(heads=shape.heads, head_dim=shape.head_dim,
                        block_size=shape.block, page_size=shape.page, topk=shape.topk,
                        sparsity=shape.sparsity, explore=shape.explore, seed=11,
                        pooling=pooling, rows=rows, key_format="fp8",
                        query_format=queries,
                        reset_input=True, layer_argument=True, device="cuda", chips=chips,
                        cache_dir=cache_dir, max_pages=shape.max_pages,
                        batch_sizes=list(buckets), layers=layers, paged_state=paged,
                        shared_workspace=True)


class Engine:
    """Persistent device tensors an engine owns, one CUDA graph per bucket,
    and the per-slot tensors (length, block table, accepted drafts) from
    which each step's inputs are gathered on the GPU."""

    RING = 8  # pinned staging entries: how far the host may run ahead

    def __init__(self, indexer, layers, shape, buckets, seed, eager_state=False,
                 reference=True):
        import torch
        self.torch, self.indexer, self.shape = torch, indexer, shape
        self.L, self.R, self.buckets = layers, indexer.rows, list(buckets)
        dev = self.dev = torch.device("cuda")
        S, MP, B, R = shape.slots, shape.max_pages, max(buckets), self.R
        H, D = shape.heads, shape.head_dim
        self.gen = torch.Generator(device=dev).manual_seed(seed)
        rng = np.random.default_rng(seed)
        # Each layer's fp8 key cache and f32 scales. For the reference: small
        # integers (exact in e4m3) and powers of two, with host copies; for
        # timing only: any finite e4m3 bytes, made on the device.
        self.keys, self.scales, self.keys_host, self.scales_host = [], [], [], []
        for _ in range(layers):
            if reference:
                k = rng.integers(-4, 5, size=(shape.kv_pages, shape.page, D)).astype(np.float32)
                s = np.exp2(rng.integers(-2, 3, size=(shape.kv_pages, shape.page))
                            ).astype(np.float32)
                self.keys.append(torch.from_numpy(k).to(dev).to(torch.float8_e4m3fn))
                self.scales.append(torch.from_numpy(s).to(dev))
                self.keys_host.append(k)
                self.scales_host.append(s)
            else:
                k = torch.randint(0, 256, (shape.kv_pages, shape.page, D), dtype=torch.uint8,
                                  device=dev, generator=self.gen)
                k[(k & 0x7F) == 0x7F] = 0  # 0x7f and 0xff are NaN in e4m3
                self.keys.append(k.view(torch.float8_e4m3fn))
                self.scales.append(torch.rand((shape.kv_pages, shape.page), device=dev,
                                              generator=self.gen) + 0.5)
        i32, z = torch.int32, dict(device=dev)
        # The step's inputs, written before every replay.
        # fp8 queries are drawn in bf16 (small integers, exact in e4m3) and
        # converted: torch draws no fp8 values.
        fp8 = indexer.query_format == "fp8"
        qtype = torch.float8_e4m3fn if fp8 else torch.bfloat16
        self.q = [torch.zeros((B, R, H, D), dtype=qtype, **z) for _ in range(layers)]
        self.q_draw = torch.zeros((B, R, H, D), dtype=torch.bfloat16, **z) if fp8 else None
        self.w = [torch.zeros((B, R, H), dtype=torch.float32, **z) for _ in range(layers)]
        self.block_table = torch.zeros((B, MP), dtype=i32, **z)
        self.lengths = torch.zeros((B, R), dtype=i32, **z)
        self.positions = torch.zeros((B, R), dtype=i32, **z)
        self.request_ids = torch.zeros(B, dtype=torch.int64, **z)
        self.slots = torch.full((B,), -1, dtype=i32, **z)
        self.paged = indexer.paged_state
        self.state_table = torch.full((B, MP), -1, dtype=i32, **z)
        self.reset = torch.zeros(B, dtype=torch.bool, **z)
        self.accepted = torch.zeros(B, dtype=i32, **z)
        self.out = [self._outputs(B) for _ in range(layers)]
        # Per state slot, plus one row (index `slots`) that padding rows
        # gather from: garbage, which no kernel may read.
        self.slot_len = torch.zeros(S + 1, dtype=i32, **z)
        self.slot_acc = torch.zeros(S + 1, dtype=i32, **z)
        self.slot_table = torch.zeros((S + 1, MP), dtype=i32, **z)
        self.slot_table[S] = torch.from_numpy(
            rng.integers(-50, 10 ** 6, size=MP).astype(np.int32)).to(dev)
        self._garbage_row()
        self.arange = torch.arange(R, dtype=i32, **z)
        # Admissions: up to B new requests' slots, lengths and tables a step.
        self.adm_slot = torch.zeros(B, dtype=torch.int64, **z)
        self.adm_len = torch.zeros(B, dtype=i32, **z)
        self.adm_table = torch.zeros((B, MP), dtype=i32, **z)
        # Pinned staging: what the host writes each step, copied without a sync.
        pin = dict(pin_memory=True)
        self.ring = [dict(slots=torch.full((B,), -1, dtype=i32, **pin),
                          reset=torch.zeros(B, dtype=torch.bool, **pin),
                          ids=torch.zeros(B, dtype=torch.int64, **pin),
                          adm_slot=torch.full((B,), S, dtype=torch.int64, **pin),
                          adm_len=torch.zeros(B, dtype=i32, **pin),
                          adm_table=torch.zeros((B, MP), dtype=i32, **pin),
                          state_table=torch.full((B, MP), -1, dtype=i32, **pin),
                          done=None)
                     for _ in range(self.RING)]
        self.ring_at = 0
        self.state = self._new_state(rng)
        self.eager_state = self.eager_out = None
        if eager_state:
            self.eager_state = self._new_state(rng)
            self.eager_out = [self._outputs(B) for _ in range(layers)]
        self.graphs = {}
        self.issue_seconds, self.issued = 0.0, 0

    def _new_state(self, rng):
        """A state pool, or with paged state the caller's state tensors:
        per-KV-slot pages filled with garbage (what a reused page holds),
        which the steps must never read as state."""
        sh = self.shape
        if not self.paged:
            return self.indexer.new_state(capacity_slots=sh.capacity, layers=self.L,
                                          max_requests=sh.slots)
        state = self.indexer.new_state_tensors(sh.capacity, layers=self.L,
                                               max_requests=sh.slots, pages=sh.state_pages)
        for name, t in state.tensors.items():
            if name.split(".")[-1] in ("v", "d", "obs_z"):
                t.copy_(self.torch.from_numpy(
                    rng.normal(0, 100, size=tuple(t.shape)).astype(np.float32)))
        return state

    def _outputs(self, B):
        t = self.torch
        return {"topk": t.zeros((B, self.R, self.shape.topk), dtype=t.int32, device=self.dev),
                "sparsity": t.zeros((B, self.R), dtype=t.float32, device=self.dev),
                # Each row's status: 0 stepped, -1 padding, else why it was
                # skipped (spin.abi.row_status); no sync needed to read it.
                "status": t.zeros(B, dtype=t.int32, device=self.dev)}

    def _garbage_row(self):
        """Padding rows gather lengths and accepted counts that no step may
        read (past the capacity, past R)."""
        S = self.shape.slots
        self.slot_len[S:].fill_(10 ** 6)
        self.slot_acc[S:].fill_(99)

    # -- the step --------------------------------------------------------------

    def _inputs(self, layer, b):
        """Layer ``layer``'s step inputs for a bucket of ``b`` rows: views of
        the persistent tensors, so a graph captured with them reads what the
        engine writes there later."""
        inputs = {"q": self.q[layer][:b], "w": self.w[layer][:b], "keys": self.keys[layer],
                  "scales": self.scales[layer], "block_table": self.block_table[:b],
                  "lengths": self.lengths[:b], "positions": self.positions[:b],
                  "request_ids": self.request_ids[:b], "slots": self.slots[:b],
                  "reset": self.reset[:b]}
        if self.R > 1:
            inputs["accepted"] = self.accepted[:b]
        if self.paged:
            inputs["state_block_table"] = self.state_table[:b]
        return inputs

    def issue(self, b, state, outputs):
        for layer in range(self.L):
            self.indexer.run_batch(self._inputs(layer, b), state,
                                   {k: v[:b] for k, v in outputs[layer].items()}, layer=layer)

    def capture(self):
        """One graph per bucket, captured once (nothing runs at capture),
        after an eager step of padding rows only (all slots -1: no state is
        touched), which loads the programs onto the GPU and hands the states
        to device batches: a capture may not allocate or load modules."""
        torch = self.torch
        for b in self.buckets:
            self.issue(b, self.state, self.out)
            if self.eager_state is not None:
                self.issue(b, self.eager_state, self.eager_out)
        torch.cuda.synchronize()
        self.indexer.check()
        for b in self.buckets:
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                self.issue(b, self.state, self.out)
            self.graphs[b] = graph

    def pace(self):
        """Waits until the device has finished the step that last used the
        next staging entry: the engine's bound on how far the host runs
        ahead (RING steps), outside the step itself."""
        entry = self.ring[self.ring_at]
        if entry["done"] is not None:
            entry["done"].synchronize()
            entry["done"] = None

    def write(self, plan):
        """The host's part of a step: the rows' slots, reset flags and ids,
        and the admitted requests' lengths and tables, into pinned staging,
        copied to the device asynchronously (after ``pace``)."""
        entry = self.ring[self.ring_at]
        self.ring_at = (self.ring_at + 1) % self.RING
        assert entry["done"] is None, "pace() before write()"
        b = plan.bucket
        slots, reset, ids = entry["slots"].numpy(), entry["reset"].numpy(), entry["ids"].numpy()
        slots[:b], reset[:b] = -1, False
        ids[:b] = plan.garbage_ids
        for row, (slot, fresh, request) in plan.rows.items():
            slots[row], reset[row], ids[row] = slot, fresh, request
        if self.paged:
            # Each row's state pages; a padding row's are garbage.
            tables = entry["state_table"].numpy()
            tables[:b] = plan.garbage_ids[:b, None].astype(np.int32) | 1
            for row, pages in plan.state_tables.items():
                tables[row] = pages
            self.state_table[:b].copy_(entry["state_table"][:b], non_blocking=True)
        adm_slot, adm_len, adm_table = (entry["adm_slot"].numpy(), entry["adm_len"].numpy(),
                                        entry["adm_table"].numpy())
        adm_slot[:] = self.shape.slots
        for i, (slot, n, table) in enumerate(plan.admitted):
            adm_slot[i], adm_len[i], adm_table[i] = slot, n, table
        nb = dict(non_blocking=True)
        self.slots[:b].copy_(entry["slots"][:b], **nb)
        self.reset[:b].copy_(entry["reset"][:b], **nb)
        self.request_ids[:b].copy_(entry["ids"][:b], **nb)
        self.adm_slot.copy_(entry["adm_slot"], **nb)
        self.adm_len.copy_(entry["adm_len"], **nb)
        self.adm_table.copy_(entry["adm_table"], **nb)
        return entry

    def prepare(self, b):
        """The GPU's part before the step: admitted requests' per-slot
        lengths and tables, then each row's lengths, positions, block table
        and accepted count gathered by its slot; fresh queries and weights."""
        torch, S, MP = self.torch, self.shape.slots, self.shape.max_pages
        self.slot_len.scatter_(0, self.adm_slot, self.adm_len)
        self.slot_table.scatter_(0, self.adm_slot[:, None].expand(-1, MP), self.adm_table)
        self._garbage_row()
        slots = self.slots[:b].long()
        idx = torch.where(slots >= 0, slots, S)
        n = self.slot_len.index_select(0, idx)
        self.lengths[:b].copy_(n[:, None] + self.arange)
        torch.sub(self.lengths[:b], 1, out=self.positions[:b])
        torch.index_select(self.slot_table, 0, idx, out=self.block_table[:b])
        if self.R > 1:
            acc = self.slot_acc.index_select(0, idx)
            self.accepted[:b].copy_(torch.where(self.reset[:b], 0, acc))
        for layer in range(self.L):
            if self.q_draw is None:
                self.q[layer][:b].random_(-4, 5, generator=self.gen)
            else:
                self.q[layer][:b].copy_(self.q_draw[:b].random_(-4, 5, generator=self.gen))
            self.w[layer][:b].random_(-4, 5, generator=self.gen).div_(4)
        return idx

    def advance(self, b, idx):
        """After the step, on the GPU: each row's request accepted a random
        number of its R - 1 drafts (none with R = 1) and its length grows by
        that plus one."""
        torch = self.torch
        if self.R > 1:
            a = torch.randint(0, self.R, (b,), generator=self.gen, device=self.dev,
                              dtype=torch.int32)
        else:
            a = torch.zeros(b, dtype=torch.int32, device=self.dev)
        self.slot_acc.scatter_(0, idx, a)
        self.slot_len.scatter_add_(0, idx, a + 1)
        self._garbage_row()

    def warm_up(self):
        """A step of padding rows only through every bucket's whole path
        (staging, torch's gathers, the replay, the eager steps): the first
        launch of a kernel loads it lazily, which may wait for the device;
        serving steps should not."""
        for b in self.buckets:
            self.pace()
            self.step(Plan(b, {}, [], np.zeros(b, np.int64)))
        self.torch.cuda.synchronize()
        self.indexer.check()
        self.issue_seconds, self.issued = 0.0, 0

    def step(self, plan, graphs=True):
        """One decode step: write, prepare, the indexer (the bucket's graph,
        or eager steps), the eager state's steps when there is one, advance.
        The host time spent issuing the indexer is summed in
        ``issue_seconds`` (``issued`` steps)."""
        entry = self.write(plan)
        idx = self.prepare(plan.bucket)
        t = time.perf_counter()
        if graphs:
            self.graphs[plan.bucket].replay()
        else:
            self.issue(plan.bucket, self.state, self.out)
        self.issue_seconds += time.perf_counter() - t
        self.issued += 1
        if self.eager_state is not None:
            self.issue(plan.bucket, self.eager_state, self.eager_out)
        self.advance(plan.bucket, idx)
        entry["done"] = self.torch.cuda.Event()
        entry["done"].record()


@dataclasses.dataclass
class Plan:
    """One step as the scheduler decided it: the bucket, row -> (slot,
    reset flag, request id), and the requests admitted into their slots
    (slot, first length, block table)."""
    bucket: int
    rows: dict
    admitted: list
    garbage_ids: np.ndarray
    #: row -> the request's state block-table row (paged state only)
    state_tables: dict = dataclasses.field(default_factory=dict)


class Scheduler:
    """Continuous batching on the host: a target number of live requests
    drawn log-uniformly (so every bucket is used), arrivals and departures
    toward it, random finishes, new turns and sit-outs, rows shuffled at
    every step. The host knows each request's length only as a bound (the
    accepted drafts are drawn on the GPU): a request finishes before its
    bound could pass the capacity."""

    def __init__(self, shape, rows, buckets, seed, churn=True, lengths=None,
                 max_admit=8, paged=False):
        self.shape, self.R, self.buckets = shape, rows, sorted(buckets)
        self.max_batch = self.buckets[-1]
        # First lengths are drawn from [lo, hi); without churn every
        # request steps at every step (rows still move).
        self.lengths = lengths or (1, shape.capacity // 2)
        self.max_admit = max_admit
        self.rng = np.random.default_rng(seed + 1)
        self.live = {}  # request -> {"slot", "fresh", "bound"}
        self.next_id, self.target, self.churn = 1, self.max_batch, churn
        self.admissions = self.turns = 0
        # Paged state: free state pages (taken in random order), and the
        # most ever in use.
        self.paged = paged
        self.free_pages = list(self.rng.permutation(shape.state_pages)) if paged else []
        self.pages_peak = 0

    def _finish(self, request):
        self.free_pages.extend(self.live.pop(request).get("pages", []))

    def _grow(self, v):
        """Paged state: the request's state pages for lengths up to its
        bound this step (entries past them -1); None if the pool is out of
        pages."""
        page, width = self.shape.page, self.shape.max_pages
        need = min(width, -(-(v["bound"] + self.R - 1) // page))
        pages = v.setdefault("pages", [])
        if need - len(pages) > len(self.free_pages):
            return None
        while len(pages) < need:
            pages.append(int(self.free_pages.pop()))
        self.pages_peak = max(self.pages_peak,
                              self.shape.state_pages - len(self.free_pages))
        return np.array(pages + [-1] * (width - len(pages)), np.int32)

    def _admit(self, admitted):
        used = {r["slot"] for r in self.live.values()}
        free = [s for s in range(self.shape.slots) if s not in used]
        if not free:
            return
        slot = int(self.rng.choice(free))
        n = int(self.rng.integers(*self.lengths))
        table = self.rng.choice(self.shape.kv_pages, self.shape.max_pages,
                                replace=False).astype(np.int32)
        request = self.next_id * 7919 + int(self.rng.integers(0, 2 ** 40)) * 2 ** 20
        self.next_id += 1
        self.live[request] = {"slot": slot, "fresh": True, "bound": n}
        admitted.append((slot, n, table))
        self.admissions += 1

    def plan(self, step):
        rng, cap = self.rng, self.shape.capacity
        if self.churn and step % 40 == 0:
            self.target = int(np.exp(rng.uniform(0, np.log(self.max_batch + 1))))
            self.target = max(1, min(self.target, self.max_batch))
        # Requests whose length could pass the capacity at this step finish.
        for request in [r for r, v in self.live.items() if v["bound"] + self.R - 1 > cap]:
            self._finish(request)
        if self.churn:
            for request in list(self.live):
                if rng.random() < 0.01:
                    self._finish(request)
            extra = len(self.live) - self.target
            for request in (list(rng.permutation(sorted(self.live)))[:min(extra, 8)]
                            if extra > 0 else []):
                self._finish(int(request))
        admitted = []
        while len(self.live) < self.target and len(admitted) < self.max_admit:
            self._admit(admitted)
        if not self.live:
            self._admit(admitted)
        for request, v in self.live.items():
            if self.churn and not v["fresh"] and rng.random() < 0.02:
                v["fresh"] = True  # a new turn: the state starts afresh
                self.turns += 1
        stepping = [r for r in sorted(self.live)
                    if not self.churn or self.live[r]["fresh"] or rng.random() < 0.9]
        stepping = stepping[:self.max_batch] or sorted(self.live)[:1]
        bucket = next(b for b in self.buckets if b >= len(stepping))
        rows, tables = {}, {}
        for row, request in zip(rng.permutation(bucket), stepping):
            v = self.live[request]
            if self.paged:
                table = self._grow(v)
                if table is None:  # out of state pages: the request waits
                    continue
                tables[int(row)] = table
            rows[int(row)] = (v["slot"], v["fresh"], request)
            v["fresh"] = False
            v["bound"] += self.R
        garbage = rng.integers(0, 2 ** 62, size=bucket).astype(np.int64)
        return Plan(bucket, rows, admitted, garbage, tables)


class Checker:
    """The numpy reference's state per (slot, layer) and the comparison of
    both states' outputs with it."""

    def __init__(self, engine, pooling):
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(
            os.path.abspath(__file__))), "test", "reference"))
        import spin_reference
        self.ref, self.engine, self.pooling = spin_reference, engine, pooling
        self.states = {}
        self.steps = self.rows_checked = self.sparse_rows = 0

    def check(self, plan, step):
        e, ref, torch = self.engine, self.ref, self.engine.torch
        torch.cuda.synchronize()
        e.indexer.check()  # bad device data: none expected
        b, sh = plan.bucket, e.shape
        live = sorted(plan.rows)
        host = lambda t: t[:b].cpu().numpy()  # noqa: E731
        lengths, positions, table = host(e.lengths), host(e.positions), host(e.block_table)
        accepted = host(e.accepted) if e.R > 1 else None
        for layer in range(e.L):
            want_top = np.full((b, e.R, sh.topk), -1, np.int32)
            want_sp = np.zeros((b, e.R), np.float32)
            if live:
                states = [self.states.setdefault(
                    (plan.rows[r][0], layer), ref.LayerState(sh.capacity, sh.block))
                    for r in live]
                q = e.q[layer][:b].float().cpu().numpy()[live]
                w = e.w[layer][:b].cpu().numpy()[live]
                top, _, sp, _ = ref.spin_step(
                    states, [plan.rows[r][2] for r in live], layer, q, w,
                    e.keys_host[layer], e.scales_host[layer], table[live], lengths[live],
                    positions[live], k=sh.topk, bs=sh.block, sparsity=sh.sparsity,
                    explore=sh.explore, seed=11, pooling=self.pooling,
                    accepted=[int(accepted[r]) for r in live] if e.R > 1 else None,
                    reset_flags=[plan.rows[r][1] for r in live])
                want_top[live], want_sp[live] = top, sp
                self.sparse_rows += int((sp > 0).sum())
            want_status = np.full(b, -1, np.int32)
            want_status[live] = 0
            for what, out in (("graph", e.out), ("eager", e.eager_out)):
                got_top = out[layer]["topk"][:b].cpu().numpy()
                got_sp = out[layer]["sparsity"][:b].cpu().numpy()
                got_status = out[layer]["status"][:b].cpu().numpy()
                where = f"step {step} layer {layer} ({what}, bucket {b}, rows {live})"
                if not np.array_equal(got_status, want_status):
                    raise AssertionError(f"{where}: row status {got_status.tolist()}, "
                                         f"expected {want_status.tolist()}")
                if not np.array_equal(got_top, want_top):
                    bad = sorted({int(i) for i in np.argwhere(got_top != want_top)[:, 0]})
                    raise AssertionError(f"{where}: top-K differs from the reference in "
                                         f"batch rows {bad}")
                if not np.allclose(got_sp, want_sp, atol=1e-6):
                    raise AssertionError(f"{where}: sparsity differs from the reference")
        self.steps += 1
        self.rows_checked += len(live)


def calibrate_sleep(torch):
    """torch.cuda._sleep cycles per millisecond on this GPU."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    cycles = 10 ** 7
    torch.cuda._sleep(cycles)  # warm-up
    start.record()
    torch.cuda._sleep(cycles)
    end.record()
    end.synchronize()
    return cycles / max(start.elapsed_time(end), 1e-3)


def run_checked(engine, scheduler, checker, steps, sleep_every=10, sleep_ms=20.0):
    """``steps`` graph replays, each compared with the eager state and the
    reference; returns counts for the report."""
    torch = engine.torch
    per_ms = calibrate_sleep(torch)
    replays = {b: 0 for b in engine.buckets}
    sleeps = 0
    for step in range(steps):
        plan = scheduler.plan(step)
        torch.cuda.synchronize()
        running = None
        if sleep_every and step % sleep_every == 0:
            torch.cuda._sleep(int(per_ms * sleep_ms))
            running = torch.cuda.Event()
            running.record()
        engine.pace()
        torch.cuda.set_sync_debug_mode("error")
        try:
            engine.step(plan, graphs=True)
        finally:
            torch.cuda.set_sync_debug_mode("default")
        if running is not None:
            if running.query():
                raise AssertionError(f"step {step}: the host waited for the device while "
                                     f"issuing the step ({sleep_ms} ms spin finished)")
            sleeps += 1
        replays[plan.bucket] += 1
        checker.check(plan, step)
    return replays, sleeps


def run_timed(engine, scheduler, steps, graphs):
    """Steps per second of ``steps`` steps (graphs or eager), the host
    running up to Engine.RING steps ahead of the device, and the host
    seconds per step spent issuing the indexer (the replay, or the eager
    steps)."""
    torch = engine.torch
    for step in range(10):  # warm-up
        engine.pace()
        engine.step(scheduler.plan(step), graphs=graphs)
    torch.cuda.synchronize()
    engine.issue_seconds, engine.issued = 0.0, 0
    t = time.perf_counter()
    for step in range(steps):
        engine.pace()
        engine.step(scheduler.plan(step), graphs=graphs)
    torch.cuda.synchronize()
    return steps / (time.perf_counter() - t), engine.issue_seconds / engine.issued


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2, help="query rows per request (1 + drafts)")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--pooling", default="max", choices=["max", "mean", "top4"])
    parser.add_argument("--queries", default="bf16", choices=QUERIES,
                        help="the queries' format (fp8: e4m3, torch.float8_e4m3fn)")
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--max-batch", type=int, default=64)
    parser.add_argument("--seed", type=int, default=None, help="default: a fresh one")
    parser.add_argument("--paged", action="store_true",
                        help="state pages that follow the KV pages (docs/GPU-ABI.md, "
                             "\"Paged state\")")
    parser.add_argument("--check", action="store_true",
                        help="compare every step with eager steps and the numpy reference")
    parser.add_argument("--sleep-every", type=int, default=10, metavar="N",
                        help="with --check: issue every Nth step behind a 20 ms spinning "
                             "kernel, which must still run when the step is issued "
                             "(0: never; under compute-sanitizer the host is too slow)")
    args = parser.parse_args(argv)
    import torch
    if not torch.cuda.is_available():
        print("error: this example needs a CUDA device", file=sys.stderr)
        return 2
    for name in ("rows", "layers", "steps", "max_batch"):
        if getattr(args, name) <= 0:
            parser.error(f"--{name.replace('_', '-')} must be positive")
    if args.sleep_every < 0:
        parser.error("--sleep-every must be 0 or positive")
    seed = args.seed if args.seed is not None else int(np.random.SeedSequence().entropy % 2 ** 31)
    shape = Shape()
    buckets = buckets_up_to(args.max_batch)
    t = time.time()
    indexer = make_indexer(args.rows, args.layers, args.pooling, shape, buckets,
                           paged=args.paged, queries=args.queries)
    engine = Engine(indexer, args.layers, shape, buckets, seed, eager_state=args.check)
    engine.capture()
    engine.warm_up()
    print(f"seed {seed}: R = {args.rows}, {args.layers} layers, {args.pooling} pooling, "
          f"{args.queries} queries, "
          f"buckets {buckets}, {shape.slots} state slots of {shape.capacity} slots"
          f"{f' in {shape.state_pages} state pages' if args.paged else ''}; "
          f"{len(buckets)} programs (one per bucket, for every layer, sharing "
          f"{indexer.workspace().bytes / 2**20:.1f} MiB of scratch) loaded and "
          f"{len(buckets)} graphs "
          f"captured in {time.time() - t:.1f} s", flush=True)
    scheduler = Scheduler(shape, args.rows, buckets, seed, paged=args.paged)
    if args.check:
        checker = Checker(engine, args.pooling)
        t = time.time()
        replays, sleeps = run_checked(engine, scheduler, checker, args.steps,
                                      sleep_every=args.sleep_every)
        print(f"{args.steps} graph replays ({', '.join(f'{b}: {n}' for b, n in replays.items())}"
              f" per bucket), {checker.rows_checked} request rows, "
              f"{checker.sparse_rows} sparse row-layers, {scheduler.admissions} admissions, "
              f"{f'at most {scheduler.pages_peak} state pages in use, ' if args.paged else ''}"
              f"{scheduler.turns} new turns: top-K and sparsity of the graphs and of eager "
              f"steps equal the reference at every step; no step waited for the device "
              f"(sync debug mode 'error'; {sleeps} steps issued behind a spinning kernel) "
              f"[{time.time() - t:.0f} s]")
        return 0
    graphs, graph_issue = run_timed(engine, scheduler, args.steps, graphs=True)
    eager, eager_issue = run_timed(engine, scheduler, args.steps, graphs=False)
    print(f"steps per second: graphs {graphs:.0f}, eager {eager:.0f} ({graphs / eager:.2f}x); "
          f"host time issuing the indexer per step: graph replay "
          f"{graph_issue * 1e6:.0f} us, eager {eager_issue * 1e6:.0f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
