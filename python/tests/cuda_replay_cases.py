"""The trace and configurations of spin-replay's GPU test, shared by the
test (python/tests/test_replay.py, on the GPU machine) and the cache
prebuild (python/tests/prebuild_cuda_cache.py, on the build machine), which
also stores the CPU replay's report for the GPU test to compare with."""

import json
import os

# GPU-compilable: bf16 keys, H a multiple of 8, one row. Requests join and
# leave, so several batch sizes run; 0.05 random exploration.
TRACE = dict(layers=2, steps=14, batch=3, context=320, heads=8, head_dim=32, topk=16,
             page_size=16, key_format="bf16", shifts=(7,), seed=11,
             joins=((5, 1),), leaves=((9, 2),))
SPARSITIES = (0.3, 0.5)
EXPLORE = (0.0, 0.05)
SEED = 3


def make_trace(traces, directory):
    return traces.generate(directory, **TRACE)


def run_configs(replay):
    return replay.configs(list(SPARSITIES), explores=list(EXPLORE))


def cpu_report_path(cache_dir):
    return os.path.join(cache_dir, "replay-cpu-report.json")


def write_cpu_report(replay, trace_dir, cache_dir):
    report = replay.replay(trace_dir, run_configs(replay), seed=SEED, diagnostics=False)
    with open(cpu_report_path(cache_dir), "w") as f:
        json.dump(replay._json_clean(report), f)
    return report
