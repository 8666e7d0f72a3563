#!/usr/bin/env python3
"""A small PyTorch decode loop that calls the SPIN indexer per layer.

Two indexer layers, three requests, speculative decoding with two draft
tokens (three verifier rows per step): after "prefill" each request's state
is added (its first step is a dense warm-up), every verification step scores
each layer through SPIN, the sampled acceptance counts are committed, and
request 1 starts a new conversation turn half-way (its state is reset).

    python3 examples/torch_decode_loop.py [--device cpu]
"""

import argparse

import torch

import spin


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--steps", type=int, default=12)
    args = parser.parse_args()

    layers, heads, head_dim, page, topk, draft = 2, 8, 64, 64, 128, 2
    requests, pages_per_request = 3, 16
    generator = torch.Generator().manual_seed(0)
    indexer = spin.Indexer(heads=heads, head_dim=head_dim, block_size=page,
                           topk=topk, sparsity=0.5, explore=0.05,
                           rows=draft + 1, key_format="bf16", device=args.device)
    state = indexer.new_state(capacity_slots=pages_per_request * page,
                              layers=layers, max_requests=requests)

    # A paged key cache per layer, and each request's block table.
    caches = [torch.randn(requests * pages_per_request, page, head_dim,
                          generator=generator).to(torch.bfloat16)
              for _ in range(layers)]
    tables = torch.randperm(requests * pages_per_request, generator=generator,
                            dtype=torch.int32).reshape(requests, pages_per_request)
    ids = torch.arange(requests, dtype=torch.int64)
    lengths = torch.tensor([300, 520, 700], dtype=torch.int32)
    for request in ids.tolist():
        state.add(request)  # prefill done: the next step is a warm-up

    for step in range(args.steps):
        if step == args.steps // 2:
            state.reset(1)  # request 1 starts a new turn
        rows = lengths[:, None] + torch.arange(draft + 1, dtype=torch.int32)
        sparsities = []
        for layer in range(layers):
            q = torch.randn(requests, draft + 1, heads, head_dim,
                            generator=generator).to(torch.bfloat16)
            w = torch.rand(requests, draft + 1, heads, generator=generator) / heads
            top, sparsity = indexer(q, w, caches[layer], tables, rows, rows - 1,
                                    state, request_ids=ids, layer=layer,
                                    return_sparsity=True)
            assert top.shape == (requests, draft + 1, topk)
            sparsities.append(sparsity.mean().item())
        # Verification: accept 0..draft tokens per request, commit, advance.
        accepted = torch.randint(0, draft + 1, (requests,), generator=generator)
        for request, count in zip(ids.tolist(), accepted.tolist()):
            state.commit(request, count)
        lengths += (accepted + 1).to(torch.int32)
        print(f"step {step:2d}: realized sparsity per layer "
              + ", ".join(f"{s:.2f}" for s in sparsities)
              + f"; accepted {accepted.tolist()}; iterations "
              + f"{[state.iteration(r, 0) for r in ids.tolist()]}")


if __name__ == "__main__":
    main()
