#!/usr/bin/env bash
#===- bench/run_bench.sh - the benchmark: one command on the GPU machine ---===#
#
# Usage, from the repository root of a tree that carries bench-artifacts/
# (written by bench/bench_artifacts.py on the build machine):
#
#   bash bench/run_bench.sh [extra bench/bench_gpu.py arguments]
#
# Builds the MLIR-free runtime and its Python module with
# scripts/gpu-runtime-build if build-gpu/ has none (log: $OUT/build.log),
# then runs bench/bench_gpu.py over bench-artifacts/ and writes
# bench-results.json, bench-results.md, bench.log, nvidia-smi.txt and smi.csv
# (clock, power and temperature readings during the run) to $OUT
# (default: bench-out/). The whole run is kept under BENCH_TOTAL_S seconds
# (default 480): what the build leaves is bench_gpu.py's budget, after which
# it starts no new configuration. Render the results here afterwards with
# bench/render_benchmarks.py.
#
# DeepGEMM, side by side (issue 26): where a DeepGEMM source tree is carried
# (DEEPGEMM_DIR, default third_party/DeepGEMM, git-ignored), it is built by
# bench/build_deepgemm.sh in the background while the runtime builds (log:
# $OUT/deepgemm-build.log) and bench_gpu.py gets --deepgemm DIR; a failed
# build only leaves DeepGEMM "not measured". DEEPGEMM_DIR=none skips it.
#
#   bash bench/run_bench.sh --set mtp     issue 26's set (bench-artifacts/
#                                         from bench_artifacts.py --set mtp)
#
# Environment: OUT, PYTHON (default python3), BENCH_TOTAL_S, BUILD_DIR
# (default build-gpu), DEEPGEMM_DIR.
#
#===----------------------------------------------------------------------===#
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
START=$SECONDS
OUT="${OUT:-$ROOT/bench-out}"
PYTHON="${PYTHON:-python3}"
TOTAL_S="${BENCH_TOTAL_S:-480}"
BUILD_DIR="${BUILD_DIR:-$ROOT/build-gpu}"
mkdir -p "$OUT"

if [ ! -f bench-artifacts/index.json ]; then
  echo "error: bench-artifacts/index.json is missing: run bench/bench_artifacts.py on the" \
       "build machine and carry bench-artifacts/" >&2
  exit 2
fi

DEEPGEMM_DIR="${DEEPGEMM_DIR:-$ROOT/third_party/DeepGEMM}"
DG_ARGS=()
DG_PID=""
if [ "$DEEPGEMM_DIR" != none ] && [ -d "$DEEPGEMM_DIR" ]; then
  echo "== DeepGEMM: bash bench/build_deepgemm.sh $DEEPGEMM_DIR in the background" \
       "(log: $OUT/deepgemm-build.log)"
  PYTHON="$PYTHON" bash bench/build_deepgemm.sh "$DEEPGEMM_DIR" \
    >"$OUT/deepgemm-build.log" 2>&1 &
  DG_PID=$!
  # Not left running if the runtime build fails.
  trap 'if [ -n "$DG_PID" ]; then kill "$DG_PID" 2>/dev/null || true; fi' EXIT
else
  echo "== DeepGEMM: no tree at $DEEPGEMM_DIR: not measured"
  DG_ARGS=(--no-deepgemm)
fi

if ! ls "$BUILD_DIR"/python/spin/_spin*.so >/dev/null 2>&1; then
  echo "== building the runtime: scripts/gpu-runtime-build (log: $OUT/build.log)"
  if ! BUILD_DIR="$BUILD_DIR" PYTHON="$PYTHON" scripts/gpu-runtime-build >"$OUT/build.log" 2>&1; then
    tail -n 60 "$OUT/build.log"
    echo "error: the runtime build failed (full log: $OUT/build.log)" >&2
    exit 1
  fi
  echo "   built in $((SECONDS - START)) s"
fi

if [ -n "$DG_PID" ]; then
  if wait "$DG_PID"; then
    echo "   DeepGEMM built ($((SECONDS - START)) s so far)"
    DG_ARGS=(--deepgemm "$DEEPGEMM_DIR")
  else
    tail -n 30 "$OUT/deepgemm-build.log"
    echo "   DeepGEMM's build failed (log: $OUT/deepgemm-build.log): not measured"
    DG_ARGS=(--no-deepgemm)
  fi
  DG_PID=""
fi

nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1 || true
# What is left of the total, less a margin for the configuration running
# when the budget ends and the final writes.
BUDGET=$((TOTAL_S - (SECONDS - START) - 30))
if [ "$BUDGET" -lt 60 ]; then BUDGET=60; fi
echo "== bench/bench_gpu.py (budget $BUDGET s)"

# The board's clock, power and temperature every 250 ms while the benchmark
# runs: at R >= 2 the kernels reach the 700 W limit, and a kernel timed there
# runs at the clock that the work before it left.
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu \
  --format=csv,noheader -lms 250 >"$OUT/smi.csv" 2>/dev/null &
SMI_PID=$!
trap 'kill "$SMI_PID" 2>/dev/null || true' EXIT

export SPIN_BENCH_COMMAND="bash bench/run_bench.sh${*:+ $*}"
set +e
PYTHONUNBUFFERED=1 PYTHONPATH="$BUILD_DIR/python${PYTHONPATH:+:$PYTHONPATH}" \
  "$PYTHON" bench/bench_gpu.py --artifacts bench-artifacts --out "$OUT" \
  --budget-s "$BUDGET" "${DG_ARGS[@]}" "$@" 2>&1 | tee "$OUT/bench.log"
status=${PIPESTATUS[0]}
set -e
echo "== done in $((SECONDS - START)) s (exit $status); results in $OUT"
exit "$status"
