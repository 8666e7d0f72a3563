"""The trace and configurations of spin-replay's GPU test, shared by the
test (python/tests/test_replay.py, on the GPU machine) and the cache
prebuild (python/tests/prebuild_cuda_cache.py, on the build machine), which
also stores the CPU replay's report for the GPU test to compare with."""

import json
import os

# GPU-compilable: bf16 keys, H a multiple of 8. Requests join and leave, so
# several batch sizes run; 0.05 random exploration. "decode": one row per
# step; "mtp": three rows (two draft tokens) with the trace's acceptance
# counts committed after every step, union and row-0 masks.
TRACE = dict(layers=2, steps=14, batch=3, context=320, heads=8, head_dim=32, topk=16,
             page_size=16, key_format="bf16", shifts=(7,), seed=11,
             joins=((5, 1),), leaves=((9, 2),))
CASES = {
    "decode": dict(trace=TRACE, configs=dict(sparsities=[0.3, 0.5], explores=[0.0, 0.05])),
    "mtp": dict(trace=dict(TRACE, rows=3, seed=12),
                configs=dict(sparsities=[0.5], explores=[0.05],
                             mtp_masks=["union", "row0"], rows=3)),
}
SEED = 3


def make_trace(traces, directory, case="decode"):
    return traces.generate(directory, **CASES[case]["trace"])


def run_configs(replay, case="decode"):
    kw = dict(CASES[case]["configs"])
    return replay.configs(kw.pop("sparsities"), **kw)


def cpu_report_path(cache_dir, case="decode"):
    suffix = "" if case == "decode" else "-" + case
    return os.path.join(cache_dir, f"replay-cpu-report{suffix}.json")


def write_cpu_report(replay, trace_dir, cache_dir, case="decode"):
    report = replay.replay(trace_dir, run_configs(replay, case), seed=SEED,
                           diagnostics=False)
    with open(cpu_report_path(cache_dir, case), "w") as f:
        json.dump(replay._json_clean(report), f)
    return report
