#!/usr/bin/env python3
"""Compiles the GPU programs of python/tests/test_indexer_cuda.py, of
examples/torch_decode_loop.py and examples/multi_rank.py --device cuda
(python/tests/test_multi_rank.py) and of spin-replay --device cuda
(python/tests/test_replay.py, with the CPU replay's report to compare with),
the device-batch programs of test_device_batches_cuda.py and those of
examples/serving_loop.py --check into a cache directory.

Run on a machine with the compiler (no GPU needed); carry the directory to
the GPU machine, whose runtime-only build cannot compile, and point
SPIN_CACHE_DIR at it there (bench/run_gpu_check.sh does):

    SPIN_BUILD_DIR=build /usr/bin/python3 python/tests/prebuild_cuda_cache.py \\
        --out cuda-cache --chips sm_90a

An existing directory is updated: current programs are kept, missing,
corrupt or stale ones (another compiler version) are compiled again. The
programs are sized for 132 SMs (spin.Indexer's default without a GPU), which
is what an Indexer on an H200 looks up. At the end every entry's checksums
are verified (``python3 -m spin.cache verify``).

For a deployment's own programs use ``python3 -m spin.cache prebuild``
(README.md, "The program cache"); this script builds the fixed set that
spin's GPU tests and examples use.
"""

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
# The spin package: $SPIN_BUILD_DIR/python, else whatever Python finds (a
# PYTHONPATH, the .pth of scripts/dev), else build/python.
if os.environ.get("SPIN_BUILD_DIR"):
    sys.path.insert(0, os.path.join(os.environ["SPIN_BUILD_DIR"], "python"))
try:
    import spin
except ImportError:
    sys.path.insert(0, os.path.join(ROOT, "build", "python"))
    import spin
from cuda_indexer_cases import CASES, load_example, make_indexer  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="the cache directory to fill")
    parser.add_argument("--chips", default="sm_90a",
                        help="comma-separated chips (sm_90a, sm_100a, sm_103a)")
    args = parser.parse_args(argv)
    if not spin.has_compiler:
        print("error: this spin was built without the compiler: run this where "
              "it was built with -DSPIN_ENABLE_COMPILER=ON", file=sys.stderr)
        return 1
    chips = [c for c in args.chips.split(",") if c]
    out = os.path.abspath(args.out)
    t0 = time.time()
    indexers = []
    for name in CASES:
        t = time.time()
        indexers.append(make_indexer(spin, name, chips=chips, cache_dir=out))
        print(f"{name}: {time.time() - t:.1f} s", flush=True)
    t = time.time()
    for draft in (0, 2):  # one token per step, and MTP (the default)
        load_example().make_indexer("cuda", draft, chips=chips, cache_dir=out)
    print(f"examples/torch_decode_loop.py --device cuda: {time.time() - t:.1f} s", flush=True)
    t = time.time()
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    import multi_rank
    for mode in ("tp", "dp"):
        multi_rank.make_indexer(mode, "cuda", chips=chips, cache_dir=out)
    # test_multi_rank.py's skewed tp run: rank 1 explores with seed 8.
    multi_rank.make_indexer("tp", "cuda", seed=8, chips=chips, cache_dir=out)
    print(f"examples/multi_rank.py --device cuda: {time.time() - t:.1f} s", flush=True)
    # spin-replay --device cuda (test_replay.py): its programs, and the CPU
    # replay's report that the GPU run is compared with.
    t = time.time()
    import tempfile
    # replay/traces from the source tree (the build holds a configure-time copy).
    sys.path.insert(0, os.path.join(ROOT, "python", "spin"))
    import replay
    import traces
    import cuda_replay_cases as rc
    with tempfile.TemporaryDirectory() as tmp:
        for case in rc.CASES:
            trace_dir = rc.make_trace(traces, os.path.join(tmp, case), case)
            replay.prebuild_cuda(trace_dir, rc.run_configs(replay, case), chips, out,
                                 seed=rc.SEED)
            rc.write_cpu_report(replay, trace_dir, out, case)
    print(f"spin-replay --device cuda: {time.time() - t:.1f} s", flush=True)
    # Device batches (test_device_batches_cuda.py).
    t = time.time()
    import device_batch_cases as db
    for name in db.CASES:
        for layer in db.programs(name):
            db.artifact(spin, name, layer, chips, cache_dir=out)
    print(f"device batches: {time.time() - t:.1f} s", flush=True)
    # examples/serving_loop.py --check (test_serving_loop_cuda.py).
    t = time.time()
    import serving_loop
    for paged, runs in ((False, serving_loop.CHECKED), (True, serving_loop.CHECKED_PAGED)):
        for rows, layers, pooling, queries in runs:
            serving_loop.make_indexer(rows, layers, pooling, chips=chips, cache_dir=out,
                                      paged=paged, queries=queries)
    print(f"examples/serving_loop.py: {time.time() - t:.1f} s", flush=True)
    # Paged state against the compact layout (test_paged_state_cuda.py).
    import paged_state_cases
    for paged in (True, False):
        for update in paged_state_cases.MTP_UPDATES:
            paged_state_cases.make_indexer(spin, paged, chips=chips, cache_dir=out,
                                           mtp_update=update)
    # Fused fp8 key pages against separate keys and scales
    # (test_fused_pages_cuda.py).
    import fused_pages_cases
    for name in fused_pages_cases.CONFIGS:
        for fused in (True, False):
            fused_pages_cases.make_indexer(spin, name, fused, chips=chips, cache_dir=out)
    from spin import cache
    # spin.compile(target="cuda") of a multi-layer graph on the runtime-only
    # build (test_indexer_cuda.py), sized for the H200's 132 SMs.
    from cuda_indexer_cases import multilayer_graph
    text, function, options = multilayer_graph()
    cache.graph_artifact(text, function, options, chips, 132, cache_dir=out)
    entries = [e for e in cache.entries(out, verify=True) if e["kind"] != "cpu"]
    bad = [e for e in entries if e["problem"]]
    for e in bad:
        print(f"error: {e['name']}: {e['problem']}", file=sys.stderr)
    print(f"{len(entries)} programs in {out} for {', '.join(chips)} "
          f"({time.time() - t0:.0f} s); on the GPU machine: SPIN_CACHE_DIR={out}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
