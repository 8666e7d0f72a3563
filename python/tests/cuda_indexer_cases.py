"""The Indexer(device="cuda") configurations of test_indexer_cuda.py.

Shared with prebuild_cuda_cache.py, which compiles their GPU programs (and
the ones of examples/torch_decode_loop.py --device cuda) into a cache
directory on a machine with the compiler, for a GPU machine with the
runtime-only build. Every configuration fits the GPU kernels (heads a
multiple of 8; head_dim a multiple of 32, of 64 for fp8 keys).
"""

import importlib.util
import os

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
EXAMPLE = os.path.join(ROOT, "examples", "torch_decode_loop.py")

# name -> Indexer options, the batch, the block-table width (pages) and the
# number of state layers of the test.
CASES = {
    "bf16-max": dict(
        indexer=dict(heads=8, head_dim=64, page_size=64, block_size=16, topk=32,
                     sparsity=0.5, pooling="max", key_format="bf16"),
        batch=3, max_pages=8, layers=1),
    "bf16-top4-explore": dict(
        indexer=dict(heads=16, head_dim=64, page_size=64, block_size=16, topk=16,
                     sparsity=0.7, explore=0.25, seed=2 ** 63 + 977, pooling="top4",
                     key_format="bf16"),
        batch=3, max_pages=8, layers=1),
    "fp8-mean": dict(
        indexer=dict(heads=8, head_dim=64, page_size=64, block_size=64, topk=64,
                     sparsity=0.5, pooling="mean", key_format="fp8"),
        batch=3, max_pages=12, layers=1),
    "f16-max-two-layers": dict(
        indexer=dict(heads=8, head_dim=32, page_size=32, block_size=32, topk=16,
                     sparsity=0.5, explore=0.1, seed=11, key_format="f16"),
        batch=2, max_pages=16, layers=2),
    "dense-bf16": dict(
        indexer=dict(heads=8, head_dim=64, page_size=64, block_size=64, topk=32,
                     key_format="bf16", dense=True),
        batch=3, max_pages=8, layers=1),
    # MTP (SPIN_SPEC §4): d + 1 query rows, commits of 0..d accepted drafts.
    "mtp-bf16-union-prefix": dict(
        indexer=dict(heads=8, head_dim=64, page_size=64, block_size=16, topk=32,
                     sparsity=0.5, pooling="max", key_format="bf16", rows=3),
        batch=3, max_pages=8, layers=1),
    "mtp-fp8-explore-two-layers": dict(
        indexer=dict(heads=16, head_dim=64, page_size=64, block_size=32, topk=32,
                     sparsity=0.6, explore=0.25, seed=2 ** 63 + 31, pooling="mean",
                     key_format="fp8", rows=4),
        batch=3, max_pages=10, layers=2),
    "mtp-bf16-row0": dict(
        indexer=dict(heads=8, head_dim=64, page_size=64, block_size=64, topk=16,
                     sparsity=0.5, explore=0.1, seed=5, pooling="top4",
                     key_format="bf16", rows=2, mtp_mask="row0", mtp_update="row0"),
        batch=2, max_pages=8, layers=1),
    "mtp-nonint-f16": dict(
        indexer=dict(heads=8, head_dim=32, page_size=32, block_size=32, topk=32,
                     sparsity=0.5, pooling="max", key_format="f16", rows=3),
        batch=2, max_pages=12, layers=1),
    "nonint-bf16": dict(
        indexer=dict(heads=8, head_dim=64, page_size=64, block_size=64, topk=64,
                     sparsity=0.5, pooling="max", key_format="bf16"),
        batch=2, max_pages=8, layers=1),
    # Rows of up to 20K slots: more entries than the top-K's candidate
    # buffer (16384 a row) can share one threshold bin.
    "dense-long-fp8": dict(
        indexer=dict(heads=8, head_dim=64, page_size=64, block_size=64, topk=512,
                     key_format="fp8", dense=True),
        batch=2, max_pages=320, layers=1),
}


def make_indexer(spin, name, **extra):
    """The Indexer of case ``name`` on cuda; its programs are compiled (or
    looked up in the cache) now."""
    case = CASES[name]
    return spin.Indexer(device="cuda", max_pages=case["max_pages"],
                        batch_sizes=[case["batch"]], layers=case["layers"],
                        **case["indexer"], **extra)


def load_example():
    """examples/torch_decode_loop.py as a module (its make_indexer)."""
    spec = importlib.util.spec_from_file_location("torch_decode_loop", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def multilayer_graph():
    """(mlir text, function, options) of a 3-layer graph
    (bench/multilayer_graph.py) that spin.compile(target="cuda") loads from
    the cache on the runtime-only build: its layers share their kernels."""
    spec = importlib.util.spec_from_file_location(
        "multilayer_graph", os.path.join(ROOT, "bench", "multilayer_graph.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.graph(3, False), "indexer_layers", {"sparsity": 0.5, "explore": 0.05}
