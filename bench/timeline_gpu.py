"""Kernel timelines of CUDA-graph replays (torch.profiler / CUPTI).

    python3 bench/timeline_gpu.py [--replays N] bench-artifacts NAME [NAME ...]
    python3 bench/timeline_gpu.py DIR_A/ DIR_B/ --config NAME   (variants)

Replays one step of each artifact as a CUDA graph, with the L2 flushed
before every replay (bench_gpu.py's timing), under the profiler, and prints
for every node of the step (kernels, and copies or memsets if the graph has
any) its start and end in microseconds after the flush kernel ends: the
median over the replays, and the 90th percentile of the end. SPIN runs at
a fixed position (the state warmed first, as in profile_gpu.py). The
graph's own median time, by CUDA events without the profiler, is printed
too. Runs on the GPU machine (torch with CUDA, spin from the runtime-only
build on PYTHONPATH).
"""

import argparse
import collections
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_gpu as bg  # noqa: E402
import profile_gpu  # noqa: E402


def timeline(torch, spin, root_dir, config, replays):
    from torch.profiler import ProfilerActivity, profile

    c = config
    gen = torch.Generator(device="cuda").manual_seed(1)
    program, inputs, state, ids, _ = profile_gpu.warmed_step(torch, spin, root_dir, c, gen)
    graph = bg.capture_graphs(
        torch, program, [lambda: program(inputs, state, request_ids=ids)])[0]
    flush = torch.empty(bg.FLUSH_BYTES, dtype=torch.int8, device="cuda")
    timer = bg.Timer(torch, argparse.Namespace(
        rep_ms=200.0, min_reps=50, max_reps=2000, warmup_ms=20.0))
    step_us = timer(graph.replay)["median_us"]
    for _ in range(10):
        flush.zero_()
        graph.replay()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(replays):
            flush.zero_()
            graph.replay()
        torch.cuda.synchronize()
    program.check()
    # Device events (kernels, copies, memsets) in start order; a replay
    # begins after each flush (torch's fill kernel).
    events = sorted((e for e in prof.events() if e.device_type.name == "CUDA"),
                    key=lambda e: e.time_range.start)
    starts = collections.defaultdict(list)
    ends = collections.defaultdict(list)
    order = []
    t0 = None
    for e in events:
        if not e.name.startswith("spin_") and "fill" in e.name.lower():
            t0 = e.time_range.end
            continue
        if t0 is None:
            continue
        if e.name not in starts:
            order.append(e.name)
        starts[e.name].append(e.time_range.start - t0)
        ends[e.name].append(e.time_range.end - t0)
    print(f"== {c['name']} ({root_dir}): graph replay {step_us:.1f} us (median, "
          f"L2 flushed); nodes, us after the flush ends, median over "
          f"{replays} replays")
    print(f"   {'node':36s} {'start':>7s} {'end':>7s} {'end p90':>8s} {'takes':>7s}")
    for name in order:
        s = statistics.median(starts[name])
        e = statistics.median(ends[name])
        print(f"   {name:36s} {s:7.1f} {e:7.1f} {bg.percentile(ends[name], 0.9):8.1f} "
              f"{e - s:7.1f}")
    del graph
    torch.cuda.synchronize()


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dirs", nargs="+", help="bench-artifacts NAME... or variant DIRs")
    p.add_argument("--config", help="one configuration, in every DIR (variants)")
    p.add_argument("--replays", type=int, default=30)
    args = p.parse_args(argv)
    import torch
    import spin

    # (artifact tree, configuration) pairs.
    runs = ([(d, args.config) for d in args.dirs] if args.config
            else [(args.dirs[0], name) for name in args.dirs[1:]])
    for root, name in runs:
        c = next((c for c in bg.load_index(root)["configs"] if c["name"] == name), None)
        if c is None:
            bg.die(f"{root} has no configuration {name}")
        timeline(torch, spin, os.path.join(root, c["dir"]), c, args.replays)


if __name__ == "__main__":
    main(sys.argv[1:])
