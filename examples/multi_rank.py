#!/usr/bin/env python3
"""SPIN on several ranks: tensor-parallel replicas agree bit for bit, and
data-parallel ranks serve their own requests independently.

    python3 examples/multi_rank.py --mode tp [--device cpu|cuda] [--ranks 2] [--one-gpu]
    python3 examples/multi_rank.py --mode dp [--device cpu|cuda] [--ranks 2] [--one-gpu]

The ranks are processes started here (torch.multiprocessing), joined in a
process group: gloo on the CPU, NCCL on CUDA (one GPU per rank; NVLink
multicast stays off). --one-gpu puts every rank on cuda:0 and joins them
with gloo instead (NCCL refuses two ranks on one device), the compared
tensors going through host memory: the ranks' processes, contexts, programs
and states are as separate as on several GPUs, only the device is shared.

tp: every rank runs the same SPIN steps on the same inputs (a dense warm-up,
    decoding with two draft tokens and commits of drafted counts, a new turn
    for one request, exploration on, two layers), as a tensor-parallel
    engine replicates the indexer. After every step the ranks all-gather
    their top-K, sparsity and every request's state (V, D and the iteration
    of every layer) and compare them bit for bit: the sparse attention that
    follows is only consistent if every rank selected the same KV slots.
dp: each rank runs its own requests (its own inputs and state); on CUDA the
    step is captured once in a CUDA graph and replayed with advancing
    lengths. Every top-K is compared with the numpy reference
    (test/reference/spin_reference.py), exactly: the inputs are small
    integers, so that every product and sum is exact.

The exit status is 0 only if every rank passed.
"""

import argparse
import os
import sys
import traceback

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

HEADS, HEAD_DIM, PAGE, TOPK, LAYERS = 8, 64, 16, 32, 2
REQUESTS, PAGES_PER_REQUEST = 3, 12
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _spin():
    import spin
    return spin


def _integers(generator, shape, low=-4, high=5):
    return torch.randint(low, high, shape, generator=generator).to(torch.float32)


class Inputs:
    """A paged bf16 key cache per layer and each request's block table, from
    `seed`: small integers, exact in bf16."""

    def __init__(self, seed, device):
        self.generator = torch.Generator().manual_seed(seed)
        self.device = device
        pages = REQUESTS * PAGES_PER_REQUEST
        self.keys = [_integers(self.generator, (pages, PAGE, HEAD_DIM))
                     for _ in range(LAYERS)]
        self.tables = torch.randperm(pages, generator=self.generator,
                                     dtype=torch.int32).reshape(REQUESTS, PAGES_PER_REQUEST)

    def step(self, rows):
        """q, w of one layer's step."""
        q = _integers(self.generator, (REQUESTS, rows, HEADS, HEAD_DIM))
        w = torch.randint(-4, 5, (REQUESTS, rows, HEADS), generator=self.generator) / 4.0
        return q, w.to(torch.float32)

    def on_device(self, x, bf16=False):
        x = x.to(torch.bfloat16) if bf16 else x
        return x.to(self.device).contiguous()


def make_indexer(mode, device, seed=7, chips=None, cache_dir=None):
    """The indexer of `mode`: tp verifies two draft tokens per step over
    two layers, dp decodes one token per step of one layer. On CUDA its
    programs are compiled now (or found in the cache, $SPIN_CACHE_DIR or
    `cache_dir`), for `chips` (default: the device's);
    python/tests/prebuild_cuda_cache.py fills a cache with them for machines
    without the compiler."""
    spin = _spin()
    rows, layers = (3, LAYERS) if mode == "tp" else (1, 1)
    ahead = {}
    if device != "cpu":
        ahead = dict(max_pages=PAGES_PER_REQUEST, batch_sizes=[REQUESTS], layers=layers,
                     chips=chips, cache_dir=cache_dir)
    return spin.Indexer(heads=HEADS, head_dim=HEAD_DIM, block_size=PAGE, topk=TOPK,
                        sparsity=0.5, explore=0.25, seed=seed, rows=rows,
                        key_format="bf16", device=device.split(":")[0], **ahead)


def _gather_equal(tensor, what, rank, world):
    """All-gathers `tensor` and raises unless every rank's is bit-identical
    to rank 0's."""
    t = tensor.contiguous()
    if t.is_cuda and dist.get_backend() == "gloo":
        t = t.cpu()               # gloo gathers host tensors only
    if t.dtype == torch.float32:
        t = t.view(torch.int32)   # compare bits: -0.0 and NaN payloads too
    parts = [torch.empty_like(t) for _ in range(world)]
    dist.all_gather(parts, t)
    for r in range(1, world):
        if not torch.equal(parts[0], parts[r]):
            diff = int((parts[0] != parts[r]).sum())
            raise AssertionError(f"{what}: rank {r} differs from rank 0 in {diff} "
                                 f"element(s)")


def run_tp(rank, world, device, steps, skew=0):
    """`skew` (tests only) gives rank r the exploration seed 7 + r * skew:
    the ranks' selections then differ, which the comparison must catch."""
    draft = 2
    data = Inputs(1234, device)     # the same inputs on every rank
    indexer = make_indexer("tp", device, seed=7 + rank * skew)
    state = indexer.new_state(capacity_slots=PAGES_PER_REQUEST * PAGE, layers=LAYERS,
                              max_requests=REQUESTS)
    ids = list(range(100, 100 + REQUESTS))
    for rid in ids:
        state.add(rid)
    id_tensor = torch.tensor(ids, dtype=torch.int64)   # host ids
    keys = [data.on_device(k, bf16=True) for k in data.keys]
    table = data.on_device(data.tables)
    lengths = torch.tensor([70, 120, 150], dtype=torch.int32)
    commit = torch.Generator().manual_seed(99)
    for step in range(steps):
        if step == steps // 2:
            state.reset(ids[1])           # a new turn: the next step is dense
        n = lengths[:, None] + torch.arange(draft + 1, dtype=torch.int32)
        for layer in range(LAYERS):
            q, w = data.step(draft + 1)
            top, sparsity = indexer(data.on_device(q, bf16=True), data.on_device(w),
                                    keys[layer], table, data.on_device(n),
                                    data.on_device(n - 1), state, request_ids=id_tensor,
                                    layer=layer, return_sparsity=True)
            where = f"step {step}, layer {layer}"
            _gather_equal(top, f"{where}: top-K", rank, world)
            _gather_equal(sparsity, f"{where}: sparsity", rank, world)
        for rid in ids:
            for layer in range(LAYERS):
                v, d = state.ema(rid, layer)
                it = state.iteration(rid, layer)
                snapshot = torch.cat([torch.from_numpy(v), torch.from_numpy(d),
                                      torch.tensor([float(it)])]).to(device)
                _gather_equal(snapshot, f"step {step}: state of request {rid}, layer {layer}",
                              rank, world)
        accepted = torch.randint(0, draft + 1, (REQUESTS,), generator=commit)
        for rid, a in zip(ids, accepted.tolist()):
            state.commit(rid, a)
        lengths += (accepted + 1).to(torch.int32)
    indexer.check()
    return f"rank {rank}: {steps} steps x {LAYERS} layers, top-K, sparsity and state " \
           f"identical on all {world} ranks"


def run_dp(rank, world, device, steps, skew=0):
    """`skew` (tests only) makes the reference use sparsity 0.5 + skew / 10:
    its selections then differ, which the comparison must catch."""
    sys.path.insert(0, os.path.join(ROOT, "test", "reference"))
    import spin_reference as ref
    data = Inputs(5000 + rank, device)  # this rank's own requests and inputs
    indexer = make_indexer("dp", device)
    capacity = PAGES_PER_REQUEST * PAGE
    state = indexer.new_state(capacity_slots=capacity, layers=1, max_requests=REQUESTS)
    ids = [1000 * (rank + 1) + i for i in range(REQUESTS)]
    for rid in ids:
        state.add(rid)
    id_tensor = torch.tensor(ids, dtype=torch.int64)   # host ids
    states = [ref.LayerState(capacity, PAGE) for _ in ids]
    keys = data.on_device(data.keys[0], bf16=True)
    table = data.on_device(data.tables)
    q, w = data.step(1)
    q_dev, w_dev = data.on_device(q, bf16=True), data.on_device(w)
    n = torch.tensor([[60], [130], [170]], dtype=torch.int32)
    lengths, positions = data.on_device(n), data.on_device(n - 1)
    run = lambda: indexer(q_dev, w_dev, keys, table, lengths, positions, state,  # noqa: E731
                          request_ids=id_tensor)
    graph = None
    mismatches = 0
    for step in range(steps):
        if device == "cpu" or step < 2:
            top = run()                   # eager (the first CUDA steps warm up)
        else:
            if graph is None:
                indexer.program(0, PAGES_PER_REQUEST, REQUESTS).reserve_captured_steps(1)
                out = torch.empty(REQUESTS, 1, TOPK, dtype=torch.int32, device=device)
                torch.cuda.synchronize()
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    out.copy_(run())
            graph.replay()
            top = out
        want, _, _, _ = ref.spin_step(states, ids, 0, q.numpy(), w.numpy(),
                                      data.keys[0].numpy(), None, data.tables.numpy(),
                                      n.numpy(), (n - 1).numpy(), k=TOPK, bs=PAGE,
                                      sparsity=0.5 + skew / 10, explore=0.25, seed=7)
        got = top.cpu().numpy()
        if not np.array_equal(got, want):
            mismatches += 1
            print(f"rank {rank}, step {step}: top-K differs from the reference at "
                  f"{int((got != want).sum())} entries", flush=True)
        n += 1                            # every request decodes one token
        lengths.copy_(n.to(device))
        positions.copy_((n - 1).to(device))
    indexer.check()
    on = "cpu" if dist.get_backend() == "gloo" else device
    total = torch.tensor([mismatches], dtype=torch.int64, device=on)
    dist.all_reduce(total)
    if int(total.item()):
        raise AssertionError(f"{int(total.item())} step(s) differed from the reference "
                             f"over all ranks")
    how = "CUDA-graph replays" if device != "cpu" else "eager steps"
    return f"rank {rank}: {steps} steps ({how}) of requests {ids} equal to the reference"


def _worker(rank, world, mode, device, steps, port, results, skew, one_gpu):
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    try:
        if device == "cuda":
            ordinal = 0 if one_gpu else rank
            torch.cuda.set_device(ordinal)
            dev = f"cuda:{ordinal}"
        else:
            dev = "cpu"
        dist.init_process_group("nccl" if device == "cuda" and not one_gpu else "gloo",
                                init_method=f"tcp://127.0.0.1:{port}",
                                rank=rank, world_size=world)
        message = (run_tp if mode == "tp" else run_dp)(rank, world, dev, steps, skew)
        dist.barrier()
        results.put((rank, True, message))
    except Exception:  # noqa: BLE001 - reported by the parent
        results.put((rank, False, traceback.format_exc()))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def launch(mode, device="cpu", ranks=2, steps=8, port=None, skew=0, one_gpu=False):
    """Runs `mode` on `ranks` processes; returns [(rank, ok, message)].
    `skew` breaks what the mode checks (tests only: run_tp, run_dp);
    `one_gpu` puts every CUDA rank on device 0 (gloo between them)."""
    if one_gpu and device != "cuda":
        raise ValueError("one_gpu applies to device 'cuda' only, not " + repr(device))
    needed = 1 if one_gpu else ranks
    if device == "cuda" and torch.cuda.device_count() < needed:
        raise RuntimeError(f"--device cuda needs {needed} GPU(s), this machine has "
                           f"{torch.cuda.device_count()}")
    port = port or 29500 + os.getpid() % 1000
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    procs = [ctx.Process(target=_worker,
                         args=(r, ranks, mode, device, steps, port, results, skew,
                               one_gpu))
             for r in range(ranks)]
    for p in procs:
        p.start()
    out = [results.get(timeout=600) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    return sorted(out)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=["tp", "dp"], required=True)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--one-gpu", action="store_true",
                        help="every rank on cuda:0, gloo between them (with --device cuda)")
    args = parser.parse_args()
    if args.one_gpu and args.device != "cuda":
        parser.error("--one-gpu needs --device cuda")
    results = launch(args.mode, args.device, args.ranks, args.steps, one_gpu=args.one_gpu)
    for rank, ok, message in results:
        print(("" if ok else f"rank {rank} FAILED:\n") + message)
    sys.exit(0 if all(ok for _, ok, _ in results) else 1)


if __name__ == "__main__":
    main()
