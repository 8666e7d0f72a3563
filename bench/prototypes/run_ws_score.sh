#!/usr/bin/env bash
#===- bench/prototypes/run_ws_score.sh - the scoring probe on the GPU ----===#
#
# On the GPU machine: builds ws_score.cu with nvcc and runs it at the
# shapes of issue 26's minimums (fp8 keys and queries, H = 64, Dh = 128),
# each with several tiles per CTA: the copy engine's tensor copies with four
# multiplying warpgroups (R <= 2) or two, then cp.async copies with two.
# Prints one line per run (median us, GB/s of key bytes, the sampled error
# against the host reference); exit 1 if a run's scores mismatch. Compare with bench_gpu.py's "scoring alone" rows
# (docs/benchmarks-mtp.md) from a run on the same machine.
#
#===----------------------------------------------------------------------===#
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
OUT_BIN="${OUT_BIN:-/tmp/ws_score}"
nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -o "$OUT_BIN" ws_score.cu
status=0
while read -r COPY MATH B N R TILES; do
  # shellcheck disable=SC2086
  WS_COPY=$COPY WS_MATH_WG=$MATH "$OUT_BIN" "$B" "$N" "$R" 50 $TILES || status=1
done <<'RUNS'
tma 4 16 262144 1 64 256 512
tma 4 16 262144 2 64 256 512
tma 2 16 262144 4 64 256 512
tma 4 96 131072 1 64 128 256
tma 4 96 131072 2 64 128 256
tma 2 96 131072 4 64 128 256
tma 4 12 131072 1 32 64 128
tma 4 12 131072 2 32 64 128
tma 2 12 131072 4 32 64 128
tma 2 16 262144 1 256 512
tma 2 16 262144 2 256 512
cp.async 2 16 262144 1 256 512
cp.async 2 16 262144 2 256 512
cp.async 2 16 262144 4 256 512
RUNS
exit $status
