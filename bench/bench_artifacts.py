#!/usr/bin/python3
#===- bench/bench_artifacts.py - graphs and GPU artifacts for the benchmark -===#
#
# Writes one dense-indexer graph per benchmark configuration and compiles it
# with build/bin/spin-compile (sm_90a PTX + manifest.json) into
# bench-artifacts/<name>/, plus bench-artifacts/index.json, which
# bench/bench_gpu.py reads on the H200. Runs on the build machine (needs the
# compiler, no GPU).
#
# Configurations (issue 5): H=64, Dh=128, 64-slot pages; keys bf16 or fp8 e4m3
# with one f32 scale per slot; B in {1, 16}; N (slots per request = the block
# table's reach) in {16K, 64K, 128K, 256K}; K in {512, 2048}; dense at R=1
# and R=4 (MTP-like verification rows), SPIN (R=1) at target sparsity 0.2,
# 0.4 and 0.5; and the dense scoring alone (the graph returns the scores, no
# top-K: DeepGEMM's logits kernel's work) at B=16 x N in {64K, 128K, 256K}
# and B=1 x 256K.
#
# MTP rows and fp8 queries (issue 26), fp8 keys, K = 2048: at the main
# shapes B = 16 x N in {128K, 256K} the dense step, SPIN (rho 0.5) and the
# scoring alone at R in {1, 2, 4} with fp8 e4m3 queries and with bf16
# queries; at the serving shapes B in {12, 96} x N = 128K the same at
# R in {1, 2} (plus R = 4 with fp8 queries for the dense step and the
# scoring alone); SPIN and the dense step at R in {2, 4} with bf16 keys at
# the main shapes.
# Names of fp8-query configurations end in -qfp8.
#
#   bench/bench_artifacts.py                 everything (pruned to --minimum
#                                            if it would exceed --max-mb)
#   bench/bench_artifacts.py --set minimum   only issue 5's minimum set
#                                            (--minimum is the same)
#   bench/bench_artifacts.py --set mtp       only what issue 26's minimums
#                                            need (21 artifacts, 3.2 MB;
#                                            mtp_set_names)
#   bench/bench_artifacts.py --list          print the configurations only
#
#===----------------------------------------------------------------------===#

import argparse
import concurrent.futures
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time

import gpu_artifacts  # the graph text (same directory)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
H, DH, PAGE = 64, 128, 64
FORMATS = ("fp8", "bf16")
BATCHES = (1, 16)
SLOTS = (16384, 65536, 131072, 262144)
TOPK = (512, 2048)
SPARSITIES = (0.2, 0.4, 0.5)
DENSE_ROWS = (1, 4)
# Issue 26: MTP rows and fp8 queries.
MTP_MAIN = ((16, 131072), (16, 262144))      # B x N: the main shapes
MTP_SERVING = ((12, 131072), (96, 131072))   # B x N: the serving shapes
MTP_K = 2048
MTP_RHO = 0.5
SETS = ("all", "minimum", "mtp")


def mtp_set_names():
    """`--set mtp`: exactly what issue 26's minimums need (fp8 keys), plus
    the fp8-key 16 x 128K R=1 dense / SPIN rho 0.5 reference row (bf16
    queries, K=512, as quoted since issue 5) and the bf16-query rows at
    16 x 256K whose earlier figures the 3 % check compares against."""
    names = []
    for b, n in ((16, 262144), (96, 131072)):
        for r in (1, 2, 4):      # fp8-query dense step: R=2, R=4 against R=1
            names.append(config_name(dict(format="fp8", q_format="fp8", batch=b, slots=n,
                                          k=MTP_K, rows=r, mode="dense")))
        # SPIN rho=0.5 at R=2 against the dense step at R=2
        names.append(config_name(dict(format="fp8", q_format="fp8", batch=b, slots=n,
                                      k=MTP_K, rows=2, mode="spin", sparsity=MTP_RHO)))
    for b, n in ((16, 262144), (96, 131072), (12, 131072)):
        for r in (1, 2, 4):      # the scoring alone: of copy (R=1), DeepGEMM
            names.append(config_name(dict(format="fp8", q_format="fp8", batch=b, slots=n,
                                          k=0, rows=r, mode="scores")))
    for mode, rho in (("dense", 0.0), ("spin", 0.5)):   # the reference row
        names.append(config_name(dict(format="fp8", q_format="bf16", batch=16, slots=131072,
                                      k=512, rows=1, mode=mode, sparsity=rho)))
    # bf16 queries at 16 x 256K, beside the fp8-query rows and against their
    # figures before issue 26
    names.append(config_name(dict(format="fp8", q_format="bf16", batch=16, slots=262144,
                                  k=MTP_K, rows=1, mode="dense")))
    names.append(config_name(dict(format="fp8", q_format="bf16", batch=16, slots=262144,
                                  k=0, rows=1, mode="scores")))
    return names


def config_name(c):
    """The artifact's name; fp8-query configurations end in -qfp8 (the
    names of bf16-query ones are those from before fp8 queries)."""
    q = "-qfp8" if c.get("q_format", "bf16") == "fp8" else ""
    if c["mode"] == "scores":
        return f"{c['format']}-b{c['batch']}-n{c['slots'] // 1024}k-r{c['rows']}-scores{q}"
    mode = "dense" if c["mode"] == "dense" else f"spin{c['sparsity']:g}"
    return (f"{c['format']}-b{c['batch']}-n{c['slots'] // 1024}k-k{c['k']}-r{c['rows']}-"
            f"{mode}{q}")


def is_minimum(c):
    """Issue 5's minimum: B=16 at N in {64K, 128K, 256K} and B=1 at N=256K,
    both K, dense (R=1) and SPIN at every target sparsity (bf16 queries)."""
    if c["rows"] != 1 or c.get("q_format", "bf16") != "bf16":
        return False
    return (c["batch"] == 16 and c["slots"] >= 65536) or \
           (c["batch"] == 1 and c["slots"] == 262144)


def all_configs():
    out = []
    for fmt in FORMATS:
        for b in BATCHES:
            for n in SLOTS:
                for k in TOPK:
                    for r in DENSE_ROWS:
                        out.append(dict(format=fmt, batch=b, slots=n, k=k, rows=r,
                                        mode="dense", sparsity=0.0))
                    for rho in SPARSITIES:
                        out.append(dict(format=fmt, batch=b, slots=n, k=k, rows=1,
                                        mode="spin", sparsity=rho))
    # The scoring alone (the graph returns the dense scores; no top-K), as
    # DeepGEMM's paged MQA logits kernel (TOOLCHAIN.md) computes them: where
    # the issue asks for scoring bandwidth (B = 16, N >= 64K) and at
    # DeepGEMM's B = 1 reference size.
    for fmt in FORMATS:
        for b, n in ((16, 65536), (16, 131072), (16, 262144), (1, 262144)):
            out.append(dict(format=fmt, batch=b, slots=n, k=0, rows=1, mode="scores",
                            sparsity=0.0))
    out += mtp_configs()
    for c in out:
        c.setdefault("q_format", "bf16")
        c["name"] = config_name(c)
        c["minimum"] = is_minimum(c)
    mtp = set(mtp_set_names())
    for c in out:
        c["sets"] = ["all"] + (["minimum"] if c["minimum"] else []) + \
            (["mtp"] if c["name"] in mtp else [])
    names = [c["name"] for c in out]
    if len(set(names)) != len(names):
        raise AssertionError("bench_artifacts.py bug: configurations with the same name")
    missing = mtp - set(names)
    if missing:
        raise AssertionError(f"bench_artifacts.py bug: --set mtp names {sorted(missing)}, "
                             "which are not configurations")
    return out


def mtp_configs():
    """Issue 26's additions to the grid (fp8 keys unless said; K = MTP_K):
    fp8 and bf16 queries, the query rows of MTP verification steps (R > 1)
    for the dense step, SPIN and the scoring alone, and the serving shapes.
    Configurations the grid above already has are not repeated."""
    out = []

    def add(**c):
        c.setdefault("sparsity", 0.0)
        c.setdefault("k", MTP_K)
        out.append(c)

    for b, n in MTP_MAIN:
        for q in ("fp8", "bf16"):
            for r in (1, 2, 4):
                grid = q == "bf16" and r in DENSE_ROWS   # the grid has these
                if not grid:
                    add(format="fp8", q_format=q, batch=b, slots=n, rows=r, mode="dense")
                if not (q == "bf16" and r == 1):
                    add(format="fp8", q_format=q, batch=b, slots=n, rows=r, mode="spin",
                        sparsity=MTP_RHO)
                    add(format="fp8", q_format=q, batch=b, slots=n, rows=r, mode="scores",
                        k=0)
        for r in (2, 4):            # bf16 keys (bf16 queries) with MTP rows
            if r not in DENSE_ROWS:
                add(format="bf16", q_format="bf16", batch=b, slots=n, rows=r, mode="dense")
            add(format="bf16", q_format="bf16", batch=b, slots=n, rows=r, mode="spin",
                sparsity=MTP_RHO)
    for b, n in MTP_SERVING:
        for q in ("fp8", "bf16"):
            for r in (1, 2, 4):
                if r == 4 and q == "bf16":
                    continue
                add(format="fp8", q_format=q, batch=b, slots=n, rows=r, mode="dense")
                add(format="fp8", q_format=q, batch=b, slots=n, rows=r, mode="scores", k=0)
                if r < 4:
                    add(format="fp8", q_format=q, batch=b, slots=n, rows=r, mode="spin",
                        sparsity=MTP_RHO)
    return out


def graph_text(c):
    """The dense indexer graph a frontend emits (as
    examples/deepseek-v4-flash-indexer.mlir), at this configuration."""
    b, r, n, k = c["batch"], c["rows"], c["slots"], c["k"]
    what = "the scores (no top-K)" if c["mode"] == "scores" else f"K={k}"
    header = f"""// Benchmark graph {c['name']} (bench/bench_artifacts.py): B={b}, R={r},
// H={H}, Dh={DH}, {c['format']} keys, {PAGE}-slot pages, N={n} slots per request, {what}."""
    q_format = c.get("q_format", "bf16")
    if q_format != "bf16":
        header += f"\n// Queries: {q_format} (e4m3 MMAs)."
    return gpu_artifacts.indexer_graph("bench_indexer", header, batch=b, rows=r, heads=H,
                                       head_dim=DH, page_size=PAGE, table_pages=n // PAGE,
                                       topk=k, key_format=c["format"], q_format=q_format,
                                       outputs="scores" if c["mode"] == "scores" else "topk")


def compile_args(c, compiler, graph, out_dir, target, flags=()):
    """spin-compile's command line; ``flags`` are extra options (--no-wgmma)."""
    args = [compiler, graph, f"--target={target}", "-o", out_dir, *flags]
    if c["mode"] == "spin":
        args.append(f"--sparsify=sparsity={c['sparsity']:g} block-size={PAGE}")
    return args


def dir_bytes(path):
    total = 0
    for base, _, files in os.walk(path):
        for f in files:
            total += os.path.getsize(os.path.join(base, f))
    return total


def build_one(c, compiler, out_root, target, force, flags=()):
    d = os.path.join(out_root, c["name"])
    text = graph_text(c)
    # The stamp names the graph, the options and the compiler binary (its
    # size and time), so a rebuilt compiler recompiles everything.
    st = os.stat(compiler)
    stamp = hashlib.sha256((text + "\0" + " ".join(compile_args(c, "", "", "", target, flags)) +
                            f"\0{st.st_size}:{st.st_mtime_ns}").encode()).hexdigest()
    stamp_path = os.path.join(d, "build-stamp")
    if not force and os.path.exists(os.path.join(d, "manifest.json")) and \
            os.path.exists(stamp_path) and open(stamp_path).read() == stamp:
        return c, "up to date", 0.0
    # Compile into a fresh directory and swap it in: a failure leaves the
    # previous artifact alone.
    tmp = d + ".tmp"
    if os.path.isdir(tmp):
        shutil.rmtree(tmp)
    os.makedirs(tmp)
    graph = os.path.join(tmp, "graph.mlir")
    with open(graph, "w") as f:
        f.write(text)
    args = compile_args(c, compiler, graph, tmp, target, flags)
    t0 = time.time()
    proc = subprocess.run(args, capture_output=True, text=True)
    dt = time.time() - t0
    if proc.returncode != 0:
        shutil.rmtree(tmp)
        raise RuntimeError(f"{c['name']}: {' '.join(args)} failed "
                           f"(exit {proc.returncode}):\n{proc.stderr}")
    with open(os.path.join(tmp, "build-stamp"), "w") as f:
        f.write(stamp)
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.rename(tmp, d)
    return c, "compiled", dt


def check_manifest(c, d):
    """What bench_gpu.py relies on, checked here rather than on the GPU."""
    m = json.load(open(os.path.join(d, "manifest.json")))
    names = {a["name"]: a for a in m["arguments"]}
    out = "scores" if c["mode"] == "scores" else "topk"
    want = ["q", "w", "keys", "block_table", "lengths", out]
    if c["format"] == "fp8":
        want.append("scales")
    if c["mode"] == "spin":
        want += ["positions", "request_ids", "sparsity"]
        if c["rows"] > 1:
            want.append(gpu_artifacts.abi.ACCEPTED)
    missing = [n for n in want if n not in names]
    if missing:
        raise RuntimeError(f"{d}/manifest.json lacks arguments {missing}")
    if m["batch"] != c["batch"] or m["rows"] != c["rows"]:
        raise RuntimeError(f"{d}/manifest.json: batch/rows {m['batch']}/{m['rows']}, "
                           f"expected {c['batch']}/{c['rows']}")
    q_dtype = gpu_artifacts.MANIFEST_DTYPES[c.get("q_format", "bf16")]
    if names["q"]["dtype"] != q_dtype:
        raise RuntimeError(f"{d}/manifest.json: q is {names['q']['dtype']}, expected {q_dtype}")
    width = c["slots"] if c["mode"] == "scores" else c["k"]
    if names[out]["shape"] != [c["batch"], c["rows"], width]:
        raise RuntimeError(f"{d}/manifest.json: {out} shape {names[out]['shape']}")
    stateful = any(a["role"] == gpu_artifacts.abi.STATE for a in m["arguments"])
    if stateful != (c["mode"] == "spin"):
        raise RuntimeError(f"{d}/manifest.json: state section does not match {c['mode']}")
    if c["mode"] == "spin" and m["state"]["capacity"] != c["slots"]:
        raise RuntimeError(f"{d}/manifest.json: capacity {m['state']['capacity']}, "
                           f"expected {c['slots']}")
    max_rows = m["state"].get(gpu_artifacts.abi.KEY["MaxRows"]) if c["mode"] == "spin" else None
    if c["mode"] == "spin" and max_rows != c["rows"]:
        raise RuntimeError(f"{d}/manifest.json: state rows {max_rows}, expected {c['rows']}")
    return m


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__ or "benchmark artifacts",
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=os.path.join(ROOT, "bench-artifacts"),
                   help="output directory (default: bench-artifacts/)")
    p.add_argument("--compiler", default=os.path.join(ROOT, "build", "bin", "spin-compile"))
    p.add_argument("--target", default="sm_90a", help="chips for spin-compile (default sm_90a)")
    p.add_argument("--minimum", action="store_true",
                   help="only issue 5's minimum configurations (= --set minimum)")
    p.add_argument("--set", default="all", choices=SETS,
                   help="all (default); minimum: issue 5's minimum; mtp: what issue 26's "
                        "minimums need (MTP rows, fp8 queries, DeepGEMM shapes)")
    p.add_argument("--max-mb", type=float, default=58.0,
                   help="size budget of the artifact tree; above it the whole set is "
                        "pruned to --minimum (default 58: the whole set is about "
                        "54 MB of sm_90a PTX, the mtp set 3.3 MB; the tree carried to "
                        "the GPU machine holds 64 MiB with the sources, so the whole set "
                        "leaves no room for third_party/DeepGEMM's 32 MB)")
    p.add_argument("--only", default="", help="substring filter on configuration names")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    p.add_argument("--force", action="store_true", help="recompile everything")
    p.add_argument("--list", action="store_true", help="print the configurations and exit")
    p.add_argument("--no-wgmma", action="store_true",
                   help="pass --no-wgmma to spin-compile (mma.sync scoring on sm_90a)")
    p.add_argument("--flag", action="append", default=[], metavar="OPTION",
                   help="an extra spin-compile option for every configuration, "
                        "e.g. --flag=--tiles-per-warp=32 (repeatable; for experiments)")
    args = p.parse_args(argv)
    flags = (("--no-wgmma",) if args.no_wgmma else ()) + tuple(args.flag)

    if args.minimum:
        if args.set not in ("all", "minimum"):
            p.error("--minimum is --set minimum")
        args.set = "minimum"
    configs = all_configs()
    if args.set != "all":
        configs = [c for c in configs if args.set in c["sets"]]
    if args.only:
        configs = [c for c in configs if args.only in c["name"]]
    if args.list:
        for c in configs:
            print(c["name"], " ".join(f"({x})" for x in c["sets"] if x != "all"))
        print(f"{len(configs)} configurations")
        return 0
    if not os.access(args.compiler, os.X_OK) or os.path.getsize(args.compiler) == 0:
        sys.exit(f"bench_artifacts.py: {args.compiler} is not an executable "
                 "(build spin-compile first)")

    os.makedirs(args.out, exist_ok=True)
    wanted = {c["name"] for c in configs}
    for entry in os.listdir(args.out):   # stale artifacts would travel too
        path = os.path.join(args.out, entry)
        if os.path.isdir(path) and entry not in wanted:
            shutil.rmtree(path)

    t0 = time.time()
    done = 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = [pool.submit(build_one, c, args.compiler, args.out, args.target, args.force,
                               flags)
                   for c in configs]
        for fut in concurrent.futures.as_completed(futures):
            c, what, dt = fut.result()
            done += 1
            print(f"[{done}/{len(configs)}] {c['name']}: {what}"
                  + (f" ({dt:.1f} s)" if dt else ""), flush=True)

    total = 0
    for c in configs:
        d = os.path.join(args.out, c["name"])
        m = check_manifest(c, d)
        c["dir"] = c["name"]
        c["bytes"] = dir_bytes(d)
        c["kernels"] = [k["name"] for k in m["kernels"]]
        total += c["bytes"]
    pruned = False
    if total > args.max_mb * 1e6 and args.set == "all":
        keep = [c for c in configs if c["minimum"]]
        for c in configs:
            if not c["minimum"]:
                shutil.rmtree(os.path.join(args.out, c["name"]))
        print(f"{total / 1e6:.1f} MB is over the {args.max_mb:g} MB budget: pruned to the "
              f"issue's minimum ({len(keep)} of {len(configs)} configurations)")
        configs, pruned = keep, True
        total = sum(c["bytes"] for c in configs)

    compiler_version = json.load(open(os.path.join(args.out, configs[0]["name"],
                                                   "manifest.json")))["compiler_version"]
    # The commit, marked "+dirty" when tracked files differ from it (the
    # compiler hash in each manifest names the exact sources).
    git = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty=+dirty"],
                         capture_output=True, text=True).stdout.strip()
    index = {
        "format": "spin-bench-artifacts", "version": 1,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "git": git, "compiler_version": compiler_version, "target": args.target,
        "heads": H, "head_dim": DH, "page": PAGE,
        "pruned_to_minimum": pruned or args.set == "minimum",
        "set": "minimum" if pruned else args.set,
        "configs": configs,
    }
    with open(os.path.join(args.out, "index.json"), "w") as f:
        json.dump(index, f, indent=1)
    print(f"{len(configs)} artifacts, {total / 1e6:.1f} MB in {args.out} "
          f"({time.time() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
