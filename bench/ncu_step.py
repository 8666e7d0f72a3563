"""A few steps of a compiled benchmark artifact, for Nsight Compute.

    ncu --profile-from-start off --clock-control none \
        --kernel-name regex:spin_score --launch-count 1 --set full \
        -o OUT/NAME python3 bench/ncu_step.py bench-artifacts NAME

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


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("artifacts", help="a bench_artifacts.py output directory")
    p.add_argument("name", help="a configuration name of its index.json")
    p.add_argument("--steps", type=int, default=2,
                   help="steps run inside the profiler range (default 2)")
    args = p.parse_args(argv)
    if args.steps < 1:
        p.error(f"--steps must be at least 1, got {args.steps}")
    return args


def configuration(artifacts, name):
    """Configuration `name` of the artifacts' index; exits naming the ones
    there are when it has none."""
    by_name = {c["name"]: c for c in bg.load_index(artifacts)["configs"]}
    if name not in by_name:
        sys.exit(f"error: no configuration {name!r} in {artifacts}/index.json "
                 f"(have: {', '.join(sorted(by_name))})")
    return by_name[name]


def main(argv=None):
    args = parse_args(argv)
    c = configuration(args.artifacts, args.name)

    import torch
    import spin
    gen = torch.Generator(device="cuda").manual_seed(1)
    program, inputs, state, ids, _ = profile_gpu.warmed_step(
        torch, spin, os.path.join(args.artifacts, c["dir"]), c, gen)
    program.programmatic_launches = False
    mtp = c["mode"] == "spin" and c["rows"] > 1
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    for _ in range(args.steps):
        program(inputs, state, request_ids=ids)
        if mtp:
            profile_gpu.commit_no_drafts(state, ids)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()
    program.check()
    print(f"{args.name}: {args.steps} steps profiled")


if __name__ == "__main__":
    main()
