"""Steady-state decoding: steps whose positions advance, as in serving.

    python3 bench/decode_gpu.py bench-artifacts DENSE_NAME SPIN_NAME [...]

bench_gpu.py replays one captured step with fixed inputs, so a SPIN step
there never finds its block scores predicted by the step before (the state's
prediction cache holds them for position p + 1, and the replay asks for p
again). Here every CUDA graph holds one step followed by `lengths += a;
positions += a` on the device, so replay i runs at N0 + i:

* "advance" (a = 1): decoding; SPIN's next-step prediction hits;
* "fixed" (a = 0, the same two kernels): every step at the same position;
  SPIN's prediction misses and the step computes it itself.

Rows start 4096 slots below the configuration's N, so the replays stay
within the block table. For each configuration: the median of the graph
replays (L2 flushed, bench_gpu.Timer) in both modes, and the SPIN /
dense ratios of each mode side by side. Runs on the GPU machine (torch with
CUDA, spin from the runtime-only build on PYTHONPATH).
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_gpu as bg  # noqa: E402

HEADROOM = 4096  # slots below N where the rows start
MAX_REPS = 1500  # replays per timing: stays below HEADROOM with warm-up


def measure(torch, spin, root, c, timer, gen):
    b, n, rows = c["batch"], c["slots"], c["rows"]
    program = spin.load(os.path.join(root, c["dir"]))
    inputs = bg.InputSet(torch, c["format"], b, n, [rows], gen).step_inputs(rows)
    lengths = torch.full((b, 1), n - HEADROOM, dtype=torch.int32, device="cuda")
    inputs["lengths"] = lengths
    state, ids, positions = None, None, None
    if c["mode"] == "spin":
        state = program.new_state(slots=b)
        ids = list(range(1, b + 1))
        for i in ids:
            state.add(i)
        positions = lengths - 1
        inputs.update(positions=positions,
                      request_ids=torch.tensor(ids, dtype=torch.int64, device="cuda"))
    out = {}
    for mode, step in (("advance", 1), ("fixed", 0)):
        lengths.fill_(n - HEADROOM)
        if positions is not None:
            positions.copy_(lengths - 1)
            for i in ids:
                state.reset(i)

        def call():
            program(inputs, state, request_ids=ids)
            lengths.add_(step)
            if positions is not None:
                positions.add_(step)

        for _ in range(3):  # warm-up (it = 0), then predicted steps
            call()
        program.check()
        torch.cuda.synchronize()
        if program.captured_steps_left < 1:
            program.reserve_captured_steps(1)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            call()
        out[mode] = timer(graph.replay)["median_us"]
        program.check()
        torch.cuda.synchronize()
        if int(lengths.max()) > n:
            raise SystemExit(f"{c['name']}: rows grew past N (lengths {int(lengths.max())})")
        del graph
    return out


def main(argv):
    import torch
    import spin

    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("artifacts")
    p.add_argument("names", nargs="+", help="pairs: a dense configuration, then SPIN ones")
    args = p.parse_args(argv)
    index = bg.load_index(args.artifacts)
    by_name = {c["name"]: c for c in index["configs"]}
    timer = bg.Timer(torch, argparse.Namespace(rep_ms=150.0, min_reps=50, max_reps=MAX_REPS,
                                               warmup_ms=10.0))
    gen = torch.Generator(device="cuda").manual_seed(1)
    dense = None
    for name in args.names:
        c = by_name[name]
        r = measure(torch, spin, args.artifacts, c, timer, gen)
        line = (f"{name:34s} advance {r['advance']:7.1f} us   fixed {r['fixed']:7.1f} us")
        if c["mode"] == "dense":
            dense = r
        elif dense is not None:
            line += (f"   dense/SPIN: advance {dense['advance'] / r['advance']:.3f}x, "
                     f"fixed {dense['fixed'] / r['fixed']:.3f}x")
        print(line, flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
