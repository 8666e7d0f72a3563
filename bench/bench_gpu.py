#!/usr/bin/env python3
#===- bench/bench_gpu.py - time the GPU artifacts on the H200 --------------===#
#
# Runs on the GPU machine (python3 with torch; spin from the runtime-only
# build: PYTHONPATH=build-gpu/python; no MLIR), over the artifacts that
# bench/bench_artifacts.py compiled into bench-artifacts/. Per configuration:
#
#   * our dense step (score + top-K), the dense scoring alone (a graph that
#     returns the scores) and our SPIN step at each target
#     sparsity in steady state (the request's state warmed: a warm-up step,
#     then eager steps, so `it > 0` and the step is predict + select + sparse
#     score + top-K + EMA update), each captured in CUDA graphs (one per input
#     set) and timed by replays; the direct Python call is timed too;
#   * the torch eager reference on the same shapes;
#   * a device-to-device copy bandwidth, the denominator of "of copy";
#   * byte floors and a sanity guard of the outputs (not a correctness test);
#   * fp8 e4m3 queries beside bf16 ones (fp8 keys; -qfp8 configurations),
#     and MTP verification steps of R query rows: SPIN's R-row steps commit
#     the accepted drafts of the step before (state.commit, 0..R-1 per
#     request, varying over the batch and from step to step, as in
#     decoding; the rows then grow by accepted + 1);
#   * DeepGEMM's fp8_fp4_paged_mqa_logits where it is importable (--deepgemm
#     DIR, $DEEPGEMM_DIR, or third_party/DeepGEMM; bench/build_deepgemm.sh
#     builds it), at the shapes of the fp8-key scoring-alone configurations,
#     fed the same keys, queries (as fp8), weights, lengths and block tables;
#     R = 4 as two next_n = 2 calls. Without it: "not measured".
#
# Timing: CUDA events around each repetition, the L2 (60 MB) flushed before
# each one by zeroing a 256 MiB buffer (as triton.testing.do_bench does);
# --sets input sets, torch's calls rotated among them, our steps' CUDA graphs
# (one per set) each replayed back to back and the repetitions pooled (the
# graphs replayed in turn are reported too), and as decoding steps (set 0's
# graph with the rows growing by one slot before every replay, outside the
# timed window: Bench.decode_timing); warm-up first; the median is reported
# with the 20th/80th percentiles.
#
#   PYTHONPATH=build-gpu/python python3 bench/bench_gpu.py [--out DIR]
#   bench/bench_gpu.py --list           the planned runs and an estimate of
#                                       their device time (no GPU needed)
#   bench/bench_gpu.py --set mtp        only issue 26's set (bench_artifacts.py
#                                       --set mtp builds just that)
#
# Results: DIR/bench-results.json (written after every configuration, so a
# run cut short keeps what it measured) and DIR/bench-results.md; DIR is $OUT
# if set, else the current directory. bench/render_benchmarks.py turns the JSON
# into docs/benchmarks.md.
#
#===----------------------------------------------------------------------===#

import argparse
import faulthandler
import gc
import hashlib
import json
import os
import platform
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import render_benchmarks as render  # noqa: E402  (pure Python tables)

FLUSH_BYTES = 256 << 20        # > 4x the H200's 60 MB L2
COPY_BYTES = 4 << 30           # the copy-bandwidth tensor
HEADS, HEAD_DIM, PAGE = 64, 128, 64
FIRST_REQUEST_ID = 1000
DEVICE = "cuda"
# Decoding steps (Bench.decode_timing) start this many slots below N and
# take at most this many steps, so that the rows never outgrow the cache.
DECODE_HEADROOM = 2048
# The scoring alone (graphs that return the scores) against the f32
# reference: the largest difference over the row's largest score (bf16
# queries and keys multiply exactly into f32 MMA accumulators; only the
# summation order differs).
SCORES_MAX_ERROR = 1e-4
# With fp8 queries (e4m3 MMAs) the tolerance of gpu_check.py's fp8 inputs.
SCORES_MAX_ERROR_FP8Q = 1e-3
# DeepGEMM's logits against the same f32 reference: a guard that it was fed
# the same data (a wrong layout gives errors of order 1), not a study of its
# accumulation.
DEEPGEMM_MAX_ERROR = 1e-2
# DeepGEMM's paged MQA logits on sm_90 take at most this many rows per call.
DEEPGEMM_MAX_NEXT_N = 2
# The run-time estimate of --list (Bench.estimate): per artifact, what is
# not a timed measurement (load, inputs, eager steps, capture, checks):
# 0.45 s, from the 2026-12-01 run (203 s for 168 artifacts); DeepGEMM's
# first call per kernel (next_n = 1, next_n = 2, the schedule metadata)
# JIT-compiles: a guess of 15 s each; the copy bandwidth and the group
# inputs: a few seconds.
EST_CONFIG_OVERHEAD_S = 0.45
EST_DEEPGEMM_JIT_S = 15.0
EST_FIXED_S = 5.0
SETS = ("all", "minimum", "mtp")


def q_format_of(c):
    """The queries' format of a configuration or result ("bf16" for those
    from before fp8 queries)."""
    return c.get("q_format") or "bf16"


def accepted_pattern(batch, rows, j):
    """The accepted draft counts of the MTP commit before a step that uses
    pattern j: request i accepts (i + j) % R drafts, so that every count
    0..R-1 occurs in every step and each request's count changes from step
    to step."""
    return [(i + j) % rows for i in range(batch)]


def runtime_sources(root=ROOT):
    """A hash of the sources the GPU machine builds the runtime from
    (runtime/ and python/, C++ and Python files): the artifacts' git commit
    names the compiler, this names the runtime that ran them."""
    h = hashlib.sha256()
    for top in ("runtime", "python"):
        for dirpath, dirnames, filenames in sorted(os.walk(os.path.join(root, top))):
            dirnames.sort()
            for name in sorted(filenames):
                if name.endswith((".cpp", ".h", ".py", ".txt")) and "__pycache__" not in dirpath:
                    path = os.path.join(dirpath, name)
                    h.update(os.path.relpath(path, root).encode() + b"\0")
                    with open(path, "rb") as f:
                        h.update(f.read() + b"\0")
    return h.hexdigest()


def percentile(values, f):
    """The value at fraction f of the sorted values (nearest rank)."""
    values = sorted(values)
    return values[min(len(values) - 1, int(round(f * (len(values) - 1))))]


def die(message):
    sys.exit(f"bench_gpu.py: {message}")


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description="Time the benchmark artifacts (bench-artifacts/) on a CUDA GPU: our dense "
                    "and SPIN steps, torch eager, copy bandwidth, byte floors.")
    p.add_argument("--artifacts", default=os.path.join(ROOT, "bench-artifacts"),
                   help="directory written by bench/bench_artifacts.py (default: %(default)s)")
    p.add_argument("--out", default=os.environ.get("OUT") or ".",
                   help="directory for bench-results.json/.md (default: $OUT if set, "
                        "else the current directory)")
    p.add_argument("--budget-s", type=float, default=450.0,
                   help="stop starting configurations after this many seconds (default 450)")
    p.add_argument("--sets", type=int, default=3, help="input sets to rotate among (default 3)")
    p.add_argument("--warmup-ms", type=float, default=20.0)
    p.add_argument("--rep-ms", type=float, default=100.0,
                   help="time spent in timed repetitions per measurement (default 100)")
    p.add_argument("--min-reps", type=int, default=10)
    p.add_argument("--max-reps", type=int, default=1000)
    p.add_argument("--steps", type=int, default=4,
                   help="eager SPIN steps before timing, the first a warm-up (default 4)")
    p.add_argument("--only", default="",
                   help="comma-separated substrings: run configurations whose name has one")
    p.add_argument("--set", default="all", choices=SETS,
                   help="the configurations of one set of bench_artifacts.py: all (default: "
                        "every artifact of the index), minimum (issue 5), mtp (issue 26: "
                        "MTP rows, fp8 queries, DeepGEMM)")
    p.add_argument("--deepgemm", default=None, metavar="DIR",
                   help="DeepGEMM's source tree, built (bench/build_deepgemm.sh), to import "
                        "deep_gemm from (default: $DEEPGEMM_DIR, else third_party/DeepGEMM "
                        "if it exists); when it cannot be imported DeepGEMM is 'not measured'")
    p.add_argument("--no-deepgemm", action="store_true", help="do not measure DeepGEMM")
    p.add_argument("--no-torch", action="store_true",
                   help="skip the torch eager reference (our steps and DeepGEMM only)")
    p.add_argument("--no-call", action="store_true",
                   help="skip timing the direct Python call (graph replays only)")
    p.add_argument("--no-recall", action="store_true",
                   help="skip the dense top-K overlap with an f32 torch reference")
    p.add_argument("--config-timeout-s", type=float, default=120.0,
                   help="abort the process if one configuration hangs this long (default 120)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--list", action="store_true",
                   help="print the planned runs and exit (no GPU needed)")
    args = p.parse_args(argv)
    if args.sets < 1:
        p.error("--sets must be >= 1")
    if args.deepgemm is None:
        args.deepgemm = os.environ.get("DEEPGEMM_DIR") or ""
        default = os.path.join(ROOT, "third_party", "DeepGEMM")
        if not args.deepgemm and os.path.isdir(default):
            args.deepgemm = default
    return args


#===------------------------------------------------------------------------===#
# The plan (no GPU)
#===------------------------------------------------------------------------===#

def load_index(path):
    index_path = os.path.join(path, "index.json")
    if not os.path.exists(index_path):
        die(f"{index_path} does not exist: run bench/bench_artifacts.py on the build machine "
            "and carry bench-artifacts/")
    with open(index_path) as f:
        index = json.load(f)
    if index.get("format") != "spin-bench-artifacts":
        die(f"{index_path} is not a bench_artifacts.py index")
    for c in index["configs"]:
        if not os.path.exists(os.path.join(path, c["dir"], "manifest.json")):
            die(f"{path}/{c['dir']}/manifest.json is missing (re-run bench_artifacts.py)")
    return index


def configuration(artifacts, name):
    """Configuration `name` of the artifacts' index; exits naming the ones
    there are when it has none."""
    by_name = {c["name"]: c for c in load_index(artifacts)["configs"]}
    if name not in by_name:
        sys.exit(f"error: no configuration {name!r} in {artifacts}/index.json "
                 f"(have: {', '.join(sorted(by_name))})")
    return by_name[name]


def group_priority(fmt, batch, slots, set_name="all"):
    """The issue's minimum configurations first (fp8 before bf16; the
    headline 16 x 128K first of all), so that a run cut short by the budget
    or a device fault keeps the numbers that matter. In the mtp set, issue
    26's main shapes first and the 16 x 128K reference row last."""
    if set_name == "mtp":
        order = [(16, 262144), (96, 131072), (12, 131072), (16, 131072)]
    else:
        order = [(16, 131072), (16, 65536), (16, 262144), (1, 262144)]
    if (batch, slots) in order:
        return (0, fmt != "fp8", order.index((batch, slots)))
    return (1, fmt != "fp8", -batch, -slots)


def in_set(c, set_name):
    """Whether an index configuration belongs to bench_artifacts.py's set
    (indexes from before sets know "minimum" only)."""
    if set_name == "all":
        return True
    if "sets" in c:
        return set_name in c["sets"]
    return set_name == "minimum" and bool(c.get("minimum"))


def plan(index, only, set_name="all"):
    """[(group key, [configs])] in run order; a group shares its inputs."""
    filters = [s for s in only.split(",") if s]
    groups = {}
    for c in index["configs"]:
        if filters and not any(s in c["name"] for s in filters):
            continue
        if not in_set(c, set_name):
            continue
        groups.setdefault((c["format"], c["batch"], c["slots"]), []).append(c)

    def config_order(c):
        # bf16 queries first; R=1 before R=2 before R=4; per K: dense (which
        # SPIN is compared with), then SPIN at decreasing sparsity; the
        # scoring alone (K = 0) last.
        return (q_format_of(c) != "bf16", c["rows"], -c["k"], c["mode"] != "dense",
                -c["sparsity"])

    return [(key, sorted(groups[key], key=config_order))
            for key in sorted(groups, key=lambda k: group_priority(*k, set_name))]


def deepgemm_rows(fmt, configs):
    """The row counts at which DeepGEMM's logits are measured in a group: those
    of its fp8-key scoring-alone configurations (the same work)."""
    if fmt != "fp8":
        return []
    return sorted({c["rows"] for c in configs if c["mode"] == "scores"})


def deepgemm_calls(rows):
    """DeepGEMM calls (row ranges) for R rows: next_n <= 2 per call on sm_90,
    so R = 4 is two next_n = 2 calls."""
    return [(lo, min(rows, lo + DEEPGEMM_MAX_NEXT_N))
            for lo in range(0, rows, DEEPGEMM_MAX_NEXT_N)]


def key_bytes_per_slot(fmt):
    return HEAD_DIM * (1 if fmt == "fp8" else 2) + (4 if fmt == "fp8" else 0)


def floor_bytes(c, realized_sparsity=None):
    """The fewest bytes a step must move: dense reads every visible key (and
    its scale); SPIN reads the selected keys, 8 B per slot to predict (V[i]
    and D[p-i], f32) and read-modify-writes V and D on scored slots (16 B)."""
    per_key = key_bytes_per_slot(c["format"])
    slots = c["batch"] * c["slots"]
    if c["mode"] != "spin":
        return slots * per_key, float(per_key)
    kept = 1.0 - (c["sparsity"] if realized_sparsity is None else realized_sparsity)
    per_slot = kept * per_key + 8.0 + 16.0 * kept
    return slots * per_slot, per_slot


def expected_sparsity(slots, k, rho):
    """SPIN_SPEC.md §3 step 4: the block budget at N = slots, as realized
    block sparsity (1 - m/B)."""
    from spin import abi  # the runtime's rule, not a copy (imported by now)
    blocks = -(-slots // PAGE)
    return 1.0 - abi.block_budget(blocks, PAGE, k, rho) / blocks


def print_plan(groups, args=None):
    n = 0
    for (fmt, b, slots), configs in groups:
        print(f"group {fmt} B={b} N={slots}: " + ", ".join(c["name"] for c in configs))
        dg = deepgemm_rows(fmt, configs)
        if dg and not (args and args.no_deepgemm):
            print("  + DeepGEMM fp8_fp4_paged_mqa_logits at R = "
                  + ", ".join(f"{r}" + (f" ({len(deepgemm_calls(r))} next_n=2 calls)"
                                        if len(deepgemm_calls(r)) > 1 else "") for r in dg))
        n += len(configs)
    torch_note = "" if args and args.no_torch else " (+ torch eager per group, R and K)"
    print(f"{n} artifacts in {len(groups)} input groups{torch_note}")
    if args is not None:
        est = estimate(groups, args)
        print(f"estimated device time of bench_gpu.py: {est['total_s']:.0f} s "
              f"({est['ours_s']:.0f} s our steps, {est['torch_s']:.0f} s torch eager, "
              f"{est['deepgemm_s']:.0f} s DeepGEMM incl. {est['jit_s']:.0f} s of first-call JIT, "
              f"{est['fixed_s']:.0f} s copy bandwidth and inputs); not counted: the runtime "
              "build (scripts/gpu-runtime-build) and DeepGEMM's build (about 80 s, "
              "bench/build_deepgemm.sh; run_bench.sh overlaps the two)")


def estimate(groups, args):
    """The device time of a run of `groups`, from the repetition counts: a
    timed measurement runs about rep_ms plus warmup_ms per run of
    repetitions (Timer.times bounds the repetitions by rep_ms over the
    step's time, and min_reps is reached within rep_ms for any step under
    rep_ms / min_reps); each artifact has EST_CONFIG_OVERHEAD_S more."""
    s = args.sets
    one = (args.rep_ms + args.warmup_ms) / 1e3          # Timer.__call__
    each = (args.rep_ms + s * args.warmup_ms) / 1e3     # Timer.each over the sets
    ours = torch_s = dg = 0.0
    jit = set()
    for (fmt, _, _), configs in groups:
        torch_keys = set()
        for c in configs:
            t = 2 * each + one                       # each, repeat, rotating
            t += 0 if args.no_call else one          # the direct call
            t += 0 if c["mode"] == "scores" else one  # decoding steps
            ours += t + EST_CONFIG_OVERHEAD_S
            if not args.no_torch:
                torch_keys.add((c["rows"], 0 if c["mode"] == "scores" else c["k"]))
        rows_seen = {r for r, _ in torch_keys}
        # torch: indexer + top-K per (R, K), indexer alone per R.
        torch_s += one * (len([k for k in torch_keys if k[1]]) + len(rows_seen))
        if not args.no_deepgemm:
            for r in deepgemm_rows(fmt, configs):
                dg += 3 * each + one + 0.3    # eager, graphs, rotating; check
                jit.update(hi - lo for lo, hi in deepgemm_calls(r))
                if not args.no_torch:
                    dg += one                  # + torch.topk
    jit_s = (len(jit) + 1) * EST_DEEPGEMM_JIT_S if jit else 0.0   # + the metadata kernel
    fixed = EST_FIXED_S + 0.3 + len(groups) * 1.0
    total = ours + torch_s + dg + jit_s + fixed
    return {"total_s": total, "ours_s": ours, "torch_s": torch_s, "deepgemm_s": dg + jit_s,
            "jit_s": jit_s, "fixed_s": fixed}


#===------------------------------------------------------------------------===#
# On the GPU
#===------------------------------------------------------------------------===#

def require_gpu(args):
    try:
        import torch
    except ImportError as e:
        die(f"needs PyTorch with CUDA ({e}); run it on the GPU machine: bash bench/run_bench.sh")
    if not torch.cuda.is_available():
        die("needs a CUDA GPU: torch.cuda.is_available() is False on this machine "
            "(run it on the H200: bash bench/run_bench.sh)")
    try:
        import spin
    except ImportError as e:
        die(f"cannot import spin ({e}): set PYTHONPATH=build-gpu/python "
            "(scripts/gpu-runtime-build builds it)")
    if not hasattr(spin, "load"):
        die(f"the spin module at {spin.__file__} has no CUDA API (spin.load)")
    return torch, spin


class Timer:
    """Median of CUDA-event-timed repetitions with the L2 flushed before each
    (triton.testing.do_bench's method, with percentiles and a rep count)."""

    def __init__(self, torch, args):
        self.torch = torch
        self.args = args
        self.flush_buf = torch.empty(FLUSH_BYTES, dtype=torch.int8, device=DEVICE)

    def __call__(self, fn, rep_ms=None, flush=True, min_reps=None, prepare=None,
                 max_calls=None):
        return self.summary(self.times(fn, rep_ms, flush, min_reps, prepare, max_calls))

    def each(self, fns):
        """Each of fns timed in its own run of repetitions (the same CUDA
        graph replayed back to back, as a serving loop replays its decode
        step's graph), the repetitions of all pooled into one summary."""
        rep_ms = self.args.rep_ms / len(fns)
        min_reps = max(1, -(-self.args.min_reps // len(fns)))
        times = []
        for fn in fns:
            times += self.times(fn, rep_ms, True, min_reps)
        return self.summary(times)

    def times(self, fn, rep_ms=None, flush=True, min_reps=None, prepare=None,
              max_calls=None):
        """The times of repetitions of fn. `prepare`, if given, runs before
        every call of fn, outside the timed window; `max_calls` bounds the
        calls of fn (warm-up included)."""
        torch, args = self.torch, self.args
        rep_ms = args.rep_ms if rep_ms is None else rep_ms
        min_reps = args.min_reps if min_reps is None else min_reps

        def call():
            if prepare is not None:
                prepare()
            fn()

        call()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(3):
            if flush:
                self.flush_buf.zero_()
            call()
        end.record()
        torch.cuda.synchronize()
        estimate = max(start.elapsed_time(end) / 3, 1e-3)
        warm = max(1, int(args.warmup_ms / estimate))
        reps = min(args.max_reps, max(min_reps, int(rep_ms / estimate)))
        if max_calls is not None:
            warm = min(warm, max(1, (max_calls - 4) // 4))
            reps = max(1, min(reps, max_calls - 4 - warm))
        for _ in range(warm):
            call()
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        for i in range(reps):
            if flush:
                self.flush_buf.zero_()
            if prepare is not None:
                prepare()
            starts[i].record()
            fn()
            ends[i].record()
        torch.cuda.synchronize()
        return [s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends)]

    @staticmethod
    def summary(times):
        return {"median_us": statistics.median(times), "p20_us": percentile(times, 0.2),
                "p80_us": percentile(times, 0.8), "min_us": min(times), "reps": len(times)}


def deepgemm_name(batch, slots, rows):
    return f"fp8-b{batch}-n{slots // 1024}k-r{rows}-deepgemm"


class DeepGemm:
    """deep_gemm, imported from a DeepGEMM source tree that
    bench/build_deepgemm.sh built (its extension linked into deep_gemm/),
    or the reason it is not measured. Nothing here raises."""

    NEEDED = ("fp8_fp4_paged_mqa_logits", "get_paged_mqa_logits_metadata", "get_num_sms")

    def __init__(self, torch, args):
        self.torch = torch
        self.path = os.path.abspath(args.deepgemm) if args.deepgemm else ""
        self.available, self.version, self.reason, self.dg = False, None, None, None
        if args.no_deepgemm:
            self.reason = "--no-deepgemm"
            return
        if not self.path:
            self.reason = ("no DeepGEMM tree (--deepgemm DIR, $DEEPGEMM_DIR or "
                           "third_party/DeepGEMM)")
            return
        if not os.path.isdir(os.path.join(self.path, "deep_gemm")):
            self.reason = f"{self.path} has no deep_gemm/ package"
            return
        try:
            if self.path not in sys.path:
                sys.path.insert(0, self.path)
            import deep_gemm  # noqa: PLC0415 - optional, from --deepgemm DIR
            missing = [f for f in self.NEEDED if not hasattr(deep_gemm, f)]
            if missing:
                self.reason = f"deep_gemm at {deep_gemm.__file__} lacks {', '.join(missing)}"
                return
            self.dg = deep_gemm
            self.version = getattr(deep_gemm, "__version__", "?")
            self.available = True
        except Exception as e:  # noqa: BLE001
            self.reason = (f"import deep_gemm from {self.path} failed ({type(e).__name__}: "
                           f"{str(e)[:300]}); build it with bash bench/build_deepgemm.sh")

    @classmethod
    def required(cls, torch, path):
        """deep_gemm from the tree at `path`, for a tool that measures
        nothing without it: exits saying why it is not available."""
        dg = cls(torch, argparse.Namespace(deepgemm=path, no_deepgemm=False))
        if not dg.available:
            sys.exit(f"error: DeepGEMM not available: {dg.reason}")
        return dg

    def info(self):
        out = {"available": self.available, "path": self.path, "version": self.version,
               "reason": self.reason}
        if self.available:
            try:
                out["num_sms"] = int(self.dg.get_num_sms())
            except Exception as e:  # noqa: BLE001
                out["num_sms_error"] = str(e)[:200]
        return out

    def step(self, s, rows):
        """A function issuing DeepGEMM's calls for input set s at R rows
        (deepgemm_calls: R = 4 is two next_n = 2 calls) and returning their
        logits ([B * next_n, N] f32 each): fp8 queries (s.query(rows,
        "fp8"), as ours), f32 weights [B * next_n, H], context_lens 2-D
        [B, next_n] (the rows' lengths), the set's block table, and the
        set's keys and scales in DeepGEMM's layout. The schedule metadata is
        computed here, once, outside the timed calls (a server computes it
        once per step for all layers)."""
        torch, dg = self.torch, self.dg
        q8 = s.query(rows, "fp8")
        _, w, lengths = s.rows[rows]
        cache, table, b, n = s.deepgemm_cache(), s.block_table, s.batch, s.slots
        num_sms = dg.get_num_sms()
        parts = []
        for lo, hi in deepgemm_calls(rows):
            lens = lengths[:, lo:hi].contiguous()
            parts.append(dict(q=(q8[:, lo:hi].contiguous(), None),
                              weights=w[:, lo:hi].reshape(b * (hi - lo), HEADS).contiguous(),
                              context_lens=lens,
                              schedule_meta=dg.get_paged_mqa_logits_metadata(lens, PAGE, num_sms)))

        def fn():
            return [dg.fp8_fp4_paged_mqa_logits(kv_cache=cache, block_table=table,
                                                max_context_len=n, clean_logits=False,
                                                logits_dtype=torch.float, **p) for p in parts]
        return fn


class Rotate:
    """Calls fns[0], fns[1], ... in turn: each call uses the next input set."""

    def __init__(self, fns):
        self.fns = fns
        self.i = 0

    def __call__(self):
        fn = self.fns[self.i]
        self.i = (self.i + 1) % len(self.fns)
        return fn()


def machine_info(torch):
    props = torch.cuda.get_device_properties(0)
    info = {"gpu": props.name, "sms": props.multi_processor_count,
            "memory_gib": round(props.total_memory / 2**30, 1),
            "capability": f"{props.major}.{props.minor}",
            "torch": torch.__version__, "cuda": torch.version.cuda,
            "python": platform.python_version(), "host": platform.node()}
    l2 = getattr(props, "L2_cache_size", None)
    if l2:
        info["l2_mb"] = round(l2 / 1e6, 1)
    try:
        import triton
        info["triton"] = triton.__version__
    except Exception:  # noqa: BLE001 - informational only
        pass
    try:
        import subprocess
        smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,clocks.sm,clocks.max.sm,"
                              "clocks.mem,power.limit,temperature.gpu",
                              "--format=csv,noheader"], capture_output=True, text=True, timeout=20)
        if smi.returncode == 0:
            fields = [s.strip() for s in smi.stdout.splitlines()[0].split(",")]
            info["driver"] = fields[0]
            info["nvidia_smi"] = dict(zip(["driver", "clocks.sm", "clocks.max.sm", "clocks.mem",
                                           "power.limit", "temperature.gpu"], fields))
    except Exception:  # noqa: BLE001
        pass
    return info


def copy_bandwidth(torch, timer):
    x = torch.empty(COPY_BYTES // 4, dtype=torch.float32, device=DEVICE).uniform_()
    t = timer(x.clone, rep_ms=300, flush=False, min_reps=10)
    x = None
    torch.cuda.empty_cache()
    gbps = 2 * COPY_BYTES / (t["median_us"] * 1e-6) / 1e9
    return dict(t, bytes=COPY_BYTES, gbps=gbps)


class InputSet:
    """One set of step inputs for a (keys format, B, N) group: a key cache of
    exactly B*N/64 pages, a block table that is a random permutation of them,
    and queries/weights/lengths per row count R. fp8 queries are the bf16
    ones rounded to e4m3 (made when first asked for: the random draws, and
    so the bf16-query inputs, are those from before fp8 queries)."""

    def __init__(self, torch, fmt, batch, slots, rows_list, gen):
        dev = DEVICE
        self.torch, self.fmt, self.batch, self.slots = torch, fmt, batch, slots
        pages = batch * slots // PAGE
        keys = torch.randn(pages, PAGE, HEAD_DIM, dtype=torch.bfloat16, device=dev, generator=gen)
        if fmt == "fp8":
            self.keys = keys.to(torch.float8_e4m3fn)
            del keys
            self.scales = torch.rand(pages, PAGE, device=dev, generator=gen) * 0.02 + 0.01
        else:
            self.keys, self.scales = keys, None
        self.block_table = torch.randperm(pages, device=dev, generator=gen).to(
            torch.int32).view(batch, slots // PAGE).contiguous()
        self.rows = {}
        for r in rows_list:
            q = torch.randn(batch, r, HEADS, HEAD_DIM, dtype=torch.bfloat16, device=dev,
                            generator=gen)
            w = torch.randn(batch, r, HEADS, device=dev, generator=gen)
            # Row r of an R-row (MTP verification) step sees N - (R-1-r) slots.
            lengths = (slots - (r - 1) + torch.arange(r, device=dev, dtype=torch.int32)
                       ).expand(batch, r).contiguous()
            self.rows[r] = (q, w, lengths)
        self.q8 = {}
        self._deepgemm_cache = None

    def query(self, rows, q_format="bf16"):
        """The queries [B, R, H, Dh] in q_format ("bf16" or "fp8": e4m3)."""
        q = self.rows[rows][0]
        if q_format == "bf16":
            return q
        if q_format != "fp8":
            raise ValueError(f"queries in {q_format!r}: expected bf16 or fp8")
        if self.fmt != "fp8":
            raise ValueError("fp8 queries need fp8 keys")
        if rows not in self.q8:
            self.q8[rows] = q.to(self.torch.float8_e4m3fn)
        return self.q8[rows]

    def step_inputs(self, rows, q_format="bf16"):
        _, w, lengths = self.rows[rows]
        inputs = {"q": self.query(rows, q_format), "w": w, "keys": self.keys,
                  "block_table": self.block_table, "lengths": lengths}
        if self.scales is not None:
            inputs["scales"] = self.scales
        return inputs

    def deepgemm_cache(self):
        """The same keys and scales in DeepGEMM's paged layout: uint8
        [pages, 64, 1, 128 + 4], each page 64 x 128 e4m3 values, then its 64
        f32 scales (built once; a copy: DeepGEMM reads it, we read ours)."""
        if self._deepgemm_cache is None:
            torch = self.torch
            pages = self.keys.shape[0]
            cache = torch.empty(pages, PAGE * (HEAD_DIM + 4), dtype=torch.uint8,
                                device=self.keys.device)
            cache[:, :PAGE * HEAD_DIM] = self.keys.view(torch.uint8).reshape(pages, -1)
            cache[:, PAGE * HEAD_DIM:] = self.scales.contiguous().view(torch.uint8).reshape(
                pages, -1)
            self._deepgemm_cache = cache.view(pages, PAGE, 1, HEAD_DIM + 4)
        return self._deepgemm_cache

    def contiguous_keys(self):
        """The cache read as [B, N, Dh] without the block table (torch eager's
        input: no gather)."""
        keys = self.keys.view(self.batch, self.slots, HEAD_DIM)
        scales = None if self.scales is None else self.scales.view(self.batch, self.slots)
        return keys, scales

    def gathered_keys(self, lo=0, hi=None):
        """The cache gathered through the block table, [B, N, Dh] (for the
        reference top-K of the sanity guard); requests lo..hi-1 only if
        given."""
        hi = self.batch if hi is None else hi
        idx = self.block_table[lo:hi].reshape(-1).long()
        raw = self.keys.view(self.torch.uint8) if self.fmt == "fp8" else self.keys
        keys = raw[idx].view(self.keys.dtype).reshape(hi - lo, self.slots, HEAD_DIM)
        scales = None if self.scales is None else self.scales[idx].reshape(hi - lo, self.slots)
        return keys, scales


def torch_scores(torch, q, w, keys, scales):
    """torch eager indexer: einsum(q, k) -> ReLU -> * w -> sum over heads
    (-> * per-slot scale for fp8, whose keys are upcast to bf16 first);
    equal to sum_h w*ReLU(q.k*scale) since scales are positive."""
    k = keys if keys.dtype == torch.bfloat16 else keys.to(torch.bfloat16)
    s = torch.einsum("brhd,bnd->brhn", q, k)
    z = (s.relu_() * w.unsqueeze(-1)).sum(dim=2)
    if scales is not None:
        z = z * scales.unsqueeze(1)
    return z


# reference_scores' f32 intermediate [b, R, H, N] per chunk of requests.
REFERENCE_CHUNK_BYTES = 2 << 30


def reference_scores(torch, s, rows, q_format="bf16"):
    """The f32 indexer through the block table, slots beyond each row's
    length at -inf (for the sanity guard's reference top-K), from the
    queries in q_format; computed a few requests at a time."""
    _, w, lengths = s.rows[rows]
    q = s.query(rows, q_format)
    out = torch.empty(s.batch, rows, s.slots, dtype=torch.float32, device=w.device)
    chunk = max(1, REFERENCE_CHUNK_BYTES // (rows * HEADS * s.slots * 4))
    pos = torch.arange(s.slots, device=w.device)
    for lo in range(0, s.batch, chunk):
        hi = min(s.batch, lo + chunk)
        keys, scales = s.gathered_keys(lo, hi)
        z = torch.einsum("brhd,bnd->brhn", q[lo:hi].float(), keys.float())
        z = (z.relu_() * w[lo:hi].unsqueeze(-1)).sum(dim=2)
        if scales is not None:
            z = z * scales.unsqueeze(1)
        out[lo:hi] = z.masked_fill(pos >= lengths[lo:hi].unsqueeze(-1), float("-inf"))
        del z, keys, scales
    return out


def overlap(torch, ours, ref):
    """Mean over rows of |ours ∩ ref| / K."""
    ours, ref = ours.long(), ref.long()
    b, r, k = ours.shape
    total = 0.0
    for i in range(b):
        for j in range(r):
            total += torch.isin(ours[i, j], ref[i, j]).float().mean().item()
    return total / (b * r)


def sanity(torch, topk, lengths, slots, k):
    """Problems with a top-K output: ids outside [0, length), -1 although
    N >= K, duplicates in a row. Not a correctness test."""
    t = topk.long()
    problems = []
    if (t < -1).any().item() or (t >= slots).any().item():
        problems.append("ids outside [-1, N)")
    if (t >= lengths.long().unsqueeze(-1)).any().item():
        problems.append("ids at or beyond the row's visible length")
    if slots >= k and (t == -1).any().item():
        problems.append("-1 padding although N >= K")
    srt = t.sort(dim=-1).values
    if ((srt[..., 1:] == srt[..., :-1]) & (srt[..., 1:] >= 0)).any().item():
        problems.append("duplicate ids in a row")
    return problems


def scores_sanity(torch, scores, lengths):
    """Problems with a returned score tensor [B, R, N]: entries below a row's
    length that are not finite, entries at or past it that are not -inf."""
    n = scores.shape[-1]
    past = torch.arange(n, device=scores.device) >= lengths.long().unsqueeze(-1)
    problems = []
    if not torch.isfinite(scores[~past]).all().item():
        problems.append("non-finite scores below the row's length")
    if not (scores[past] == float("-inf")).all().item():
        problems.append("scores past the row's length that are not -inf")
    return problems


def scores_error(torch, ours, ref):
    """The largest |ours - ref| over each row's largest |ref| (finite
    entries), over all rows."""
    finite = torch.isfinite(ref)
    diff = torch.where(finite, (ours.double() - ref.double()).abs(), 0.0)
    scale = torch.where(finite, ref.double().abs(), 0.0).amax(dim=-1, keepdim=True)
    return (diff / scale.clamp_min(1e-30)).amax().item()


def capture(torch, calls):
    """One CUDA graph per call, captured in turn (nothing replayed)."""
    graphs = []
    for call in calls:
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            call()
        graphs.append(g)
    torch.cuda.synchronize()
    return graphs


def capture_graphs(torch, program, calls):
    """One CUDA graph per call (input set) of a spin program; replayed once
    each before timing."""
    if program.captured_steps_left < len(calls):
        program.reserve_captured_steps(len(calls) - program.captured_steps_left)
    torch.cuda.synchronize()
    graphs = capture(torch, calls)
    for g in graphs:
        g.replay()
    torch.cuda.synchronize()
    return graphs


class Bench:
    def __init__(self, torch, spin, args, index):
        self.torch, self.spin, self.args, self.index = torch, spin, args, index
        self.timer = Timer(torch, args)
        self.t0 = time.time()
        self.results = []
        self.skipped = []
        self.dead = None          # the sticky CUDA error that ended the run
        self.deepgemm = None      # DeepGemm, when the plan measures it
        os.makedirs(args.out, exist_ok=True)
        self.json_path = os.path.join(args.out, "bench-results.json")
        self.md_path = os.path.join(args.out, "bench-results.md")
        self.doc = {
            "format": "spin-bench-results", "version": 1,
            "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "command": os.environ.get("SPIN_BENCH_COMMAND",
                                      "python3 " + " ".join(sys.argv)),
            "machine": machine_info(torch),
            "runtime_sources": runtime_sources(),
            "artifacts": {k: index.get(k) for k in ("git", "compiler_version", "target",
                                                    "created", "pruned_to_minimum")},
            "settings": {k: getattr(args, k, None) for k in ("sets", "warmup_ms", "rep_ms",
                                                             "min_reps", "max_reps", "steps",
                                                             "seed", "budget_s", "set",
                                                             "no_torch", "no_call")},
            "method": {"notes": [
                "Times are medians over repetitions timed with CUDA events; the L2 is "
                f"flushed before each repetition (a {FLUSH_BYTES >> 20} MiB zero fill); there "
                f"are {args.sets} input sets (each its own key cache, block table, queries), "
                "which torch's calls rotate among.",
                "Our steps are timed as CUDA-graph replays, one graph per input set, each "
                "graph replayed back to back (a serving engine replays the same captured "
                "decode step every step), the repetitions of all sets pooled; 'rotating' "
                "replays the graphs in turn instead (a different graph every repetition); "
                "'call' is the direct Python call (argument checks + launches), for "
                "reference.",
                "'decoding' times the graph of input set 0 back to back with the rows "
                f"starting {DECODE_HEADROOM} slots below N and growing by one slot before "
                "every replay (SPIN's positions too), outside the timed window: each SPIN "
                "step then finds the block scores that the step before predicted for it "
                "(the state's prediction cache), as in serving; the other columns repeat "
                "one position, where every SPIN step computes its prediction.",
                "'scoring alone' times a graph that returns the dense indexer's scores "
                "(no top-K; the work of DeepGEMM's logits kernel) in the same way; its "
                "output is checked against an f32 torch reference through the block table "
                "(input set 0) and for -inf past each row's length.",
                "SPIN is timed in steady state: a warm-up step (it = 0, dense), then "
                f"{args.steps - 1} eager steps, then the timed replays (each advances the "
                "state). positions = N-1, lengths = N (full cache), target sparsity from "
                "the artifact, exploration 0 (spin-compile's default).",
                "Block tables are random permutations of the cache's pages (B*N/64 pages, "
                "none shared).",
                "torch eager: einsum('brhd,bnd->brhn') in bf16 -> ReLU -> * w -> sum over "
                "heads (-> * per-slot scale for fp8, whose keys are upcast to bf16 inside "
                "the timed region), then torch.topk; it reads the cache contiguously as "
                "[B, N, Dh] (no block-table gather), which favours torch. R=4 rows ignore "
                "the per-row lengths (they differ by at most 3 slots).",
                "Byte floors: dense reads Dh*elem (+4 B scale for fp8) per visible slot; "
                "SPIN reads the selected keys (at the realized sparsity), 8 B per slot to "
                "predict (V and D, f32) and 16 B per scored slot for the EMA update's "
                "read-modify-write. 'of copy' = floor bytes / time / copy bandwidth; "
                "'x floor' is its inverse.",
                "recall vs torch: mean top-K overlap of our dense step with an f32 torch "
                "reference gathered through the block table (input set 0): a sanity "
                "guard, not an accuracy study (bf16 rounding reorders near-ties). SPIN's "
                "selection on random keys says nothing about its accuracy and is not "
                "compared.",
                "fp8 queries (configurations named -qfp8; fp8 keys): the bf16 queries of "
                "the same input set rounded to e4m3 and passed as torch.float8_e4m3fn; "
                "their f32 reference uses the rounded queries. torch eager has no fp8 "
                "einsum: its figures are those of the bf16 queries.",
                "MTP verification steps (R > 1 rows): row j of a request sees N - (R-1) + j "
                "slots at position N - R + j. A SPIN step after the first commits the "
                "accepted drafts of the step before (state.commit): request i accepts "
                "(i + j) % R drafts before a step of pattern j, so every count 0..R-1 "
                "occurs in every step. Input set j's CUDA graph is captured with "
                "pattern j % R (a captured step keeps its accepted counts); the decoding "
                "steps replay one graph of set 0 per pattern in turn, the rows and "
                "positions of each request growing by its accepted count + 1 before "
                "each replay. The rows score the union of their selections "
                "(SPIN_SPEC §4): the realized sparsity is the union's.",
                "DeepGEMM (where deep_gemm is importable): fp8_fp4_paged_mqa_logits with "
                "fp8 queries (the same e4m3 queries as ours), f32 weights, 2-D "
                "context_lens (each row's length), the same block tables, and the same "
                "keys and scales copied into its paged layout (uint8 [pages, 64, 1, "
                "132]: per page 64 x 128 e4m3 values, then 64 f32 scales); "
                "clean_logits=False, f32 logits; get_paged_mqa_logits_metadata once per "
                "input set, outside the timed calls. R = 4 is two next_n = 2 calls (rows "
                "0-1, rows 2-3; sm_90 takes next_n <= 2). Timed as ours (the same Timer, "
                "L2 flushed): eager calls (each set back to back, pooled; 'rotating' in "
                "turn) and the calls captured in CUDA graphs; the comparisons use the "
                "faster of the two. Its logits are checked against the f32 reference "
                "(input set 0). Its first call per kernel JIT-compiles (outside timing).",
            ]},
        }

    # -- bookkeeping ---------------------------------------------------------

    def elapsed(self):
        return time.time() - self.t0

    def write(self):
        self.doc["results"] = self.results
        self.doc["skipped"] = self.skipped
        self.doc["elapsed_s"] = self.elapsed()
        if self.dead:
            self.doc["aborted"] = self.dead
        tmp = self.json_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.doc, f, indent=1)
        os.replace(tmp, self.json_path)

    def write_markdown(self):
        with open(self.md_path, "w") as f:
            f.write(render.markdown(self.doc, title="Benchmark results"))

    def check_alive(self, error):
        """After an exception: is the CUDA context still usable?"""
        try:
            self.torch.cuda.synchronize()
        except Exception as e:  # noqa: BLE001
            self.dead = f"CUDA context unusable after: {error}; then: {e}"
            print(f"!! {self.dead}", flush=True)
            return False
        return True

    def log(self, text):
        print(f"[{self.elapsed():5.0f} s] {text}", flush=True)

    # -- measurements --------------------------------------------------------

    def derive(self, r):
        copy = self.doc["copy"]["gbps"]
        nbytes, per_slot = floor_bytes(r, r.get("realized_sparsity"))
        r["floor_bytes"] = nbytes
        r["floor_bytes_per_slot"] = per_slot
        if r.get("median_us"):
            r["floor_gbps"] = nbytes / (r["median_us"] * 1e-6) / 1e9
            r["fraction_of_copy"] = r["floor_gbps"] / copy
            r["times_floor"] = 1.0 / r["fraction_of_copy"]

    def run_torch(self, sets, fmt, b, n, rows, k, scores_us):
        torch = self.torch
        r = dict(name=f"{fmt}-b{b}-n{n // 1024}k-k{k}-r{rows}-torch", format=fmt, batch=b,
                 slots=n, k=k, rows=rows, mode="torch", sparsity=0.0)
        fns = []
        for s in sets:
            q, w, _ = s.rows[rows]
            keys, scales = s.contiguous_keys()
            fns.append(lambda q=q, w=w, keys=keys, scales=scales:
                       torch.topk(torch_scores(torch, q, w, keys, scales), k, dim=-1))
        r.update(self.timer(Rotate(fns)))
        r["scores_us"] = self.run_torch_scores(sets, rows) if scores_us is None else scores_us
        self.derive(r)
        return r

    def run_torch_scores(self, sets, rows):
        """torch eager's indexer alone (no top-K), median µs."""
        torch = self.torch
        fns = []
        for s in sets:
            q, w, _ = s.rows[rows]
            keys, scales = s.contiguous_keys()
            fns.append(lambda q=q, w=w, keys=keys, scales=scales:
                       torch_scores(torch, q, w, keys, scales))
        return self.timer(Rotate(fns))["median_us"]

    def run_ours(self, c, sets, ref_topk):
        torch, spin, args = self.torch, self.spin, self.args
        b, n, k, rows = c["batch"], c["slots"], c["k"], c["rows"]
        q_format = q_format_of(c)
        r = {key: c[key] for key in ("name", "format", "batch", "slots", "k", "rows", "mode",
                                     "sparsity")}
        r["q_format"] = q_format
        r["problems"] = []
        program = spin.load(os.path.join(args.artifacts, c["dir"]))
        r["chip"] = program.chip
        spin_mode = c["mode"] == "spin"
        mtp = spin_mode and rows > 1
        state, ids, positions = None, None, None
        inputs, outputs = [], []
        if spin_mode:
            state = program.new_state(slots=b)
            ids = [FIRST_REQUEST_ID + i for i in range(b)]
            for i in ids:
                state.add(i)
            # Row j of a request is at position length_j - 1 (N - R + j).
            positions = (sets[0].rows[rows][2] - 1).contiguous()
            request_ids = torch.tensor(ids, dtype=torch.int64, device=DEVICE)
        scores_mode = c["mode"] == "scores"
        for s in sets:
            x = s.step_inputs(rows, q_format)
            o = ({"scores": torch.empty(b, rows, n, dtype=torch.float32, device=DEVICE)}
                 if scores_mode else
                 {"topk": torch.empty(b, rows, k, dtype=torch.int32, device=DEVICE)})
            if spin_mode:
                x.update(positions=positions, request_ids=request_ids)
                o["sparsity"] = torch.empty(b, rows, dtype=torch.float32, device=DEVICE)
            inputs.append(x)
            outputs.append(o)
        # MTP: every step after the first commits the accepted drafts of the
        # step before (host bookkeeping; the device replays those rows at the
        # start of the step), with accepted_pattern(j); a captured step keeps
        # the counts it was captured with.
        pending = [False]

        def commit(j):
            if mtp and pending[0]:
                for rid, a in zip(ids, accepted_pattern(b, rows, j)):
                    state.commit(rid, a)

        def step(x, o, j):
            commit(j)
            program(x, state, request_ids=ids, outputs=o)
            pending[0] = spin_mode

        calls = [lambda x=x, o=o, j=j: step(x, o, j)
                 for j, (x, o) in enumerate(zip(inputs, outputs))]

        # Eager steps: the guard, and for SPIN the warm-up (it = 0) and the
        # steps that bring the state to it > 0.
        steps = args.steps if spin_mode else len(calls)
        for i in range(max(steps, 1)):
            calls[i % len(calls)]()
            if spin_mode and i == 0:
                torch.cuda.synchronize()
                r["warmup_sparsity"] = outputs[0]["sparsity"].mean().item()
        program.check()
        torch.cuda.synchronize()
        last = (max(steps, 1) - 1) % len(calls)

        def check(o, s, when=""):
            if scores_mode:
                return [p + when for p in scores_sanity(torch, o["scores"], s.rows[rows][2])]
            return [p + when for p in sanity(torch, o["topk"], s.rows[rows][2], n, k)]

        r["problems"] += check(outputs[last], sets[last])
        if scores_mode:
            r["scores_max_error"] = scores_error(torch, outputs[0]["scores"],
                                                 reference_scores(torch, sets[0], rows, q_format))
            bound = SCORES_MAX_ERROR_FP8Q if q_format == "fp8" else SCORES_MAX_ERROR
            if not r["scores_max_error"] <= bound:
                r["problems"].append(f"scores differ from the f32 reference by "
                                     f"{r['scores_max_error']:.2e} of the row's largest")
        if spin_mode:
            r["iteration_before_timing"] = state.iteration(ids[0])
            if r["iteration_before_timing"] < 1:
                r["problems"].append("state iteration did not advance")
        if ref_topk is not None and not spin_mode:
            r["recall_vs_torch"] = overlap(torch, outputs[0]["topk"], ref_topk)

        # CUDA graphs, one per input set, each replayed back to back (and,
        # for comparison, the graphs in turn); fall back to direct calls.
        # MTP: set j's graph commits with accepted_pattern(j).
        try:
            graphs = capture_graphs(torch, program, calls)
            replays = [g.replay for g in graphs]
            r["graph"] = True
        except Exception as e:  # noqa: BLE001
            if not self.check_alive(e):
                raise
            r["graph"] = False
            r["graph_error"] = str(e)[:300]
            graphs, replays = [], calls
        r.update(self.timer.each(replays))
        r["rotate_median_us"] = self.timer(Rotate(replays))["median_us"]
        if not args.no_call:
            # The direct calls in turn; an MTP commit (host bookkeeping)
            # before each, outside the timed window.
            turn = [0]

            def call_next():
                j = turn[0] % len(calls)
                turn[0] += 1
                program(inputs[j], state, request_ids=ids, outputs=outputs[j])
                pending[0] = spin_mode

            r["call_median_us"] = self.timer(
                call_next, prepare=lambda: commit(turn[0] % len(calls)))["median_us"]
        r["repeat_median_us"] = self.timer.each(replays)["median_us"]
        program.check()
        torch.cuda.synchronize()
        for s, o in zip(sets, outputs):
            r["problems"] += check(o, s, " (after timing)")
        r["problems"] = sorted(set(r["problems"]))
        if spin_mode:
            r["realized_sparsity"] = statistics.mean(o["sparsity"].mean().item()
                                                     for o in outputs)
            r["expected_sparsity"] = expected_sparsity(n, k, c["sparsity"])
            if not mtp and not abs(r["realized_sparsity"] - r["expected_sparsity"]) <= 0.01:
                r["problems"].append(f"realized sparsity {r['realized_sparsity']:.4f}, "
                                     f"expected {r['expected_sparsity']:.4f}")
            if mtp and not r["realized_sparsity"] <= r["expected_sparsity"] + 0.01:
                # SPIN_SPEC §4: the rows score the union of their selections.
                r["problems"].append(f"realized sparsity {r['realized_sparsity']:.4f} (union "
                                     f"of the rows), above one row's "
                                     f"{r['expected_sparsity']:.4f}")
            if r.get("warmup_sparsity") != 0.0:
                r["problems"].append(f"warm-up step sparsity {r.get('warmup_sparsity')}, "
                                     "expected 0 (dense)")
            r["iteration_after_timing"] = state.iteration(ids[0])
        if r["graph"] and not scores_mode:
            # Last: it moves the state on by up to DECODE_HEADROOM steps.
            cycle = None
            if mtp:
                # One graph of set 0 per accepted pattern, in turn; the rows
                # grow by each request's accepted + 1 before its replay.
                dcalls = [lambda j=j: step(inputs[0], outputs[0], j) for j in range(rows)]
                dgraphs = capture_graphs(torch, program, dcalls)
                cycle = [(g.replay, torch.tensor(accepted_pattern(b, rows, j), dtype=torch.int32,
                                                 device=DEVICE).add_(1).view(b, 1))
                         for j, g in enumerate(dgraphs)]
            d = self.decode_timing(graphs[0].replay, inputs[0]["lengths"],
                                   positions if spin_mode else None, cycle=cycle)
            r["decode_median_us"] = d["median_us"]
            r["decode_p20_us"], r["decode_p80_us"] = d["p20_us"], d["p80_us"]
            if mtp:
                r["decode_steps"] = d["reps"]
                r["decode_mean_growth"] = statistics.mean(
                    1 + a for j in range(rows) for a in accepted_pattern(b, rows, j))
            program.check()
            torch.cuda.synchronize()
            r["problems"] += check(outputs[0], sets[0], " (after decoding)")
            cycle = dgraphs = None
        # The graphs first: they hold the program's buffers.
        graphs = replays = calls = None
        program = state = None
        torch.cuda.synchronize()
        return r

    def decode_timing(self, replay, lengths, positions, cycle=None):
        """A decoding step's time: before every replay, outside the timed
        window, the rows grow by one slot and SPIN's positions move on by
        one, so that each SPIN step finds the block scores that the step
        before predicted for it (the state's prediction cache), as in
        serving. The rows start DECODE_HEADROOM slots below their length;
        lengths and positions are restored afterwards.

        `cycle` (MTP steps): [(replay, growth [B, 1] int32)], replayed in
        turn, each after its rows and positions grew by its growth (the
        accepted drafts of the step before + 1)."""
        saved_lengths = lengths.clone()
        saved_positions = None if positions is None else positions.clone()
        lengths.sub_(DECODE_HEADROOM)
        if positions is not None:
            positions.copy_(lengths - 1)
        max_calls = DECODE_HEADROOM
        if cycle is None:
            def advance():
                lengths.add_(1)
                if positions is not None:
                    positions.add_(1)
            fn = replay
        else:
            at = [0]
            most = max(int(g.max()) for _, g in cycle)
            max_calls = DECODE_HEADROOM // most

            def advance():
                grow = cycle[at[0] % len(cycle)][1]
                lengths.add_(grow)
                if positions is not None:
                    positions.add_(grow)

            def fn():
                cycle[at[0] % len(cycle)][0]()
                at[0] += 1

        try:
            return self.timer(fn, prepare=advance, max_calls=max_calls)
        finally:
            lengths.copy_(saved_lengths)
            if positions is not None:
                positions.copy_(saved_positions)

    def run(self, groups):
        torch, args = self.torch, self.args
        total = sum(len(cs) for _, cs in groups)
        done = 0
        self.log(f"device: {self.doc['machine']['gpu']}; {total} artifacts in {len(groups)} "
                 f"groups; budget {args.budget_s:.0f} s")
        self.doc["copy"] = copy_bandwidth(torch, self.timer)
        self.log(f"copy bandwidth: {self.doc['copy']['gbps']:.0f} GB/s (clone of "
                 f"{COPY_BYTES / 2**30:g} GiB, read + written, median "
                 f"{self.doc['copy']['median_us']:.0f} us)")
        if any(deepgemm_rows(fmt, cs) for (fmt, _, _), cs in groups):
            self.deepgemm = DeepGemm(torch, args)
            self.doc["deepgemm"] = self.deepgemm.info()
            self.log("DeepGEMM: " + (f"deep_gemm {self.deepgemm.version} from "
                                     f"{self.deepgemm.path}" if self.deepgemm.available
                                     else f"not measured ({self.deepgemm.reason})"))
        self.write()
        gen = torch.Generator(device=DEVICE)
        for (fmt, b, n), configs in groups:
            if self.dead:
                self.skipped += [c["name"] for c in configs]
                continue
            if self.elapsed() > args.budget_s:
                self.log(f"budget spent: skipping {fmt} B={b} N={n}")
                self.skipped += [c["name"] for c in configs]
                continue
            gen.manual_seed(args.seed * 1000003 + b * 7919 + n + (fmt == "fp8"))
            rows_list = sorted({c["rows"] for c in configs})
            try:
                sets = [InputSet(torch, fmt, b, n, rows_list, gen) for _ in range(args.sets)]
            except Exception as e:  # noqa: BLE001
                self.log(f"{fmt} B={b} N={n}: inputs failed: {e}")
                self.skipped += [c["name"] for c in configs]
                if not self.check_alive(e):
                    break
                continue
            key_mb = sum(s.keys.numel() * s.keys.element_size() for s in sets) / 1e6
            self.log(f"group {fmt} B={b} N={n}: {len(configs)} artifacts, keys of the "
                     f"{args.sets} sets {key_mb:.0f} MB")
            torch_rows = {}        # (rows, k) -> torch result
            scores_us = {}         # rows -> torch indexer-only µs
            refs = {}              # (rows, q format, k) -> reference top-K of set 0
            ref_scores = {}        # (rows, q format) -> reference scores of set 0
            for c in configs:
                if self.dead:
                    self.skipped.append(c["name"])
                    continue
                if self.elapsed() > args.budget_s:
                    self.log(f"budget spent: skipping {c['name']}")
                    self.skipped.append(c["name"])
                    continue
                rows, k, qf = c["rows"], c["k"], q_format_of(c)
                # A hung kernel ends the process (the JSON so far is written).
                faulthandler.dump_traceback_later(
                    max(30.0, min(args.config_timeout_s, args.budget_s + 60 - self.elapsed())),
                    exit=True)
                try:
                    if args.no_torch:
                        pass
                    elif c["mode"] == "scores":
                        if rows not in scores_us:
                            scores_us[rows] = self.run_torch_scores(sets, rows)
                    elif (rows, k) not in torch_rows:
                        t = self.run_torch(sets, fmt, b, n, rows, k, scores_us.get(rows))
                        scores_us[rows] = t["scores_us"]
                        torch_rows[(rows, k)] = t
                        self.results.append(t)
                        self.log(f"  {t['name']}: {t['median_us']:.1f} us "
                                 f"(indexer only {t['scores_us']:.1f} us)")
                    if c["mode"] == "dense" and not args.no_recall and (rows, qf, k) not in refs:
                        if (rows, qf) not in ref_scores:
                            ref_scores[(rows, qf)] = reference_scores(torch, sets[0], rows, qf)
                        refs[(rows, qf, k)] = torch.topk(ref_scores[(rows, qf)], k,
                                                         dim=-1).indices
                    r = self.run_ours(c, sets, refs.get((rows, qf, k)))
                except Exception as e:  # noqa: BLE001
                    faulthandler.cancel_dump_traceback_later()
                    r = {key: c[key] for key in ("name", "format", "batch", "slots", "k",
                                                 "rows", "mode", "sparsity")}
                    r["q_format"] = qf
                    r["error"] = f"{type(e).__name__}: {e}"
                    self.results.append(r)
                    self.log(f"  {c['name']}: ERROR {r['error'][:300]}")
                    self.check_alive(e)
                    self.write()
                    continue
                faulthandler.cancel_dump_traceback_later()
                # Against torch's indexer alone for the scoring alone, else
                # against its indexer + torch.topk (bf16 queries, also for
                # our fp8-query steps: torch has no fp8 einsum).
                if not args.no_torch:
                    r["torch_us"] = (scores_us[rows] if c["mode"] == "scores"
                                     else torch_rows[(rows, k)]["median_us"])
                    r["speedup_vs_torch"] = r["torch_us"] / r["median_us"]
                if c["mode"] == "spin":
                    d = next((x for x in self.results if x["mode"] == "dense"
                              and x.get("median_us") and x["format"] == fmt
                              and x["batch"] == b and x["slots"] == n and x["k"] == k
                              and x["rows"] == rows and q_format_of(x) == qf), None)
                    if d:
                        r["dense_us"] = d["median_us"]
                        r["speedup_vs_dense"] = d["median_us"] / r["median_us"]
                        if d.get("decode_median_us") and r.get("decode_median_us"):
                            r["decode_speedup_vs_dense"] = (d["decode_median_us"]
                                                            / r["decode_median_us"])
                self.derive(r)
                self.results.append(r)
                done += 1
                extra = ""
                if c["mode"] == "spin":
                    extra = (f", realized {r['realized_sparsity']:.3f}"
                             + (f", {r['speedup_vs_dense']:.2f}x dense"
                                if r.get("speedup_vs_dense") else "")
                             + (f", decoding {r['decode_speedup_vs_dense']:.2f}x dense"
                                if r.get("decode_speedup_vs_dense") else ""))
                elif r.get("recall_vs_torch") is not None:
                    extra = f", recall {r['recall_vs_torch']:.4f}"
                elif r.get("scores_max_error") is not None:
                    extra = f", error {r['scores_max_error']:.1e}"
                self.log(f"  [{done}/{total}] {c['name']}: {r['median_us']:.1f} us "
                         f"(repeat {r['repeat_median_us']:.1f}, "
                         f"rotating {r['rotate_median_us']:.1f}"
                         + (f", decoding {r['decode_median_us']:.1f}"
                            if "decode_median_us" in r else "")
                         + (f", call {r['call_median_us']:.1f}" if "call_median_us" in r else "")
                         + f"), {r['fraction_of_copy']:.2f} of copy"
                         + (f", {r['speedup_vs_torch']:.1f}x torch" if "speedup_vs_torch" in r
                            else "") + extra
                         + (" | " + "; ".join(r["problems"]) if r["problems"] else ""))
                self.write()
            # DeepGEMM last in the group: a fault of its kernels cannot cost
            # our measurements of the group.
            if self.deepgemm is not None and not self.dead:
                for rows in deepgemm_rows(fmt, configs):
                    if self.elapsed() > args.budget_s:
                        self.log(f"budget spent: skipping DeepGEMM at {fmt} B={b} N={n} R={rows}")
                        self.skipped.append(deepgemm_name(b, n, rows))
                        continue
                    self.run_deepgemm(sets, b, n, rows, ref_scores)
                    if self.dead:
                        break
            del sets, refs, ref_scores, torch_rows
            gc.collect()
            torch.cuda.empty_cache()
        self.write()
        self.write_markdown()

    def run_deepgemm(self, sets, b, n, rows, ref_scores):
        """DeepGEMM's logits at (B, N, R) on the group's inputs (fp8 queries),
        recorded as a "deepgemm" result; when deep_gemm is not importable,
        a result that says "not measured" and why. Never raises."""
        torch, args, dg = self.torch, self.args, self.deepgemm
        calls = deepgemm_calls(rows)
        r = dict(name=deepgemm_name(b, n, rows), format="fp8", q_format="fp8", batch=b,
                 slots=n, k=0, rows=rows, mode="deepgemm", sparsity=0.0, calls=len(calls),
                 next_n=[hi - lo for lo, hi in calls], problems=[])
        if not dg.available:
            r["not_measured"] = dg.reason
            self.results.append(r)
            self.write()
            return
        faulthandler.dump_traceback_later(max(args.config_timeout_s, 300.0), exit=True)
        try:
            fns = [dg.step(s, rows) for s in sets]
            t0 = time.time()
            logits = fns[0]()
            torch.cuda.synchronize()
            r["first_call_s"] = time.time() - t0   # JIT-compiles a kernel it has not built
            if (rows, "fp8") not in ref_scores:
                ref_scores[(rows, "fp8")] = reference_scores(torch, sets[0], rows, "fp8")
            got = torch.cat([x.reshape(b, -1, n) for x in logits], dim=1)
            r["scores_max_error"] = scores_error(torch, got, ref_scores[(rows, "fp8")])
            if not r["scores_max_error"] <= DEEPGEMM_MAX_ERROR:
                r["problems"].append(f"logits differ from the f32 reference by "
                                     f"{r['scores_max_error']:.2e} of the row's largest")
            got = logits = None
            r.update(self.timer.each(fns))
            r["rotate_median_us"] = self.timer(Rotate(fns))["median_us"]
            try:
                graphs = capture(torch, fns)
                r["graph_median_us"] = self.timer.each([g.replay for g in graphs])["median_us"]
                graphs = None
            except Exception as e:  # noqa: BLE001
                if not self.check_alive(e):
                    raise
                r["graph_error"] = str(e)[:300]
            r["best_us"] = min(x for x in (r["median_us"], r.get("graph_median_us")) if x)
            if not args.no_torch:
                r["topk_median_us"] = self.timer.each(
                    [lambda fn=fn: [torch.topk(x.reshape(b, -1, n), 2048, dim=-1) for x in fn()]
                     for fn in fns])["median_us"]
            self.derive(r)
            self.log(f"  {r['name']}: {r['median_us']:.1f} us eager"
                     + (f", {r['graph_median_us']:.1f} us graphs" if "graph_median_us" in r
                        else "") + f" ({len(calls)} call{'s' if len(calls) > 1 else ''}), "
                     f"{r['fraction_of_copy']:.2f} of copy, error {r['scores_max_error']:.1e}, "
                     f"first call {r['first_call_s']:.1f} s"
                     + (" | " + "; ".join(r["problems"]) if r["problems"] else ""))
        except Exception as e:  # noqa: BLE001
            r["error"] = f"{type(e).__name__}: {str(e)[:500]}"
            self.log(f"  {r['name']}: ERROR {r['error'][:300]}")
            self.check_alive(e)
        finally:
            faulthandler.cancel_dump_traceback_later()
        self.results.append(r)
        self.write()


def main(argv=None):
    args = parse_args(argv)
    index = load_index(args.artifacts)
    groups = plan(index, args.only, args.set)
    if not groups:
        die(f"no configuration matches --only={args.only!r} --set={args.set}")
    if args.list:
        print_plan(groups, args)
        return 0
    torch, spin = require_gpu(args)
    torch.cuda.init()
    bench = Bench(torch, spin, args, index)
    try:
        bench.run(groups)
    finally:
        bench.write()
    print()
    print(render.compact_table(bench.doc))
    print()
    print("minimums (issue 5):")
    for req, conf, value, ok in render.minimums(bench.doc):
        print(f"  {'  -' if ok is None else ('yes' if ok else ' NO')}  {req:32} {conf:24} "
              f"{value or 'not measured'}" + ("  (stricter, not the minimum)"
                                              if render.stricter(req) else ""))
    mtp = render.mtp_minimums(bench.doc)
    if any(ok is not None for *_, ok in mtp):
        print("\nminimums (issue 26: MTP rows and fp8 queries):")
        for req, conf, value, ok in mtp:
            print(f"  {'  -' if ok is None else ('yes' if ok else ' NO')}  {req:44} {conf:28} "
                  f"{value or 'not measured'}")
    errors = [r["name"] for r in bench.results if r.get("error") or r.get("problems")]
    print(f"\n{len(bench.results)} results ({len(errors)} with errors or problems), "
          f"{len(bench.skipped)} skipped, {bench.elapsed():.0f} s; copy "
          f"{bench.doc['copy']['gbps']:.0f} GB/s; wrote {bench.json_path} and {bench.md_path}")
    if bench.dead:
        print(f"ABORTED: {bench.dead}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
