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
import sys


def layer_types(i: int, mixed: bool):
    fp8 = not mixed or i % 2 == 0
    keys = "tensor<?x64x128xf8E4M3FN>" if fp8 else "tensor<?x64x128xbf16>"
    return keys, fp8


def graph(layers: int, mixed: bool) -> str:
    q = "tensor<8x4x64x128xbf16>"
    w = "tensor<8x4x64xf32>"
    scales = "tensor<?x64xf32>"
    table = "tensor<8x1024xi32>"
    lengths = "tensor<8x4xi32>"
    scores = "tensor<8x4x65536xf32>"
    topk = "tensor<8x4x512xi32>"
    args, body = [], []
    for i in range(layers):
        keys, fp8 = layer_types(i, mixed)
        args += [f"%q{i}: {q}", f"%w{i}: {w}", f"%k{i}: {keys}"]
        scale = ""
        if fp8:
            args.append(f"%s{i}: {scales}")
            scale = f" scales(%s{i} : {scales})"
        body.append(
            f"  %z{i} = spin.dense_indexer q(%q{i} : {q}) w(%w{i} : {w}) "
            f"keys(%k{i} : {keys}){scale} block_table(%block_table : {table}) "
            f"lengths(%lengths : {lengths}) -> {scores}\n"
            f"  %t{i} = spin.topk %z{i} lengths(%lengths : {lengths}) "
            f"{{k = 512 : i64}} : {scores} -> {topk}")
    args += [f"%block_table: {table}", f"%lengths: {lengths}"]
    results = ", ".join([topk] * layers)
    values = ", ".join(f"%t{i}" for i in range(layers))
    return (f"// {layers} indexer layers (bench/multilayer_graph.py"
            f"{' --mixed' if mixed else ''}).\n"
            f"func.func @indexer_layers(\n    " + ",\n    ".join(args) +
            f")\n    -> ({results}) {{\n" + "\n".join(body) +
            f"\n  return {values} : {results}\n}}\n")


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
