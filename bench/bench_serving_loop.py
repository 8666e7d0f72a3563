#!/usr/bin/python3
#===- bench/bench_serving_loop.py - decode steps per second, graphs vs eager -===#
#
# The decode loop of examples/serving_loop.py at the serving shapes, timed
# as an engine runs it: per step the host writes the batch (slots, reset
# flags, request ids) into pinned staging, torch gathers lengths, positions
# and block tables by slot on the GPU and writes fresh queries, the SPIN
# step runs (one CUDA graph replay, or the same step issued eagerly through
# spin.Indexer.run_batch), and the accepted drafts and lengths advance on
# the GPU. The host runs up to 8 steps ahead. Every request steps at every
# step, in a new row order each time.
#
# Configuration: fp8 keys with f32 scales, bf16 queries, H = 64, Dh = 128,
# 64-slot pages and blocks, K = 2048, rho = 0.5, explore 0, one layer,
# R in {1, 2}, B x N in {12, 96} x 128K with lengths near 128K.
#
#   bench/bench_serving_loop.py --build DIR    on the build machine (fills
#                                              DIR with the 4 programs)
#   bench/bench_serving_loop.py --run DIR      on the GPU machine
#
#===----------------------------------------------------------------------===#

import argparse
import json
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHAPES = ((12, 131072), (96, 131072))
ROWS = (1, 2)


def import_modules():
    build = os.environ.get("SPIN_BUILD_DIR", os.path.join(ROOT, "build"))
    sys.path.insert(0, os.path.join(build, "python"))
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    import spin  # noqa: F401
    import serving_loop
    return serving_loop


def shape_of(serving_loop, batch, slots):
    page = 64
    return serving_loop.Shape(heads=64, head_dim=128, page=page, block=64, topk=2048,
                              max_pages=slots // page, kv_pages=batch * (slots // page),
                              slots=batch, sparsity=0.5, explore=0.0)


def build(out):
    sl = import_modules()
    for batch, slots in SHAPES:
        for rows in ROWS:
            t = time.time()
            sl.make_indexer(rows, 1, "max", shape_of(sl, batch, slots), [batch],
                            chips=["sm_90a"], cache_dir=os.path.abspath(out))
            print(f"B={batch} N={slots} R={rows}: {time.time() - t:.1f} s", flush=True)


def run(cache_dir, out, steps, repeats, seed):
    import torch
    sl = import_modules()
    results = []
    for batch, slots in SHAPES:
        for rows in ROWS:
            shape = shape_of(sl, batch, slots)
            indexer = sl.make_indexer(rows, 1, "max", shape, [batch],
                                      cache_dir=os.path.abspath(cache_dir))
            engine = sl.Engine(indexer, 1, shape, [batch], seed, reference=False)
            engine.capture()
            # Lengths near the capacity, far enough below it for every step.
            total = repeats * 2 * (steps + 10) + 16
            top = shape.capacity - total * rows - 1
            scheduler = sl.Scheduler(shape, rows, [batch], seed, churn=False,
                                     lengths=(top - 64, top), max_admit=batch)
            engine.warm_up()
            rates = {"graphs": [], "eager": []}
            issue = {"graphs": [], "eager": []}
            for _ in range(repeats):
                for mode in ("graphs", "eager"):
                    rate, seconds = sl.run_timed(engine, scheduler, steps,
                                                 graphs=mode == "graphs")
                    rates[mode].append(rate)
                    issue[mode].append(seconds * 1e6)
            indexer.check()
            g, e = statistics.median(rates["graphs"]), statistics.median(rates["eager"])
            gi, ei = statistics.median(issue["graphs"]), statistics.median(issue["eager"])
            results.append({"batch": batch, "slots": slots, "rows": rows, "steps": steps,
                            "repeats": repeats, "graphs_steps_per_s": g,
                            "eager_steps_per_s": e, "graph_issue_us": gi,
                            "eager_issue_us": ei, "all": rates, "all_issue_us": issue})
            print(f"B={batch} N={slots // 1024}K R={rows}: graphs {g:.0f} steps/s "
                  f"({1e6 / g:.1f} us/step), eager {e:.0f} steps/s ({1e6 / e:.1f} us/step), "
                  f"graphs / eager {g / e:.2f}; host us issuing the indexer: replay "
                  f"{gi:.1f}, eager {ei:.1f}", flush=True)
            del engine, indexer
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
    print("\n| B x N | R | graphs, steps/s (us/step) | eager, steps/s (us/step) | "
          "graphs / eager | host us issuing the indexer: replay, eager |")
    print("|---|---|---|---|---|---|")
    for r in results:
        g, e = r["graphs_steps_per_s"], r["eager_steps_per_s"]
        print(f"| {r['batch']} x {r['slots'] // 1024}K | {r['rows']} | {g:.0f} ({1e6 / g:.1f}) "
              f"| {e:.0f} ({1e6 / e:.1f}) | {g / e:.2f} | {r['graph_issue_us']:.1f}, "
              f"{r['eager_issue_us']:.1f} |")
    with open(os.path.join(out, "serving_loop.json"), "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "seed": seed,
                   "results": results}, f, indent=1)


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--build", metavar="DIR")
    p.add_argument("--run", metavar="DIR")
    p.add_argument("--out", default=os.environ.get("OUT") or ".")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    if a.build:
        build(a.build)
    if a.run:
        run(a.run, a.out, a.steps, a.repeats, a.seed)
    if not a.build and not a.run:
        p.error("give --build DIR or --run DIR")


if __name__ == "__main__":
    main()
