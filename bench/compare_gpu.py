#!/usr/bin/env python3
#===- bench/compare_gpu.py - two builds of a kernel, side by side ---------===#
#
# Times the same benchmark configuration compiled by different compilers
# (artifact directories written by bench/bench_artifacts.py --only NAME
# --out DIR), in one process on the GPU machine, alternating between them
# for several rounds: run-to-run drift of the device (about 1 us) then hits
# every variant alike, so differences of a few tenths of a microsecond show.
# Each round is bench_gpu.py's own measurement of that configuration
# (Bench.run_ours: CUDA-graph replays with the L2 flushed, the step at a
# fixed position, the graphs in turn, and decoding steps), on input sets
# made once and shared by all variants.
#
#   PYTHONPATH=build-gpu/python python3 bench/compare_gpu.py \
#       --config fp8-b16-n128k-k512-r1-spin0.5 --rounds 3 old/ new/
#
# Prints one line per variant: the per-round medians of each column, then
# their median, and the new variants' ratios to the first.
#
#===----------------------------------------------------------------------===#

import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_gpu as bg  # noqa: E402

#: (result key, column label) of what each round reports.
COLUMNS = (("median_us", "fixed"), ("decode_median_us", "decoding"),
           ("rotate_median_us", "rotating"))


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description="Time one benchmark configuration compiled by different compilers, "
                    "side by side in one process (bench_gpu.py's measurement per round).")
    p.add_argument("variants", nargs="+", metavar="DIR",
                   help="artifact directories (bench_artifacts.py --out), the first the baseline")
    p.add_argument("--config", required=True,
                   help="the configuration name (bench_artifacts.py --list)")
    p.add_argument("--rounds", type=int, default=3, help="rounds over all variants (default 3)")
    p.add_argument("--seed", type=int, default=7, help="seed of the input sets")
    args = p.parse_args(argv)
    if args.rounds < 1:
        p.error(f"--rounds must be at least 1, got {args.rounds}")
    return args


def configuration(variants, name):
    """The configuration `name` of every variant's index (they must agree on
    its shape); exits with a message naming what is missing."""
    found = None
    for d in variants:
        index = bg.load_index(d)
        c = next((x for x in index["configs"] if x["name"] == name), None)
        if c is None:
            bg.die(f"{d}/index.json has no configuration {name!r} (bench_artifacts.py "
                   f"--only {name} --out {d})")
        shape = {k: c[k] for k in ("format", "batch", "slots", "k", "rows", "mode", "sparsity")}
        if found is not None and shape != found[1]:
            bg.die(f"{d}: configuration {name!r} differs from {variants[0]}'s: {shape} "
                   f"vs {found[1]}")
        found = found or (c, shape)
    return found[0]


def summary_lines(variants, rounds):
    """Text lines from rounds[variant] = [result per round]."""
    lines = []
    base = None
    for d in variants:
        cells = []
        medians = {}
        for key, label in COLUMNS:
            values = [r[key] for r in rounds[d] if r.get(key) is not None]
            if not values:
                continue
            medians[key] = statistics.median(values)
            cells.append(f"{label} {' / '.join(f'{v:.1f}' for v in values)} "
                         f"(median {medians[key]:.1f})")
        problems = sorted({p for r in rounds[d] for p in r.get("problems", [])})
        line = f"{d}: " + "; ".join(cells)
        if base is not None:
            ratios = [f"{label} {base[key] / medians[key]:.3f}x"
                      for key, label in COLUMNS if key in base and key in medians]
            line += " | vs the first: " + ", ".join(ratios)
        if problems:
            line += " | PROBLEMS: " + "; ".join(problems)
        lines.append(line)
        base = base or medians
    return lines


def main(argv=None):
    args = parse_args(argv)
    c = configuration(args.variants, args.config)
    bench_args = bg.parse_args(["--no-call", "--no-recall", "--seed", str(args.seed),
                                "--out", os.environ.get("OUT") or "."])
    torch, spin = bg.require_gpu(bench_args)
    bench = bg.Bench(torch, spin, bench_args, bg.load_index(args.variants[0]))
    gen = torch.Generator(device=bg.DEVICE).manual_seed(args.seed)
    sets = [bg.InputSet(torch, c["format"], c["batch"], c["slots"], [c["rows"]], gen)
            for _ in range(bench_args.sets)]
    rounds = {d: [] for d in args.variants}
    for r in range(args.rounds):
        for d in args.variants:
            bench.args.artifacts = d
            rounds[d].append(bench.run_ours(c, sets, None))
        print(f"round {r + 1}/{args.rounds} done", flush=True)
    print(f"{args.config}, {args.rounds} rounds, µs per step:")
    for line in summary_lines(args.variants, rounds):
        print("  " + line)
    return 1 if any(r.get("problems") for rs in rounds.values() for r in rs) else 0


if __name__ == "__main__":
    sys.exit(main())
