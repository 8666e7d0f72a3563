"""A few steps of a compiled benchmark artifact, for Nsight Compute.

    ncu --profile-from-start off --clock-control none \
        --kernel-name regex:spin_score --launch-count 1 --set full \
        -o OUT/NAME python3 bench/ncu_step.py bench-artifacts NAME

With --deepgemm DIR (a DeepGEMM tree that bench/build_deepgemm.sh built), NAME
a scoring-alone configuration: DeepGEMM's fp8_fp4_paged_mqa_logits at its B,
N and R instead, on the same inputs as bench_gpu.py's (profile its kernel
with --kernel-name regex:paged_mqa_logits).

Runs artifact NAME of bench-artifacts/ (bench_artifacts.py) on bench_gpu.py's
inputs: the warm-up of profile_gpu.py (SPIN then has it > 0; MTP steps are
committed), then `--steps` steps between cudaProfilerStart and
cudaProfilerStop, so that a profiler started with --profile-from-start off
sees those kernels only, not the warm-up's or the first launches' module
loading. Plain launches (no programmatic dependent launch), so that a
profiled kernel does not count its wait for the one before. Runs on the GPU
machine (torch with CUDA, spin from the runtime-only build on PYTHONPATH).
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_gpu as bg  # noqa: E402
import profile_gpu  # noqa: E402
from bench_gpu import configuration  # noqa: E402


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("artifacts", help="a bench_artifacts.py output directory")
    p.add_argument("name", help="a configuration name of its index.json")
    p.add_argument("--steps", type=int, default=2,
                   help="steps run inside the profiler range (default 2)")
    p.add_argument("--deepgemm", metavar="DIR", default="",
                   help="run DeepGEMM's logits at NAME's shape instead of NAME "
                        "(a scoring-alone configuration)")
    args = p.parse_args(argv)
    if args.steps < 1:
        p.error(f"--steps must be at least 1, got {args.steps}")
    return args


def main(argv=None):
    args = parse_args(argv)
    c = configuration(args.artifacts, args.name)

    import torch
    if args.deepgemm:
        return run_deepgemm(torch, args, c)
    import spin
    gen = torch.Generator(device="cuda").manual_seed(1)
    program, inputs, state, ids, _ = profile_gpu.warmed_step(
        torch, spin, os.path.join(args.artifacts, c["dir"]), c, gen)
    program.programmatic_launches = False
    mtp = c["mode"] == "spin" and c["rows"] > 1

    def step(_):
        program(inputs, state, request_ids=ids)
        if mtp:
            profile_gpu.commit_no_drafts(state, ids)
    profile_gpu.profiled(torch, step, args.steps)
    program.check()
    print(f"{args.name}: {args.steps} steps profiled")


def run_deepgemm(torch, args, c):
    """DeepGEMM's logits at configuration c's shape, bench_gpu.py's inputs
    (set 0 of its seed), after one call outside the profiler range (its
    JIT compilation and module loading)."""
    if c["mode"] != "scores" or c["format"] != "fp8":
        sys.exit(f"error: --deepgemm needs an fp8-key scoring-alone configuration, "
                 f"not {c['name']!r} ({c['mode']}, {c['format']} keys)")
    dg = bg.DeepGemm.required(torch, args.deepgemm)
    b, n, rows = c["batch"], c["slots"], c["rows"]
    gen = torch.Generator(device=bg.DEVICE).manual_seed(1)
    s = bg.InputSet(torch, "fp8", b, n, [rows], gen)
    fn = dg.step(s, rows)
    fn()
    profile_gpu.profiled(torch, lambda _: fn(), args.steps)
    print(f"DeepGEMM at {c['name']}'s shape (B={b}, N={n}, R={rows}, "
          f"{len(bg.deepgemm_calls(rows))} call(s)): {args.steps} steps profiled")
    return 0


if __name__ == "__main__":
    main()
