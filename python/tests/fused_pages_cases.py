"""The GPU programs of test_fused_pages_cuda.py: fp8 key caches in the
serving engines' fused page layout (docs/GPU-ABI.md, "Fused fp8 key pages")
beside the same steps on separate keys and scales. Shared with
prebuild_cuda_cache.py, which compiles them into the cache directory for
the runtime-only build of the GPU machine."""

BATCH = 4
MAX_PAGES = 8

#: name -> Indexer options: dense steps of bf16 and fp8 queries (the
#: production shape with two MTP rows: wgmma scoring of 64 heads), and SPIN
#: steps with MTP commits on fp8 and bf16 queries.
CONFIGS = {
    "dense-bf16q": dict(heads=8, head_dim=64, block_size=16, page_size=16, topk=24,
                        dense=True),
    "dense-fp8q-r2": dict(heads=64, head_dim=128, block_size=64, page_size=64, topk=48,
                          rows=2, dense=True, query_format="fp8"),
    "spin-r2": dict(heads=8, head_dim=64, block_size=16, page_size=64, topk=32,
                    sparsity=0.5, explore=0.25, seed=3, rows=2, reset_input=True),
    "spin-fp8q-r3": dict(heads=16, head_dim=128, block_size=16, page_size=32, topk=40,
                         sparsity=0.5, explore=0.25, seed=9, rows=3, reset_input=True,
                         query_format="fp8", pooling="mean"),
}


def make_indexer(spin, name, fused, chips=None, cache_dir=None):
    """The Indexer of configuration ``name`` (fused pages or separate keys
    and scales), compiled (or found in the cache) now for batches of BATCH
    and tables MAX_PAGES wide."""
    return spin.Indexer(device="cuda", key_format="fp8", fused_fp8_pages=fused,
                        chips=chips, cache_dir=cache_dir, max_pages=MAX_PAGES,
                        batch_sizes=[BATCH], **CONFIGS[name])
