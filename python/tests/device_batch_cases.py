"""The GPU programs of test_device_batches_cuda.py: indexer steps compiled
with per-row reset flags (`reset-input`), stepped as device batches
(docs/GPU-ABI.md, "Device batches").

Shared with prebuild_cuda_cache.py, which compiles them into the cache
directory on a machine with the compiler, for a GPU machine with the
runtime-only build.
"""

import os

# name -> graph sizes, pipeline options, the compiled batch and the state
# layers (one program per layer; one for all with layer_argument).
CASES = {
    # One row a step: the prediction cache, its next-step prediction and
    # exploration; the predict kernel applies the reset flags.
    "spin-bf16": dict(
        graph=dict(heads=8, head_dim=64, rows=1, topk=32, page_size=64,
                   max_pages=8, key_format="bf16"),
        options={"sparsity": 0.5, "block-size": 16, "explore": 0.25, "seed": 7,
                 "pooling": "max"},
        batch=4, layers=1),
    # MTP (2 rows) with max pooling: the predict kernel applies the reset
    # flags, after commits that leave the rows it resets alone.
    "mtp-bf16-max": dict(
        graph=dict(heads=8, head_dim=64, rows=2, topk=16, page_size=64,
                   max_pages=8, key_format="bf16"),
        options={"sparsity": 0.5, "block-size": 16, "explore": 0.1, "seed": 3,
                 "pooling": "max"},
        batch=3, layers=1),
    # MTP (3 rows): commits of the accepted counts on the device, the union
    # mask, two layers stepped by two programs; mean pooling (no predict
    # kernel), so a reset kernel runs first.
    "mtp-fp8-two-layers": dict(
        graph=dict(heads=16, head_dim=64, rows=3, topk=32, page_size=64,
                   max_pages=10, key_format="fp8"),
        options={"sparsity": 0.6, "block-size": 32, "explore": 0.25,
                 "seed": 2 ** 63 + 31, "pooling": "mean"},
        batch=4, layers=2),
}
# The same steps with one program for both layers: the layer is a run-time
# argument (layer-argument), which picks the state and the exploration
# hash's layer.
CASES["mtp-fp8-shared-program"] = dict(CASES["mtp-fp8-two-layers"], layer_argument=True)

SM_COUNT = 132  # the H200's, as spin.Indexer's default


#: Where prebuild_cuda_cache.py leaves the graphs in the cache directory:
#: the runtime-only build cannot build them, and their text keys the cache.
GRAPHS = "device-batch-graphs"


def graph_text(spin, name, layer, cache_dir=None):
    """The MLIR of layer ``layer``'s step of case ``name``: built where spin
    has the compiler (and kept in ``cache_dir`` for the runtime-only build),
    read from there where it does not."""
    from spin import cache
    root = cache.cache_root(cache_dir)
    path = os.path.join(root, GRAPHS, f"{name}-{layer}.mlir") if root else None
    if not spin.has_compiler:
        if path is None or not os.path.exists(path):
            raise RuntimeError(f"no graph of device-batch case {name} layer {layer} "
                               f"in {root}: run python/tests/prebuild_cuda_cache.py")
        with open(path) as f:
            return f.read()
    g = CASES[name]["graph"]
    text = spin._spin.build_indexer_graph(
        heads=g["heads"], head_dim=g["head_dim"], rows=g["rows"], topk=g["topk"],
        page_size=g["page_size"], max_pages=g["max_pages"],
        key_format=g["key_format"], layer=int(layer),
        batch=CASES[name]["batch"], query_format="")
    if path is not None:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path + ".tmp", "w") as f:
            f.write(text)
        os.replace(path + ".tmp", path)
    return text


def options(name):
    """The pipeline options of case ``name``: its own, with reset flags."""
    return dict(CASES[name]["options"], **{"reset-input": True})


def programs(name):
    """The layers whose programs the case compiles: every layer, or layer 0
    alone where the layer is a run-time argument."""
    case = CASES[name]
    return [0] if case.get("layer_argument") else list(range(case["layers"]))


def artifact(spin, name, layer, chips=("sm_90a",), cache_dir=None):
    """The cache entry of layer ``layer``'s program (compiled where spin has
    the compiler, looked up where it does not); with a run-time layer, the
    one program of every layer."""
    from spin import cache
    shared = bool(CASES[name].get("layer_argument"))
    layer = 0 if shared else layer
    return cache.graph_artifact(graph_text(spin, name, layer, cache_dir),
                                spin._INDEXER_FUNCTION, options(name), chips,
                                SM_COUNT, cache_dir=cache_dir, layer_argument=shared)
