#!/usr/bin/env python3
"""A small PyTorch decode loop that calls the SPIN indexer per layer.

Two indexer layers, three requests: after "prefill" each request's state is
added (its first step is a dense warm-up), every decode step scores each
layer through SPIN, and request 1 starts a new conversation turn half-way
(its state is reset). With draft tokens (speculative decoding, MTP: d + 1
query rows per request) the sampled acceptance counts are committed after
each verification step. The loop is the same on both devices; it verifies
two draft tokens per step by default (--draft 0 decodes one token per step).

    python3 examples/torch_decode_loop.py [--device cpu|cuda] [--draft N] [--steps N]

On CUDA the indexer's GPU programs (one per layer for this batch and
block-table width) come from the disk cache ($SPIN_CACHE_DIR): a build with
the compiler fills it on first use; a runtime-only build on a GPU machine
needs it filled beforehand on a machine with the compiler
(python/tests/prebuild_cuda_cache.py --out DIR, then SPIN_CACHE_DIR=DIR).
"""

import argparse

import torch

import spin

LAYERS, HEADS, HEAD_DIM, PAGE, TOPK = 2, 8, 64, 64, 128
REQUESTS, PAGES_PER_REQUEST = 3, 16


def make_indexer(device, draft, chips=None, cache_dir=None):
    """The loop's indexer. On CUDA the programs of both layers are compiled
    (or found in the cache) now, for ``chips`` (default: the device's)."""
    ahead = {}
    if device != "cpu":
        ahead = dict(chips=chips, cache_dir=cache_dir, max_pages=PAGES_PER_REQUEST,
                     batch_sizes=[REQUESTS], layers=LAYERS)
    return spin.Indexer(heads=HEADS, head_dim=HEAD_DIM, block_size=PAGE,
                        topk=TOPK, sparsity=0.5, explore=0.05, rows=draft + 1,
                        key_format="bf16", device=device, **ahead)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--draft", type=int, default=None,
                        help="draft tokens per step (default: 2)")
    parser.add_argument("--steps", type=int, default=12)
    args = parser.parse_args()
    device = args.device
    draft = args.draft if args.draft is not None else 2

    generator = torch.Generator().manual_seed(0)
    indexer = make_indexer(device, draft)
    state = indexer.new_state(capacity_slots=PAGES_PER_REQUEST * PAGE,
                              layers=LAYERS, max_requests=REQUESTS)

    # A paged key cache per layer, and each request's block table.
    caches = [torch.randn(REQUESTS * PAGES_PER_REQUEST, PAGE, HEAD_DIM,
                          generator=generator).to(torch.bfloat16).to(device)
              for _ in range(LAYERS)]
    tables = torch.randperm(REQUESTS * PAGES_PER_REQUEST, generator=generator,
                            dtype=torch.int32).reshape(REQUESTS, PAGES_PER_REQUEST)
    tables = tables.to(device)
    ids = torch.arange(REQUESTS, dtype=torch.int64)   # the host's request ids
    lengths = torch.tensor([300, 520, 700], dtype=torch.int32)
    for request in ids.tolist():
        state.add(request)  # prefill done: the next step is a warm-up

    for step in range(args.steps):
        if step == args.steps // 2:
            state.reset(1)  # request 1 starts a new turn
        rows = (lengths[:, None] + torch.arange(draft + 1, dtype=torch.int32)).to(device)
        sparsities = []
        for layer in range(LAYERS):
            q = torch.randn(REQUESTS, draft + 1, HEADS, HEAD_DIM,
                            generator=generator).to(torch.bfloat16).to(device)
            w = (torch.rand(REQUESTS, draft + 1, HEADS, generator=generator)
                 / HEADS).to(device)
            top, sparsity = indexer(q, w, caches[layer], tables, rows, rows - 1,
                                    state, request_ids=ids, layer=layer,
                                    return_sparsity=True)
            assert top.shape == (REQUESTS, draft + 1, TOPK)
            sparsities.append(sparsity.mean().item())
        # Verification: accept 0..draft tokens per request, commit, advance.
        accepted = torch.randint(0, draft + 1, (REQUESTS,), generator=generator)
        if draft:
            for request, count in zip(ids.tolist(), accepted.tolist()):
                state.commit(request, count)
        lengths += (accepted + 1).to(torch.int32)
        print(f"step {step:2d}: realized sparsity per layer "
              + ", ".join(f"{s:.2f}" for s in sparsities)
              + (f"; accepted {accepted.tolist()}" if draft else "")
              + f"; iterations {[state.iteration(r, 0) for r in ids.tolist()]}")
    indexer.check()  # CUDA: raises if a step found bad device data


if __name__ == "__main__":
    main()
