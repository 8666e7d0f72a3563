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
# bench-results.json, bench-results.md, bench.log and nvidia-smi.txt to $OUT
# (default: bench-out/). The whole run is kept under BENCH_TOTAL_S seconds
# (default 480): what the build leaves is bench_gpu.py's budget, after which
# it starts no new configuration. Render the results here afterwards with
# bench/render_benchmarks.py.
#
# Environment: OUT, PYTHON (default python3), BENCH_TOTAL_S, BUILD_DIR
# (default build-gpu).
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

if ! ls "$BUILD_DIR"/python/spin/_spin*.so >/dev/null 2>&1; then
  echo "== building the runtime: scripts/gpu-runtime-build (log: $OUT/build.log)"
  if ! BUILD_DIR="$BUILD_DIR" PYTHON="$PYTHON" scripts/gpu-runtime-build >"$OUT/build.log" 2>&1; then
    tail -n 60 "$OUT/build.log"
    echo "error: the runtime build failed (full log: $OUT/build.log)" >&2
    exit 1
  fi
  echo "   built in $((SECONDS - START)) s"
fi

nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1 || true
# What is left of the total, less a margin for the configuration running
# when the budget ends and the final writes.
BUDGET=$((TOTAL_S - (SECONDS - START) - 30))
if [ "$BUDGET" -lt 60 ]; then BUDGET=60; fi
echo "== bench/bench_gpu.py (budget $BUDGET s)"

export SPIN_BENCH_COMMAND="bash bench/run_bench.sh${*:+ $*}"
set +e
PYTHONUNBUFFERED=1 PYTHONPATH="$BUILD_DIR/python${PYTHONPATH:+:$PYTHONPATH}" \
  "$PYTHON" bench/bench_gpu.py --artifacts bench-artifacts --out "$OUT" \
  --budget-s "$BUDGET" "$@" 2>&1 | tee "$OUT/bench.log"
status=${PIPESTATUS[0]}
set -e
echo "== done in $((SECONDS - START)) s (exit $status); results in $OUT"
exit "$status"
