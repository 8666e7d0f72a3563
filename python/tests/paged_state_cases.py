"""The GPU programs of test_paged_state_cuda.py: one MTP step (two query
rows, fp8 keys, reset flags) on the paged state and on the compact one.
Shared with prebuild_cuda_cache.py, which compiles them into the cache
directory for the runtime-only build of the GPU machine."""

BATCH = 4
MAX_PAGES = 8
SHAPE = dict(heads=8, head_dim=64, block_size=16, page_size=64, topk=32, sparsity=0.5,
             explore=0.25, seed=5, rows=2, key_format="fp8", pooling="max")


# The commit's two rules: rows 1..a replayed at the next step (row 0 folded
# at its own), or row 0 alone (no replay kernel).
MTP_UPDATES = ("prefix", "row0")


def make_indexer(spin, paged, chips=None, cache_dir=None, mtp_update="prefix"):
    """The Indexer of the paged (or compact) programs, compiled (or found in
    the cache) now for batches of BATCH and tables MAX_PAGES wide."""
    return spin.Indexer(device="cuda", paged_state=paged, reset_input=True, chips=chips,
                        cache_dir=cache_dir, max_pages=MAX_PAGES, batch_sizes=[BATCH],
                        mtp_update=mtp_update, **SHAPE)
