#!/usr/bin/python3
"""Compile time and PTX size of multi-layer graphs (bench/multilayer_graph.py)
by layer count, as a markdown table:

    bench/compile_time.py [--compiler build/bin/spin-compile] [--layers 1,3,21,61]

Each graph is compiled once with spin-compile --sparsify="sparsity=0.4
explore=0.05" for sm_90a, sm_100a and sm_103a (wall time of the whole
command), first with identical layers, then with --mixed (fp8 and bf16 keys
alternating: two scoring kernels).
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import multilayer_graph  # noqa: E402

TARGETS = "sm_90a,sm_100a,sm_103a"
SPARSIFY = "sparsity=0.4 explore=0.05"


def measure(compiler, layers, mixed, work):
    graph = os.path.join(work, f"l{layers}{'m' if mixed else ''}.mlir")
    with open(graph, "w") as f:
        f.write(multilayer_graph.graph(layers, mixed))
    out = graph[:-5]
    start = time.monotonic()
    subprocess.run([compiler, graph, f"--sparsify={SPARSIFY}",
                    f"--target={TARGETS}", "-o", out],
                   check=True, stdout=subprocess.DEVNULL)
    seconds = time.monotonic() - start
    ptx = {name: os.path.getsize(os.path.join(out, name))
           for name in os.listdir(out) if name.endswith(".ptx")}
    with open(os.path.join(out, "sm_90a.ptx")) as f:
        entries = sum(1 for line in f if ".entry " in line)
    return seconds, sum(ptx.values()), entries


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compiler",
                        default=os.path.join(ROOT, "build", "bin", "spin-compile"))
    parser.add_argument("--layers", default="1,3,21,61",
                        help="comma-separated layer counts")
    args = parser.parse_args(argv)
    counts = [int(n) for n in args.layers.split(",") if n]
    print("| layers | keys | spin-compile s | PTX bytes (3 chips) | vs 1 layer | "
          "kernels per chip |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as work:
        base = None
        for mixed in (False, True):
            for n in counts:
                if mixed and n == 1:
                    continue
                seconds, size, entries = measure(args.compiler, n, mixed, work)
                if base is None:
                    base = size
                keys = "fp8 / bf16 alternating" if mixed else "fp8"
                print(f"| {n} | {keys} | {seconds:.1f} | {size} | "
                      f"{size / base:.3f}x | {entries} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
