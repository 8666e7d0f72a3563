#!/usr/bin/env bash
set -u
timeout 300 bash bench/run_gpu_check.sh > $OUT/gpu_check_run.log 2>&1
echo "gpu_check rc=$?"
grep -E "passed|failed|FAIL|error" $OUT/gpu_check_run.log | tail -12
export PYTHONPATH=$PWD/build-gpu/python
N="fp8-b16-n128k-k512-r1-dense fp8-b16-n128k-k512-r1-spin0.5"
for v in old nreg64 keep keepnreg64; do echo "== $v"; timeout 60 python3 bench/profile_gpu.py exp-artifacts/$v $N 2>&1 | grep -v -i warn | grep "spin_\|graph"; done
