#!/usr/bin/python3
"""Writes an indexer graph of N DeepSeek-V4-Flash-like layers of one decode
step (the shapes of examples/deepseek-v4-flash-multilayer.mlir: 8 requests,
R = 4 rows, H = 64, Dh = 128, top-K = 512, 64-slot pages, block tables of
1024 pages), for measuring compile time and PTX size by layer count:

    bench/multilayer_graph.py 61 > l61.mlir
    build/bin/spin-compile l61.mlir --sparsify="sparsity=0.4 explore=0.05" \\
        --target=sm_90a,sm_100a,sm_103a -o out/

Every layer has its own queries, head weights and key cache; the block
table and lengths are shared. --mixed alternates fp8 (with scales) and bf16
keys, so that the layers need two kinds of scoring kernels.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_artifacts  # noqa: E402  (the graph builders of the GPU check)


def graph(layers: int, mixed: bool) -> str:
    """The graph of `layers` layers: fp8 keys (with scales) and bf16
    queries, or with `mixed` fp8 and bf16 keys alternating (layer 0 fp8)."""
    formats = ["fp8" if not mixed or i % 2 == 0 else "bf16" for i in range(layers)]
    header = (f"// {layers} indexer layers (bench/multilayer_graph.py"
              f"{' --mixed' if mixed else ''}).")
    return gpu_artifacts.multilayer_indexer_graph(
        "indexer_layers", header, layers=layers, batch=8, rows=4, heads=64,
        head_dim=128, page_size=64, table_pages=1024, topk=512, key_format=formats)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("layers", type=int, help="number of layers (>= 1)")
    parser.add_argument("--mixed", action="store_true",
                        help="alternate fp8 and bf16 keys")
    args = parser.parse_args(argv)
    if args.layers < 1:
        parser.error(f"layers must be at least 1, got {args.layers}")
    sys.stdout.write(graph(args.layers, args.mixed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
