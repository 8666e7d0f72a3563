#!/usr/bin/env python3
#===- bench/sustained_gpu.py - kernels under sustained load --------------===#
#
# Part of the spin project: SPIN (Shadow Predictive Indexer) for
# indexer-based sparse attention.
#
#===----------------------------------------------------------------------===#
#
# Our scoring-alone and dense steps (one CUDA graph of bench_gpu.py's inputs
# per artifact set), and DeepGEMM's logits at a scoring-alone configuration's
# shape, each replayed back to back for --seconds after a second of idle:
# the median time of the first 40 replays ("burst", the board still below its
# power limit), the median over the last --keep seconds ("sustained"), and
# the board's mean SM clock and power over those seconds (nvidia-smi every
# 50 ms), so the energy a call takes. At R >= 2 the H200 holds these kernels
# at its 700 W limit: which kernel needs fewer cycles, and which draws less
# power a cycle, is what the sustained rows separate.
#
#   PYTHONPATH=build-gpu/python python3 bench/sustained_gpu.py \
#       --artifacts bench-artifacts[,OTHER-SET...] --only NAME[,NAME...] \
#       [--deepgemm third_party/DeepGEMM] [--rounds 2]
#
# The sides of a configuration alternate (their order reversed every round).
#
#===----------------------------------------------------------------------===#

import argparse
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_gpu as bg  # noqa: E402


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="Kernels replayed back to back under "
                                            "sustained load: time, clock and power.")
    p.add_argument("--artifacts", required=True,
                   help="comma-separated bench_artifacts.py output directories (variants "
                        "of the same configurations)")
    p.add_argument("--only", required=True,
                   help="comma-separated configuration names (scores or dense modes)")
    p.add_argument("--deepgemm", default="", metavar="DIR",
                   help="also DeepGEMM's logits at each scoring-alone configuration's shape")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--keep", type=float, default=2.0,
                   help="the last seconds of each run that the sustained figures cover")
    args = p.parse_args(argv)
    args.artifacts = [d for d in args.artifacts.split(",") if d]
    args.only = [n for n in args.only.split(",") if n]
    if args.rounds < 1:
        p.error(f"--rounds must be at least 1, got {args.rounds}")
    if not 0 < args.keep < args.seconds:
        p.error(f"--keep must be in (0, --seconds), got {args.keep} of {args.seconds}")
    return args


def configurations(args):
    """{name: {artifacts dir: configuration}}; exits naming what is missing
    or not of a timed mode."""
    out = {}
    for d in args.artifacts:
        for name in args.only:
            c = bg.configuration(d, name)
            if c["mode"] not in ("scores", "dense") or c["format"] != "fp8":
                sys.exit(f"error: {name!r} is a {c['mode']} configuration of {c['format']} "
                         "keys: only fp8-key scores and dense steps are timed here")
            out.setdefault(name, {})[d] = c
    return out


def summarize(spans, readings, seconds, keep):
    """(burst µs, sustained µs, mean MHz, mean W) from [(s since start, µs)]
    and nvidia-smi's 'MHz, W' lines over the run."""
    tail = readings[int(len(readings) * (1 - keep / seconds)):]
    values = []
    for x in tail:
        try:
            values.append(tuple(float(v) for v in x.split(",")[:2]))
        except ValueError:          # "[N/A]" or a partial line
            pass
    clock = statistics.mean(v[0] for v in values) if values else None
    power = statistics.mean(v[1] for v in values) if values else None
    burst = statistics.median(us for _, us in spans[:40])
    sustained = statistics.median(us for at, us in spans if at > seconds - keep)
    return burst, sustained, clock, power


def sustained_text(r):
    """One run's sustained figures; the clock and power as n/a where
    nvidia-smi gave no readings."""
    _, us, clock, power = r
    if clock is None:
        return f"{us:.1f} us (clock and power n/a)"
    return f"{us:.1f} us at {clock:.0f} MHz, {power:.0f} W ({power * us / 1e3:.0f} mJ a call)"


def run_sustained(torch, fn, seconds, keep):
    time.sleep(1.0)
    try:
        smi = subprocess.Popen(["nvidia-smi", "--query-gpu=clocks.sm,power.draw",
                                "--format=csv,noheader,nounits", "-lms", "50"],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                               text=True)
    except OSError as e:
        sys.exit(f"error: cannot run nvidia-smi for the clock and power readings ({e})")
    t0 = time.time()
    spans = []
    try:
        while time.time() - t0 < seconds:
            batch = []
            for _ in range(20):
                a = torch.cuda.Event(enable_timing=True)
                b = torch.cuda.Event(enable_timing=True)
                a.record()
                fn()
                b.record()
                batch.append((a, b))
            torch.cuda.synchronize()
            at = time.time() - t0
            spans += [(at, a.elapsed_time(b) * 1e3) for a, b in batch]
    finally:
        smi.terminate()
    readings = [x for x in smi.communicate()[0].splitlines() if x.strip()]
    return summarize(spans, readings, seconds, keep)


def main(argv=None):
    args = parse_args(argv)
    configs = configurations(args)
    import torch
    import spin
    dg = None
    if args.deepgemm:
        dg = bg.DeepGemm.required(torch, args.deepgemm)
    for name, by_dir in configs.items():
        first = next(iter(by_dir.values()))
        b, n, rows, k = first["batch"], first["slots"], first["rows"], first["k"]
        s = bg.InputSet(torch, "fp8", b, n, [rows],
                        torch.Generator(device=bg.DEVICE).manual_seed(1))
        sides, holds = {}, []
        for d, c in by_dir.items():
            program = spin.load(os.path.join(d, c["dir"]))
            x = s.step_inputs(rows, bg.q_format_of(c))
            o = ({"scores": torch.empty(b, rows, n, dtype=torch.float32, device=bg.DEVICE)}
                 if c["mode"] == "scores" else
                 {"topk": torch.empty(b, rows, k, dtype=torch.int32, device=bg.DEVICE)})
            g = bg.capture_graphs(torch, program,
                                  [lambda p=program, x=x, o=o: p(x, None, outputs=o)])[0]
            sides[os.path.basename(os.path.normpath(d))] = g.replay
            holds.append((program, x, o, g))
        if dg is not None and first["mode"] == "scores":
            fn = dg.step(s, rows)
            fn()
            g = bg.capture(torch, [fn])[0]
            sides["deepgemm"] = g.replay
            holds.append(g)
        results = {label: [] for label in sides}
        for rnd in range(args.rounds):
            labels = list(sides) if rnd % 2 == 0 else list(sides)[::-1]
            for label in labels:
                results[label].append(run_sustained(torch, sides[label], args.seconds,
                                                    args.keep))
        for label, rs in results.items():
            print(f"{name} {label}: burst " + ", ".join(f"{r[0]:.1f}" for r in rs)
                  + " us | sustained " + ", ".join(sustained_text(r) for r in rs),
                  flush=True)
        del sides, holds
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
