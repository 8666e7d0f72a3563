#!/usr/bin/env bash
#===- bench/run_gpu_sanitizers.sh - gpu_check under compute-sanitizer -----===#
#
# On the GPU machine, after bench/run_gpu_check.sh has built the runtime
# (build-gpu/) or with BUILD=1 to build it here:
#
#   bench/run_gpu_sanitizers.sh [gpu_check.py options, e.g. --only spin-fp8]
#
# runs bench/gpu_check.py over gpu-artifacts/ (every configuration unless
# --only), the runtime's CUDA tests (python/tests/test_cuda.py) and the
# device-batch tests (python/tests/test_device_batches_cuda.py,
# test_ops_cuda.py and test_serving_loop_cuda.py, the serving loop shortened to
# $SERVING_STEPS graph replays per configuration, default 60, with the
# programs of cuda-cache/) and the other GPU tests of the Python package
# (python/tests/test_indexer_cuda.py, test_replay_cuda.py,
# test_paged_state_cuda.py and test_fused_pages_cuda.py, also with
# cuda-cache/) under each compute-sanitizer tool in $TOOLS
# (default: memcheck racecheck synccheck initcheck), each gpu_check run
# with a fresh seed, and prints per tool the errors compute-sanitizer
# reported, the check's result and the time. $RUNS picks the runs (default:
# gpu_check test_cuda device_batches indexer). API errors are not reported: the runtime's own tests provoke some on
# purpose (bad launches, a stub driver) and check that they come back as a
# Status.
#
# Exit status: 0 only if every run passed with 0 errors.
# Environment: PYTHON (default python3), BUILD_DIR (default build-gpu),
# ARTIFACTS (default gpu-artifacts), INDEXER_CACHE (default cuda-cache),
# TOOLS, RUNS, SERVING_STEPS, OUT_DIR (logs; default sanitizer-logs),
# BUILD (1: build the runtime first), FAULT_TIMEOUT (seconds a test of
# test_cuda.py may take before its threads' stacks are printed; default 60),
# RUN_TIMEOUT (seconds one run may take
# before it is stopped and counted as failed; default: no limit).
#
#===----------------------------------------------------------------------===#
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PYTHON="${PYTHON:-python3}"
export BUILD_DIR="${BUILD_DIR:-$ROOT/build-gpu}"
ARTIFACTS="${ARTIFACTS:-$ROOT/gpu-artifacts}"
TOOLS="${TOOLS:-memcheck racecheck synccheck initcheck}"
RUNS="${RUNS:-gpu_check test_cuda device_batches indexer}"
INDEXER_CACHE="${INDEXER_CACHE:-$ROOT/cuda-cache}"
OUT_DIR="${OUT_DIR:-$ROOT/sanitizer-logs}"
SANITIZER="${SANITIZER:-compute-sanitizer}"

command -v "$SANITIZER" >/dev/null || {
  echo "error: $SANITIZER not found (it ships with the CUDA toolkit)" >&2
  exit 2
}
if [ "${BUILD:-0}" = 1 ]; then
  PYTHON="$PYTHON" "$ROOT/scripts/gpu-runtime-build" build || exit 1
fi
[ -d "$BUILD_DIR/python/spin" ] || {
  echo "error: $BUILD_DIR/python/spin is missing: run bench/run_gpu_check.sh" \
       "or BUILD=1 $0" >&2
  exit 2
}
export PYTHONPATH="$BUILD_DIR/python${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
mkdir -p "$OUT_DIR"

# The errors one compute-sanitizer log reports (the sum of its summary
# lines, one per process: "ERROR SUMMARY: N errors", racecheck's "RACECHECK
# SUMMARY: N hazards displayed", warnings included), or "?" when it printed
# none.
errors_of() {
  awk '/(ERROR|RACECHECK) SUMMARY: [0-9]+ (error|hazard)/ {n += $4; seen = 1}
       END {if (seen) print n; else print "?"}' "$1"
}

status=0
summary=()
for tool in $TOOLS; do
  for run in $RUNS; do
    log="$OUT_DIR/$tool-$run.log"
    seed=$(( (RANDOM << 15) | RANDOM ))
    start=$(date +%s)
    if [ "$run" = gpu_check ]; then
      cmd=("$PYTHON" "$ROOT/bench/gpu_check.py" "$ARTIFACTS" --seed "$seed" "$@")
    elif [ "$run" = device_batches ]; then
      # The spinning-kernel check of the serving loop is off: the
      # sanitizer slows the host more than the 20 ms it allows.
      cmd=(env SPIN_BUILD_DIR="$BUILD_DIR" SPIN_CACHE_DIR="$INDEXER_CACHE"
           SPIN_SERVING_STEPS="${SERVING_STEPS:-60}" SPIN_SERVING_ARGS="--sleep-every 0"
           "$PYTHON" -m pytest -q -p no:cacheprovider -m cuda
           "$ROOT/python/tests/test_device_batches_cuda.py"
           "$ROOT/python/tests/test_serving_loop_cuda.py"
           "$ROOT/python/tests/test_ops_cuda.py")
    elif [ "$run" = indexer ]; then
      cmd=(env SPIN_BUILD_DIR="$BUILD_DIR" SPIN_CACHE_DIR="$INDEXER_CACHE"
           "$PYTHON" -m pytest -q -p no:cacheprovider -rs
           "$ROOT/python/tests/test_indexer_cuda.py"
           "$ROOT/python/tests/test_replay_cuda.py"
           "$ROOT/python/tests/test_paged_state_cuda.py"
           "$ROOT/python/tests/test_fused_pages_cuda.py")
    elif [ "$run" = test_cuda ]; then
      # A test that makes no progress for $FAULT_TIMEOUT s (default 60)
      # prints every thread's Python stack into the log.
      cmd=(env SPIN_BUILD_DIR="$BUILD_DIR" "$PYTHON" -m pytest -q -p no:cacheprovider
           -o faulthandler_timeout="${FAULT_TIMEOUT:-60}"
           "$ROOT/python/tests/test_cuda.py")
    else
      echo "error: unknown run '$run' in RUNS (gpu_check test_cuda device_batches indexer)" >&2
      exit 2
    fi
    limit=()
    [ -n "${RUN_TIMEOUT:-}" ] && limit=(timeout "$RUN_TIMEOUT")
    "${limit[@]}" "$SANITIZER" --tool "$tool" --target-processes all --report-api-errors no \
      --print-limit 50 "${cmd[@]}" > "$log" 2>&1
    rc=$?
    errors=$(errors_of "$log")
    seconds=$(( $(date +%s) - start ))
    line="$tool $run: exit $rc, $errors errors, ${seconds} s"
    [ "$run" = gpu_check ] && line="$line, seed $seed: $(grep '^summary:' "$log" | tail -1)"
    summary+=("$line")
    echo "$line"
    { [ "$rc" -eq 0 ] && [ "$errors" = 0 ]; } || status=1
  done
done

printf '\n== compute-sanitizer summary (logs in %s)\n' "$OUT_DIR"
printf '%s\n' "${summary[@]}"
exit $status
