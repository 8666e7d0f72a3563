#!/bin/bash
# scratch device script (untracked)
(BUILD_DIR=$PWD/build-gpu scripts/gpu-runtime-build build > $OUT/rtbuild.log 2>&1) || { echo RTBUILD FAIL; tail -20 $OUT/rtbuild.log; exit 1; }
export PYTHONPATH=$PWD/build-gpu/python
if [ "${CHECK:-1}" = 1 ]; then
  timeout 260 bash bench/run_gpu_check.sh > $OUT/gpu_check_run.log 2>&1; echo "gpu_check rc=$?"
  grep -E "summary|FAIL|passed|failed|problems|error" $OUT/gpu_check_run.log | head -40
fi
for c in ${CONFIGS:-}; do
  echo "== $c"
  timeout 120 python3 bench/compare_gpu.py --config $c --rounds ${ROUNDS:-3} exp-artifacts/head-$c exp-artifacts/grp-$c 2>&1 | tail -12
done
if [ -n "${PROFILE:-}" ]; then for v in head grp; do python3 bench/profile_gpu.py exp-artifacts/$v-$PROFILE $PROFILE 2>&1 | grep "spin_\|graph"; done; fi
