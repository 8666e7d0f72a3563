#!/usr/bin/python3
#===- bench/bench_device_batches.py - graph replays of changing batches ----===#
#
# What a serving engine's decode loop costs with spin's SPIN step captured
# in one CUDA graph, side by side in one run on one GPU:
#
#   same requests   today's step (request ids, slots staged at capture):
#                   one graph replayed for the same requests in the same
#                   batch rows, which is all such a graph can do;
#   device batch    the step of docs/GPU-ABI.md "Device batches" (slots,
#                   reset flags in device tensors): one graph replayed while
#                   the requests move between batch rows at every replay;
#   paged           the device batch on state pages that follow the KV
#                   pages (docs/GPU-ABI.md, "Paged state"; the block table
#                   is the state table), state tensors instead of a pool;
#   fused           the device batch on the serving engines' fused fp8 key
#                   pages (docs/GPU-ABI.md, "Fused fp8 key pages": one
#                   uint8 kv_cache, each page's keys then their scales)
#                   instead of separate keys and scales.
#
# Both decode: before every replay the rows grow by one slot (lengths and
# positions written into the graphs' input tensors, outside the timed
# span), and the device batch's rows are shuffled (block-table rows,
# request ids, slots, queries and head weights move with their request, so
# that every request sees the same inputs in every mode). Timed per replay
# with CUDA events around the replay alone, each window of 40 replays
# enqueued behind a spinning kernel (no replay waits for the host), the
# modes' windows interleaved; medians over the replays but the first two
# of each window.
# Configuration: fp8 keys with f32 scales, bf16 queries, H = 64, Dh = 128,
# 64-slot pages and blocks, K = 2048, rho = 0.5, explore 0, R = 1,
# B x N in {16, 96} x 128K (the serving shapes of issue 26).
#
#   bench/bench_device_batches.py --build DIR     on the build machine
#                                                 (compiles 8 programs)
#       [--baseline-compiler PATH]                also the same-request step
#                                                 compiled by another
#                                                 spin-compile (timed as
#                                                 "baseline": what a change
#                                                 to the kernels costs, or
#                                                 the step before device
#                                                 batches existed: the
#                                                 compiler of 5858e84)
#   bench/bench_device_batches.py --run DIR       on the GPU machine
#       [--profile-mode MODE]                     no timing: three replays of
#                                                 MODE's graph for Nsight
#                                                 Compute (ncu --profile-from-
#                                                 start off), per kernel
#
#===----------------------------------------------------------------------===#

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
H, DH, PAGE, BLOCK, K, RHO = 64, 128, 64, 64, 2048, 0.5
SHAPES = ((16, 131072), (96, 131072))
OPTIONS = {"sparsity": RHO, "block-size": BLOCK, "explore": 0.0, "seed": 1,
           "pooling": "max"}


def import_spin():
    build = os.environ.get("SPIN_BUILD_DIR", os.path.join(ROOT, "build"))
    sys.path.insert(0, os.path.join(build, "python"))
    import spin
    return spin


# "device-fixed": the device batch's program and path with every request
# kept in its row (what the moving rows themselves cost).
MODES = ("baseline", "same", "device-fixed", "device", "paged", "fused")


def name_of(batch, slots, mode):
    return f"b{batch}-n{slots // 1024}k-{mode}"


def build(out, baseline_compiler=None):
    spin = import_spin()
    os.makedirs(out, exist_ok=True)
    for batch, slots in SHAPES:
        graph = spin._spin.build_indexer_graph(
            heads=H, head_dim=DH, rows=1, topk=K, page_size=PAGE,
            max_pages=slots // PAGE, key_format="fp8", layer=0, batch=batch,
            query_format="")
        for mode in ("same", "device", "paged", "fused"):
            options = dict(OPTIONS, **({} if mode == "same" else {"reset-input": True}))
            t = time.time()
            spin.compile_artifact(graph, spin._INDEXER_FUNCTION,
                                  os.path.join(out, name_of(batch, slots, mode)),
                                  options, ["sm_90a"], sm_count=132,
                                  paged_state=mode == "paged",
                                  fused_fp8_pages=mode == "fused")
            print(f"{name_of(batch, slots, mode)}: {time.time() - t:.1f} s", flush=True)
        if baseline_compiler:
            source = os.path.join(out, name_of(batch, slots, "baseline") + ".mlir")
            with open(source, "w") as f:
                f.write(graph)
            sparsify = " ".join(f"{k}={v}" for k, v in OPTIONS.items())
            subprocess.run([baseline_compiler, source, f"--sparsify={sparsify}",
                            "--target=sm_90a", "--sm-count=132",
                            "-o", os.path.join(out, name_of(batch, slots, "baseline"))],
                           check=True)


def write_inputs(setup, values):
    """Copies a replay's inputs (`values`, one staged entry) into the mode's
    graph inputs: the tensors an engine writes before each step."""
    for k in setup["keys_written"]:
        setup["inputs"][k].copy_(values[k])


def byte_sum(torch, tensors):
    """The sum of the bytes of `tensors`: a checksum that any overwrite of
    their memory is all but certain to change."""
    sums = [t.contiguous().view(torch.uint8).sum(dtype=torch.int64) for t in tensors]
    return int(torch.stack(sums).sum().item()) if sums else 0


def staged_tensors(setup):
    """What a mode's replays only read: its staged inputs."""
    return [t for entry in setup["staged"] for t in entry.values()]


def timeline(torch, setup, replays=30):
    """Each kernel of the step, as the replays ran it: median start (from
    the replay's first kernel) and duration, in us. The replays run behind a
    spinning kernel as in the timed loop, the rows growing on from where the
    timed replays left them; the input copies between them split the trace
    into replays."""
    from torch.profiler import ProfilerActivity, profile
    staged = setup["staged"]
    grown = [{k: v + len(staged) if k in ("lengths", "positions") else v
              for k, v in e.items()} for e in staged[:replays]]
    torch.cuda._sleep(50_000_000)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for i in range(replays):
            write_inputs(setup, grown[i])
            setup["graph"].replay()
        torch.cuda.synchronize()
    kernels = sorted(((e.time_range.start, e.time_range.end, e.name)
                      for e in prof.events() if e.device_type.name == "CUDA"),
                     key=lambda e: e[0])
    groups, current = [], []
    for start, end, name in kernels:
        if name.startswith("spin_"):
            current.append((start, end, name))
        elif current:
            groups.append(current)
            current = []
    if current:
        groups.append(current)
    per = {}
    spans = []
    for g in groups[2:]:
        t0 = g[0][0]
        spans.append(max(e for _, e, _ in g) - t0)
        for start, end, name in g:
            per.setdefault(name, []).append((start - t0, end - start))
    rows = [(statistics.median(s for s, _ in v), statistics.median(d for _, d in v), n)
            for n, v in per.items()]
    lines = [f"    {s:7.2f} +{d:7.2f}  {n}" for s, d, n in sorted(rows)]
    if spans:
        lines.append(f"    span {statistics.median(spans):.2f} us over {len(spans)} replays")
    return "\n".join(lines)


class CheckFailed(Exception):
    pass


def checked(program, name, phase):
    """program.check(), its error naming the configuration and the phase
    that ran since the last check."""
    try:
        program.check()
    except RuntimeError as e:
        raise CheckFailed(f"{name}: bad device data after {phase}: {e}") from e


def check_replays(torch, setup, name):
    """After a mode's timed replays: its device check, and its staged
    inputs unchanged. A replay that wrote outside its own tensors (a freed
    output, a kernel's stray store) shows up here even where no device
    check notices it."""
    checked(setup["program"], name, "the timed replays")
    if byte_sum(torch, staged_tensors(setup)) != setup["staged_sum"]:
        raise CheckFailed(f"{name}: its staged inputs changed during the "
                          "replays (something wrote into them)")


def report(failures, error):
    """A failed check: printed and kept; that mode's times are no result."""
    print(error, flush=True)
    failures.append(str(error))


def prepare(spin, torch, artifacts, mode, batch, slots, replays, base, row,
            tables, kv_cache, pages):
    """One mode's program, state, inputs and captured step, and its replays'
    inputs staged on the device; None where the artifacts lack the mode."""
    dev = torch.device("cuda")
    paged = mode == "paged"
    device_batch = mode.startswith("device") or mode in ("paged", "fused")
    shuffle = mode in ("device", "paged", "fused")
    # Both device modes step the one device-batch program; checks name the
    # mode, as the results do.
    artifact = name_of(batch, slots, "device" if mode.startswith("device") else mode)
    name = name_of(batch, slots, mode)
    if not os.path.isdir(os.path.join(artifacts, artifact)):
        return None
    program = spin.load(os.path.join(artifacts, artifact), "cuda")
    state = (program.new_state_tensors(slots=batch, pages=pages) if paged
             else program.new_state(slots=batch))
    inputs = dict(base, q=base["q"].clone(), w=base["w"].clone(),
                  **{k: v.clone() for k, v in row.items()})
    if mode == "fused":
        del inputs["keys"], inputs["scales"]
        inputs["kv_cache"] = kv_cache
    if paged:
        inputs["state_block_table"] = tables.clone()
    outputs = {"topk": torch.empty((batch, 1, K), dtype=torch.int32, device=dev)}
    ids = list(range(100, 100 + batch))
    if device_batch:
        inputs["slots"] = torch.arange(batch, dtype=torch.int32, device=dev)
        inputs["reset"] = torch.ones(batch, dtype=torch.bool, device=dev)

        def step():
            program.run_batch(inputs, state, outputs=outputs)
    else:
        for r in ids:
            state.add(r)

        def step():
            program(inputs, state, request_ids=ids, outputs=outputs)
    # Warm-up, then the sparse steps, then capture. A check after each
    # phase says which one met bad device data, if any does.
    for i in range(3):
        step()
        if device_batch:
            inputs["reset"].zero_()
        inputs["lengths"] += 1
        inputs["positions"] += 1
    torch.cuda.synchronize()
    checked(program, name, "the eager steps")
    program.reserve_captured_steps(1)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    torch.cuda.synchronize()
    checked(program, name, "the capture")
    # Per replay: the rows' new lengths (and, for device batches, a new
    # order of the requests over the batch rows), staged on the device
    # beforehand and copied in before the timed span.
    staged = []
    grow = torch.arange(1, replays + 1, dtype=torch.int32, device=dev)
    for i in range(replays):
        p = (torch.randperm(batch, device=dev) if shuffle
             else torch.arange(batch, device=dev))
        n = row["lengths"][p] + 3 + grow[i]
        staged.append({"slots": p.to(torch.int32),
                       "block_table": tables[p].contiguous(),
                       "request_ids": p + 100, "lengths": n,
                       "positions": n - 1, "q": base["q"][p],
                       "w": base["w"][p]})
        if paged:
            staged[-1]["state_block_table"] = staged[-1]["block_table"]
    # Every mode writes the queries, head weights, block-table rows, lengths
    # and positions before each replay, as an engine's decode step does (a
    # same-request replay gets its rows' own values again); device batches
    # also their slots and request ids.
    keys_written = [k for k in staged[0]
                    if device_batch or k not in ("slots", "request_ids")]
    events = [(torch.cuda.Event(enable_timing=True),
               torch.cuda.Event(enable_timing=True)) for _ in range(replays)]
    # The graph holds the addresses of the outputs, not references: they
    # live as long as it does, or its replays write into whatever torch
    # allocates there next (such as another mode's staged inputs).
    setup = {"program": program, "state": state, "graph": graph,
             "inputs": inputs, "outputs": outputs, "staged": staged,
             "keys_written": keys_written, "events": events}
    setup["staged_sum"] = byte_sum(torch, staged_tensors(setup))
    return setup


def profile_replays(torch, setup, count=3):
    """`count` replays of a prepared mode between cudaProfilerStart and
    cudaProfilerStop, after two outside it: what Nsight Compute started
    with --profile-from-start off profiles (each kernel of the step on its
    own, at the replays' inputs)."""
    from profile_gpu import profiled

    def replay(i):
        write_inputs(setup, setup["staged"][i])
        setup["graph"].replay()
    for i in range(2):
        replay(i)
    profiled(torch, replay, count, first=2)
    setup["program"].check()


def run(artifacts, out, replays, seed, only="", show_timeline=False,
        profile_mode=None, modes=None):
    import torch
    spin = import_spin()
    torch.manual_seed(seed)
    dev = torch.device("cuda")
    results, failures = [], []
    for batch, slots in SHAPES:
        pages_per_row = slots // PAGE
        pages = batch * pages_per_row
        keys = torch.randint(0, 256, (pages, PAGE, DH), dtype=torch.uint8, device=dev)
        # Finite fp8 e4m3 values only (0x7f / 0xff are NaN).
        keys[(keys & 0x7F) == 0x7F] = 0
        keys = keys.view(torch.float8_e4m3fn)
        scales = torch.rand((pages, PAGE), device=dev) + 0.5
        tables = torch.randperm(pages, device=dev, dtype=torch.int32).view(batch, pages_per_row)
        start = slots - replays - 64
        base = {"q": (torch.randn((batch, 1, H, DH), device=dev) / 4).to(torch.bfloat16),
                "w": torch.randn((batch, 1, H), device=dev),
                "keys": keys, "scales": scales}
        kv_cache = spin.fuse_fp8_pages(keys, scales)
        row = {"block_table": tables.clone(),
               "lengths": torch.full((batch, 1), start, dtype=torch.int32, device=dev),
               "positions": torch.full((batch, 1), start - 1, dtype=torch.int32, device=dev),
               "request_ids": torch.arange(batch, dtype=torch.int64, device=dev) + 100}
        setups = {}
        for mode in MODES:
            if only not in name_of(batch, slots, mode):
                continue
            if profile_mode and mode != profile_mode:
                continue
            if modes is not None and mode not in modes:
                continue
            try:
                setup = prepare(spin, torch, artifacts, mode, batch, slots,
                                replays, base, row, tables, kv_cache, pages)
            except CheckFailed as e:
                report(failures, e)
                continue
            if setup:
                setups[mode] = setup
        # A shape --only leaves out (or whose artifacts are absent) has none.
        if not setups:
            continue
        if profile_mode:
            for setup in setups.values():
                profile_replays(torch, setup)
            setups.clear()
            continue
        # The modes' windows interleave (each window of one mode behind a
        # spinning kernel, the order rotating from window to window): a
        # drift of the clocks over the run falls on every mode alike.
        window = 40
        order = list(setups)
        for w, first in enumerate(range(0, replays, window)):
            for mode in order[w % len(order):] + order[:w % len(order)]:
                setup = setups[mode]
                torch.cuda._sleep(50_000_000)
                for i in range(first, min(first + window, replays)):
                    write_inputs(setup, setup["staged"][i])
                    setup["events"][i][0].record()
                    setup["graph"].replay()
                    setup["events"][i][1].record()
        torch.cuda.synchronize()
        for mode, setup in setups.items():
            try:
                check_replays(torch, setup, name_of(batch, slots, mode))
            except CheckFailed as e:
                report(failures, e)
                continue
            # The first replays of each window wait for nothing in L2.
            times = [a.elapsed_time(b) * 1000.0 for i, (a, b) in
                     enumerate(setup["events"]) if i % window >= 2]
            med = statistics.median(times)
            results.append({"name": name_of(batch, slots, mode), "batch": batch,
                            "slots": slots,
                            "mode": mode, "replays": len(times),
                            "median_us": med, "min_us": min(times),
                            "p90_us": sorted(times)[int(0.9 * len(times))]})
            print(f"{name_of(batch, slots, mode)}: median {med:.1f} us, min {min(times):.1f}, "
                  f"p90 {results[-1]['p90_us']:.1f} over {len(times)} replays", flush=True)
            if show_timeline:
                print(timeline(torch, setup), flush=True)
        setups.clear()
        torch.cuda.synchronize()
    if profile_mode:
        return
    print("\n| B x N | baseline compiler, same requests, us | same requests, us | "
          "device batch, fixed rows, us | device batch, changing rows, us | "
          "paged state, changing rows, us | fused fp8 pages, changing rows, us | "
          "device / same | paged / same | fused / device | device / baseline | "
          "same / baseline |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for batch, slots in SHAPES:
        got = {r["mode"]: r["median_us"] for r in results if r["batch"] == batch}
        cells = [f"{got[m]:.1f}" if m in got else "not measured" for m in MODES]
        ratios = [f"{got[m] / got[base]:.3f}" if m in got and base in got else "-"
                  for m, base in (("device", "same"), ("paged", "same"),
                                  ("fused", "device"), ("device", "baseline"),
                                  ("same", "baseline"))]
        print(f"| {batch} x {slots // 1024}K | {' | '.join(cells)} | {' | '.join(ratios)} |")
    with open(os.path.join(out, "device_batches.json"), "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "replays": replays,
                   "seed": seed, "results": results, "failures": failures},
                  f, indent=1)
    if failures:
        raise SystemExit(f"{len(failures)} configuration(s) failed their checks; "
                         "their times are not reported")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--build", metavar="DIR")
    p.add_argument("--baseline-compiler", metavar="PATH",
                   help="with --build: a spin-compile to build the baseline with")
    p.add_argument("--run", metavar="DIR")
    p.add_argument("--out", default=os.environ.get("OUT") or ".")
    p.add_argument("--replays", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--only", default="",
                   help="with --run: only the configurations whose name has this "
                        "substring (e.g. b16-n128k-paged, for a profiler)")
    p.add_argument("--modes", default=",".join(MODES),
                   help="with --run: a comma-separated subset of "
                        f"{','.join(MODES)} (default: all)")
    p.add_argument("--profile-mode", choices=MODES,
                   help="with --run: no timing; three replays of this mode's "
                        "graph (each shape, or those --only selects) inside "
                        "cudaProfilerStart/Stop, for Nsight Compute: ncu "
                        "--profile-from-start off ...")
    p.add_argument("--timeline", action="store_true",
                   help="with --run: also each kernel's median start and "
                        "duration within a replay (torch.profiler)")
    a = p.parse_args(argv)
    if a.profile_mode and not a.run:
        p.error("--profile-mode needs --run DIR")
    if a.profile_mode and a.timeline:
        p.error("--profile-mode times nothing: leave out --timeline")
    modes = a.modes.split(",")
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        p.error(f"--modes: unknown mode(s) {','.join(unknown)}; "
                f"choose from {','.join(MODES)}")
    if a.build:
        build(a.build, a.baseline_compiler)
    if a.run:
        run(a.run, a.out, a.replays, a.seed, a.only, a.timeline, a.profile_mode,
            modes)
    if not a.build and not a.run:
        p.error("give --build DIR or --run DIR")


if __name__ == "__main__":
    main()
