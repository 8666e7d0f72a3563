"""Per-kernel GPU times of compiled steps (torch.profiler / CUPTI).

    python3 bench/profile_gpu.py bench-artifacts NAME [NAME ...]

Runs each artifact of bench-artifacts/ (bench_artifacts.py) on the inputs of
bench_gpu.py -- SPIN after a warm-up and a few steps, so that it > 0 -- and
prints the mean device time of every kernel of one step, for finding where a
step's time goes. Runs on the GPU machine (torch with CUDA, spin from the
runtime-only build on PYTHONPATH).
"""

import argparse
import collections
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_gpu as bg  # noqa: E402


def commit_no_drafts(state, ids):
    """Every request's MTP commit with no draft accepted: what makes the
    next MTP step of the same requests a valid one."""
    for i in ids:
        state.commit(i, 0)


def profiled(torch, call, count, first=0):
    """call(first), ..., call(first + count - 1) between cudaProfilerStart
    and cudaProfilerStop, the device idle at both ends: what a profiler
    started with --profile-from-start off sees, and nothing else."""
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    for i in range(first, first + count):
        call(i)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


def warmed_step(torch, spin, directory, config, gen, steps=4):
    """The program of artifact `directory` (configuration `config` of the
    index) on bench_gpu.py's inputs, after `steps` eager steps: SPIN's
    requests (ids 1..B) at position N - 1 then have it > 0. Returns
    (program, inputs, state, ids, outputs of the last step); state and ids
    are None for dense artifacts. MTP steps (R > 1) commit no drafts
    (accepted 0) before each step after the first, and after the last, so
    that the caller's next step is a valid one."""
    b, n, rows = config["batch"], config["slots"], config["rows"]
    program = spin.load(directory)
    input_set = bg.InputSet(torch, config["format"], b, n, [rows], gen)
    inputs = input_set.step_inputs(rows, config.get("q_format", "bf16"))
    state, ids = None, None
    if config["mode"] == "spin":
        state = program.new_state(slots=b)
        ids = list(range(1, b + 1))
        for i in ids:
            state.add(i)
        inputs.update(
            positions=(input_set.rows[rows][2] - 1).contiguous(),
            request_ids=torch.tensor(ids, dtype=torch.int64, device="cuda"))
    mtp = config["mode"] == "spin" and rows > 1
    for step in range(steps):
        if mtp and step > 0:   # an MTP step needs its predecessor committed
            commit_no_drafts(state, ids)
        outputs = program(inputs, state, request_ids=ids)
    if mtp:                    # the step the caller captures or times
        commit_no_drafts(state, ids)
    program.check()
    torch.cuda.synchronize()
    return program, inputs, state, ids, outputs


def main(argv):
    import torch
    import spin
    from torch.profiler import ProfilerActivity, profile

    root, names = argv[0], argv[1:]
    index = bg.load_index(root)
    by_name = {c["name"]: c for c in index["configs"]}
    gen = torch.Generator(device="cuda").manual_seed(1)
    for name in names:
        c = by_name[name]
        b, n, k = c["batch"], c["slots"], c["k"]
        program, inputs, state, ids, outputs = warmed_step(
            torch, spin, os.path.join(root, c["dir"]), c, gen)
        if "sparsity" in outputs:
            # What the timed SPIN steps score (bench_gpu.py checks the same
            # against the target).
            print(f"   realized sparsity {outputs['sparsity'].mean().item():.4f}, "
                  f"iteration {state.iteration(ids[0])}")
        # Per-kernel times with plain launches: a programmatic launch starts
        # a kernel before its predecessor ends, and its waiting would count.
        program.programmatic_launches = False
        steps = 10
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(steps):
                program(inputs, state, request_ids=ids)
            torch.cuda.synchronize()
        totals = collections.OrderedDict()
        for e in prof.events():
            if e.device_type.name == "CUDA" and e.name.startswith("spin_"):
                totals[e.name] = totals.get(e.name, 0.0) + e.device_time
        print(f"== {name} (B={b}, N={n}, K={k}): per-step device time by kernel")
        for kname, us in totals.items():
            print(f"   {kname:36s} {us / steps:9.1f} us")
        print(f"   {'sum':36s} {sum(totals.values()) / steps:9.1f} us")
        # The whole step as a CUDA-graph replay (L2 flushed, median), with
        # programmatic dependent launches and with plain launches, side by
        # side.
        timer = bg.Timer(torch, argparse.Namespace(
            rep_ms=200.0, min_reps=50, max_reps=2000, warmup_ms=20.0))
        medians = {}
        for on in (True, False, True):
            program.programmatic_launches = on
            graph = bg.capture_graphs(
                torch, program, [lambda: program(inputs, state, request_ids=ids)])[0]
            medians.setdefault(on, []).append(timer(graph.replay)["median_us"])
            del graph
        program.programmatic_launches = True
        program.check()
        on, off = min(medians[True]), medians[False][0]
        print(f"   graph replay: programmatic launches {on:.1f} us, "
              f"plain launches {off:.1f} us ({off / on:.3f}x)")


if __name__ == "__main__":
    main(sys.argv[1:])
